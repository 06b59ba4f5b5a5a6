//! From a RunSpec to a checked plan: kernel, parameters, device, mode,
//! environment, device and host memory, the measurement settings (resolved by
//! the one `PartialSettings::resolve` every layer uses, so an absent field
//! means the same default here as in a suite) and the power window, each
//! refused naming its field. Pure: reads only the agent's state
//! and the host-memory reading it is given.

use super::AgentCore;
use super::host_peak::{WorkerMemory, admit, host_peak_bytes};
use crate::backend::{self, DeviceInfo, Mode};
use crate::env::check_override;
use crate::error::AgentError;
use crate::host::memory::HostMemoryShortage;
use crate::host::memory::{HostMemory, gib};
use crate::isolation::protocol::WorkerJob;
use crate::power::run_energy::{RunPower, plan_power};
use gpufleet_kernels::{Problem, quote};
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

/// Refuses `problem` on `device` when its buffers need more than the device's memory (a device
/// that reports no memory size takes anything).
///
/// # Errors
/// [`AgentError::InvalidArgument`] naming `params`, with both sizes.
pub fn fits_device(problem: &Problem, device: &DeviceInfo) -> Result<(), AgentError> {
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
    Ok(())
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
        core.config
            .loader
            .check(k, v)
            .map_err(|m| invalid("env", m))?;
        env.insert(k.clone(), v.clone());
    }
    fits_device(&problem, device)?;
    let settings = spec
        .given_settings()
        .resolve()
        .map_err(|e| invalid(e.field, e.message))?;
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
        // Absent: the automatic window, which `plan_power` calls 0.
        spec.power_window_s.unwrap_or(0.0),
        settings.timeout_s,
    )?;
    let job = WorkerJob {
        backend: device.backend.clone(),
        device: device.clone(),
        kernel: problem.kernel.name.to_string(),
        variant: problem.variant.clone(),
        params: problem.params.clone(),
        dtype: problem.dtype.name().to_string(),
        mode,
        settings,
        skip_validation: spec.skip_validation,
        seed: spec.seed,
        allow_debug: core.config.enable_debug_kernels,
        power_window_s: power.as_ref().map_or(0.0, |p| p.window_s),
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
        timeout: Duration::from_secs_f64(settings.timeout_s),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::planning::testing;

    #[test]
    fn a_device_of_unknown_memory_takes_anything_and_a_small_one_is_named() {
        let p = testing::problem("vec_add", "", &[("n", 1 << 20)], "f32");
        let mut d = DeviceInfo {
            id: "vulkan:0".into(),
            ..Default::default()
        };
        assert!(fits_device(&p, &d).is_ok(), "memory 0 is unknown, not none");
        d.memory_bytes = 1 << 20;
        let e = fits_device(&p, &d).unwrap_err().to_string();
        assert!(
            e.contains("params") && e.contains("vulkan:0") && e.contains("vec_add"),
            "{e}"
        );
        d.memory_bytes = 1 << 30;
        assert!(fits_device(&p, &d).is_ok());
    }
}
