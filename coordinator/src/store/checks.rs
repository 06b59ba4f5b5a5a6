//! Regression checks and alerts: the store side of the regression checks (`regression/check.rs`).
//!
//! A series is (device row, spec key, segment). Its baseline for a result is the last ok results
//! before it in the series that are not confirmation reruns and not older than the series' last
//! alert (after a confirmed change the new level is the baseline, so one step alerts once).

use super::engine::{DbResult, OptionalExtension, Row, Value, named_params, params};
use serde::Serialize;
use std::collections::HashSet;

use super::error::StoreError;
use super::error::sql;
use super::listing::{Cursor, check_limit, split_page};
use super::open::Store;
use super::values::json_column;

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

/// A `suspect` check and the state of its confirmation rerun.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PendingConfirmation {
    pub suspect: CheckCandidate,
    /// The confirmation job, if one was queued.
    pub job_id: Option<i64>,
    /// Its job state (`queued`, `running`, `done`, `failed`, `interrupted`).
    pub job_state: Option<String>,
    /// The confirmation's result: (result id, status, metric value).
    pub result: Option<(i64, String, Option<f64>)>,
}

/// A stored alert.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AlertRow {
    pub id: i64,
    pub result_id: i64,
    pub confirmation_result_id: i64,
    pub campaign_id: Option<i64>,
    pub device_row_id: Option<i64>,
    pub device_id: String,
    /// Agent name of the device, when known.
    pub agent: Option<String>,
    pub spec_key: String,
    pub segment: String,
    /// `regression` or `improvement`.
    pub direction: String,
    pub metric_unit: String,
    /// Baseline median.
    pub before_value: f64,
    /// Mean of the suspect result and its confirmation.
    pub after_value: f64,
    pub change_pct: f64,
    pub bound_pct: f64,
    pub baseline_points: i64,
    pub created_at: f64,
    /// When someone acknowledged it (unix seconds); `None` while it is open.
    pub acknowledged_at: Option<f64>,
}

/// A new alert.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAlert {
    pub result_id: i64,
    pub confirmation_result_id: i64,
    pub direction: String,
    pub before_value: f64,
    pub after_value: f64,
    pub change_pct: f64,
    pub bound_pct: f64,
    pub baseline_points: i64,
}

/// One verdict row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckRow {
    pub result_id: i64,
    /// The checked result's spec key, device id and agent name.
    pub spec_key: String,
    pub device_id: String,
    pub agent: String,
    pub verdict: String,
    pub direction: Option<String>,
    pub reason: String,
    pub assessment: serde_json::Value,
    pub confirmation_result_id: Option<i64>,
    pub created_at: f64,
    /// When the verdict last changed (a suspect becomes confirmed or not); listings sort by it.
    pub updated_at: f64,
}

const CANDIDATE_COLUMNS: &str = "r.id, r.campaign_id, r.job_id, r.device_row_id, r.device_id,
    r.spec_key, r.segment, r.metric_value, coalesce(r.metric_unit, '') AS metric_unit,
    coalesce(r.higher_is_better, 1) AS higher_is_better, r.created_at";

