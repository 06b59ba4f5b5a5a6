//! Whether a dial-in agent is attached, and to which serve, as the database says: read by the
//! campaign executor (which jobs this process may claim), by the dial-in link (describing an agent
//! another serve holds), by the hand-off and by the pages and commands that show an agent's state.
//! It sits below both the campaign and the fleet modules, so neither imports the other for it.
//!
//! A dial-in agent counts as attached when its row says so and the serve refreshed `last_seen`
//! within [`ATTACHED_FRESH_S`] (a serve that died leaves a stale row).

use super::SEEN_EVERY;
use crate::campaign::owner::owner_is_dead;
use crate::store::{AgentKind, AgentRow};

/// How recent a dial-in agent's `last_seen` must be for it to count as attached.
pub const ATTACHED_FRESH_S: f64 = 3.0 * SEEN_EVERY.as_secs() as f64;

/// Whether `a` is a dial-in agent attached to a live serve now.
pub fn attached(a: &AgentRow, now: f64) -> bool {
    a.kind == AgentKind::DialIn
        && a.connected_since.is_some()
        && a.last_seen.is_some_and(|t| now - t <= ATTACHED_FRESH_S)
}

/// The serve (`pid@host`) holding dial-in agent `a`'s stream now, if one does and says so.
pub fn holder(a: &AgentRow, now: f64) -> Option<&str> {
    if attached(a, now) {
        a.attached_to.as_deref()
    } else {
        None
    }
}

/// Whether `a` is a dial-in agent whose stream another serve than `me` holds now (a live one, as
/// far as this host can tell): only that serve can run its jobs.
pub fn held_elsewhere(a: &AgentRow, me: &str, now: f64) -> bool {
    holder(a, now).is_some_and(|h| h != me && !owner_is_dead(h))
}

/// Whether `a`'s row says another serve than `me`, alive as far as this host can tell, holds its
/// stream, however old its `last_seen` (after an outage of the database nobody could refresh it).
pub fn named_elsewhere(a: &AgentRow, me: &str) -> bool {
    a.kind == AgentKind::DialIn
        && a.connected_since.is_some()
        && a.attached_to
            .as_deref()
            .is_some_and(|h| h != me && !owner_is_dead(h))
}
