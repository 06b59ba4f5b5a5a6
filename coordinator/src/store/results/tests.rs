use super::super::test_support::{
    TestDb, assert_invalid, clocked_store, sample_result, temp_store,
};
use super::super::{DeviceRecord, JobState, NewJob, ResultFilter, ResultRow};
use super::*;

fn count(store: &Store, table: &str) -> i64 {
    store
        .conn
        .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

fn device(store: &mut Store, agent_id: i64, id: &str) -> i64 {
    store
        .upsert_device(
            agent_id,
            &DeviceRecord {
                device_id: id.into(),
                backend: "opencl".into(),
                vendor: "AMD".into(),
                name: "Radeon RX 580".into(),
                arch: "gfx803".into(),
                pci_bus_id: "0000:03:00.0".into(),
                info_json: "{}".into(),
            },
        )
        .unwrap()
}

/// The run ids of the results `f` selects, in the store's order.
fn run_ids(store: &Store, f: &ResultFilter) -> Vec<String> {
    store
        .results(f)
        .unwrap()
        .into_iter()
        .map(|r| r.record.run_id)
        .collect()
}

/// Every stored result, with its raw samples.
fn all_with_samples(store: &Store) -> Vec<ResultRow> {
    store
        .results(&ResultFilter {
            with_samples: true,
            ..ResultFilter::default()
        })
        .unwrap()
}

#[test]
fn a_result_round_trips_with_its_samples() {
    let (_dir, store, _now) = clocked_store();
    let mut store = store;
    let agent = store.add_agent("rx580", "http://h:1", None).unwrap().id;
    let dev = device(&mut store, agent, "opencl:0000:03:00.0");
    let mut r = sample_result("run-1", agent);
    r.device_row_id = Some(dev);
    r.signal = Some(11);
    r.higher_is_better = Some(false);
    assert!(store.insert_result(&r).unwrap());

    let rows = all_with_samples(&store);
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    let mut expected = r.clone();
    expected.created_at = Some(1000.0);
    assert_eq!(row.record, expected);
    assert_eq!(row.agent, "rx580");
    assert_eq!(row.device_name.as_deref(), Some("Radeon RX 580"));
    assert_eq!(row.device_vendor.as_deref(), Some("AMD"));
    assert_eq!(row.device_arch.as_deref(), Some("gfx803"));
    assert_eq!(row.suite, None);

    let without = store.results(&ResultFilter::default()).unwrap();
    assert!(
        without[0].record.times.is_empty(),
        "samples only when asked"
    );
    assert_eq!(store.result_samples("run-1").unwrap(), r.times);
}

#[test]
fn the_same_run_id_is_stored_once() {
    let (_dir, mut store) = temp_store();
    let agent = store.add_agent("a", "http://h:1", None).unwrap().id;
    let first = sample_result("same", agent);
    assert!(store.insert_result(&first).unwrap());
    let mut second = sample_result("same", agent);
    second.metric_value = Some(999.0);
    second.times = vec![1.0, 2.0, 3.0, 4.0];
    assert!(!store.insert_result(&second).unwrap());
    assert!(!store.insert_result(&first).unwrap());

    assert_eq!(count(&store, "results"), 1);
    assert_eq!(count(&store, "result_samples"), 1);
    assert_eq!(store.result_samples("same").unwrap(), first.times);
    let rows = store.results(&ResultFilter::default()).unwrap();
    assert_eq!(
        rows[0].record.metric_value,
        Some(12.5),
        "the first copy wins"
    );
}

/// A store with agent `a` and a campaign of one job whose run id is `run_id`: the store, its
/// directory, and the agent's, campaign's and job's ids.
fn one_job(run_id: &str) -> (TestDb, Store, i64, i64, i64) {
    let (dir, mut store) = temp_store();
    let agent = store.add_agent("a", "http://h:1", None).unwrap().id;
    let campaign = store.create_campaign("smoke", "", "{}").unwrap();
    let job = store
        .add_job(&NewJob {
            campaign_id: campaign,
            agent_id: agent,
            device_row_id: None,
            spec_key: "k".into(),
            spec_json: "{}".into(),
            run_id: run_id.into(),
        })
        .unwrap();
    (dir, store, agent, campaign, job)
}

#[test]
fn inserting_a_result_finishes_its_job() {
    let (_dir, mut store, agent, campaign, job) = one_job("job-run");
    store
        .set_job_state(job, JobState::Running, Some("stale"))
        .unwrap();
    let mut r = sample_result("job-run", agent);
    r.campaign_id = Some(campaign);
    r.job_id = Some(job);
    r.status = "crashed".into();
    assert!(store.insert_result(&r).unwrap());
    let j = &store.jobs(campaign).unwrap()[0];
    assert_eq!((j.state, j.error.as_deref()), (JobState::Done, None));
    let rows = store.results(&ResultFilter::default()).unwrap();
    assert_eq!(rows[0].suite.as_deref(), Some("smoke"));
}

/// A lost attempt's result that arrives after its job was requeued under a new run id is not a
/// second result for the job: it is not stored, and the job waits for its new attempt.
#[test]
fn a_result_of_an_attempt_the_job_was_requeued_after_is_not_stored() {
    let (_dir, mut store, agent, campaign, job) = one_job("first");
    store
        .set_job_state(job, JobState::Interrupted, Some("lost"))
        .unwrap();
    assert!(store.requeue_job(job, "second").unwrap());
    assert!(
        !store.requeue_job(job, "third").unwrap(),
        "only an interrupted job is requeued"
    );
    let mut late = sample_result("first", agent);
    late.campaign_id = Some(campaign);
    late.job_id = Some(job);
    assert!(!store.insert_result(&late).unwrap());
    assert!(store.results(&ResultFilter::default()).unwrap().is_empty());
    let j = &store.jobs(campaign).unwrap()[0];
    assert_eq!((j.state, j.run_id.as_str()), (JobState::Queued, "second"));
    let mut new = sample_result("second", agent);
    new.campaign_id = Some(campaign);
    new.job_id = Some(job);
    assert!(store.insert_result(&new).unwrap());
    assert_eq!(store.jobs(campaign).unwrap()[0].state, JobState::Done);
}

#[test]
fn foreign_keys_are_enforced_and_nothing_is_written() {
    let (_dir, mut store) = temp_store();
    let err = store
        .insert_result(&sample_result("orphan", 77))
        .unwrap_err();
    assert!(matches!(err, StoreError::Db { .. }), "{err}");
    assert!(
        err.to_string().to_lowercase().contains("foreign key"),
        "{err}"
    );

    let agent = store.add_agent("a", "http://h:1", None).unwrap().id;
    for (field, mut r) in [
        ("job", sample_result("bad-job", agent)),
        ("campaign", sample_result("bad-campaign", agent)),
        ("device", sample_result("bad-device", agent)),
    ] {
        match field {
            "job" => r.job_id = Some(5),
            "campaign" => r.campaign_id = Some(5),
            _ => r.device_row_id = Some(5),
        }
        let err = store.insert_result(&r).unwrap_err();
        assert!(
            err.to_string().to_lowercase().contains("foreign key"),
            "{field}: {err}"
        );
    }
    assert_eq!(count(&store, "results"), 0);
    assert_eq!(count(&store, "result_samples"), 0);
    assert_eq!(store.integrity_check().unwrap(), "ok");
    // The failed run id is free for the real result.
    assert!(
        store
            .insert_result(&sample_result("orphan", agent))
            .unwrap()
    );
}

#[test]
fn bad_numbers_and_empty_names_are_refused() {
    let (_dir, mut store) = temp_store();
    let agent = store.add_agent("a", "http://h:1", None).unwrap().id;
    let mut r = sample_result("nan", agent);
    r.median_s = Some(f64::NAN);
    let err = store.insert_result(&r).unwrap_err();
    assert_invalid(&err, "median_s");
    let mut r = sample_result("", agent);
    r.run_id.clear();
    let err = store.insert_result(&r).unwrap_err();
    assert_invalid(&err, "run_id");
    let mut r = sample_result("huge", agent);
    r.iterations = u64::MAX;
    let err = store.insert_result(&r).unwrap_err();
    assert_invalid(&err, "iterations");
    assert_eq!(count(&store, "results"), 0);
}

#[test]
fn filters_select_by_campaign_kernel_suite_agent_and_status() {
    let (_dir, mut store) = temp_store();
    let a = store.add_agent("a", "http://h:1", None).unwrap().id;
    let b = store.add_agent("b", "http://h:2", None).unwrap().id;
    let smoke = store.create_campaign("smoke", "", "{}").unwrap();
    let full = store.create_campaign("full", "", "{}").unwrap();
    let specs = [
        ("1", a, Some(smoke), "gemm", "ok"),
        ("2", a, Some(full), "stream", "ok"),
        ("3", b, Some(smoke), "gemm", "crashed"),
        ("4", b, None, "gemm", "ok"),
    ];
    for (run, agent, campaign, kernel, status) in specs {
        let mut r = sample_result(run, agent);
        r.campaign_id = campaign;
        r.kernel = kernel.into();
        r.status = status.into();
        store.insert_result(&r).unwrap();
    }
    let runs = |store: &Store, f: ResultFilter| run_ids(store, &f);
    assert_eq!(runs(&store, ResultFilter::default()), ["1", "2", "3", "4"]);
    let by_campaign = ResultFilter {
        campaign_id: Some(smoke),
        ..ResultFilter::default()
    };
    assert_eq!(runs(&store, by_campaign), ["1", "3"]);
    let by_suite = ResultFilter {
        suite: Some("full".into()),
        ..ResultFilter::default()
    };
    assert_eq!(runs(&store, by_suite), ["2"]);
    let gemm_ok_on_b = ResultFilter {
        kernel: Some("gemm".into()),
        agent: Some("b".into()),
        status: Some("ok".into()),
        ..ResultFilter::default()
    };
    assert_eq!(runs(&store, gemm_ok_on_b), ["4"]);
    // Removed agents keep their results.
    store.remove_agent("b").unwrap();
    let on_b = ResultFilter {
        agent: Some("b".into()),
        ..ResultFilter::default()
    };
    assert_eq!(runs(&store, on_b), ["3", "4"]);
}

#[test]
fn latest_per_device_and_key_keeps_the_newest_match() {
    let (_dir, mut store, now) = clocked_store();
    let a = store.add_agent("a", "http://h:1", None).unwrap().id;
    let b = store.add_agent("b", "http://h:2", None).unwrap().id;
    // (run, agent, device, spec key, status, time)
    let runs = [
        ("a-k1-old", a, "gpu:0", "k1", "ok", 1.0),
        ("a-k1-new", a, "gpu:0", "k1", "ok", 3.0),
        ("a-k1-newest-crash", a, "gpu:0", "k1", "crashed", 4.0),
        ("a-k1-gpu1", a, "gpu:1", "k1", "ok", 2.0),
        ("a-k2", a, "gpu:0", "k2", "ok", 2.0),
        ("b-k1", b, "gpu:0", "k1", "ok", 1.5),
    ];
    for (run, agent, dev, key, status, t) in runs {
        *now.lock().unwrap() = t;
        let mut r = sample_result(run, agent);
        r.device_id = dev.into();
        r.spec_key = key.into();
        r.status = status.into();
        store.insert_result(&r).unwrap();
    }
    let latest = |status: Option<&str>| -> Vec<String> {
        let f = ResultFilter {
            status: status.map(str::to_owned),
            latest_per_device_and_key: true,
            ..ResultFilter::default()
        };
        run_ids(&store, &f)
    };
    assert_eq!(
        latest(None),
        ["b-k1", "a-k1-gpu1", "a-k2", "a-k1-newest-crash"],
        "one per (agent, device, key), oldest first"
    );
    assert_eq!(
        latest(Some("ok")),
        ["b-k1", "a-k1-gpu1", "a-k2", "a-k1-new"],
        "the filter applies before picking the newest"
    );
}

#[test]
fn samples_are_only_read_for_known_runs() {
    let (_dir, mut store) = temp_store();
    let agent = store.add_agent("a", "http://h:1", None).unwrap().id;
    let mut r = sample_result("no-samples", agent);
    r.times.clear();
    store.insert_result(&r).unwrap();
    assert_eq!(
        store.result_samples("no-samples").unwrap(),
        Vec::<f64>::new()
    );
    assert_eq!(count(&store, "result_samples"), 0);
    let err = store.result_samples("missing").unwrap_err();
    assert!(matches!(err, StoreError::UnknownRun { .. }), "{err}");
}

#[test]
fn results_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.db");
    let mut store = Store::open(&path).unwrap();
    let agent = store.add_agent("a", "http://h:1", None).unwrap().id;
    let r = sample_result("persisted", agent);
    store.insert_result(&r).unwrap();
    drop(store);

    let mut store = Store::open(&path).unwrap();
    let rows = all_with_samples(&store);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].record.times, r.times);
    assert!(
        !store.insert_result(&r).unwrap(),
        "still idempotent after reopen"
    );
    assert_eq!(store.integrity_check().unwrap(), "ok");
}

