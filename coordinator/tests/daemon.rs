//! The schedule daemon with real agents on loopback and a real SQLite file: schedules fired
//! by an injected clock, a campaign that survives SIGKILL of its coordinator, an agent killed
//! mid-campaign, the HTTP API and `regressions --fail-on`.

use gpufleet_coordinator::db::Db;
use gpufleet_coordinator::schedule::{Daemon, DaemonConfig};
use gpufleet_coordinator::store::{ResultFilter, Store};
use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
use common::{BIN, Proc, Quiet, gpufleet, http_get, ok_stdout as ok, spawn_quiet};

/// A suite of `n` quick CPU runs, each measured for `seconds`.
fn suite(dir: &Path, n: usize, seconds: f64) -> PathBuf {
    let mut text = format!(
        "name = \"quick\"\ndescription = \"test\"\n[defaults]\nwarmup = 0\nmin_iterations = 2\n\
         min_seconds = {seconds}\nmax_iterations = 100000\ntimeout_s = 60\ntarget_ci_pct = 0\n"
    );
    for i in 0..n {
        text.push_str(&format!(
            "[[run]]\nkernel = \"vec_add\"\nparams = {{ n = {} }}\n",
            4096 + 1024 * i
        ));
    }
    let path = dir.join("quick.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn add_schedule(db: &Path, name: &str, cron: &str, suite: &Path, extra: &[&str]) {
    let mut args = vec![
        "schedule",
        "add",
        name,
        "--cron",
        cron,
        "--suite",
        suite.to_str().unwrap(),
        "--backend",
        "cpu",
    ];
    args.extend_from_slice(extra);
    ok(&gpufleet(db, &args));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_fires_once_per_slot_with_an_injected_clock() {
    let agent = Proc::agent(false);
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join("fleet.db");
    let quick = suite(dir.path(), 2, 0.01);
    ok(&gpufleet(
        &db_path,
        &["agents", "add", "rig", &agent.url.clone()],
    ));
    add_schedule(
        &db_path,
        "nightly",
        "0 3 * * *",
        &quick,
        &["--agent", "rig"],
    );
    // A schedule added now never fires for slots before it existed: start its clock in 2030.
    let db = Db::open(&db_path).unwrap();
    db.with(|s| s.pass_slot("nightly", 1_893_456_000.0))
        .unwrap(); // 2030-01-01 00:00
    let daemon = Daemon::new(db.clone(), DaemonConfig::default(), Arc::new(Quiet));
    let day = 86_400.0;
    let slot = 1_893_456_000.0 + 3.0 * 3600.0; // 2030-01-01 03:00 UTC

    assert!(
        daemon.tick(slot - 60.0).await.unwrap().is_empty(),
        "02:59: not yet"
    );
    let started = daemon.tick(slot + 2.0).await.unwrap();
    assert_eq!(started.len(), 1, "03:00:02 fires");
    // Ticks during the run and after it never fire the same slot again.
    assert!(daemon.tick(slot + 30.0).await.unwrap().is_empty());
    let reports = daemon.wait_idle().await;
    assert_eq!(reports.len(), 1);
    assert!(reports[0].error.is_none(), "{:?}", reports[0]);
    assert_eq!(reports[0].results, 2);
    assert!(daemon.tick(slot + 90.0).await.unwrap().is_empty());

    // A second coordinator on the same file (or this one restarted) agrees.
    let other = Daemon::new(
        Db::open(&db_path).unwrap(),
        DaemonConfig::default(),
        Arc::new(Quiet),
    );
    assert!(other.tick(slot + 100.0).await.unwrap().is_empty());

    // Down from day 1 to day 4 at 10:00: the latest missed slot runs once at start.
    let later = slot + 3.0 * day + 7.0 * 3600.0;
    let started = other.tick(later).await.unwrap();
    assert_eq!(started.len(), 1);
    assert!(other.tick(later + 1.0).await.unwrap().is_empty());
    other.wait_idle().await;
    let campaigns = db.with(|s| s.campaigns()).unwrap();
    assert_eq!(campaigns.len(), 2, "one campaign per fired slot");
    assert!(campaigns.iter().all(|c| c.state.name() == "done"));
    let results = db.with(|s| s.results(&ResultFilter::default())).unwrap();
    assert_eq!(results.len(), 4);
    assert!(results.iter().all(|r| r.record.status == "ok"));

    // With catch-up off, a missed slot is passed over instead.
    ok(&gpufleet(&db_path, &["schedule", "rm", "nightly"]));
    add_schedule(
        &db_path,
        "strict",
        "0 3 * * *",
        &quick,
        &["--agent", "rig", "--no-catch-up"],
    );
    db.with(|s| s.pass_slot("strict", later)).unwrap();
    assert!(
        other.tick(later + 5.0 * day).await.unwrap().is_empty(),
        "missed slot passed over"
    );
    assert_eq!(db.with(|s| s.campaigns()).unwrap().len(), 2);
    let row = db.with(|s| s.schedule("strict")).unwrap().unwrap();
    assert!(row.last_slot.unwrap() > later + 4.0 * day);
}

/// Counts results and jobs of campaign `id` straight from the file.
fn campaign_counts(db: &Path, id: i64) -> (i64, i64, i64, String) {
    let store = Store::open(db).unwrap();
    let c = store.campaign(id).unwrap().unwrap();
    let jobs = store.jobs(id).unwrap();
    // One read of the results (the campaign's counts are a separate read, and a serve may be
    // storing results between the two).
    let run_ids: Vec<String> = store
        .results(&ResultFilter {
            campaign_id: Some(id),
            ..Default::default()
        })
        .unwrap()
        .into_iter()
        .map(|r| r.record.run_id)
        .collect();
    let unique: BTreeSet<&String> = run_ids.iter().collect();
    assert_eq!(unique.len(), run_ids.len(), "run ids are unique");
    let results = run_ids.len() as i64;
    (
        jobs.len() as i64,
        results,
        jobs.iter().filter(|j| j.state.name() == "done").count() as i64,
        c.state.name().to_string(),
    )
}

#[test]
fn a_campaign_survives_sigkill_of_its_coordinator() {
    let agent = Proc::agent(false);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    let quick = suite(dir.path(), 8, 0.4);
    ok(&gpufleet(
        &db,
        &["agents", "add", "rig", &agent.url.clone()],
    ));
    add_schedule(&db, "nightly", "0 3 * * *", &quick, &["--agent", "rig"]);

    // `run-now` executes the campaign in its own process; kill it after two results.
    let mut first = spawn_quiet(&db, &["schedule", "run-now", "nightly"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let n = Store::open(&db)
            .unwrap()
            .campaign(1)
            .unwrap()
            .map(|c| c.results.values().sum::<i64>())
            .unwrap_or(0);
        if n >= 2 {
            break;
        }
        assert!(Instant::now() < deadline, "no results within a minute");
        std::thread::sleep(Duration::from_millis(50));
    }
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();
    let (jobs, before, _, state) = campaign_counts(&db, 1);
    assert_eq!(state, "running", "killed mid-run: still marked running");
    assert!(before >= 2 && before < jobs, "{before} of {jobs}");

    // A new coordinator sees the owner is dead and resumes the campaign.
    let mut cmd = Command::new(BIN);
    cmd.arg("--db")
        .arg(&db)
        .args(["serve", "--listen", "127.0.0.1:0", "--tick-s", "0.2"]);
    let mut serve = Proc::start(cmd);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (jobs, results, done, state) = campaign_counts(&db, 1);
        if state == "done" {
            assert_eq!(jobs, 8, "no job added twice");
            assert_eq!(results, 8, "one result per job, none lost, none twice");
            assert_eq!(done, 8);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not resumed: {state} {results}/{jobs}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The health endpoint answers while it runs; SIGTERM stops it cleanly.
    let health = http_get(&serve.addr, "/healthz");
    assert!(health.contains("\"status\":\"ok\""), "{health}");
    let campaigns = http_get(&serve.addr, "/api/campaigns");
    assert!(campaigns.contains("\"state\":\"done\""), "{campaigns}");
    let missing = http_get(&serve.addr, "/api/campaigns/99");
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
    serve.signal("-TERM");
    let status = serve.child.wait().unwrap();
    assert!(status.success(), "{status:?}");

    let store = Store::open(&db).unwrap();
    assert_eq!(store.integrity_check().unwrap(), "ok");
    let results = store.results(&ResultFilter::default()).unwrap();
    assert_eq!(results.len(), 8);
    assert!(results.iter().all(|r| r.record.status == "ok"));
    let keys: BTreeSet<_> = results.iter().map(|r| r.record.spec_key.clone()).collect();
    assert_eq!(keys.len(), 8, "each job's result exactly once");
}

#[test]
fn a_killed_agent_yields_errors_while_the_other_completes_and_regressions_fail_ci() {
    let good = Proc::agent(false);
    let mut doomed = Proc::agent(false);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    let quick = suite(dir.path(), 6, 0.3);
    ok(&gpufleet(
        &db,
        &["agents", "add", "good", &good.url.clone()],
    ));
    ok(&gpufleet(
        &db,
        &["agents", "add", "doomed", &doomed.url.clone()],
    ));
    add_schedule(
        &db,
        "nightly",
        "0 3 * * *",
        &quick,
        &[
            "--all",
            "--env-set",
            "base:",
            "--env-set",
            "pocl:POCL_DEBUG=0",
        ],
    );
    let mut run = Command::new(BIN)
        .arg("--db")
        .arg(&db)
        .args(["schedule", "run-now", "nightly", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Store::open(&db)
        .unwrap()
        .results(&ResultFilter::default())
        .unwrap()
        .iter()
        .all(|r| r.agent != "doomed")
    {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(50));
    }
    doomed.kill();
    let mut out = String::new();
    run.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    run.wait().unwrap();
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["report"]["campaign_id"], 1, "{out}");

    let store = Store::open(&db).unwrap();
    let results = store.results(&ResultFilter::default()).unwrap();
    let good_rows: Vec<_> = results.iter().filter(|r| r.agent == "good").collect();
    let doomed_rows: Vec<_> = results.iter().filter(|r| r.agent == "doomed").collect();
    assert_eq!(good_rows.len(), 12, "6 runs x 2 env sets");
    assert!(good_rows.iter().all(|r| r.record.status == "ok"));
    assert_eq!(doomed_rows.len(), 12, "every job has a row");
    assert!(
        doomed_rows.iter().any(|r| r.record.status == "unreachable"
            && r.record.message.starts_with("agent unreachable")),
        "the killed agent's remaining jobs are unreachable"
    );
    // Each env set is its own series.
    let sets: BTreeSet<_> = good_rows
        .iter()
        .map(|r| r.record.spec_key.rsplit('@').next().unwrap().to_string())
        .collect();
    assert_eq!(sets, BTreeSet::from(["base".into(), "pocl".into()]));
    assert_eq!(store.campaign(1).unwrap().unwrap().state.name(), "failed");
    assert_eq!(store.integrity_check().unwrap(), "ok");

    // No history yet: no verdict, no alert, and CI passes.
    let out = gpufleet(&db, &["regressions", "--all", "--fail-on", "regression"]);
    let text = ok(&out);
    assert!(text.contains("no confirmed regressions"), "{text}");
    assert!(text.contains("no_verdict"), "{text}");
}
