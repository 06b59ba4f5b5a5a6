//! The agent side: start a worker, feed it, watch it, and explain its end.

use super::WorkerCommand;
use super::memory_limit::{self, OutOfMemory};
use super::protocol::{DiscoveryReply, WorkerEvent, WorkerJob, WorkerOutcome, WorkerStatus};
pub use super::spawn::SpawnError;
use super::spawn::{Spawned, kill_group, spawn};
use crate::backend::{BackendError, DeviceInfo};
use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};
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
    /// Whether the worker process had done an earlier run (false: started for this one).
    pub reused: bool,
}

/// A progress event forwarded while the worker runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressEvent {
    pub phase: String,
    pub message: String,
    pub iterations: u32,
}

/// What the parent keeps of a worker's stderr.
#[derive(Debug, Default)]
struct Stderr {
    /// The last `keep` bytes (up to twice that between trims).
    tail: Vec<u8>,
    /// The first Rust allocation failure (`memory allocation of N bytes failed`), wherever it
    /// was: a backtrace printed after it can push it out of the tail.
    alloc_failure: Option<u64>,
}

impl Stderr {
    /// The kept tail as text.
    fn tail_text(&self, keep: usize) -> String {
        let from = self.tail.len().saturating_sub(keep);
        String::from_utf8_lossy(&self.tail[from..]).into_owned()
    }
}

/// A worker's stderr as it is read, shared with the run that is using the worker (a reused
/// worker's stream spans its runs; each run clears it when it starts).
type SharedStderr = Arc<Mutex<Stderr>>;

fn lock(s: &SharedStderr) -> std::sync::MutexGuard<'_, Stderr> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// Longest line examined for an allocation failure.
const MAX_SCANNED_LINE: usize = 256;

/// Reads `r` to its end into `shared`, keeping the last `keep` bytes and the first allocation
/// failure.
async fn read_tail(mut r: impl AsyncRead + Unpin, keep: usize, shared: SharedStderr) {
    let mut line: Vec<u8> = Vec::new();
    let scan = |line: &mut Vec<u8>| {
        let mut s = lock(&shared);
        if s.alloc_failure.is_none() {
            s.alloc_failure = memory_limit::alloc_failure_bytes(&String::from_utf8_lossy(line));
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
        let mut s = lock(&shared);
        s.tail.extend_from_slice(&buf[..n]);
        if s.tail.len() > 2 * keep {
            let cut = s.tail.len() - keep;
            s.tail.drain(..cut);
        }
    }
    scan(&mut line);
}

/// Longest a worker waits for its next run before it is ended.
pub const WORKER_IDLE: Duration = Duration::from_secs(30);
/// Most idle workers the agent keeps (the oldest goes first).
const MAX_IDLE_WORKERS: usize = 4;
/// Runs after which a worker is ended even so, so no slow leak in a driver builds up for ever.
const MAX_RUNS_PER_WORKER: u32 = 1000;

/// What a worker must have in common with a run to take it: the same backend and device, the
/// same environment overrides (the process was started with them) and the same memory limit.
#[derive(Debug, Clone, PartialEq)]
struct PoolKey {
    backend: String,
    device: String,
    env: BTreeMap<String, String>,
    data_limit: Option<u64>,
}

/// A `worker serve` process: jobs go in on stdin one JSON line each, events come back on stdout.
struct Worker {
    id: u64,
    key: PoolKey,
    child: Child,
    /// Its process group, for what it started (see [`kill_group`]).
    group: i32,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    stderr: SharedStderr,
    stderr_task: tokio::task::JoinHandle<()>,
    /// Runs finished in this process.
    runs: u32,
    idle_since: Instant,
    /// Its working directory: the last field, so removed once the process is killed or reaped.
    _scratch: tempfile::TempDir,
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Whatever the worker started goes with it. One not reaped yet is killed here and reaped
        // by tokio (`kill_on_drop`, then its orphan queue); one reaped already had its group
        // killed right after (run_worker, WorkerPool::take).
        if self.child.id().is_some() {
            kill_group(self.group);
        }
    }
}

