//! The store's error type: one enum for every way a store call can fail, each variant carrying the
//! file, field, name or id it is about so the CLI can print it as is.

use std::path::PathBuf;

use super::engine::DbError;

/// Why a store call failed.
///
/// The refusal variants (`NotSqlite`, `ForeignDatabase`, `NewerSchema`) are returned by
/// `Store::open` before anything is written, so the file is left as it was.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file exists, is not empty and does not start with the SQLite header.
    #[error(
        "{} is not a gpufleet database (not an SQLite file); refusing to touch it",
        path.display()
    )]
    NotSqlite {
        /// The file that was refused.
        path: PathBuf,
    },

    /// The file is an SQLite database, but another application's (a foreign `application_id`, or
    /// tables without a gpufleet schema version).
    #[error(
        "{} is not a gpufleet database ({reason}); refusing to touch it",
        path.display()
    )]
    ForeignDatabase {
        /// The file that was refused.
        path: PathBuf,
        /// What gave it away, e.g. `it already holds 3 tables but no gpufleet schema version`.
        reason: String,
    },

    /// The database was written by a newer gpufleet whose schema this binary does not know.
    #[error(
        "{} has schema version {found}, newer than the latest this gpufleet supports ({supported}); \
         upgrade gpufleet to use it (refusing to touch it)",
        path.display()
    )]
    NewerSchema {
        /// The file that was refused.
        path: PathBuf,
        /// `PRAGMA user_version` found in the file.
        found: i64,
        /// The latest migration this binary carries.
        supported: i64,
    },

    /// A command that only reads found a file that holds no gpufleet database yet (0 bytes, or an
    /// SQLite database without tables). Only a command that writes creates the schema, and a
    /// reader must not: the path may be a mistake.
    #[error(
        "{} is {what}, not a gpufleet database: run `gpufleet serve --db {}` or `gpufleet demo \
         --db {}` (any command that writes) to create one in it, or delete it",
        path.display(),
        path.display(),
        path.display()
    )]
    NotCreated {
        /// The file that was found.
        path: PathBuf,
        /// What it is instead: `an empty file (0 bytes)`, `an empty SQLite database (no tables)`.
        what: &'static str,
    },

    /// A command that only reads found a database of an older schema, which only a command that
    /// writes upgrades.
    #[error(
        "{} has schema version {found}, older than this gpufleet's ({latest}); a command that \
         writes (such as `gpufleet serve --db {}`) upgrades it",
        path.display(),
        path.display()
    )]
    OlderSchema {
        /// The database found.
        path: PathBuf,
        /// `PRAGMA user_version` found in the file.
        found: i64,
        /// The latest migration this binary carries.
        latest: i64,
    },

    /// `add_agent` with a name an active agent already has.
    #[error("an agent named {name:?} already exists")]
    AgentExists {
        /// The name that is taken.
        name: String,
    },

    /// No active agent has this name (or id, written as `#<id>`).
    #[error("no agent named {name:?}")]
    UnknownAgent {
        /// The name (or `#<id>`) that was looked up.
        name: String,
    },

    /// No campaign has this id.
    #[error("no campaign with id {id}")]
    UnknownCampaign {
        /// The id that was looked up.
        id: i64,
    },

    /// No job has this id.
    #[error("no job with id {id}")]
    UnknownJob {
        /// The id that was looked up.
        id: i64,
    },

    /// No result has this run id.
    #[error("no result with run id {run_id:?}")]
    UnknownRun {
        /// The run id that was looked up.
        run_id: String,
    },

    /// A value handed to the store is malformed; nothing was written.
    #[error("invalid {field}: {message}")]
    InvalidInput {
        /// The field at fault, as the caller names it (`name`, `url`, `spec_json`, `median_s`).
        field: &'static str,
        /// What is wrong with it and what is accepted.
        message: String,
    },

    /// A file the store would create is already there (a backup's destination, the copy a restore
    /// keeps of the database it replaces); it is left as it was.
    #[error("{} already exists; {remedy}", path.display())]
    Exists {
        /// The file that is in the way.
        path: PathBuf,
        /// What the user can do about it.
        remedy: &'static str,
    },

    /// A restore found a running `gpufleet serve` holding the database's serve lock.
    #[error(
        "a running gpufleet serve owns {}{} — stop it first",
        path.display(),
        pid_list(pids)
    )]
    ServeRunning {
        /// The database the serve has open.
        path: PathBuf,
        /// The serves' process ids, where the system tells them (`/proc/locks`); may be empty.
        pids: Vec<u32>,
    },

    /// `gpufleet serve` found a restore replacing its database.
    #[error(
        "a gpufleet db restore is replacing {}; start again when it has finished",
        path.display()
    )]
    RestoreRunning {
        /// The database being replaced.
        path: PathBuf,
    },

    /// A database (a backup's copy, a restore's source) failed `PRAGMA integrity_check` or
    /// `PRAGMA foreign_key_check`.
    #[error("{} failed the integrity check: {report}", path.display())]
    Damaged {
        /// The database whose content is damaged.
        path: PathBuf,
        /// The problems SQLite found, one per line.
        report: String,
    },

    /// Creating, syncing, renaming or locking a file failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Write {
        /// The file acted on.
        path: PathBuf,
        /// What was being done, e.g. `move aside`.
        action: &'static str,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },

    /// Reading the file before opening it failed (permissions, a path through a non-directory).
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file that could not be read.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },

    /// Opening, configuring or migrating the database failed.
    #[error("cannot open {} ({context}): {source}", path.display())]
    Open {
        /// The database file (a PostgreSQL database's URL, without its password).
        path: PathBuf,
        /// The step that failed, e.g. `applying migration 0001_init`.
        context: &'static str,
        /// The engine's error.
        #[source]
        source: DbError,
    },

    /// A PostgreSQL database could not be used: its URL is malformed, the server cannot be
    /// reached, or it refused the login. The message says which, and never shows a password.
    #[error("cannot use the PostgreSQL database {target}: {reason}")]
    Postgres {
        /// The URL without its password (as much of it as could be read).
        target: String,
        /// What went wrong.
        reason: String,
    },

    /// An operation that only an SQLite file has (its online backup, a restore over it, its page
    /// statistics) was asked of a PostgreSQL store.
    #[error("{what} works on SQLite databases only; for PostgreSQL, {remedy}")]
    SqliteOnly {
        /// What was asked, e.g. `gpufleet db backup`.
        what: &'static str,
        /// PostgreSQL's own way, e.g. `use pg_dump`.
        remedy: &'static str,
    },

    /// A statement failed after the store was open.
    #[error("database error while {context}: {source}")]
    Db {
        /// What the store was doing, e.g. `inserting a result`.
        context: &'static str,
        /// The engine's error.
        #[source]
        source: DbError,
    },
}

