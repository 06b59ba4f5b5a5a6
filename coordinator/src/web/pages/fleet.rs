//! `/`: the fleet.

use super::alerts::alert_rows;
use super::{base, page, page_rows};
use crate::fleet::attachment::attached;
use crate::store::{AgentKind, AgentRow, AlertFilter, AlertRow, DeviceRow, Store};
use crate::table::fmt_metric;
use crate::time::fmt_time;
use crate::web::links::Links;
use crate::web::page::{Page, WebError};
use gpufleet_proto::display::pcie_link;
use serde_json::{Value, json};
use std::collections::HashMap;

/// The most open alerts the fleet page lists (the newest); the alerts page has the rest.
pub const FLEET_ALERTS: usize = 20;
/// Agents per page of `/` (by name); a fleet of thousands is pages, with a summary on each.
pub const FLEET_AGENTS: usize = 50;
/// The most offline agents the summary names (the rest are counted).
const OFFLINE_NAMED: usize = 20;

/// The fleet page (from 1) that shows `name`, for links to its section there.
pub fn page_of(store: &Store, name: &str) -> Result<usize, WebError> {
    // Its place in the listing the page shows (the database's order of names).
    let at = store
        .agents()?
        .iter()
        .position(|a| a.name == name)
        .unwrap_or(0);
    Ok(at / FLEET_AGENTS + 1)
}

/// The fleet at a glance: agents by state, and the offline ones by name (the first
/// [`OFFLINE_NAMED`]) with their links.
fn summary(agents: &[AgentRow], links: &Links, now: f64) -> Value {
    let mut by_state = std::collections::BTreeMap::<&str, usize>::new();
    let mut offline = Vec::new();
    for a in agents {
        let (state, _) = agent_state(a, now);
        *by_state.entry(state).or_default() += 1;
        if state == "offline" {
            offline.push(a);
        }
    }
    json!({
        "total": agents.len(),
        "states": by_state.iter().map(|(s, n)| json!({"state": s, "count": n})).collect::<Vec<_>>(),
        "offline": offline.iter().take(OFFLINE_NAMED)
            .map(|a| json!({"name": a.name, "href": links.agent(&a.name)}))
            .collect::<Vec<_>>(),
        "offline_more": offline.len().saturating_sub(OFFLINE_NAMED),
    })
}

/// `12.5 TFLOP/s`: a large figure with its SI prefix.
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

/// The power sensors of a device, or `none`.
fn power_text(sensors: String) -> String {
    if sensors.is_empty() {
        "none".into()
    } else {
        sensors
    }
}

/// An agent's state for people and its CSS class: `online`/`offline` (dial-in), `direct`.
pub(super) fn agent_state(a: &AgentRow, now: f64) -> (&'static str, &'static str) {
    match a.kind {
        AgentKind::DialIn if attached(a, now) => ("online", "online"),
        AgentKind::DialIn => ("offline", "offline"),
        AgentKind::Direct => ("direct", "direct"),
    }
}

/// When an agent was last heard from, for people: a dial-in agent's last message on its link;
/// a direct agent's latest description of its devices (the coordinator hears from it only when it
/// dials it). `None` when never.
pub(super) fn last_seen(a: &AgentRow, devices: &[DeviceRow], now: f64) -> Option<String> {
    match a.kind {
        AgentKind::DialIn => a
            .last_seen
            .map(|t| format!("{} ({} ago)", fmt_time(t), crate::time::ago(now - t))),
        AgentKind::Direct => devices
            .iter()
            .filter(|d| d.agent_id == a.id)
            .map(|d| d.last_seen)
            .reduce(f64::max)
            .map(|t| format!("{} (last described)", fmt_time(t))),
    }
}

/// `host · CPU · OS` from a stored description.
pub(super) fn host_text(info: &Value) -> String {
    let host = &info["host"];
    [&host["hostname"], &host["cpu_model"], &host["os"]]
        .iter()
        .filter_map(|v| v.as_str())
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" · ")
}

