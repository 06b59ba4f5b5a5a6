//! Running a vendor tool (`rocm-smi`, `amd-smi`, `ipmitool`) with a deadline.
//!
//! These tools talk to drivers and BMCs and can hang: a BMC that stops
//! answering leaves `ipmitool` waiting for minutes, a wedged GPU leaves
//! `rocm-smi` stuck in the kernel. The sampler must never wait on them past
//! its deadline, so [`run`]:
//! - starts the tool in its own process group, so a timeout kills the tool
//!   *and* anything it started (a shell script's `sleep`, a Python helper);
//! - reads stdout and stderr on their own threads and waits on them with a
//!   deadline, because a grandchild that inherited stdout keeps the pipe open
//!   after the tool itself exits, and a plain `wait_with_output` would block;
//! - sends SIGKILL (not SIGTERM: a tool may ignore that) to the group and
//!   reaps the child before returning [`CommandError::TimedOut`].
//!
//! A reader thread whose pipe is held by a process that left our process
//! group (`setsid`) can outlive the call; it is detached and ends when that
//! process does. The call itself still returns on time.

use std::io::{self, Read};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use std::os::unix::process::CommandExt;

/// How much of stdout we keep: far above any tool's output, low enough that
/// a runaway tool cannot eat the agent's memory.
const MAX_STDOUT: u64 = 16 << 20;
/// How much of stderr ends up in [`CommandError::Failed`].
const STDERR_TAIL_CHARS: usize = 400;
/// Between two checks for the child's exit once its stdout is closed.
const EXIT_POLL: Duration = Duration::from_millis(2);
/// `exec` of a script that another thread is still writing (tests, or a tool
/// being upgraded) fails with ETXTBSY for a moment; retry this many times.
const SPAWN_RETRIES: u32 = 20;

/// Why a tool call produced no output.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CommandError {
    /// The program does not exist (bare names are looked up in `PATH`).
    #[error("{program} not found{}", if .program.contains('/') { "" } else { " in PATH" })]
    NotFound { program: String },
    /// The program ran past the deadline; it and its process group were
    /// killed.
    #[error("{program} timed out after {secs} s")]
    TimedOut { program: String, secs: f64 },
    /// The program exited unsuccessfully.
    #[error("{program} failed ({status}): {stderr_tail}")]
    Failed {
        program: String,
        /// `exit status: 1`, `signal: 9 (SIGKILL)`.
        status: String,
        /// The end of its stderr, trimmed (may be empty).
        stderr_tail: String,
    },
    /// Starting or talking to the program failed (not executable, no pipes).
    #[error("{program}: {message}")]
    Io { program: String, message: String },
}

