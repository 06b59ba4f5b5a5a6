use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::super::test_support::{file_state, names, sample_result, temp_sqlite_store};
use super::super::{ResultFilter, StoreError};
use super::*;

/// Inserts `n` results named `PREFIX-i` for a fresh agent called `agent`.
fn insert_results(store: &mut Store, agent: &str, prefix: &str, n: usize) {
    let agent = store.add_agent(agent, "http://h:1", None).unwrap().id;
    for i in 0..n {
        store
            .insert_result(&sample_result(&format!("{prefix}-{i}"), agent))
            .unwrap();
    }
}

/// The run ids of every result in the database at `path`, read as `db backup` would.
fn run_ids(path: &Path) -> BTreeSet<String> {
    Store::open_read_only(path)
        .unwrap()
        .results(&ResultFilter::default())
        .unwrap()
        .into_iter()
        .map(|r| r.record.run_id)
        .collect()
}

#[test]
fn a_backup_taken_while_another_connection_writes_holds_everything_committed_before() {
    let (dir, mut store) = temp_sqlite_store();
    let path = store.path().to_path_buf();
    insert_results(&mut store, "before", "before", 200);
    let before = run_ids(&path);
    assert_eq!(before.len(), 200);

    // A campaign's writer: its own connection, inserting until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writer = {
        let (stop, written) = (stop.clone(), written.clone());
        let mut store = store;
        std::thread::spawn(move || {
            let agent = store.add_agent("during", "http://h:1", None).unwrap().id;
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let inserted = store
                    .insert_result(&sample_result(&format!("during-{i}"), agent))
                    .expect("the writer keeps writing while the backup runs");
                assert!(inserted);
                written.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
            i
        })
    };
    let wait_for_a_write = |since: u64| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while written.load(Ordering::Relaxed) <= since {
            assert!(Instant::now() < deadline, "the writer stalled");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    wait_for_a_write(0);

    // `db backup` reads through its own read-only connection, a few pages a step so the writer's
    // commits land between steps and restart the copy.
    let reader = Store::open_read_only(&path).unwrap();
    let dest = dir.path().join("backup.db");
    let mut calls = Vec::new();
    let summary = reader
        .backup_in_steps(&dest, 4, &mut |done, total| {
            if calls.is_empty() {
                // A commit mid-backup, for certain.
                wait_for_a_write(written.load(Ordering::Relaxed));
            }
            calls.push((done, total));
        })
        .unwrap();
    let during = written.load(Ordering::Relaxed);
    wait_for_a_write(during);
    stop.store(true, Ordering::Relaxed);
    let total_written = writer.join().unwrap();
    assert!(total_written > 0);

    assert!(
        calls.windows(2).any(|w| w[1].0 <= w[0].0),
        "the commit mid-backup restarted the copy: {calls:?}"
    );
    assert_eq!(calls.last().map(|&(d, t)| d == t), Some(true), "{calls:?}");
    let copy = Store::open_read_only(&dest).unwrap();
    assert_eq!(copy.integrity_check().unwrap(), "ok");
    let copied = run_ids(&dest);
    assert!(copied.is_superset(&before), "every earlier result is kept");
    assert_eq!(summary.results, copied.len() as u64);
    assert_eq!(summary.path, dest);
    assert_eq!(summary.bytes, std::fs::metadata(&dest).unwrap().len());
    drop(copy);

    // One plain file: rollback journal in the header (bytes 18 and 19 are 1), no sidecar needed.
    let bytes = std::fs::read(&dest).unwrap();
    assert_eq!((bytes[18], bytes[19]), (1, 1));
    assert!(
        names(dir.path())
            .iter()
            .all(|n| !n.starts_with("backup.db") || n == "backup.db"),
        "{:?}",
        names(dir.path())
    );
}

