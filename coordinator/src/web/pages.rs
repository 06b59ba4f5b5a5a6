//! The pages' data: each function reads the store and returns a [`Page`] (template and context).
//! The same functions serve `gpufleet serve` and the static `gpufleet report`; only [`Links`]
//! differs (absolute server paths, or relative file names).

use super::svg::{self, Boundary, PowerReading, SeriesPoint};
use super::{Page, WebError};
use crate::campaign::handoff::attached;
use crate::compare::{self, By, CompareRow, Pivot, csv_number, env_set, fmt_metric, per_watt_unit};
use crate::convert::{params_text, to_compare_row};
use crate::store::{
    AgentKind, AlertRow, ResultFilter, ResultRow, SEGMENT_FIELDS, Store, segment_of,
};
use crate::table::{Format, Table};
use crate::time::fmt_time;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

/// Which stored work a page covers: everything (serve), or one campaign or a time window (report).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scope {
    pub campaign: Option<i64>,
    /// Unix seconds.
    pub since: Option<f64>,
}

impl Scope {
    fn has_result(&self, r: &ResultRow) -> bool {
        self.campaign
            .is_none_or(|c| r.record.campaign_id == Some(c))
            && self
                .since
                .is_none_or(|t| r.record.created_at.unwrap_or(0.0) >= t)
    }
}

/// A page a static report must also write because another page links to it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Ref {
    Run(i64),
    History(HistoryQuery),
    Campaign(i64),
}

/// How pages link to each other: server paths, or relative files of a static report (which records
/// what it linked to, so the report writes those pages too).
#[derive(Debug, Clone, Default)]
pub struct Links {
    /// `None`: server paths. `Some`: a static report, this page `depth` folders below its root.
    report: Option<(usize, Arc<Mutex<BTreeSet<Ref>>>)>,
    /// Static: the campaigns that get a page (others are named without a link).
    campaigns: Option<BTreeSet<i64>>,
}

/// `?a=1&b=2` of a query struct (empty fields are left out; they skip serialising), or nothing.
fn query_string<T: Serialize>(q: &T) -> String {
    match serde_urlencoded::to_string(q) {
        Ok(text) if !text.is_empty() => format!("?{text}"),
        _ => String::new(),
    }
}

impl Links {
    /// Links of a static report rooted at its folder, for the campaigns in `campaigns`.
    pub fn report(campaigns: BTreeSet<i64>) -> Links {
        Links {
            report: Some((0, Arc::new(Mutex::new(BTreeSet::new())))),
            campaigns: Some(campaigns),
        }
    }

    /// The same links for a page `depth` folders below the report's root.
    pub fn at_depth(&self, depth: usize) -> Links {
        let mut l = self.clone();
        if let Some((d, _)) = &mut l.report {
            *d = depth;
        }
        l
    }