impl Worker {
    fn start(cmd: &WorkerCommand, key: PoolKey, id: u64) -> Result<Worker, SpawnError> {
        let Spawned {
            mut child,
            group,
            scratch,
        } = spawn(cmd, &["serve"], &key.env, key.data_limit)?;
        let stderr: SharedStderr = Arc::default();
        let stderr_task = tokio::spawn(read_tail(
            child.stderr.take().expect("stderr is piped"),
            STDERR_TAIL_BYTES,
            stderr.clone(),
        ));
        Ok(Worker {
            id,
            key,
            stdin: child.stdin.take(),
            lines: BufReader::new(child.stdout.take().expect("stdout is piped")).lines(),
            child,
            group,
            stderr,
            stderr_task,
            runs: 0,
            idle_since: Instant::now(),
            _scratch: scratch,
        })
    }
}

/// Worker processes kept between runs, so a stream of small runs does not pay a process start
/// (and a driver's initialisation) each time.
///
/// Isolation stays: a worker is kept only after a run that ended `ok` in it, and only a run with
/// the same backend, device, environment overrides and memory limit takes it again; a crash, a
/// timeout, a cancel or any other status ends the process as before, and an idle worker ends after
/// [`WORKER_IDLE`]. Runs on one device are serial (the device queue), so a worker serves one run
/// at a time.
pub struct WorkerPool {
    reuse: bool,
    idle: Mutex<Vec<Worker>>,
    next_id: AtomicU64,
}

impl WorkerPool {
    /// A pool that keeps workers when `reuse`, else starts one per run.
    pub fn new(reuse: bool) -> Arc<WorkerPool> {
        Arc::new(WorkerPool {
            reuse,
            idle: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
        })
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Worker>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An idle worker for `key`, if one is kept and still alive.
    fn take(&self, key: &PoolKey) -> Option<Worker> {
        let mut idle = self.idle();
        while let Some(i) = idle.iter().position(|w| &w.key == key) {
            let mut w = idle.swap_remove(i);
            // One that died while idle (killed from outside) is dropped here, with what it left.
            match w.child.try_wait() {
                Ok(None) => return Some(w),
                Ok(Some(_)) => kill_group(w.group),
                Err(_) => {}
            }
        }
        None
    }

    /// Keeps `w` for the next run with its key; ends it after [`WORKER_IDLE`] unused.
    fn put(self: &Arc<Self>, mut w: Worker) {
        w.idle_since = Instant::now();
        let id = w.id;
        let evicted = {
            let mut idle = self.idle();
            idle.push(w);
            (idle.len() > MAX_IDLE_WORKERS).then(|| {
                let oldest = (0..idle.len())
                    .min_by_key(|&i| idle[i].idle_since)
                    .expect("not empty");
                idle.swap_remove(oldest)
            })
        };
        drop(evicted);
        let pool = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(WORKER_IDLE).await;
            if let Some(pool) = pool.upgrade() {
                let expired = {
                    let mut idle = pool.idle();
                    idle.iter()
                        .position(|w| w.id == id && w.idle_since.elapsed() >= WORKER_IDLE)
                        .map(|i| idle.swap_remove(i))
                };
                drop(expired);
            }
        });
    }
}

