//! Riding through faults of the database and of a serve (issue 57): PostgreSQL restarted or stopped
//! for 60 s mid-campaign under one serve and under two, and a serve stopped with SIGTERM while its
//! dial-in agents run a campaign. Each test has a cluster of its own (`ci/postgres.sh` on a free
//! port), so it can stop it without touching the other tests' databases.
//!
//! What must hold every time: the campaign ends `done` within 90 s of the database's return (or of
//! the stop), with one `ok` result per job, no finished run left in an agent's outbox, and the
//! `gpufleet run` that followed it exits 0; `/healthz` turns 503 within 30 s of the database going
//! away and 200 again after it is back.

use super::{cluster, holders, is, number, rows};
use crate::common::{BIN, FLEET_SERVE, Serve, dial_url, enrol, wait_for};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../ci/postgres.sh");

/// A PostgreSQL cluster of this test's own, stopped and removed on drop.
struct Cluster {
    dir: tempfile::TempDir,
    port: u16,
    url: String,
}

impl Cluster {
    fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port_below_ephemeral();
        let mut c = Cluster {
            dir,
            port,
            url: String::new(),
        };
        c.url = c.up();
        c
    }

    fn up(&self) -> String {
        let out = Command::new("bash")
            .arg(SCRIPT)
            .arg("start")
            .arg(self.dir.path())
            .arg(self.port.to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ci/postgres.sh start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    fn down(&self) {
        let out = Command::new("bash")
            .arg(SCRIPT)
            .arg("stop")
            .arg(self.dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "ci/postgres.sh stop");
    }
}

/// A free loopback port below Linux's ephemeral range (32768 and up): the kernel never hands one
/// of these to a socket bound to port 0, so while the cluster is stopped for a minute no serve or
/// agent of another test can take its port (one bound to :0 did, and the restart failed).
fn free_port_below_ephemeral() -> u16 {
    static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    let base = 20_000 + (std::process::id() % 1_000) as u16 * 10;
    loop {
        let port = base + NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 2_000;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(SCRIPT)
            .arg("stop")
            .arg(self.dir.path())
            .output();
    }
}

/// What happens to the database mid-campaign.
#[derive(Clone, Copy)]
enum Fault {
    /// `pg_ctl stop -m fast`, then start at once.
    Restart,
    /// Stopped for this long.
    Stop(Duration),
}

/// Four dial-in agents on `serves` serves of one database (each agent given every serve, the
/// first serve its first for agents p1 and p2, the second for p3 and p4), and a campaign of the
/// standard suite's light kernels on their cpu devices, followed by `gpufleet run`.
struct Fleet {
    cluster: Cluster,
    serves: Vec<Serve>,
    agents: Vec<Child>,
    states: Vec<PathBuf>,
    run: Option<Child>,
    _dir: tempfile::TempDir,
}

const NAMES: [&str; 4] = ["p1", "p2", "p3", "p4"];
const KERNELS: [&str; 7] = [
    "vec_add", "copy", "triad", "relu", "sigmoid", "tanh", "noop",
];

impl Fleet {
    /// Agents p1 and p2 attach to the first serve first, p3 and p4 to the last; each is given
    /// every serve.
    fn start(serves: usize) -> Fleet {
        Fleet::start_with(serves, true)
    }

    /// As [`Fleet::start`]; all four agents on the first serve first unless `split`.
    fn start_with(serves: usize, split: bool) -> Fleet {
        let cluster = Cluster::start();
        let db = Path::new(&cluster.url);
        let dir = tempfile::tempdir().unwrap();
        let tokens: Vec<String> = NAMES.iter().map(|n| enrol(db, n)).collect();
        let serves: Vec<Serve> = (0..serves)
            .map(|_| Serve::with_args(db, &FLEET_SERVE))
            .collect();
        let mut agents = Vec::new();
        let mut states = Vec::new();
        for (i, (name, token)) in NAMES.iter().zip(&tokens).enumerate() {
            let first = if i < 2 || !split { 0 } else { serves.len() - 1 };
            let state = dir.path().join(name);
            let mut cmd = dial_url(
                &format!("http://{}", serves[first].fleet),
                name,
                token,
                "",
                &state,
            );
            for (j, s) in serves.iter().enumerate() {
                if j != first {
                    cmd.args(["--connect", &format!("http://{}", s.fleet)]);
                }
            }
            agents.push(cmd.spawn().unwrap());
            states.push(state);
        }
        let url = cluster.url.clone();
        wait_for("every agent attached", 60, || holders(&url).len() == 4);
        Fleet {
            cluster,
            serves,
            agents,
            states,
            run: None,
            _dir: dir,
        }
    }

    fn url(&self) -> &str {
        &self.cluster.url
    }

    /// Hands the campaign to the serves (`gpufleet run`, followed to its end in the background)
    /// and waits for its first results.
    fn run_campaign(&mut self) {
        let mut run = Command::new(BIN);
        run.arg("--db").arg(self.url()).arg("run");
        for n in NAMES {
            run.args(["--agent", n]);
        }
        for k in KERNELS {
            run.args(["--kernel", k]);
        }
        self.run = Some(
            run.args(["--backend", "cpu", "--suite", "standard"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let url = self.url().to_string();
        wait_for("the campaign's first results", 120, || {
            number(&url, "SELECT count(*) FROM results") >= 4
        });
        assert!(
            number(&url, "SELECT count(*) FROM jobs WHERE state <> 'done'") > 0,
            "the fault comes mid-campaign"
        );
    }

    /// `/healthz` of serve `i`: its status code.
    fn health(&self, i: usize) -> u16 {
        let answer =
            std::panic::catch_unwind(|| crate::common::http_get(&self.serves[i].http, "/healthz"))
                .unwrap_or_default();
        answer
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0)
    }

    /// Waits for every serve's `/healthz` to answer `code`, at most `secs`.
    fn wait_health(&self, code: u16, secs: u64) {
        wait_for(&format!("/healthz {code} on every serve"), secs, || {
            (0..self.serves.len()).all(|i| self.health(i) == code)
        });
    }

    /// The campaign must end `done` within 90 s of `back`, as the module says.
    fn check_finished(&mut self, back: Instant) {
        let run = self.run.take().unwrap();
        let url = self.url().to_string();
        let left = Duration::from_secs(90).saturating_sub(back.elapsed());
        wait_for(
            "the campaign done within 90 s of the fault's end",
            left.as_secs().max(1),
            || {
                rows(&url, "SELECT state FROM campaigns WHERE id = 1")[0][0].as_deref()
                    == Some("done")
            },
        );
        eprintln!(
            "the campaign was done {:.1} s after the fault ended",
            back.elapsed().as_secs_f64()
        );
        let out = run.wait_with_output().unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "gpufleet run: {stdout}\n{stderr}");
        let jobs = number(&url, "SELECT count(*) FROM jobs WHERE campaign_id = 1");
        assert_eq!(jobs, 4 * 7, "7 kernels on each agent's cpu device");
        let results = rows(
            &url,
            "SELECT job_id, status FROM results WHERE campaign_id = 1",
        );
        assert_eq!(
            results.len() as i64,
            jobs,
            "one result per job: {results:?}"
        );
        let job_ids: std::collections::BTreeSet<_> = results.iter().map(|r| r[0].clone()).collect();
        assert_eq!(job_ids.len() as i64, jobs, "every job has its result");
        let not_ok: Vec<_> = results
            .iter()
            .filter(|r| r[1].as_deref() != Some("ok"))
            .collect();
        assert!(not_ok.is_empty(), "{not_ok:?}\n{stderr}");
        // Nothing waits in an outbox: every finished run was acknowledged.
        wait_for("every agent's outbox empty", 30, || {
            self.states.iter().all(|s| pending(s) == 0)
        });
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for a in &mut self.agents {
            let _ = a.kill();
            let _ = a.wait();
        }
        if let Some(mut r) = self.run.take() {
            let _ = r.kill();
            let _ = r.wait();
        }
    }
}

/// Finished runs in the outbox under an agent's state directory (`*.done` files).
fn pending(state: &Path) -> usize {
    let mut n = 0;
    let mut dirs = vec![state.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "done") {
                n += 1;
            }
        }
    }
    n
}

