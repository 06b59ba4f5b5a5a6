//! Regression checks and alerts: the store side of the regression checks (`regression/check.rs`).
//!
//! A series is (device row, spec key, segment). Its baseline for a result is the last ok results
//! before it in the series that are not confirmation reruns and not older than the series' last
//! alert (after a confirmed change the new level is the baseline, so one step alerts once).
//!
//! # Layout
//!
//! `series` is what a check reads of a series (candidates, baselines, segments, confirmation
//! reruns); `verdicts` stores and lists the verdicts and queues confirmations; `alerts` holds the
//! alerts a confirmed change leaves.

mod alerts;
mod series;
mod verdicts;

pub use self::alerts::{AlertFilter, AlertRow, NewAlert};
pub use self::series::CheckCandidate;
pub use self::verdicts::{CheckRow, PendingConfirmation};

/// For `listing`'s tests, which check the regression window's query plan.
#[cfg(test)]
pub(super) use self::series::baseline_sql;