    /// Pages linked to so far (static reports); drains the list.
    pub fn take_refs(&self) -> Vec<Ref> {
        self.report
            .as_ref()
            .map(|(_, r)| {
                std::mem::take(&mut *r.lock().unwrap_or_else(|p| p.into_inner()))
                    .into_iter()
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn is_static(&self) -> bool {
        self.report.is_some()
    }

    fn note(&self, r: Ref) {
        if let Some((_, refs)) = &self.report {
            refs.lock().unwrap_or_else(|p| p.into_inner()).insert(r);
        }
    }

    /// `server` on the serve, else `file` relative to this page.
    fn pick(&self, server: String, file: &str) -> String {
        match &self.report {
            None => server,
            Some((depth, _)) => format!("{}{file}", "../".repeat(*depth)),
        }
    }

    pub fn fleet(&self) -> String {
        self.pick("/".into(), "index.html")
    }
    pub fn compare(&self) -> String {
        self.pick("/compare".into(), "compare.html")
    }
    /// The compare page's CSV or JSON download with the same filters.
    pub fn compare_download(&self, q: &CompareQuery, ext: &str) -> String {
        self.pick(
            format!("/compare.{ext}{}", query_string(q)),
            &format!("compare.{ext}"),
        )
    }
    pub fn compare_with(&self, q: &CompareQuery) -> String {
        self.pick(format!("/compare{}", query_string(q)), "compare.html")
    }
    pub fn campaigns(&self) -> String {
        self.pick("/campaigns".into(), "campaigns.html")
    }
    /// A campaign's page; empty in a report that does not include it.
    pub fn campaign(&self, id: i64) -> String {
        if self.campaigns.as_ref().is_some_and(|c| !c.contains(&id)) {
            return String::new();
        }
        self.note(Ref::Campaign(id));
        self.pick(format!("/campaigns/{id}"), &format!("campaigns/{id}.html"))
    }
    pub fn alerts(&self) -> String {
        self.pick("/alerts".into(), "alerts.html")
    }
    pub fn run(&self, id: i64) -> String {
        self.note(Ref::Run(id));
        self.pick(format!("/runs/{id}"), &format!("runs/{id}.html"))
    }
    pub fn history(&self, q: &HistoryQuery) -> String {
        self.note(Ref::History(HistoryQuery {
            scale: String::new(),
            ..q.clone()
        }));
        self.pick(
            format!("/history{}", query_string(q)),
            &format!("history/{}.html", q.file_key()),
        )
    }
    /// The history's CSV (server only: a report writes it next to the page).
    fn history_csv(&self, q: &HistoryQuery) -> String {
        self.pick(
            format!("/history.csv{}", query_string(q)),
            &format!("history/{}.csv", q.file_key()),
        )
    }
    /// The other scale of a history (server only; a report has the linear page).
    fn history_scale(&self, q: &HistoryQuery, log: bool) -> String {
        let q = HistoryQuery {
            scale: if log { "log".into() } else { String::new() },
            ..q.clone()
        };
        if self.is_static() {
            return String::new();
        }
        format!("/history{}", query_string(&q))
    }
    fn static_file(&self, name: &str) -> String {
        self.pick(format!("/static/{name}"), &format!("static/{name}"))
    }
}

/// What every page's layout needs.
fn base(
    links: &Links,
    store: &Store,
    title: &str,
    page: &str,
) -> Result<Map<String, Value>, WebError> {
    let open_alerts = store
        .alerts(0.0)?
        .iter()
        .filter(|a| a.acknowledged_at.is_none())
        .count();
    let mut m = Map::new();
    m.insert("title".into(), json!(title));
    m.insert("page".into(), json!(page));
    m.insert("version".into(), json!(env!("CARGO_PKG_VERSION")));
    m.insert("generated".into(), json!(fmt_time(crate::time::now())));
    m.insert("is_static".into(), json!(links.is_static()));
    m.insert(
        "nav".into(),
        json!({
            "fleet": links.fleet(), "compare": links.compare(), "campaigns": links.campaigns(),
            "alerts": links.alerts(), "css": links.static_file("gpufleet.css"),
            "js": links.static_file("gpufleet.js"), "open_alerts": open_alerts,
        }),
    );
    Ok(m)
}

fn page(template: &'static str, mut m: Map<String, Value>, extra: Value) -> Page {
    if let Value::Object(e) = extra {
        m.extend(e);
    }
    Page {
        template,
        context: Value::Object(m),
    }
}

/// An error page.
pub fn error_page(links: &Links, store: &Store, message: &str) -> Result<Page, WebError> {
    let m = base(links, store, "Not available", "")?;
    Ok(page("error.html", m, json!({ "message": message })))
}

fn si(v: f64, unit: &str) -> String {
    let (v, p) = if v >= 1e12 {
        (v / 1e12, "T")
    } else if v >= 1e9 {
        (v / 1e9, "G")
    } else if v >= 1e6 {
        (v / 1e6, "M")
    } else {
        (v, "")
    };
    format!("{} {p}{unit}", fmt_metric(v))
}

fn power_text(sensors: String) -> String {
    if sensors.is_empty() {
        "none".into()
    } else {
        sensors
    }
}

/// `/`: agents, their state, backends, devices, latest campaign; open alerts.
pub fn fleet(store: &Store, links: &Links) -> Result<Page, WebError> {
    let now = crate::time::now();
    let agents = store.agents()?;
    let devices = store.devices()?;
    let latest = store.latest_campaign_per_agent()?;
    let campaigns: HashMap<i64, _> = store.campaigns()?.into_iter().map(|c| (c.id, c)).collect();
    let mut out = Vec::new();
    for a in &agents {
        let info: Value = store
            .agent_info(a.id)?
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(Value::Null);
        let (state, class) = match a.kind {
            AgentKind::DialIn if attached(a, now) => ("online", "online"),
            AgentKind::DialIn => ("offline", "offline"),
            AgentKind::Direct => ("direct", "direct"),
        };
        let host = &info["host"];
        let host_text = [&host["hostname"], &host["cpu_model"], &host["os"]]
            .iter()
            .filter_map(|v| v.as_str())
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" · ");
        let power: Vec<&Value> = info["power_sources"]
            .as_array()
            .map(|v| v.iter().collect())
            .unwrap_or_default();
        let sensor_of = |pci: &str| -> String {
            power
                .iter()
                .filter(|p| p["available"].as_bool() == Some(true))
                .filter(|p| {
                    pci.is_empty()
                        || p["pci_bus_id"]
                            .as_str()
                            .is_none_or(|b| b.is_empty() || b == pci)
                })
                .filter_map(|p| {
                    let name = p["name"].as_str()?;
                    Some(format!("{name} ({})", p["scope"].as_str().unwrap_or("")))
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let devs: Vec<Value> = devices
            .iter()
            .filter(|d| d.agent_id == a.id)
            .map(|d| {
                let peaks = &d.info["peaks"];
                let flops = peaks["fp32_flops"].as_f64().filter(|v| *v > 0.0);
                let bw = peaks["memory_bytes_per_s"].as_f64().filter(|v| *v > 0.0);
                json!({
                    "name": d.name, "id": d.device_id, "backend": d.backend, "vendor": d.vendor,
                    "arch": d.arch,
                    "peak_flops": flops.map(|v| si(v, "FLOP/s")).unwrap_or_else(|| "-".into()),
                    "peak_bw": bw.map(|v| si(v, "B/s")).unwrap_or_else(|| "-".into()),
                    "power": power_text(sensor_of(&d.pci_bus_id)),
                })
            })
            .collect();
        let backends: Vec<Value> = info["backends"]
            .as_array()
            .map(|bs| {
                bs.iter()
                    .map(|b| json!({"name": b["name"], "available": b["available"].as_bool().unwrap_or(false), "reason": b["reason"]}))
                    .collect()
            })
            .unwrap_or_default();
        let last_seen = match a.kind {
            AgentKind::DialIn => a
                .last_seen
                .map(|t| format!("{} ({} ago)", fmt_time(t), crate::time::ago(now - t))),
            AgentKind::Direct => devices
                .iter()
                .filter(|d| d.agent_id == a.id)
                .map(|d| d.last_seen)
                .reduce(f64::max)
                .map(|t| format!("{} (last described)", fmt_time(t))),
        };
        let latest_campaign = latest.get(&a.id).and_then(|id| campaigns.get(id)).map(|c| {
            json!({"id": c.id, "suite": c.suite, "state": c.state.name(), "href": links.campaign(c.id)})
        });
        out.push(json!({
            "name": a.name, "kind": a.kind.name(), "state": state, "state_class": class,
            "host": host_text, "last_seen": last_seen,
            "address": if a.kind == AgentKind::Direct { Some(&a.url) } else { a.remote_addr.as_ref() },
            "version": a.agent_version.clone().or_else(|| info["agent_version"].as_str().map(String::from)),
            "backends": backends, "devices": devs, "latest_campaign": latest_campaign,
        }));
    }
    let alerts: Vec<AlertRow> = store
        .alerts(0.0)?
        .into_iter()
        .filter(|a| a.acknowledged_at.is_none())
        .collect();
    let m = base(links, store, "Fleet", "fleet")?;
    Ok(page(
        "fleet.html",
        m,
        json!({ "agents": out, "alerts": alert_rows(&alerts, links), "with_ack": false }),
    ))
}

fn alert_rows(alerts: &[AlertRow], links: &Links) -> Vec<Value> {
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

/// Filters of the compare page (all optional; in the URL, so a view is a link).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompareQuery {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub suite: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kernel: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub dtype: String,
    /// The environment set of an env-matrix campaign (`@name` of the spec key); `-` for none.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub env: String,
    /// The column relative figures are against (`agent:device_id`); empty: the best of each row.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub baseline: String,
}

/// The matrix: the pivot by device of what the filters show, and the filters' options.
pub struct Matrix {
    pivot: Pivot,
    options: [BTreeSet<String>; 4],
}

impl Matrix {
    /// Every shown cell, row by row (the CSV/JSON download).
    pub fn cells(&self) -> Vec<&CompareRow> {
        self.pivot.cells()
    }
}

/// Builds the matrix from the latest result of each spec on each device.
///
/// # Errors
/// [`WebError::BadRequest`] for a baseline that names no column; store errors.
pub fn matrix(store: &Store, q: &CompareQuery, scope: &Scope) -> Result<Matrix, WebError> {
    let all = store.results(&ResultFilter {
        latest_per_device_and_key: true,
        ..Default::default()
    })?;
    let all: Vec<ResultRow> = all.into_iter().filter(|r| scope.has_result(r)).collect();
    let mut options: [BTreeSet<String>; 4] = Default::default();
    for r in &all {
        options[0].extend(r.suite.clone());
        options[1].insert(r.record.kernel.clone());
        options[2].insert(r.record.dtype.clone());
        options[3].insert(match env_set(&r.record.spec_key) {
            "" => "-".to_string(),
            e => e.to_string(),
        });
    }
    let keep = |want: &str, have: &str| want.is_empty() || want == have;
    let shown: Vec<CompareRow> = all
        .iter()
        .filter(|r| {
            keep(&q.suite, r.suite.as_deref().unwrap_or(""))
                && keep(&q.kernel, &r.record.kernel)
                && keep(&q.dtype, &r.record.dtype)
                && (q.env.is_empty()
                    || q.env == env_set(&r.record.spec_key)
                    || (q.env == "-" && env_set(&r.record.spec_key).is_empty()))
        })
        .map(to_compare_row)
        .collect();
    let mut pivot = Pivot::new(shown, By::Device);
    if !q.baseline.is_empty() {
        let Some(col) = pivot.columns.iter().position(|c| c.key == q.baseline) else {
            return Err(WebError::BadRequest(format!(
                "baseline {:?} is not a column of this view (columns are agent:device)",
                crate::web::clip(&q.baseline)
            )));
        };
        pivot.against_column(col);
    }
    Ok(Matrix { pivot, options })
}

/// A matrix cell for the page: the relative figure (or % change against the baseline column)
/// and the CSS classes that colour it.
fn cell_view(p: &Pivot, col: usize, c: &CompareRow) -> (Option<String>, Vec<&'static str>) {
    let mut class = Vec::new();
    let relative = if c.status != "ok" {
        class.push("failed");
        None
    } else if p.baseline_column == Some(col) {
        class.push("base");
        Some("baseline".to_string())
    } else if p.baseline_column.is_some() {
        match (c.change_pct, c.better) {
            (Some(pct), Some(better)) => {
                class.push(if better { "better" } else { "worse" });
                Some(format!("{pct:+.1}%"))
            }
            _ => None,
        }
    } else {
        c.relative.map(|r| {
            class.push(if (r - 1.0).abs() < 1e-9 {
                "best"
            } else if r > 1.0 {
                "better"
            } else {
                "worse"
            });
            format!("×{r:.2}")
        })
    };
    if c.noisy {
        class.push("noisy");
    }
    (relative, class)
}

/// `/compare`.
pub fn compare_page(
    store: &Store,
    links: &Links,
    q: &CompareQuery,
    scope: &Scope,
) -> Result<Page, WebError> {
    let m = matrix(store, q, scope)?;
    let p = &m.pivot;
    let device_of = |c: &compare::PivotColumn| c.devices.iter().next().cloned().unwrap_or_default();
    let columns: Vec<Value> = p
        .columns
        .iter()
        .map(|c| {
            let (agent, device_id) = c.key.split_once(':').unwrap_or((&c.key, ""));
            let backend = device_id.split(':').next().unwrap_or("");
            json!({"key": c.key, "label": format!("{} ({})", device_of(c), c.key), "device": device_of(c), "agent": agent, "backend": backend})
        })
        .collect();
    let baseline_label = p
        .baseline_column
        .map(|i| format!("{} ({})", device_of(&p.columns[i]), p.columns[i].key));
    let rows: Vec<Value> = p
        .rows
        .iter()
        .map(|row| {
            let cells: Vec<Value> = row
                .cells
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let Some(c) = c else { return Value::Null };
                    let hq = HistoryQuery { spec: row.spec_key.clone(), agent: c.agent.clone(), device: c.device_id.clone(), scale: String::new() };
                    let (relative, class) = cell_view(p, i, c);
                    let mut extra = Vec::new();
                    if let Some(pct) = c.pct_of_peak.filter(|p| *p > 0.0) {
                        extra.push(if c.peak_suspect() {
                            format!("peak? {pct:.0}% of a peak from {}", c.peak_source)
                        } else {
                            format!("{pct:.0}% of peak")
                        });
                    }
                    if let Some(w) = c.metric_per_watt {
                        extra.push(format!("{} {}", fmt_metric(w), per_watt_unit(&c.unit)));
                    }
                    if let Some(j) = c.joules_per_unit {
                        extra.push(format!("{j:.3e} J/{}", c.unit.split('/').next().unwrap_or("")));
                    }
                    let title = if c.status == "ok" {
                        let ci = c.ci_pct.map(|v| format!(", median ±{v:.1}%")).unwrap_or_default();
                        format!("cv {}{ci}{}", c.cv.map(|v| format!("{:.1}%", v * 100.0)).unwrap_or("-".into()), if c.noisy { " (noisy)" } else { "" })
                    } else {
                        format!("{}: {}", c.status, c.message)
                    };
                    json!({
                        "value": c.metric.map(fmt_metric), "unit": c.unit, "status": c.status,
                        "relative": relative,
                        "class": class.join(" "), "extra": extra.join(" · "), "title": title,
                        "sort": c.metric.map(|v| v.to_string()).unwrap_or_default(),
                        "run_href": links.run(c.result_id), "history_href": links.history(&hq),
                    })
                })
                .collect();
            let params = params_text(&row.params, ",");
            json!({"kernel": row.kernel, "variant": row.variant, "params": params, "dtype": row.dtype,
                   "mode": row.mode, "env_set": row.env_set, "cells": cells})
        })
        .collect();
    let names = [
        ("suite", "Suite", &q.suite),
        ("kernel", "Kernel", &q.kernel),
        ("dtype", "Dtype", &q.dtype),
        ("env", "Env set", &q.env),
    ];
    let filters: Vec<Value> = names
        .iter()
        .zip(&m.options)
        .map(|((name, label, value), opts)| json!({"name": name, "label": label, "value": value, "options": opts}))
        .collect();
    let base = base(links, store, "Compare", "compare")?;
    Ok(page(
        "compare.html",
        base,
        json!({
            "columns": columns, "rows": rows, "filters": filters, "baseline": q.baseline,
            "baseline_label": baseline_label, "noisy_cv_pct": gpufleet_kernels::NOISY_CV * 100.0,
            "csv_href": links.compare_download(q, "csv"), "json_href": links.compare_download(q, "json"),
            "self_href": links.compare_with(q),
        }),
    ))
}

/// The matrix as CSV: one line per cell, numbers unformatted (the same columns as
/// `gpufleet compare --format csv`).
pub fn matrix_csv(m: &Matrix) -> String {
    compare::csv(&m.cells())
}

/// One series: a spec on one device of one agent.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HistoryQuery {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub spec: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub agent: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub device: String,
    /// `log` for a log10 y axis.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub scale: String,
}

impl HistoryQuery {
    /// A file name for a report: 16 hex digits of the series' SHA-256.
    pub fn file_key(&self) -> String {
        let text = format!("{}\n{}\n{}", self.spec, self.agent, self.device);
        gpufleet_proto::digest::sha256_hex(text.as_bytes())[..16].to_string()
    }
}

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
            crate::web::clip(&q.scale)
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
            crate::web::clip(&q.spec),
            crate::web::clip(&q.agent),
            crate::web::clip(&q.device)
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
    let alerts: Vec<AlertRow> = store
        .alerts(0.0)?
        .into_iter()
        .filter(|a| ids.contains(&a.result_id))
        .collect();
    let mut m = HashMap::new();
    for r in rows {
        if store.confirms(r.id)?.is_some() {
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
            "cv": rec.cv.map(|c| format!("{:.1}", c * 100.0)).unwrap_or_default(), "marks": mark,
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

/// The history as CSV: one line per result, numbers unformatted.
pub fn history_csv(store: &Store, q: &HistoryQuery) -> Result<String, WebError> {
    let rows = series(store, q)?;
    let (marks, _) = marks(store, &rows)?;
    let mut t = Table::new(&[
        "result_id",
        "created_at",
        "status",
        "value",
        "unit",
        "p10_value",
        "p90_value",
        "cv",
        "segment",
        "mark",
        "run_id",
    ]);
    for r in &rows {
        let rec = &r.record;
        let b = band(r);
        t.push(vec![
            r.id.to_string(),
            csv_number(rec.created_at),
            rec.status.clone(),
            csv_number(rec.metric_value.filter(|_| rec.status == "ok")),
            rec.metric_unit.clone().unwrap_or_default(),
            csv_number(b.map(|b| b.0)),
            csv_number(b.map(|b| b.1)),
            csv_number(rec.cv),
            segment_of(&rec.fingerprint),
            marks.get(&r.id).cloned().unwrap_or_default(),
            rec.run_id.clone(),
        ]);
    }
    Ok(t.render(Format::Csv))
}

/// `/runs/{id}`.
pub fn run(store: &Store, links: &Links, id: i64) -> Result<Page, WebError> {
    let row = store
        .results(&ResultFilter {
            id: Some(id),
            with_samples: true,
            ..Default::default()
        })?
        .pop()
        .ok_or_else(|| WebError::NotFound(format!("no result {id}")))?;
    let rec = &row.record;
    let hq = HistoryQuery {
        spec: rec.spec_key.clone(),
        agent: row.agent.clone(),
        device: rec.device_id.clone(),
        scale: String::new(),
    };
    let unit = rec.metric_unit.clone().unwrap_or_default();
    let num = |v: Option<f64>, u: &str| {
        v.map(|v| format!("{} {u}", fmt_metric(v)))
            .unwrap_or_else(|| "-".into())
    };
    let us = |v: Option<f64>| {
        v.map(|v| format!("{:.3} µs", v * 1e6))
            .unwrap_or_else(|| "-".into())
    };
    let params = params_text(&rec.params, ", ");
    let campaign = rec.campaign_id.map(|c| {
        (
            format!(
                "#{c}{}",
                row.suite
                    .as_ref()
                    .map(|s| format!(" ({s})"))
                    .unwrap_or_default()
            ),
            links.campaign(c),
        )
    });
    let mut fields: Vec<(String, String, String)> = vec![
        ("Run id".into(), rec.run_id.clone(), String::new()),
        (
            "Kernel".into(),
            format!("{}/{}", rec.kernel, rec.variant),
            links.history(&hq),
        ),
        ("Parameters".into(), params, String::new()),
        (
            "Dtype · mode".into(),
            format!("{} · {}", rec.dtype, rec.mode),
            String::new(),
        ),
        ("Agent".into(), row.agent.clone(), String::new()),
        (
            "Device".into(),
            format!(
                "{} ({})",
                row.device_name.clone().unwrap_or_default(),
                rec.device_id
            ),
            String::new(),
        ),
        ("Backend".into(), rec.backend.clone(), String::new()),
        (
            "Metric".into(),
            num(rec.metric_value.filter(|_| rec.status == "ok"), &unit),
            String::new(),
        ),
        (
            "% of peak".into(),
            rec.pct_of_peak
                .filter(|p| *p > 0.0)
                .map(|p| format!("{p:.1}%"))
                .unwrap_or("-".into()),
            String::new(),
        ),
        (
            "Median · p10 · p90".into(),
            format!(
                "{} · {} · {}",
                us(rec.median_s),
                us(rec.p10_s),
                us(rec.p90_s)
            ),
            String::new(),
        ),
        (
            "Min · max · mean".into(),
            format!("{} · {} · {}", us(rec.min_s), us(rec.max_s), us(rec.mean_s)),
            String::new(),
        ),
        (
            "CV".into(),
            rec.cv
                .map(|c| {
                    format!(
                        "{:.2}%{}",
                        c * 100.0,
                        if rec.noisy { " (noisy)" } else { "" }
                    )
                })
                .unwrap_or("-".into()),
            String::new(),
        ),
        (
            "Iterations".into(),
            rec.iterations.to_string(),
            String::new(),
        ),
        ("Started".into(), fmt_time(rec.started_at), String::new()),
        (
            "Wall time".into(),
            format!("{:.2} s", rec.wall_s),
            String::new(),
        ),
        (
            "Stored".into(),
            rec.created_at.map(fmt_time).unwrap_or_default(),
            String::new(),
        ),
    ];
    if let Some((text, href)) = campaign {
        fields.push(("Campaign".into(), text, href));
    }
    if let Some(c) = store.confirms(row.id)? {
        fields.push(("Confirms".into(), format!("result #{c}"), links.run(c)));
    }
    if let Some(sig) = rec.signal {
        fields.push(("Signal".into(), sig.to_string(), String::new()));
    }
    let fields: Vec<Value> = fields
        .into_iter()
        .map(|(a, b, c)| json!([a, b, c]))
        .collect();
    let e = &rec.energy;
    let energy: Vec<Value> = if e.is_object() {
        [
            ("Energy", rec.energy_j.map(|j| format!("{j:.3} J"))),
            ("Average power", rec.avg_watts.map(|w| format!("{w:.1} W"))),
            (
                "Peak power",
                e["peak_watts"]
                    .as_f64()
                    .filter(|w| *w > 0.0)
                    .map(|w| format!("{w:.1} W")),
            ),
            (
                "Idle power",
                e["idle_watts"]
                    .as_f64()
                    .filter(|w| *w > 0.0)
                    .map(|w| format!("{w:.1} W")),
            ),
            (
                "Window",
                e["window_s"]
                    .as_f64()
                    .map(|w| format!("{w:.3} s, {} samples", e["samples"])),
            ),
            (
                "Source",
                e["source"].as_str().map(|s| {
                    format!(
                        "{s} ({}, {})",
                        e["scope"].as_str().unwrap_or(""),
                        e["method"].as_str().unwrap_or("")
                    )
                }),
            ),
            (
                "Per watt",
                rec.metric_per_watt
                    .map(|v| format!("{} {}", fmt_metric(v), per_watt_unit(&unit))),
            ),
            (
                "Per unit of work",
                rec.joules_per_unit.map(|v| {
                    format!(
                        "{v:.4e} {}",
                        e["joules_per_unit_unit"].as_str().unwrap_or("J/unit")
                    )
                }),
            ),
            (
                "Note",
                e["message"]
                    .as_str()
                    .filter(|s| !s.is_empty())
                    .map(String::from),
            ),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| json!([k, v])))
        .collect()
    } else {
        Vec::new()
    };
    let times_chart = (!rec.times.is_empty()).then(|| svg::histogram(&rec.times, rec.median_s));
    let pci = e["pci_bus_id"].as_str().unwrap_or("");
    let source = e["source"].as_str().unwrap_or("");
    let readings: Vec<PowerReading> = rec
        .power
        .iter()
        .filter(|p| {
            (source.is_empty() || p.source == source) && (pci.is_empty() || p.pci_bus_id == pci)
        })
        .filter_map(|p| {
            Some(PowerReading {
                monotonic_ns: p.monotonic_ns,
                watts: p.reading.watts?,
            })
        })
        .collect();
    let window = match (e["window_begin_ns"].as_u64(), e["window_end_ns"].as_u64()) {
        (Some(a), Some(b)) if b > a => Some((a, b)),
        _ => None,
    };
    let power_chart = (!readings.is_empty()).then(|| {
        svg::power_chart(
            &readings,
            window,
            e["idle_watts"].as_f64().filter(|w| *w > 0.0),
        )
    });
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
    let json_fields: Vec<Value> = [
        ("Validation", &rec.validation),
        ("Tuned configuration", &rec.config),
        ("Fingerprint", &rec.fingerprint),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_null() && v.as_object().is_none_or(|o| !o.is_empty()))
    .map(|(k, v)| json!([k, pretty(v)]))
    .collect();
    let status_class = rec.status.clone();
    let m = base(
        links,
        store,
        &format!(
            "Result #{id}: {} on {}",
            rec.kernel,
            row.device_name.clone().unwrap_or(rec.device_id.clone())
        ),
        "run",
    )?;
    Ok(page(
        "run.html",
        m,
        json!({
            "status": rec.status, "status_class": status_class, "message": rec.message, "fields": fields,
            "energy": energy, "times_chart": times_chart, "power_chart": power_chart,
            "json_fields": json_fields, "stderr_tail": rec.stderr_tail,
        }),
    ))
}

/// `/campaigns`.
pub fn campaigns(store: &Store, links: &Links, scope: &Scope) -> Result<Page, WebError> {
    let rows: Vec<Value> = store
        .campaigns()?
        .into_iter()
        .rev()
        .filter(|c| scope.campaign.is_none_or(|id| id == c.id) && scope.since.is_none_or(|t| c.created_at >= t))
        .map(|c| {
            let finished = c.jobs.total() - c.jobs.get(crate::store::JobState::Queued) - c.jobs.get(crate::store::JobState::Running);
            json!({
                "id": c.id, "href": links.campaign(c.id), "suite": c.suite, "state": c.state.name(),
                "created": fmt_time(c.created_at), "total": c.jobs.total(), "finished": finished,
                "done": c.jobs.get(crate::store::JobState::Done), "failed": c.jobs.get(crate::store::JobState::Failed),
                "results": c.results.values().sum::<i64>(),
            })
        })
        .collect();
    let m = base(links, store, "Campaigns", "campaigns")?;
    Ok(page("campaigns.html", m, json!({ "campaigns": rows })))
}

/// `/campaigns/{id}`; refreshes every 5 s on the serve while the campaign runs.
pub fn campaign(store: &Store, links: &Links, id: i64) -> Result<Page, WebError> {
    let c = store
        .campaign(id)?
        .ok_or_else(|| WebError::NotFound(format!("no campaign {id}")))?;
    let jobs = store.jobs(id)?;
    let results: HashMap<String, (i64, String)> = store
        .results(&ResultFilter {
            campaign_id: Some(id),
            ..Default::default()
        })?
        .into_iter()
        .map(|r| (r.record.run_id.clone(), (r.id, r.record.status.clone())))
        .collect();
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
    let finished = c.jobs.total()
        - c.jobs.get(crate::store::JobState::Queued)
        - c.jobs.get(crate::store::JobState::Running);
    let mut m = base(links, store, &format!("Campaign #{id}"), "campaigns")?;
    if !c.state.is_terminal() && !links.is_static() {
        m.insert("refresh".into(), json!(5));
    }
    Ok(page(
        "campaign.html",
        m,
        json!({"state": c.state.name(), "suite": c.suite, "created": fmt_time(c.created_at), "total": c.jobs.total(), "finished": finished, "jobs": jobs}),
    ))
}