#[test]
fn rows_serialise_json_columns_as_objects() {
    let (_dir, mut store) = temp_store();
    let agent = store
        .add_agent("a", "http://h:1", Some("secret"))
        .unwrap()
        .id;
    store.insert_result(&sample_result("json", agent)).unwrap();
    let row = &store.results(&ResultFilter::default()).unwrap()[0];
    let v = serde_json::to_value(row).unwrap();
    assert_eq!(v["params"]["m"], 64);
    assert_eq!(v["validation"]["passed"], true);
    assert_eq!(v["config"]["tile"], 8);
    assert_eq!(v["fingerprint"]["driver"], "none");
    assert_eq!(v["agent"], "a");
    assert_eq!(v["run_id"], "json");
    assert!(v.get("times").is_none(), "no samples were asked for");
    assert!(!v.to_string().contains("secret"));
}

#[test]
fn samples_encode_as_little_endian_f64() {
    let times = [1.5, -0.0, 1e-9, f64::MAX];
    let bytes = encode_samples(&times);
    assert_eq!(bytes.len(), 32);
    assert_eq!(&bytes[..8], &1.5f64.to_le_bytes());
    assert_eq!(decode_samples(&bytes).unwrap(), times);
    let err = decode_samples(&bytes[..12]).unwrap_err();
    assert!(err.contains("12 bytes"), "{err}");
}
