//! When a schedule fires (see the [module docs](super)): the due decision for one schedule at a
//! given time, Pure.

use super::cron::Cron;
use crate::campaign::request::RetryPolicy;
use crate::regression::detect::DetectConfig;
use crate::store::ScheduleRow;

/// Knobs of the daemon.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DaemonConfig {
    /// Run a slot missed while the coordinator was down, once, at start.
    pub catch_up: bool,
    /// How late a slot may be noticed and still count as on time, seconds.
    pub grace_s: f64,
    /// A running campaign with no heartbeat for this long is an orphan.
    pub stale_after_s: f64,
    /// Unfinished campaigns older than this are not resumed automatically.
    pub resume_max_age_s: f64,
    pub detect: DetectConfig,
    pub retry: RetryPolicy,
    pub max_attempts: u32,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            catch_up: true,
            grace_s: 120.0,
            stale_after_s: 60.0,
            resume_max_age_s: 7.0 * 86_400.0,
            detect: DetectConfig::default(),
            retry: RetryPolicy::default(),
            max_attempts: 3,
        }
    }
}

/// What to do with a schedule now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Due {
    Nothing,
    /// Run the campaign of this slot.
    Fire(f64),
    /// Mark this slot handled without running it.
    Pass(f64),
}

/// The decision for one schedule at `now` (see the module docs).
pub fn due(row: &ScheduleRow, cron: &Cron, now: f64, cfg: &DaemonConfig) -> Due {
    let Some(slot) = cron.latest_at_or_before(now.floor() as i64) else {
        return Due::Nothing;
    };
    let slot = slot as f64;
    if row.last_slot.is_some_and(|last| slot <= last) {
        return Due::Nothing;
    }
    if now - slot <= cfg.grace_s || (cfg.catch_up && row.catch_up) {
        Due::Fire(slot)
    } else {
        Due::Pass(slot)
    }
}

/// The next slot of `row` strictly after `now` (unix seconds), if its cron has one.
pub fn next_slot(row: &ScheduleRow, now: f64) -> Option<i64> {
    row.cron
        .parse::<Cron>()
        .ok()
        .and_then(|c| c.next_after(now.floor() as i64))
}

#[cfg(test)]
mod tests;
