//! Opening a gpufleet database: the guard's refusals, WAL and the pragmas, migrations, the clock.
//! Why WAL and one writer: see the module docs of `store`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::engine::{Conn, DbError, Engine, PgConn, PgTarget, StoreHealth, Tx};
use super::error::{StoreError, sql};
use super::migrations::PgOpen;
use super::{guard, migrations};

/// How long a call waits for another process's write lock before failing with `SQLITE_BUSY`.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// SQLite's page cache per connection, KiB (the default is 2,000): see [`Store::configure`].
pub const CACHE_KIB: u32 = 128 * 1024;

/// The guard's refusals for an existing file (not SQLite, another application's, newer schema).
fn guard_existing(path: &Path) -> Result<(), StoreError> {
    if guard::check_header(path)? == guard::Existing::Sqlite {
        guard::check_schema(path)?;
    }
    Ok(())
}

/// `StoreError::Open` for `path` at the step `context`, for `map_err`.
fn open_error<E: Into<DbError>>(
    path: &Path,
    context: &'static str,
) -> impl FnOnce(E) -> StoreError {
    let path = path.to_path_buf();
    move |source| StoreError::Open {
        path,
        context,
        source: source.into(),
    }
}

/// `path` as the path part of an SQLite URI: every byte but unreserved ones and `/` escaped.
fn percent_encode(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Source of "now" for timestamps, in unix seconds.
pub type Clock = Arc<dyn Fn() -> f64 + Send + Sync>;

/// An open gpufleet database, in an SQLite file or a PostgreSQL database. Reads take `&self`,
/// writes `&mut self`; each write is one transaction.
pub struct Store {
    pub(super) conn: Conn,
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
    /// [`LATEST_VERSION`](super::migrations::LATEST_VERSION).
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
        guard_existing(path)?;
        let open_err = |context| open_error(path, context);
        // No SQLITE_OPEN_URI: a file really named `file:x.db` must not be parsed as a URI.
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(open_err("opening"))?;
        Store::configure(conn, path.to_path_buf())
    }

    /// Opens an existing database for reading only (listings, comparisons, exports): works on a
    /// file or directory the user cannot write, never creates a file and never migrates.
    ///
    /// # Errors
    /// [`StoreError::Io`] when there is no file at `path` (a mistyped `--db` must not look like an
    /// empty database); [`StoreError::NotCreated`] for an empty file or an SQLite database without
    /// tables; [`StoreError::OlderSchema`] for a database a command that writes must upgrade first;
    /// the guard's refusals as for [`Store::open`]; [`StoreError::Open`] when the file cannot be
    /// read.
    pub fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        // Anything but a missing path (a directory, no permission) is the guard's to name.
        if let Err(e) = std::fs::metadata(path)
            && e.kind() == std::io::ErrorKind::NotFound
        {
            return Err(StoreError::Io {
                path: path.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no gpufleet database here (a command that writes, such as `gpufleet serve` \
                     or `gpufleet demo`, creates one)",
                ),
            });
        }
        // The guard calls a file of 0 bytes fresh (SQLite would make it a database); to a reader
        // it is a file with nothing in it.
        if guard::check_header(path)? == guard::Existing::Fresh {
            return Err(StoreError::NotCreated {
                path: path.to_path_buf(),
                what: "an empty file (0 bytes)",
            });
        }
        guard::check_schema(path)?;
        let open_err = |context| open_error(path, context);
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = Connection::open_with_flags(path, flags).map_err(open_err("opening"))?;
        // A WAL database whose directory is read-only and has no -shm file cannot take the
        // shared-memory lock: read it as immutable (nobody can be writing it from here anyway).
        if conn
            .query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()))
            .is_err()
        {
            let uri = format!("file:{}?immutable=1", percent_encode(path));
            conn = Connection::open_with_flags(uri, flags | OpenFlags::SQLITE_OPEN_URI)
                .map_err(open_err("opening read-only"))?;
        }
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(open_err("setting busy_timeout"))?;
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(open_err("reading the schema version"))?;
        // The guard let version 0 through only for an SQLite file without tables.
        if version == 0 {
            return Err(StoreError::NotCreated {
                path: path.to_path_buf(),
                what: "an empty SQLite database (no tables)",
            });
        }
        if version < migrations::LATEST_VERSION {
            return Err(StoreError::OlderSchema {
                path: path.to_path_buf(),
                found: version,
                latest: migrations::LATEST_VERSION,
            });
        }
        Ok(Store {
            conn: Conn::sqlite(conn),
            path: path.to_path_buf(),
            clock: Arc::new(crate::time::now),
        })
    }

    /// Opens the database `db` names: a `postgres://` URL ([`Store::open_postgres`]) or an SQLite
    /// path ([`Store::open`]).
    ///
    /// # Errors
    /// As those.
    pub fn open_any(db: &Path) -> Result<Store, StoreError> {
        match postgres_url(db) {
            Some(url) => Store::open_postgres(url),
            None => Store::open(db),
        }
    }

    /// [`Store::open_any`] for reading only: [`Store::open_read_only`] for a file,
    /// [`Store::open_postgres_read_only`] for a URL.
    ///
    /// # Errors
    /// As those.
    pub fn open_any_read_only(db: &Path) -> Result<Store, StoreError> {
        match postgres_url(db) {
            Some(url) => Store::open_postgres_read_only(url),
            None => Store::open_read_only(db),
        }
    }

    /// A second connection to the same database (a task that must not hold the first one's
    /// lock for long, such as the serve's daily compaction).
    ///
    /// # Errors
    /// As [`Store::open`] or [`Store::open_postgres`].
    pub fn open_another(&self) -> Result<Store, StoreError> {
        let store = match &self.conn {
            Conn::Sqlite { .. } => Store::open(&self.path)?,
            Conn::Postgres { conn, .. } => Store::postgres(conn.target().clone(), PgOpen::Migrate)?,
        };
        Ok(Store {
            clock: self.clock.clone(),
            ..store
        })
    }

    /// Connects to the PostgreSQL database at `url` and brings its schema up to
    /// [`LATEST_VERSION`](super::migrations::LATEST_VERSION), creating it in an empty database.
    ///
    /// # Errors
    /// [`StoreError::Postgres`] for a malformed URL, a server that cannot be reached, a refused
    /// login or a missing database, naming which (never the password);
    /// [`StoreError::ForeignDatabase`] for a database that holds another application's tables;
    /// [`StoreError::NewerSchema`] for one written by a newer gpufleet; [`StoreError::Open`] when
    /// a migration fails (nothing of it stays).
    pub fn open_postgres(url: &str) -> Result<Store, StoreError> {
        Store::postgres(parse_target(url)?, PgOpen::Migrate)
    }

    /// Connects to the PostgreSQL database at `url` for reading only: never creates or migrates
    /// the schema, and every transaction of the session is read-only.
    ///
    /// # Errors
    /// As [`Store::open_postgres`], and [`StoreError::NotCreated`] for a database without the
    /// gpufleet schema, [`StoreError::OlderSchema`] for one that a command that writes must
    /// upgrade first.
    pub fn open_postgres_read_only(url: &str) -> Result<Store, StoreError> {
        Store::postgres(parse_target(url)?, PgOpen::ReadOnly)
    }

    fn postgres(target: PgTarget, mode: PgOpen) -> Result<Store, StoreError> {
        let conn = PgConn::connect(&target).map_err(|e| StoreError::Postgres {
            target: target.to_string(),
            reason: super::engine::explain_connect_error(&e, &target),
        })?;
        let conn = Conn::postgres(conn);
        let path = PathBuf::from(target.to_string());
        migrations::migrate_postgres(&conn, &path, mode)?;
        Ok(Store {
            conn,
            path,
            clock: Arc::new(crate::time::now),
        })
    }

    /// The SQLite connection, for what only SQLite has; on PostgreSQL,
    /// [`StoreError::SqliteOnly`] naming `what` and PostgreSQL's `remedy`.
    pub(super) fn sqlite_only(
        &self,
        what: &'static str,
        remedy: &'static str,
    ) -> Result<&Connection, StoreError> {
        self.conn
            .as_sqlite()
            .ok_or(StoreError::SqliteOnly { what, remedy })
    }

    /// Whether the database can be reached now (read without the store, by `/healthz`, while
    /// store calls wait out an outage of PostgreSQL).
    pub fn health(&self) -> Arc<StoreHealth> {
        self.conn.health()
    }

    /// Which engine holds this store.
    pub fn engine(&self) -> Engine {
        self.conn.engine()
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
            source: source.into(),
        })?;
        Store::configure(conn, path)
    }

    fn configure(mut conn: Connection, path: PathBuf) -> Result<Store, StoreError> {
        let open_err = |context| open_error(&path, context);
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
        // A result's insert touches a page of each of the results' indexes, most of them at a
        // random place (a run id is a UUID); with SQLite's default 2 MiB page cache, once a
        // history passes a few hundred thousand results nearly every one is read back from the
        // OS, and inserts slow down as the file grows. The cache grows to this on use.
        conn.pragma_update(None, "cache_size", -(CACHE_KIB as i64))
            .map_err(open_err("setting cache_size"))?;
        // Savepoints (a bulk write's per-result rollback) journal in memory, not a temporary file.
        conn.pragma_update(None, "temp_store", "MEMORY")
            .map_err(open_err("setting temp_store=MEMORY"))?;
        migrations::migrate(&mut conn, &path)?;
        Ok(Store {
            conn: Conn::sqlite(conn),
            path,
            clock: Arc::new(crate::time::now),
        })
    }

    /// Replaces the clock used for every timestamp the store writes (tests, imports).
    pub fn with_clock(mut self, clock: impl Fn() -> f64 + Send + Sync + 'static) -> Store {
        self.clock = Arc::new(clock);
        self
    }

    /// Replaces the clock in place (seeding a history night by night).
    pub fn set_clock(&mut self, clock: impl Fn() -> f64 + Send + Sync + 'static) {
        self.clock = Arc::new(clock);
    }

    /// The file this store was opened on (`:memory:` for an in-memory one, the URL without its
    /// password for PostgreSQL).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version of the open database (SQLite's `PRAGMA user_version`, PostgreSQL's
    /// `gpufleet_schema` row).
    ///
    /// # Errors
    /// [`StoreError::Db`] if it cannot be read.
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        let context = "reading the schema version";
        match self.conn.as_sqlite() {
            Some(conn) => conn
                .pragma_query_value(None, "user_version", |r| r.get(0))
                .map_err(sql(context)),
            None => self
                .conn
                .query_row("SELECT version FROM gpufleet_schema", [], |r| r.get(0))
                .map_err(sql(context)),
        }
    }

    /// SQLite: runs `PRAGMA integrity_check` and `PRAGMA foreign_key_check`. PostgreSQL: counts
    /// the rows whose foreign key points nowhere, and lists constraints left unvalidated and
    /// indexes left invalid. Returns `"ok"` for a healthy database, else the problems found, one
    /// per line.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the checks cannot run.
    pub fn integrity_check(&self) -> Result<String, StoreError> {
        match self.conn.as_sqlite() {
            Some(conn) => integrity_report(conn),
            None => self.postgres_integrity(),
        }
    }

    /// PostgreSQL's side of [`Store::integrity_check`]: rows whose foreign key points at no row
    /// (possible only when the keys' triggers were switched off, as by a careless restore),
    /// constraints left unvalidated and indexes an interrupted build left invalid.
    fn postgres_integrity(&self) -> Result<String, StoreError> {
        let context = "checking integrity";
        let keys: Vec<(String, String, String, String)> = self
            .conn
            .prepare(
                "SELECT c.conrelid::regclass::text, a.attname, c.confrelid::regclass::text,
                        fa.attname
                   FROM pg_constraint c
                   JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
                   JOIN pg_attribute fa ON fa.attrelid = c.confrelid AND fa.attnum = c.confkey[1]
                  WHERE c.contype = 'f' AND c.connamespace = current_schema()::regnamespace
                  ORDER BY 1, 2",
            )
            .and_then(|mut s| s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))))
            .map_err(sql(context))?
            .collect::<Result<_, _>>()
            .map_err(sql(context))?;
        let mut problems = Vec::new();
        for (table, column, parent, parent_column) in keys {
            let orphans: i64 = self
                .conn
                .query_row(
                    &format!(
                        "SELECT count(*) FROM {table} c WHERE c.{column} IS NOT NULL
                           AND NOT EXISTS (SELECT 1 FROM {parent} p
                                            WHERE p.{parent_column} = c.{column})"
                    ),
                    [],
                    |r| r.get(0),
                )
                .map_err(sql(context))?;
            if orphans > 0 {
                problems.push(format!(
                    "{orphans} row{} of {table} reference{} a missing {parent} row ({column})",
                    if orphans == 1 { "" } else { "s" },
                    if orphans == 1 { "s" } else { "" },
                ));
            }
        }
        let invalid: Vec<String> = self
            .conn
            .prepare(
                "SELECT 'constraint ' || conname || ' on ' || conrelid::regclass::text
                        || ' is not validated'
                   FROM pg_constraint
                  WHERE NOT convalidated AND connamespace = current_schema()::regnamespace
                 UNION ALL
                 SELECT 'index ' || indexrelid::regclass::text || ' is invalid'
                   FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                  WHERE NOT i.indisvalid AND c.relnamespace = current_schema()::regnamespace",
            )
            .and_then(|mut s| s.query_map([], |r| r.get(0)))
            .map_err(sql(context))?
            .collect::<Result<_, _>>()
            .map_err(sql(context))?;
        problems.extend(invalid);
        Ok(if problems.is_empty() {
            "ok".to_owned()
        } else {
            problems.join("\n")
        })
    }

    /// Now, from the store's clock.
    pub(super) fn now(&self) -> f64 {
        (self.clock)()
    }

    /// The transaction of one write: `IMMEDIATE` on its own (so a second process waits for the
    /// lock up front instead of failing on upgrade), a savepoint inside [`Store::bulk`], where a
    /// failed write rolls back alone and the rest commits together.
    ///
    /// # Errors
    /// The engine's error of `BEGIN` or `SAVEPOINT`.
    pub(super) fn write_tx(&mut self) -> Result<Tx<'_>, DbError> {
        self.conn.begin()
    }

    /// Runs `f` in one transaction: every write it makes through the store commits at the end,
    /// or none when it fails. Bulk loads (`seed-history`) write a night of results this way: one
    /// commit instead of thousands, with the same insert path, triggers and checks as one result.
    ///
    /// # Errors
    /// What `f` returns (after rolling back), or the SQLite error of `BEGIN` / `COMMIT`.
    pub fn bulk<T>(
        &mut self,
        f: impl FnOnce(&mut Store) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let context = "a bulk write";
        let level = self.conn.open_level().map_err(sql(context))?;
        match f(self) {
            Ok(v) => {
                self.conn.close_level(level, true).map_err(sql(context))?;
                Ok(v)
            }
            Err(e) => {
                let _ = self.conn.close_level(level, false);
                Err(e)
            }
        }
    }
}

/// The URL `db` holds, when it names a PostgreSQL database rather than an SQLite file.
pub fn postgres_url(db: &Path) -> Option<&str> {
    db.to_str()
        .filter(|text| super::engine::is_postgres_url(text))
}

/// `url` parsed, or [`StoreError::Postgres`] saying what is wrong with it.
fn parse_target(url: &str) -> Result<PgTarget, StoreError> {
    PgTarget::parse(url).map_err(|reason| StoreError::Postgres {
        target: url_without_password(url),
        reason,
    })
}

/// The URL with any password replaced by `***`, for a message about a URL that did not parse.
fn url_without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.chars().take(60).collect();
    };
    let shown = match rest.split_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    };
    shown.chars().take(120).collect()
}

/// `PRAGMA integrity_check` and `PRAGMA foreign_key_check` on `conn`: `"ok"` for a healthy
/// database, else the problems found, one per line (a store's own, a backup's copy, a restore's
/// source).
///
/// # Errors
/// [`StoreError::Db`] if the checks cannot run.
pub(super) fn integrity_report(conn: &Connection) -> Result<String, StoreError> {
    let context = "checking integrity";
    let mut stmt = conn
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
    let mut stmt = conn
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
