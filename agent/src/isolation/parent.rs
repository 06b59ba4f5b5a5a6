//! The agent side: start a worker, feed it, watch it, and explain its end.

use super::WorkerCommand;
use super::memory_limit::{self, OutOfMemory};
use super::protocol::{DiscoveryReply, WorkerEvent, WorkerJob, WorkerOutcome};
use crate::backend::{BackendError, DeviceInfo};
use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, watch};

/// How much of a worker's stderr is kept for a crashed result.
pub const STDERR_TAIL_BYTES: usize = 4096;

/// How a worker run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// The worker sent its outcome and exited normally.
    Finished(WorkerOutcome),
    /// The worker died (signal) or exited without an outcome.
    Crashed {
        signal: Option<i32>,
        code: Option<i32>,
    },
    /// The worker died of an allocation failure or by the OOM killer.
    OutOfMemory(OutOfMemory),
    /// The deadline passed; the process group was killed.
    TimedOut,
    /// The run was cancelled; the process group was killed.
    Cancelled,
}

/// Everything the parent learned from one worker run.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerRun {
    pub ending: Ending,
    /// Kernel window on CLOCK_MONOTONIC, if the worker reached it.
    pub window_begin_ns: Option<u64>,
    pub window_end_ns: Option<u64>,
    pub stderr_tail: String,
    pub wall: Duration,
}

/// A progress event forwarded while the worker runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressEvent {
    pub phase: String,
    pub message: String,
    pub iterations: u32,
}

/// Failure to even start a worker.
#[derive(Debug, thiserror::Error)]
#[error("cannot start worker `{program}`: {source}")]
pub struct SpawnError {
    pub program: String,
    #[source]
    pub source: std::io::Error,
}

fn spawn(
    cmd: &WorkerCommand,
    extra: &[&str],
    env: &BTreeMap<String, String>,
    data_limit: Option<u64>,
) -> Result<Child, SpawnError> {
    let mut command = Command::new(&cmd.program);
    command
        .args(&cmd.args)
        .args(extra)
        .envs(cmd.env.iter().map(|(k, v)| (k, v)))
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Own process group, so the watchdog can kill everything the
        // driver spawned along with the worker.
        .process_group(0)
        .kill_on_drop(true);
    #[cfg(target_os = "linux")]
    // SAFETY: the closure runs in the forked child before exec and only
    // calls prctl and setrlimit, which are async-signal-safe. The first makes
    // the kernel kill the worker if the agent dies, so a hung worker never
    // outlives its agent; the second is the worker's memory limit.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(bytes) = data_limit {
                memory_limit::limit_data(bytes)?;
            }
            Ok(())
        });
    }
    command.spawn().map_err(|source| SpawnError {
        program: cmd.program.display().to_string(),
        source,
    })
}

/// Kills the worker's whole process group.
fn kill_group(child: &Child) {
    if let Some(pid) = child.id() {
        // SAFETY: kill() with a negative pid signals the process group the
        // worker leads (we made it the leader with process_group(0)).
        unsafe {
            libc::kill(-(pid as i32), libc::SIGKILL);
        }
    }
}

/// What the parent keeps of a worker's stderr.
#[derive(Debug, Default)]
struct Stderr {
    /// The last `keep` bytes.
    tail: String,
    /// The first Rust allocation failure (`memory allocation of N bytes failed`), wherever it
    /// was: a backtrace printed after it can push it out of the tail.
    alloc_failure: Option<u64>,
}

/// Longest line examined for an allocation failure.
const MAX_SCANNED_LINE: usize = 256;

async fn read_tail(mut r: impl AsyncRead + Unpin, keep: usize) -> Stderr {
    let mut tail: Vec<u8> = Vec::new();
    let mut line: Vec<u8> = Vec::new();
    let mut alloc_failure = None;
    let mut scan = |line: &mut Vec<u8>| {
        if alloc_failure.is_none() {
            alloc_failure = memory_limit::alloc_failure_bytes(&String::from_utf8_lossy(line));
        }
        line.clear();
    };
    let mut buf = [0u8; 4096];
    while let Ok(n) = r.read(&mut buf).await {
        if n == 0 {
            break;
        }
        for &b in &buf[..n] {
            if b == b'\n' {
                scan(&mut line);
            } else if line.len() < MAX_SCANNED_LINE {
                line.push(b);
            }
        }
        tail.extend_from_slice(&buf[..n]);
        if tail.len() > 2 * keep {
            tail.drain(..tail.len() - keep);
        }
    }
    scan(&mut line);
    if tail.len() > keep {
        tail.drain(..tail.len() - keep);
    }
    Stderr {
        tail: String::from_utf8_lossy(&tail).into_owned(),
        alloc_failure,
    }
}

