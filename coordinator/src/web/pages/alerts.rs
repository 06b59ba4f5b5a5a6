//! `/alerts`, and the alert table the fleet and history pages embed.

use super::{base, page};
use crate::store::{AlertRow, Store};
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

/// `/alerts`.
pub fn alerts(store: &Store, links: &Links, scope: &Scope) -> Result<Page, WebError> {
    let rows: Vec<AlertRow> = store
        .alerts(scope.since.unwrap_or(0.0))?
        .into_iter()
        .filter(|a| scope.campaign.is_none_or(|c| a.campaign_id == Some(c)))
        .collect();
    let m = base(links, store, "Alerts", "alerts")?;
    Ok(page(
        "alerts.html",
        m,
        json!({ "alerts": alert_rows(&rows, links), "with_ack": !links.is_static(), "since": scope.since.map(fmt_time) }),
    ))
}
