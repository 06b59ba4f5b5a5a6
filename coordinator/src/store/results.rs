//! Results and their raw samples: the idempotent insert, the status counts and the raw data of one
//! result (the listings are in `listing.rs`).
//!
//! Samples are stored as one BLOB of little-endian `f64`s per result: a thousand iterations cost
//! 8 KB and one row instead of a thousand rows, and listings that do not ask for them never read them.

use super::engine::{DbError, OptionalExtension, named_params, params};

use super::error::StoreError;
use super::error::sql;
use super::open::Store;
use super::rows::{PowerPoint, ResultRecord};
use super::values::require_non_empty;
use gpufleet_proto::power::Reading;

/// Fingerprint fields that define a baseline segment: a change in any of them (a driver update, a
/// new agent, other env overrides, a new power cap) means later results are not comparable with the
/// earlier ones for regression purposes. The clock is left out: it is a reading, not a setting.
pub const SEGMENT_FIELDS: &[&str] = &[
    "agent_version",
    "backend",
    "driver_version",
    "api_version",
    "os_kernel_version",
    "kernels_version",
    "env",
    "power_cap_w",
];

/// The baseline segment of a result: 16 hex digits of FNV-1a over the canonical JSON of its
/// fingerprint's [`SEGMENT_FIELDS`] (objects sorted by key). Empty for a result without fingerprint.
pub fn segment_of(fingerprint: &serde_json::Value) -> String {
    let Some(map) = fingerprint.as_object() else {
        return String::new();
    };
    let mut canon = String::new();
    for field in SEGMENT_FIELDS {
        let value = map.get(*field).cloned().unwrap_or(serde_json::Value::Null);
        canon.push_str(field);
        canon.push('=');
        canonical(&value, &mut canon);
        canon.push('\n');
    }
    let h = canon.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    format!("{h:016x}")
}

/// JSON text with object keys sorted at every level, whatever map order serde_json was built with.
fn canonical(v: &serde_json::Value, out: &mut String) {
    match v {
        serde_json::Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::Value::String(k.clone()).to_string());
                out.push(':');
                canonical(&map[k], out);
            }
            out.push('}');
        }
        serde_json::Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Results by status for `/metrics`, from the counts the insert trigger keeps.
pub(super) const RESULT_COUNTS_SQL: &str =
    "SELECT status, CAST(sum(n) AS bigint) AS n FROM result_counts GROUP BY status
     HAVING sum(n) > 0 ORDER BY status";

