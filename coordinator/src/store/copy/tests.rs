use sha2::{Digest, Sha256};

use super::super::engine::ValueRef;
use super::super::test_support::{sample_result, temp_sqlite_store, temp_store};
use super::super::{DeviceRecord, NewJob, ResultFilter};
use super::verify::hash_value;
use super::{Store, StoreError};

/// A store with a row in every copied table: two agents (one removed), a device, a campaign with
/// jobs and results (samples and power), a confirmation job and its result, a check, an alert and a
/// schedule.
fn fill(store: &mut Store, tag: &str) {
    let a = store
        .add_agent(&format!("rig-{tag}"), "http://h:1", None)
        .unwrap()
        .id;
    let gone = store
        .add_agent(&format!("old-{tag}"), "http://h:2", None)
        .unwrap()
        .id;
    store.remove_agent(&format!("old-{tag}")).unwrap();
    let device = store
        .upsert_device(
            a,
            &DeviceRecord {
                device_id: "cpu:0".into(),
                backend: "cpu".into(),
                vendor: "AMD".into(),
                name: "EPYC".into(),
                arch: "x86_64".into(),
                pci_bus_id: String::new(),
                info_json: "{\"cores\": 2}".into(),
            },
        )
        .unwrap();
    let campaign = store.create_campaign("smoke", "a test", "{}").unwrap();
    let mut job_ids = Vec::new();
    for i in 0..3 {
        let run_id = format!("{tag}-run-{i}");
        job_ids.push(
            store
                .add_job(&NewJob {
                    campaign_id: campaign,
                    agent_id: a,
                    device_row_id: Some(device),
                    spec_key: "k".into(),
                    spec_json: "{}".into(),
                    run_id: run_id.clone(),
                })
                .unwrap(),
        );
        let mut r = sample_result(&run_id, a);
        r.campaign_id = Some(campaign);
        r.job_id = Some(job_ids[i]);
        r.device_row_id = Some(device);
        r.metric_value = Some(10.0 + i as f64 * 0.125);
        store.insert_result(&r).unwrap();
    }
    let mut r = sample_result(&format!("{tag}-orphan"), gone);
    r.power.clear();
    store.insert_result(&r).unwrap();
    let suspect: i64 = store
        .conn
        .query_row(
            "SELECT id FROM results WHERE run_id = ?1",
            [format!("{tag}-run-2")],
            |r| r.get(0),
        )
        .unwrap();
    // A confirmation job pointing at the suspect, its result, a check and an alert.
    let confirm_run = format!("{tag}-confirm");
    store
        .conn
        .execute(
            "INSERT INTO jobs (campaign_id, agent_id, device_row_id, spec_key, spec_json, run_id,
                               state, attempts, updated_at, confirms_result_id)
             VALUES (?1, ?2, ?3, 'k', '{}', ?4, 'queued', 0, 5, ?5)",
            super::super::engine::params![campaign, a, device, confirm_run, suspect],
        )
        .unwrap();
    let mut c = sample_result(&confirm_run, a);
    c.campaign_id = Some(campaign);
    store.insert_result(&c).unwrap();
    store
        .conn
        .execute_batch(&format!(
            "INSERT INTO checks (result_id, verdict, direction, reason, assessment_json,
                                 confirmation_result_id, created_at, updated_at)
             SELECT s.id, 'confirmed', 'regression', 'slower', '{{}}', c.id, 1, 2
               FROM results s, results c WHERE s.run_id = '{tag}-run-2' AND c.run_id = '{confirm_run}';
             INSERT INTO alerts (result_id, confirmation_result_id, campaign_id, device_row_id,
                                 device_id, spec_key, segment, direction, metric_unit, before_value,
                                 after_value, change_pct, bound_pct, baseline_points, created_at)
             SELECT s.id, c.id, s.campaign_id, s.device_row_id, 'cpu:0', 'k', '', 'regression',
                    'GFLOP/s', 10.0, 8.5, -15.0, 5.0, 3, 2
               FROM results s, results c WHERE s.run_id = '{tag}-run-2' AND c.run_id = '{confirm_run}';"
        ))
        .unwrap();
    store
        .add_schedule(
            &format!("nightly-{tag}"),
            "0 3 * * *",
            "{\"suite\": \"smoke\"}",
            true,
        )
        .unwrap();
}

fn run_ids(store: &Store) -> Vec<String> {
    let mut ids: Vec<String> = store
        .results(&ResultFilter::default())
        .unwrap()
        .into_iter()
        .map(|r| r.record.run_id)
        .collect();
    ids.sort();
    ids
}

fn quiet() -> impl FnMut(&str, u64, u64) {
    |_, _, _| {}
}

