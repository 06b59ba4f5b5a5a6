//! Looking after the database file: online backups, restores, sizes per table and index, and the
//! lock by which a running `gpufleet serve` owns its file.
//!
//! # Backups while serving
//!
//! [`Store::backup_to`] copies through SQLite's online backup API from the store's own connection,
//! [`BACKUP_STEP_PAGES`] pages at a time with a short pause between steps. Each step is a read
//! transaction of its own and in WAL mode a reader never blocks the writer, so a serve writing the
//! same file keeps writing. When another connection commits between two steps, SQLite starts the
//! copy again from the first page; after [`MAX_RESTARTS`] restarts the rest is copied in one step
//! (one read transaction, which still does not block a WAL writer), so a busy serve cannot keep a
//! backup from finishing. The copy is the database as of one commit: every result committed
//! before the backup began is in it.
//!
//! The copy is written to `DEST.partial-PID` beside the destination, switched from WAL to a
//! rollback journal (one self-contained file; no `-wal` is needed to read it), checked with
//! `PRAGMA integrity_check` and `foreign_key_check`, synced, and only then linked to its name,
//! which must not exist: a failed backup leaves no half file and never replaces one.
//!
//! # The serve lock and restores
//!
//! A restore replaces the file under the database's name. A serve with the old file open would go
//! on writing to the old file and its `-wal`, and everything it wrote from then on would be lost.
//! So `gpufleet serve` holds a shared advisory lock ([`ServeLock`], `flock` on `DB.serve-lock`)
//! from before it opens the database until it exits (several serves may still share a database),
//! and a restore takes the same lock exclusively before it touches the target, refusing while any
//! serve holds it (`maintenance/serve_lock.rs`). The lock file stays behind: removing it would
//! race with the next locker. Other commands (`gpufleet run`) take no lock; stop them too before
//! restoring.
//!
//! [`Store::restore`] checks the source with the guard (an SQLite file, gpufleet's, a schema this
//! build knows), copies it beside the target through the backup API (so a source in WAL mode is
//! read with its log), checks the copy's integrity, and then, under the lock, moves the old
//! database aside to `DB.before-restore` (its `-wal` and `-journal` with it; the `-shm` index is
//! rebuilt from them) and links the copy in its place.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};
use serde::Serialize;

use super::error::{StoreError, sql};
use super::guard::{self, sidecar};
use super::migrations::{APPLICATION_ID, LATEST_VERSION};
use super::open::{BUSY_TIMEOUT, Store, integrity_report};

mod serve_lock;
mod stats;
pub use self::serve_lock::ServeLock;
use self::stats::non_negative;
pub use self::stats::{DbStats, ObjectKind, TableStats};

/// Pages a backup copies per step (4 MiB at SQLite's default page size).
pub const BACKUP_STEP_PAGES: i32 = 1024;

/// Pause between two backup steps, so the copy does not monopolise the disk a serve writes to.
const STEP_PAUSE: Duration = Duration::from_millis(5);

/// Restarts (another connection committed between two steps) after which the rest of a backup is
/// copied in one step.
const MAX_RESTARTS: u32 = 3;

/// Suffix of the copy a restore keeps of the database it replaces.
const KEPT_SUFFIX: &str = ".before-restore";

/// What [`Store::backup_to`] wrote.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BackupSummary {
    /// The backup file.
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// Its pages.
    pub pages: u64,
    /// Results it holds.
    pub results: u64,
    /// Wall time of the whole backup, check included.
    pub seconds: f64,
}

/// What [`Store::restore`] did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RestoreSummary {
    /// The database restored from.
    pub from: PathBuf,
    /// The database replaced.
    pub to: PathBuf,
    /// Where the replaced database now is (`None`: there was none).
    pub kept: Option<PathBuf>,
    /// The restored schema version (an older one is migrated by the next command that writes).
    pub schema_version: i64,
    /// Results the restored database holds.
    pub results: u64,
    /// Its size.
    pub bytes: u64,
}

