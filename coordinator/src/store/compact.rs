//! Retention: dropping the raw data of old results while every summary stays.
//!
//! A result's raw per-iteration times (`result_samples`) and its power trace (`power_samples`) are
//! most of what a result weighs and are read only on its own page. After a while only the summary
//! matters (median, interval, CV, energy, validation, fingerprint, which stay in `results`), so
//! [`Store::compact`] deletes the raw rows of results older than a cutoff and stamps
//! `samples_compacted_at` / `power_compacted_at` on them, so the result's page can say so.
//!
//! Kept whole whatever their age: every result an alert refers to (the suspect and its
//! confirmation), every result in a regression check still waiting for its confirmation, and the
//! newest `keep_last` results of each series' segment (the baseline the next check reads). The
//! regression check reads only summaries, so its verdicts do not change (a test checks it).
//!
//! The deletes run in chunks of [`CHUNK`] results, one short transaction each, so a `serve`
//! writing to the same file waits milliseconds, not the whole compaction. Freed pages are reused
//! by later inserts; [`Store::vacuum`] gives them back to the file system.

use std::collections::HashSet;
use std::time::Instant;

use serde::Serialize;

use super::engine::{Engine, named_params, params};
use super::error::{StoreError, sql};
use super::open::Store;

/// Results per delete transaction.
pub const CHUNK: usize = 2_000;

/// What to drop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Retention {
    /// Drop raw iteration times of results stored before this time (unix seconds).
    pub samples_before: Option<f64>,
    /// Drop power traces of results stored before this time (unix seconds).
    pub power_before: Option<f64>,
    /// Keep the newest this-many ok results of each series' segment whole (the baseline of the
    /// next regression check).
    pub keep_last: usize,
}

/// What [`Store::compact`] did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CompactReport {
    /// Results whose raw iteration times were dropped.
    pub samples_dropped: u64,
    /// Results whose power trace was dropped.
    pub power_dropped: u64,
    /// Power samples deleted.
    pub power_rows_deleted: u64,
    /// Old results kept whole because an alert, a pending check or a baseline refers to them.
    pub kept: u64,
    /// Seconds the deletes took.
    pub seconds: f64,
}

/// Which raw data a pass drops.
#[derive(Clone, Copy)]
enum Raw {
    Samples,
    Power,
}

impl Raw {
    fn stamp_column(self) -> &'static str {
        match self {
            Raw::Samples => "samples_compacted_at",
            Raw::Power => "power_compacted_at",
        }
    }

    fn delete(self) -> &'static str {
        match self {
            Raw::Samples => "DELETE FROM result_samples WHERE result_id = ?1",
            Raw::Power => "DELETE FROM power_samples WHERE result_id = ?1",
        }
    }
}

impl Store {
    /// Drops raw iteration times and power traces as `policy` says (see the module docs);
    /// `progress` hears the number of results handled so far after each chunk.
    ///
    /// # Errors
    /// [`StoreError::Db`] if a query fails; chunks committed before the failure stay.
    pub fn compact(
        &mut self,
        policy: &Retention,
        progress: &mut dyn FnMut(u64),
    ) -> Result<CompactReport, StoreError> {
        let began = Instant::now();
        let keep = self.results_to_keep(policy.keep_last)?;
        let mut report = CompactReport::default();
        let mut kept = HashSet::new();
        for (raw, before) in [
            (Raw::Samples, policy.samples_before),
            (Raw::Power, policy.power_before),
        ] {
            let Some(before) = before else { continue };
            let candidates = self.compactable(raw, before)?;
            let (drop, keep_now): (Vec<i64>, Vec<i64>) =
                candidates.into_iter().partition(|id| !keep.contains(id));
            kept.extend(keep_now);
            for chunk in drop.chunks(CHUNK) {
                let (results, rows) = self.drop_raw(raw, chunk)?;
                match raw {
                    Raw::Samples => report.samples_dropped += results,
                    Raw::Power => {
                        report.power_dropped += results;
                        report.power_rows_deleted += rows;
                    }
                }
                progress(report.samples_dropped + report.power_dropped);
            }
        }
        report.kept = kept.len() as u64;
        report.seconds = began.elapsed().as_secs_f64();
        Ok(report)
    }

