//! `/campaigns` and `/campaigns/{id}`: campaigns' progress and their jobs.

use super::{base, page, page_rows};
use crate::store::{JobState, Store};
use crate::time::fmt_time;
use crate::web::links::{Links, Scope};
use crate::web::page::{Page, WebError};
use serde_json::{Value, json};
use std::collections::HashMap;

/// `/campaigns`.
pub fn campaigns(store: &Store, links: &Links, scope: &Scope) -> Result<Page, WebError> {
    let rows: Vec<Value> = store
        .campaigns()?
        .into_iter()
        .rev()
        .filter(|c| scope.campaign.is_none_or(|id| id == c.id) && scope.since.is_none_or(|t| c.created_at >= t))
        .map(|c| {
            json!({
                "id": c.id, "href": links.campaign(c.id), "suite": c.suite, "state": c.state.name(),
                "created": fmt_time(c.created_at), "total": c.jobs.total(), "finished": c.jobs.finished(),
                "done": c.jobs.get(JobState::Done), "failed": c.jobs.get(JobState::Failed),
                "results": c.results.values().sum::<i64>(),
            })
        })
        .collect();
    let m = base(links, store, "Campaigns", "campaigns")?;
    Ok(page("campaigns.html", m, json!({ "campaigns": rows })))
}

/// Jobs per page of `/campaigns/{id}`: a campaign on thousands of devices is pages.
pub const JOBS_PER_PAGE: usize = 500;

/// `/campaigns/{id}?page=N` (from 1); refreshes every 5 s on the serve while the campaign runs.
pub fn campaign(
    store: &Store,
    links: &Links,
    id: i64,
    page_no: Option<usize>,
) -> Result<Page, WebError> {
    let c = store
        .campaign(id)?
        .ok_or_else(|| WebError::NotFound(format!("no campaign {id}")))?;
    let total = usize::try_from(c.jobs.total()).unwrap_or(0);
    let (shown, pager) = page_rows(total, JOBS_PER_PAGE, page_no, links, |n| {
        links.campaign_page(id, n)
    })?;
    let jobs = store.jobs_page(id, None, shown.start, shown.len())?;
    let run_ids: Vec<String> = jobs.iter().map(|j| j.run_id.clone()).collect();
    let results = store.results_of_runs(&run_ids)?;
    let devices: HashMap<i64, String> = store
        .devices()?
        .into_iter()
        .map(|d| (d.id, format!("{} ({})", d.name, d.device_id)))
        .collect();
    let jobs: Vec<Value> = jobs
        .iter()
        .map(|j| {
            let result = results.get(&j.run_id);
            json!({
                "id": j.id, "agent": j.agent,
                "device": j.device_row_id.and_then(|d| devices.get(&d).cloned()).unwrap_or_default(),
                "spec": j.spec_key, "state": j.state.name(), "attempts": j.attempts,
                "result": result.map(|(id, status)| format!("#{id} {status}")),
                "run_href": result.map(|(id, _)| links.run(*id)),
                "note": j.error.clone().or(j.confirms_result_id.map(|r| format!("confirms result #{r}"))),
            })
        })
        .collect();
    let mut m = base(links, store, &format!("Campaign #{id}"), "campaigns")?;
    if !c.state.is_terminal() && !links.is_static() {
        m.insert("refresh".into(), json!(5));
    }
    Ok(page(
        "campaign.html",
        m,
        json!({"state": c.state.name(), "suite": c.suite, "created": fmt_time(c.created_at), "total": c.jobs.total(), "finished": c.jobs.finished(), "jobs": jobs, "pager": pager}),
    ))
}