#[test]
fn a_backup_refuses_an_existing_destination_and_leaves_it_untouched() {
    let (dir, mut store) = temp_sqlite_store();
    insert_results(&mut store, "a", "r", 3);
    let dest = dir.path().join("precious.db");
    std::fs::write(&dest, b"not to be overwritten").unwrap();
    let before = file_state(&dest);
    let listing = names(dir.path());

    let err = store.backup_to(&dest, |_, _| {}).unwrap_err();
    assert!(matches!(err, StoreError::Exists { .. }), "{err}");
    assert!(err.to_string().contains("precious.db"), "{err}");
    assert_eq!(file_state(&dest), before);
    assert_eq!(names(dir.path()), listing, "no partial file left");

    // A stale log beside a free name would be replayed onto the copy: refused too.
    let fresh = dir.path().join("fresh.db");
    std::fs::write(sidecar(&fresh, "-wal"), b"stale").unwrap();
    let err = store.backup_to(&fresh, |_, _| {}).unwrap_err();
    assert!(err.to_string().contains("fresh.db-wal"), "{err}");
    assert!(!fresh.exists());
}

#[test]
fn a_backup_of_an_in_memory_store_is_a_file() {
    let mut store = Store::open_in_memory().unwrap();
    insert_results(&mut store, "a", "r", 2);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("from-memory.db");
    let summary = store.backup_to(&dest, |_, _| {}).unwrap();
    assert_eq!(summary.results, 2);
    assert_eq!(run_ids(&dest).len(), 2);
}

/// A database with results `kept-0..n` at `dir/fleet.db` and its backup `dir/backup.db`, then
/// `later` more results in the database only.
fn database_and_backup(dir: &Path, n: usize, later: usize) -> (PathBuf, PathBuf) {
    let db = dir.join("fleet.db");
    let backup = dir.join("backup.db");
    let mut store = Store::open(&db).unwrap();
    insert_results(&mut store, "a", "kept", n);
    store.backup_to(&backup, |_, _| {}).unwrap();
    insert_results(&mut store, "b", "later", later);
    (db, backup)
}

#[test]
fn a_restore_waits_for_the_serve_to_stop_then_replaces_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let (db, backup) = database_and_backup(dir.path(), 5, 3);
    let serve = ServeLock::acquire(&db).unwrap().expect("a file has a lock");
    let second_serve = ServeLock::acquire(&db).unwrap().expect("serves share");
    let before = file_state(&db);
    let listing = names(dir.path());

    let err = Store::restore(&backup, &db, false).unwrap_err();
    let StoreError::ServeRunning { path, pids } = &err else {
        panic!("{err}");
    };
    assert_eq!(path, &db);
    assert!(pids.is_empty() || pids == &[std::process::id()], "{pids:?}");
    assert!(err.to_string().contains("stop it first"), "{err}");
    assert_eq!(file_state(&db), before);
    assert_eq!(names(dir.path()), listing, "nothing created or moved");

    drop(serve);
    assert!(
        Store::restore(&backup, &db, false).is_err(),
        "one serve left"
    );
    drop(second_serve);
    let summary = Store::restore(&backup, &db, false).unwrap();
    assert_eq!(summary.results, 5);
    assert_eq!(summary.kept, Some(sidecar(&db, ".before-restore")));
    assert_eq!(summary.schema_version, LATEST_VERSION);
    let restored = run_ids(&db);
    assert_eq!(restored, run_ids(&backup));
    assert_eq!(restored.len(), 5);
    assert_eq!(run_ids(&sidecar(&db, ".before-restore")).len(), 8);
    Store::open(&db).unwrap();
    assert!(
        names(dir.path()).iter().all(|n| !n.contains(".partial")),
        "{:?}",
        names(dir.path())
    );
}

