//! Verdicts: a final one stored at once, a suspect with its confirmation rerun queued, the
//! suspect closed (confirmed with its alert, or not), and the verdicts listed for the checks page.

use serde::Serialize;

use super::super::engine::{named_params, params};
use super::super::error::{StoreError, sql};
use super::super::listing::{Cursor, check_limit, split_page};
use super::super::open::Store;
use super::super::values::json_column;
use super::alerts::NewAlert;
use super::series::{CANDIDATE_COLUMNS, CheckCandidate, campaign_is, candidate_from_row};

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

impl Store {
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
        let campaign = campaign_is("r.campaign_id", "?1", campaign_id);
        // Along `checks_suspect`, `jobs_by_confirms` and the run id's index (a job's result
        // carries its run id): a few rows a night, never a pass over checks, jobs or results.
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT {CANDIDATE_COLUMNS}, j.id, j.state, cr.id, cr.status, cr.metric_value
                 FROM checks c JOIN results r ON r.id = c.result_id
                 LEFT JOIN jobs j ON j.confirms_result_id = r.id
                 LEFT JOIN results cr ON cr.run_id = j.run_id AND cr.job_id = j.id
                 WHERE c.verdict = 'suspect' AND {campaign}
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
    /// [`StoreError::InvalidInput`] (`limit`) for 0 or more than [`MAX_PAGE`](super::super::MAX_PAGE);
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
}