impl StoreError {
    /// Whether the statement failed because the database's connection was lost (past the retry
    /// window of `engine::pg_session`, or in a transaction that could not be restored): the same
    /// call may succeed later, unlike a refused or wrong one.
    pub fn is_connection_lost(&self) -> bool {
        match self {
            StoreError::Db { source, .. } => {
                matches!(source, DbError::Lost(_)) || super::engine::is_connection_lost(source)
            }
            _ => false,
        }
    }

    /// Builds an [`StoreError::InvalidInput`].
    pub(super) fn invalid(field: &'static str, message: impl Into<String>) -> StoreError {
        StoreError::InvalidInput {
            field,
            message: message.into(),
        }
    }
}

/// ` (pid 12)`, ` (pids 12, 34)`, or nothing when no pid is known.
fn pid_list(pids: &[u32]) -> String {
    match pids {
        [] => String::new(),
        [one] => format!(" (pid {one})"),
        many => {
            let list: Vec<String> = many.iter().map(u32::to_string).collect();
            format!(" (pids {})", list.join(", "))
        }
    }
}

/// Adds the step a store call was at to an engine's error (`.map_err(sql("listing agents"))`).
pub(super) fn sql<E: Into<DbError>>(context: &'static str) -> impl Fn(E) -> StoreError {
    move |source| StoreError::Db {
        context,
        source: source.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_file_and_the_bound() {
        let e = StoreError::NewerSchema {
            path: PathBuf::from("/data/fleet.db"),
            found: 7,
            supported: 1,
        };
        let text = e.to_string();
        assert!(text.contains("/data/fleet.db"), "{text}");
        assert!(text.contains("schema version 7"), "{text}");
        assert!(text.contains("(1)"), "{text}");

        let e = StoreError::NotSqlite {
            path: PathBuf::from("notes.txt"),
        };
        assert_eq!(
            e.to_string(),
            "notes.txt is not a gpufleet database (not an SQLite file); refusing to touch it"
        );

        let e = StoreError::ServeRunning {
            path: PathBuf::from("fleet.db"),
            pids: vec![12, 34],
        };
        assert_eq!(
            e.to_string(),
            "a running gpufleet serve owns fleet.db (pids 12, 34) — stop it first"
        );
        let e = StoreError::ServeRunning {
            path: PathBuf::from("fleet.db"),
            pids: Vec::new(),
        };
        assert_eq!(
            e.to_string(),
            "a running gpufleet serve owns fleet.db — stop it first"
        );

        let e = StoreError::invalid("url", "must start with http://");
        assert_eq!(e.to_string(), "invalid url: must start with http://");
    }

    #[test]
    fn unique_violation_is_recognised() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (x TEXT UNIQUE); INSERT INTO t VALUES ('a');")
            .unwrap();
        let err = conn.execute("INSERT INTO t VALUES ('a')", []).unwrap_err();
        assert!(DbError::from(err).is_unique_violation());
        let err = conn
            .execute("INSERT INTO missing VALUES (1)", [])
            .unwrap_err();
        assert!(!DbError::from(err).is_unique_violation());
    }
}
