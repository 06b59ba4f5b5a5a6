//! What a regression check reads of a series (device row, spec key, segment): the results
//! waiting for a verdict, a candidate's baseline window, its segments, and which results are
//! confirmation reruns (the one definition of one, [`IS_CONFIRMATION`], which the window and the
//! history page share).

use std::collections::HashSet;

use serde::Serialize;

use super::super::engine::{DbResult, OptionalExtension, Row, Value, named_params, params};
use super::super::error::{StoreError, sql};
use super::super::open::Store;
use super::super::values::json_column;

/// An ok result waiting for its verdict, with what the check needs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckCandidate {
    pub result_id: i64,
    pub campaign_id: Option<i64>,
    pub job_id: Option<i64>,
    pub device_row_id: Option<i64>,
    pub device_id: String,
    pub spec_key: String,
    pub segment: String,
    pub metric_value: f64,
    pub metric_unit: String,
    pub higher_is_better: bool,
    pub created_at: f64,
}

pub(super) const CANDIDATE_COLUMNS: &str =
    "r.id, r.campaign_id, r.job_id, r.device_row_id, r.device_id,
    r.spec_key, r.segment, r.metric_value, coalesce(r.metric_unit, '') AS metric_unit,
    coalesce(r.higher_is_better, 1) AS higher_is_better, r.created_at";

pub(super) fn candidate_from_row(r: &Row<'_>) -> DbResult<CheckCandidate> {
    Ok(CheckCandidate {
        result_id: r.get(0)?,
        campaign_id: r.get(1)?,
        job_id: r.get(2)?,
        device_row_id: r.get(3)?,
        device_id: r.get(4)?,
        spec_key: r.get(5)?,
        segment: r.get(6)?,
        metric_value: r.get(7)?,
        metric_unit: r.get(8)?,
        higher_is_better: r.get::<_, i64>(9)? != 0,
        created_at: r.get(10)?,
    })
}

/// Results that are a confirmation rerun of another result.
pub(super) const IS_CONFIRMATION: &str =
    "EXISTS (SELECT 1 FROM jobs j WHERE j.id = r.job_id AND j.confirms_result_id IS NOT NULL)";

/// `column` is the device `param` stands for, NULL matching NULL. Written per case rather than as
/// `IS NOT DISTINCT FROM`, which SQLite reads along an index but PostgreSQL does not (there it was
/// a scan of every result per check); `param` stays in the text either way, since it is bound.
pub(super) fn device_is(column: &str, param: &str, device: Option<i64>) -> String {
    match device {
        Some(_) => format!("{column} = {param}"),
        None => format!("({column} IS NULL AND CAST({param} AS bigint) IS NULL)"),
    }
}

/// `column` is the campaign `param` stands for, or anything when `campaign` is `None`. Written per
/// case: `(param IS NULL OR column = param)` kept both engines from reading `column`'s index, so a
/// night's check read every result ever stored.
pub(super) fn campaign_is(column: &str, param: &str, campaign: Option<i64>) -> String {
    match campaign {
        Some(_) => format!("{column} = {param}"),
        None => format!("CAST({param} AS bigint) IS NULL"),
    }
}

/// The regression window of a candidate on `device`: its series' earlier ok results since the
/// series' last alert, newest first (read along `results_series`; `listing.rs` checks its plan).
pub(in crate::store) fn baseline_sql(device: Option<i64>) -> String {
    let result_device = device_is("r.device_row_id", ":device", device);
    let alert_device = device_is("a.device_row_id", ":device", device);
    format!(
        "SELECT r.metric_value FROM results r
         WHERE {result_device} AND r.spec_key = :key AND r.segment = :segment
           AND r.status = 'ok' AND r.metric_value IS NOT NULL AND r.id < :before
           AND NOT {IS_CONFIRMATION} AND (:noisy OR r.noisy = 0)
           AND r.id >= coalesce((SELECT max(a.result_id) FROM alerts a
                                 WHERE {alert_device} AND a.spec_key = :key
                                   AND a.segment = :segment AND a.result_id < :before), 0)
         ORDER BY r.id DESC LIMIT :n"
    )
}

