//! gpufleet-coordinator: the `gpufleet` command. Talks to agents over gRPC,
//! schedules comparable runs, stores every result in SQLite and compares
//! devices side by side.
//!
//! # Layout
//! - [`cli`]: clap types; [`commands`]: one handler per command.
//! - [`client`]: agent connections (token, deadlines, errors naming the agent).
//! - [`plan`]: suite × agents × devices → jobs (pure).
//! - [`campaign`]: storing and running jobs, retries, lost agents.
//! - [`store`]: the SQLite store (migrations, WAL, idempotent results);
//!   [`db`]: its async handle.
//! - [`record`], [`compare`], [`table`], [`progress`]: results to rows, rows to
//!   tables, progress to the terminal.
//! - `demo` (feature `local-agent`): the in-process agent for `gpufleet demo`.
//!   This is the only place the agent crate is used, and only by the binary's
//!   features: the coordinator library itself never depends on agent code.
//!
//! # Lifecycle of a campaign
//! `run --suite S --agent A` → Describe every agent → plan jobs for each
//! device whose backend implements the kernel → store campaign, devices and
//! queued jobs → per device, run jobs in order over a `Run` stream → store each
//! RunResult in its own transaction (idempotent by run id) → mark the
//! campaign done → print the comparison.

pub mod campaign;
pub mod cli;
pub mod client;
pub mod commands;
pub mod compare;
pub mod cron;
pub mod db;
#[cfg(feature = "local-agent")]
pub mod demo;
pub mod http;
pub mod plan;
pub mod progress;
pub mod record;
pub mod regress;
pub mod regressions;
pub mod service;
pub mod store;
pub mod table;