impl Store {
    /// Stores a result, its samples and (when `r.job_id` is set) its job's `done` state in one
    /// transaction. Returns `false`, changing nothing, when a result with this run id is already
    /// stored, so retries and restarts are harmless, or when its job has been given another run
    /// id since (a lost attempt that delivered late: the job has, or will have, its own result).
    ///
    /// # Errors
    /// [`StoreError::InvalidInput`] for an empty run id, spec key, kernel, status, device id or
    /// backend, or a non-finite number; [`StoreError::Db`] when a reference (agent, device,
    /// campaign, job) does not exist. On any error nothing is written.
    pub fn insert_result(&mut self, r: &ResultRecord) -> Result<bool, StoreError> {
        validate_result(r)?;
        let created_at = r.created_at.unwrap_or_else(|| self.now());
        let params_json = to_json_text(&r.params);
        let context = "inserting a result";
        let tx = self.write_tx().map_err(sql(context))?;
        let id: Option<i64> = tx
            .query_row(
                "INSERT INTO results (run_id, campaign_id, job_id, agent_id, device_row_id,
                    device_id, backend, spec_key, kernel, variant, params_json, dtype, mode, status,
                    message, metric_kind, metric_unit, metric_value, higher_is_better, pct_of_peak,
                    peak_source, median_s, p10_s, p90_s, min_s, max_s, mean_s, stddev_s, cv, ci_low_s,
                    ci_high_s, target_ci_pct, noisy, robust_cv, p25_s, p75_s, upper_fence_s, outliers_high, iterations, validation_json, config_json, fingerprint_json, stderr_tail, signal,
                    started_at, wall_s, created_at, energy_json, energy_j, avg_watts,
                    metric_per_watt, joules_per_unit, segment)
                 VALUES (:run_id, :campaign_id, :job_id, :agent_id, :device_row_id,
                    :device_id, :backend, :spec_key, :kernel, :variant, :params_json, :dtype, :mode,
                    :status, :message, :metric_kind, :metric_unit, :metric_value,
                    :higher_is_better, :pct_of_peak, :peak_source, :median_s, :p10_s, :p90_s, :min_s, :max_s,
                    :mean_s, :stddev_s, :cv, :ci_low_s, :ci_high_s, :target_ci_pct, :noisy,
                    :robust_cv, :p25_s, :p75_s, :upper_fence_s, :outliers_high, :iterations, :validation_json, :config_json,
                    :fingerprint_json, :stderr_tail, :signal, :started_at, :wall_s, :created_at,
                    :energy_json, :energy_j, :avg_watts, :metric_per_watt, :joules_per_unit,
                    :segment)
                 ON CONFLICT (run_id) DO NOTHING
                 RETURNING id",
                named_params! {
                    ":run_id": r.run_id,
                    ":campaign_id": r.campaign_id,
                    ":job_id": r.job_id,
                    ":agent_id": r.agent_id,
                    ":device_row_id": r.device_row_id,
                    ":device_id": r.device_id,
                    ":backend": r.backend,
                    ":spec_key": r.spec_key,
                    ":kernel": r.kernel,
                    ":variant": r.variant,
                    ":params_json": params_json,
                    ":dtype": r.dtype,
                    ":mode": r.mode,
                    ":status": r.status,
                    ":message": r.message,
                    ":metric_kind": r.metric_kind,
                    ":metric_unit": r.metric_unit,
                    ":metric_value": r.metric_value,
                    ":higher_is_better": r.higher_is_better,
                    ":pct_of_peak": r.pct_of_peak,
                    ":peak_source": r.peak_source,
                    ":median_s": r.median_s,
                    ":p10_s": r.p10_s,
                    ":p90_s": r.p90_s,
                    ":min_s": r.min_s,
                    ":max_s": r.max_s,
                    ":mean_s": r.mean_s,
                    ":stddev_s": r.stddev_s,
                    ":cv": r.cv,
                    ":ci_low_s": r.ci_low_s,
                    ":ci_high_s": r.ci_high_s,
                    ":target_ci_pct": r.target_ci_pct,
                    ":noisy": r.computed_noisy(),
                    ":robust_cv": r.robust_cv,
                    ":p25_s": r.p25_s,
                    ":p75_s": r.p75_s,
                    ":upper_fence_s": r.upper_fence_s,
                    ":outliers_high": r.outliers_high,
                    ":iterations": r.iterations,
                    ":validation_json": to_json_text(&r.validation),
                    ":config_json": to_json_text(&r.config),
                    ":fingerprint_json": to_json_text(&r.fingerprint),
                    ":stderr_tail": r.stderr_tail,
                    ":signal": r.signal,
                    ":started_at": r.started_at,
                    ":wall_s": r.wall_s,
                    ":created_at": created_at,
                    ":energy_json": to_json_text(&r.energy),
                    ":energy_j": r.energy_j,
                    ":avg_watts": r.avg_watts,
                    ":metric_per_watt": r.metric_per_watt,
                    ":joules_per_unit": r.joules_per_unit,
                    ":segment": segment_of(&r.fingerprint),
                },
                |row| row.get(0),
            )
            .optional()
            .map_err(sql(context))?;
        let Some(id) = id else {
            // Already stored: the first copy wins, nothing else is touched.
            return Ok(false);
        };
        if !r.times.is_empty() {
            tx.execute(
                "INSERT INTO result_samples (result_id, times) VALUES (?1, ?2)",
                params![id, encode_samples(&r.times)],
            )
            .map_err(sql("storing a result's samples"))?;
        }
        if !r.power.is_empty() {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO power_samples (result_id, seq, source, scope, pci_bus_id,
                        monotonic_ns, wall_unix_s, watts, energy_j, temperature_c, sclk_mhz,
                        mclk_mhz, utilization_pct)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                )
                .map_err(sql("storing a result's power samples"))?;
            for (seq, p) in r.power.iter().enumerate() {
                stmt.execute(params![
                    id,
                    seq as i64,
                    p.source,
                    p.scope,
                    p.pci_bus_id,
                    p.monotonic_ns as i64,
                    p.wall_unix_s,
                    p.reading.watts,
                    p.reading.energy_j,
                    p.reading.temperature_c,
                    p.reading.sclk_mhz,
                    p.reading.mclk_mhz,
                    p.reading.utilization_pct,
                ])
                .map_err(sql("storing a result's power samples"))?;
            }
        }
        if let Some(job_id) = r.job_id {
            // Only the job's current attempt finishes it: a result of an attempt it was requeued
            // after (a new run id) is a second result for one job, and is not stored.
            let current = tx
                .execute(
                    "UPDATE jobs SET state = 'done', error = NULL, updated_at = ?2
                     WHERE id = ?1 AND run_id = ?3",
                    params![job_id, created_at, r.run_id],
                )
                .map_err(sql("marking a result's job done"))?;
            // (A job that does not exist failed the insert above, on its foreign key.)
            if current == 0 {
                return Ok(false);
            }
        }
        tx.commit().map_err(sql(context))?;
        Ok(true)
    }

    /// How many results have each status, from the counts the insert trigger keeps (migration 8),
    /// so a scrape reads a handful of rows whatever the size of `results`.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails.
    pub fn result_status_counts(&self) -> Result<Vec<(String, i64)>, StoreError> {
        let context = "counting results";
        let mut stmt = self
            .conn
            .prepare_cached(RESULT_COUNTS_SQL)
            .map_err(sql(context))?;
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(sql(context))?
            .collect::<Result<_, _>>()
            .map_err(sql(context))
    }

    /// The ids of at most `limit` results whose run id starts with `prefix` (the short run ids
    /// the CLI prints), oldest first. A run id is a UUID, so the prefix is a range of it.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails.
    pub fn results_with_run_prefix(
        &self,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<i64>, StoreError> {
        let context = "finding results by a run id's prefix";
        // Above every character of a UUID ('-', digits, a-f): the end of the prefix's range.
        let end = format!("{prefix}~");
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT id FROM results WHERE run_id >= ?1 AND run_id < ?2 ORDER BY id LIMIT ?3",
            )
            .map_err(sql(context))?;
        stmt.query_map(params![prefix, end, limit as i64], |r| r.get(0))
            .map_err(sql(context))?
            .collect::<Result<_, _>>()
            .map_err(sql(context))
    }

    /// The power trace stored with the result `run_id` (empty if it has none).
    ///
    /// # Errors
    /// [`StoreError::UnknownRun`] if no result has `run_id`; [`StoreError::Db`] if the query
    /// fails.
    pub fn power_samples(&self, run_id: &str) -> Result<Vec<PowerPoint>, StoreError> {
        let id: Option<i64> = self
            .conn
            .query_row("SELECT id FROM results WHERE run_id = ?1", [run_id], |r| {
                r.get(0)
            })
            .optional()
            .map_err(sql("finding a result"))?;
        match id {
            Some(id) => self.power_of(id),
            None => Err(StoreError::UnknownRun {
                run_id: run_id.to_owned(),
            }),
        }
    }

    pub(super) fn power_of(&self, result_id: i64) -> Result<Vec<PowerPoint>, StoreError> {
        let context = "reading a result's power samples";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT source, scope, pci_bus_id, monotonic_ns, wall_unix_s, watts, energy_j,
                        temperature_c, sclk_mhz, mclk_mhz, utilization_pct
                 FROM power_samples WHERE result_id = ?1 ORDER BY seq",
            )
            .map_err(sql(context))?;
        stmt.query_map([result_id], |r| {
            Ok(PowerPoint {
                source: r.get(0)?,
                scope: r.get(1)?,
                pci_bus_id: r.get(2)?,
                monotonic_ns: r.get::<_, i64>(3)? as u64,
                wall_unix_s: r.get(4)?,
                reading: Reading {
                    watts: r.get(5)?,
                    energy_j: r.get(6)?,
                    temperature_c: r.get(7)?,
                    sclk_mhz: r.get(8)?,
                    mclk_mhz: r.get(9)?,
                    utilization_pct: r.get(10)?,
                },
            })
        })
        .map_err(sql(context))?
        .collect::<Result<_, _>>()
        .map_err(sql(context))
    }

    /// The raw per-iteration times of a stored result (empty if it has none).
    ///
    /// # Errors
    /// [`StoreError::UnknownRun`] if no result has `run_id`; [`StoreError::Db`] if the query
    /// fails or the stored samples are malformed.
    pub fn result_samples(&self, run_id: &str) -> Result<Vec<f64>, StoreError> {
        let context = "reading a result's samples";
        let blob: Option<Option<Vec<u8>>> = self
            .conn
            .query_row(
                "SELECT s.times FROM results r
                 LEFT JOIN result_samples s ON s.result_id = r.id
                 WHERE r.run_id = ?1",
                [run_id],
                |row| row.get(0),
            )
            .optional()
            .map_err(sql(context))?;
        match blob {
            None => Err(StoreError::UnknownRun {
                run_id: run_id.to_owned(),
            }),
            Some(None) => Ok(Vec::new()),
            Some(Some(bytes)) => decode_samples(&bytes).map_err(|e| StoreError::Db {
                context,
                source: DbError::conversion("times", e),
            }),
        }
    }
}