/// There and back: the engine under test into SQLite and into the engine under test again (so on
/// PostgreSQL, PostgreSQL → SQLite → PostgreSQL), every table's checksum the same each way.
#[test]
fn a_copy_into_an_empty_store_is_checked_table_by_table_and_round_trips() {
    let (_a, mut source) = temp_store();
    fill(&mut source, "x");
    let (_b, mut middle) = temp_sqlite_store();
    let there = source.copy_to(&mut middle, false, &mut quiet()).unwrap();
    assert!(!there.merged);
    assert_eq!(there.results_verified, 5);
    let (_c, mut back) = temp_store();
    let again = middle.copy_to(&mut back, false, &mut quiet()).unwrap();
    for (t1, t2) in there.tables.iter().zip(&again.tables) {
        assert_eq!(t1.table, t2.table);
        assert!(t1.source_rows > 0, "{} has rows to copy", t1.table);
        assert_eq!(t1.source_sha256, t2.destination_sha256, "{}", t1.table);
        assert_eq!(t1.source_rows, t2.destination_rows, "{}", t1.table);
    }
    assert_eq!(run_ids(&back), run_ids(&source));
    assert_eq!(back.integrity_check().unwrap(), "ok");
    // New rows after a copy get new ids (PostgreSQL's sequences moved past the copied ones), and
    // are counted: the triggers set aside for a copy into PostgreSQL are on again.
    let total = |s: &Store| -> i64 {
        s.result_status_counts()
            .unwrap()
            .iter()
            .map(|(_, n)| n)
            .sum()
    };
    assert_eq!(total(&back), 5);
    back.add_agent("after-copy", "http://h:3", None).unwrap();
    let mut r = sample_result(
        "after-copy-run",
        back.agent("after-copy").unwrap().unwrap().id,
    );
    r.power.clear();
    back.insert_result(&r).unwrap();
    assert_eq!(total(&back), 6);
    // The confirmation link survived.
    let confirms: Option<i64> = back
        .conn
        .query_row(
            "SELECT confirms_result_id FROM jobs WHERE run_id = 'x-confirm'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(confirms.is_some());
}

#[test]
fn a_store_with_rows_is_refused_unless_merging_and_a_merge_never_duplicates() {
    let (_a, mut source) = temp_store();
    fill(&mut source, "x");
    let (_b, mut dest) = temp_sqlite_store();
    fill(&mut dest, "y");
    let before = run_ids(&dest);
    let err = source.copy_to(&mut dest, false, &mut quiet()).unwrap_err();
    assert!(
        matches!(&err, StoreError::InvalidInput { field: "destination", message }
            if message.contains("--merge") && message.contains("results")),
        "{err}"
    );
    assert_eq!(run_ids(&dest), before, "nothing written");

    let merged = source.copy_to(&mut dest, true, &mut quiet()).unwrap();
    assert!(merged.merged);
    let mut both: Vec<String> = before.iter().chain(&run_ids(&source)).cloned().collect();
    both.sort();
    assert_eq!(run_ids(&dest), both);
    // Again: everything is already there.
    let again = source.copy_to(&mut dest, true, &mut quiet()).unwrap();
    let results = again.tables.iter().find(|t| t.table == "results").unwrap();
    assert_eq!((results.copied, results.skipped), (0, 5));
    assert_eq!(run_ids(&dest), both);
    assert_eq!(dest.integrity_check().unwrap(), "ok");
    // The merged results kept their samples, power, check and alert, on the new ids.
    let rows = dest
        .results(&ResultFilter {
            with_samples: true,
            ..ResultFilter::default()
        })
        .unwrap();
    let x0 = rows.iter().find(|r| r.record.run_id == "x-run-0").unwrap();
    assert_eq!(x0.record.power.len(), 2);
    assert_eq!(dest.alerts(0.0).unwrap().len(), 2);
    let confirms: Option<i64> = dest
        .conn
        .query_row(
            "SELECT j.confirms_result_id FROM jobs j WHERE j.run_id = 'x-confirm'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let suspect: i64 = dest
        .conn
        .query_row("SELECT id FROM results WHERE run_id = 'x-run-2'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(
        confirms,
        Some(suspect),
        "translated to the destination's id"
    );
}

#[test]
fn checksums_see_a_changed_value_and_its_storage_class() {
    let (_a, mut store) = temp_store();
    fill(&mut store, "x");
    let before = store.table_sha256("results").unwrap();
    store
        .conn
        .execute(
            "UPDATE results SET metric_value = 10.000000000000002 WHERE run_id = 'x-run-0'",
            [],
        )
        .unwrap();
    let changed = store.table_sha256("results").unwrap();
    assert_ne!(before, changed);
    let mut a = Sha256::new();
    hash_value(&mut a, ValueRef::Int(1));
    let mut b = Sha256::new();
    hash_value(&mut b, ValueRef::Real(1.0));
    assert_ne!(a.finalize(), b.finalize());
}
