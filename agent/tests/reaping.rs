//! No worker outlives its agent, and nothing a worker started is left running or unreaped: a real
//! `gpufleet-agent` process SIGKILLed in the middle of a run, a worker that leaves a helper behind,
//! and the agent as PID 1 of a PID namespace (as in its container images) inheriting an orphan.
//!
//! This test binary makes itself a child subreaper, so the processes orphaned under it come back
//! to it rather than to the machine's init: whether each one ended is then checked by reaping it
//! here, whatever the host's PID 1 does.

mod common;

use gpufleet_agent::backend::DeviceInfo;
use gpufleet_agent::isolation::WorkerCommand;
use gpufleet_agent::isolation::parent::{Ending, WorkerPool, run_worker};
use gpufleet_agent::isolation::protocol::WorkerJob;
use gpufleet_kernels::{Mode, PartialSettings, RunSettings};
use gpufleet_proto::v1 as pb;
use std::collections::BTreeMap;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

const AGENT: &str = env!("CARGO_BIN_EXE_gpufleet-agent");

fn subreaper() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer flag and touches no memory.
    ONCE.call_once(|| assert_eq!(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) }, 0));
}

/// `/proc/PID/stat`'s state letter and parent, if the process exists.
fn state(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut after = stat.rsplit_once(')')?.1.split_whitespace();
    let state = after.next()?.chars().next()?;
    Some((state, after.next()?.parse().ok()?))
}

/// Waits up to `within` for `pid` to end and be reaped: by this process when it is (or became)
/// its child, else by whoever it belongs to. False, with its state, when it is still running or
/// a zombie nobody reaps.
fn ends(pid: i32, within: Duration) -> Result<(), String> {
    let deadline = Instant::now() + within;
    loop {
        let mut status = 0;
        // SAFETY: waitpid on one pid, without blocking, into an owned int.
        let waited = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if waited == pid || (waited < 0 && state(pid).is_none()) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("process {pid} (state, parent): {:?}", state(pid)));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pids of the processes whose parent is `parent` and whose command line has `word`.
fn children(parent: i32, word: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if state(pid).is_some_and(|(_, p)| p == parent)
            && cmdline.split(|&b| b == 0).any(|a| a == word.as_bytes())
        {
            out.push(pid);
        }
    }
    out
}

