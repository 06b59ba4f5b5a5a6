//! `/history`: one series (a spec on one device of one agent) over time, with its segments and
//! alerts, and its CSV.

use super::alerts::alert_rows;
use super::{base, page};
use crate::store::{AlertRow, ResultFilter, ResultRow, SEGMENT_FIELDS, Store, segment_of};
use crate::table::{Column, Format, Table, csv_number, fmt_metric};
use crate::time::fmt_time;
use crate::web::links::{HistoryQuery, Links};
use crate::web::page::{Page, WebError};
use crate::web::svg::{self, Boundary, SeriesPoint};
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap};

/// A series' results, oldest first.
fn series(store: &Store, q: &HistoryQuery) -> Result<Vec<ResultRow>, WebError> {
    if q.spec.is_empty() || q.agent.is_empty() || q.device.is_empty() {
        return Err(WebError::BadRequest(
            "history needs spec, agent and device (e.g. from a cell of /compare)".into(),
        ));
    }
    if !q.scale.is_empty() && q.scale != "log" && q.scale != "linear" {
        return Err(WebError::BadRequest(format!(
            "scale {:?}: use log or linear",
            crate::web::page::clip(&q.scale)
        )));
    }
    let rows = store.results(&ResultFilter {
        spec_key: Some(q.spec.clone()),
        agent: Some(q.agent.clone()),
        device_id: Some(q.device.clone()),
        ..Default::default()
    })?;
    if rows.is_empty() {
        return Err(WebError::NotFound(format!(
            "no results of {} on {}:{}",
            crate::web::page::clip(&q.spec),
            crate::web::page::clip(&q.agent),
            crate::web::page::clip(&q.device)
        )));
    }
    Ok(rows)
}

/// The p10–p90 band of a result in its metric's unit (the metric scales with 1/time for
/// throughput, with time for latency).
fn band(r: &ResultRow) -> Option<(f64, f64)> {
    let rec = &r.record;
    let (v, med, p10, p90) = (rec.metric_value?, rec.median_s?, rec.p10_s?, rec.p90_s?);
    if med <= 0.0 || p10 <= 0.0 || p90 <= 0.0 {
        return None;
    }
    Some(if rec.higher_is_better.unwrap_or(true) {
        (v * med / p90, v * med / p10)
    } else {
        (v * p10 / med, v * p90 / med)
    })
}

/// What changed between two fingerprints, in the fields that define a segment.
pub fn fingerprint_changes(before: &Value, after: &Value) -> String {
    let mut out = Vec::new();
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "none".into(),
        v => v.to_string(),
    };
    for field in SEGMENT_FIELDS {
        let (a, b) = (&before[*field], &after[*field]);
        if a == b {
            continue;
        }
        if let (Some(ma), Some(mb)) = (a.as_object(), b.as_object()) {
            let keys: BTreeSet<&String> = ma.keys().chain(mb.keys()).collect();
            for k in keys {
                let (x, y) = (
                    ma.get(k).unwrap_or(&Value::Null),
                    mb.get(k).unwrap_or(&Value::Null),
                );
                if x != y {
                    out.push(format!("{field}.{k} {} → {}", text(x), text(y)));
                }
            }
        } else {
            out.push(format!("{field} {} → {}", text(a), text(b)));
        }
    }
    if out.is_empty() {
        "fingerprint changed".into()
    } else {
        out.join(", ")
    }
}

/// Marks of a series' results: alerts and their confirmation reruns.
fn marks(
    store: &Store,
    rows: &[ResultRow],
) -> Result<(HashMap<i64, String>, Vec<AlertRow>), WebError> {
    let ids: BTreeSet<i64> = rows.iter().map(|r| r.id).collect();
    let alerts: Vec<AlertRow> =
        store.alerts_of_results(&ids.iter().copied().collect::<Vec<_>>())?;
    let reruns = store.confirmation_reruns(&ids.iter().copied().collect::<Vec<_>>())?;
    let mut m = HashMap::new();
    for r in rows {
        if reruns.contains(&r.id) {
            m.insert(r.id, "confirm".to_string());
        } else if r.record.noisy {
            m.insert(r.id, "noisy".to_string());
        }
    }
    for a in &alerts {
        m.insert(a.result_id, format!("alert-{}", a.direction));
        m.insert(a.confirmation_result_id, "confirm".to_string());
    }
    Ok((m, alerts))
}

