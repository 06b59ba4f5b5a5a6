//! From a plan and a worker's end to the run's one RunResult: status and
//! message, statistics, the metric and % of peak, validation, fingerprint.
//! Pure apart from reading the clock and the OS kernel version.
//! [`stats`], [`add_metric`] and [`unmeasured`] are also how `gpufleet-agent simulate` shapes its drawn
//! results, so they read like real ones.

use super::plan::Plan;
use crate::backend::DeviceInfo;
use crate::isolation::memory_limit::OutOfMemory;
use crate::isolation::parent::{Ending, WorkerRun, signal_name};
use crate::isolation::protocol::WorkerStatus;
use crate::stats::Summary;
use gpufleet_kernels::{ACHIEVED_GBPS, Dtype, KERNELS_VERSION, MetricKind, Problem};
use gpufleet_proto::v1 as pb;

/// A result with no measurement (unsupported, cancelled while queued, ...).
pub fn bare_result(plan: &Plan, status: pb::RunStatus, message: String) -> pb::RunResult {
    unmeasured(
        (&plan.run_id, &plan.spec, &plan.problem),
        &plan.device,
        fingerprint(plan),
        status,
        message,
    )
}

/// A result of run `(run_id, spec, problem)` on `device` with no measurement: what it ran and on
/// what, its FLOPs and bytes, `status` and why. `gpufleet-agent simulate` ends its runs this way.
pub fn unmeasured(
    (run_id, spec, problem): (&str, &pb::RunSpec, &Problem),
    device: &DeviceInfo,
    fingerprint: pb::Fingerprint,
    status: pb::RunStatus,
    message: String,
) -> pb::RunResult {
    pb::RunResult {
        run_id: run_id.to_string(),
        spec: Some(spec.clone()),
        status: status as i32,
        message,
        device_id: device.id.clone(),
        backend: device.backend.clone(),
        variant: problem.variant.clone(),
        params: problem
            .params
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
        dtype: problem.dtype.name().to_string(),
        fingerprint: Some(fingerprint),
        started_unix_s: crate::isolation::unix_now_s(),
        flops: problem.flops(),
        bytes: problem.bytes(),
        ..Default::default()
    }
}

