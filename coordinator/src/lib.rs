//! gpufleet-coordinator: the `gpufleet` command. Talks to agents, schedules comparable runs,
//! stores every result in SQLite, compares devices side by side and watches for regressions.
//!
//! The library does the work. The binary (`main.rs`) parses the command line, sets up logging and
//! the async runtime, opens the database (read-only for the commands that only read), runs the
//! embedded agent's worker and `serve-agent` in a `local-agent` build, and hands every other
//! command to its handler in [`cli`], which parses arguments into domain types and prints.
//!
//! # Layout
//! - `cli/`: clap types (`args.rs`) and one handler module per group of commands (`agents.rs`,
//!   `run.rs`, `results.rs`, `schedule.rs`, `serve.rs`, `db.rs`), argument lists (`parse.rs`).
//! - `link/`: how an agent is reached: the [`AgentLink`](link::AgentLink) trait with typed
//!   [`LinkError`](link::LinkError)s (`mod.rs`) and its gRPC implementation (`grpc.rs`: token,
//!   deadlines, errors naming the agent).
//! - `fleet/`: agents that dial in: the `Fleet` service of `gpufleet serve --fleet-listen`, the
//!   hub of attached agents that stores and acknowledges their finished runs, and their
//!   [`AgentLink`](link::AgentLink) (`link.rs`, with `links()` choosing by the agent's kind).
//! - `live/`: live power at a serve: one subscription per connected agent fanned out to watchers
//!   through bounded buffers that drop and count (`mod.rs`), the latest sample of every channel
//!   for `/metrics` and the agent page, and the direct agents followed over gRPC (`direct.rs`).
//! - `campaign/`: a suite × agents × devices: the request and its stored form (`request.rs`), its
//!   filters and overrides (`selection.rs`), why it stops before running (`error.rs`), the
//!   validation of runs, their settings resolved once, and the pure planner (`plan.rs`), describing and storing jobs (`prepare.rs`), executing them with
//!   retries, lost agents and a typed [`JobFailure`](campaign::JobFailure) (`execute.rs`), the
//!   owner and heartbeat (`owner.rs`), the whole campaign in one call (`run.rs`), progress to the
//!   terminal (`progress.rs`).
//! - `schedule/`: scheduled measurement for `gpufleet serve`: cron expressions (`cron.rs`), what a
//!   schedule runs (`spec.rs`), which slot is due (`slots.rs`), the [`Daemon`](schedule::Daemon)
//!   that fires, checks and resumes campaigns (`daemon.rs`), its loop (`serve.rs`).
//! - `regression/`: pure detection on one series (`detect.rs`) and the store-facing checks,
//!   confirmation reruns and alerts (`check.rs`).
//! - `http/`: the read-only JSON API of `gpufleet serve`.
//! - `store/`: the SQLite store (migrations, guard, WAL, idempotent results; one file per table
//!   group, row types in `rows.rs`; backups, restores, sizes and the serve lock in
//!   `maintenance.rs`); `db.rs`: its async handle.
//! - `web/`: the dashboard of `gpufleet serve` and `gpufleet report --html`: one module per page
//!   under `web/pages/` (each owning its query and its template context), links between pages and
//!   the queries they carry (`links.rs`), the routes (`routes.rs`), the static report
//!   (`report.rs`), server-drawn SVG charts (`svg.rs`) and a generated history (`seed.rs`).
//! - `convert.rs`: wire results (and their power samples) to store records.
//! - `tls.rs`: the serve's certificate (files, or a CA and certificate made once) for both listeners.
//! - `compare/`: the comparison: a [`Cell`](compare::Cell) is a stored result ranked in its row;
//!   the pivot by device, agent or backend with baselines (`pivot.rs`), the terminal matrix
//!   (`text.rs`) and the CSV/JSON long form (`export.rs`).
//! - `table.rs`: tables for the terminal, Markdown and CSV as views (one column list each), and
//!   the number formats every view shares.
//! - `time.rs`: the clock, UTC calendar arithmetic and how times and durations are printed.
//! - `demo.rs` (feature `local-agent`): the in-process agent for `gpufleet demo`. This is the only
//!   place the agent crate is used, and only by the binary's features: the coordinator library
//!   itself never depends on agent code.
//!
//! # Lifecycle of a campaign
//! 1. `gpufleet run --suite S --agent A` (or a schedule's slot, or `demo`) builds a
//!    [`CampaignRequest`](campaign::CampaignRequest).
//! 2. Its runs are validated and their settings resolved once
//!    ([`resolve_runs`](campaign::plan::resolve_runs)): an invalid spec or setting is refused
//!    before any agent is contacted or anything is stored. The campaign is stored
//!    (`running`, owned by `pid@host`) with its request in stored form.
//! 3. Prepare: every agent is described over its [`AgentLink`](link::AgentLink), in parallel; the
//!    planner expands the runs over each device whose backend implements the kernel; devices and
//!    `queued` jobs are stored in one transaction.
//! 4. Execute: per device, jobs run in order (devices and agents in parallel) over a run stream of
//!    progress, power samples and one result; each result is stored in its own transaction,
//!    idempotent by run id. An unreachable or busy agent is retried with backoff; after the last
//!    retry the job gets an error result with `JobFailure::AgentUnreachable` and the agent's other
//!    jobs fail fast. A heartbeat marks the owner alive.
//! 5. Finish: the campaign is `done`, or `failed` when a job failed with an unreachable agent.
//! 6. Scheduled campaigns are then checked for regressions: suspects get a confirmation job, run
//!    like any other, and a confirmed change becomes an alert.
//! 7. A campaign whose owner died (or stopped gracefully) is claimed and resumed by the next
//!    daemon: finished jobs keep their results, interrupted ones run again with a new run id.

pub mod campaign;
pub mod cli;
pub mod compare;
pub mod convert;
pub mod db;
#[cfg(feature = "local-agent")]
pub mod demo;
pub mod fleet;
pub mod http;
pub mod link;
pub mod live;
pub mod outliers;
pub mod regression;
pub mod schedule;
pub mod store;
pub mod table;
#[cfg(test)]
pub(crate) mod test_rng;
pub mod time;
pub mod tls;
pub mod web;
