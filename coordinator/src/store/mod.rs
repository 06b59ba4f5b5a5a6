//! The coordinator's store: every agent, device, campaign, job and result gpufleet knows, in one
//! SQLite file by default, or in a PostgreSQL database shared by several serves.
//!
//! # Two engines
//!
//! SQLite is the default: one file, nothing to install, one serve writing it. PostgreSQL is for
//! several serves sharing one store (a `postgres://` URL as `--db`; each job is run by the serve
//! that claimed it, see `leases.rs`). Every statement goes through `engine::Conn` (SQLite or
//! PostgreSQL), in the SQL both share.
//!
//! Each engine has its own migrations, kept by hand: SQLite's `migrations/NNNN_*.sql`,
//! PostgreSQL's `migrations/postgres/` (the whole of version 10 in one file, then every later step
//! in its dialect under the same number; a step that changes nothing on one engine is a file there
//! that says why). The test `coordinator/tests/postgres/schema.rs` migrates a fresh database of
//! each and compares what they have: tables, columns in order (types mapped to common names,
//! nullability, defaults), primary keys, unique constraints, indexes, foreign keys and triggers. It
//! fails on any difference that its one allowlist (`ALLOWED`, a reason per entry: the counters'
//! shards, the version table, the triggers' names, ...) does not excuse, so a step written for one
//! engine only fails CI.
//!
//! What only an SQLite file has (the online backup, restore, page statistics, the serve lock) says
//! so on PostgreSQL ([`StoreError::SqliteOnly`]). `copy.rs` moves a whole store from one engine to
//! the other and checks it table by table. The rest of this page describes SQLite; PostgreSQL keeps
//! the same tables, constraints, triggers and guarantees, but for what that allowlist names.
//!
//! # Schema
//!
//! | table | one row per | notes |
//! | --- | --- | --- |
//! | `agents` | agent the user added | `name` unique; `removed_at` hides it instead of deleting it; `kind` direct or dial-in (see `fleet.rs`) |
//! | `devices` | (agent, device id) | refreshed on every describe; `info_json` is the agent's full description |
//! | `campaigns` | suite run over a set of agents | `running` → `done` / `failed` / `interrupted` |
//! | `jobs` | (campaign, spec, device) | `queued` → `running` → `done` / `failed` / `interrupted`; `run_id` unique; `claimed_by`/`lease_until` while running (see `leases.rs`) |
//! | `results` | run | `run_id` unique; summary statistics, metric, validation, fingerprint |
//! | `result_samples` | result | raw per-iteration times, little-endian `f64`s in a BLOB |
//! | `power_samples` | (result, sample) | the power trace of a run's device |
//! | `schedules` | cron schedule | `last_slot` is the latest slot handled; see `schedules.rs` |
//! | `checks` | checked result | regression verdict; `suspect` until its confirmation rerun ends |
//! | `alerts` | confirmed change | before/after figures; resets the series' baseline |
//! | `latest_results` | series (agent, device id, spec key) | its newest result; kept by a trigger on insert |
//! | `result_counts` | status (PostgreSQL: and shard) | results with it; kept by triggers (for `/metrics`); readers add the shards up |
//! | `campaign_counts` | (campaign, `job`/`result`, state; PostgreSQL: and shard) | kept by triggers on jobs and results |
//!
//! Results are indexed by time (`results_by_time`, for pages walked from a cursor), by series
//! (`results_by_series`: agent, device id, spec key, time, for histories), by `(device_row_id,
//! spec_key, segment, id)` for regression windows and by campaign for campaign reports; no hot read
//! scans the table (see `listing.rs` and its `EXPLAIN QUERY PLAN` test). Old raw samples and power
//! traces can be dropped with their summaries kept (`compact.rs`); backups, restores and sizes are in
//! `maintenance.rs`. Timestamps are unix seconds as `REAL`, from the store's clock
//! ([`Store::with_clock`] lets tests inject one).
//!
//! # Why WAL and one writer
//!
//! The coordinator writes from one place (a [`Store`] behind a mutex, called from `spawn_blocking`)
//! while the dashboard and CLI read. In WAL mode readers never block the writer nor the writer the
//! readers, and `synchronous=NORMAL` makes a commit cost an append to the log rather than an fsync
//! of the database (a power cut may lose the last commits, never corrupt the file). `busy_timeout`
//! (5 s) covers a second process (`gpufleet results` while a campaign runs) taking the write lock
//! briefly. `foreign_keys=ON` is per connection in SQLite, so every open sets it.
//!
//! # Idempotency by run id
//!
//! Every run carries a run id chosen by the coordinator before it is sent. [`Store::insert_result`]
//! writes the result, its samples and its job's state in one transaction and ignores a run id it
//! already has, so an agent retrying a stream, a coordinator restarting mid-campaign or an import of
//! the same export never duplicates or half-stores a result.
//!
//! # Migrations
//!
//! Numbered SQL files under `migrations/`, embedded with `include_str!`, applied in one transaction
//! at open; the version is `PRAGMA user_version` (PostgreSQL: the steps of `migrations/postgres/`,
//! under an advisory lock, and the version in the table `gpufleet_schema`). A database from a newer
//! gpufleet is refused before anything is written (see `migrations.rs` and `guard.rs`), as is any
//! file that is not a gpufleet SQLite database: a mistyped `--db` path must never be rewritten.
//!
//! # Backups, restores and the serve lock
//!
//! `maintenance.rs`: [`Store::backup_to`] writes a consistent copy through SQLite's online backup
//! API while a serve keeps writing; [`Store::restore`] puts a copy in place of a database, keeping
//! the old one as `DB.before-restore`, and refuses while a serve holds the [`ServeLock`] on
//! `DB.serve-lock`; [`Store::stats`] gives rows and bytes per table and index. Beside a database
//! `DB` the store may thus leave `DB-wal` and `DB-shm` (SQLite's), `DB.serve-lock` (empty; the
//! lock is on the open file, not its content) and `DB.before-restore`.
//!
//! # Removing agents
//!
//! Results are the point of the store, so removing an agent must not remove or orphan them. Agents
//! are therefore never deleted: [`Store::remove_agent`] sets `removed_at`, listings and lookups hide
//! the agent, its results keep pointing at its row (every foreign key is `ON DELETE RESTRICT`, so even
//! a hand-written `DELETE` cannot orphan them), and adding the same name again revives that row
//! with the new URL and token, so the agent's history continues.

