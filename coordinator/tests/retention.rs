//! A year of results kept small and safe: compaction leaves the regression check's verdicts as
//! they were, and a backup taken while a campaign writes holds everything committed before it.

use std::collections::BTreeMap;

use gpufleet_coordinator::regression::check::assess_new;
use gpufleet_coordinator::regression::detect::DetectConfig;
use gpufleet_coordinator::store::{NewJob, ResultFilter, Retention, Store};
use gpufleet_coordinator::web::seed::{SeedConfig, seed_history};

mod common;
use common::{Proc, gpufleet, ok_stdout, spawn_quiet};

/// One more night on every series of `store`: each result as its series' latest, one series 25%
/// slower; returns the verdict of each new result by run id.
fn next_night_verdicts(store: &mut Store) -> BTreeMap<String, String> {
    let latest = store
        .results(&ResultFilter {
            latest_per_device_and_key: true,
            status: Some("ok".into()),
            ..ResultFilter::default()
        })
        .unwrap();
    let campaign = store
        .create_campaign("nightly", "one more night", "{}")
        .unwrap();
    let mut runs = Vec::new();
    for (i, row) in latest.iter().enumerate() {
        let run_id = format!("next-{i}");
        let mut r = row.record.clone();
        let job = store
            .add_job(&NewJob {
                campaign_id: campaign,
                agent_id: r.agent_id,
                device_row_id: r.device_row_id,
                spec_key: r.spec_key.clone(),
                spec_json: "{}".into(),
                run_id: run_id.clone(),
            })
            .unwrap();
        r.run_id = run_id.clone();
        r.campaign_id = Some(campaign);
        r.job_id = Some(job);
        r.created_at = r.created_at.map(|t| t + 86_400.0);
        r.metric_value = r.metric_value.map(|v| if i == 0 { v * 0.75 } else { v });
        assert!(store.insert_result(&r).unwrap());
        runs.push(run_id);
    }
    let mut n = 0;
    let mut next_id = move || {
        n += 1;
        format!("confirm-{n}")
    };
    assess_new(
        store,
        Some(campaign),
        &DetectConfig::default(),
        &mut next_id,
    )
    .unwrap();
    let checks = store.checks(0.0).unwrap();
    let ids: BTreeMap<i64, String> = store
        .results(&ResultFilter {
            campaign_id: Some(campaign),
            ..ResultFilter::default()
        })
        .unwrap()
        .into_iter()
        .map(|r| (r.id, r.record.run_id))
        .collect();
    checks
        .into_iter()
        .filter_map(|c| ids.get(&c.result_id).map(|run| (run.clone(), c.verdict)))
        .collect()
}

#[test]
fn compaction_leaves_every_verdict_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let whole_path = dir.path().join("whole.db");
    let mut whole = Store::open(&whole_path).unwrap();
    let cfg = SeedConfig {
        agents: 2,
        specs: 3,
        nights: 40,
        regression_at: Some(30),
        power_every: 7,
        ..SeedConfig::default()
    };
    seed_history(&mut whole, &cfg).unwrap();
    let compacted_path = dir.path().join("compacted.db");
    whole.backup_to(&compacted_path, |_, _| {}).unwrap();
    let mut compacted = Store::open(&compacted_path).unwrap();
    // Everything is old and no baseline is protected: the harshest compaction there is.
    let report = compacted
        .compact(
            &Retention {
                samples_before: Some(f64::MAX),
                power_before: Some(f64::MAX),
                keep_last: 0,
            },
            &mut |_| {},
        )
        .unwrap();
    assert!(report.samples_dropped > 600, "{report:?}");
    assert!(report.power_dropped > 50, "{report:?}");
    assert!(report.kept >= 1, "the alert's results: {report:?}");
    compacted.vacuum().unwrap();
    // Every alert's results are whole; every summary is kept.
    for alert in compacted.alerts(0.0).unwrap() {
        for id in [alert.result_id, alert.confirmation_result_id] {
            let row = compacted
                .results(&ResultFilter {
                    id: Some(id),
                    ..ResultFilter::default()
                })
                .unwrap()
                .pop()
                .unwrap();
            assert_eq!(row.record.samples_compacted_at, None);
            let run = &row.record.run_id;
            assert_eq!(
                compacted.result_samples(run).unwrap(),
                whole.result_samples(run).unwrap()
            );
        }
    }
    let summaries = |s: &Store| -> Vec<(String, Option<f64>, Option<f64>, bool)> {
        s.results(&ResultFilter::default())
            .unwrap()
            .into_iter()
            .map(|r| {
                (
                    r.record.run_id,
                    r.record.median_s,
                    r.record.energy_j,
                    r.record.noisy,
                )
            })
            .collect()
    };
    assert_eq!(summaries(&whole), summaries(&compacted));
    let before = next_night_verdicts(&mut whole);
    let after = next_night_verdicts(&mut compacted);
    assert_eq!(before.len(), 2 * 3 * 3, "a verdict for every series");
    assert!(
        before.values().any(|v| v == "suspect"),
        "the slower series is suspect: {before:?}"
    );
    assert_eq!(before, after, "the same verdicts after compaction");
    let size = |p: &std::path::Path| std::fs::metadata(p).unwrap().len();
    assert!(
        size(&compacted_path) < size(&whole_path),
        "compaction gave space back"
    );
}

/// Rows of `results` (run ids) in the database at `path`, read with SQLite directly.
fn run_ids(path: &std::path::Path) -> Vec<String> {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .unwrap();
    let mut stmt = conn
        .prepare("SELECT run_id FROM results ORDER BY id")
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn a_backup_during_a_running_campaign_holds_what_was_committed_before_it() {
    let agent = Proc::agent(false);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    // Some history first, so the copy takes more than one step.
    ok_stdout(&gpufleet(
        &db,
        &[
            "seed-history",
            "--agents",
            "3",
            "--nights",
            "40",
            "--specs",
            "6",
        ],
    ));
    ok_stdout(&gpufleet(&db, &["agents", "add", "rig1", &agent.url]));
    let mut campaign = spawn_quiet(
        &db,
        &[
            "run",
            "--suite",
            "smoke",
            "--agent",
            "rig1",
            "--backend",
            "cpu",
        ],
    );
    let seeded = run_ids(&db).len();
    // Wait for the campaign's first results, then back up while it goes on.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let committed = loop {
        let ids = run_ids(&db);
        if ids.len() > seeded {
            break ids;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no campaign result in 120 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let backup = dir.path().join("during.db");
    let out = ok_stdout(&gpufleet(
        &db,
        &["db", "backup", backup.to_str().unwrap(), "--json"],
    ));
    let still_running = campaign.try_wait().unwrap().is_none();
    assert!(campaign.wait().unwrap().success(), "the campaign succeeds");
    let summary: serde_json::Value = serde_json::from_str(&out).unwrap();
    let copied = run_ids(&backup);
    assert_eq!(summary["results"], copied.len() as u64);
    assert_eq!(
        &copied[..committed.len()],
        &committed[..],
        "every result committed before the backup, in order"
    );
    let conn = rusqlite::Connection::open(&backup).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    eprintln!(
        "backup of {} results ({} during the campaign, which was {} when it ended)",
        copied.len(),
        copied.len() - seeded,
        if still_running {
            "still running"
        } else {
            "done"
        }
    );
}
