//! `/agents/{name}`: one agent, with each power channel's latest figures and its watts over the
//! last minutes, as the serve's [`LivePower`](crate::live::LivePower) holds them. The page is
//! complete without JavaScript (the last values when it was drawn); with it, the figures follow
//! the agent's live stream (`/api/agents/{name}/power`, server-sent events) and the charts are
//! redrawn every few seconds. The runs the agent has in progress are listed above the channels:
//! their power is the live trace of their device's channel (the stored trace of a run comes with
//! its result).

use super::fleet::{agent_state, host_text, last_seen};
use super::{base, page};
use crate::store::Store;
use crate::time::fmt_timestamp;
use crate::web::links::Links;
use crate::web::page::{Page, WebError};
use crate::web::svg::{PowerReading, power_chart};
use gpufleet_proto::power::PowerPoint;
use gpufleet_proto::v1 as pb;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// What the serve knows live of one agent, taken before the page is built.
#[derive(Debug, Clone, Default)]
pub struct LiveView {
    /// Whether the serve follows the agent now.
    pub connected: bool,
    /// The latest sample of each channel.
    pub latest: Vec<pb::PowerSample>,
    /// Each channel's watts over the last minutes.
    pub history: BTreeMap<crate::live::Key, Vec<(u64, f64)>>,
}

impl LiveView {
    /// What `live` holds of `agent`.
    pub fn of(live: &crate::live::LivePower, agent: &str) -> LiveView {
        LiveView {
            connected: live.connected(agent),
            latest: live.latest(agent),
            history: live.history(agent),
        }
    }
}

/// The key a channel's row and chart carry for the page's script: source, PCI bus id and label.
fn channel_key(s: &pb::PowerSample) -> String {
    format!("{}|{}|{}", s.source, s.pci_bus_id, s.label)
}

/// `/agents/{name}`.
///
/// # Errors
/// [`WebError::NotFound`] for an agent that is not registered.
pub fn agent(store: &Store, links: &Links, name: &str, live: &LiveView) -> Result<Page, WebError> {
    let Some(a) = store.agent(name)? else {
        return Err(WebError::NotFound(format!(
            "no agent {}",
            crate::web::page::clip(name)
        )));
    };
    let info: Value = store
        .agent_info(a.id)?
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    let now = crate::time::now();
    let (state, class) = agent_state(&a, now);
    let devices = store.devices()?;
    let mine: Vec<_> = devices.iter().filter(|d| d.agent_id == a.id).collect();
    // A channel's device: the agent's devices on its PCI address, or the host.
    let device_of = |pci: &str| -> Value {
        if pci.is_empty() {
            return json!({"name": "host", "href": null});
        }
        match mine.iter().find(|d| d.pci_bus_id.eq_ignore_ascii_case(pci)) {
            Some(d) => {
                json!({"name": format!("{} ({pci})", d.name), "href": links.device(&a.name, &d.device_id)})
            }
            None => json!({"name": pci, "href": null}),
        }
    };
    let channels: Vec<Value> = live
        .latest
        .iter()
        .map(|s| {
            let p = PowerPoint::from(s);
            let [watts, temp, sclk, mclk, busy] = p.reading.text_cells();
            let readings: Vec<PowerReading> = live
                .history
                .get(&crate::live::key(s))
                .map(|h| {
                    h.iter()
                        .map(|&(monotonic_ns, watts)| PowerReading {
                            monotonic_ns,
                            watts,
                        })
                        .collect()
                })
                .unwrap_or_default();
            json!({
                "key": channel_key(s), "source": s.source, "scope": s.scope, "label": s.label,
                "device": device_of(&s.pci_bus_id),
                "watts": watts, "temp": temp, "sclk": sclk, "mclk": mclk, "busy": busy,
                "at": fmt_timestamp(p.wall_unix_s),
                "chart": power_chart(
                    &readings,
                    None,
                    None,
                    "seconds from the oldest sample held; the newest, at the right, is the latest",
                ),
                "span": match (readings.first(), readings.last()) {
                    (Some(a), Some(b)) if readings.len() > 1 => format!(
                        "watts over the last {:.0} s",
                        (b.monotonic_ns - a.monotonic_ns) as f64 / 1e9
                    ),
                    _ => "watts: the chart fills in a point a second".to_string(),
                },
            })
        })
        .collect();
    let described: Vec<Value> = info["power_sources"]
        .as_array()
        .map(|v| {
            v.iter()
                .map(|p| {
                    json!({"name": p["name"], "available": p["available"].as_bool().unwrap_or(false),
                           "reason": p["reason"], "pci": p["pci_bus_id"], "label": p["label"]})
                })
                .collect()
        })
        .unwrap_or_default();
    let running: Vec<Value> = store
        .running_jobs(a.id)?
        .iter()
        .map(|j| {
            let device = j.spec["device_id"].as_str().unwrap_or("").to_string();
            json!({
                "spec": j.spec_key, "device": device, "campaign": j.campaign_id,
                "campaign_href": links.campaign(j.campaign_id),
                "since": fmt_timestamp(j.updated_at),
            })
        })
        .collect();
    let host_text = host_text(&info);
    let m = base(links, store, &format!("Agent {}", a.name), "fleet")?;
    Ok(page(
        "agent.html",
        m,
        json!({
            "agent": {
                "name": a.name, "kind": a.kind.name(), "state": state, "state_class": class,
                "host": host_text, "last_seen": last_seen(&a, &devices, now),
                "version": a.agent_version,
                "fleet_href": format!("{}#agent-{}", links.fleet_page(super::fleet::page_of(store, &a.name)?), a.name),
            },
            "live": {
                "connected": live.connected,
                "stream": links.agent_power_stream(&a.name),
                "channels": channels,
            },
            "sources": described,
            "running": running,
            "devices": mine.iter().map(|d| json!({"name": d.name, "id": d.device_id, "href": links.device(&a.name, &d.device_id)})).collect::<Vec<_>>(),
        }),
    ))
}
