use std::sync::Mutex;

use super::super::test_support::{clocked_store, postgres_run, sample_result, temp_store};
use super::super::{CampaignState, DeviceRecord, NewJob};
use super::*;

/// `n` results of agent `a` at times 1000, 1001, … (two share each time, so ties are exercised).
fn history(store: &mut Store, now: &Mutex<f64>, agent: i64, n: usize) {
    for i in 0..n {
        *now.lock().unwrap() = 1000.0 + (i / 2) as f64;
        let mut r = sample_result(&format!("run-{i:04}"), agent);
        r.kernel = if i % 3 == 0 { "gemm" } else { "saxpy" }.into();
        store.insert_result(&r).unwrap();
    }
}

fn ids(rows: &[ResultRow]) -> Vec<String> {
    rows.iter().map(|r| r.record.run_id.clone()).collect()
}

#[test]
fn pages_walk_every_result_once_in_either_direction() {
    let (_dir, mut store, now) = clocked_store();
    let a = store.add_agent("a", "http://h:1", None).unwrap().id;
    history(&mut store, &now, a, 23);
    let everything = ids(&store.results(&ResultFilter::default()).unwrap());
    for direction in [Direction::NewestFirst, Direction::OldestFirst] {
        let mut seen = Vec::new();
        let mut after = None;
        let mut pages = 0;
        loop {
            let page = store
                .results_page(&ResultFilter::default(), 5, after, direction)
                .unwrap();
            assert!(page.rows.len() <= 5);
            seen.extend(ids(&page.rows));
            pages += 1;
            match page.next {
                Some(c) => after = Some(c.to_string().parse().unwrap()),
                None => break,
            }
        }
        assert_eq!(pages, 5, "23 rows in pages of 5");
        if direction == Direction::NewestFirst {
            seen.reverse();
        }
        assert_eq!(seen, everything, "{direction:?}: every row once, in order");
    }
}

#[test]
fn a_page_is_stable_while_results_arrive_and_filters_apply_in_sql() {
    let (_dir, mut store, now) = clocked_store();
    let a = store.add_agent("a", "http://h:1", None).unwrap().id;
    history(&mut store, &now, a, 12);
    let gemm = ResultFilter {
        kernel: Some("gemm".into()),
        ..ResultFilter::default()
    };
    let first = store
        .results_page(&gemm, 2, None, Direction::NewestFirst)
        .unwrap();
    assert_eq!(ids(&first.rows), ["run-0009", "run-0006"]);
    // A newer result arrives between two page reads: the second page is unchanged.
    *now.lock().unwrap() = 5000.0;
    let mut late = sample_result("late", a);
    late.kernel = "gemm".into();
    store.insert_result(&late).unwrap();
    let second = store
        .results_page(&gemm, 2, first.next, Direction::NewestFirst)
        .unwrap();
    assert_eq!(ids(&second.rows), ["run-0003", "run-0000"]);
    assert_eq!(second.next, None, "the last page has no next");
    let since = ResultFilter {
        since: Some(1004.0),
        ..ResultFilter::default()
    };
    let recent = store
        .results_page(&since, 100, None, Direction::OldestFirst)
        .unwrap();
    assert_eq!(
        ids(&recent.rows),
        ["run-0008", "run-0009", "run-0010", "run-0011", "late"]
    );
}

/// Verdicts page like results: every one once, newest first, ties on `updated_at` broken by
/// the result id (the cursor's time is sent as a bound parameter on both engines).
#[test]
fn verdict_pages_walk_every_verdict_once() {
    let (_dir, mut store, now) = clocked_store();
    let a = store.add_agent("a", "http://h:1", None).unwrap().id;
    history(&mut store, &now, a, 11);
    let results = store.results(&ResultFilter::default()).unwrap();
    for (i, r) in results.iter().enumerate() {
        *now.lock().unwrap() = 2000.0 + (i / 3) as f64;
        store
            .insert_check(r.id, "stable", None, "steady", "{}")
            .unwrap();
    }
    let everything: Vec<i64> = store
        .checks(0.0)
        .unwrap()
        .iter()
        .map(|c| c.result_id)
        .collect();
    assert_eq!(everything.len(), 11);
    let (mut seen, mut after, mut pages) = (Vec::new(), None, 0);
    loop {
        let (rows, next) = store.checks_page(0.0, 4, after).unwrap();
        seen.extend(rows.iter().map(|c| c.result_id));
        pages += 1;
        match next {
            Some(c) => after = Some(c),
            None => break,
        }
    }
    assert_eq!(pages, 3, "11 verdicts in pages of 4");
    assert_eq!(seen, everything, "every verdict once, in order");
    let (recent, _) = store.checks_page(2003.0, 50, None).unwrap();
    assert_eq!(recent.len(), 2, "since applies");
}