/// Runs `job` in a worker with `env` applied to the worker only, under a
/// memory limit of `data_limit` bytes (RLIMIT_DATA, see [`memory_limit`]) if any.
///
/// Progress goes to `progress` (dropped if the receiver is gone). The run
/// ends at `timeout` (process group killed, [`Ending::TimedOut`]) or when
/// `cancel` turns true ([`Ending::Cancelled`]); a worker that runs out of
/// memory ends as [`Ending::OutOfMemory`].
///
/// # Errors
/// [`SpawnError`] when the worker cannot be started at all.
pub async fn run_worker(
    cmd: &WorkerCommand,
    job: &WorkerJob,
    env: &BTreeMap<String, String>,
    timeout: Duration,
    data_limit: Option<u64>,
    mut cancel: watch::Receiver<bool>,
    progress: mpsc::Sender<ProgressEvent>,
) -> Result<WorkerRun, SpawnError> {
    let started = Instant::now();
    let oom_kills = || crate::host::memory::oom_kills(std::path::Path::new("/"));
    let oom_kills_before = oom_kills();
    let mut child = spawn(cmd, &["run"], env, data_limit)?;
    let job_json = serde_json::to_vec(job).expect("WorkerJob serializes");
    if let Some(mut stdin) = child.stdin.take() {
        // A worker that dies before reading its job shows up as a crash.
        let _ = stdin.write_all(&job_json).await;
        drop(stdin);
    }
    let stderr = child.stderr.take().expect("stderr is piped");
    let stderr_task = tokio::spawn(read_tail(stderr, STDERR_TAIL_BYTES));
    let mut lines = BufReader::new(child.stdout.take().expect("stdout is piped")).lines();
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);

    let mut outcome = None;
    let (mut begin, mut end) = (None, None);
    let mut forced: Option<Ending> = None;
    loop {
        tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(line)) => match serde_json::from_str::<WorkerEvent>(&line) {
                    Ok(WorkerEvent::Progress { phase, message, iterations }) => {
                        let _ = progress.try_send(ProgressEvent { phase, message, iterations });
                    }
                    Ok(WorkerEvent::WindowBegin { monotonic_ns }) => begin = Some(monotonic_ns),
                    Ok(WorkerEvent::WindowEnd { monotonic_ns }) => end = Some(monotonic_ns),
                    Ok(WorkerEvent::Outcome(o)) => outcome = Some(o),
                    Err(e) => tracing::warn!("worker sent an unreadable line ({e}): {line:.200}"),
                },
                _ => break,
            },
            _ = &mut deadline => {
                kill_group(&child);
                forced = Some(Ending::TimedOut);
                break;
            }
            changed = cancel.changed() => {
                if changed.is_ok() && *cancel.borrow() {
                    kill_group(&child);
                    forced = Some(Ending::Cancelled);
                    break;
                }
            }
        }
    }
    // The protocol channel closed; the process should exit now. A worker
    // that closes its output and lingers is still held to the deadline.
    let status = if forced.is_some() {
        child.wait().await.ok()
    } else {
        tokio::select! {
            s = child.wait() => s.ok(),
            _ = &mut deadline => {
                kill_group(&child);
                forced = Some(Ending::TimedOut);
                child.wait().await.ok()
            }
        }
    };
    // Anything else in the group (driver helpers) goes with the worker.
    kill_group(&child);
    let stderr = stderr_task.await.unwrap_or_default();
    let ending = match (forced, outcome, status) {
        (Some(f), _, _) => f,
        (None, Some(o), Some(s)) if s.success() => Ending::Finished(o),
        (None, _, Some(s)) => {
            let rose = || matches!((oom_kills_before, oom_kills()), (Some(a), Some(b)) if b > a);
            let kill = s.signal() == Some(libc::SIGKILL);
            match memory_limit::out_of_memory(s.signal(), stderr.alloc_failure, kill && rose()) {
                Some(oom) => Ending::OutOfMemory(oom),
                None => Ending::Crashed {
                    signal: s.signal(),
                    code: s.code(),
                },
            }
        }
        (None, _, None) => Ending::Crashed {
            signal: None,
            code: None,
        },
    };
    Ok(WorkerRun {
        ending,
        window_begin_ns: begin,
        window_end_ns: end,
        stderr_tail: stderr.tail,
        wall: started.elapsed(),
    })
}

/// Enumerates one backend's devices in a worker with a deadline.
///
/// A worker that crashes or hangs makes the backend unavailable with the
/// reason; it never takes the agent down.
pub async fn discover(
    cmd: &WorkerCommand,
    backend: &str,
    timeout: Duration,
) -> Result<Vec<DeviceInfo>, BackendError> {
    let unavailable = |reason: String| BackendError::Unavailable {
        backend: backend.to_string(),
        reason,
    };
    let mut child = spawn(cmd, &["discover", backend], &BTreeMap::new(), None)
        .map_err(|e| unavailable(e.to_string()))?;
    drop(child.stdin.take());
    let stderr_task = tokio::spawn(read_tail(child.stderr.take().expect("piped"), 1024));
    let mut stdout = child.stdout.take().expect("piped");
    let mut text = String::new();
    let read = tokio::time::timeout(timeout, async {
        let _ = stdout.read_to_string(&mut text).await;
        child.wait().await
    })
    .await;
    let status = match read {
        Ok(s) => s.ok(),
        Err(_) => {
            kill_group(&child);
            let _ = child.wait().await;
            return Err(unavailable(format!(
                "device discovery hung for more than {} s; worker killed",
                timeout.as_secs_f64()
            )));
        }
    };
    let stderr = stderr_task.await.unwrap_or_default();
    match serde_json::from_str::<DiscoveryReply>(text.trim()) {
        Ok(DiscoveryReply::Devices(d)) => Ok(d),
        Ok(DiscoveryReply::Unavailable(e)) => Err(e),
        Err(_) => {
            let how = match status {
                Some(s) if s.signal().is_some() => {
                    format!("killed by signal {}", signal_name(s.signal().unwrap_or(0)))
                }
                Some(s) => format!("exited with {s}"),
                None => "could not be waited for".into(),
            };
            Err(unavailable(format!(
                "device discovery crashed ({how}); stderr: {}",
                stderr.tail.trim()
            )))
        }
    }
}

/// `SIGSEGV`, `SIGABRT`, ... for the signals a crashing driver raises.
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGTRAP => "SIGTRAP",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}
