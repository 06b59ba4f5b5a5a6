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
        writeln!(out, "channels:")?;
        for c in &channels {
            writeln!(out, "{}", channel_text(c))?;
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

/// One channel's summary for people: source, what it covers, samples and update period.
fn channel_text(c: &serde_json::Value) -> String {
    let text = |k: &str| c[k].as_str().unwrap_or("").to_string();
    let target = match text("pci_bus_id") {
        t if t.is_empty() => "host".to_string(),
        t => t,
    };
    let ms = |k: &str| c[k].as_f64().map(|s| format!("{:.0} ms", s * 1e3));
    let mut line = format!(
        "  {:<13} {:<13} {:<8} {:>6} samples, update period {} (nominal {})",
        text("source"),
        target,
        text("scope"),
        c["samples"].as_u64().unwrap_or(0),
        ms("measured_period_s").unwrap_or_else(|| "not measured".into()),
        ms("nominal_period_s").unwrap_or_else(|| "-".into()),
    );
    if c["energy_counter"].as_bool() == Some(true) {
        line.push_str(", energy counter");
    }
    if let Some(label) = Some(text("label")).filter(|l| !l.is_empty()) {
        line.push_str(&format!(", {label}"));
    }
    if c["stopped"].as_bool() == Some(true) {
        line.push_str(", stopped");
    }
    if let Some(e) = c["last_error"].as_str() {
        line.push_str(&format!(", last error: {e}"));
    }
    line
}

#[cfg(test)]
mod text_tests {
    use super::*;

    #[test]
    fn a_channel_reads_as_text_not_json() {
        let c = serde_json::json!({
            "source": "amdgpu-hwmon", "pci_bus_id": "0000:03:00.0", "scope": "asic",
            "label": "PPT", "energy_counter": false, "samples": 42,
            "measured_period_s": 0.05, "nominal_period_s": 0.05,
            "last_error": null, "stopped": false,
        });
        let t = channel_text(&c);
        assert_eq!(
            t,
            "  amdgpu-hwmon  0000:03:00.0  asic         42 samples, update period 50 ms (nominal 50 ms), PPT"
        );
        assert!(!t.contains('{'));
        let host = serde_json::json!({"source": "rapl", "pci_bus_id": "", "scope": "package",
            "samples": 0, "measured_period_s": null, "nominal_period_s": 0.001,
            "energy_counter": true, "last_error": "permission denied", "stopped": true});
        let t = channel_text(&host);
        assert!(t.contains("rapl          host"), "{t}");
        assert!(t.contains("update period not measured (nominal 1 ms), energy counter, stopped, last error: permission denied"), "{t}");
    }
}
