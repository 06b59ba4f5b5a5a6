//! Helpers shared by the coordinator's integration tests: child processes that print
//! `listening on ADDR`, the `gpufleet` CLI on a database, and a silent reporter.
#![allow(dead_code)] // each test crate uses its own subset

use gpufleet_coordinator::campaign::progress::Reporter;
use gpufleet_proto::v1 as pb;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

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

/// The agent binary, built next to `gpufleet` by `cargo test --workspace`.
pub fn agent_bin() -> PathBuf {
    let p = Path::new(BIN).with_file_name("gpufleet-agent");
    assert!(
        p.exists(),
        "{} is missing: run the workspace's tests (`cargo test --workspace`) or `cargo build -p gpufleet-agent` first",
        p.display()
    );
    p
}

/// A serve's arguments in the fleet tests: a fleet listener on a free loopback port, a tick of
/// 0.5 s, a 60 s grace period.
pub const FLEET_SERVE: [&str; 6] = [
    "--fleet-listen",
    "127.0.0.1:0",
    "--tick-s",
    "0.5",
    "--grace-s",
    "60",
];

/// `gpufleet serve` and what it printed at start. Its stdout stays open (read to the end by a
/// thread), so its later lines never meet a closed pipe.
pub struct Serve {
    pub child: Child,
    /// The HTTP API's address.
    pub http: String,
    /// The fleet listener's address, when it has one.
    pub fleet: String,
    /// The certificate's SHA-256, when it serves TLS.
    pub pin: String,
}

impl Serve {
    /// `gpufleet --db DB serve --listen 127.0.0.1:0 ARGS`.
    pub fn with_args(db: &Path, args: &[&str]) -> Serve {
        let mut child = Command::new(BIN)
            .arg("--db")
            .arg(db)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let (mut http, mut fleet, mut pin) = (String::new(), String::new(), String::new());
        let wants_fleet = args.contains(&"--fleet-listen");
        let wants_pin = args.iter().any(|a| a.starts_with("--tls"));
        while http.is_empty() || (wants_fleet && fleet.is_empty()) || (wants_pin && pin.is_empty())
        {
            let mut line = String::new();
            assert!(out.read_line(&mut line).unwrap() > 0, "serve exited");
            let line = line.trim();
            for (prefix, slot) in [
                ("listening on ", &mut http),
                ("fleet listening on ", &mut fleet),
                ("tls sha256 ", &mut pin),
            ] {
                if let Some(v) = line.strip_prefix(prefix) {
                    *slot = v.to_string();
                }
            }
        }
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        Serve {
            child,
            http,
            fleet,
            pin,
        }
    }

    /// With a fleet listener, TLS made in `dir/tls` and a 60 s grace period.
    pub fn start(db: &Path, dir: &Path) -> Serve {
        let tls = dir.join("tls").display().to_string();
        let serve = Serve::with_args(
            db,
            &[&FLEET_SERVE[..], &["--tls-self-signed", &tls]].concat(),
        );
        assert_eq!(serve.pin.len(), 64, "{}", serve.pin);
        serve
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Enrols `name` and returns its token.
pub fn enrol(db: &Path, name: &str) -> String {
    let out = ok_stdout(&gpufleet(
        db,
        &["agents", "add", name, "--dial-in", "--json"],
    ));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["name"], name);
    v["token"].as_str().unwrap().to_string()
}

/// `gpufleet-agent --connect URL` as `name` with `token`, pinned to `pin` when not empty.
pub fn dial_url(url: &str, name: &str, token: &str, pin: &str, state: &Path) -> Command {
    let mut cmd = Command::new(agent_bin());
    cmd.args(["--connect", url, "--name", name])
        .args(["--max-backoff-s", "1", "--state-dir"])
        .arg(state)
        .env("GPUFLEET_TOKEN", token)
        .env(
            "GPUFLEET_CACHE_DIR",
            std::env::temp_dir().join("gpufleet-test-cache"),
        )
        .env_remove("GPUFLEET_LISTEN")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if !pin.is_empty() {
        cmd.args(["--pin-sha256", pin]);
    }
    cmd
}

/// Waits up to `secs` for `f`, failing the test naming `what`.
pub fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `GET path` of the HTTP server at `addr` (plain HTTP/1.1, connection closed): the whole
/// response, headers included.
pub fn http_get(addr: &str, path: &str) -> String {
    String::from_utf8(http_get_until(addr, path, "", |_| false)).unwrap()
}

/// `GET path` of `addr` with more `headers` (each `Name: value\r\n`): the bytes that arrived
/// until `enough` holds of them, the server closed, or 30 s passed without a byte (an event
/// stream never closes).
pub fn http_get_until(
    addr: &str,
    path: &str,
    headers: &str,
    enough: impl Fn(&[u8]) -> bool,
) -> Vec<u8> {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\n\r\n"
    )
    .unwrap();
    let (mut out, mut buf) = (Vec::new(), [0u8; 4096]);
    while !enough(&out) {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    out
}
