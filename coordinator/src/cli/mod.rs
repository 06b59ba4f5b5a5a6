//! The `gpufleet` command line: clap types (`args.rs`) and one handler module per group of
//! commands. Handlers only parse arguments into domain types, call the library and print.
//!
//! | file | commands |
//! | --- | --- |
//! | `args.rs` | the clap types of every command |
//! | `parse.rs` | `NAME=VALUE` lists and `--env-set` values |
//! | `agents.rs` | `agents add/list/rm`, `describe` |
//! | `power.rs` | `power`: an agent's power samples, live |
//! | `run.rs` | `run` (a suite or one ad-hoc spec) |
//! | `results.rs` | `results`, `compare`, `campaigns`, a campaign's outcome |
//! | `schedule.rs` | `schedule add/list/rm/run-now`, `regressions` |
//! | `model.rs` | `export-model` |
//! | `db.rs` | `db backup/restore/stats`: the database file's backups, restores and sizes |
//! | `serve.rs` | `serve`: the schedule daemon with its HTTP API, until SIGINT/SIGTERM |

pub mod agents;
pub mod args;
pub mod db;
pub mod model;
pub mod outliers;
pub mod parse;
pub mod power;
pub mod results;
pub mod run;
pub mod schedule;
pub mod serve;

/// The packaged coordinator's state directory (its unit's `StateDirectory=`): its database, and
/// its self-signed TLS in `tls/`.
pub const PACKAGED_STATE_DIR: &str = "/var/lib/gpufleet-coordinator";

pub use self::args::{
    AgentsCommand, Cli, Command, CompareArgs, DbCommand, DemoArgs, FailOn, Output, RegressionsArgs,
    ResultScope, ResultsArgs, RunArgs, RunOverrides, ScheduleAddArgs, ScheduleCommand, ServeArgs,
};

#[cfg(test)]
mod advice_tests;