#[test]
fn limits_and_cursors_are_checked() {
    let (_dir, store) = temp_store();
    for bad in [0, MAX_PAGE + 1] {
        let err = store
            .results_page(&ResultFilter::default(), bad, None, Direction::NewestFirst)
            .unwrap_err();
        assert!(err.to_string().contains("limit"), "{err}");
    }
    for bad in [
        "", "12", "x:1", "1.5:y", "NaN:3", "inf:3", "10:0", "10:-4", "1:2:3",
    ] {
        let err = bad.parse::<Cursor>().unwrap_err();
        assert!(err.contains("not a cursor"), "{bad}: {err}");
    }
    let long = "9".repeat(5000);
    let err = long.parse::<Cursor>().unwrap_err();
    assert!(err.len() < 200, "quotes only a short piece: {err}");
    let c = Cursor {
        time: 1_732_659_200.123_456_7,
        id: 42,
    };
    assert_eq!(
        c.to_string().parse::<Cursor>().unwrap(),
        c,
        "exact round trip"
    );
}

#[test]
fn the_latest_table_and_counts_follow_every_insert() {
    let (_dir, mut store, now) = clocked_store();
    let a = store.add_agent("a", "http://h:1", None).unwrap().id;
    let campaign = store.create_campaign("nightly", "", "{}").unwrap();
    for (i, (status, t)) in [("ok", 10.0), ("crashed", 30.0), ("ok", 20.0)]
        .into_iter()
        .enumerate()
    {
        *now.lock().unwrap() = t;
        let run = format!("r{i}");
        let job = store
            .add_job(&NewJob {
                campaign_id: campaign,
                agent_id: a,
                device_row_id: None,
                spec_key: "gemm/naive/k=64,m=64,n=64/f32/compute".into(),
                spec_json: "{}".into(),
                run_id: run.clone(),
            })
            .unwrap();
        let mut r = sample_result(&run, a);
        r.status = status.into();
        r.campaign_id = Some(campaign);
        r.job_id = Some(job);
        store.insert_result(&r).unwrap();
    }
    // An import of an older result does not displace the newest.
    let latest = |s: &Store| {
        ids(&s
            .results(&ResultFilter {
                latest_per_device_and_key: true,
                ..ResultFilter::default()
            })
            .unwrap())
    };
    assert_eq!(latest(&store), ["r1"], "the crash at t=30 is the newest");
    assert_eq!(
        store.result_status_counts().unwrap(),
        [("crashed".to_string(), 1), ("ok".to_string(), 2)]
    );
    let c = store.campaign(campaign).unwrap().unwrap();
    assert_eq!(c.jobs.total(), 3);
    assert_eq!(c.jobs.finished(), 3, "inserting a result finishes its job");
    assert_eq!(c.results.get("ok"), Some(&2));
    assert_eq!(c.results.get("crashed"), Some(&1));
    store
        .set_campaign_state(campaign, CampaignState::Done)
        .unwrap();
    // The counts agree with a count over the tables.
    let recount: i64 = store
        .conn
        .query_row(
            "SELECT count(*) FROM (SELECT campaign_id, state, count(*) AS n FROM jobs
                 GROUP BY campaign_id, state
             EXCEPT SELECT campaign_id, state, CAST(sum(n) AS bigint) FROM campaign_counts
                    WHERE kind = 'job' GROUP BY campaign_id, state HAVING sum(n) > 0)
             AS differences",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(recount, 0);
}

