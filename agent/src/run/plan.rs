//! From a RunRequest to a checked plan, and from a worker's end to a
//! RunResult. Pure apart from reading the clock for `started_unix_s`.

use super::AgentCore;
use crate::backend::{self, DeviceInfo, Mode};
use crate::env::check_override;
use crate::error::AgentError;
use crate::isolation::parent::{Ending, WorkerRun, signal_name};
use crate::isolation::protocol::{WorkerJob, WorkerStatus};
use crate::stats::Summary;
use gpufleet_kernels::{Dtype, KERNELS_VERSION, MetricKind, Problem, RunDefaults};
use gpufleet_proto::v1 as pb;
use std::collections::BTreeMap;
use std::time::Duration;

/// Longest deadline a run may ask for.
pub const MAX_TIMEOUT_S: f64 = RunDefaults::MAX_TIMEOUT_S;

/// Most timed iterations a run may ask for.
pub const MAX_ITERATIONS: u32 = RunDefaults::MAX_ITERATIONS;

/// A request that passed every check.
#[derive(Debug, Clone)]
pub struct Plan {
    pub run_id: String,
    pub spec: pb::RunSpec,
    pub problem: Problem,
    pub device: DeviceInfo,
    pub mode: Mode,
    pub env: BTreeMap<String, String>,
    pub timeout: Duration,
    pub job: WorkerJob,
    /// False when the device's backend does not implement this kernel,
    /// variant or dtype: the run ends at once as `unsupported`.
    pub supported: bool,
    /// The power channel the run is measured on, if the device has one.
    pub power: Option<super::power::RunPower>,
}