impl Store {
    /// Writes a consistent copy of the database to `dest`, a new file, while other connections
    /// (a running serve) keep writing; calls `progress(pages_done, pages_total)` after every step.
    /// See the module docs for how.
    ///
    /// # Errors
    /// [`StoreError::Exists`] when `dest` (or a `-wal`/`-journal` beside it) exists, which is left
    /// as it was; [`StoreError::Damaged`] when the copy fails the integrity check;
    /// [`StoreError::Write`], [`StoreError::Open`] or [`StoreError::Db`] when the copy cannot be
    /// written. No file is left at `dest` nor beside it on any error.
    pub fn backup_to(
        &self,
        dest: &Path,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<BackupSummary, StoreError> {
        self.backup_in_steps(dest, BACKUP_STEP_PAGES, &mut progress)
    }

    /// [`Store::backup_to`] with `step_pages` pages per step (tests force restarts with few).
    fn backup_in_steps(
        &self,
        dest: &Path,
        step_pages: i32,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<BackupSummary, StoreError> {
        let started = Instant::now();
        let conn = self.sqlite_only(
            "an online backup",
            "use pg_dump (or `gpufleet db copy` into an SQLite file)",
        )?;
        refuse_existing(dest)?;
        let partial = Partial::create(dest)?;
        copy_into(conn, &partial.path, step_pages, progress)?;
        let facts = check_copy(&partial.path, dest)?;
        partial.publish(dest, BACKUP_REMEDY)?;
        Ok(BackupSummary {
            path: dest.to_path_buf(),
            bytes: facts.bytes,
            pages: facts.pages,
            results: facts.results,
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    /// Replaces the database at `to` with a copy of the gpufleet database at `from`, keeping the
    /// replaced one as `TO.before-restore` (see the module docs). `to` need not exist; it is never
    /// opened as a store (an open would migrate it).
    ///
    /// # Errors
    /// The guard's refusals for `from` ([`StoreError::NotSqlite`], [`StoreError::ForeignDatabase`],
    /// [`StoreError::NewerSchema`]) and for a `to` that is not a gpufleet database;
    /// [`StoreError::Damaged`] when `from` fails the integrity check;
    /// [`StoreError::ServeRunning`] while a `gpufleet serve` holds `to`'s lock;
    /// [`StoreError::Exists`] when `TO.before-restore` exists and `force` is false;
    /// [`StoreError::Write`] when a file cannot be written or renamed. On any refusal `to` and its
    /// sidecars are left as they were.
    pub fn restore(from: &Path, to: &Path, force: bool) -> Result<RestoreSummary, StoreError> {
        if !from.is_file() {
            return Err(StoreError::Io {
                path: from.to_path_buf(),
                source: std::io::Error::new(ErrorKind::NotFound, "no database to restore here"),
            });
        }
        if guard::check_header(from)? == guard::Existing::Fresh {
            return Err(StoreError::ForeignDatabase {
                path: from.to_path_buf(),
                reason: "it is empty".to_owned(),
            });
        }
        guard::check_schema(from)?;
        // The target may be damaged (that is what restores are for), but it must be ours.
        if guard::check_header(to)? == guard::Existing::Sqlite
            && let Err(e @ StoreError::ForeignDatabase { .. }) = guard::check_schema(to)
        {
            return Err(e);
        }
        let kept = sidecar(to, KEPT_SUFFIX);
        if to.exists() && kept.exists() && !force {
            return Err(StoreError::Exists {
                path: kept,
                remedy: "it holds the database an earlier restore replaced: move it away, or pass --force to replace it",
            });
        }
        let partial = Partial::create(to)?;
        let source = guard::open_untouched(from).map_err(|source| StoreError::Open {
            path: from.to_path_buf(),
            context: "opening read-only to copy it",
            source: source.into(),
        })?;
        source
            .busy_timeout(BUSY_TIMEOUT)
            .map_err(sql("setting busy_timeout"))?;
        copy_into(&source, &partial.path, BACKUP_STEP_PAGES, &mut |_, _| {})?;
        drop(source);
        let facts = check_copy(&partial.path, from)?;

        let _lock = ServeLock::exclusive(to)?;
        let kept = move_aside(to, &kept)?;
        if let Err(e) = partial.publish(to, RESTORE_REMEDY) {
            if let Some(kept) = &kept {
                put_back(kept, to);
            }
            return Err(e);
        }
        Ok(RestoreSummary {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
            kept,
            schema_version: facts.version,
            results: facts.results,
            bytes: facts.bytes,
        })
    }
}

/// What to do about an existing backup destination.
const BACKUP_REMEDY: &str = "refusing to overwrite it (choose a new file name)";

/// What to do about a file that appeared at a restore's target while it ran.
const RESTORE_REMEDY: &str =
    "it appeared while the restore ran; refusing to overwrite it (the restore was undone)";

/// Refuses a backup destination that exists, or has a log beside it that SQLite would replay onto
/// the copy when it is opened.
fn refuse_existing(dest: &Path) -> Result<(), StoreError> {
    if dest.symlink_metadata().is_ok() {
        return Err(StoreError::Exists {
            path: dest.to_path_buf(),
            remedy: BACKUP_REMEDY,
        });
    }
    for suffix in ["-wal", "-journal"] {
        let log = sidecar(dest, suffix);
        if log.symlink_metadata().is_ok() {
            return Err(StoreError::Exists {
                path: log,
                remedy: "SQLite would replay it onto the backup: remove it or choose another name",
            });
        }
    }
    Ok(())
}

/// A copy in the making beside its destination (`DEST.partial-PID`), removed with its sidecars
/// on drop unless published.
struct Partial {
    path: PathBuf,
    published: bool,
}

impl Partial {
    /// Creates the empty file; one that exists is someone else's (refused).
    fn create(beside: &Path) -> Result<Partial, StoreError> {
        let path = sidecar(beside, &format!(".partial-{}", std::process::id()));
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|source| StoreError::Write {
                path: path.clone(),
                action: "create the copy",
                source,
            })?;
        Ok(Partial {
            path,
            published: false,
        })
    }

    /// Syncs the copy and gives it the name `dest`, which must not exist: a hard link cannot
    /// replace a file (a rename after a check where the file system has no hard links).
    fn publish(mut self, dest: &Path, remedy: &'static str) -> Result<(), StoreError> {
        let write = |path: &Path, action| {
            let path = path.to_path_buf();
            move |source| StoreError::Write {
                path,
                action,
                source,
            }
        };
        File::open(&self.path)
            .and_then(|f| f.sync_all())
            .map_err(write(&self.path, "sync the copy"))?;
        let exists = || StoreError::Exists {
            path: dest.to_path_buf(),
            remedy,
        };
        match std::fs::hard_link(&self.path, dest) {
            Ok(()) => {
                self.published = true;
                // The copy has its name; a leftover partial name is only untidy.
                let _ = std::fs::remove_file(&self.path);
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => return Err(exists()),
            Err(_) => {
                if dest.symlink_metadata().is_ok() {
                    return Err(exists());
                }
                std::fs::rename(&self.path, dest).map_err(write(dest, "rename the copy to"))?;
                self.published = true;
            }
        }
        sync_parent(dest);
        Ok(())
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        if !self.published {
            for suffix in ["", "-journal", "-wal", "-shm"] {
                let _ = std::fs::remove_file(sidecar(&self.path, suffix));
            }
        }
    }
}

/// Syncs the directory of `path` so a new name survives a crash (best effort: some file systems
/// cannot sync a directory, and the data itself is already synced).
fn sync_parent(path: &Path) {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Copies the database of `source` into the empty file at `copy` through the backup API and makes
/// the copy a rollback-journal database.
fn copy_into(
    source: &Connection,
    copy: &Path,
    step_pages: i32,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(), StoreError> {
    let open_err = |context| {
        move |source: rusqlite::Error| StoreError::Open {
            path: copy.to_path_buf(),
            context,
            source: source.into(),
        }
    };
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut dest = Connection::open_with_flags(copy, flags).map_err(open_err("opening"))?;
    copy_in_steps(source, &mut dest, step_pages, progress).map_err(sql("copying the database"))?;
    dest.close()
        .map_err(|(_, e)| open_err("closing after the copy")(e))?;
    // The copy's first page says WAL, as the source's does (the backup copies it as it is), and a
    // connection that did not open it so cannot switch it: reopen, then switch.
    let dest = Connection::open_with_flags(copy, flags).map_err(open_err("reopening"))?;
    let mode: String = dest
        .pragma_update_and_check(None, "journal_mode", "DELETE", |r| r.get(0))
        .map_err(open_err("switching to journal_mode=DELETE"))?;
    dest.close()
        .map_err(|(_, e)| open_err("closing after switching the journal mode")(e))?;
    if !mode.eq_ignore_ascii_case("delete") {
        return Err(StoreError::Damaged {
            path: copy.to_path_buf(),
            report: format!("its journal mode stayed {mode}"),
        });
    }
    Ok(())
}

/// The backup loop: `step_pages` per step with a pause, the rest at once after
/// [`MAX_RESTARTS`] restarts, `Busy`/`Locked` retried up to [`BUSY_TIMEOUT`].
fn copy_in_steps(
    source: &Connection,
    dest: &mut Connection,
    step_pages: i32,
    progress: &mut dyn FnMut(u64, u64),
) -> rusqlite::Result<()> {
    let backup = Backup::new(source, dest)?;
    let mut done_before = 0;
    let mut restarts = 0;
    let mut busy_since: Option<Instant> = None;
    loop {
        let pages = if restarts >= MAX_RESTARTS {
            -1
        } else {
            step_pages
        };
        let step = backup.step(pages)?;
        let p = backup.progress();
        let total = u64::try_from(p.pagecount).unwrap_or(0);
        let done = total.saturating_sub(u64::try_from(p.remaining).unwrap_or(0));
        progress(done, total);
        match step {
            StepResult::Done => return Ok(()),
            StepResult::More => {
                busy_since = None;
                // No progress after a successful step: SQLite started again from page 1.
                if done <= done_before {
                    restarts += 1;
                }
                done_before = done;
            }
            // Busy, Locked: another connection holds a lock this step needs; try again.
            _ => {
                if busy_since.get_or_insert_with(Instant::now).elapsed() > BUSY_TIMEOUT {
                    return Err(rusqlite::Error::SqliteFailure(
                        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                        Some(format!(
                            "the database stayed locked for {} s",
                            BUSY_TIMEOUT.as_secs()
                        )),
                    ));
                }
            }
        }
        std::thread::sleep(STEP_PAUSE);
    }
}

/// What a checked copy holds.
struct CopyFacts {
    version: i64,
    results: u64,
    pages: u64,
    bytes: u64,
}

/// Checks the copy at `copy` (a gpufleet schema this build knows, integrity and foreign keys)
/// and reads its facts; errors name `named`, the database the copy is of or for.
fn check_copy(copy: &Path, named: &Path) -> Result<CopyFacts, StoreError> {
    let open_err = |context| {
        move |source: rusqlite::Error| StoreError::Open {
            path: named.to_path_buf(),
            context,
            source: source.into(),
        }
    };
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(copy, flags).map_err(open_err("opening the copy"))?;
    let pragma = |name: &str| -> Result<i64, StoreError> {
        conn.pragma_query_value(None, name, |r| r.get(0))
            .map_err(open_err("reading the copy's header"))
    };
    let (app, version) = (pragma("application_id")?, pragma("user_version")?);
    if app != APPLICATION_ID || version < 1 {
        return Err(StoreError::ForeignDatabase {
            path: named.to_path_buf(),
            reason: format!(
                "it holds no gpufleet schema (application id {app:#x}, schema version {version})"
            ),
        });
    }
    if version > LATEST_VERSION {
        return Err(StoreError::NewerSchema {
            path: named.to_path_buf(),
            found: version,
            supported: LATEST_VERSION,
        });
    }
    let report = integrity_report(&conn)?;
    if report != "ok" {
        return Err(StoreError::Damaged {
            path: named.to_path_buf(),
            report,
        });
    }
    let results: i64 = conn
        .query_row("SELECT count(*) FROM results", [], |r| r.get(0))
        .map_err(sql("counting the copy's results"))?;
    let pages = pragma("page_count")?;
    drop(conn);
    let bytes = std::fs::metadata(copy)
        .map_err(|source| StoreError::Io {
            path: copy.to_path_buf(),
            source,
        })?
        .len();
    Ok(CopyFacts {
        version,
        results: non_negative(results),
        pages: non_negative(pages),
        bytes,
    })
}

/// Moves the database at `to` and its logs to `kept` (replacing an earlier kept copy and its
/// logs) and drops its `-shm` index; with no database at `to`, removes stale sidecars, which
/// SQLite would otherwise replay onto the restored file. Runs under the exclusive serve lock.
fn move_aside(to: &Path, kept: &Path) -> Result<Option<PathBuf>, StoreError> {
    let remove = |path: PathBuf| match std::fs::remove_file(&path) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(StoreError::Write {
            path,
            action: "remove",
            source: e,
        }),
        _ => Ok(()),
    };
    let rename = |from: &Path, dest: &Path| {
        std::fs::rename(from, dest).map_err(|source| StoreError::Write {
            path: from.to_path_buf(),
            action: "move aside",
            source,
        })
    };
    if to.symlink_metadata().is_err() {
        for suffix in ["-wal", "-shm", "-journal"] {
            remove(sidecar(to, suffix))?;
        }
        return Ok(None);
    }
    for suffix in ["-wal", "-shm", "-journal"] {
        remove(sidecar(kept, suffix))?;
    }
    rename(to, kept)?;
    for suffix in ["-wal", "-journal"] {
        let log = sidecar(to, suffix);
        if log.symlink_metadata().is_ok() {
            rename(&log, &sidecar(kept, suffix))?;
        }
    }
    remove(sidecar(to, "-shm"))?;
    Ok(Some(kept.to_path_buf()))
}

/// Undoes [`move_aside`] after a failed publish (best effort: the error being returned says more).
fn put_back(kept: &Path, to: &Path) {
    for suffix in ["", "-wal", "-journal"] {
        let from = sidecar(kept, suffix);
        if from.symlink_metadata().is_ok() {
            let _ = std::fs::rename(from, sidecar(to, suffix));
        }
    }
}

#[cfg(test)]
mod tests;
