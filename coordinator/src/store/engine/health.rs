//! Whether the store's database can be reached now ([`StoreHealth`]), kept by the PostgreSQL
//! connection as it loses and regains the server, and read without the store (by `/healthz`,
//! which must answer while every store call waits for the database to come back).

use std::sync::Mutex;

/// How long a store call waits for a lost PostgreSQL server to come back before it fails, unless
/// `GPUFLEET_STORE_RETRY_S` says otherwise: long enough for a restart, a failover or a short
/// stop, short enough that a database gone for good is reported.
pub const DEFAULT_RETRY_S: u64 = 300;

/// The store's reachability: an outage from the first statement that found the server gone until
/// one that reached it again. SQLite's never has one.
#[derive(Debug, Default)]
pub struct StoreHealth {
    down: Mutex<Option<Outage>>,
    /// The last outage that ended: (began, ended), unix seconds.
    last: Mutex<Option<(f64, f64)>>,
}

/// An outage under way.
#[derive(Debug, Clone)]
pub struct Outage {
    /// When it began (unix seconds).
    pub since: f64,
    /// Why the last attempt failed, in the engine's words.
    pub error: String,
}

impl StoreHealth {
    /// The outage under way, if any.
    pub fn outage(&self) -> Option<Outage> {
        self.lock().clone()
    }

    /// Records a failed attempt; returns whether it began an outage (to say so once).
    pub(super) fn down(&self, error: &str) -> bool {
        let mut down = self.lock();
        let began = down.is_none();
        let since = down.as_ref().map_or_else(crate::time::now, |o| o.since);
        *down = Some(Outage {
            since,
            error: gpufleet_kernels::prefix(error, 300).to_owned(),
        });
        began
    }

    /// Records a statement that reached the server; returns the outage it ended, if one.
    pub(super) fn up(&self) -> Option<Outage> {
        let ended = self.lock().take();
        if let Some(o) = &ended {
            *self.last.lock().unwrap_or_else(|p| p.into_inner()) =
                Some((o.since, crate::time::now()));
        }
        ended
    }

    /// The last outage that ended, (began, ended) in unix seconds: what the store holds about
    /// that time — a `last_seen`, a lease — was not written during it, and a reader must not
    /// take its age for silence.
    pub fn last_outage(&self) -> Option<(f64, f64)> {
        *self.last.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The last outage, (began, ended), when it ended less than `within_s` before `now`: while a
    /// reader's freshness window (a lease, a `last_seen` period, a heartbeat's staleness) has not
    /// passed since the database came back, ages it reads are not silence.
    pub fn recent_outage(&self, now: f64, within_s: f64) -> Option<(f64, f64)> {
        self.last_outage()
            .filter(|(_, ended)| now < ended + within_s)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Outage>> {
        self.down.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// How long a store call waits for a lost server: `GPUFLEET_STORE_RETRY_S` seconds (0: not at
/// all), else [`DEFAULT_RETRY_S`].
pub(super) fn retry_window() -> std::time::Duration {
    let secs = match std::env::var("GPUFLEET_STORE_RETRY_S") {
        Err(_) => DEFAULT_RETRY_S,
        Ok(v) => v.trim().parse::<u64>().unwrap_or_else(|_| {
            tracing::warn!(
                "GPUFLEET_STORE_RETRY_S={:?} is not a whole number of seconds: using {DEFAULT_RETRY_S}",
                gpufleet_kernels::prefix(&v, 40)
            );
            DEFAULT_RETRY_S
        }),
    };
    std::time::Duration::from_secs(secs)
}
