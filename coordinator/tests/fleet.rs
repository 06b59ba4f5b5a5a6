//! Agents that dial in, with real processes on real sockets: `gpufleet serve --fleet-listen` with a
//! self-signed certificate, `gpufleet-agent --connect` pinned to it, a TCP relay that cuts one
//! agent's link, SIGKILL of the other, and the refusals (wrong pin, plaintext beyond loopback,
//! unenrolled or removed agent, serve beyond loopback without TLS or tokens).

use gpufleet_coordinator::store::{ResultFilter, Store};
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;
use common::{BIN, Serve, agent_bin, dial_url, enrol, gpufleet, ok_stdout as ok, wait_for};

/// `gpufleet --db DB run ARGS`, output captured, not waited for.
fn spawn_run(db: &Path, args: &[&str]) -> Child {
    Command::new(BIN)
        .arg("--db")
        .arg(db)
        .arg("run")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn dial(addr: &str, name: &str, token: &str, pin: &str, state: &Path) -> Command {
    dial_url(&format!("https://{addr}"), name, token, pin, state)
}

/// A TCP relay whose connections can be cut (both sides shut down, new ones refused) and
/// restored: a link that drops without either end exiting.
struct Relay {
    addr: String,
    cut: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
    /// Connections relayed so far.
    relayed: Arc<std::sync::atomic::AtomicUsize>,
}

impl Relay {
    fn start(upstream: String) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let cut = Arc::new(AtomicBool::new(false));
        let open = Arc::new(Mutex::new(Vec::<TcpStream>::new()));
        let relayed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (c, o, n) = (cut.clone(), open.clone(), relayed.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(down) = conn else { continue };
                let up = match TcpStream::connect(&upstream) {
                    Ok(up) if !c.load(Ordering::SeqCst) => up,
                    _ => continue,
                };
                n.fetch_add(1, Ordering::SeqCst);
                let mut o = o.lock().unwrap();
                o.push(down.try_clone().unwrap());
                o.push(up.try_clone().unwrap());
                for (mut from, mut to) in [
                    (down.try_clone().unwrap(), up.try_clone().unwrap()),
                    (up, down),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(Shutdown::Both);
                    });
                }
            }
        });
        Relay {
            addr,
            cut,
            open,
            relayed,
        }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for s in self.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

fn attached(db: &Path) -> BTreeSet<String> {
    let out = ok(&gpufleet(db, &["agents", "list", "--json"]));
    let v: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    v.iter()
        .filter(|a| a["attached"] == true)
        .map(|a| a["name"].as_str().unwrap().to_string())
        .collect()
}

fn stored(db: &Path) -> usize {
    Store::open(db)
        .unwrap()
        .results(&ResultFilter::default())
        .unwrap()
        .len()
}

#[test]
fn dial_in_over_tls_loses_nothing_when_a_link_is_cut_and_an_agent_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    let (t1, t2) = (enrol(&db, "pod1"), enrol(&db, "pod2"));
    let serve = Serve::start(&db, dir.path());
    let relay = Relay::start(serve.fleet.clone());
    let (s1, s2) = (dir.path().join("state1"), dir.path().join("state2"));
    let mut a1 = dial(&relay.addr, "pod1", &t1, &serve.pin, &s1)
        .env("RUNPOD_POD_ID", "rp-pod1")
        .spawn()
        .unwrap();
    let mut a2 = dial(&serve.fleet, "pod2", &t2, &serve.pin, &s2)
        .spawn()
        .unwrap();
    wait_for("both agents to attach", 60, || attached(&db).len() == 2);
    assert_eq!(
        ok(&gpufleet(&db, &["agents", "list", "--check"]))
            .lines()
            .count(),
        4
    );

    let mut text = String::from(
        "name = \"quick\"\n[defaults]\nwarmup = 0\nmin_iterations = 2\nmin_seconds = 0.4\ntimeout_s = 60\ntarget_ci_pct = 0\n",
    );
    for i in 0..6 {
        text.push_str(&format!(
            "[[run]]\nkernel = \"vec_add\"\nparams = {{ n = {} }}\n",
            4096 + 1024 * i
        ));
    }
    let suite = dir.path().join("quick.toml");
    std::fs::write(&suite, text).unwrap();
    let suite = suite.display().to_string();
    let run = spawn_run(
        &db,
        &[
            "--agent",
            "pod1",
            "--agent",
            "pod2",
            "--backend",
            "cpu",
            "--suite",
            &suite,
        ],
    );

    wait_for("the first results", 90, || stored(&db) >= 2);
    relay.cut();
    a2.kill().unwrap(); // SIGKILL, maybe mid-run
    a2.wait().unwrap();
    std::thread::sleep(Duration::from_secs(3));
    relay.restore();
    let mut a2 = dial(&serve.fleet, "pod2", &t2, &serve.pin, &s2)
        .spawn()
        .unwrap();

    let out = run.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let store = Store::open(&db).unwrap();
    let jobs = store.jobs(1).unwrap();
    let results = store.results(&ResultFilter::default()).unwrap();
    assert_eq!(jobs.len(), 12, "6 runs x 2 agents");
    assert_eq!(results.len(), jobs.len(), "one result per planned job");
    let run_ids: BTreeSet<_> = results.iter().map(|r| r.record.run_id.clone()).collect();
    assert_eq!(run_ids.len(), results.len(), "no result stored twice");
    for r in &results {
        assert!(
            r.record.status == "ok" || !r.record.message.is_empty(),
            "a non-ok row says why: {:?}",
            r.record
        );
    }
    assert!(results.iter().all(|r| r.record.status == "ok"), "{stdout}");
    // The pod's id travels in the fingerprint of each of its results.
    let pods: BTreeSet<_> = results
        .iter()
        .map(|r| r.record.fingerprint["platform"]["runpod_pod_id"].to_string())
        .collect();
    assert_eq!(
        pods.len(),
        2,
        "pod1's results name its pod, pod2's none: {pods:?}"
    );
    // Every acknowledged result left the outboxes.
    wait_for("empty outboxes", 10, || {
        [&s1, &s2]
            .iter()
            .all(|s| std::fs::read_dir(s.join("outbox")).unwrap().count() == 0)
    });
    assert!(
        relay.relayed.load(Ordering::SeqCst) >= 2,
        "pod1 attached again after the cut"
    );
    let _ = a1.kill();
    let _ = a2.kill();
    let _ = (a1.wait(), a2.wait());
}

