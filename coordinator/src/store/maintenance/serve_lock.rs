//! The serve lock: how a running `gpufleet serve` says it owns its database file, and how a
//! restore finds out (why: the module docs of `maintenance.rs`).

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use super::super::error::StoreError;
use super::super::guard::{self, sidecar};

/// Suffix of the serve lock file beside a database.
const LOCK_SUFFIX: &str = ".serve-lock";

/// The advisory lock by which a running `gpufleet serve` owns its database: shared among serves,
/// exclusive for a restore. Released on drop.
#[derive(Debug)]
pub struct ServeLock {
    file: File,
    path: PathBuf,
}

impl ServeLock {
    /// Takes the shared serve lock on `DB.serve-lock` (created if missing) for the database at
    /// `db`; `None` for an in-memory database, which nothing else can open. Refuses a `db` that is
    /// not a gpufleet database before creating anything beside it.
    ///
    /// # Errors
    /// [`StoreError::RestoreRunning`] while a restore replaces `db`; the guard's refusals;
    /// [`StoreError::Write`] when the lock file cannot be created or locked.
    pub fn acquire(db: &Path) -> Result<Option<ServeLock>, StoreError> {
        // A PostgreSQL database is shared by design, and nothing replaces it under a serve.
        if db == Path::new(":memory:") || crate::store::postgres_url(db).is_some() {
            return Ok(None);
        }
        if guard::check_header(db)? == guard::Existing::Sqlite {
            guard::check_schema(db)?;
        }
        let (file, path) = open_lock_file(db)?;
        match flock(&file, libc::LOCK_SH) {
            Ok(true) => Ok(Some(ServeLock { file, path })),
            Ok(false) => Err(StoreError::RestoreRunning {
                path: db.to_path_buf(),
            }),
            Err(source) => Err(StoreError::Write {
                path,
                action: "lock",
                source,
            }),
        }
    }

    /// Takes the lock exclusively, as a restore does.
    ///
    /// # Errors
    /// [`StoreError::ServeRunning`] while a serve holds it (with the serves' pids where
    /// `/proc/locks` tells them); [`StoreError::Write`] when it cannot be created or locked.
    pub(super) fn exclusive(db: &Path) -> Result<ServeLock, StoreError> {
        let (file, path) = open_lock_file(db)?;
        match flock(&file, libc::LOCK_EX) {
            Ok(true) => Ok(ServeLock { file, path }),
            Ok(false) => Err(StoreError::ServeRunning {
                path: db.to_path_buf(),
                pids: lock_holders(&file),
            }),
            Err(source) => Err(StoreError::Write {
                path,
                action: "lock",
                source,
            }),
        }
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ServeLock {
    fn drop(&mut self) {
        // Closing the file would release it too; this says so.
        let _ = flock(&self.file, libc::LOCK_UN);
    }
}

/// `flock(2)` with `operation` (`LOCK_SH`, `LOCK_EX`, `LOCK_UN`), never waiting: `Ok(false)` when
/// another open file holds a conflicting lock. (std's `File::try_lock` needs Rust 1.89, past the
/// workspace's `rust-version`; on Linux it is this same call.)
fn flock(file: &File, operation: libc::c_int) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: `flock` takes no pointers; the descriptor belongs to `file`, which outlives the
        // call.
        if unsafe { libc::flock(file.as_raw_fd(), operation | libc::LOCK_NB) } == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(e),
        }
    }
}

/// Opens (creating) `DB.serve-lock`.
fn open_lock_file(db: &Path) -> Result<(File, PathBuf), StoreError> {
    let path = sidecar(db, LOCK_SUFFIX);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|source| StoreError::Write {
            path: path.clone(),
            action: "create the serve lock file",
            source,
        })?;
    Ok((file, path))
}

/// The pids holding an `flock` on `file`, from `/proc/locks` (Linux); empty where it cannot tell.
fn lock_holders(file: &File) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    let (Ok(meta), Ok(locks)) = (file.metadata(), std::fs::read_to_string("/proc/locks")) else {
        return Vec::new();
    };
    let dev = meta.dev();
    parse_lock_holders(
        &locks,
        &format!(
            "{:02x}:{:02x}:{}",
            libc::major(dev),
            libc::minor(dev),
            meta.ino()
        ),
    )
}

/// The pids of `/proc/locks` lines for an `FLOCK` on the file `device_inode` (`MAJ:MIN:INODE`,
/// the kernel's format). A waiter's line (`1: -> FLOCK …`) holds nothing and is skipped.
fn parse_lock_holders(locks: &str, device_inode: &str) -> Vec<u32> {
    let mut pids: Vec<u32> = locks
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                [_, "FLOCK", _, _, pid, file, ..] if *file == device_inode => pid.parse().ok(),
                _ => None,
            }
        })
        .filter(|&pid| pid != 0)
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::names;

    #[test]
    fn a_serve_cannot_start_while_a_restore_holds_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("fleet.db");
        let restore = ServeLock::exclusive(&db).unwrap();
        let err = ServeLock::acquire(&db).unwrap_err();
        assert!(matches!(err, StoreError::RestoreRunning { .. }), "{err}");
        drop(restore);
        let lock = ServeLock::acquire(&db).unwrap().unwrap();
        assert_eq!(lock.path(), sidecar(&db, ".serve-lock"));
        assert!(
            ServeLock::acquire(Path::new(":memory:")).unwrap().is_none(),
            "an in-memory database has no lock"
        );
    }

    #[test]
    fn a_serve_lock_is_not_created_beside_a_file_that_is_not_ours() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("results.csv");
        std::fs::write(&csv, b"kernel,gflops\n").unwrap();
        let err = ServeLock::acquire(&csv).unwrap_err();
        assert!(matches!(err, StoreError::NotSqlite { .. }), "{err}");
        assert_eq!(names(dir.path()), ["results.csv"]);
    }

    #[test]
    fn lock_holders_are_read_from_proc_locks_lines() {
        let locks = "1: FLOCK  ADVISORY  READ  4242 00:2f:12345 0 EOF\n\
                     1: -> FLOCK  ADVISORY  WRITE 77 00:2f:12345 0 EOF\n\
                     2: FLOCK  ADVISORY  READ  4343 00:2f:12345 0 EOF\n\
                     3: POSIX  ADVISORY  WRITE 99 00:2f:12345 0 EOF\n\
                     4: FLOCK  ADVISORY  WRITE 55 00:2f:99999 0 EOF\n";
        assert_eq!(parse_lock_holders(locks, "00:2f:12345"), [4242, 4343]);
        assert!(parse_lock_holders("", "00:2f:12345").is_empty());
    }
}
