//! `gpufleet-agent power`: reads the sensors for a while without serving and
//! reports each channel with its measured update period, the readings, and
//! what the sampler cost in CPU time.

use super::PowerConfig;
use super::state::PowerState;
use crate::isolation::monotonic_ns;
use std::io::{self, Write};
use std::time::Duration;

/// Samples every source for `seconds` and writes the report to `out`: as
/// text, one line per channel per second at most while sampling, then each
/// channel's status and the sampler's cost; or one JSON object at the end.
///
/// # Errors
/// Writing to `out`.
pub async fn report(
    config: &PowerConfig,
    seconds: f64,
    json: bool,
    out: &mut dyn Write,
) -> io::Result<()> {
    let state = PowerState::start(config).await;
    let sampler = &state.sampler;
    if !json {
        for u in &state.unavailable {
            writeln!(out, "{:<13} unavailable: {}", u.name, u.reason)?;
        }
        if sampler.channels().is_empty() {
            writeln!(out, "no power channel to sample")?;
        }
    }
    let start = monotonic_ns();
    let mut feed = sampler.subscribe();
    let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(seconds);
    let mut last_print = 0u64;
    while let Ok(r) = tokio::time::timeout_at(deadline, feed.recv()).await {
        let Ok(s) = r else { continue };
        // One line per channel per second at most.
        if !json && (s.monotonic_ns - last_print > 1_000_000_000 || s.channel > 0) {
            last_print = s.monotonic_ns;
            let c = &sampler.channels()[s.channel];
            let fmt =
                |v: Option<f64>, unit: &str| v.map_or("-".into(), |v| format!("{v:.2} {unit}"));
            writeln!(
                out,
                "{:>8.3} s  {:<13} {:<13} {:>11}  energy {:>12}  temp {:>9}",
                (s.monotonic_ns - start) as f64 * 1e-9,
                c.source,
                if c.channel.pci_bus_id.is_empty() {
                    "host"
                } else {
                    &c.channel.pci_bus_id
                },
                fmt(s.reading.watts, "W"),
                fmt(s.reading.energy_j, "J"),
                fmt(s.reading.temperature_c, "C"),
            )?;
        }
    }
    let cost = sampler.cost();
    let channels: Vec<serde_json::Value> = sampler
        .channels()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let st = sampler.status(i);
            serde_json::json!({
                "source": c.source,
                "pci_bus_id": c.channel.pci_bus_id,
                "scope": c.channel.scope.name(),
                "label": c.channel.label,
                "energy_counter": c.channel.energy_counter,
                "samples": st.samples,
                "measured_period_s": st.measured_period.map(|p| p.as_secs_f64()),
                "nominal_period_s": c.channel.nominal_period.as_secs_f64(),
                "last_error": st.last_error,
                "stopped": st.stopped,
            })
        })
        .collect();
    if json {
        let unavailable: Vec<serde_json::Value> = state
            .unavailable
            .iter()
            .map(|u| serde_json::json!({"source": u.name, "reason": u.reason}))
            .collect();
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "rate_hz": sampler.rate_hz(),
                "seconds": seconds,
                "channels": channels,
                "unavailable": unavailable,
                "sampler_cost": {
                    "ticks": cost.ticks,
                    "cpu_s": cost.cpu_s,
                    "wall_s": cost.wall_s,
                    "cpu_pct_of_one_core": cost.cpu_pct(),
                },
            }))?
        )?;
    } else {
        for c in &channels {
            writeln!(out, "{c}")?;
        }
        writeln!(
            out,
            "sampler: {} ticks at {} Hz in {:.1} s, {:.3} s CPU = {:.3}% of one core",
            cost.ticks,
            sampler.rate_hz(),
            cost.wall_s,
            cost.cpu_s,
            cost.cpu_pct()
        )?;
    }
    Ok(())
}