/// `/`: the fleet's summary; a page (from 1, [`FLEET_AGENTS`] by name) of agents with their
/// state, backends, devices and latest campaign; the newest open alerts.
pub fn fleet(store: &Store, links: &Links, page_no: Option<usize>) -> Result<Page, WebError> {
    let now = crate::time::now();
    let agents = store.agents()?;
    let (shown, pager) = page_rows(agents.len(), FLEET_AGENTS, page_no, links, |n| {
        links.fleet_page(n)
    })?;
    let devices = store.devices()?;
    let latest = store.latest_campaign_per_agent()?;
    let campaigns: HashMap<i64, _> = store.campaigns()?.into_iter().map(|c| (c.id, c)).collect();
    let mut out = Vec::new();
    for a in &agents[shown] {
        // A description that no longer parses is said on the page, not shown as an empty one.
        let (info, unreadable) = match store.agent_info(a.id)? {
            None => (Value::Null, None),
            Some(text) => match serde_json::from_str::<Value>(&text) {
                Ok(v) => (v, None),
                Err(e) => (
                    Value::Null,
                    Some(format!("stored description unreadable: {e}")),
                ),
            },
        };
        let (state, class) = agent_state(a, now);
        let host = &info["host"];
        let host_text = unreadable.unwrap_or_else(|| host_text(&info));
        let power: Vec<&Value> = info["power_sources"]
            .as_array()
            .map(|v| v.iter().collect())
            .unwrap_or_default();
        let sensor_of = |pci: &str| -> String {
            power
                .iter()
                .filter(|p| p["available"].as_bool() == Some(true))
                // A device's own sensor: on its PCI address; a device without one (the CPU, a
                // software rasterizer) only gets sensors of no PCI address (RAPL), never a card's.
                .filter(|p| {
                    p["pci_bus_id"]
                        .as_str()
                        .unwrap_or("")
                        .eq_ignore_ascii_case(pci)
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
                let platform = |k: &str| host["platform"][k].as_str().map(String::from);
                let kind = d.info["device_type"].as_str().unwrap_or("");
                let (pcie, pcie_warning) =
                    pcie_link(kind, &d.pci_bus_id, platform).unwrap_or_else(|| ("-".into(), None));
                json!({
                    "name": d.name, "id": d.device_id, "backend": d.backend, "vendor": d.vendor,
                    "href": links.device(&a.name, &d.device_id),
                    "arch": d.arch,
                    "peak_flops": flops.map(|v| si(v, "FLOP/s")).unwrap_or_else(|| "-".into()),
                    "peak_bw": bw.map(|v| si(v, "B/s")).unwrap_or_else(|| "-".into()),
                    "power": power_text(sensor_of(&d.pci_bus_id)),
                    "pcie": pcie, "pcie_warning": pcie_warning,
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
        let last_seen = last_seen(a, &devices, now);
        let latest_campaign = latest.get(&a.id).and_then(|id| campaigns.get(id)).map(|c| {
            json!({"id": c.id, "suite": c.suite, "state": c.state.name(), "href": links.campaign(c.id)})
        });
        out.push(json!({
            "name": a.name, "kind": a.kind.name(), "state": state, "state_class": class,
            "href": links.agent(&a.name),
            "host": host_text, "last_seen": last_seen,
            "address": if a.kind == AgentKind::Direct { Some(&a.url) } else { a.remote_addr.as_ref() },
            "version": a.agent_version.clone().or_else(|| info["agent_version"].as_str().map(String::from)),
            "backends": backends, "devices": devs, "latest_campaign": latest_campaign,
        }));
    }
    let alerts: Vec<AlertRow> = store.alerts_where(&AlertFilter {
        open_only: true,
        limit: FLEET_ALERTS,
        ..AlertFilter::default()
    })?;
    let open = store.alert_count(true)?;
    let m = base(links, store, "Fleet", "fleet")?;
    Ok(page(
        "fleet.html",
        m,
        json!({ "agents": out, "summary": summary(&agents, links, now), "pager": pager,
                "alerts": alert_rows(&alerts, links), "with_ack": false,
                "alerts_more": (open as usize).saturating_sub(alerts.len()), "alerts_href": links.alerts() }),
    ))
}
