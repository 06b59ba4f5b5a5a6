//! `GET /metrics` of `gpufleet serve`: Prometheus text format. Agents (by kind, and dial-in agents
//! attached now), campaigns by state, results by status and open alerts are read from the store at
//! each scrape, and so is each sibling group of the latest done campaign (`group_devices`,
//! `group_outliers`, judged once per campaign); request latencies per route are a histogram kept since the serve started. The
//! latest power, temperature and clocks of every connected agent's channels come from
//! [`crate::live::LivePower`] (kept fresh by `--power-metrics-hz`), labelled by agent, device,
//! source and channel; a channel not heard from for [`crate::live::STALE`] and every channel of a
//! disconnected agent are left out, so a gauge disappears rather than freezes.

use crate::schedule::Daemon;
use axum::extract::{MatchedPath, State};
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::OnceLock;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: String,
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChannelLabels {
    agent: String,
    /// The PCI bus id, or `host` for a host-level sensor.
    device: String,
    source: String,
    channel: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Label {
    value: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupLabels {
    group: String,
}

/// The most sibling groups `/metrics` reports (the largest first).
const MAX_GROUPS: usize = 200;

/// Each sibling group of the latest `done` campaign with results: (group, devices, outliers).
/// Judged once per campaign and kept: a scrape every 15 s must not read a fleet's night each time.
fn group_gauges(
    st: &crate::store::Store,
    campaigns: &[crate::store::CampaignRow],
) -> Result<Vec<(String, i64, i64)>, crate::store::StoreError> {
    type Cached = Option<(i64, Vec<(String, i64, i64)>)>;
    static CACHE: OnceLock<std::sync::Mutex<Cached>> = OnceLock::new();
    let done = campaigns
        .iter()
        .filter(|c| c.state == crate::store::CampaignState::Done);
    let Some(latest) = crate::outliers::collect::latest_with_results(done) else {
        return Ok(Vec::new());
    };
    let cache = CACHE.get_or_init(Default::default);
    if let Some((id, groups)) = &*cache.lock().unwrap_or_else(|p| p.into_inner())
        && *id == latest.id
    {
        return Ok(groups.clone());
    }
    let cfg = crate::outliers::OutlierConfig::DEFAULT;
    let mut reports = crate::outliers::collect::campaign_outliers(st, latest.id, &cfg)?;
    reports.sort_by_key(|g| std::cmp::Reverse(g.devices));
    let groups: Vec<(String, i64, i64)> = reports
        .iter()
        .take(MAX_GROUPS)
        .map(|g| {
            (
                g.key.to_string(),
                g.devices as i64,
                g.outliers().count() as i64,
            )
        })
        .collect();
    *cache.lock().unwrap_or_else(|p| p.into_inner()) = Some((latest.id, groups.clone()));
    Ok(groups)
}

type Latency = Family<RouteLabels, Histogram, fn() -> Histogram>;

fn latency() -> &'static Latency {
    static L: OnceLock<Latency> = OnceLock::new();
    // 0.5 ms to about 8 s.
    L.get_or_init(|| {
        Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.0005, 2.0, 15)))
    })
}

/// Middleware: times every request by its route template (never the raw path, so the label set
/// stays small whatever clients send).
pub async fn track(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = req.method().to_string();
    let start = std::time::Instant::now();
    let res = next.run(req).await;
    latency()
        .get_or_create(&RouteLabels { method, route })
        .observe(start.elapsed().as_secs_f64());
    res
}

fn gauge_family(pairs: impl IntoIterator<Item = (String, i64)>) -> Family<Label, Gauge> {
    let f = Family::<Label, Gauge>::default();
    for (value, n) in pairs {
        f.get_or_create(&Label { value }).set(n);
    }
    f
}