#[test]
fn a_restore_refuses_a_source_that_is_not_a_sound_gpufleet_database() {
    let dir = tempfile::tempdir().unwrap();
    let (db, _backup) = database_and_backup(dir.path(), 2, 0);
    let before = file_state(&db);

    let csv = dir.path().join("results.csv");
    std::fs::write(&csv, b"kernel,gflops\ngemm,1234.5\n").unwrap();
    let foreign = dir.path().join("browser.sqlite");
    Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE visits (url TEXT)")
        .unwrap();
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    // A gpufleet database whose device points at an agent that is not there.
    let damaged = dir.path().join("damaged.db");
    Store::open(&damaged)
        .unwrap()
        .conn
        .execute_batch(
            "PRAGMA foreign_keys = OFF;
             INSERT INTO devices (agent_id, device_id, backend, vendor, name, arch,
                                  pci_bus_id, info_json, first_seen, last_seen)
             VALUES (99, 'cpu:0', 'cpu', 'x', 'x', 'x', '', '{}', 0, 0);",
        )
        .unwrap();
    let listing = names(dir.path());

    for (source, want) in [
        (&csv, "not an SQLite file"),
        (&foreign, "1 tables"),
        (&empty, "it is empty"),
        (&damaged, "failed the integrity check"),
        (&dir.path().join("missing.db"), "no database to restore"),
    ] {
        let err = Store::restore(source, &db, true).unwrap_err();
        let text = err.to_string();
        assert!(text.contains(want), "{}: {text}", source.display());
        assert_eq!(file_state(&db), before, "{}", source.display());
        assert_eq!(names(dir.path()), listing, "{}", source.display());
    }
}

#[test]
fn a_restore_keeps_one_replaced_database_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let (db, backup) = database_and_backup(dir.path(), 4, 1);
    let kept = sidecar(&db, ".before-restore");
    Store::restore(&backup, &db, false).unwrap();
    let kept_state = file_state(&kept);
    let db_state = file_state(&db);

    let err = Store::restore(&backup, &db, false).unwrap_err();
    assert!(matches!(err, StoreError::Exists { .. }), "{err}");
    assert!(err.to_string().contains("--force"), "{err}");
    assert_eq!(file_state(&kept), kept_state);
    assert_eq!(file_state(&db), db_state);

    Store::restore(&backup, &db, true).unwrap();
    assert_eq!(
        run_ids(&kept).len(),
        4,
        "the kept copy is the last replaced"
    );
    assert_eq!(run_ids(&db).len(), 4);
}

#[test]
fn a_restore_creates_a_missing_target_and_drops_stale_logs() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, backup) = database_and_backup(dir.path(), 2, 0);
    let target = dir.path().join("new.db");
    std::fs::write(sidecar(&target, "-wal"), b"stale log of a deleted database").unwrap();
    let summary = Store::restore(&backup, &target, false).unwrap();
    assert_eq!(summary.kept, None);
    assert!(!sidecar(&target, "-wal").exists());
    assert_eq!(run_ids(&target).len(), 2);
}

#[test]
fn a_restore_refuses_to_replace_another_applications_database() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, backup) = database_and_backup(dir.path(), 1, 0);
    let foreign = dir.path().join("browser.sqlite");
    Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE visits (url TEXT)")
        .unwrap();
    let before = file_state(&foreign);
    let err = Store::restore(&backup, &foreign, true).unwrap_err();
    assert!(matches!(err, StoreError::ForeignDatabase { .. }), "{err}");
    assert_eq!(file_state(&foreign), before);
}

#[test]
fn stats_count_the_rows_and_bytes_of_every_table_and_index() {
    let (_dir, mut store) = temp_sqlite_store();
    insert_results(&mut store, "a", "r", 7);
    let stats = store.stats().unwrap();
    let results = stats
        .tables
        .iter()
        .find(|t| t.name == "results")
        .expect("results is listed");
    assert_eq!(results.rows, Some(7));
    assert_eq!(results.kind, ObjectKind::Table);
    assert!(results.bytes.unwrap() > 0, "the bundled SQLite has dbstat");
    assert!(
        stats
            .tables
            .iter()
            .any(|t| t.kind == ObjectKind::Index && t.table == "results" && t.rows.is_none())
    );
    assert!(stats.tables.iter().any(|t| t.name == "sqlite_schema"));
    let bytes: Vec<u64> = stats.tables.iter().map(|t| t.bytes.unwrap()).collect();
    assert!(bytes.windows(2).all(|w| w[0] >= w[1]), "{bytes:?}");
    assert_eq!(
        bytes.iter().sum::<u64>(),
        stats.database_bytes() - stats.freelist_count * stats.page_size,
        "every page but the free ones belongs to one object"
    );
    assert_eq!(stats.schema_version, LATEST_VERSION);
    assert!(stats.file_bytes.is_some());
    let json = serde_json::to_value(&stats).unwrap();
    assert_eq!(json["tables"][0]["kind"], "table");
}