mod agents;
mod campaigns;
mod checks;
mod compact;
mod copy;
mod engine;
mod error;
mod fleet;
mod guard;
mod leases;
mod listing;
mod maintenance;
mod migrations;
mod open;
mod results;
mod rows;
mod schedules;
#[cfg(test)]
pub(crate) mod test_support;
mod values;

pub use self::agents::{MAX_AGENT_NAME, MAX_AGENT_URL};
pub use self::checks::{
    AlertFilter, AlertRow, CheckCandidate, CheckRow, NewAlert, PendingConfirmation,
};
pub use self::compact::{CompactReport, Retention};
pub use self::copy::{CopyReport, TableCopy};
pub use self::engine::{DEFAULT_RETRY_S, DbError, Engine, Outage, StoreHealth, is_postgres_url};
pub use self::error::StoreError;
pub use self::fleet::{AttachRefusal, token_hash};
pub use self::listing::{Cursor, Direction, MAX_PAGE, ResultFilter, ResultPage, check_limit};
pub use self::maintenance::{
    BACKUP_STEP_PAGES, BackupSummary, DbStats, ObjectKind, RestoreSummary, ServeLock, TableStats,
};
pub use self::migrations::LATEST_VERSION;
pub use self::open::{BUSY_TIMEOUT, Clock, Store, postgres_url};
pub use self::results::{SEGMENT_FIELDS, segment_of};
pub use self::rows::{
    AgentKind, AgentRow, CampaignRow, CampaignState, DeviceRecord, DeviceRow, JobCounts, JobRow,
    JobState, NewJob, PowerPoint, ResultRecord, ResultRow,
};
pub use self::schedules::{OwnedCampaign, ScheduleFiring, ScheduleRow};

#[cfg(test)]
mod tests {
    use super::test_support::{file_state, postgres_run, temp_store};
    use super::*;
    use rusqlite::Connection;

