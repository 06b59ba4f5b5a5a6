//! A run's energy: the power channel chosen at plan time, the wait for the
//! trace to pass the kernel window, the idle baseline (measured, or
//! remembered per channel when runs follow each other), and the figures
//! integrated over the window. Used by the run core ([`crate::run`]); the
//! sampler and the integration it builds on are [`super::sampler`] and
//! [`super::energy`].

use super::energy::{self, Point};
use super::sampler::Sampler;
use super::wire::sample_pb;
use crate::error::AgentError;
use gpufleet_kernels::{MetricKind, Problem};
use gpufleet_proto::v1 as pb;
use std::time::Duration;

/// How far before the worker starts the idle baseline reaches.
pub const IDLE_WINDOW: Duration = Duration::from_secs(2);

/// A run must start this long after the previous run on its device ended for
/// the idle window before it to count as idle.
pub const SETTLE: Duration = Duration::from_millis(500);

/// How long a clean idle baseline may be reused for runs that follow others
/// back to back.
pub const IDLE_REUSE: Duration = Duration::from_secs(600);

/// Per channel: the end of the last run, and the last clean idle baseline
/// (watts, when it was measured), both on the monotonic clock.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct IdleMemo {
    pub busy_until_ns: u64,
    pub clean: Option<(f64, u64)>,
}

/// The idle baseline of a run whose idle window is `[from_ns, to_ns)`:
/// measured when the device was idle through the window (and remembered),
/// else the last clean one if recent, else none; with a note when it is not
/// this run's own.
pub fn idle_baseline(
    memo: &mut IdleMemo,
    measured: Option<f64>,
    from_ns: u64,
    to_ns: u64,
) -> (Option<f64>, Option<String>) {
    let clean = memo.busy_until_ns == 0 || from_ns >= memo.busy_until_ns + SETTLE.as_nanos() as u64;
    if clean {
        if let Some(v) = measured {
            memo.clean = Some((v, to_ns));
        }
        return (measured, None);
    }
    match memo.clean {
        Some((v, at)) if to_ns.saturating_sub(at) < IDLE_REUSE.as_nanos() as u64 => (
            Some(v),
            Some(format!(
                "idle baseline from {:.0} s earlier: the device was busy just before this run",
                to_ns.saturating_sub(at) as f64 * 1e-9
            )),
        ),
        _ => (
            None,
            Some("idle baseline not measured: the device was busy just before this run".into()),
        ),
    }
}

/// The power channel a run will be measured on, decided at plan time.
#[derive(Debug, Clone, PartialEq)]
pub struct RunPower {
    pub channel: usize,
    pub source: &'static str,
    /// Update period assumed for the sensor.
    pub period: Duration,
    /// Minimum kernel window asked of the worker (0: none).
    pub window_s: f64,
    pub power_cap_w: f64,
}

/// Chooses the channel for a device (by PCI bus id; `host_cpu` for the cpu
/// backend, measured on the host's package channel) and the kernel window a
/// run on it needs, from the spec's `power_window_s` (0: enough sensor
/// periods; negative: no power run).
///
/// # Errors
/// `power_window_s` outside its bounds.
pub fn plan_power(
    sampler: &Sampler,
    device_pci_bus_id: &str,
    host_cpu: bool,
    power_window_s: f64,
    timeout_s: f64,
) -> Result<Option<RunPower>, AgentError> {
    let w = power_window_s;
    if !w.is_finite() || w > 3600.0 || (w > 0.0 && w >= timeout_s) {
        return Err(AgentError::InvalidArgument {
            field: "power_window_s",
            message: format!(
                "{w} must be at most 3600 s and shorter than the run's timeout ({timeout_s} s)"
            ),
        });
    }
    let Some(channel) = sampler.channel_for(device_pci_bus_id, host_cpu) else {
        return Ok(None);
    };
    let period = sampler.effective_period(channel);
    let window_s = if w < 0.0 {
        0.0
    } else if w == 0.0 {
        energy::required_window_s(period.as_secs_f64()).min(timeout_s / 2.0)
    } else {
        w
    };
    let c = &sampler.channels()[channel];
    Ok(Some(RunPower {
        channel,
        source: c.source,
        period,
        window_s,
        power_cap_w: c.channel.power_cap_w.unwrap_or(0.0),
    }))
}

