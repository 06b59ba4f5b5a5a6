//! `gpufleet report --html DIR`: the dashboard's pages written as static files with relative
//! links, for sharing and for CI artifacts. The report covers one campaign or a time window; it
//! writes the fleet, compare (with its CSV and JSON), campaigns and alerts pages, then every result,
//! history and device page those link to (histories show their whole series, device pages every
//! latest result of the device).

use super::links::{CompareQuery, HistoryQuery, Links, Ref, Scope, device_file_key};
use super::page::{CSS, JS, WebError};
use super::pages;
use crate::store::Store;
use std::collections::BTreeSet;
use std::path::Path;

/// What a report wrote.
#[derive(Debug, Default, Clone, PartialEq, serde::Serialize)]
pub struct ReportSummary {
    pub pages: usize,
    pub runs: usize,
    pub histories: usize,
    pub campaigns: usize,
    pub devices: usize,
}

/// Stop following links after this many pages (a report over a huge window stays bounded).
const MAX_PAGES: usize = 20_000;

fn write(dir: &Path, name: &str, body: &str) -> Result<(), WebError> {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| WebError::Render(path.display().to_string(), e.to_string()))?;
    }
    std::fs::write(&path, body)
        .map_err(|e| WebError::Render(path.display().to_string(), e.to_string()))
}

/// Writes the report of `scope` into `dir` (created if missing).
///
/// # Errors
/// [`WebError`] when the store fails, a campaign does not exist, or a file cannot be written.
pub fn write_report(store: &Store, dir: &Path, scope: &Scope) -> Result<ReportSummary, WebError> {
    let campaigns: BTreeSet<i64> = store
        .campaigns()?
        .iter()
        .filter(|c| {
            scope.campaign.is_none_or(|id| id == c.id)
                && scope.since.is_none_or(|t| c.created_at >= t)
        })
        .map(|c| c.id)
        .collect();
    if let Some(id) = scope.campaign
        && !campaigns.contains(&id)
    {
        return Err(WebError::NotFound(format!("no campaign {id}")));
    }
    let root = Links::report(campaigns);
    let mut summary = ReportSummary::default();
    write(dir, "static/gpufleet.css", CSS)?;
    write(dir, "static/gpufleet.js", JS)?;
    let q = CompareQuery::default();
    let matrix = pages::compare::matrix(store, &q, scope)?;
    write(dir, "compare.csv", &pages::compare::matrix_csv(&matrix))?;
    write(
        dir,
        "compare.json",
        &serde_json::to_string_pretty(&matrix.cells()).expect("comparison cells serialise to JSON"),
    )?;
    for (name, page) in [
        ("index.html", pages::fleet::fleet(store, &root, None)?),
        (
            "compare.html",
            pages::compare::compare_page(store, &root, &q, scope)?,
        ),
        (
            "campaigns.html",
            pages::campaigns::campaigns(store, &root, scope)?,
        ),
        ("alerts.html", pages::alerts::alerts(store, &root, scope)?),
        ("groups.html", pages::groups::groups(store, &root, scope)?),
    ] {
        write(dir, name, &page.render()?)?;
        summary.pages += 1;
    }
    // Every page but the five above lives one folder down (runs/, history/, campaigns/, devices/); they share
    // the root's list of links.
    let nested = root.at_depth(1);
    let mut done: BTreeSet<Ref> = BTreeSet::new();
    loop {
        let pending: Vec<Ref> = root
            .take_refs()
            .into_iter()
            .filter(|r| !done.contains(r))
            .collect();
        if pending.is_empty() || summary.pages >= MAX_PAGES {
            break;
        }
        for r in pending {
            match &r {
                Ref::Run(id) => {
                    write(
                        dir,
                        &format!("runs/{id}.html"),
                        &pages::run::run(store, &nested, *id)?.render()?,
                    )?;
                    summary.runs += 1;
                }
                Ref::History(hq) => write_history(store, dir, &nested, hq, &mut summary)?,
                Ref::Campaign(id) => {
                    write(
                        dir,
                        &format!("campaigns/{id}.html"),
                        &pages::campaigns::campaign(store, &nested, *id, None)?.render()?,
                    )?;
                    summary.campaigns += 1;
                }
                Ref::Device(agent, device) => {
                    write(
                        dir,
                        &format!("devices/{}.html", device_file_key(agent, device)),
                        &pages::device::device(store, &nested, agent, device)?.render()?,
                    )?;
                    summary.devices += 1;
                }
            }
            summary.pages += 1;
            done.insert(r);
        }
    }
    Ok(summary)
}

fn write_history(
    store: &Store,
    dir: &Path,
    links: &Links,
    hq: &HistoryQuery,
    summary: &mut ReportSummary,
) -> Result<(), WebError> {
    let key = hq.file_key();
    write(
        dir,
        &format!("history/{key}.html"),
        &pages::history::history(store, links, hq)?.render()?,
    )?;
    write(
        dir,
        &format!("history/{key}.csv"),
        &pages::history::history_csv(store, hq)?,
    )?;
    summary.histories += 1;
    Ok(())
}