fn fingerprint(plan: &Plan) -> pb::Fingerprint {
    pb::Fingerprint {
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
        backend: plan.device.backend.clone(),
        driver_version: plan.device.driver_version.clone(),
        api_version: plan.device.api_version.clone(),
        os_kernel_version: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
        kernels_version: KERNELS_VERSION.to_string(),
        env: plan
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        clock_mhz: plan.device.clock_mhz,
        power_cap_w: plan.power.as_ref().map_or(0.0, |p| p.power_cap_w),
        platform: plan
            .platform
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
}

/// Percentage of the device's theoretical peak for this metric and where that peak came from;
/// (None, "") if the peak is unknown or the metric has none (latency). `dtype`: the arithmetic's,
/// `None` for one without a known peak.
pub fn pct_of_peak(
    kind: MetricKind,
    value: f64,
    dtype: Option<Dtype>,
    device: &DeviceInfo,
) -> (Option<f64>, String) {
    let p = &device.peaks;
    let (peak, source) = match kind {
        MetricKind::Gflops if dtype.is_none() => return (None, String::new()),
        MetricKind::Gflops if dtype == Some(Dtype::F16) => (p.fp16_flops, &p.fp16_source),
        MetricKind::Gflops => (p.fp32_flops, &p.fp32_source),
        MetricKind::Gbps => (p.memory_bytes_per_s, &p.memory_source),
        // Tokens/s has its roofline from the problem (`token_roofline`).
        MetricKind::Micros
        | MetricKind::NsPerHop
        | MetricKind::ImagesPerS
        | MetricKind::TokensPerS => {
            return (None, String::new());
        }
    };
    if peak > 0.0 {
        (Some(value * 1e9 / peak * 100.0), source.clone())
    } else {
        (None, String::new())
    }
}

/// The roofline fraction of a transformer run (% of peak): decode against the memory bandwidth
/// (the bytes a pass must read: every weight and the cache, over its time), prefill against the
/// arithmetic peak of its dtype. Records which bound in `config` (`roofline`,
/// `achieved_gbps` or `achieved_gflops`).
fn token_roofline(
    problem: &gpufleet_kernels::Problem,
    median_s: f64,
    device: &DeviceInfo,
    config: &mut std::collections::HashMap<String, String>,
) -> (Option<f64>, String) {
    let decode = problem.variant == "decode";
    let (kind, value, key) = if decode {
        (
            MetricKind::Gbps,
            problem.bytes() / median_s / 1e9,
            "achieved_gbps",
        )
    } else {
        (
            MetricKind::Gflops,
            problem.flops() / median_s / 1e9,
            "achieved_gflops",
        )
    };
    config.insert(
        "roofline".into(),
        if decode {
            "memory bandwidth"
        } else {
            "arithmetic"
        }
        .into(),
    );
    config.insert(key.into(), format!("{value:.1}"));
    pct_of_peak(kind, value, problem.arithmetic(), device)
}

/// Per-token latency of a decode run (each iteration's time over its generated tokens; p50 and
/// p99 over the iterations) and a prefill's time to first token (the median iteration), in ms.
fn token_latency(
    problem: &gpufleet_kernels::Problem,
    sorted: &[f64],
    config: &mut std::collections::HashMap<String, String>,
) {
    let ms = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{:.4}", v * 1e3));
    if problem.variant == "decode" {
        let steps = problem.params.get("gen").copied().unwrap_or(1).max(1) as f64;
        let per: Vec<f64> = sorted.iter().map(|t| t / steps).collect();
        config.insert(
            "token_latency_p50_ms".into(),
            ms(gpufleet_kernels::percentile(&per, 50.0)),
        );
        config.insert(
            "token_latency_p99_ms".into(),
            ms(gpufleet_kernels::percentile(&per, 99.0)),
        );
    } else {
        config.insert(
            "time_to_first_token_ms".into(),
            ms(gpufleet_kernels::percentile(sorted, 50.0)),
        );
    }
}

/// The statistics of a run's timed iterations, measured to `target_ci_pct` (`None`: no target);
/// `None` without iterations.
pub fn stats(times_s: &[f64], target_ci_pct: Option<f64>) -> Option<pb::Stats> {
    let s = Summary::of(times_s)?;
    let mut sorted = times_s.to_vec();
    sorted.sort_by(f64::total_cmp);
    let (ci_low, ci_high) = gpufleet_kernels::median_ci(&sorted).unwrap_or((s.median, s.median));
    let ci_pct = gpufleet_kernels::ci_pct(ci_low, ci_high, s.median);
    Some(pb::Stats {
        count: s.count as u32,
        median_s: s.median,
        p10_s: s.p10,
        p90_s: s.p90,
        min_s: s.min,
        max_s: s.max,
        mean_s: s.mean,
        stddev_s: s.stddev,
        cv: s.cv,
        median_ci_low_s: ci_low,
        median_ci_high_s: ci_high,
        ci_pct: ci_pct.unwrap_or(0.0),
        // 0 on the result: none.
        target_ci_pct: target_ci_pct.unwrap_or(0.0),
        noisy: s.noise(ci_pct, target_ci_pct).is_noisy(),
        robust_cv: s.robust.robust_cv,
        p25_s: s.robust.p25,
        p75_s: s.robust.p75,
        upper_fence_s: s.robust.upper_fence,
        outliers_high: s.robust.outliers_high,
    })
}

/// Writes the headline figure of an `ok` run of `problem` on `device` whose median iteration
/// took `median_s` into `r`: the metric in the catalog's kind and unit, the % of peak and its
/// source, and the figures a roofline point or a transformer adds to `config`.
pub fn add_metric(
    r: &mut pb::RunResult,
    problem: &gpufleet_kernels::Problem,
    device: &DeviceInfo,
    times_s: &[f64],
    median_s: f64,
) {
    let m = problem.metric(median_s);
    // A transfer's ceiling is the PCIe link (or the copy engine), which the peak tables do not
    // hold: no % of peak rather than a % of memory bandwidth.
    if problem.id().has_device_peak() {
        (r.pct_of_peak, r.peak_source) = pct_of_peak(m.kind, m.value, problem.arithmetic(), device);
    }
    // A roofline point is both a rate of arithmetic and of memory traffic.
    if problem.id().records_bandwidth() && median_s > 0.0 {
        let gbps = problem.bytes() / median_s / 1e9;
        r.config.insert(ACHIEVED_GBPS.into(), format!("{gbps:.1}"));
    }
    if m.kind == MetricKind::TokensPerS {
        let mut sorted = times_s.to_vec();
        sorted.sort_by(f64::total_cmp);
        (r.pct_of_peak, r.peak_source) = token_roofline(problem, median_s, device, &mut r.config);
        token_latency(problem, &sorted, &mut r.config);
    }
    r.metric = Some(pb::Metric {
        kind: m.kind.name().to_string(),
        unit: gpufleet_kernels::variant_unit(problem.kernel.name, &problem.variant, m.kind.unit())
            .to_string(),
        value: m.value,
        higher_is_better: m.kind.higher_is_better(),
    });
}

/// Turns a worker's end into the run's result.
pub fn finish(plan: &Plan, run: WorkerRun, started_unix_s: f64) -> pb::RunResult {
    let mut r = bare_result(plan, pb::RunStatus::Error, String::new());
    r.started_unix_s = started_unix_s;
    r.wall_s = run.wall.as_secs_f64();
    r.window_begin_ns = run.window_begin_ns.unwrap_or(0);
    r.window_end_ns = run.window_end_ns.unwrap_or(0);
    let secs = plan.timeout.as_secs_f64();
    match run.ending {
        Ending::Finished(o) => {
            r.status = match o.status {
                WorkerStatus::Ok => pb::RunStatus::Ok,
                WorkerStatus::Invalid => pb::RunStatus::Invalid,
                WorkerStatus::CompileError => pb::RunStatus::CompileError,
                WorkerStatus::Unsupported => pb::RunStatus::Unsupported,
                WorkerStatus::Error => pb::RunStatus::Error,
                WorkerStatus::OutOfMemory => pb::RunStatus::OutOfMemory,
            } as i32;
            r.message = if o.status == WorkerStatus::OutOfMemory {
                format!("{}; the worker had {}", o.message, plan.memory.describe())
            } else {
                o.message
            };
            r.config = o.config.into_iter().collect();
            r.warmup_done = o.warmup_done;
            if let Some(v) = &o.validation {
                r.validation = Some(pb::Validation {
                    checked: true,
                    passed: v.passed,
                    max_abs_error: v.max_abs_error,
                    worst_ratio: v.worst_ratio,
                    elements_checked: v.elements_checked,
                    elements_total: v.elements_total,
                    sampled: v.sampled,
                    message: v.message.clone(),
                });
            }
            if let Some(stats) = stats(&o.times_s, plan.job.settings.target_ci_pct) {
                // The metric exists only for results that count.
                if o.status == WorkerStatus::Ok {
                    add_metric(
                        &mut r,
                        &plan.problem,
                        &plan.device,
                        &o.times_s,
                        stats.median_s,
                    );
                }
                r.stats = Some(stats);
            }
            r.times_s = o.times_s;
        }
        Ending::Crashed { signal, code } => {
            r.status = pb::RunStatus::Crashed as i32;
            r.signal = signal.unwrap_or(0);
            let how = match (signal, code) {
                (Some(s), _) => format!("worker killed by {} (signal {s})", signal_name(s)),
                (None, Some(0)) => "worker exited without a result".to_string(),
                (None, Some(c)) => format!("worker exited with code {c} without a result"),
                (None, None) => "worker ended in an unknown way".to_string(),
            };
            // A driver that aborts on a failed allocation looks like this too.
            r.message = format!("{how}; it ran with {}", plan.memory.describe());
            r.stderr_tail = run.stderr_tail.clone();
        }
        Ending::OutOfMemory(oom) => {
            r.status = pb::RunStatus::OutOfMemory as i32;
            r.signal = match oom {
                OutOfMemory::AllocationFailed { .. } => libc::SIGABRT,
                OutOfMemory::Killed => libc::SIGKILL,
            };
            r.message = format!(
                "the worker ran out of memory: {oom}; it had {}",
                plan.memory.describe()
            );
            r.stderr_tail = run.stderr_tail.clone();
        }
        Ending::TimedOut => {
            r.status = pb::RunStatus::TimedOut as i32;
            r.message = format!("exceeded the timeout of {secs} s; the worker was killed");
            r.stderr_tail = run.stderr_tail.clone();
        }
        Ending::Cancelled => {
            r.status = pb::RunStatus::Cancelled as i32;
            r.message = "cancelled while running; the worker was killed".to_string();
        }
    }
    r
}