/// Everything needed to compute a run's energy once its worker ended.
pub struct Window {
    /// Monotonic time the worker was started (end of the idle baseline).
    pub worker_start_ns: u64,
    pub begin_ns: u64,
    pub end_ns: u64,
    /// Kernel executions inside the window.
    pub iterations: u64,
    pub power_iterations: u64,
}

/// Whether `s` closes a window ending at `end_ns`: at or after the end, and with an energy
/// reading when the channel has a counter (read less often than the watts).
fn closes_window(s: &super::sampler::Sample, end_ns: u64, counter: bool) -> bool {
    s.monotonic_ns >= end_ns && (!counter || s.reading.energy_j.is_some())
}

/// Waits until the sampler has a sample at or after `end_ns` of `channel`
/// (so the window's end can be interpolated) — one with an energy reading
/// when the channel has a counter, which may be read less often — at most
/// `limit`.
pub async fn wait_for_sample_after(
    sampler: &Sampler,
    channel: usize,
    end_ns: u64,
    limit: Duration,
) {
    let deadline = tokio::time::Instant::now() + limit;
    let counter = sampler.channels()[channel].channel.energy_counter;
    while tokio::time::Instant::now() < deadline {
        if sampler
            .trace(channel, end_ns, u64::MAX)
            .iter()
            .any(|s| closes_window(s, end_ns, counter))
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The run's trace (idle baseline to the first sample past the window) and
/// its energy figures; `metric` is the run's metric value (0 when none), for
/// the per-watt figure.
pub fn energy(
    sampler: &Sampler,
    idle_memo: &std::sync::Mutex<std::collections::HashMap<usize, IdleMemo>>,
    problem: &Problem,
    power: &RunPower,
    w: &Window,
    metric: f64,
) -> (Vec<pb::PowerSample>, Option<pb::Energy>) {
    let idle_from = w
        .worker_start_ns
        .saturating_sub(IDLE_WINDOW.as_nanos() as u64);
    let all = sampler.trace(power.channel, idle_from, u64::MAX);
    // Keep the trace up to the first sample past the window's end (with an
    // energy reading, when the channel has a counter).
    let counter = sampler.channels()[power.channel].channel.energy_counter;
    let cut = all
        .iter()
        .position(|s| closes_window(s, w.end_ns, counter))
        .map_or(all.len(), |i| i + 1);
    let trace = &all[..cut];
    let wire: Vec<pb::PowerSample> = trace.iter().map(|s| sample_pb(sampler, s)).collect();
    let points: Vec<Point> = trace
        .iter()
        .map(|s| Point {
            t_ns: s.monotonic_ns,
            watts: s.reading.watts,
            energy_j: s.reading.energy_j,
        })
        .collect();
    let c = &sampler.channels()[power.channel];
    let mut e = pb::Energy {
        source: power.source.to_string(),
        scope: c.channel.scope.name().to_string(),
        pci_bus_id: c.channel.pci_bus_id.clone(),
        sensor_period_s: power.period.as_secs_f64(),
        power_run: w.power_iterations > 0,
        iterations: w.iterations,
        ..Default::default()
    };
    let Some(f) = energy::integrate(&points, w.begin_ns, w.end_ns) else {
        e.message = format!(
            "no readings from {} in the kernel window ({} samples since the idle baseline)",
            power.source,
            trace.len()
        );
        return (wire, Some(e));
    };
    let measured = energy::idle_watts(&points, idle_from, w.worker_start_ns);
    let (idle, note) = {
        let mut memo = idle_memo.lock().unwrap_or_else(|p| p.into_inner());
        idle_baseline(
            memo.entry(power.channel).or_default(),
            measured,
            idle_from,
            w.worker_start_ns,
        )
    };

    e.joules = f.joules;
    e.method = f.method.name().to_string();
    e.counter_joules = f.counter_j.unwrap_or(0.0);
    e.integrated_joules = f.integrated_j.unwrap_or(0.0);
    e.avg_watts = f.avg_watts;
    e.peak_watts = f.peak_watts;
    e.idle_watts = idle.unwrap_or(0.0);
    e.dynamic_joules = idle.map_or(0.0, |i| (f.joules - i * f.window_s).max(0.0));
    e.window_s = f.window_s;
    e.samples = f.samples as u32;
    if w.iterations > 0 {
        e.joules_per_iteration = f.joules / w.iterations as f64;
    }
    match problem.kernel.metric {
        MetricKind::Gflops => {
            e.metric_per_watt_unit = "GFLOP/s/W".into();
            e.joules_per_unit_unit = "J/GFLOP".into();
            if problem.flops() > 0.0 {
                e.joules_per_unit = e.joules_per_iteration / (problem.flops() / 1e9);
            }
        }
        MetricKind::Gbps => {
            e.metric_per_watt_unit = "GB/s/W".into();
            e.joules_per_unit_unit = "J/GB".into();
            if problem.bytes() > 0.0 {
                e.joules_per_unit = e.joules_per_iteration / (problem.bytes() / 1e9);
            }
        }
        MetricKind::ImagesPerS => {
            e.metric_per_watt_unit = "img/J".into();
            e.joules_per_unit_unit = "J/img".into();
            let images = problem.params.get("batch").copied().unwrap_or(0);
            if images > 0 {
                e.joules_per_unit = e.joules_per_iteration / images as f64;
            }
        }
        MetricKind::TokensPerS => {
            e.metric_per_watt_unit = "tok/J".into();
            e.joules_per_unit_unit = "J/tok".into();
            if problem.tokens() > 0.0 {
                e.joules_per_unit = e.joules_per_iteration / problem.tokens();
            }
        }
        MetricKind::Micros | MetricKind::NsPerHop => {}
    }
    if !e.metric_per_watt_unit.is_empty() && f.avg_watts > 0.0 {
        e.metric_per_watt = metric / f.avg_watts;
    }
    let mut notes = Vec::new();
    if w.power_iterations > 0 {
        notes.push(format!(
            "power run: the kernel was repeated {} times past the timed iterations so the window covers {:.2} s ({} sensor periods of {:.3} s)",
            w.power_iterations,
            f.window_s,
            (f.window_s / power.period.as_secs_f64()).floor(),
            power.period.as_secs_f64()
        ));
    } else if f.window_s < energy::required_window_s(power.period.as_secs_f64()) {
        notes.push(format!(
            "the window ({:.3} s) is shorter than four sensor periods ({:.3} s each); the energy figure is rough",
            f.window_s,
            power.period.as_secs_f64()
        ));
    }
    if !f.covered {
        notes.push(
            "the power trace did not reach both edges of the window; the nearest reading was held"
                .into(),
        );
    }
    match note {
        Some(note) => notes.push(note),
        None if idle.is_none() => {
            notes.push("no readings before the run: idle power unknown".into());
        }
        None => {}
    }
    e.message = notes.join("; ");
    (wire, Some(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn idle_is_measured_only_when_the_device_was_idle_and_reused_after() {
        let mut m = IdleMemo::default();
        // First run: nothing ran before; measured and remembered.
        assert_eq!(
            idle_baseline(&mut m, Some(72.0), 10 * S, 12 * S),
            (Some(72.0), None)
        );
        // It ran until 20 s; the next run starts at 20.4 s: its window saw the tail.
        m.busy_until_ns = 20 * S;
        let (idle, note) = idle_baseline(
            &mut m,
            Some(540.0),
            18 * S + 4 * S / 10,
            20 * S + 4 * S / 10,
        );
        assert_eq!(idle, Some(72.0));
        assert!(note.unwrap().contains("busy just before"));
        // A run that starts well after the last one ended measures again.
        let (idle, note) = idle_baseline(&mut m, Some(75.0), 21 * S, 23 * S);
        assert_eq!((idle, note), (Some(75.0), None));
        assert_eq!(m.clean, Some((75.0, 23 * S)));
        // Too old to reuse: no baseline, said so.
        m.busy_until_ns = 2000 * S;
        let (idle, note) = idle_baseline(&mut m, Some(500.0), 1999 * S, 2001 * S);
        assert_eq!(idle, None);
        assert!(note.unwrap().contains("not measured"));
    }
}
