//! The coordinator's SQLite store: every agent, device, campaign, job and result gpufleet knows, in
//! one file.
//!
//! # Schema
//!
//! | table | one row per | notes |
//! | --- | --- | --- |
//! | `agents` | agent the user added | `name` unique; `removed_at` hides it instead of deleting it |
//! | `devices` | (agent, device id) | refreshed on every describe; `info_json` is the agent's full description |
//! | `campaigns` | suite run over a set of agents | `running` → `done` / `failed` / `interrupted` |
//! | `jobs` | (campaign, spec, device) | `queued` → `running` → `done` / `failed` / `interrupted`; `run_id` unique |
//! | `results` | run | `run_id` unique; summary statistics, metric, validation, fingerprint |
//! | `result_samples` | result | raw per-iteration times, little-endian `f64`s in a BLOB |
//! | `power_samples` | (result, sample) | the power trace of a run's device |
//! | `schedules` | cron schedule | `last_slot` is the latest slot handled; see `schedules.rs` |
//! | `checks` | checked result | regression verdict; `suspect` until its confirmation rerun ends |
//! | `alerts` | confirmed change | before/after figures; resets the series' baseline |
//!
//! Results are indexed by `(spec_key, device_row_id, created_at)` for history and regression windows,
//! and by campaign for campaign reports. Timestamps are unix seconds as `REAL`, from the store's clock
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
//! at open; the version is `PRAGMA user_version`. A database from a newer gpufleet is refused before
//! anything is written (see `migrations.rs` and `guard.rs`), as is any file that is not a gpufleet
//! SQLite database: a mistyped `--db` path must never be rewritten.
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
mod error;
mod guard;
mod migrations;
mod results;
mod rows;
mod schedules;
#[cfg(test)]
mod test_support;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OpenFlags};

pub use self::agents::{MAX_AGENT_NAME, MAX_AGENT_URL};
pub use self::checks::{AlertRow, CheckCandidate, CheckRow, NewAlert, PendingConfirmation};
pub use self::error::StoreError;
pub use self::migrations::LATEST_VERSION;
pub use self::results::{SEGMENT_FIELDS, segment_of};
pub use self::rows::{
    AgentRow, CampaignRow, CampaignState, DeviceRecord, DeviceRow, JobCounts, JobRow, JobState,
    NewJob, PowerPoint, ResultFilter, ResultRecord, ResultRow,
};
pub use self::schedules::{OwnedCampaign, ScheduleRow};

use self::error::sql;

/// How long a call waits for another process's write lock before failing with `SQLITE_BUSY`.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Source of "now" for timestamps, in unix seconds.
pub type Clock = Arc<dyn Fn() -> f64 + Send + Sync>;

/// An open gpufleet database. Reads take `&self`, writes `&mut self`; each write is one
/// transaction.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    clock: Clock,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