/// Runs `job` in a worker with `env` applied to the worker only, under a
/// memory limit of `data_limit` bytes (RLIMIT_DATA, see [`memory_limit`]) if any: a worker
/// `pool` kept from an earlier run with the same backend, device, `env` and limit, else a new one.
///
/// Progress goes to `progress` (dropped if the receiver is gone). The run
/// ends at `timeout` (process group killed, [`Ending::TimedOut`]) or when
/// `cancel` turns true ([`Ending::Cancelled`]); a worker that runs out of
/// memory ends as [`Ending::OutOfMemory`].
///
/// # Errors
/// [`SpawnError`] when the worker cannot be started at all.
#[allow(clippy::too_many_arguments)]
pub async fn run_worker(
    pool: &Arc<WorkerPool>,
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
    let key = PoolKey {
        backend: job.backend.clone(),
        device: job.device.id.clone(),
        env: env.clone(),
        data_limit,
    };
    let mut w = match pool.take(&key) {
        Some(w) => w,
        None => Worker::start(cmd, key, pool.next_id.fetch_add(1, Ordering::Relaxed))?,
    };
    let reused = w.runs > 0;
    *lock(&w.stderr) = Stderr::default();
    let mut job_line = serde_json::to_vec(job).expect("WorkerJob serializes");
    job_line.push(b'\n');
    if let Some(stdin) = w.stdin.as_mut() {
        // A worker that dies before reading its job shows up as a crash.
        let _ = stdin.write_all(&job_line).await;
        let _ = stdin.flush().await;
    }
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);

    let mut outcome = None;
    let (mut begin, mut end) = (None, None);
    let mut forced: Option<Ending> = None;
    loop {
        tokio::select! {
            line = w.lines.next_line() => match line {
                Ok(Some(line)) => match WorkerEvent::decode(&line) {
                    Ok(WorkerEvent::Progress { phase, message, iterations }) => {
                        let _ = progress.try_send(ProgressEvent { phase, message, iterations });
                    }
                    Ok(WorkerEvent::WindowBegin { monotonic_ns }) => begin = Some(monotonic_ns),
                    Ok(WorkerEvent::WindowEnd { monotonic_ns }) => end = Some(monotonic_ns),
                    Ok(WorkerEvent::Outcome(o)) => {
                        outcome = Some(o);
                        break;
                    }
                    // Read as nothing else: the run ends as an error naming the field, and the
                    // worker, whose protocol is broken, is not kept.
                    Err(e) => {
                        outcome = Some(WorkerOutcome::unreadable(&line, &e));
                        break;
                    }
                },
                _ => break,
            },
            _ = &mut deadline => {
                kill_group(w.group);
                forced = Some(Ending::TimedOut);
                break;
            }
            changed = cancel.changed() => {
                if changed.is_ok() && *cancel.borrow() {
                    kill_group(w.group);
                    forced = Some(Ending::Cancelled);
                    break;
                }
            }
        }
    }
    w.runs += 1;
    if let Some(o) = &outcome
        && forced.is_none()
        && pool.reuse
        && o.status == WorkerStatus::Ok
        && w.runs < MAX_RUNS_PER_WORKER
    {
        // The worker waits for its next job.
        let run = WorkerRun {
            ending: Ending::Finished(o.clone()),
            window_begin_ns: begin,
            window_end_ns: end,
            stderr_tail: lock(&w.stderr).tail_text(STDERR_TAIL_BYTES),
            wall: started.elapsed(),
            reused,
        };
        pool.put(w);
        return Ok(run);
    }
    // This worker ends: without its stdin it leaves its job loop and exits. One that lingers is
    // still held to the deadline.
    drop(w.stdin.take());
    let status = if forced.is_some() {
        w.child.wait().await.ok()
    } else {
        tokio::select! {
            s = w.child.wait() => s.ok(),
            _ = &mut deadline => {
                kill_group(w.group);
                forced = Some(Ending::TimedOut);
                w.child.wait().await.ok()
            }
        }
    };
    // Anything else in the group (driver helpers) goes with the worker: by the group's number,
    // since the reaped worker's `Child` no longer has a pid.
    kill_group(w.group);
    let _ = (&mut w.stderr_task).await;
    let stderr = std::mem::take(&mut *lock(&w.stderr));
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
        stderr_tail: stderr.tail_text(STDERR_TAIL_BYTES),
        wall: started.elapsed(),
        reused,
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
    let Spawned {
        mut child,
        group,
        scratch: _scratch,
    } = spawn(cmd, &["discover", backend], &BTreeMap::new(), None)
        .map_err(|e| unavailable(e.to_string()))?;
    drop(child.stdin.take());
    let stderr: SharedStderr = Arc::default();
    let stderr_task = tokio::spawn(read_tail(
        child.stderr.take().expect("piped"),
        1024,
        stderr.clone(),
    ));
    let mut stdout = child.stdout.take().expect("piped");
    let mut text = String::new();
    let read = tokio::time::timeout(timeout, async {
        let _ = stdout.read_to_string(&mut text).await;
        child.wait().await
    })
    .await;
    let status = match read {
        Ok(s) => {
            kill_group(group);
            s.ok()
        }
        Err(_) => {
            kill_group(group);
            let _ = child.wait().await;
            return Err(unavailable(format!(
                "device discovery hung for more than {} s; worker killed",
                timeout.as_secs_f64()
            )));
        }
    };
    let _ = stderr_task.await;
    let stderr_tail = lock(&stderr).tail_text(1024);
    match gpufleet_kernels::from_json_str::<DiscoveryReply>(text.trim()) {
        Ok(DiscoveryReply::Devices(d)) => Ok(d),
        Ok(DiscoveryReply::Unavailable(e)) => Err(e),
        // A worker that exited normally but answered something unreadable says so, naming the
        // field, instead of passing for a crash.
        Err(e) if status.is_some_and(|s| s.success()) && !text.trim().is_empty() => {
            Err(unavailable(format!(
                "device discovery answered unreadably: {e}; stderr: {}",
                stderr_tail.trim()
            )))
        }
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
                stderr_tail.trim()
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

#[cfg(test)]
mod tests {
    use super::*;
    use gpufleet_kernels::{Mode, RunSettings};

    #[tokio::test]
    async fn an_outcome_line_with_a_wrong_field_type_ends_the_run_as_an_error_naming_it() {
        let line = r#"{"event":"outcome","status":"ok","message":"","times_s":"fast","warmup_done":0,"validation":null,"config":{}}"#;
        let cmd = WorkerCommand::shell(&format!("read job; echo '{line}'; read next; exit 0"));
        let job = WorkerJob {
            backend: "cpu".into(),
            device: DeviceInfo::default(),
            kernel: "noop".into(),
            variant: String::new(),
            params: BTreeMap::new(),
            dtype: "f32".into(),
            mode: Mode::ComputeOnly,
            settings: RunSettings::DEFAULT,
            skip_validation: false,
            seed: 1,
            allow_debug: false,
            power_window_s: 0.0,
        };
        let (_cancel_tx, cancel) = watch::channel(false);
        let (progress, _progress_rx) = mpsc::channel(8);
        let pool = WorkerPool::new(true);
        let run = run_worker(
            &pool,
            &cmd,
            &job,
            &BTreeMap::new(),
            Duration::from_secs(20),
            None,
            cancel,
            progress,
        )
        .await
        .unwrap();
        let Ending::Finished(o) = run.ending else {
            panic!("{:?}", run.ending)
        };
        assert_eq!(o.status, WorkerStatus::Error);
        assert!(
            o.message
                .starts_with("the worker sent an unreadable line (field `times_s`: invalid type"),
            "{}",
            o.message
        );
        assert!(
            pool.idle().is_empty(),
            "a worker with a broken protocol is not kept"
        );
    }

    #[tokio::test]
    async fn a_discovery_answer_that_does_not_parse_names_the_field() {
        let cmd = WorkerCommand::shell(r#"echo '{"devices": 5}'"#);
        let e = discover(&cmd, "cpu", Duration::from_secs(20))
            .await
            .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("device discovery answered unreadably: field `devices`: invalid type"),
            "{text}"
        );
    }
}
