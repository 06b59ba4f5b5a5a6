//! Prometheus metrics of the agent (`gpufleet-agent --metrics-listen ADDR`, `GET /metrics` in the
//! text format): the latest power, temperature and clock of every power channel, runs by status,
//! worker crashes, and the queue depth per device. Counters are process-wide; gauges are read from
//! the sampler and the queues at each scrape. The counts are the run core's
//! ([`crate::run::counters`]): this exporter reads the run core, never the other way round.

use crate::run::{AgentCore, counters};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChannelLabels {
    source: String,
    scope: String,
    pci_bus_id: String,
    label: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeviceLabels {
    device: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// The metrics text of `core` now.
pub fn render(core: &AgentCore) -> String {
    let mut registry = Registry::with_prefix("gpufleet_agent");
    let runs = Family::<StatusLabels, Counter>::default();
    for (status, n) in counters::runs_by_status() {
        runs.get_or_create(&StatusLabels {
            status: status.to_string(),
        })
        .inc_by(n);
    }
    registry.register("runs", "Runs finished, by status", runs);
    let crashes = Counter::<u64>::default();
    crashes.inc_by(counters::worker_crashes());
    registry.register(
        "worker_crashes",
        "Runs whose worker crashed or was killed by the watchdog",
        crashes,
    );
    let watts = Family::<ChannelLabels, FloatGauge>::default();
    let temperature = Family::<ChannelLabels, FloatGauge>::default();
    let sclk = Family::<ChannelLabels, FloatGauge>::default();
    let samples = Family::<ChannelLabels, FloatGauge>::default();
    let sampler = &core.power.sampler;
    for (i, ch) in sampler.channels().iter().enumerate() {
        let labels = ChannelLabels {
            source: ch.source.to_string(),
            scope: ch.channel.scope.name().to_string(),
            pci_bus_id: ch.channel.pci_bus_id.clone(),
            label: ch.channel.label.clone(),
        };
        samples
            .get_or_create(&labels)
            .set(sampler.status(i).samples as f64);
        let Some(last) = sampler.trace(i, 0, u64::MAX).pop() else {
            continue;
        };
        let r = &last.reading;
        if let Some(w) = r.watts {
            watts.get_or_create(&labels).set(w);
        }
        if let Some(t) = r.temperature_c {
            temperature.get_or_create(&labels).set(t);
        }
        if let Some(f) = r.sclk_mhz {
            sclk.get_or_create(&labels).set(f64::from(f));
        }
    }
    registry.register(
        "power_watts",
        "Latest power reading per sensor channel",
        watts,
    );
    registry.register(
        "temperature_celsius",
        "Latest temperature per sensor channel",
        temperature,
    );
    registry.register("sclk_mhz", "Latest shader clock per sensor channel", sclk);
    registry.register(
        "power_samples",
        "Samples the sampler took per channel",
        samples,
    );
    let depth = Family::<DeviceLabels, Gauge>::default();
    // Every device from zero; the queues exist once a run came.
    for b in &core.inventory.backends {
        for d in &b.devices {
            let _ = depth.get_or_create(&DeviceLabels {
                device: crate::run::queue::queue_key(d),
            });
        }
    }
    for (device, waiting) in core.queues.depths() {
        depth
            .get_or_create(&DeviceLabels { device })
            .set(i64::try_from(waiting).unwrap_or(i64::MAX));
    }
    registry.register("queue_depth", "Runs waiting per device", depth);
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

/// Serves `GET /metrics` on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, core: Arc<AgentCore>) {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let core = core.clone();
            async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    render(&core),
                )
            }
        }),
    );
    if let Err(e) = axum::serve(listener, app).await {
        tracing::warn!(error = %e, "metrics listener stopped");
    }
}
