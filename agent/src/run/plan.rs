//! From a RunSpec to a checked plan: kernel, parameters, device, mode,
//! environment, device and host memory, timeout, iterations and the power
//! window, each refused naming its field. Pure: reads only the agent's state
//! and the host-memory reading it is given.

use super::AgentCore;
use super::host_peak::{HostMemoryShortage, WorkerMemory, admit, host_peak_bytes};
use crate::backend::{self, DeviceInfo, Mode};
use crate::env::check_override;
use crate::error::AgentError;
use crate::host::memory::{HostMemory, gib};
use crate::isolation::protocol::WorkerJob;
use crate::power::run_energy::{RunPower, plan_power};
use gpufleet_kernels::{Problem, RunDefaults, quote};
use gpufleet_proto::v1 as pb;
use std::collections::BTreeMap;
use std::time::Duration;

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
    pub power: Option<RunPower>,
    /// The host memory admitted for the worker (checked again when the device is free).
    pub memory: WorkerMemory,
    /// The host's platform facts (Runpod ids, driver stack), for the fingerprint.
    pub platform: BTreeMap<String, String>,
}

impl Plan {
    /// Admits the run against `host` now: its estimated peak must fit, and the worker's limit
    /// follows from it.
    ///
    /// # Errors
    /// [`HostMemoryShortage`] naming needed and available.
    pub fn admit_memory(
        &self,
        host: &HostMemory,
        limited: bool,
    ) -> Result<WorkerMemory, HostMemoryShortage> {
        let what = || {
            format!(
                "{} with {} on {}",
                self.problem.kernel.name,
                self.problem.params_string(),
                self.device.id
            )
        };
        admit(what, self.memory.estimate, host, limited)
    }
}

fn invalid(field: &'static str, message: String) -> AgentError {
    AgentError::InvalidArgument { field, message }
}

/// Checks a request against the inventory, the catalog, the allowlist and `host`'s memory.
///
/// # Errors
/// [`AgentError`] naming the offending field.
pub fn plan(
    core: &AgentCore,
    run_id: &str,
    spec: &pb::RunSpec,
    host: &HostMemory,
) -> Result<Plan, AgentError> {
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
                "unknown device {} (devices: {})",
                quote(&spec.device_id),
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
    if !(timeout_s > 0.0 && timeout_s <= RunDefaults::MAX_TIMEOUT_S) {
        return Err(invalid(
            "timeout_s",
            format!(
                "{} is outside (0, {}] seconds",
                spec.timeout_s,
                RunDefaults::MAX_TIMEOUT_S
            ),
        ));
    }
    if !(spec.min_seconds >= 0.0 && spec.min_seconds <= 3600.0) {
        return Err(invalid(
            "min_seconds",
            format!("{} is outside [0, 3600] seconds", spec.min_seconds),
        ));
    }
    if !(spec.max_seconds >= 0.0 && spec.max_seconds <= RunDefaults::MAX_TIMEOUT_S) {
        return Err(invalid(
            "max_seconds",
            format!(
                "{} is outside [0, {}] seconds",
                spec.max_seconds,
                RunDefaults::MAX_TIMEOUT_S
            ),
        ));
    }
    if !(spec.target_ci_pct.is_finite() && spec.target_ci_pct <= 100.0) {
        return Err(invalid(
            "target_ci_pct",
            format!(
                "{} is not a percentage (0: the default {}%, negative: no target)",
                spec.target_ci_pct, d.target_ci_pct
            ),
        ));
    }
    let min_seconds = if spec.min_seconds == 0.0 {
        d.min_seconds
    } else {
        spec.min_seconds
    };
    let max_seconds = if spec.max_seconds == 0.0 {
        RunDefaults::budget(min_seconds)
    } else {
        spec.max_seconds
    }
    .max(min_seconds);
    let target_ci_pct = match spec.target_ci_pct {
        0.0 => d.target_ci_pct,
        t if t < 0.0 => 0.0,
        t => t,
    };
    let or = |v: u32, default: u32| if v == 0 { default } else { v };
    let min_iterations = or(spec.min_iterations, d.min_iterations);
    let max_iterations = or(spec.max_iterations, d.max_iterations).max(min_iterations);
    // Every timed iteration travels back as a raw sample; keep results
    // well under gRPC's default 4 MiB message size.
    if max_iterations > RunDefaults::MAX_ITERATIONS {
        return Err(invalid(
            "max_iterations",
            format!("{max_iterations} exceeds {}", RunDefaults::MAX_ITERATIONS),
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
    let power = plan_power(
        &core.power.sampler,
        &device.pci_bus_id,
        device.backend == "cpu",
        spec.power_window_s,
        timeout_s,
    )?;
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
        min_seconds,
        max_iterations,
        target_ci_pct,
        max_seconds,
        skip_validation: spec.skip_validation,
        seed: spec.seed,
        allow_debug: core.config.enable_debug_kernels,
        power_window_s: power.as_ref().map_or(0.0, |p| p.window_s),
        timeout_s,
    };
    let mut plan = Plan {
        run_id: run_id.to_string(),
        spec: spec.clone(),
        memory: WorkerMemory {
            estimate: host_peak_bytes(&problem, device, mode),
            limit: None,
        },
        problem,
        device: device.clone(),
        mode,
        env,
        timeout: Duration::from_secs_f64(timeout_s),
        job,
        supported,
        power,
        platform: core.inventory.host.platform.clone(),
    };
    // An unsupported run starts no worker, so it needs no memory.
    if supported {
        plan.memory = plan.admit_memory(host, core.config.limit_worker_memory)?;
    }
    Ok(plan)
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
