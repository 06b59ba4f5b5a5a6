//! The checks `Store::open` makes before it writes anything, so a wrong path never damages a file.
//!
//! Two ways of opening the wrong file would otherwise destroy it: SQLite happily "opens" any file
//! and the first write pragma (`journal_mode=WAL`) rewrites its header, and a database from a
//! newer gpufleet would get the WAL switch and a failed migration. So before the read-write open:
//!
//! 1. the first 16 bytes are read with plain `std::fs` and compared with the SQLite magic;
//! 2. the schema version and application id are read through a read-only connection opened as
//!    `immutable=1` when no `-wal`/`-journal` file exists. A plain read-only open of a WAL-mode
//!    database creates the `-wal` and `-shm` files (and may leave them behind); an immutable one
//!    takes no locks and creates nothing. Without a `-wal` file every committed page is in the main
//!    file, so immutable reads see the truth. When a `-wal` file exists (a crash, or another
//!    coordinator has it open) a normal read-only open is used so the log is honoured; the
//!    sidecar files already exist then.

use std::ffi::OsString;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

use super::error::StoreError;
use super::migrations::{APPLICATION_ID, LATEST_VERSION};

/// The first 16 bytes of every SQLite 3 database file.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Whether the file at `path` has content to protect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Existing {
    /// Missing or zero bytes: SQLite treats it as a new database.
    Fresh,
    /// Starts with the SQLite magic.
    Sqlite,
}

/// Reads the header of `path` without opening it with SQLite.
///
/// # Errors
/// [`StoreError::NotSqlite`] for a non-empty file (or a directory) without the SQLite magic;
/// [`StoreError::Io`] when it cannot be read.
pub(super) fn check_header(path: &Path) -> Result<Existing, StoreError> {
    let io = |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Existing::Fresh),
        Err(e) => return Err(io(e)),
    };
    if !meta.is_file() {
        return Err(StoreError::NotSqlite {
            path: path.to_path_buf(),
        });
    }
    if meta.len() == 0 {
        return Ok(Existing::Fresh);
    }
    let mut head = Vec::with_capacity(SQLITE_MAGIC.len());
    File::open(path)
        .and_then(|f| f.take(SQLITE_MAGIC.len() as u64).read_to_end(&mut head))
        .map_err(io)?;
    if head.as_slice() != SQLITE_MAGIC {
        return Err(StoreError::NotSqlite {
            path: path.to_path_buf(),
        });
    }
    Ok(Existing::Sqlite)
}

/// Checks, through a read-only connection, that the SQLite file at `path` is a gpufleet database
/// this binary can use (or an empty SQLite database).
///
/// # Errors
/// [`StoreError::NewerSchema`], [`StoreError::ForeignDatabase`], or [`StoreError::Open`] when SQLite
/// cannot read it (a corrupt file with a valid magic).
pub(super) fn check_schema(path: &Path) -> Result<(), StoreError> {
    let open_err = |context: &'static str| {
        move |source: rusqlite::Error| StoreError::Open {
            path: path.to_path_buf(),
            context,
            source: source.into(),
        }
    };
    let conn =
        open_untouched(path).map_err(open_err("opening read-only to check the schema version"))?;
    let found: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(open_err("reading the schema version"))?;
    let app: i64 = conn
        .pragma_query_value(None, "application_id", |r| r.get(0))
        .map_err(open_err("reading the application id"))?;
    if app != 0 && app != APPLICATION_ID {
        return Err(StoreError::ForeignDatabase {
            path: path.to_path_buf(),
            reason: format!("its application id is {app:#x}, gpufleet's is {APPLICATION_ID:#x}"),
        });
    }
    if found > LATEST_VERSION {
        return Err(StoreError::NewerSchema {
            path: path.to_path_buf(),
            found,
            supported: LATEST_VERSION,
        });
    }
    if found == 0 {
        let objects: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\'",
                [],
                |r| r.get(0),
            )
            .map_err(open_err("listing existing tables"))?;
        if objects > 0 {
            return Err(StoreError::ForeignDatabase {
                path: path.to_path_buf(),
                reason: format!(
                    "it already holds {objects} tables or indexes but no gpufleet schema version"
                ),
            });
        }
    }
    conn.close()
        .map_err(|(_, source)| open_err("closing the read-only check")(source))
}