/// Runs `program args…` with stdin closed and returns its stdout (lossily
/// decoded as UTF-8).
///
/// Never blocks past `timeout` plus a few milliseconds: see the module docs.
///
/// # Errors
/// [`CommandError::NotFound`] when the program does not exist,
/// [`CommandError::TimedOut`] past the deadline (the process group has been
/// killed and the child reaped), [`CommandError::Failed`] on a non-zero exit,
/// [`CommandError::Io`] when it cannot be started (e.g. not executable).
pub fn run(program: &Path, args: &[&str], timeout: Duration) -> Result<String, CommandError> {
    let name = program.display().to_string();
    let deadline = Instant::now() + timeout;
    let mut child = spawn(program, args, &name)?;

    let stdout = child.stdout.take().map(|s| read_on_thread(s, MAX_STDOUT));
    let stderr = child.stderr.take().map(|s| read_on_thread(s, MAX_STDOUT));
    let (Some(stdout), Some(stderr)) = (stdout, stderr) else {
        kill_and_reap(&mut child);
        return Err(CommandError::Io {
            program: name,
            message: "no stdout/stderr pipe".to_string(),
        });
    };

    // Stdout closes when the tool and everything holding the pipe are done.
    let out = match recv_until(&stdout, deadline) {
        Some(out) => out,
        None => return Err(timed_out(&mut child, name, timeout)),
    };
    let status = match wait_until(&mut child, deadline) {
        Ok(Some(status)) => status,
        Ok(None) => return Err(timed_out(&mut child, name, timeout)),
        Err(e) => {
            kill_and_reap(&mut child);
            return Err(CommandError::Io {
                program: name,
                message: format!("waiting for it: {e}"),
            });
        }
    };
    let out = out.map_err(|e| CommandError::Io {
        program: name.clone(),
        message: format!("reading its stdout: {e}"),
    })?;
    if !status.success() {
        // Stderr is normally closed by now; give it a moment, never more.
        let grace = Instant::now() + Duration::from_millis(50);
        let err = recv_until(&stderr, deadline.max(grace))
            .and_then(Result::ok)
            .unwrap_or_default();
        return Err(CommandError::Failed {
            program: name,
            status: status.to_string(),
            stderr_tail: tail(&String::from_utf8_lossy(&err), STDERR_TAIL_CHARS),
        });
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Starts the child in its own process group with piped stdout/stderr.
fn spawn(program: &Path, args: &[&str], name: &str) -> Result<Child, CommandError> {
    let mut tries = 0;
    loop {
        let result = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // pgid = the child's pid: one kill reaches its whole tree.
            .process_group(0)
            .spawn();
        match result {
            Ok(child) => return Ok(child),
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < SPAWN_RETRIES => {
                tries += 1;
                thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(spawn_error(name, &e)),
        }
    }
}

/// Maps a failed spawn to our error: the one place that knows the codes.
fn spawn_error(name: &str, e: &io::Error) -> CommandError {
    match e.kind() {
        io::ErrorKind::NotFound => CommandError::NotFound {
            program: name.to_string(),
        },
        io::ErrorKind::PermissionDenied => CommandError::Io {
            program: name.to_string(),
            message: "permission denied (not executable?)".to_string(),
        },
        _ => CommandError::Io {
            program: name.to_string(),
            message: format!("cannot start: {e}"),
        },
    }
}

/// Reads `pipe` to its end (at most `limit` bytes) on a detached thread.
fn read_on_thread<R: Read + Send + 'static>(pipe: R, limit: u64) -> Receiver<io::Result<Vec<u8>>> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut buf = Vec::new();
        let result = pipe.take(limit).read_to_end(&mut buf).map(|_| buf);
        // The receiver is gone when the call already timed out: nothing to do.
        let _ = tx.send(result);
    });
    rx
}

/// The thread's result, or `None` at the deadline.
fn recv_until<T>(rx: &Receiver<T>, deadline: Instant) -> Option<T> {
    let left = deadline.saturating_duration_since(Instant::now());
    // Timeout, or a reader thread that died: either way, no output.
    rx.recv_timeout(left).ok()
}

/// Polls for the child's exit until the deadline. The child is reaped when
/// this returns `Ok(Some(_))`.
fn wait_until(child: &mut Child, deadline: Instant) -> io::Result<Option<ExitStatus>> {
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        thread::sleep(EXIT_POLL);
    }
}

fn timed_out(child: &mut Child, program: String, timeout: Duration) -> CommandError {
    kill_and_reap(child);
    CommandError::TimedOut {
        program,
        secs: timeout.as_secs_f64(),
    }
}

/// SIGKILLs the child's process group, then reaps the child.
///
/// Only called while the child is not yet reaped, so its pid (which is the
/// group id) cannot have been reused by another process.
fn kill_and_reap(child: &mut Child) {
    if let Ok(pgid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: killpg has no memory-safety preconditions; the group id is
        // our unreaped child's pid, so the signal reaches only its group.
        unsafe {
            libc::killpg(pgid, libc::SIGKILL);
        }
    }
    // SIGKILL cannot be ignored, so this returns promptly.
    let _ = child.kill();
    let _ = child.wait();
}

