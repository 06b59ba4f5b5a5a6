//! Shared fixtures for the store's unit tests: real database files in temp dirs, file snapshots for
//! the "left untouched" checks, and a complete result record.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde_json::json;

use super::engine::{Engine, PgConn, PgTarget, explain_connect_error};
use super::error::StoreError;
use super::guard::sidecar;
use super::open::Store;
use super::rows::{PowerPoint, ResultRecord};
use gpufleet_proto::power::Reading;

/// The engine the store's tests run on: SQLite unless `GPUFLEET_TEST_ENGINE=postgres`, which
/// runs every test that takes its store from [`temp_store`] on a fresh PostgreSQL database of the
/// cluster at `GPUFLEET_TEST_POSTGRES` (a URL whose user may create databases; `.ci/run` starts a
/// throwaway cluster and sets both).
pub(super) fn engine_under_test() -> Engine {
    match std::env::var("GPUFLEET_TEST_ENGINE").as_deref() {
        Ok("postgres") => Engine::Postgres,
        Ok("sqlite") | Err(_) => Engine::Sqlite,
        Ok(other) => panic!("GPUFLEET_TEST_ENGINE={other:?}: expected sqlite or postgres"),
    }
}

/// Whether a test of what only SQLite has should step aside (the suite runs on PostgreSQL); says
/// so on stderr.
pub(super) fn postgres_run(what: &str) -> bool {
    let pg = engine_under_test() == Engine::Postgres;
    if pg {
        eprintln!("skipping on PostgreSQL: {what} is SQLite's");
    }
    pg
}

/// What keeps a test's database alive: the temp dir of an SQLite file, or a PostgreSQL database
/// dropped when this is.
pub(crate) enum TestDb {
    Dir { _dir: tempfile::TempDir },
    Postgres { _db: PgTestDb },
}

/// A PostgreSQL database made for one test; dropped (with its connections) at the end.
pub(crate) struct PgTestDb {
    admin_url: String,
    name: String,
    url: String,
}

impl PgTestDb {
    /// A new empty database in the cluster of `GPUFLEET_TEST_POSTGRES`.
    ///
    /// # Panics
    /// When the variable is not set or the cluster refuses.
    pub(super) fn create() -> PgTestDb {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let admin_url = std::env::var("GPUFLEET_TEST_POSTGRES").expect(
            "GPUFLEET_TEST_ENGINE=postgres needs GPUFLEET_TEST_POSTGRES, the URL of a cluster \
             whose user may create databases (.ci/run starts one)",
        );
        let name = format!(
            "gpufleet_test_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        admin(
            &admin_url,
            &format!("DROP DATABASE IF EXISTS {name}; CREATE DATABASE {name}"),
        );
        let url = with_dbname(&admin_url, &name);
        PgTestDb {
            admin_url,
            name,
            url,
        }
    }