/// `GET /metrics`.
pub async fn metrics(State(s): State<Daemon>) -> Response {
    let now = crate::time::now();
    let read = s
        .db()
        .call(move |st| -> Result<_, crate::store::StoreError> {
            let agents = st.agents()?;
            let campaigns = st.campaigns()?;
            let results = st.result_status_counts()?;
            let open = st.alert_count(true)?;
            let groups = group_gauges(st, &campaigns)?;
            Ok((agents, campaigns, results, open, groups))
        })
        .await;
    let (agents, campaigns, results, open, groups) = match read {
        Ok(v) => v,
        Err(e) => {
            return (
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                format!("# store: {e}\n"),
            )
                .into_response();
        }
    };
    let mut registry = Registry::with_prefix("gpufleet");
    let mut by_kind = std::collections::BTreeMap::<String, i64>::new();
    for a in &agents {
        *by_kind.entry(a.kind.name().to_string()).or_default() += 1;
    }
    registry.register(
        "agents",
        "Registered agents by kind (label value)",
        gauge_family(by_kind),
    );
    let connected = Gauge::<i64>::default();
    connected.set(
        agents
            .iter()
            .filter(|a| crate::fleet::attachment::attached(a, now))
            .count() as i64,
    );
    registry.register(
        "agents_connected",
        "Dial-in agents attached to a serve now",
        connected,
    );
    let mut by_state = std::collections::BTreeMap::<String, i64>::new();
    for c in &campaigns {
        *by_state.entry(c.state.name().to_string()).or_default() += 1;
    }
    registry.register(
        "campaigns",
        "Campaigns by state (label value)",
        gauge_family(by_state),
    );
    registry.register(
        "results",
        "Stored results by status (label value)",
        gauge_family(results),
    );
    let alerts = Gauge::<i64>::default();
    alerts.set(open);
    registry.register(
        "alerts_open",
        "Confirmed regressions and improvements not acknowledged",
        alerts,
    );
    let group = |i: usize| {
        let f = Family::<GroupLabels, Gauge>::default();
        for g in &groups {
            let n = if i == 0 { g.1 } else { g.2 };
            f.get_or_create(&GroupLabels { group: g.0.clone() }).set(n);
        }
        f
    };
    registry.register(
        "group_devices",
        "Devices of each sibling group (model, backend, driver, memory) in the latest done campaign",
        group(0),
    );
    registry.register(
        "group_outliers",
        "Outliers of each sibling group in the latest done campaign (see gpufleet outliers)",
        group(1),
    );
    registry.register(
        "http_request_duration_seconds",
        "Time to answer HTTP requests, by route",
        latency().clone(),
    );
    register_power(&mut registry, s.live());
    let mut out = String::new();
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        out,
    )
        .into_response()
}

type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

/// The power gauges: one family per figure, a series per channel that reported it.
fn register_power(registry: &mut Registry, live: &crate::live::LivePower) {
    use gpufleet_proto::power::Reading;
    type Figure = fn(&Reading) -> Option<f64>;
    let figures: [(&str, &str, Figure); 5] = [
        (
            "power_watts",
            "Latest power of each connected agent's channels, watts",
            |r| r.watts,
        ),
        (
            "power_temperature_celsius",
            "Latest temperature of each channel, degrees Celsius",
            |r| r.temperature_c,
        ),
        (
            "power_sclk_mhz",
            "Latest shader (core) clock of each channel, MHz",
            |r| r.sclk_mhz.map(f64::from),
        ),
        (
            "power_mclk_mhz",
            "Latest memory clock of each channel, MHz",
            |r| r.mclk_mhz.map(f64::from),
        ),
        (
            "power_utilization_percent",
            "Latest busy percentage of each channel",
            |r| r.utilization_pct,
        ),
    ];
    let latest = live.all_latest();
    for (name, help, figure) in figures {
        let family = Family::<ChannelLabels, FloatGauge>::default();
        for (agent, samples) in &latest {
            for s in samples {
                let Some(v) = figure(&Reading::from_wire(s)) else {
                    continue;
                };
                let labels = ChannelLabels {
                    agent: agent.clone(),
                    device: if s.pci_bus_id.is_empty() {
                        "host".to_string()
                    } else {
                        s.pci_bus_id.clone()
                    },
                    source: s.source.clone(),
                    channel: s.label.clone(),
                };
                family.get_or_create(&labels).set(v);
            }
        }
        registry.register(name, help, family);
    }
    let counts = live.counts();
    let watchers = Gauge::<i64>::default();
    watchers.set(counts.watchers as i64);
    registry.register(
        "power_watchers",
        "Live power streams open on this serve",
        watchers,
    );
    let dropped = prometheus_client::metrics::counter::Counter::<u64>::default();
    dropped.inc_by(counts.dropped);
    registry.register(
        "power_watch_dropped",
        "Live samples dropped because a watcher's buffer was full",
        dropped,
    );
}