impl Store {
    /// Opens the database at `path`, creating it if it is missing, and brings its schema up to
    /// [`LATEST_VERSION`].
    ///
    /// Sets WAL mode, `foreign_keys=ON`, `busy_timeout` ([`BUSY_TIMEOUT`]) and `synchronous=NORMAL`.
    ///
    /// # Errors
    /// Refuses, leaving the file and its directory exactly as they were:
    /// [`StoreError::NotSqlite`] for an existing non-empty file that is not SQLite,
    /// [`StoreError::ForeignDatabase`] for another application's SQLite file, and
    /// [`StoreError::NewerSchema`] for a database written by a newer gpufleet.
    /// [`StoreError::Io`] / [`StoreError::Open`] when the file cannot be read, created or migrated
    /// (a failed migration leaves the previous schema).
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        if guard::check_header(path)? == guard::Existing::Sqlite {
            guard::check_schema(path)?;
        }
        let open_err = |context: &'static str| {
            move |source| StoreError::Open {
                path: path.to_path_buf(),
                context,
                source,
            }
        };
        // No SQLITE_OPEN_URI: a file really named `file:x.db` must not be parsed as a URI.
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(open_err("opening"))?;
        Store::configure(conn, path.to_path_buf())
    }

    /// Opens a private in-memory database with the full schema (tests, dry runs).
    ///
    /// # Errors
    /// [`StoreError::Open`] if SQLite cannot allocate it.
    pub fn open_in_memory() -> Result<Store, StoreError> {
        let path = PathBuf::from(":memory:");
        let conn = Connection::open_in_memory().map_err(|source| StoreError::Open {
            path: path.clone(),
            context: "opening",
            source,
        })?;
        Store::configure(conn, path)
    }

    fn configure(mut conn: Connection, path: PathBuf) -> Result<Store, StoreError> {
        let open_err = |context: &'static str| {
            let path = path.clone();
            move |source| StoreError::Open {
                path,
                context,
                source,
            }
        };
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(open_err("setting busy_timeout"))?;
        // Returns the mode now in force: `wal` for files, `memory` for in-memory databases.
        let _mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(open_err("switching to WAL"))?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(open_err("setting synchronous=NORMAL"))?;
        conn.pragma_update(None, "foreign_keys", true)
            .map_err(open_err("enabling foreign keys"))?;
        migrations::migrate(&mut conn, &path)?;
        Ok(Store {
            conn,
            path,
            clock: Arc::new(system_now),
        })
    }

    /// Replaces the clock used for every timestamp the store writes (tests, imports).
    pub fn with_clock(mut self, clock: impl Fn() -> f64 + Send + Sync + 'static) -> Store {
        self.clock = Arc::new(clock);
        self
    }

    /// The file this store was opened on (`:memory:` for an in-memory one).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version of the open database (`PRAGMA user_version`).
    ///
    /// # Errors
    /// [`StoreError::Sqlite`] if the pragma fails.
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        self.conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(sql("reading the schema version"))
    }

    /// Runs `PRAGMA integrity_check` and `PRAGMA foreign_key_check`; returns `"ok"` for a healthy
    /// database, else the problems found, one per line.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`] if the checks cannot run.
    pub fn integrity_check(&self) -> Result<String, StoreError> {
        let context = "checking integrity";
        let mut stmt = self
            .conn
            .prepare("PRAGMA integrity_check")
            .map_err(sql(context))?;
        let mut lines: Vec<String> = stmt
            .query_map([], |r| r.get(0))
            .map_err(sql(context))?
            .collect::<Result<_, _>>()
            .map_err(sql(context))?;
        if lines == ["ok"] {
            lines.clear();
        }
        let mut stmt = self
            .conn
            .prepare("SELECT \"table\", rowid, parent FROM pragma_foreign_key_check")
            .map_err(sql(context))?;
        let violations = stmt
            .query_map([], |r| {
                Ok(format!(
                    "row {} of {} references a missing {} row",
                    r.get::<_, Option<i64>>(1)?.unwrap_or(-1),
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(2)?
                ))
            })
            .map_err(sql(context))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(sql(context))?;
        lines.extend(violations);
        Ok(if lines.is_empty() {
            "ok".to_owned()
        } else {
            lines.join("\n")
        })
    }

    /// Now, from the store's clock.
    fn now(&self) -> f64 {
        (self.clock)()
    }
}

/// Wall-clock unix seconds; 0 if the system clock is before 1970.
pub fn system_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Rejects an empty value for a field that names something.
fn require_non_empty(field: &'static str, value: &str) -> Result<(), StoreError> {
    if value.trim().is_empty() {
        Err(StoreError::invalid(field, "must not be empty"))
    } else {
        Ok(())
    }
}

/// Parses `text` as JSON for `field`, so malformed JSON is refused before it is stored.
fn parse_json(field: &'static str, text: &str) -> Result<serde_json::Value, StoreError> {
    serde_json::from_str(text)
        .map_err(|e| StoreError::invalid(field, format!("is not valid JSON: {e}")))
}

/// Reads a JSON text column back into a value.
fn json_column(row: &rusqlite::Row<'_>, column: &str) -> rusqlite::Result<serde_json::Value> {
    let text: String = row.get(column)?;
    serde_json::from_str(&text).map_err(|e| {
        let index = row.as_ref().column_index(column).unwrap_or(0);
        rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Text, Box::new(e))
    })
}

#[cfg(test)]
mod tests {
    use super::test_support::{file_state, temp_store};
    use super::*;

    #[test]
    fn open_sets_the_pragmas() {
        let (_dir, store) = temp_store();
        let mode: String = store
            .conn
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let fk: i64 = store
            .conn
            .pragma_query_value(None, "foreign_keys", |r| r.get(0))
            .unwrap();
        assert_eq!(fk, 1);
        let sync: i64 = store
            .conn
            .pragma_query_value(None, "synchronous", |r| r.get(0))
            .unwrap();
        assert_eq!(sync, 1, "NORMAL");
        let busy: i64 = store
            .conn
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
        // Break a reference behind the store's back.
        store
            .conn
            .execute_batch(
                "PRAGMA foreign_keys = OFF;
                 INSERT INTO devices (agent_id, device_id, backend, vendor, name, arch,
                                      pci_bus_id, info_json, first_seen, last_seen)
                 VALUES (99, 'cpu:0', 'cpu', 'x', 'x', 'x', '', '{}', 0, 0);
                 PRAGMA foreign_keys = ON;",
            )
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
        assert!(system_now() > 1.6e9);
    }
}