fn candidate_from_row(r: &Row<'_>) -> DbResult<CheckCandidate> {
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
const IS_CONFIRMATION: &str =
    "EXISTS (SELECT 1 FROM jobs j WHERE j.id = r.job_id AND j.confirms_result_id IS NOT NULL)";

/// `column` is the device `param` stands for, NULL matching NULL. Written per case rather than as
/// `IS NOT DISTINCT FROM`, which SQLite reads along an index but PostgreSQL does not (there it was
/// a scan of every result per check); `param` stays in the text either way, since it is bound.
fn device_is(column: &str, param: &str, device: Option<i64>) -> String {
    match device {
        Some(_) => format!("{column} = {param}"),
        None => format!("({column} IS NULL AND CAST({param} AS bigint) IS NULL)"),
    }
}

/// The regression window of a candidate on `device`: its series' earlier ok results since the
/// series' last alert, newest first (read along `results_series`; `listing.rs` checks its plan).
pub(super) fn baseline_sql(device: Option<i64>) -> String {
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
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT {CANDIDATE_COLUMNS} FROM results r
                 WHERE r.status = 'ok' AND r.metric_value IS NOT NULL
                   AND (CAST(?1 AS bigint) IS NULL OR r.campaign_id = ?1)
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

    /// Stores a final verdict (`no_verdict`, `stable`) for a result; a second call for the same
    /// result changes nothing.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the insert fails.
    pub fn insert_check(
        &mut self,
        result_id: i64,
        verdict: &str,
        direction: Option<&str>,
        reason: &str,
        assessment_json: &str,
    ) -> Result<(), StoreError> {
        let now = self.now();
        self.conn
            .execute(
                "INSERT INTO checks (result_id, verdict, direction, reason, assessment_json,
                                     created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6) ON CONFLICT (result_id) DO NOTHING",
                params![result_id, verdict, direction, reason, assessment_json, now],
            )
            .map_err(sql("storing a verdict"))?;
        Ok(())
    }

    /// Marks `suspect` as such and queues its confirmation rerun (same agent, device and spec,
    /// a new run id) in the suspect's campaign, in one transaction. Returns the job id, or `None`
    /// when the result already has a verdict.
    ///
    /// # Errors
    /// [`StoreError::InvalidInput`] (`job_id`) when the suspect has no job to copy.
    pub fn queue_confirmation(
        &mut self,
        suspect: &CheckCandidate,
        direction: &str,
        reason: &str,
        assessment_json: &str,
        run_id: &str,
    ) -> Result<Option<i64>, StoreError> {
        let Some(job_id) = suspect.job_id else {
            return Err(StoreError::invalid(
                "job_id",
                format!(
                    "result #{} has no job, so it cannot be rerun",
                    suspect.result_id
                ),
            ));
        };
        let now = self.now();
        let context = "queueing a confirmation rerun";
        let tx = self.write_tx().map_err(sql(context))?;
        let inserted = tx
            .execute(
                "INSERT INTO checks (result_id, verdict, direction, reason, assessment_json,
                                     created_at, updated_at)
                 VALUES (?1, 'suspect', ?2, ?3, ?4, ?5, ?5) ON CONFLICT (result_id) DO NOTHING",
                params![suspect.result_id, direction, reason, assessment_json, now],
            )
            .map_err(sql(context))?;
        if inserted == 0 {
            return Ok(None);
        }
        let id: i64 = tx
            .query_row(
                "INSERT INTO jobs (campaign_id, agent_id, device_row_id, spec_key, spec_json,
                                   run_id, state, attempts, updated_at, confirms_result_id)
                 SELECT campaign_id, agent_id, device_row_id, spec_key, spec_json, ?2, 'queued', 0,
                        ?3, ?4
                 FROM jobs WHERE id = ?1
                 RETURNING id",
                params![job_id, run_id, now, suspect.result_id],
                |r| r.get(0),
            )
            .map_err(sql(context))?;
        tx.commit().map_err(sql(context))?;
        Ok(Some(id))
    }

    /// `suspect` checks (of one campaign, or all) with their confirmation job and result.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails.
    pub fn pending_confirmations(
        &self,
        campaign_id: Option<i64>,
    ) -> Result<Vec<PendingConfirmation>, StoreError> {
        let context = "listing pending confirmations";
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT {CANDIDATE_COLUMNS}, j.id, j.state, cr.id, cr.status, cr.metric_value
                 FROM checks c JOIN results r ON r.id = c.result_id
                 LEFT JOIN jobs j ON j.confirms_result_id = r.id
                 LEFT JOIN results cr ON cr.job_id = j.id
                 WHERE c.verdict = 'suspect' AND (CAST(?1 AS bigint) IS NULL OR r.campaign_id = ?1)
                 ORDER BY r.id"
            ))
            .map_err(sql(context))?;
        stmt.query_map([campaign_id], |r| {
            let result = match r.get::<_, Option<i64>>(13)? {
                Some(id) => Some((id, r.get(14)?, r.get(15)?)),
                None => None,
            };
            Ok(PendingConfirmation {
                suspect: candidate_from_row(r)?,
                job_id: r.get(11)?,
                job_state: r.get(12)?,
                result,
            })
        })
        .map_err(sql(context))?
        .collect::<Result<_, _>>()
        .map_err(sql(context))
    }

    /// Closes a `suspect` check: `confirmed` with its alert, or `not_confirmed`, in one
    /// transaction. A check that is no longer `suspect` is left alone (returns `false`).
    ///
    /// # Errors
    /// [`StoreError::Db`] if the updates fail; then nothing changed.
    pub fn resolve_check(
        &mut self,
        suspect: &CheckCandidate,
        confirmation_result_id: Option<i64>,
        reason: &str,
        alert: Option<&NewAlert>,
    ) -> Result<bool, StoreError> {
        let now = self.now();
        let context = "resolving a verdict";
        let tx = self.write_tx().map_err(sql(context))?;
        let verdict = if alert.is_some() {
            "confirmed"
        } else {
            "not_confirmed"
        };
        let changed = tx
            .execute(
                "UPDATE checks SET verdict = ?2, reason = ?3, confirmation_result_id = ?4,
                    updated_at = ?5
                 WHERE result_id = ?1 AND verdict = 'suspect'",
                params![
                    suspect.result_id,
                    verdict,
                    reason,
                    confirmation_result_id,
                    now
                ],
            )
            .map_err(sql(context))?;
        if changed == 0 {
            return Ok(false);
        }
        if let Some(a) = alert {
            tx.execute(
                "INSERT INTO alerts (result_id, confirmation_result_id, campaign_id, device_row_id,
                    device_id, spec_key, segment, direction, metric_unit, before_value, after_value,
                    change_pct, bound_pct, baseline_points, created_at)
                 VALUES (:result, :confirmation, :campaign, :device_row, :device_id, :key, :segment,
                    :direction, :unit, :before, :after, :change, :bound, :points, :now)",
                named_params! {
                    ":result": a.result_id,
                    ":confirmation": a.confirmation_result_id,
                    ":campaign": suspect.campaign_id,
                    ":device_row": suspect.device_row_id,
                    ":device_id": suspect.device_id,
                    ":key": suspect.spec_key,
                    ":segment": suspect.segment,
                    ":direction": a.direction,
                    ":unit": suspect.metric_unit,
                    ":before": a.before_value,
                    ":after": a.after_value,
                    ":change": a.change_pct,
                    ":bound": a.bound_pct,
                    ":points": a.baseline_points,
                    ":now": now,
                },
            )
            .map_err(sql(context))?;
        }
        tx.commit().map_err(sql(context))?;
        Ok(true)
    }

    /// Alerts created at or after `since` (unix seconds), newest first.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails.
    pub fn alerts(&self, since: f64) -> Result<Vec<AlertRow>, StoreError> {
        let context = "listing alerts";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT a.id, a.result_id, a.confirmation_result_id, a.campaign_id,
                        a.device_row_id, a.device_id, ag.name, a.spec_key, a.segment, a.direction,
                        a.metric_unit, a.before_value, a.after_value, a.change_pct, a.bound_pct,
                        a.baseline_points, a.created_at, a.acknowledged_at
                 FROM alerts a LEFT JOIN devices d ON d.id = a.device_row_id
                 LEFT JOIN agents ag ON ag.id = d.agent_id
                 WHERE a.created_at >= ?1 ORDER BY a.created_at DESC, a.id DESC",
            )
            .map_err(sql(context))?;
        stmt.query_map([since], |r| {
            Ok(AlertRow {
                id: r.get(0)?,
                result_id: r.get(1)?,
                confirmation_result_id: r.get(2)?,
                campaign_id: r.get(3)?,
                device_row_id: r.get(4)?,
                device_id: r.get(5)?,
                agent: r.get(6)?,
                spec_key: r.get(7)?,
                segment: r.get(8)?,
                direction: r.get(9)?,
                metric_unit: r.get(10)?,
                before_value: r.get(11)?,
                after_value: r.get(12)?,
                change_pct: r.get(13)?,
                bound_pct: r.get(14)?,
                baseline_points: r.get(15)?,
                created_at: r.get(16)?,
                acknowledged_at: r.get(17)?,
            })
        })
        .map_err(sql(context))?
        .collect::<Result<_, _>>()
        .map_err(sql(context))
    }

    /// Marks alert `id` acknowledged now; `false` if there is no such alert. Acknowledging twice
    /// keeps the first time.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the update fails.
    pub fn acknowledge_alert(&mut self, id: i64) -> Result<bool, StoreError> {
        let now = self.now();
        let n = self
            .conn
            .execute(
                "UPDATE alerts SET acknowledged_at = coalesce(acknowledged_at, ?2) WHERE id = ?1",
                params![id, now],
            )
            .map_err(sql("acknowledging an alert"))?;
        Ok(n == 1)
    }

    /// Verdicts stored at or after `since`, newest first.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails.
    pub fn checks(&self, since: f64) -> Result<Vec<CheckRow>, StoreError> {
        self.checks_where(since, None, None)
    }

    /// Up to `limit` verdicts stored at or after `since`, newest first, after the cursor `after`
    /// (their `updated_at` and result id), and the cursor of the next page if more may follow.
    ///
    /// # Errors
    /// [`StoreError::InvalidInput`] (`limit`) for 0 or more than [`MAX_PAGE`](super::MAX_PAGE);
    /// [`StoreError::Db`] if the query fails.
    pub fn checks_page(
        &self,
        since: f64,
        limit: usize,
        after: Option<Cursor>,
    ) -> Result<(Vec<CheckRow>, Option<Cursor>), StoreError> {
        check_limit(limit).map_err(|e| StoreError::invalid("limit", e))?;
        let rows = self.checks_where(since, Some(limit + 1), after)?;
        Ok(split_page(rows, limit, |c| Cursor {
            time: c.updated_at,
            id: c.result_id,
        }))
    }

    fn checks_where(
        &self,
        since: f64,
        limit: Option<usize>,
        after: Option<Cursor>,
    ) -> Result<Vec<CheckRow>, StoreError> {
        let context = "listing verdicts";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT c.result_id, c.verdict, c.direction, c.reason, c.assessment_json,
                        c.confirmation_result_id, c.created_at, r.spec_key, r.device_id, a.name,
                        c.updated_at
                 FROM checks c JOIN results r ON r.id = c.result_id
                 JOIN agents a ON a.id = r.agent_id
                 WHERE c.updated_at >= :since
                   AND c.updated_at <= coalesce(CAST(:t AS double precision), 1e300)
                   AND (CAST(:t AS double precision) IS NULL OR c.updated_at < :t OR c.result_id < :id)
                 ORDER BY c.updated_at DESC, c.result_id DESC LIMIT :limit",
            )
            .map_err(sql(context))?;
        let limit = limit.map_or(i64::MAX, |n| i64::try_from(n).unwrap_or(i64::MAX));
        stmt.query_map(
            named_params! {
                ":since": since,
                ":t": after.map(|c| c.time),
                ":id": after.map(|c| c.id),
                ":limit": limit,
            },
            |r| {
                Ok(CheckRow {
                    result_id: r.get(0)?,
                    verdict: r.get(1)?,
                    direction: r.get(2)?,
                    reason: r.get(3)?,
                    assessment: json_column(r, "assessment_json")?,
                    confirmation_result_id: r.get(5)?,
                    created_at: r.get(6)?,
                    spec_key: r.get(7)?,
                    device_id: r.get(8)?,
                    agent: r.get(9)?,
                    updated_at: r.get(10)?,
                })
            },
        )
        .map_err(sql(context))?
        .collect::<Result<_, _>>()
        .map_err(sql(context))
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
        let context = "reading confirmations";
        let mut reruns = HashSet::new();
        for ids in result_ids.chunks(500) {
            let marks = vec!["?"; ids.len()].join(", ");
            let mut stmt = self
                .conn
                .prepare(&format!(
                    "SELECT r.id FROM results r WHERE {IS_CONFIRMATION} AND r.id IN ({marks})"
                ))
                .map_err(sql(context))?;
            let args: Vec<Value> = ids.iter().map(|id| Value::Int(*id)).collect();
            for id in stmt.query_map(args, |r| r.get(0)).map_err(sql(context))? {
                reruns.insert(id.map_err(sql(context))?);
            }
        }
        Ok(reruns)
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
