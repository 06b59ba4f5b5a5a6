//! End to end over real loopback gRPC: the `gpufleet` CLI → agent process →
//! worker processes → results in a real SQLite file.

use gpufleet_coordinator::campaign::{
    CampaignOptions, CampaignRequest, RetryPolicy, Selection, run_campaign,
};
use gpufleet_coordinator::db::Db;
use gpufleet_coordinator::store::{ResultFilter, Store};
use gpufleet_kernels::{PartialSettings, SuiteRun};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

mod common;
use common::{BIN, Proc, Quiet, gpufleet, ok_stdout, spawn_quiet};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn tmp_db() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.db");
    (dir, path)
}

#[test]
fn suite_run_compare_and_results_through_the_cli() {
    let agent = Proc::agent(false);
    let (_dir, db) = tmp_db();
    ok_stdout(&gpufleet(&db, &["agents", "add", "rig1", &agent.url]));
    let described = ok_stdout(&gpufleet(&db, &["describe", "rig1"]));
    assert!(
        described.contains("cpu:0") && described.contains("cpu      available"),
        "{described}"
    );

    let out = gpufleet(
        &db,
        &[
            "run",
            "--suite",
            "smoke",
            "--agent",
            "rig1",
            "--backend",
            "cpu",
            "--kernel",
            "gemm",
            "--kernel",
            "softmax",
            "--json",
        ],
    );
    let results: serde_json::Value = serde_json::from_str(&ok_stdout(&out)).unwrap();
    let results = results.as_array().unwrap();
    assert_eq!(results.len(), 4, "3 gemm variants + softmax: {results:#?}");
    for r in results {
        for field in [
            "kernel", "variant", "device", "backend", "status", "message", "metric",
        ] {
            assert!(r.get(field).is_some(), "{field} missing in {r}");
        }
        assert_eq!(r["status"], "ok", "{r}");
        assert!(r["metric"]["value"].as_f64().unwrap() > 0.0);
    }

    // The same rows are in the database, with raw samples.
    let store = Store::open(&db).unwrap();
    let rows = store
        .results(&ResultFilter {
            with_samples: true,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(rows.len(), 4);
    assert!(rows.iter().all(|r| r.record.times.len() as u64 == r.record.iterations && r.record.iterations >= 1));
    assert_eq!(store.integrity_check().unwrap(), "ok");
    let campaign = rows[0].record.campaign_id.unwrap();
    drop(store);

    let cmp: serde_json::Value = serde_json::from_str(&ok_stdout(&gpufleet(
        &db,
        &["compare", "--kernel", "gemm", "--format", "json"],
    )))
    .unwrap();
    assert_eq!(cmp.as_array().unwrap().len(), 3);
    let table = ok_stdout(&gpufleet(&db, &["compare", "--suite", "smoke"]));
    assert!(table.lines().any(|l| l.starts_with("kernel")), "{table}");
    for fmt in ["md", "csv"] {
        assert!(ok_stdout(&gpufleet(&db, &["compare", "--format", fmt])).contains("gemm"));
    }
    let res: serde_json::Value = serde_json::from_str(&ok_stdout(&gpufleet(
        &db,
        &[
            "results",
            "--campaign",
            &campaign.to_string(),
            "--format",
            "json",
        ],
    )))
    .unwrap();
    assert_eq!(res.as_array().unwrap().len(), 4);
    let listed = ok_stdout(&gpufleet(&db, &["agents", "list", "--json"]));
    assert!(
        listed.contains("rig1") && !listed.contains("token\""),
        "{listed}"
    );
}

#[test]
fn adhoc_runs_and_debug_kernels_are_stored_with_their_status() {
    let agent = Proc::agent(true);
    let (_dir, db) = tmp_db();
    ok_stdout(&gpufleet(&db, &["agents", "add", "rig1", &agent.url]));
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "--agent",
            "rig1",
            "--backend",
            "cpu",
            "--json",
            "--min-seconds",
            "0.01",
            "--min-iterations",
            "2",
        ];
        args.extend_from_slice(extra);
        let out = gpufleet(&db, &args);
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
        (out.status.code(), v[0].clone())
    };
    let (code, r) = run(&[
        "--kernel",
        "gemm",
        "--variant",
        "tiled",
        "--param",
        "m=96",
        "--param",
        "n=64",
        "--param",
        "k=80",
        "--backend",
        "cpu",
        "--timeout-s",
        "30",
    ]);
    assert_eq!((code, r["status"].as_str()), (Some(0), Some("ok")), "{r}");
    assert_eq!(r["params"]["m"], 96);
    assert_eq!(r["variant"], "tiled");
    let (code, r) = run(&["--kernel", "debug_crash"]);
    assert_eq!(
        (code, r["status"].as_str()),
        (Some(1), Some("crashed")),
        "{r}"
    );
    assert!(
        r["stderr_tail"]
            .as_str()
            .unwrap()
            .contains("crashing on purpose")
    );
    let (_, r) = run(&["--kernel", "debug_hang", "--timeout-s", "1"]);
    assert_eq!(r["status"], "timed_out", "{r}");
    let (_, r) = run(&["--kernel", "debug_wrong"]);
    assert_eq!(r["status"], "invalid", "{r}");
    // An override the agent would refuse is refused before a campaign is made (exit 2).
    let out = gpufleet(
        &db,
        &[
            "run",
            "--agent",
            "rig1",
            "--kernel",
            "vec_add",
            "--env",
            "LD_PRELOAD=/x.so",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("env key `LD_PRELOAD` is not allowed"),
        "{}",
        stderr(&out)
    );
    // The agent still answers normally.
    let (code, r) = run(&["--kernel", "noop"]);
    assert_eq!((code, r["status"].as_str()), (Some(0), Some("ok")), "{r}");
    let rows = Store::open(&db)
        .unwrap()
        .results(&ResultFilter::default())
        .unwrap();
    let statuses: Vec<&str> = rows.iter().map(|r| r.record.status.as_str()).collect();
    assert_eq!(statuses, ["ok", "crashed", "timed_out", "invalid", "ok"]);
}

#[test]
fn bad_input_gets_clear_errors() {
    let (dir, db) = tmp_db();
    let fail = |args: &[&str], needle: &str| {
        let out = gpufleet(&db, args);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(
            stderr(&out).contains(needle),
            "{args:?}: `{needle}` not in {}",
            stderr(&out)
        );
    };
    // An agent that is not there.
    fail(&["describe", "http://127.0.0.1:9"], "cannot reach agent");
    ok_stdout(&gpufleet(
        &db,
        &["agents", "add", "gone", "http://127.0.0.1:9"],
    ));
    fail(
        &["run", "--agent", "gone", "--kernel", "noop"],
        "cannot reach agent gone",
    );
    fail(
        &["run", "--agent", "nobody", "--kernel", "noop"],
        "no agent named `nobody`",
    );
    fail(&["agents", "add", "gone", "http://127.0.0.1:10"], "gone");
    fail(&["agents", "add", "x", "ftp://host"], "url");
    // Specs refused before any agent is contacted.
    fail(
        &["run", "--agent", "gone", "--kernel", "gemmm"],
        "unknown kernel `gemmm`",
    );
    // An ad-hoc gemm with one bad argument.
    let fail_gemm = |extra: &[&str], needle: &str| {
        let mut args = vec!["run", "--agent", "gone", "--kernel", "gemm"];
        args.extend_from_slice(extra);
        fail(&args, needle);
    };
    fail_gemm(&["--variant", "fast"], "variant");
    fail_gemm(&["--param", "m=0"], "m=0");
    fail_gemm(&["--param", "n=1000000000"], "n=1000000000");
    fail_gemm(&["--param", "m=-3"], "m=-3");
    fail_gemm(&["--param", "m=big"], "integer");
    // A malformed suite file names file, line and field.
    let suite = dir.path().join("mine.toml");
    std::fs::write(
        &suite,
        "name = \"mine\"\n\n[[run]]\nkernel = \"gemm\"\nparams = { m = 0 }\n",
    )
    .unwrap();
    let out = gpufleet(
        &db,
        &["run", "--suite", suite.to_str().unwrap(), "--agent", "gone"],
    );
    let e = stderr(&out);
    assert!(!out.status.success());
    assert!(
        e.contains("mine.toml") && e.contains(":5") && e.contains("m"),
        "{e}"
    );
    std::fs::write(&suite, "name = \"mine\"\n[[run]]\nkernal = \"gemm\"\n").unwrap();
    let e = stderr(&gpufleet(
        &db,
        &["run", "--suite", suite.to_str().unwrap(), "--agent", "gone"],
    ));
    assert!(e.contains("mine.toml") && e.contains("kernal"), "{e}");
}

#[test]
fn databases_that_are_not_ours_are_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("notes.db");
    std::fs::write(&junk, b"these are my benchmark notes, not a database\n").unwrap();
    let before = std::fs::read(&junk).unwrap();
    let out = gpufleet(&junk, &["agents", "list"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("not an SQLite file"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read(&junk).unwrap(), before);

    let newer = dir.path().join("newer.db");
    drop(Store::open(&newer).unwrap());
    {
        let c = rusqlite::Connection::open(&newer).unwrap();
        c.pragma_update(None, "user_version", 999).unwrap();
    }
    let before = std::fs::read(&newer).unwrap();
    let out = gpufleet(&newer, &["results"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("999"), "{}", stderr(&out));
    assert_eq!(std::fs::read(&newer).unwrap(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_dying_mid_campaign_loses_only_its_jobs() {
    let mut doomed = Proc::agent(false);
    let healthy = Proc::agent(false);
    let (_dir, path) = tmp_db();
    let db = Db::open(&path).unwrap();
    let a = db
        .with(|s| s.add_agent("doomed", &doomed.url, None))
        .unwrap();
    let b = db
        .with(|s| s.add_agent("healthy", &healthy.url, None))
        .unwrap();
    // Four jobs of ~0.6 s each per agent.
    let runs: Vec<SuiteRun> = (0..4)
        .map(|i| SuiteRun {
            kernel: "vec_add".into(),
            variants: None,
            params: BTreeMap::from([("n".to_string(), (1 << 20) + i)]),
            dtype: gpufleet_kernels::Dtype::F32,
            mode: gpufleet_kernels::Mode::ComputeOnly,
            settings: PartialSettings {
                warmup: Some(1),
                min_iterations: Some(2),
                min_seconds: Some(0.6),
                max_iterations: Some(100_000),
                timeout_s: Some(30.0),
                // A fixed length: the test kills an agent while these run.
                target_ci_pct: Some(0.0),
                max_seconds: Some(0.6),
            },
            env: BTreeMap::new(),
        })
        .collect();
    let req = CampaignRequest {
        suite: "dying".into(),
        description: "test".into(),
        runs,
        agents: vec![a, b],
        selection: Selection {
            options: CampaignOptions {
                backends: vec!["cpu".into()],
                ..Default::default()
            },
            ..Default::default()
        },
        retry: RetryPolicy {
            retries: 1,
            backoff: Duration::from_millis(100),
            ..RetryPolicy::default()
        },
    };
    let db2 = db.clone();
    let campaign = tokio::spawn(async move { run_campaign(&db2, req, Arc::new(Quiet)).await });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    doomed.kill();
    let outcome = campaign.await.unwrap().expect("the campaign finishes");
    assert_eq!(outcome.results.len(), 8);
    let rows = db
        .with(|s| {
            s.results(&ResultFilter {
                campaign_id: Some(outcome.campaign_id),
                ..Default::default()
            })
        })
        .unwrap();
    assert_eq!(rows.len(), 8, "every job has exactly one stored result");
    let healthy_rows: Vec<_> = rows.iter().filter(|r| r.agent == "healthy").collect();
    assert!(
        healthy_rows.iter().all(|r| r.record.status == "ok"),
        "{healthy_rows:#?}"
    );
    let lost: Vec<_> = rows
        .iter()
        .filter(|r| r.agent == "doomed" && r.record.status == "unreachable")
        .collect();
    assert!(
        !lost.is_empty(),
        "the killed agent's remaining jobs are unreachable"
    );
    assert!(
        lost.iter()
            .all(|r| r.record.message.contains("agent unreachable")),
        "{lost:#?}"
    );
    assert_eq!(db.with(|s| s.integrity_check()).unwrap(), "ok");
}

/// `gpufleet demo`: the smoke suite on every local backend, all ok, one column per backend's
/// device; every noisy result (robust spread above 12.5% or a wide interval) is marked (`~`) in
/// the table and in the store, and a long tail alone does not make one noisy.
#[test]
fn demo_runs_the_smoke_suite_all_ok() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .arg("demo")
        .env("GPUFLEET_CACHE_DIR", dir.path().join("cache"))
        .current_dir(dir.path())
        .output()
        .unwrap();
    let table = ok_stdout(&out);
    let db = dir.path().join("gpufleet.db");
    assert!(db.exists());
    let lines: Vec<&str> = table.lines().collect();
    let dashes = lines.iter().position(|l| l.starts_with("---")).unwrap();
    let header = lines[dashes - 1];
    let rows: Vec<&str> = lines[dashes + 1..]
        .iter()
        .take_while(|l| !l.is_empty())
        .copied()
        .collect();
    assert!(rows.len() >= 16, "a row per kernel and variant: {table}");
    // All ok: a cell that is not ok shows its status and a footnote number.
    for r in &rows {
        assert!(!r.contains(" ["), "a failed cell: {r}\n{table}");
    }
    // Every local backend the demo found ran the suite: a column each.
    let found = String::from_utf8_lossy(&out.stderr);
    for b in ["cpu", "opencl", "vulkan"] {
        if found.contains(&format!("backend {b:<8} available")) {
            assert!(
                header.contains(&format!("{b}:")),
                "{b} available but no column: {table}"
            );
        }
    }
    for k in ["gemm", "conv2d", "softmax", "memlat_cpu", "triad", "noop"] {
        assert!(table.contains(k), "{k} missing: {table}");
    }
    // The store's flag follows the robust figures each result carries, and the table shows `~`
    // for each noisy result.
    let results: Vec<serde_json::Value> =
        serde_json::from_str(&ok_stdout(&gpufleet(&db, &["results", "--json"]))).unwrap();
    let mut noisy = 0;
    for r in &results {
        let f = |k: &str| r[k].as_f64();
        let figures = gpufleet_kernels::NoiseFigures::of(
            f("robust_cv"),
            Some((f("p25_s").unwrap(), f("p75_s").unwrap())),
            f("median_s"),
            gpufleet_kernels::ci_pct(
                f("ci_low_s").unwrap(),
                f("ci_high_s").unwrap(),
                f("median_s").unwrap(),
            ),
            f("target_ci_pct"),
        );
        assert_eq!(r["noisy"], figures.is_noisy(), "{r}");
        assert!(r["outliers_high"].as_u64().is_some(), "{r}");
        assert!(r["config"]["warmup_iterations"].as_str().is_some(), "{r}");
        noisy += usize::from(r["noisy"] == true);
        assert!(
            r["ci_low_s"].as_f64().is_some(),
            "every result has its interval: {r}"
        );
    }
    let marks: usize = rows.iter().map(|r| r.matches('~').count()).sum();
    assert_eq!(marks, noisy, "{table}");
    if noisy > 0 {
        assert!(table.contains("~ noisy: robust or quartile CV"), "{table}");
    }
}

/// Children of `pid`, from /proc.
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // Field 4 (after the parenthesised command) is the parent pid.
        let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        if after
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok())
            == Some(pid)
        {
            out.push(child);
        }
    }
    out
}

#[test]
fn a_hung_worker_dies_with_its_agent() {
    let mut agent = Proc::agent(true);
    let (_dir, db) = tmp_db();
    ok_stdout(&gpufleet(&db, &["agents", "add", "rig1", &agent.url]));
    let mut run = spawn_quiet(
        &db,
        &[
            "run",
            "--agent",
            "rig1",
            "--kernel",
            "debug_hang",
            "--timeout-s",
            "120",
        ],
    );
    let agent_pid = agent.child.id();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let workers = loop {
        let w = children_of(agent_pid);
        if !w.is_empty() || std::time::Instant::now() > deadline {
            break w;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!workers.is_empty(), "the hang run started a worker");
    agent.kill();
    let gone = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        workers.iter().all(|w| {
            std::fs::read_to_string(format!("/proc/{w}/stat"))
                .map(|s| {
                    s.rsplit_once(')')
                        .map(|(_, r)| r.trim_start().starts_with('Z'))
                        .unwrap_or(true)
                })
                .unwrap_or(true)
        })
    });
    assert!(gone, "worker {workers:?} outlived its agent");
    // The coordinator records the lost run instead of hanging.
    let status = run.wait().unwrap();
    assert_eq!(status.code(), Some(1));
    let rows = Store::open(&db)
        .unwrap()
        .results(&ResultFilter::default())
        .unwrap();
    assert_eq!(rows[0].record.status, "unreachable");
    assert!(
        rows[0].record.message.contains("agent unreachable"),
        "{}",
        rows[0].record.message
    );
}

/// A peer that accepts TCP and never speaks is unreachable after the connect timeout, not after a
/// request deadline (a probe once waited 30 s).
#[test]
fn a_silent_peer_is_unreachable_within_the_connect_timeout() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accept and hold every connection, answering nothing.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
        }
    });
    let (_dir, db) = tmp_db();
    let url = format!("http://127.0.0.1:{port}");
    ok_stdout(&gpufleet(&db, &["agents", "add", "silent", &url]));
    let started = std::time::Instant::now();
    let out = gpufleet(&db, &["--connect-timeout-s", "1", "describe", "silent"]);
    let took = started.elapsed();
    assert!(!out.status.success(), "describe of a silent peer succeeded");
    let err = stderr(&out);
    assert!(
        err.contains("silent") && err.contains("connect timeout"),
        "{err}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let out = gpufleet(&db, &["--connect-timeout-s", "0", "describe", "silent"]);
    assert!(
        stderr(&out).contains("connect-timeout-s"),
        "{}",
        stderr(&out)
    );
}

/// `agents add` refuses a malformed URL, a port out of range and a bad token at once, each naming
/// its own field, and stores nothing.
#[test]
fn agents_add_checks_url_port_and_token_at_once() {
    let (_dir, db) = tmp_db();
    let cases: [(&[&str], &str); 3] = [
        (&["agents", "add", "a", "http://[::1:50051"], "url"),
        (
            &["agents", "add", "a", "http://127.0.0.1:99999"],
            "1..=65535",
        ),
        (
            &[
                "agents",
                "add",
                "a",
                "http://127.0.0.1:50051",
                "--token",
                "bad token",
            ],
            "token",
        ),
    ];
    for (args, needle) in cases {
        let out = gpufleet(&db, args);
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(err.contains(needle), "{args:?}: {err}");
        if needle == "token" {
            assert!(!err.contains("url"), "a bad token blamed on the url: {err}");
        }
    }
    let listed = ok_stdout(&gpufleet(&db, &["agents", "list", "--json"]));
    assert_eq!(listed.trim(), "[]", "nothing stored: {listed}");
}
