//! Helpers shared by the coordinator's integration tests: child processes that print
//! `listening on ADDR`, the `gpufleet` CLI on a database, and a silent reporter.
#![allow(dead_code)] // each test crate uses its own subset

use gpufleet_coordinator::campaign::progress::Reporter;
use gpufleet_proto::v1 as pb;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

pub const BIN: &str = env!("CARGO_BIN_EXE_gpufleet");

/// A process that prints `listening on ADDR` first (an agent, `gpufleet serve`), killed on drop.
pub struct Proc {
    pub child: Child,
    pub addr: String,
    /// `http://ADDR`.
    pub url: String,
}

impl Proc {
    /// Starts `cmd` and waits for its address. Tests never touch the user's cache.
    pub fn start(mut cmd: Command) -> Proc {
        let mut child = cmd
            .env(
                "GPUFLEET_CACHE_DIR",
                std::env::temp_dir().join("gpufleet-test-cache"),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("expected `listening on ADDR`, got {line:?}"))
            .to_string();
        Proc {
            child,
            url: format!("http://{addr}"),
            addr,
        }
    }

    /// An agent process (`gpufleet serve-agent`), with the debug kernels when `debug`.
    pub fn agent(debug: bool) -> Proc {
        let mut cmd = Command::new(BIN);
        cmd.args(["serve-agent", "--listen", "127.0.0.1:0"]);
        if debug {
            cmd.arg("--enable-debug-kernels");
        }
        Proc::start(cmd)
    }

    /// Sends `sig` (`-TERM`) with kill(1).
    pub fn signal(&mut self, sig: &str) {
        let _ = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status();
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `gpufleet --db DB ARGS...`.
pub fn gpufleet(db: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--db")
        .arg(db)
        .args(args)
        .output()
        .unwrap()
}

/// `gpufleet --db DB ARGS...` started in the background with its output discarded (a campaign the
/// test acts on while it runs).
pub fn spawn_quiet(db: &Path, args: &[&str]) -> Child {
    Command::new(BIN)
        .arg("--db")
        .arg(db)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Stdout of a command that must have succeeded (else a panic with both streams).
pub fn ok_stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// A reporter that says nothing.
pub struct Quiet;

impl Reporter for Quiet {
    fn planned(&self, _: i64, _: usize) {}
    fn started(&self, _: &gpufleet_coordinator::campaign::plan::PlannedJob) {}
    fn progress(&self, _: &gpufleet_coordinator::campaign::plan::PlannedJob, _: &str, _: &str) {}
    fn finished(&self, _: &gpufleet_coordinator::campaign::plan::PlannedJob, _: &pb::RunResult) {}
    fn note(&self, _: &str) {}
}