/// A `gpufleet-agent` process serving on a loopback port, and that address.
fn start_agent(cache: &std::path::Path) -> (Child, String) {
    let mut agent = Command::new(AGENT)
        .args(["--listen", "127.0.0.1:0", "--enable-debug-kernels"])
        .args(["--discovery-timeout-s", "30", "--no-nvml"])
        .args(["--rocm-smi", "off", "--amd-smi", "off", "--ipmitool", "off"])
        .arg("--cache-dir")
        .arg(cache)
        .env("RUST_LOG", "info")
        .env_remove("GPUFLEET_TOKEN")
        .env_remove("GPUFLEET_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting gpufleet-agent");
    let stderr = agent.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some((_, addr)) = line.split_once("gpufleet-agent listening on ") {
                let _ = tx.send(addr.trim().to_string());
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the agent says where it listens");
    (agent, format!("http://{addr}"))
}

/// SIGKILL to the agent in the middle of a hanging run, with a second worker idle in the pool:
/// within a few seconds neither worker is running, nor a zombie left unreaped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_agent_leaves_no_worker_behind() {
    subreaper();
    let cache = tempfile::tempdir().unwrap();
    let (mut agent, url) = start_agent(cache.path());
    let agent_pid = agent.id() as i32;
    let mut c = pb::agent_client::AgentClient::connect(url).await.unwrap();
    // A worker kept idle: its run's overrides differ from the next one's, so it stays in the pool.
    let mut quick = common::spec("vec_add", &[("n", 4096)]);
    quick.env.insert("GPU_TEST_MARKER".into(), "1".into());
    let (_, r) = common::run(&mut c, "quick", quick).await;
    assert_eq!(r.status(), pb::RunStatus::Ok, "{}", r.message);
    let mut hang = common::spec("debug_hang", &[]);
    hang.settings = Some(PartialSettings {
        timeout_s: Some(120.0),
        ..PartialSettings::default()
    });
    let _events = c
        .run(pb::RunRequest {
            run_id: "hang".into(),
            spec: Some(hang),
        })
        .await
        .expect("run accepted");
    let deadline = Instant::now() + Duration::from_secs(60);
    let workers = loop {
        let workers = children(agent_pid, "serve");
        if workers.len() >= 2 {
            break workers;
        }
        assert!(
            Instant::now() < deadline,
            "workers of the agent: {workers:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // The hanging run is in its kernel by now, or about to be; either way its worker is up.
    tokio::time::sleep(Duration::from_millis(300)).await;
    agent.kill().unwrap();
    agent.wait().unwrap();
    let left: Vec<String> = workers
        .iter()
        .filter_map(|&w| ends(w, Duration::from_secs(5)).err())
        .collect();
    assert!(
        left.is_empty(),
        "workers left by the SIGKILLed agent: {left:?}"
    );
}

fn job() -> WorkerJob {
    WorkerJob {
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
    }
}

/// A worker that starts a helper (as a driver may) and ends on its own: the helper, in the
/// worker's process group, goes with it. (Before, the group was killed through the reaped
/// worker's `Child`, which has no pid any more: the helper ran on, an orphan.)
#[tokio::test]
async fn a_worker_that_ends_takes_what_it_started_with_it() {
    subreaper();
    for (script, timeout) in [
        // Crashes (no outcome) with its helper running.
        (
            "read job; sleep 300 </dev/null >/dev/null 2>&1 & echo helper=$! >&2; exit 3",
            20,
        ),
        // Hangs with its helper: the deadline kills the group.
        (
            "read job; sleep 300 </dev/null >/dev/null 2>&1 & echo helper=$! >&2; sleep 300",
            1,
        ),
    ] {
        let cmd = WorkerCommand {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into(), "worker".into()],
            env: Vec::new(),
        };
        let (_cancel, cancel) = watch::channel(false);
        let (progress, _progress) = mpsc::channel(8);
        let run = run_worker(
            &WorkerPool::new(true),
            &cmd,
            &job(),
            &BTreeMap::new(),
            Duration::from_secs(timeout),
            None,
            cancel,
            progress,
        )
        .await
        .unwrap();
        assert!(
            matches!(run.ending, Ending::Crashed { .. } | Ending::TimedOut),
            "{:?}",
            run.ending
        );
        let helper: i32 = run
            .stderr_tail
            .split_once("helper=")
            .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no helper pid in {:?}", run.stderr_tail));
        if let Err(e) = ends(helper, Duration::from_secs(5)) {
            // SAFETY: kill of the one pid this test started through its worker.
            unsafe { libc::kill(helper, libc::SIGKILL) };
            panic!(
                "the helper of a worker that ended ({:?}) is still there: {e}",
                run.ending
            );
        }
    }
}

/// The `unshare` flags that make a PID namespace here, if any.
fn pid_namespace() -> Option<&'static [&'static str]> {
    for flags in [
        &[
            "--user",
            "--map-root-user",
            "--pid",
            "--fork",
            "--kill-child",
        ][..],
        &["--pid", "--fork", "--kill-child"][..],
    ] {
        let ok = Command::new("unshare")
            .args(flags)
            .arg("true")
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(flags);
        }
    }
    None
}

/// The agent as PID 1 of its PID namespace, as in its container images: an orphan it inherits
/// (here, the child a power tool left when it exited) is reaped, not left a zombie for as long as
/// the agent lives.
#[test]
fn as_pid_1_the_agent_reaps_the_orphans_it_inherits() {
    let Some(flags) = pid_namespace() else {
        eprintln!("skipped: `unshare --pid --fork` cannot make a PID namespace here");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let marker = format!("GPUFLEET_TEST_ORPHAN={}", dir.path().display());
    let tool = dir.path().join("rocm-smi");
    std::fs::write(
        &tool,
        format!("#!/bin/sh\n( {marker} sleep 2 </dev/null >/dev/null 2>&1 & )\nexit 1\n"),
    )
    .unwrap();
    std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut ns = Command::new("unshare")
        .args(flags)
        .arg(AGENT)
        .args(["--listen", "127.0.0.1:0", "--no-nvml", "--amd-smi", "off"])
        .args(["--ipmitool", "off", "--rocm-smi"])
        .arg(&tool)
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .env_remove("GPUFLEET_TOKEN")
        .env_remove("GPUFLEET_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting unshare");
    // The orphan, found by its environment while it runs.
    let deadline = Instant::now() + Duration::from_secs(120);
    let orphan = loop {
        let found = std::fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
            let pid = e.file_name().to_string_lossy().parse::<i32>().ok()?;
            let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
            environ
                .split(|&b| b == 0)
                .any(|v| v == marker.as_bytes())
                .then_some(pid)
        });
        if let Some(pid) = found {
            break Some(pid);
        }
        if Instant::now() >= deadline || ns.try_wait().unwrap().is_some() {
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    // It sleeps 2 s, then must be reaped (the agent lives on meanwhile).
    let result = orphan.map(|pid| ends(pid, Duration::from_secs(8)));
    let alive = ns.try_wait().unwrap().is_none();
    let _ = ns.kill();
    let _ = ns.wait();
    let orphan = orphan.expect("the power tool's orphan never ran (is the agent running?)");
    assert!(alive, "the agent ended early");
    if let Some(Err(e)) = result {
        panic!("the orphan {orphan} the agent inherited as PID 1 was not reaped: {e}");
    }
}