/// The plan of `sql` with `args`, one line per step.
fn plan(store: &Store, sql: &str, args: Vec<SqlValue>) -> Vec<String> {
    let mut stmt = store
        .conn
        .as_sqlite()
        .expect("SQLite's plan")
        .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
        .unwrap();
    stmt.query_map(
        rusqlite::params_from_iter(args.iter().map(SqlValue::as_ref)),
        |r| r.get::<_, String>(3),
    )
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

/// Fails when a step of the plan scans `results` (under any alias), with or without an index:
/// a `SCAN` reads every row or index entry, a `SEARCH` only a range.
fn assert_no_results_scan(what: &str, steps: &[String]) {
    for step in steps {
        let scans_results = step
            .strip_prefix("SCAN ")
            .map(|rest| rest.split_whitespace().next().unwrap_or(""))
            .is_some_and(|table| matches!(table, "r" | "results" | "x"));
        assert!(!scans_results, "{what} scans results: {steps:#?}");
    }
}

#[test]
fn hot_queries_never_scan_the_results_table() {
    if postgres_run("EXPLAIN QUERY PLAN") {
        return;
    }
    let (_dir, mut store, now) = clocked_store();
    let a = store.add_agent("a", "http://h:1", None).unwrap().id;
    let device = store
        .upsert_device(
            a,
            &DeviceRecord {
                device_id: "cpu:0".into(),
                backend: "cpu".into(),
                vendor: "x".into(),
                name: "x".into(),
                arch: "x".into(),
                pci_bus_id: String::new(),
                info_json: "{}".into(),
            },
        )
        .unwrap();
    history(&mut store, &now, a, 50);
    let series = ResultFilter {
        agent: Some("a".into()),
        device_id: Some("cpu:0".into()),
        spec_key: Some("gemm/naive/k=64,m=64,n=64/f32/compute".into()),
        ..ResultFilter::default()
    };
    let cursor = Some(Cursor {
        time: 1010.0,
        id: 20,
    });
    let mut cases: Vec<(&str, (String, Vec<SqlValue>))> = vec![
        (
            "the result listing's first page",
            listing_sql(
                &ResultFilter::default(),
                Walk::Page(Direction::NewestFirst),
                None,
                Some(51),
            ),
        ),
        (
            "a later page",
            listing_sql(
                &ResultFilter::default(),
                Walk::Page(Direction::NewestFirst),
                cursor,
                Some(51),
            ),
        ),
        (
            "a filtered page",
            listing_sql(
                &ResultFilter {
                    kernel: Some("gemm".into()),
                    agent: Some("a".into()),
                    status: Some("ok".into()),
                    since: Some(1005.0),
                    ..ResultFilter::default()
                },
                Walk::Page(Direction::OldestFirst),
                cursor,
                Some(51),
            ),
        ),
        (
            "the compare matrix",
            listing_sql(
                &ResultFilter {
                    latest_per_device_and_key: true,
                    ..ResultFilter::default()
                },
                Walk::All,
                None,
                None,
            ),
        ),
        (
            "the filtered compare matrix",
            listing_sql(
                &ResultFilter {
                    latest_per_device_and_key: true,
                    status: Some("ok".into()),
                    suite: Some("nightly".into()),
                    ..ResultFilter::default()
                },
                Walk::All,
                None,
                None,
            ),
        ),
        (
            "a campaign",
            listing_sql(
                &ResultFilter {
                    campaign_id: Some(1),
                    latest_per_device_and_key: true,
                    ..ResultFilter::default()
                },
                Walk::All,
                None,
                None,
            ),
        ),
        ("the history", listing_sql(&series, Walk::All, None, None)),
    ];
    cases.push((
        "the metrics",
        (super::super::results::RESULT_COUNTS_SQL.into(), vec![]),
    ));
    for (what, (sql, args)) in cases {
        assert_no_results_scan(what, &plan(&store, &sql, args));
    }
    // The regression window, with its named parameters, for a known device and for none.
    for device in [Some(device), None] {
        let mut stmt = store
            .conn
            .as_sqlite()
            .unwrap()
            .prepare(&format!(
                "EXPLAIN QUERY PLAN {}",
                super::super::checks::baseline_sql(device)
            ))
            .unwrap();
        let baseline: Vec<String> = stmt
            .query_map(
                rusqlite::named_params! {
                    ":device": device, ":key": "k", ":segment": "s", ":before": 40, ":n": 20,
                    ":noisy": false,
                },
                |r| r.get::<_, String>(3),
            )
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_no_results_scan("the regression baseline", &baseline);
    }
    // A deliberately bad query shows the check can fail.
    let scan = plan(
        &store,
        "SELECT r.id FROM results r WHERE r.message = ''",
        vec![],
    );
    let caught = std::panic::catch_unwind(|| assert_no_results_scan("bad", &scan));
    assert!(caught.is_err(), "a full scan is caught: {scan:?}");
}

#[test]
fn migration_8_fills_its_tables_from_the_results_already_stored() {
    if postgres_run("the history of migrations 1 to 10") {
        return;
    }
    let (dir, mut store, now) = clocked_store();
    let a = store.add_agent("a", "http://h:1", None).unwrap().id;
    let campaign = store.create_campaign("nightly", "", "{}").unwrap();
    for i in 0..9 {
        *now.lock().unwrap() = 100.0 + f64::from(i % 4);
        let mut r = sample_result(&format!("m{i}"), a);
        r.spec_key = format!("k{}", i % 3);
        r.status = if i == 4 { "crashed" } else { "ok" }.into();
        r.campaign_id = (i % 2 == 0).then_some(campaign);
        store.insert_result(&r).unwrap();
    }
    let snapshot = |s: &Store| -> Vec<String> {
        [
            "SELECT agent_id || device_id || spec_key || result_id FROM latest_results",
            "SELECT status || n FROM result_counts",
            "SELECT campaign_id || kind || state || n FROM campaign_counts",
        ]
        .iter()
        .flat_map(|q| {
            let mut stmt = s.conn.prepare(&format!("{q} ORDER BY 1")).unwrap();
            stmt.query_map([], |r| r.get::<_, String>(0))
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap()
        })
        .collect()
    };
    let kept_by_triggers = snapshot(&store);
    assert_eq!(kept_by_triggers.len(), 3 + 2 + 2);
    // Back to version 7: what migrations 8 to 11 added is gone, the results stay.
    store
        .conn
        .execute_batch(
            "DROP TRIGGER results_latest; DROP TRIGGER results_count; DROP TRIGGER results_uncount;
             DROP TRIGGER jobs_count; DROP TRIGGER jobs_recount; DROP TRIGGER jobs_uncount;
             DROP TRIGGER results_campaign_count; DROP TRIGGER results_campaign_uncount;
             DROP TABLE latest_results; DROP TABLE result_counts; DROP TABLE campaign_counts;
             DROP INDEX results_by_time; DROP INDEX results_by_series; DROP INDEX jobs_by_agent;
             DROP INDEX checks_by_time;
             DROP INDEX checks_suspect; DROP INDEX jobs_by_confirms; DROP INDEX alerts_by_series;
             ALTER TABLE results DROP COLUMN samples_compacted_at;
             ALTER TABLE results DROP COLUMN power_compacted_at;
             ALTER TABLE results DROP COLUMN robust_cv; ALTER TABLE results DROP COLUMN p25_s;
             ALTER TABLE results DROP COLUMN p75_s; ALTER TABLE results DROP COLUMN upper_fence_s;
             ALTER TABLE results DROP COLUMN outliers_high;
             ALTER TABLE agents DROP COLUMN api_url;
             ALTER TABLE jobs DROP COLUMN claimed_by; ALTER TABLE jobs DROP COLUMN lease_until;
             ALTER TABLE agents DROP COLUMN attached_to;
             PRAGMA user_version = 7;",
        )
        .unwrap();
    let path = store.path().to_path_buf();
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(
        snapshot(&store),
        kept_by_triggers,
        "the migration counts as the triggers do"
    );
    assert_eq!(store.integrity_check().unwrap(), "ok");
    drop(dir);
}

#[test]
fn the_latest_per_series_with_series_filters_skips_other_series() {
    let (_dir, mut store, now) = clocked_store();
    let a = store.add_agent("a", "http://h:1", None).unwrap().id;
    let b = store.add_agent("b", "http://h:2", None).unwrap().id;
    for (i, (agent, kernel, status)) in [
        (a, "gemm", "ok"),
        (a, "gemm", "crashed"),
        (a, "saxpy", "ok"),
        (b, "gemm", "ok"),
        (b, "gemm", "ok"),
    ]
    .into_iter()
    .enumerate()
    {
        *now.lock().unwrap() = 10.0 + i as f64;
        let mut r = sample_result(&format!("s{i}"), agent);
        r.kernel = kernel.into();
        r.spec_key = format!("{kernel}/naive/n=1/f32/compute");
        r.status = status.into();
        store.insert_result(&r).unwrap();
    }
    let latest = |agent: Option<&str>, kernel: Option<&str>, status: Option<&str>| {
        ids(&store
            .results(&ResultFilter {
                agent: agent.map(str::to_owned),
                kernel: kernel.map(str::to_owned),
                status: status.map(str::to_owned),
                latest_per_device_and_key: true,
                ..ResultFilter::default()
            })
            .unwrap())
    };
    assert_eq!(latest(None, None, None), ["s1", "s2", "s4"]);
    assert_eq!(latest(Some("a"), Some("gemm"), Some("ok")), ["s0"]);
    assert_eq!(latest(Some("b"), None, None), ["s4"]);
    assert_eq!(latest(None, Some("saxpy"), None), ["s2"]);
    assert!(latest(Some("nobody"), None, None).is_empty());
}

#[test]
fn a_summary_read_leaves_only_the_bulky_fields_empty() {
    let (_dir, mut store, _now) = clocked_store();
    let a = store.add_agent("a", "http://h:1", None).unwrap().id;
    let mut r = sample_result("bulky", a);
    r.validation = serde_json::json!({"max_abs_err": 1e-6, "ok": true});
    r.config = serde_json::json!({"achieved_gbps": "812.5"});
    r.fingerprint = serde_json::json!({"driver_version": "6.1", "env": {"A": "1"}});
    r.energy = serde_json::json!({"source": "hwmon"});
    r.stderr_tail = "warning: clocks".into();
    r.times = vec![1e-5, 2e-5];
    store.insert_result(&r).unwrap();
    for latest in [false, true] {
        let read = |summary_only| {
            let rows = store
                .results(&ResultFilter {
                    latest_per_device_and_key: latest,
                    summary_only,
                    with_samples: true,
                    ..ResultFilter::default()
                })
                .unwrap();
            assert_eq!(rows.len(), 1);
            rows.into_iter().next().unwrap()
        };
        let full = read(false);
        assert_eq!(
            full.record.fingerprint, r.fingerprint,
            "a full read has them"
        );
        assert_eq!(full.record.stderr_tail, r.stderr_tail);
        let summary = read(true);
        let mut expected = full.clone();
        expected.record.validation = serde_json::Value::Null;
        expected.record.config = serde_json::Value::Null;
        expected.record.fingerprint = serde_json::Value::Null;
        expected.record.energy = serde_json::Value::Null;
        expected.record.stderr_tail = String::new();
        assert_eq!(
            summary, expected,
            "latest {latest}: every other field as stored"
        );
    }
}

/// No peak is absent, never 0: a row written with a 0 by a coordinator from before the wire's
/// `pct_of_peak` was `optional` reads back absent, and a known one as it was stored.
#[test]
fn an_unknown_percentage_of_peak_reads_absent_even_where_a_0_was_stored() {
    let (_dir, mut store) = temp_store();
    let a = store.add_agent("a", "http://h:1", None).unwrap().id;
    for (run_id, pct) in [
        ("old-zero", Some(0.0)),
        ("none", None),
        ("known", Some(3.25)),
    ] {
        let mut r = sample_result(run_id, a);
        r.pct_of_peak = pct;
        store.insert_result(&r).unwrap();
    }
    let read: BTreeMap<String, Option<f64>> = store
        .results(&ResultFilter::default())
        .unwrap()
        .into_iter()
        .map(|r| (r.record.run_id, r.record.pct_of_peak))
        .collect();
    assert_eq!(read["old-zero"], None);
    assert_eq!(read["none"], None);
    assert_eq!(read["known"], Some(3.25));
}
