//! When a schedule fires (see the [module docs](super)): the due decision for one schedule at a
//! given time, and time as the daemon prints it. Pure, apart from [`now`].

use super::cron::{Cron, civil_from_days};
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

/// The UTC date and time of day of unix seconds: (year, month, day, hour, minute, second).
fn utc_parts(t: f64) -> (i64, u32, u32, i64, i64, i64) {
    let secs = t.floor() as i64;
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    (y, m, d, rem / 3600, (rem % 3600) / 60, rem % 60)
}

/// `YYYY-MM-DD HH:MM UTC` of unix seconds.
pub fn fmt_time(t: f64) -> String {
    let (y, m, d, h, mi, _) = utc_parts(t);
    format!("{y:04}-{m:02}-{d:02} {h:02}:{mi:02} UTC")
}

/// `YYYY-MM-DDTHH:MM:SSZ` of unix seconds (log lines).
pub fn fmt_timestamp(t: f64) -> String {
    let (y, m, d, h, mi, sec) = utc_parts(t);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{sec:02}Z")
}

/// Wall clock, unix seconds (the store's clock).
pub fn now() -> f64 {
    crate::store::system_now()
}

#[cfg(test)]
mod tests;
