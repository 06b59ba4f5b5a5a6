//! The store behind an async-friendly handle: one connection, one writer,
//! every call on the blocking pool so the runtime never waits on SQLite.
//!
//! Calls queue for the store on the runtime, not on the blocking pool: with thousands of agents
//! attached, thousands of tasks may want the store at once, and a blocking thread per waiter would
//! fill the pool (512 threads, each parked on the one connection's lock) and cost a context switch
//! per hand-over. [`Db::call`] takes its turn first ([`tokio::sync::Semaphore`], first come first
//! served), then runs on one blocking thread.

use crate::store::{Store, StoreError, StoreHealth};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// A shared handle to the one [`Store`] connection.
#[derive(Clone)]
pub struct Db {
    inner: Arc<Mutex<Store>>,
    /// Turns of async callers ([`Db::call`]): one at a time, in arrival order.
    turn: Arc<tokio::sync::Semaphore>,
    /// The store's reachability, read without waiting for the store.
    health: Arc<StoreHealth>,
}

impl Db {
    fn new(store: Store) -> Db {
        Db {
            health: store.health(),
            inner: Arc::new(Mutex::new(store)),
            turn: Arc::new(tokio::sync::Semaphore::new(1)),
        }
    }

    /// Whether the database can be reached now, read without waiting for the store (whose calls
    /// wait out an outage of a PostgreSQL server).
    pub fn health(&self) -> &StoreHealth {
        &self.health
    }

    /// Opens (or creates) the database `db` names: an SQLite path or a `postgres://` URL.
    ///
    /// # Errors
    /// As [`Store::open_any`]: not an SQLite file, newer schema, I/O, a PostgreSQL server that
    /// refuses.
    pub fn open(db: &Path) -> Result<Db, StoreError> {
        Ok(Db::new(Store::open_any(db)?))
    }

    /// A private in-memory database (commands that need no file, such as `describe URL`).
    ///
    /// # Errors
    /// As [`Store::open_in_memory`].
    pub fn in_memory() -> Result<Db, StoreError> {
        Ok(Db::new(Store::open_in_memory()?))
    }

    /// Opens an existing database for reading only ([`Store::open_any_read_only`]).
    ///
    /// # Errors
    /// As [`Store::open_any_read_only`]: no file, not a gpufleet database, unreadable.
    pub fn open_read_only(db: &Path) -> Result<Db, StoreError> {
        Ok(Db::new(Store::open_any_read_only(db)?))
    }

    /// Runs `f` with the store on the blocking pool, after the calls that asked before it.
    pub async fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store) -> R + Send + 'static,
    ) -> R {
        let inner = self.inner.clone();
        let turn = self
            .turn
            .clone()
            .acquire_owned()
            .await
            .expect("the store's semaphore is never closed");
        tokio::task::spawn_blocking(move || {
            let _turn = turn;
            let mut store = inner
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            f(&mut store)
        })
        .await
        .expect("store task panicked")
    }

    /// Runs `f` with the store until it does not fail for a lost database connection, while
    /// `wanted()` holds: for what must not be dropped when PostgreSQL stays away longer than a
    /// store call waits for it (a finished run's result). Tries again every
    /// [`STORE_AGAIN`](Self::STORE_AGAIN); any other outcome is returned.
    pub async fn call_until_reached<R: Send + 'static>(
        &self,
        f: impl Fn(&mut Store) -> Result<R, StoreError> + Clone + Send + 'static,
        wanted: impl Fn() -> bool,
    ) -> Result<R, StoreError> {
        loop {
            match self.call(f.clone()).await {
                Err(e) if e.is_connection_lost() && wanted() => {
                    tracing::warn!("{e}; trying again in {} s", Self::STORE_AGAIN.as_secs());
                    tokio::time::sleep(Self::STORE_AGAIN).await;
                }
                done => return done,
            }
        }
    }

    /// How often [`Db::call_until_reached`] tries again.
    pub const STORE_AGAIN: std::time::Duration = std::time::Duration::from_secs(5);

    /// Runs `f` on the calling thread (for synchronous CLI commands).
    pub fn with<R>(&self, f: impl FnOnce(&mut Store) -> R) -> R {
        let mut store = self
            .inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut store)
    }
}