#[test]
fn a_vanished_agent_gets_the_grace_period_then_its_jobs_fail_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    let token = enrol(&db, "pod1");
    let serve = Serve::with_args(
        &db,
        &[
            "--fleet-listen",
            "127.0.0.1:0",
            "--tick-s",
            "0.5",
            "--grace-s",
            "2",
        ],
    );
    let fleet = serve.fleet.clone();
    let state = dir.path().join("state");
    let mut agent = dial_url(&format!("http://{fleet}"), "pod1", &token, "", &state)
        .spawn()
        .unwrap();
    wait_for("the agent to attach", 60, || attached(&db).len() == 1);
    // A schedule's run-now reaches a dial-in agent through the serve, like `run`.
    let suite = dir.path().join("one.toml");
    std::fs::write(&suite, "name = \"one\"\n[[run]]\nkernel = \"noop\"\n").unwrap();
    let suite = suite.display().to_string();
    let add = [
        "schedule",
        "add",
        "nightly",
        "--cron",
        "0 3 * * *",
        "--suite",
        &suite,
    ];
    ok(&gpufleet(
        &db,
        &[&add[..], &["--agent", "pod1", "--backend", "cpu"]].concat(),
    ));
    let report = ok(&gpufleet(
        &db,
        &["schedule", "run-now", "nightly", "--json"],
    ));
    let v: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert_eq!(v["report"]["results"], 1, "{report}");
    assert!(v["report"]["error"].is_null(), "{report}");
    // A run long enough to kill the agent in the middle of it.
    let run = spawn_run(
        &db,
        &[
            "--agent",
            "pod1",
            "--backend",
            "cpu",
            "--kernel",
            "vec_add",
            "--min-seconds",
            "3",
        ],
    );
    wait_for("the job to start", 60, || {
        let s = Store::open(&db).unwrap();
        s.jobs(2).is_ok_and(|j| j.iter().any(|j| j.attempts > 0))
    });
    agent.kill().unwrap();
    agent.wait().unwrap();
    let started = Instant::now();
    let out = run.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "the grace period was kept"
    );
    let results = Store::open(&db)
        .unwrap()
        .results(&ResultFilter::default())
        .unwrap();
    assert_eq!(results.len(), 2, "{results:?}");
    let m = &results[1].record.message;
    assert!(m.contains("grace period") && m.contains("pod1"), "{m}");
}

fn refused(mut cmd: Command) -> String {
    let out = cmd
        .stderr(Stdio::piped())
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[test]
fn wrong_pins_plaintext_and_unknown_agents_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    let token = enrol(&db, "pod1");
    let serve = Serve::start(&db, dir.path());
    let state = dir.path().join("state");

    let wrong = "ab".repeat(32);
    let e = refused(dial(&serve.fleet, "pod1", &token, &wrong, &state));
    assert!(e.contains("pin mismatch") && e.contains(&serve.pin), "{e}");

    let e = refused(dial_url(
        "http://10.255.0.1:7443",
        "pod1",
        &token,
        &serve.pin,
        &state,
    ));
    assert!(e.contains("plaintext"), "{e}");

    let e = refused(dial(&serve.fleet, "ghost", &token, &serve.pin, &state));
    assert!(e.contains("no dial-in agent named ghost"), "{e}");
    let e = refused(dial(
        &serve.fleet,
        "pod1",
        "wrong-token",
        &serve.pin,
        &state,
    ));
    assert!(e.contains("wrong token"), "{e}");

    ok(&gpufleet(&db, &["agents", "rm", "pod1"]));
    let e = refused(dial(&serve.fleet, "pod1", &token, &serve.pin, &state));
    assert!(e.contains("no dial-in agent named pod1"), "{e}");
    // Only a hash was ever stored.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let hashes: Vec<String> = conn
        .prepare("SELECT quote(token) || quote(token_hash) FROM agents")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(hashes.iter().all(|h| !h.contains(&token)), "{hashes:?}");
}

