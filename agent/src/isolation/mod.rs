//! Isolation: every driver call happens in a child worker process.
//!
//! The agent (parent) starts `gpufleet-agent worker serve` (or the embedding
//! binary's equivalent, see [`WorkerCommand`]) in its own process group,
//! writes each job as a JSON line on its stdin and reads JSON-line events from
//! its stdout: progress, the kernel-window markers on CLOCK_MONOTONIC, and one
//! outcome per job. A worker whose run ended `ok` may be kept for the next run
//! with the same key ([`parent::WorkerPool`]). The worker moves its own stdout to a private descriptor first and
//! points fd 1 at stderr, so a driver that prints cannot corrupt the protocol.
//!
//! The parent enforces the run's deadline and cancellation by killing the
//! whole process group, and turns the exit (signal, code, no outcome) into a
//! run status. A segfault, an abort or a hang in a driver therefore becomes a
//! `crashed` or `timed_out` result; the agent keeps serving. Discovery uses
//! the same mechanism (`worker discover <backend>`) with its own timeout.
//! A run's worker also gets a memory limit ([`memory_limit`]); one that runs out
//! of memory under it ends `out_of_memory`, never taking the host down.
//!
//! No worker outlives its agent or is left unreaped ([`spawn`]): each is forked on one thread
//! kept for the life of the process, with a parent-death signal (SIGKILL when the agent dies);
//! each one killed is waited for, and its process group killed again after it is reaped, so
//! helpers a driver started go too. Each works in an empty directory of its own, removed after it.
//! An agent that is its container's PID 1 reaps the orphans it inherits ([`crate::init`]).

pub mod child;
pub mod memory_limit;
pub mod parent;
pub mod protocol;
mod spawn;

use std::path::PathBuf;

/// How to start a worker: the program and the arguments that select its
/// worker entry (`gpufleet-agent worker`, or `gpufleet agent-worker` when the
/// agent is embedded in the coordinator for `gpufleet demo`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WorkerCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Variables every worker gets from the agent itself (the cache dir),
    /// applied before a run's own overrides.
    pub env: Vec<(String, String)>,
}

impl WorkerCommand {
    /// The running executable with `args`, e.g. `["worker"]`.
    ///
    /// # Errors
    /// When the path of the running executable cannot be read.
    pub fn current_exe(args: &[&str]) -> std::io::Result<Self> {
        Ok(WorkerCommand {
            program: std::env::current_exe()?,
            args: args.iter().map(|s| s.to_string()).collect(),
            env: Vec::new(),
        })
    }

    /// A stand-in worker for tests: `sh -c SCRIPT`, whatever arguments the parent adds.
    #[cfg(test)]
    pub(crate) fn shell(script: &str) -> Self {
        WorkerCommand {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into(), "worker".into()],
            env: Vec::new(),
        }
    }
}

/// Wall-clock unix seconds (stamped next to [`monotonic_ns`] on results and power samples); 0 if
/// the clock is before 1970.
pub fn unix_now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Reads CLOCK_MONOTONIC in nanoseconds: the clock the kernel-window markers
/// and (later) power samples share on one host.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Reads `clock` (CLOCK_MONOTONIC, CLOCK_THREAD_CPUTIME_ID, ...) in
/// nanoseconds; 0 if the clock cannot be read.
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid, owned `ts`.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
