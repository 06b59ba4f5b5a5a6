//! `/alerts`, and the alert table the fleet and history pages embed.

use super::{base, page};
use crate::store::{AlertFilter, AlertRow, Store};
use crate::table::fmt_metric;
use crate::time::fmt_time;
use crate::web::links::{HistoryQuery, Links, Scope};
use crate::web::page::{Page, WebError};
use serde_json::{Value, json};

/// The alerts as the alert table shows them.
pub fn alert_rows(alerts: &[AlertRow], links: &Links) -> Vec<Value> {
    alerts
        .iter()
        .map(|a| {
            let agent = a.agent.clone().unwrap_or_default();
            let hq = HistoryQuery {
                spec: a.spec_key.clone(),
                agent: agent.clone(),
                device: a.device_id.clone(),
                scale: String::new(),
            };
            let worse = a.direction == "regression";
            json!({
                "id": a.id, "when": fmt_time(a.created_at), "direction": a.direction,
                "spec": a.spec_key, "device": format!("{agent}:{}", a.device_id),
                "before": format!("{} {}", fmt_metric(a.before_value), a.metric_unit),
                "after": format!("{} {}", fmt_metric(a.after_value), a.metric_unit),
                "change": format!("{:+.1}%", a.change_pct),
                "change_class": if worse { "bad" } else { "good" },
                "result_id": a.result_id, "run_href": links.run(a.result_id),
                "confirm_href": links.run(a.confirmation_result_id),
                "history_href": links.history(&hq),
                "acknowledged": a.acknowledged_at.is_some(),
                "ack_href": format!("/alerts/{}/ack", a.id),
            })
        })
        .collect()
}

/// The most alerts `/alerts` shows, newest first (`gpufleet regressions` lists them all).
pub const ALERTS_SHOWN: usize = 500;

/// `/alerts`.
pub fn alerts(store: &Store, links: &Links, scope: &Scope) -> Result<Page, WebError> {
    let rows: Vec<AlertRow> = store
        .alerts_where(&AlertFilter {
            since: scope.since.unwrap_or(0.0),
            limit: ALERTS_SHOWN + 1,
            ..AlertFilter::default()
        })?
        .into_iter()
        .filter(|a| scope.campaign.is_none_or(|c| a.campaign_id == Some(c)))
        .collect();
    let more = rows.len() > ALERTS_SHOWN;
    let rows = &rows[..rows.len().min(ALERTS_SHOWN)];
    let m = base(links, store, "Alerts", "alerts")?;
    Ok(page(
        "alerts.html",
        m,
        json!({ "alerts": alert_rows(rows, links), "alerts_more": more, "with_ack": !links.is_static(), "since": scope.since.map(fmt_time),
                "outliers": outlier_rows(store, links)? }),
    ))
}

/// The most outliers the alerts page lists (`gpufleet outliers` lists them all).
const MAX_OUTLIERS: usize = 100;

/// The outliers of the latest campaign with results, beside the regressions: each device that did
/// worse than its siblings, with its likely cause (see [`crate::outliers`]).
fn outlier_rows(store: &Store, links: &Links) -> Result<Value, WebError> {
    let campaigns = store.campaigns()?;
    let Some(latest) = crate::outliers::collect::latest_with_results(&campaigns) else {
        return Ok(Value::Null);
    };
    let cfg = crate::outliers::OutlierConfig::DEFAULT;
    let groups = crate::outliers::collect::campaign_outliers(store, latest.id, &cfg)?;
    let all: Vec<Value> = groups
        .iter()
        .flat_map(|g| {
            g.outliers().map(move |(s, o)| {
                json!({
                    "group": g.key.to_string(), "spec": s.spec_key,
                    "device": format!("{}:{}", o.agent, o.device_id),
                    "value": format!("{} {}", fmt_metric(o.value), s.unit),
                    "median": format!("{} {}", fmt_metric(s.median), s.unit),
                    "gap": format!("{:.1} %", o.gap_pct), "cause": o.cause,
                    "rerun": o.rerun(),
                    "run_href": links.run(o.result_id),
                })
            })
        })
        .collect();
    Ok(json!({
        "campaign": latest.id, "campaign_href": links.campaign(latest.id),
        "groups_href": links.groups(), "total": all.len(),
        "rows": all.into_iter().take(MAX_OUTLIERS).collect::<Vec<_>>(),
    }))
}