/// The last `max` characters of `s`, trimmed.
fn tail(s: &str, max: usize) -> String {
    let s = s.trim();
    let count = s.chars().count();
    if count <= max {
        return s.to_string();
    }
    let skip = s.char_indices().nth(count - max).map_or(0, |(i, _)| i);
    format!("…{}", &s[skip..])
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::fs;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;

    /// Writes an executable `#!/bin/sh` script `name` with `body` into `dir`
    /// (shared by the smi and ipmi tests to stand in for the real tools).
    pub(crate) fn fake_tool(dir: &Path, name: &str, body: &str) -> PathBuf {
        let path = dir.join(name);
        {
            let mut f = fs::File::create(&path).expect("create script");
            writeln!(f, "#!/bin/sh\n{body}").expect("write script");
            f.sync_all().expect("sync script");
        }
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    #[test]
    fn stdout_comes_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let tool = fake_tool(dir.path(), "hello", "echo \"$1 $2\"; echo line2");
        let out = run(&tool, &["a", "b c"], Duration::from_secs(5)).unwrap();
        assert_eq!(out, "a b c\nline2\n");
    }

    #[test]
    fn missing_tool_is_not_found() {
        let err = run(
            Path::new("gpufleet-no-such-tool-xyz"),
            &[],
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert_eq!(
            err,
            CommandError::NotFound {
                program: "gpufleet-no-such-tool-xyz".into()
            }
        );
        assert_eq!(
            err.to_string(),
            "gpufleet-no-such-tool-xyz not found in PATH"
        );

        let err = run(
            Path::new("/nonexistent/rocm-smi"),
            &[],
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "/nonexistent/rocm-smi not found");
    }

    #[test]
    fn a_hanging_tool_times_out_on_time() {
        let dir = tempfile::tempdir().unwrap();
        let tool = fake_tool(dir.path(), "hang", "sleep 30");
        let start = Instant::now();
        let err = run(&tool, &[], Duration::from_millis(300)).unwrap_err();
        let took = start.elapsed();
        assert!(
            matches!(err, CommandError::TimedOut { secs, .. } if secs == 0.3),
            "{err:?}"
        );
        assert!(err.to_string().ends_with("timed out after 0.3 s"), "{err}");
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < Duration::from_secs(3), "{took:?}");
    }

    #[test]
    fn a_tool_ignoring_sigterm_still_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let tool = fake_tool(
            dir.path(),
            "stubborn",
            "trap '' TERM INT\nwhile :; do sleep 1; done",
        );
        let start = Instant::now();
        let err = run(&tool, &[], Duration::from_millis(300)).unwrap_err();
        assert!(matches!(err, CommandError::TimedOut { .. }), "{err:?}");
        assert!(start.elapsed() < Duration::from_secs(3));
    }

    /// A background grandchild that keeps stdout open: the tool exits at once
    /// but the pipe stays open. The call must still return at the deadline,
    /// and the grandchild (same process group) must be killed.
    #[test]
    fn a_grandchild_holding_stdout_is_killed_at_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("grandchild.pid");
        let body = format!(
            "sleep 30 &\necho $! > '{}'\necho partial",
            pid_file.display()
        );
        let tool = fake_tool(dir.path(), "leaky", &body);
        let start = Instant::now();
        let err = run(&tool, &[], Duration::from_millis(400)).unwrap_err();
        assert!(matches!(err, CommandError::TimedOut { .. }), "{err:?}");
        assert!(start.elapsed() < Duration::from_secs(3));

        let pid: i32 = fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Dead means gone from /proc or a zombie waiting for its reaper.
        let dead = |pid: i32| match fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        };
        let until = Instant::now() + Duration::from_secs(2);
        while !dead(pid) && Instant::now() < until {
            thread::sleep(Duration::from_millis(10));
        }
        assert!(dead(pid), "grandchild {pid} survived the timeout");
    }

    #[test]
    fn failure_carries_status_and_stderr_tail() {
        let dir = tempfile::tempdir().unwrap();
        let tool = fake_tool(
            dir.path(),
            "broken",
            "echo 'Could not open device at /dev/ipmi0' >&2; exit 3",
        );
        let err = run(&tool, &[], Duration::from_secs(5)).unwrap_err();
        match &err {
            CommandError::Failed {
                status,
                stderr_tail,
                ..
            } => {
                assert!(status.contains('3'), "{status}");
                assert_eq!(stderr_tail, "Could not open device at /dev/ipmi0");
            }
            other => panic!("expected Failed, got {other:?}"),
        }
    }

    #[test]
    fn a_file_that_is_not_executable_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plain");
        fs::write(&path, "#!/bin/sh\necho hi\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        // Root may execute nothing without an x bit either, so this holds
        // for every user.
        let err = run(&path, &[], Duration::from_secs(1)).unwrap_err();
        assert!(matches!(err, CommandError::Io { .. }), "{err:?}");
    }

    #[test]
    fn tail_keeps_the_end() {
        assert_eq!(tail("  short \n", 10), "short");
        assert_eq!(tail("abcdefghij", 4), "…ghij");
        assert_eq!(tail("ééééé", 2), "…éé");
    }
}