/// A read-only connection to the SQLite file at `path` that creates nothing beside it: `immutable=1`
/// when no `-wal`/`-journal` file exists (every committed page is then in the main file), a normal
/// read-only open that honours the log otherwise (module docs).
///
/// # Errors
/// The SQLite error of the open.
pub(super) fn open_untouched(path: &Path) -> rusqlite::Result<Connection> {
    let immutable = !sidecar(path, "-wal").exists() && !sidecar(path, "-journal").exists();
    let uri = format!(
        "file:{}{}",
        uri_path(path),
        if immutable { "?immutable=1" } else { "" }
    );
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    Connection::open_with_flags(uri, flags)
}

/// `path` with `suffix` appended to its file name (`fleet.db` → `fleet.db-wal`).
pub(super) fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(suffix);
    PathBuf::from(name)
}

/// `path` percent-encoded for an SQLite `file:` URI, so `?`, `#` and `%` in names stay literal.
fn uri_path(path: &Path) -> String {
    let mut out = String::new();
    for &b in path.as_os_str().as_encoded_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_path_escapes_query_and_fragment_characters() {
        assert_eq!(
            uri_path(Path::new("/tmp/a b/x?y#z%.db")),
            "/tmp/a%20b/x%3Fy%23z%25.db"
        );
        assert_eq!(uri_path(Path::new("rel/fleet.db")), "rel/fleet.db");
    }

    #[test]
    fn sidecar_appends_to_the_file_name() {
        assert_eq!(
            sidecar(Path::new("/d/fleet.db"), "-wal"),
            PathBuf::from("/d/fleet.db-wal")
        );
    }

    #[test]
    fn header_check_sorts_files() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.db");
        assert_eq!(check_header(&missing).unwrap(), Existing::Fresh);

        let empty = dir.path().join("empty.db");
        std::fs::write(&empty, b"").unwrap();
        assert_eq!(check_header(&empty).unwrap(), Existing::Fresh);

        let short = dir.path().join("short.db");
        std::fs::write(&short, b"SQLite").unwrap();
        assert!(matches!(
            check_header(&short),
            Err(StoreError::NotSqlite { .. })
        ));

        let text = dir.path().join("notes.txt");
        std::fs::write(&text, b"SQLite format 2\0 and then some more bytes").unwrap();
        assert!(matches!(
            check_header(&text),
            Err(StoreError::NotSqlite { .. })
        ));

        assert!(matches!(
            check_header(dir.path()),
            Err(StoreError::NotSqlite { .. })
        ));

        let real = dir.path().join("real.db");
        Connection::open(&real)
            .unwrap()
            .execute_batch("CREATE TABLE t (x)")
            .unwrap();
        assert_eq!(check_header(&real).unwrap(), Existing::Sqlite);
    }

    #[test]
    fn schema_check_refuses_foreign_databases() {
        let dir = tempfile::tempdir().unwrap();
        let other = dir.path().join("other.db");
        Connection::open(&other)
            .unwrap()
            .execute_batch("CREATE TABLE notes (body TEXT)")
            .unwrap();
        let err = check_schema(&other).unwrap_err();
        assert!(matches!(err, StoreError::ForeignDatabase { .. }), "{err}");
        assert!(err.to_string().contains("1 tables"), "{err}");

        let stamped = dir.path().join("stamped.db");
        Connection::open(&stamped)
            .unwrap()
            .execute_batch("PRAGMA application_id = 42; PRAGMA user_version = 1;")
            .unwrap();
        let err = check_schema(&stamped).unwrap_err();
        assert!(err.to_string().contains("0x2a"), "{err}");

        let blank = dir.path().join("blank.db");
        Connection::open(&blank)
            .unwrap()
            .execute_batch("PRAGMA user_version = 0; VACUUM;")
            .unwrap();
        check_schema(&blank).unwrap();
    }
}