    #[test]
    fn open_sets_the_pragmas() {
        if postgres_run("pragmas") {
            return;
        }
        let (_dir, store) = temp_store();
        let conn = store.conn.as_sqlite().unwrap();
        let mode: String = conn
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let fk: i64 = conn
            .pragma_query_value(None, "foreign_keys", |r| r.get(0))
            .unwrap();
        assert_eq!(fk, 1);
        let sync: i64 = conn
            .pragma_query_value(None, "synchronous", |r| r.get(0))
            .unwrap();
        assert_eq!(sync, 1, "NORMAL");
        let busy: i64 = conn
            .pragma_query_value(None, "busy_timeout", |r| r.get(0))
            .unwrap();
        assert_eq!(busy, 5000);
        assert_eq!(store.schema_version().unwrap(), LATEST_VERSION);
    }

    #[test]
    fn open_creates_a_missing_file_and_reopens_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub-dir-less.db");
        assert!(!path.exists());
        let mut store = Store::open(&path).unwrap();
        assert!(path.exists());
        let id = store.add_agent("keep-me", "http://h:1", None).unwrap().id;
        drop(store);
        let store = Store::open(&path).unwrap();
        assert_eq!(store.agent("keep-me").unwrap().map(|a| a.id), Some(id));
        assert_eq!(store.schema_version().unwrap(), LATEST_VERSION);
    }

    #[test]
    fn open_accepts_an_empty_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("touched.db");
        std::fs::write(&path, b"").unwrap();
        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), LATEST_VERSION);
    }

    #[test]
    fn open_read_only_says_what_a_file_without_a_database_is_and_how_to_make_one() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("touched.db");
        std::fs::write(&empty, b"").unwrap();
        let err = Store::open_read_only(&empty).unwrap_err();
        assert!(
            matches!(err, StoreError::NotCreated { what, .. } if what.contains("0 bytes")),
            "{err}"
        );
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("{} is an empty file (0 bytes)", empty.display())),
            "{text}"
        );
        assert!(
            text.contains(&format!("`gpufleet serve --db {}`", empty.display())),
            "{text}"
        );
        assert!(!text.contains("no rows"), "{text}");
        assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0, "left empty");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

        // An SQLite file without tables (`sqlite3 x.db VACUUM`) holds no database either.
        let blank = dir.path().join("blank.db");
        Connection::open(&blank)
            .unwrap()
            .execute_batch("VACUUM")
            .unwrap();
        let err = Store::open_read_only(&blank).unwrap_err();
        assert!(
            err.to_string().contains("an empty SQLite database"),
            "{err}"
        );

        // An older schema is named, with what upgrades it.
        let old = dir.path().join("old.db");
        let store = Store::open(&old).unwrap();
        store
            .conn
            .as_sqlite()
            .unwrap()
            .pragma_update(None, "user_version", 1)
            .unwrap();
        drop(store);
        let err = Store::open_read_only(&old).unwrap_err();
        assert!(
            matches!(err, StoreError::OlderSchema { found: 1, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("schema version 1, older"), "{err}");

        let err = Store::open_read_only(&dir.path().join("typo.db")).unwrap_err();
        assert!(
            err.to_string().contains("no gpufleet database here"),
            "{err}"
        );
        let err = Store::open_read_only(dir.path()).unwrap_err();
        assert!(matches!(err, StoreError::NotSqlite { .. }), "{err}");
    }

    #[test]
    fn open_refuses_a_file_that_is_not_sqlite_and_leaves_it_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.csv");
        std::fs::write(&path, b"kernel,gflops\ngemm,1234.5\n").unwrap();
        let before = file_state(&path);

        let err = Store::open(&path).unwrap_err();
        assert!(matches!(err, StoreError::NotSqlite { .. }), "{err}");
        assert!(err.to_string().contains("results.csv"), "{err}");
        assert!(err.to_string().contains("refusing to touch it"), "{err}");

        assert_eq!(file_state(&path), before);
    }

    #[test]
    fn open_refuses_a_newer_schema_and_leaves_the_file_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("future.db");
        let mut store = Store::open(&path).unwrap();
        store.add_agent("a", "http://h:1", None).unwrap();
        // A future gpufleet migrated it further; the file is still in WAL mode.
        store
            .conn
            .as_sqlite()
            .unwrap()
            .pragma_update(None, "user_version", LATEST_VERSION + 1)
            .unwrap();
        drop(store);
        let before = file_state(&path);
        assert!(
            !before.wal && !before.shm,
            "clean close removes the sidecars"
        );

        let err = Store::open(&path).unwrap_err();
        assert!(
            matches!(err, StoreError::NewerSchema { found, supported, .. }
                if found == LATEST_VERSION + 1 && supported == LATEST_VERSION),
            "{err}"
        );
        assert!(err.to_string().contains("future.db"), "{err}");

        assert_eq!(file_state(&path), before);
    }

    #[test]
    fn open_refuses_a_newer_rollback_journal_database_too() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("future-delete.db");
        Connection::open(&path)
            .unwrap()
            .execute_batch(&format!(
                "PRAGMA application_id = {}; PRAGMA user_version = {}; CREATE TABLE x (y);",
                migrations::APPLICATION_ID,
                LATEST_VERSION + 3
            ))
            .unwrap();
        let before = file_state(&path);
        let err = Store::open(&path).unwrap_err();
        assert!(matches!(err, StoreError::NewerSchema { .. }), "{err}");
        assert_eq!(file_state(&path), before);
    }

    #[test]
    fn open_sees_a_newer_schema_still_in_the_wal_of_a_database_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("busy.db");
        let running = Store::open(&path).unwrap();
        // Another coordinator holds it open and has upgraded it; the change is only in the WAL.
        running
            .conn
            .as_sqlite()
            .unwrap()
            .pragma_update(None, "user_version", LATEST_VERSION + 1)
            .unwrap();
        assert!(guard::sidecar(&path, "-wal").exists());
        let err = Store::open(&path).unwrap_err();
        assert!(matches!(err, StoreError::NewerSchema { .. }), "{err}");
        assert_eq!(running.schema_version().unwrap(), LATEST_VERSION + 1);
    }

    #[test]
    fn open_refuses_another_applications_database_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("browser-history.sqlite");
        Connection::open(&path)
            .unwrap()
            .execute_batch("CREATE TABLE visits (url TEXT); INSERT INTO visits VALUES ('x');")
            .unwrap();
        let before = file_state(&path);
        let err = Store::open(&path).unwrap_err();
        assert!(matches!(err, StoreError::ForeignDatabase { .. }), "{err}");
        assert_eq!(file_state(&path), before);
    }

    #[test]
    fn integrity_check_reports_ok_and_broken_foreign_keys() {
        let (_dir, store) = temp_store();
        assert_eq!(store.integrity_check().unwrap(), "ok");
        // Break a reference behind the store's back (PostgreSQL: as a superuser, with the
        // foreign keys' triggers off, as a careless restore would).
        let (off, on) = match store.engine() {
            Engine::Sqlite => ("PRAGMA foreign_keys = OFF", "PRAGMA foreign_keys = ON"),
            Engine::Postgres => (
                "SET session_replication_role = replica",
                "SET session_replication_role = origin",
            ),
        };
        store
            .conn
            .execute_batch(&format!(
                "{off};
                 INSERT INTO devices (agent_id, device_id, backend, vendor, name, arch,
                                      pci_bus_id, info_json, first_seen, last_seen)
                 VALUES (99, 'cpu:0', 'cpu', 'x', 'x', 'x', '', '{{}}', 0, 0);
                 {on};"
            ))
            .unwrap();
        let report = store.integrity_check().unwrap();
        assert!(report.contains("devices"), "{report}");
        assert!(report.contains("agents"), "{report}");
    }

    #[test]
    fn store_can_move_into_spawn_blocking() {
        fn assert_send<T: Send + 'static>() {}
        assert_send::<Store>();
        assert_send::<StoreError>();
    }

    #[test]
    fn clock_is_injectable() {
        let store = Store::open_in_memory().unwrap().with_clock(|| 42.5);
        assert_eq!(store.now(), 42.5);
        assert!(crate::time::now() > 1.6e9);
    }
}
