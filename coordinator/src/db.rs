//! The store behind an async-friendly handle: one connection, one writer,
//! every call on the blocking pool so the runtime never waits on SQLite.

use crate::store::{Store, StoreError};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// A shared handle to the one [`Store`] connection.
#[derive(Clone)]
pub struct Db {
    inner: Arc<Mutex<Store>>,
}

impl Db {
    /// Opens (or creates) the database `db` names: an SQLite path or a `postgres://` URL.
    ///
    /// # Errors
    /// As [`Store::open_any`]: not an SQLite file, newer schema, I/O, a PostgreSQL server that
    /// refuses.
    pub fn open(db: &Path) -> Result<Db, StoreError> {
        Ok(Db {
            inner: Arc::new(Mutex::new(Store::open_any(db)?)),
        })
    }

    /// A private in-memory database (commands that need no file, such as `describe URL`).
    ///
    /// # Errors
    /// As [`Store::open_in_memory`].
    pub fn in_memory() -> Result<Db, StoreError> {
        Ok(Db {
            inner: Arc::new(Mutex::new(Store::open_in_memory()?)),
        })
    }

    /// Opens an existing database for reading only ([`Store::open_any_read_only`]).
    ///
    /// # Errors
    /// As [`Store::open_any_read_only`]: no file, not a gpufleet database, unreadable.
    pub fn open_read_only(db: &Path) -> Result<Db, StoreError> {
        Ok(Db {
            inner: Arc::new(Mutex::new(Store::open_any_read_only(db)?)),
        })
    }

    /// Runs `f` with the store on the blocking pool.
    pub async fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store) -> R + Send + 'static,
    ) -> R {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let mut store = inner
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            f(&mut store)
        })
        .await
        .expect("store task panicked")
    }

    /// Runs `f` on the calling thread (for synchronous CLI commands).
    pub fn with<R>(&self, f: impl FnOnce(&mut Store) -> R) -> R {
        let mut store = self
            .inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut store)
    }
}