    /// Its URL.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for PgTestDb {
    fn drop(&mut self) {
        admin(
            &self.admin_url,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

/// Runs `sql` on the cluster's admin database.
fn admin(url: &str, sql: &str) {
    let target = PgTarget::parse(url).expect("GPUFLEET_TEST_POSTGRES is a PostgreSQL URL");
    let conn = PgConn::connect(&target).unwrap_or_else(|e| {
        panic!(
            "connecting to {target}: {}",
            explain_connect_error(&e, &target)
        )
    });
    for statement in sql.split("; ") {
        conn.batch(statement)
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
}

/// `url` with its database replaced by `name`.
fn with_dbname(url: &str, name: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let after_scheme = base.find("://").map_or(0, |i| i + 3);
    let base = match base[after_scheme..].find('/') {
        Some(slash) => &base[..after_scheme + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    }
}

/// A fresh store for a test, on the engine under test ([`engine_under_test`]): an SQLite file in a
/// temp dir, or a new PostgreSQL database. Keep the [`TestDb`] alive as long as the store. The
/// tests of the pages and of the regression check take theirs here too, so that they run on
/// both engines.
pub(crate) fn temp_store() -> (TestDb, Store) {
    match engine_under_test() {
        Engine::Sqlite => {
            let (dir, store) = temp_sqlite_store();
            (TestDb::Dir { _dir: dir }, store)
        }
        Engine::Postgres => {
            let db = PgTestDb::create();
            let store = Store::open_postgres(db.url()).expect("open store");
            (TestDb::Postgres { _db: db }, store)
        }
    }
}

/// A fresh store on a real SQLite file in a temp dir (keep the dir alive as long as the store).
pub(super) fn temp_sqlite_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(&dir.path().join("fleet.db")).expect("open store");
    (dir, store)
}

/// Everything about a file that "untouched" promises.
#[derive(PartialEq)]
pub(super) struct FileState {
    pub bytes: Vec<u8>,
    pub modified: SystemTime,
    pub wal: bool,
    pub shm: bool,
    pub journal: bool,
}

impl fmt::Debug for FileState {
    /// Length and a checksum instead of the bytes, so a failing comparison stays readable.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fnv = self.bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        f.debug_struct("FileState")
            .field("len", &self.bytes.len())
            .field("fnv1a", &format_args!("{fnv:016x}"))
            .field("modified", &self.modified)
            .field("wal", &self.wal)
            .field("shm", &self.shm)
            .field("journal", &self.journal)
            .finish()
    }
}

pub(super) fn file_state(path: &Path) -> FileState {
    FileState {
        bytes: std::fs::read(path).expect("read file"),
        modified: std::fs::metadata(path)
            .and_then(|m| m.modified())
            .expect("mtime"),
        wal: sidecar(path, "-wal").exists(),
        shm: sidecar(path, "-shm").exists(),
        journal: sidecar(path, "-journal").exists(),
    }
}

/// A store whose clock the test moves by hand, starting at 1000.
pub(super) fn clocked_store() -> (TestDb, Store, Arc<Mutex<f64>>) {
    let (dir, store) = temp_store();
    let now = Arc::new(Mutex::new(1000.0));
    let clock = now.clone();
    let store = store.with_clock(move || *clock.lock().unwrap());
    (dir, store, now)
}

/// The names in `dir`, sorted.
pub(super) fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A complete `ok` result for `agent_id` with three samples.
pub(crate) fn sample_result(run_id: &str, agent_id: i64) -> ResultRecord {
    ResultRecord {
        run_id: run_id.to_owned(),
        campaign_id: None,
        job_id: None,
        agent_id,
        device_row_id: None,
        device_id: "cpu:0".into(),
        backend: "cpu".into(),
        spec_key: "gemm/naive/k=64,m=64,n=64/f32/compute".into(),
        kernel: "gemm".into(),
        variant: "naive".into(),
        params: BTreeMap::from([("m".into(), 64), ("n".into(), 64), ("k".into(), 64)]),
        dtype: "f32".into(),
        mode: "compute".into(),
        status: "ok".into(),
        message: String::new(),
        metric_kind: Some("flops".into()),
        metric_unit: Some("GFLOP/s".into()),
        metric_value: Some(12.5),
        higher_is_better: Some(true),
        pct_of_peak: Some(3.25),
        peak_source: String::new(),
        median_s: Some(4.2e-5),
        p10_s: Some(4.0e-5),
        p90_s: Some(4.5e-5),
        min_s: Some(3.9e-5),
        max_s: Some(5.0e-5),
        mean_s: Some(4.25e-5),
        stddev_s: Some(2.0e-6),
        cv: Some(0.047),
        ci_low_s: None,
        ci_high_s: None,
        target_ci_pct: None,
        noisy: false,
        robust_cv: Some(0.03),
        p25_s: Some(4.1e-5),
        p75_s: Some(4.4e-5),
        upper_fence_s: Some(4.85e-5),
        outliers_high: Some(1),
        iterations: 3,
        validation: json!({"max_abs_err": 1e-6, "tolerance": 1e-4, "passed": true}),
        config: json!({"tile": 8}),
        fingerprint: json!({"agent_version": "0.1.0", "driver": "none"}),
        stderr_tail: String::new(),
        signal: None,
        started_at: 1_700_000_000.25,
        wall_s: 0.5,
        created_at: None,
        times: vec![4.0e-5, 4.2e-5, 4.5e-5],
        energy: json!({"joules": 1.25, "method": "counter"}),
        energy_j: Some(1.25),
        avg_watts: Some(250.0),
        metric_per_watt: Some(0.05),
        joules_per_unit: Some(2.5),
        power: vec![
            PowerPoint {
                source: "nvml".into(),
                scope: "board".into(),
                pci_bus_id: "0000:06:00.0".into(),
                monotonic_ns: 1_000_000_000,
                wall_unix_s: 1_700_000_000.0,
                reading: Reading {
                    watts: Some(70.0),
                    energy_j: Some(0.0),
                    temperature_c: Some(31.0),
                    sclk_mhz: Some(1980),
                    mclk_mhz: None,
                    utilization_pct: None,
                },
            },
            PowerPoint {
                source: "nvml".into(),
                scope: "board".into(),
                pci_bus_id: "0000:06:00.0".into(),
                monotonic_ns: 1_050_000_000,
                wall_unix_s: 1_700_000_000.05,
                reading: Reading {
                    watts: Some(430.5),
                    energy_j: Some(12.5),
                    temperature_c: None,
                    sclk_mhz: None,
                    mclk_mhz: None,
                    utilization_pct: Some(100.0),
                },
            },
        ],
        samples_compacted_at: None,
        power_compacted_at: None,
    }
}

/// Asserts that `err` is [`StoreError::InvalidInput`] naming `field`.
#[track_caller]
pub(super) fn assert_invalid(err: &StoreError, field: &str) {
    assert!(
        matches!(err, StoreError::InvalidInput { field: f, .. } if *f == field),
        "expected invalid input in `{field}`, got: {err}"
    );
}

/// A fresh PostgreSQL database for a test that needs one whatever engine the suite runs on, or
/// `None` (after saying why) when `GPUFLEET_TEST_POSTGRES` is not set; then a test fails instead
/// when `GPUFLEET_REQUIRE` names postgres.
pub(crate) fn pg_test_db() -> Option<PgTestDb> {
    if std::env::var("GPUFLEET_TEST_POSTGRES").is_ok() {
        return Some(PgTestDb::create());
    }
    let required = std::env::var("GPUFLEET_REQUIRE")
        .is_ok_and(|v| v.split(',').any(|b| b.trim() == "postgres"));
    assert!(
        !required,
        "GPUFLEET_REQUIRE names postgres but GPUFLEET_TEST_POSTGRES is not set"
    );
    eprintln!("skipping: GPUFLEET_TEST_POSTGRES is not set (ci/postgres.sh starts a cluster)");
    None
}