/// `/history`.
pub fn history(store: &Store, links: &Links, q: &HistoryQuery) -> Result<Page, WebError> {
    let rows = series(store, q)?;
    let (marks, alerts) = marks(store, &rows)?;
    let log = q.scale == "log";
    let unit = rows
        .iter()
        .find_map(|r| r.record.metric_unit.clone())
        .unwrap_or_default();
    let mut points = Vec::new();
    let mut boundaries = Vec::new();
    let mut changes = Vec::new();
    let mut table = Vec::new();
    let mut prev: Option<&ResultRow> = None;
    let mut segments = 0;
    for r in &rows {
        let rec = &r.record;
        let t = rec.created_at.unwrap_or(rec.started_at);
        let seg = segment_of(&rec.fingerprint);
        if prev.is_none_or(|p| segment_of(&p.record.fingerprint) != seg) {
            segments += 1;
            if let Some(p) = prev {
                let what = fingerprint_changes(&p.record.fingerprint, &rec.fingerprint);
                boundaries.push(Boundary {
                    t,
                    label: clip_label(&what),
                });
                changes.push(json!({"result_id": r.id, "when": fmt_time(t), "what": what, "run_href": links.run(r.id)}));
            }
        }
        prev = Some(r);
        let mark = marks.get(&r.id).cloned().unwrap_or_default();
        let b = band(r);
        if let (Some(v), "ok") = (rec.metric_value, rec.status.as_str()) {
            points.push(SeriesPoint {
                t,
                value: v,
                band: b,
                title: format!(
                    "#{} {} {} {}{}",
                    r.id,
                    fmt_time(t),
                    fmt_metric(v),
                    unit,
                    if mark.is_empty() {
                        String::new()
                    } else {
                        format!(" ({mark})")
                    }
                ),
                mark: mark.clone(),
                href: links.run(r.id),
            });
        }
        table.push(json!({
            "id": r.id, "run_href": links.run(r.id), "when": fmt_time(t), "status": rec.status,
            "metric": rec.metric_value.filter(|_| rec.status == "ok").map(|v| format!("{} {unit}", fmt_metric(v))).unwrap_or_default(),
            "lo": b.map(|b| fmt_metric(b.0)).unwrap_or_default(), "hi": b.map(|b| fmt_metric(b.1)).unwrap_or_default(),
            "cv": rec.robust_cv.map(|c| format!("{:.1}", c * 100.0)).unwrap_or_default(), "marks": mark,
        }));
    }
    table.reverse();
    let chart = (!points.is_empty()).then(|| svg::series_chart(&points, &boundaries, &unit, log));
    let device = format!(
        "{}:{}{}",
        q.agent,
        q.device,
        rows.last()
            .and_then(|r| r.device_name.as_ref())
            .map(|n| format!(" ({n})"))
            .unwrap_or_default()
    );
    let m = base(links, store, &format!("History of {}", q.spec), "history")?;
    Ok(page(
        "history.html",
        m,
        json!({
            "device": device, "points": points.len(), "segments": segments, "log": log,
            "linear_href": links.history_scale(q, false), "log_href": links.history_scale(q, true),
            "csv_href": links.history_csv(q), "chart": chart, "boundaries": changes,
            "alerts": alert_rows(&alerts, links), "with_ack": false, "rows": table,
        }),
    ))
}

fn clip_label(s: &str) -> String {
    if s.chars().count() > 48 {
        format!("{}…", s.chars().take(47).collect::<String>())
    } else {
        s.to_string()
    }
}

/// One line of the history's CSV: a result of the series with its band and mark.
struct CsvLine {
    row: ResultRow,
    band: Option<(f64, f64)>,
    mark: String,
}

const CSV_COLUMNS: &[Column<CsvLine>] = &[
    Column::new("result_id", |l| l.row.id.to_string()),
    Column::new("created_at", |l| csv_number(l.row.record.created_at)),
    Column::new("status", |l| l.row.record.status.clone()),
    Column::new("value", |l| csv_number(l.row.record.ok_metric())),
    Column::new("unit", |l| l.row.record.unit().to_string()),
    Column::new("p10_value", |l| csv_number(l.band.map(|b| b.0))),
    Column::new("p90_value", |l| csv_number(l.band.map(|b| b.1))),
    Column::new("cv", |l| csv_number(l.row.record.cv)),
    Column::new("segment", |l| segment_of(&l.row.record.fingerprint)),
    Column::new("mark", |l| l.mark.clone()),
    Column::new("run_id", |l| l.row.record.run_id.clone()),
];

/// The history as CSV: one line per result, numbers unformatted.
pub fn history_csv(store: &Store, q: &HistoryQuery) -> Result<String, WebError> {
    let rows = series(store, q)?;
    let (marks, _) = marks(store, &rows)?;
    let lines: Vec<CsvLine> = rows
        .into_iter()
        .map(|row| CsvLine {
            band: band(&row),
            mark: marks.get(&row.id).cloned().unwrap_or_default(),
            row,
        })
        .collect();
    Ok(Table::of(CSV_COLUMNS, &lines).render(Format::Csv))
}
