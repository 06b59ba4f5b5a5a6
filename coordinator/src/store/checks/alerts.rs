//! Alerts: a confirmed change of a series' level, listed for the alerts page and the metrics,
//! and acknowledged by someone. They are written by `verdicts` as a suspect is confirmed.

use serde::Serialize;

use super::super::engine::{DbError, Row, params};
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

/// Which alerts to list, newest first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AlertFilter {
    /// Created at or after (unix seconds).
    pub since: f64,
    /// Only those nobody acknowledged.
    pub open_only: bool,
    /// Only those with a smaller id (the next page after the last one shown).
    pub before_id: Option<i64>,
    /// At most this many.
    pub limit: usize,
}

impl Default for AlertFilter {
    fn default() -> Self {
        AlertFilter {
            since: 0.0,
            open_only: false,
            before_id: None,
            limit: usize::MAX,
        }
    }
}

/// The columns of an alert as [`alert_from_row`] reads them.
const ALERT_SELECT: &str = "SELECT a.id, a.result_id, a.confirmation_result_id, a.campaign_id,
        a.device_row_id, a.device_id, ag.name, a.spec_key, a.segment, a.direction,
        a.metric_unit, a.before_value, a.after_value, a.change_pct, a.bound_pct,
        a.baseline_points, a.created_at, a.acknowledged_at
 FROM alerts a LEFT JOIN devices d ON d.id = a.device_row_id
 LEFT JOIN agents ag ON ag.id = d.agent_id";

fn alert_from_row(r: &Row<'_>) -> Result<AlertRow, DbError> {
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
}

impl Store {
    /// Alerts created at or after `since` (unix seconds), newest first: every one (a command's
    /// listing; the pages and the API take [`Store::alerts_where`]'s bounded pages).
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails.
    pub fn alerts(&self, since: f64) -> Result<Vec<AlertRow>, StoreError> {
        self.alerts_where(&AlertFilter {
            since,
            ..AlertFilter::default()
        })
    }

    /// The alerts `f` selects, newest first, read along `alerts_by_time`.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails.
    pub fn alerts_where(&self, f: &AlertFilter) -> Result<Vec<AlertRow>, StoreError> {
        let context = "listing alerts";
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "{ALERT_SELECT}
                 WHERE a.created_at >= ?1 AND (?2 = 0 OR a.acknowledged_at IS NULL) AND a.id < ?3
                 ORDER BY a.created_at DESC, a.id DESC LIMIT ?4"
            ))
            .map_err(sql(context))?;
        let limit = i64::try_from(f.limit).unwrap_or(i64::MAX);
        stmt.query_map(
            params![
                f.since,
                i64::from(f.open_only),
                f.before_id.unwrap_or(i64::MAX),
                limit
            ],
            alert_from_row,
        )
        .map_err(sql(context))?
        .collect::<Result<_, _>>()
        .map_err(sql(context))
    }

    /// How many alerts there are, or open ones only.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails.
    pub fn alert_count(&self, open_only: bool) -> Result<i64, StoreError> {
        self.conn
            .query_row(
                "SELECT COUNT(*) FROM alerts WHERE ?1 = 0 OR acknowledged_at IS NULL",
                [i64::from(open_only)],
                |r| r.get(0),
            )
            .map_err(sql("counting alerts"))
    }

    /// The alerts raised on the results `result_ids` (a series' marks), newest first.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails.
    pub fn alerts_of_results(&self, result_ids: &[i64]) -> Result<Vec<AlertRow>, StoreError> {
        let mut out = self.rows_for_ids(
            "listing a series' alerts",
            result_ids,
            |marks| format!("{ALERT_SELECT} WHERE a.result_id IN ({marks})"),
            alert_from_row,
        )?;
        out.sort_by(|a, b| b.created_at.total_cmp(&a.created_at).then(b.id.cmp(&a.id)));
        Ok(out)
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

#[cfg(test)]
mod tests {
    use super::super::super::test_support::{sample_result, temp_store};
    use super::*;

    /// 30 alerts, every third acknowledged: pages come newest first, `before` goes on where the
    /// last page ended, `open_only` and the counts agree, and a series' marks find theirs.
    #[test]
    fn alerts_come_in_bounded_pages_newest_first() {
        let (_db, mut s) = temp_store();
        let agent = s.add_agent("rig", "http://127.0.0.1:9", None).unwrap();
        s.insert_result(&sample_result("confirm", agent.id))
            .unwrap();
        let confirm_id: i64 = s
            .conn
            .query_row("SELECT id FROM results WHERE run_id = 'confirm'", [], |r| {
                r.get(0)
            })
            .unwrap();
        let mut ids = Vec::new();
        for i in 0..30i64 {
            s.insert_result(&sample_result(&format!("run-{i}"), agent.id))
                .unwrap();
            let result: i64 = s
                .conn
                .query_row("SELECT max(id) FROM results", [], |r| r.get(0))
                .unwrap();
            ids.push(result);
            s.conn
                .execute(
                    "INSERT INTO alerts (result_id, confirmation_result_id, device_id, spec_key,
                        segment, direction, metric_unit, before_value, after_value, change_pct,
                        bound_pct, baseline_points, created_at, acknowledged_at)
                     VALUES (?1, ?2, 'cpu:0', 'k', '', 'regression', 'GB/s', 10.0, 8.0, -20.0,
                        6.0, 20, ?3, ?4)",
                    params![
                        result,
                        confirm_id,
                        1000.0 + i as f64,
                        (i % 3 == 0).then_some(2000.0)
                    ],
                )
                .unwrap();
        }
        assert_eq!(
            (s.alert_count(false).unwrap(), s.alert_count(true).unwrap()),
            (30, 20)
        );
        let page = |before: Option<i64>, open_only: bool| {
            s.alerts_where(&AlertFilter {
                before_id: before,
                open_only,
                limit: 12,
                ..AlertFilter::default()
            })
            .unwrap()
        };
        let first = page(None, false);
        assert_eq!(first.len(), 12);
        assert!(first.windows(2).all(|w| w[0].created_at > w[1].created_at));
        let second = page(first.last().map(|a| a.id), false);
        let third = page(second.last().map(|a| a.id), false);
        assert_eq!((second.len(), third.len()), (12, 6));
        assert!(first.last().unwrap().id > second[0].id);
        let open = page(None, true);
        assert!(open.iter().all(|a| a.acknowledged_at.is_none()));
        assert_eq!(s.alerts(0.0).unwrap().len(), 30);
        let marks = s.alerts_of_results(&ids[5..8]).unwrap();
        assert_eq!(
            marks.iter().map(|a| a.result_id).collect::<Vec<_>>(),
            [ids[7], ids[6], ids[5]]
        );
    }
}