    /// Rewrites the file without its free pages (`VACUUM`) and truncates the WAL, so the space
    /// compaction freed goes back to the file system. Holds the write lock throughout and needs
    /// free disk space about the size of the database.
    ///
    /// # Errors
    /// [`StoreError::Db`] if `VACUUM` fails (another transaction open, a full disk).
    pub fn vacuum(&mut self) -> Result<(), StoreError> {
        self.conn
            .execute_batch(match self.conn.engine() {
                Engine::Sqlite => "VACUUM; PRAGMA wal_checkpoint(TRUNCATE);",
                // Plain VACUUM marks the space free for reuse without locking out the serves;
                // VACUUM FULL would hand it to the file system under an exclusive lock.
                Engine::Postgres => "VACUUM (ANALYZE) result_samples, power_samples, results",
            })
            .map_err(sql("vacuuming the database"))
    }

    /// Results that must stay whole: referred to by an alert or a pending check, or among the
    /// newest `keep_last` ok results of their series' segment.
    fn results_to_keep(&self, keep_last: usize) -> Result<HashSet<i64>, StoreError> {
        let context = "finding the results compaction keeps";
        let mut stmt = self
            .conn
            .prepare(
                "SELECT result_id FROM alerts
                 UNION SELECT confirmation_result_id FROM alerts
                 UNION SELECT result_id FROM checks WHERE verdict = 'suspect'
                 UNION SELECT confirmation_result_id FROM checks
                       WHERE confirmation_result_id IS NOT NULL
                 UNION SELECT confirms_result_id FROM jobs WHERE confirms_result_id IS NOT NULL
                 UNION SELECT id FROM (
                     SELECT id, row_number() OVER (
                         PARTITION BY device_row_id, spec_key, segment ORDER BY id DESC) AS k
                     FROM results WHERE status = 'ok') AS newest WHERE k <= :n
                 UNION SELECT id FROM (
                     SELECT id, row_number() OVER (
                         PARTITION BY device_row_id, spec_key, segment ORDER BY id DESC) AS k
                     FROM results WHERE status = 'ok' AND noisy = 0) AS newest_quiet WHERE k <= :n",
            )
            .map_err(sql(context))?;
        let n = i64::try_from(keep_last).unwrap_or(i64::MAX);
        stmt.query_map(named_params! {":n": n}, |r| r.get(0))
            .map_err(sql(context))?
            .collect::<Result<_, _>>()
            .map_err(sql(context))
    }

    /// Results stored before `before` that still have raw data of kind `raw`, oldest first.
    fn compactable(&self, raw: Raw, before: f64) -> Result<Vec<i64>, StoreError> {
        let context = "finding results to compact";
        let query = match raw {
            Raw::Samples => {
                "SELECT r.id FROM results r JOIN result_samples s ON s.result_id = r.id
                 WHERE r.created_at < ?1 ORDER BY r.id"
            }
            Raw::Power => {
                "SELECT r.id FROM results r
                 WHERE r.created_at < ?1
                   AND EXISTS (SELECT 1 FROM power_samples p WHERE p.result_id = r.id)
                 ORDER BY r.id"
            }
        };
        let mut stmt = self.conn.prepare(query).map_err(sql(context))?;
        stmt.query_map([before], |r| r.get(0))
            .map_err(sql(context))?
            .collect::<Result<_, _>>()
            .map_err(sql(context))
    }

    /// Deletes the raw data of `ids` and stamps them, in one transaction; returns (results
    /// stamped, rows deleted).
    fn drop_raw(&mut self, raw: Raw, ids: &[i64]) -> Result<(u64, u64), StoreError> {
        let context = "compacting results";
        let now = self.now();
        let tx = self.write_tx().map_err(sql(context))?;
        let (mut results, mut rows) = (0u64, 0u64);
        {
            let mut delete = tx.prepare_cached(raw.delete()).map_err(sql(context))?;
            let mut stamp = tx
                .prepare_cached(&format!(
                    "UPDATE results SET {} = ?2 WHERE id = ?1",
                    raw.stamp_column()
                ))
                .map_err(sql(context))?;
            for id in ids {
                let deleted = delete.execute([id]).map_err(sql(context))?;
                if deleted > 0 {
                    stamp.execute(params![id, now]).map_err(sql(context))?;
                    results += 1;
                    rows += deleted as u64;
                }
            }
        }
        tx.commit().map_err(sql(context))?;
        Ok((results, rows))
    }
}

#[cfg(test)]
mod tests;
