//! Scheduled measurement (`gpufleet serve`): cron schedules, crash-safe campaign
//! execution, regression checks after every scheduled campaign, and resuming what a stopped or
//! killed coordinator left.
//!
//! Time is injected ([`Daemon::tick`] takes "now"), so tests fire schedules without waiting.
//!
//! # Slots
//! For each schedule, the latest cron slot at or before now is *due* when it is later than the
//! schedule's `last_slot`. A due slot within `grace_s` of now fires; an older one (the
//! coordinator was down) fires once at start when catch-up is on, else it is passed over. Only the
//! latest missed slot is considered, so a week of downtime runs one campaign, not seven. Firing and
//! moving `last_slot` are one transaction with a unique index on (schedule, slot): never twice.
//!
//! # Resuming
//! A campaign's owner (`pid@host`) writes a heartbeat while it executes. At start, and on every
//! tick, a `running` campaign whose owner is gone (its pid no longer exists on this host, or no
//! heartbeat for `stale_after_s`) or an `interrupted` one (a graceful stop) is claimed by compare
//! and swap and resumed: finished jobs keep their results, interrupted jobs run again with a new
//! run id (at most `max_attempts` in all), and results are idempotent by run id, so nothing is
//! stored twice.
//!
//! | file | part |
//! | --- | --- |
//! | `cron.rs` | five-field cron expressions in UTC (pure) |
//! | `spec.rs` | what a schedule runs ([`ScheduleSpec`]) and the campaign request it stands for |
//! | `slots.rs` | which slot is due, the daemon's knobs ([`DaemonConfig`]) (pure) |
//! | `daemon.rs` | the [`Daemon`]: fires due slots, executes, checks for regressions, resumes orphans |
//! | `serve.rs` | the daemon's loop until a stop signal ([`run_until_stopped`]) |

pub mod cron;
pub mod daemon;
pub mod serve;
pub mod slots;
pub mod spec;

pub use self::cron::Cron;
pub use self::daemon::{CampaignReport, Daemon};
pub use self::serve::{HANDOFF_POLL, run_until_stopped};
pub use self::slots::{DaemonConfig, Due, due, next_slot};
pub use self::spec::{ScheduleSpec, request_of};