/// Checks what SQLite would silently mangle or what no listing could make sense of.
fn validate_result(r: &ResultRecord) -> Result<(), StoreError> {
    require_non_empty("run_id", &r.run_id)?;
    require_non_empty("spec_key", &r.spec_key)?;
    require_non_empty("kernel", &r.kernel)?;
    require_non_empty("status", &r.status)?;
    require_non_empty("device_id", &r.device_id)?;
    require_non_empty("backend", &r.backend)?;
    // SQLite stores NaN as NULL, which would turn a value into "missing" behind the caller's back.
    let numbers: [(&'static str, Option<f64>); 24] = [
        ("metric_value", r.metric_value),
        ("pct_of_peak", r.pct_of_peak),
        ("median_s", r.median_s),
        ("p10_s", r.p10_s),
        ("p90_s", r.p90_s),
        ("min_s", r.min_s),
        ("max_s", r.max_s),
        ("mean_s", r.mean_s),
        ("stddev_s", r.stddev_s),
        ("cv", r.cv),
        ("ci_low_s", r.ci_low_s),
        ("ci_high_s", r.ci_high_s),
        ("target_ci_pct", r.target_ci_pct),
        ("robust_cv", r.robust_cv),
        ("p25_s", r.p25_s),
        ("p75_s", r.p75_s),
        ("upper_fence_s", r.upper_fence_s),
        ("started_at", Some(r.started_at)),
        ("wall_s", Some(r.wall_s)),
        ("created_at", r.created_at),
        ("energy_j", r.energy_j),
        ("avg_watts", r.avg_watts),
        ("metric_per_watt", r.metric_per_watt),
        ("joules_per_unit", r.joules_per_unit),
    ];
    for (field, value) in numbers {
        if let Some(v) = value
            && !v.is_finite()
        {
            return Err(StoreError::invalid(
                field,
                format!("{v} is not a finite number"),
            ));
        }
    }
    for (i, p) in r.power.iter().enumerate() {
        let finite = [
            p.reading.watts,
            p.reading.energy_j,
            p.reading.temperature_c,
            p.reading.utilization_pct,
            Some(p.wall_unix_s),
        ]
        .iter()
        .all(|v| v.is_none_or(f64::is_finite));
        if !finite || p.monotonic_ns > i64::MAX as u64 {
            return Err(StoreError::invalid(
                "power",
                format!("sample {i} has a non-finite or out-of-range number"),
            ));
        }
    }
    if r.iterations > i64::MAX as u64 {
        return Err(StoreError::invalid(
            "iterations",
            format!("{} exceeds the maximum {}", r.iterations, i64::MAX),
        ));
    }
    Ok(())
}

/// JSON text of a value that always serialises (maps with string keys, `serde_json::Value`).
fn to_json_text<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("string-keyed maps and JSON values serialise")
}

/// Times as little-endian `f64` bytes.
fn encode_samples(times: &[f64]) -> Vec<u8> {
    times.iter().flat_map(|t| t.to_le_bytes()).collect()
}

/// The inverse of [`encode_samples`]; refuses a length that is not a multiple of 8.
pub(super) fn decode_samples(bytes: &[u8]) -> Result<Vec<f64>, String> {
    let chunks = bytes.chunks_exact(8);
    if !chunks.remainder().is_empty() {
        return Err(format!(
            "samples blob is {} bytes, not a multiple of 8",
            bytes.len()
        ));
    }
    Ok(chunks
        .map(|c| {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            f64::from_le_bytes(b)
        })
        .collect())
}

#[cfg(test)]
mod tests;