/// The campaign rides through `fault` of the database under `serves` serves.
fn rides_through(fault: Fault, serves: usize) {
    if cluster().is_none() {
        return;
    }
    let mut fleet = Fleet::start(serves);
    fleet.wait_health(200, 30);
    let started = Instant::now();
    fleet.run_campaign();
    eprintln!(
        "first results after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    fleet.cluster.down();
    if let Fault::Stop(outage) = fault {
        let down = Instant::now();
        fleet.wait_health(503, 30);
        std::thread::sleep(outage.saturating_sub(down.elapsed()));
    }
    fleet.cluster.up();
    let back = Instant::now();
    fleet.check_finished(back);
    fleet.wait_health(200, 30);
}

#[test]
fn a_restart_of_the_database_mid_campaign_loses_nothing_under_one_serve() {
    rides_through(Fault::Restart, 1);
}

#[test]
fn a_restart_of_the_database_mid_campaign_loses_nothing_under_two_serves() {
    rides_through(Fault::Restart, 2);
}

#[test]
fn a_60_s_stop_of_the_database_mid_campaign_loses_nothing_under_one_serve() {
    rides_through(Fault::Stop(Duration::from_secs(60)), 1);
}

#[test]
fn a_60_s_stop_of_the_database_mid_campaign_loses_nothing_under_two_serves() {
    rides_through(Fault::Stop(Duration::from_secs(60)), 2);
}

/// SIGTERM to the serve that owns the campaign, with its four dial-in agents attached (each
/// given the second serve as well) and a half-sent HTTP request open: it exits within 10 s, the agents attach to the second serve,
/// and the campaign finishes there.
#[test]
fn a_serve_stopped_with_sigterm_exits_within_10_s_and_its_campaign_finishes_on_the_other() {
    if cluster().is_none() {
        return;
    }
    let mut fleet = Fleet::start_with(2, false);
    let url = fleet.url().to_string();
    wait_for("every agent attached to the first serve", 60, || {
        let h = holders(&url);
        h.len() == 4 && h.values().all(|r| is(&fleet.serves[0], r))
    });
    fleet.run_campaign();
    // A client that sent half a request and waits: it must not hold the stop.
    let mut half = std::net::TcpStream::connect(&fleet.serves[0].http).unwrap();
    std::io::Write::write_all(&mut half, b"GET /healthz HTTP/1.1\r\nHost: x\r\n").unwrap();
    let stopping = Instant::now();
    let _ = Command::new("kill")
        .args(["-TERM", &fleet.serves[0].child.id().to_string()])
        .status();
    let status = loop {
        if let Some(status) = fleet.serves[0].child.try_wait().unwrap() {
            break status;
        }
        assert!(
            stopping.elapsed() < Duration::from_secs(10),
            "the serve is still running 10 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!(
        "the serve stopped in {:.1} s ({status})",
        stopping.elapsed().as_secs_f64()
    );
    wait_for("every agent attached to the second serve", 30, || {
        let h = holders(&url);
        h.len() == 4 && h.values().all(|r| is(&fleet.serves[1], r))
    });
    fleet.check_finished(stopping);
    let owner = rows(&url, "SELECT owner FROM campaigns WHERE id = 1")[0][0].clone();
    assert!(
        is(&fleet.serves[1], owner.as_deref().unwrap_or("")),
        "{owner:?}"
    );
}
