use super::super::test_support::{clocked_store, sample_result};
use super::super::{PowerPoint, ResultFilter};
use super::*;

fn count(store: &Store, sql: &str) -> i64 {
    store.conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// A power trace of `n` samples.
fn power(n: usize) -> Vec<PowerPoint> {
    let one = sample_result("x", 1).power[0].clone();
    (0..n)
        .map(|i| PowerPoint {
            monotonic_ns: one.monotonic_ns + i as u64,
            ..one.clone()
        })
        .collect()
}

#[test]
fn compaction_drops_old_raw_data_and_keeps_summaries_alerts_and_baselines() {
    let (_dir, mut store, now) = clocked_store();
    let a = store.add_agent("a", "http://h:1", None).unwrap().id;
    // 30 nightly results of one series, each with samples and a power trace.
    let mut ids = Vec::new();
    for night in 0..30 {
        *now.lock().unwrap() = f64::from(night) * 86_400.0;
        let mut r = sample_result(&format!("n{night}"), a);
        r.power = power(5);
        store.insert_result(&r).unwrap();
        ids.push(count(
            &store,
            &format!("SELECT id FROM results WHERE run_id = 'n{night}'"),
        ));
    }
    // Night 3 raised an alert confirmed by night 4.
    store
        .conn
        .execute(
            "INSERT INTO alerts (result_id, confirmation_result_id, device_id, spec_key, segment,
                                 direction, metric_unit, before_value, after_value, change_pct,
                                 bound_pct, baseline_points, created_at)
             VALUES (?1, ?2, 'cpu:0', 'k', '', 'regression', 'GFLOP/s', 1, 0.8, -20, 5, 3, 0)",
            [ids[3], ids[4]],
        )
        .unwrap();
    let summaries = |s: &Store| -> Vec<(Option<f64>, Option<f64>, serde_json::Value)> {
        s.results(&ResultFilter::default())
            .unwrap()
            .into_iter()
            .map(|r| (r.record.median_s, r.record.cv, r.record.fingerprint))
            .collect()
    };
    let before = summaries(&store);
    *now.lock().unwrap() = 40.0 * 86_400.0;
    let policy = Retention {
        // Older than night 20 for samples, night 25 for power.
        samples_before: Some(20.0 * 86_400.0),
        power_before: Some(25.0 * 86_400.0),
        keep_last: 7,
    };
    let mut heard = Vec::new();
    let report = store.compact(&policy, &mut |n| heard.push(n)).unwrap();
    // Nights 0..20 are old for samples; the alert's 3 and 4 stay. Nights 23..30 are the
    // baseline (the newest 7) and younger anyway.
    assert_eq!(report.samples_dropped, 18, "{report:?}");
    // Power: nights 0..25 but the alert's 3 and 4 and the baseline's 23 and 24.
    assert_eq!(report.power_dropped, 21, "{report:?}");
    assert_eq!(report.power_rows_deleted, 21 * 5);
    assert_eq!(report.kept, 4);
    assert!(!heard.is_empty(), "progress is reported");
    assert_eq!(summaries(&store), before, "every summary stays");
    for keep in [ids[3], ids[4], ids[25], ids[29]] {
        assert_eq!(
            count(
                &store,
                &format!("SELECT count(*) FROM result_samples WHERE result_id = {keep}")
            ),
            1
        );
    }
    assert_eq!(
        count(
            &store,
            &format!(
                "SELECT count(*) FROM power_samples WHERE result_id = {}",
                ids[3]
            )
        ),
        5
    );
    let rows = store.results(&ResultFilter::default()).unwrap();
    assert!(rows[0].record.samples_compacted_at.is_some());
    assert!(rows[0].record.power_compacted_at.is_some());
    assert_eq!(
        rows[3].record.samples_compacted_at, None,
        "the alert's result"
    );
    assert_eq!(
        rows[22].record.samples_compacted_at, None,
        "younger than the cutoff"
    );
    assert!(store.result_samples("n0").unwrap().is_empty());
    // A second pass finds nothing left to do; vacuum keeps the database whole.
    let again = store.compact(&policy, &mut |_| {}).unwrap();
    assert_eq!((again.samples_dropped, again.power_dropped), (0, 0));
    store.vacuum().unwrap();
    assert_eq!(store.integrity_check().unwrap(), "ok");
}

#[test]
fn old_series_keep_their_baseline_whole() {
    let (_dir, mut store, now) = clocked_store();
    let a = store.add_agent("a", "http://h:1", None).unwrap().id;
    for night in 0..10 {
        *now.lock().unwrap() = f64::from(night);
        store
            .insert_result(&sample_result(&format!("old{night}"), a))
            .unwrap();
    }
    // Everything is old, but the newest 4 are the series' baseline.
    let policy = Retention {
        samples_before: Some(1e9),
        power_before: None,
        keep_last: 4,
    };
    let report = store.compact(&policy, &mut |_| {}).unwrap();
    assert_eq!((report.samples_dropped, report.kept), (6, 4));
    assert!(!store.result_samples("old9").unwrap().is_empty());
    assert!(store.result_samples("old5").unwrap().is_empty());
}