#[test]
fn serve_beyond_loopback_needs_tls_and_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    for (args, why) in [
        (vec!["--listen", "0.0.0.0:0"], "TLS"),
        (
            vec!["--listen", "127.0.0.1:0", "--fleet-listen", "0.0.0.0:0"],
            "TLS",
        ),
    ] {
        let out = gpufleet(&db, &[&["serve"][..], &args].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(why),
            "{args:?}: {err}"
        );
    }
    let tls = dir.path().join("tls").display().to_string();
    let out = gpufleet(
        &db,
        &["serve", "--listen", "0.0.0.0:0", "--tls-self-signed", &tls],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--read-token"),
        "{err}"
    );

    // With TLS and both tokens the API answers only with a token, and only over TLS.
    let strong = "0123456789abcdef-read";
    let admin = "0123456789abcdef-admin";
    let serve = Serve::with_args(
        &db,
        &[
            "--tls-self-signed",
            &tls,
            "--read-token",
            strong,
            "--admin-token",
            admin,
        ],
    );
    let addr = serve.http.clone();
    let plain = {
        let mut s = TcpStream::connect(&addr).unwrap();
        let _ = write!(
            s,
            "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        );
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).to_string()
    };
    assert!(
        !plain.contains("\"status\""),
        "plaintext HTTP answered: {plain}"
    );
}

#[test]
fn direct_agents_over_tls_are_pinned_and_plaintext_tokens_stay_home() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    let (tls, _) =
        gpufleet_coordinator::tls::ServeTls::self_signed(&dir.path().join("tls"), &[]).unwrap();
    let pin = tls.fingerprint().unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let token = "0123456789abcdef-direct";
    let mut agent = Command::new(agent_bin())
        .args(["--listen", &format!("127.0.0.1:{port}"), "--token", token])
        .arg("--tls-cert")
        .arg(dir.path().join("tls/server.crt"))
        .arg("--tls-key")
        .arg(dir.path().join("tls/server.key"))
        .env(
            "GPUFLEET_CACHE_DIR",
            std::env::temp_dir().join("gpufleet-test-cache"),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the agent to listen", 60, || {
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let url = format!("https://127.0.0.1:{port}");
    ok(&gpufleet(
        &db,
        &[
            "agents",
            "add",
            "rig",
            &url,
            "--token",
            token,
            "--pin-sha256",
            &pin,
        ],
    ));
    let info = ok(&gpufleet(&db, &["describe", "rig", "--json"]));
    assert!(info.contains("\"devices\""), "{info}");
    let wrong = "cd".repeat(32);
    ok(&gpufleet(
        &db,
        &[
            "agents",
            "add",
            "mitm",
            &url,
            "--token",
            token,
            "--pin-sha256",
            &wrong,
        ],
    ));
    let out = gpufleet(&db, &["describe", "mitm"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("pin mismatch"),
        "{err}"
    );
    ok(&gpufleet(
        &db,
        &[
            "agents",
            "add",
            "far",
            "http://10.255.0.1:50051",
            "--token",
            token,
        ],
    ));
    let out = gpufleet(&db, &["describe", "far"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("plaintext"), "{err}");
    // The check says which agents are unreachable and exits 1.
    let out = gpufleet(&db, &["agents", "list", "--check"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("ok ("), "{text}");
    let _ = agent.kill();
    let _ = agent.wait();
}

/// Given several coordinators, an agent whose first is down attaches to the next, and when that
/// one's link is cut it goes on to the other in turn (here the relay to the same serve): no
/// coordinator is a single point of failure for the agent.
#[test]
fn an_agent_given_several_coordinators_attaches_to_a_live_one() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    let serve = Serve::start(&db, dir.path());
    let token = enrol(&db, "rig");
    // Nobody listens at the first URL.
    let dead = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let relay = Relay::start(serve.fleet.clone());
    let mut agent = dial(&dead, "rig", &token, &serve.pin, &dir.path().join("state"));
    agent.args(["--connect", &format!("https://{}", relay.addr)]);
    let mut agent = agent.spawn().unwrap();
    wait_for("the agent attached through the second URL", 30, || {
        attached(&db).contains("rig")
    });
    assert_eq!(relay.relayed.load(Ordering::SeqCst), 1);
    // The second goes down too: the agent tries the first (still dead), then the second again.
    relay.cut();
    wait_for("the link noticed as cut", 30, || {
        !attached(&db).contains("rig")
    });
    relay.restore();
    wait_for("the agent attached again", 60, || {
        attached(&db).contains("rig")
    });
    assert!(relay.relayed.load(Ordering::SeqCst) >= 2);
    let _ = agent.kill();
    let _ = agent.wait();
}