impl Store {
    /// Ok results with a metric that have no verdict yet and are not confirmation reruns; of one
    /// campaign, or all when `campaign_id` is `None`. Oldest first.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails.
    pub fn unchecked_results(
        &self,
        campaign_id: Option<i64>,
    ) -> Result<Vec<CheckCandidate>, StoreError> {
        let context = "listing unchecked results";
        let campaign = campaign_is("r.campaign_id", "?1", campaign_id);
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT {CANDIDATE_COLUMNS} FROM results r
                 WHERE r.status = 'ok' AND r.metric_value IS NOT NULL
                   AND {campaign}
                   AND NOT EXISTS (SELECT 1 FROM checks c WHERE c.result_id = r.id)
                   AND NOT {IS_CONFIRMATION}
                 ORDER BY r.id"
            ))
            .map_err(sql(context))?;
        stmt.query_map([campaign_id], candidate_from_row)
            .map_err(sql(context))?
            .collect::<Result<_, _>>()
            .map_err(sql(context))
    }

    /// The baseline of `c`: metric values of up to `n` earlier ok results of its series, oldest
    /// first (see the module docs for which results count); noisy results only with
    /// `include_noisy`.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails.
    pub fn baseline(
        &self,
        c: &CheckCandidate,
        n: usize,
        include_noisy: bool,
    ) -> Result<Vec<f64>, StoreError> {
        let context = "reading a baseline";
        let mut stmt = self
            .conn
            .prepare_cached(&baseline_sql(c.device_row_id))
            .map_err(sql(context))?;
        let mut values: Vec<f64> = stmt
            .query_map(
                named_params! {
                    ":device": c.device_row_id,
                    ":key": c.spec_key,
                    ":segment": c.segment,
                    ":before": c.result_id,
                    ":n": i64::try_from(n).unwrap_or(i64::MAX),
                    ":noisy": include_noisy,
                },
                |r| r.get(0),
            )
            .map_err(sql(context))?
            .collect::<Result<_, _>>()
            .map_err(sql(context))?;
        values.reverse();
        Ok(values)
    }

    /// Whether the series of `c` had results in an earlier segment (so "too few points" can say
    /// that the environment changed).
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails.
    pub fn segment_is_new(&self, c: &CheckCandidate) -> Result<bool, StoreError> {
        let device = device_is("r.device_row_id", "?1", c.device_row_id);
        self.conn
            .query_row(
                &format!(
                    "SELECT EXISTS (SELECT 1 FROM results r WHERE {device}
                        AND r.spec_key = ?2 AND r.segment != ?3 AND r.id < ?4 AND r.status = 'ok')"
                ),
                params![c.device_row_id, c.spec_key, c.segment, c.result_id],
                |r| r.get(0),
            )
            .map_err(sql("reading segments"))
    }

    /// The segment boundary of a device's series: for each segment of `device_row_id` and
    /// `spec_key`, its first result's time and fingerprint (to show what changed).
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails.
    pub fn segments(
        &self,
        device_row_id: Option<i64>,
        spec_key: &str,
    ) -> Result<Vec<(String, f64, serde_json::Value)>, StoreError> {
        let context = "listing segments";
        let device = device_is("device_row_id", "?1", device_row_id);
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT segment, created_at, fingerprint_json FROM (
                     SELECT segment, created_at, fingerprint_json, row_number() OVER (
                         PARTITION BY segment ORDER BY created_at, id) AS k
                     FROM results
                     WHERE {device} AND spec_key = ?2) AS firsts
                 WHERE k = 1 ORDER BY created_at"
            ))
            .map_err(sql(context))?;
        stmt.query_map(params![device_row_id, spec_key], |r| {
            Ok((r.get(0)?, r.get(1)?, json_column(r, "fingerprint_json")?))
        })
        .map_err(sql(context))?
        .collect::<Result<_, _>>()
        .map_err(sql(context))
    }

    /// Which of `result_ids` are confirmation reruns (results of a job that confirms another
    /// result): one query per 500 ids, where a series page asked [`Store::confirms`] once per
    /// result (371 round trips for a year of nights, most of `/history` on PostgreSQL).
    ///
    /// # Errors
    /// [`StoreError::Db`] if a query fails.
    pub fn confirmation_reruns(&self, result_ids: &[i64]) -> Result<HashSet<i64>, StoreError> {
        let ids = self.rows_for_ids(
            "reading confirmations",
            result_ids,
            |marks| {
                format!("SELECT r.id FROM results r WHERE {IS_CONFIRMATION} AND r.id IN ({marks})")
            },
            |r| r.get(0),
        )?;
        Ok(ids.into_iter().collect())
    }

    /// What `select(marks)` reads for `ids` (row ids, run ids), one statement per 500 of them:
    /// `marks` is the `?, ?, …` where the ids go (a statement's parameters are bounded on both
    /// engines).
    ///
    /// # Errors
    /// [`StoreError::Db`] if a query fails.
    pub(in crate::store) fn rows_for_ids<K: Clone + Into<Value>, T>(
        &self,
        context: &'static str,
        ids: &[K],
        select: impl Fn(&str) -> String,
        mut row: impl FnMut(&Row<'_>) -> DbResult<T>,
    ) -> Result<Vec<T>, StoreError> {
        let mut out = Vec::new();
        for chunk in ids.chunks(500) {
            let marks = vec!["?"; chunk.len()].join(", ");
            let mut stmt = self.conn.prepare(&select(&marks)).map_err(sql(context))?;
            let args: Vec<Value> = chunk.iter().cloned().map(Into::into).collect();
            for r in stmt.query_map(args, &mut row).map_err(sql(context))? {
                out.push(r.map_err(sql(context))?);
            }
        }
        Ok(out)
    }

    /// The job a result fulfils, if it is a confirmation rerun: the result it confirms.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails.
    pub fn confirms(&self, result_id: i64) -> Result<Option<i64>, StoreError> {
        self.conn
            .query_row(
                "SELECT j.confirms_result_id FROM results r JOIN jobs j ON j.id = r.job_id
                 WHERE r.id = ?1",
                [result_id],
                |r| r.get(0),
            )
            .optional()
            .map(Option::flatten)
            .map_err(sql("reading a confirmation"))
    }
}
