//! Alerts: a confirmed change of a series' level, listed for the alerts page and the metrics,
//! and acknowledged by someone. They are written by `verdicts` as a suspect is confirmed.

use serde::Serialize;

use super::super::engine::params;
use super::super::error::{StoreError, sql};
use super::super::open::Store;

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

impl Store {
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
}
