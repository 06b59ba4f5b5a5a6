//! Starting a worker process, and ending what it started.
//!
//! A worker runs
//! - in its own process group, so one kill reaches whatever a driver started along with it; the
//!   group is kept by number ([`Spawned::group`]), because once the worker is reaped its `Child`
//!   no longer knows its pid, and helpers it left must still go;
//! - in a working directory of its own: an empty directory made for it (mode 0700, under
//!   `$TMPDIR`) and removed when it ends, so a relative name in a run's environment overrides can
//!   reach nothing but what that worker wrote (`docs/install.md`, "What a run may load");
//! - under its memory limit ([`memory_limit`]);
//! - with a parent-death signal: the kernel SIGKILLs it when the agent dies.
//!
//! The parent-death signal fires when the *thread* that forked the worker exits, not the process:
//! a worker forked on a thread that ends (a blocking-pool thread after its idle time, the thread of
//! a `block_in_place`, a caller's short-lived runtime) would be killed in the middle of its run,
//! or idle in the pool. So every worker is forked on one thread kept for the life of the process
//! ([`on_forking_thread`]); and the child checks, after `prctl`, that its parent is still the
//! agent, since an agent that died between the fork and the `prctl` would send no signal.

use super::WorkerCommand;
use super::memory_limit;
use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::OnceLock;
use std::sync::mpsc;
use tokio::process::{Child, Command};

/// Failure to even start a worker.
#[derive(Debug, thiserror::Error)]
#[error("cannot start worker `{program}`: {source}")]
pub struct SpawnError {
    pub program: String,
    #[source]
    pub source: std::io::Error,
}

/// A started worker.
pub(super) struct Spawned {
    pub child: Child,
    /// The worker's process group (its pid).
    pub group: i32,
    /// Its working directory, removed when dropped (after the process ends).
    pub scratch: tempfile::TempDir,
}

/// Starts `cmd` with `extra` arguments, `env` over the agent's own environment and a memory limit
/// of `data_limit` bytes, if any (see the module docs).
pub(super) fn spawn(
    cmd: &WorkerCommand,
    extra: &[&str],
    env: &BTreeMap<String, String>,
    data_limit: Option<u64>,
) -> Result<Spawned, SpawnError> {
    let failed = |source| SpawnError {
        program: cmd.program.display().to_string(),
        source,
    };
    let scratch = tempfile::Builder::new()
        .prefix("gpufleet-worker-")
        .tempdir()
        .map_err(|e| {
            failed(std::io::Error::new(
                e.kind(),
                format!(
                    "cannot make its working directory in {}: {e}",
                    std::env::temp_dir().display()
                ),
            ))
        })?;
    // A relative program path would be looked up from the new working directory.
    let program = match cmd.program.components().count() > 1 && cmd.program.is_relative() {
        true => std::path::absolute(&cmd.program).map_err(failed)?,
        false => cmd.program.clone(),
    };
    let mut command = Command::new(program);
    command
        .args(&cmd.args)
        .args(extra)
        .envs(cmd.env.iter().map(|(k, v)| (k, v)))
        .envs(env)
        .current_dir(scratch.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Own process group, so the watchdog can kill everything the
        // driver spawned along with the worker.
        .process_group(0)
        .kill_on_drop(true);
    #[cfg(target_os = "linux")]
    {
        let agent = std::process::id() as libc::pid_t;
        // SAFETY: the closure runs in the forked child before exec and only calls prctl, getppid
        // and setrlimit, which are async-signal-safe, and builds errors from raw codes (no
        // allocation). The first makes the kernel kill the worker when the agent dies, so a hung
        // worker never outlives its agent; the second catches an agent that died before that;
        // the third is the worker's memory limit.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() != agent {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                if let Some(bytes) = data_limit {
                    memory_limit::limit_data(bytes)?;
                }
                Ok(())
            });
        }
    }
    let handle = tokio::runtime::Handle::try_current().ok();
    let child = on_forking_thread(move || {
        // The child registers with the caller's runtime (its reaper), from the forking thread.
        let _runtime = handle.as_ref().map(tokio::runtime::Handle::enter);
        command.spawn()
    })
    .map_err(failed)?;
    let group = child.id().map_or(0, |pid| pid as i32);
    Ok(Spawned {
        child,
        group,
        scratch,
    })
}

/// Kills process group `group` (a worker and whatever it started); nothing for 0.
///
/// Safe to call on a worker that is not reaped yet (its pid, hence its group's number, cannot be
/// reused) and right after reaping it: the number stays taken while any process of the group
/// lives, and a group with nobody left answers ESRCH.
pub(super) fn kill_group(group: i32) {
    if group > 0 {
        // SAFETY: kill() with a negative pid signals the process group the worker leads (we made
        // it the leader with process_group(0)).
        unsafe {
            libc::kill(-group, libc::SIGKILL);
        }
    }
}

/// Work for the forking thread.
type Fork = Box<dyn FnOnce() + Send>;

/// Runs `f` on the thread every worker is forked on: started on first use and never ended, so a
/// worker's parent-death signal follows the agent process, not one of its threads. Runs `f` on
/// the calling thread when that thread cannot be started.
fn on_forking_thread<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    static FORKER: OnceLock<Option<mpsc::Sender<Fork>>> = OnceLock::new();
    let forker = FORKER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Fork>();
        std::thread::Builder::new()
            .name("gpufleet-fork".into())
            .spawn(move || {
                for f in rx {
                    // A panic (no runtime to register with) must not end this thread: the
                    // workers it forked would die with it. The caller sees its reply dropped.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
                }
            })
            .ok()
            .map(|_| tx)
    });
    let Some(forker) = forker else {
        return f();
    };
    let (reply, answer) = mpsc::sync_channel(1);
    let work: Fork = Box::new(move || {
        let _ = reply.send(f());
    });
    let gone = || std::io::Error::other("the thread that forks workers did not answer");
    forker.send(work).map_err(|_| gone())?;
    answer.recv().map_err(|_| gone())?
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A worker forked while a short-lived thread was running the agent's code outlives that
    /// thread: its parent-death signal is tied to the forking thread, which lives as long as the
    /// process. (Forked on the caller's thread, the worker was SIGKILLed when that thread ended.)
    #[tokio::test]
    async fn a_worker_outlives_the_thread_that_asked_for_it() {
        let handle = tokio::runtime::Handle::current();
        let mut spawned = std::thread::spawn(move || {
            let _runtime = handle.enter();
            spawn(
                &WorkerCommand::shell("sleep 30"),
                &[],
                &BTreeMap::new(),
                None,
            )
            .expect("spawned")
        })
        .join()
        .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let state = spawned.child.try_wait().unwrap();
        kill_group(spawned.group);
        let _ = spawned.child.wait().await;
        assert_eq!(
            state, None,
            "the worker died with the thread that asked for it"
        );
    }

    #[tokio::test]
    async fn a_worker_works_in_its_own_empty_directory_removed_after_it() {
        let mut spawned = spawn(
            &WorkerCommand::shell("pwd; ls -A"),
            &[],
            &BTreeMap::new(),
            None,
        )
        .unwrap();
        let dir = spawned.scratch.path().to_path_buf();
        let mut out = String::new();
        use tokio::io::AsyncReadExt;
        let mut stdout = spawned.child.stdout.take().unwrap();
        stdout.read_to_string(&mut out).await.unwrap();
        assert!(spawned.child.wait().await.unwrap().success());
        assert_eq!(
            out.trim(),
            dir.canonicalize().unwrap().display().to_string()
        );
        drop(spawned);
        assert!(!dir.exists(), "{} is left", dir.display());
    }
}