fn invalid(field: &'static str, message: String) -> AgentError {
    AgentError::InvalidArgument { field, message }
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// Checks a request against the inventory, the catalog and the allowlist.
///
/// # Errors
/// [`AgentError`] naming the offending field.
pub fn plan(core: &AgentCore, run_id: &str, spec: &pb::RunSpec) -> Result<Plan, AgentError> {
    let inv = &core.inventory;
    if spec.device_id.is_empty() {
        return Err(invalid(
            "device_id",
            format!("is required (devices: {})", device_list(core)),
        ));
    }
    let Some((backend_state, device)) = inv.device(&spec.device_id) else {
        return Err(invalid(
            "device_id",
            format!(
                "unknown device `{}` (devices: {})",
                spec.device_id,
                device_list(core)
            ),
        ));
    };
    let params: BTreeMap<String, i64> = spec.params.iter().map(|(k, v)| (k.clone(), *v)).collect();
    let problem = Problem::new(
        &spec.kernel,
        &spec.variant,
        &params,
        &spec.dtype,
        core.config.enable_debug_kernels,
    )?;
    let mut env = BTreeMap::new();
    for (k, v) in &spec.env {
        check_override(k, v)?;
        env.insert(k.clone(), v.clone());
    }
    let footprint = problem.footprint_bytes();
    if device.memory_bytes > 0 && footprint > device.memory_bytes {
        return Err(invalid(
            "params",
            format!(
                "{} with {} needs {} of buffers, more than the memory of {} ({})",
                problem.kernel.name,
                problem.params_string(),
                gib(footprint),
                device.id,
                gib(device.memory_bytes)
            ),
        ));
    }
    let d = core.config.defaults;
    let timeout_s = if spec.timeout_s == 0.0 {
        d.timeout_s
    } else {
        spec.timeout_s
    };
    if !(timeout_s > 0.0 && timeout_s <= MAX_TIMEOUT_S) {
        return Err(invalid(
            "timeout_s",
            format!("{} is outside (0, {MAX_TIMEOUT_S}] seconds", spec.timeout_s),
        ));
    }
    if !(spec.min_seconds >= 0.0 && spec.min_seconds <= 3600.0) {
        return Err(invalid(
            "min_seconds",
            format!("{} is outside [0, 3600] seconds", spec.min_seconds),
        ));
    }
    let or = |v: u32, default: u32| if v == 0 { default } else { v };
    let min_iterations = or(spec.min_iterations, d.min_iterations);
    let max_iterations = or(spec.max_iterations, d.max_iterations).max(min_iterations);
    // Every timed iteration travels back as a raw sample; keep results
    // well under gRPC's default 4 MiB message size.
    if max_iterations > MAX_ITERATIONS {
        return Err(invalid(
            "max_iterations",
            format!("{max_iterations} exceeds {MAX_ITERATIONS}"),
        ));
    }
    let mode = match pb::RunMode::try_from(spec.mode) {
        Ok(pb::RunMode::Unspecified | pb::RunMode::ComputeOnly) => Mode::ComputeOnly,
        Ok(pb::RunMode::WithTransfers) => Mode::WithTransfers,
        Err(_) => {
            return Err(invalid(
                "mode",
                format!(
                    "unknown RunMode value {} (known: {})",
                    spec.mode,
                    Mode::known()
                ),
            ));
        }
    };
    let supported = backend_state.available
        && backend::supports(
            &backend_state.kernels,
            problem.kernel.name,
            &problem.variant,
            problem.dtype.name(),
        );
    let power = super::power::plan_power(&core.power.sampler, device, spec, timeout_s)?;
    let job = WorkerJob {
        backend: device.backend.clone(),
        device: device.clone(),
        kernel: problem.kernel.name.to_string(),
        variant: problem.variant.clone(),
        params: problem.params.clone(),
        dtype: problem.dtype.name().to_string(),
        mode,
        warmup: or(spec.warmup, d.warmup),
        min_iterations,
        min_seconds: if spec.min_seconds == 0.0 {
            d.min_seconds
        } else {
            spec.min_seconds
        },
        max_iterations,
        skip_validation: spec.skip_validation,
        seed: spec.seed,
        allow_debug: core.config.enable_debug_kernels,
        power_window_s: power.as_ref().map_or(0.0, |p| p.window_s),
    };
    Ok(Plan {
        run_id: run_id.to_string(),
        spec: spec.clone(),
        problem,
        device: device.clone(),
        mode,
        env,
        timeout: Duration::from_secs_f64(timeout_s),
        job,
        supported,
        power,
    })
}

fn device_list(core: &AgentCore) -> String {
    let ids: Vec<&str> = core
        .inventory
        .devices()
        .map(|(_, d)| d.id.as_str())
        .collect();
    if ids.is_empty() {
        "none".into()
    } else {
        ids.join(", ")
    }
}

/// A result with no measurement (unsupported, cancelled while queued, ...).
pub fn bare_result(plan: &Plan, status: pb::RunStatus, message: String) -> pb::RunResult {
    let p = &plan.problem;
    pb::RunResult {
        run_id: plan.run_id.clone(),
        spec: Some(plan.spec.clone()),
        status: status as i32,
        message,
        device_id: plan.device.id.clone(),
        backend: plan.device.backend.clone(),
        variant: p.variant.clone(),
        params: p.params.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        dtype: p.dtype.name().to_string(),
        fingerprint: Some(fingerprint(plan)),
        started_unix_s: crate::isolation::unix_now_s(),
        flops: p.flops(),
        bytes: p.bytes(),
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
    }
}

/// Percentage of the device's theoretical peak for this metric, 0 if the
/// peak is unknown or the metric has none (latency).
pub fn pct_of_peak(kind: MetricKind, value: f64, dtype: Dtype, device: &DeviceInfo) -> f64 {
    let peak = match kind {
        MetricKind::Gflops if dtype == Dtype::F16 => device.peaks.fp16_flops,
        MetricKind::Gflops => device.peaks.fp32_flops,
        MetricKind::Gbps => device.peaks.memory_bytes_per_s,
        MetricKind::Micros | MetricKind::NsPerHop => 0.0,
    };
    if peak > 0.0 {
        value * 1e9 / peak * 100.0
    } else {
        0.0
    }
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
            } as i32;
            r.message = o.message;
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
            if let Some(s) = Summary::of(&o.times_s) {
                r.stats = Some(pb::Stats {
                    count: s.count as u32,
                    median_s: s.median,
                    p10_s: s.p10,
                    p90_s: s.p90,
                    min_s: s.min,
                    max_s: s.max,
                    mean_s: s.mean,
                    stddev_s: s.stddev,
                    cv: s.cv,
                });
                // The metric exists only for results that count.
                if o.status == WorkerStatus::Ok {
                    let m = plan.problem.metric(s.median);
                    r.pct_of_peak = pct_of_peak(m.kind, m.value, plan.problem.dtype, &plan.device);
                    r.metric = Some(pb::Metric {
                        kind: m.kind.name().to_string(),
                        unit: m.kind.unit().to_string(),
                        value: m.value,
                        higher_is_better: m.kind.higher_is_better(),
                    });
                }
            }
            r.times_s = o.times_s;
        }
        Ending::Crashed { signal, code } => {
            r.status = pb::RunStatus::Crashed as i32;
            r.signal = signal.unwrap_or(0);
            r.message = match (signal, code) {
                (Some(s), _) => format!("worker killed by {} (signal {s})", signal_name(s)),
                (None, Some(0)) => "worker exited without a result".to_string(),
                (None, Some(c)) => format!("worker exited with code {c} without a result"),
                (None, None) => "worker ended in an unknown way".to_string(),
            };
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
