//! The `hip` backend: ROCm's native path, with our own code objects, so it also runs the cards
//! ROCm ships no kernels for (gfx803, gfx1010).
//!
//! Internals: unlike the other backends, HIP is linked at build time (`hip-runtime-sys`, the
//! `hip` cargo feature), so a binary with it needs libamdhip64 to start; on a host without an AMD
//! GPU the runtime answers `hipErrorNoDevice` and the backend is listed as unavailable with that
//! name. The kernels in `kernels/hip/` are compiled ahead of time by `agent/build.rs` with clang
//! (`-nogpulib`, compiler builtins only) into one code object per target, embedded in the binary
//! ([`code_objects`]). Discovery ([`device`]) reads `hipGetDeviceProperties` and
//! `hipDeviceGetPCIBusId`. Preparing a run picks the code object for the device's arch — or for the
//! arch `HSA_OVERRIDE_GFX_VERSION` makes ROCm report, which a run may set as an environment
//! override (10.3.0 on a gfx1010 runs the gfx1030 code) — loads it with `hipModuleLoadData`,
//! allocates buffers with `hipMalloc`, and [`plan`] picks the kernel instantiations and launch
//! shapes. Each iteration is timed by two `hipEvent`s on one stream, around the launches (plus the
//! pinned-memory uploads and readback in `with_transfers` mode). Every HIP status becomes a
//! `BackendError` carrying the runtime's name for it ([`ffi`]).
//!
//! GEMM `blocked` has three compiled tile configurations and the planner picks one by shape and
//! compute-unit count; there is no run-time tuning as on OpenCL and Vulkan (the shared
//! [`crate::backend::tuning`]), since a new configuration would need a new code object.
//!
//! Shared with the other GPU backends: the planner's tables, argument checks, conv2d/im2col
//! geometry and tile configuration lines live in [`crate::backend::planning`] (`plan/` has the
//! same `mod.rs`, `gemm.rs`, `tests.rs` as the others); `prepare` finds its device through
//! [`crate::backend::lookup`]; [`elf`] reads the code objects through the `object` crate.

pub mod code_objects;
pub mod device;
pub mod elf;
pub mod ffi;
pub mod kernel;
pub mod plan;
pub mod transfer;

use super::{Backend, BackendError, DeviceInfo, KernelSupport, Prepare, PreparedKernel, lookup};
use gpufleet_kernels::BackendKind;

/// The environment variable ROCm reads to report another arch for a device.
pub const HSA_OVERRIDE: &str = "HSA_OVERRIDE_GFX_VERSION";

/// The HIP backend.
#[derive(Debug, Default)]
pub struct HipBackend;

impl Backend for HipBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Hip
    }

    fn discover(&self) -> Result<Vec<DeviceInfo>, BackendError> {
        device::enumerate().map(lookup::infos)
    }

    fn kernels(&self) -> Vec<KernelSupport> {
        KernelSupport::from_list(plan::supported())
    }

    fn prepare(&self, job: &Prepare<'_>) -> Result<Box<dyn PreparedKernel>, BackendError> {
        let (info, problem, inputs, mode) = (job.device, job.problem, job.inputs, job.mode);
        let found = lookup::find(self.name(), device::enumerate()?, &info.id)?;
        if let Some(t) = super::planning::Transfer::of(problem) {
            return Ok(Box::new(transfer::HipTransfer::new(&found, job, t)?));
        }
        let plan = kernel::plan_for(&found, problem)?;
        let override_value = std::env::var(HSA_OVERRIDE).ok();
        let choice = code_objects::choose_arch(&found.gcn_arch_name, override_value.as_deref())?;
        let code = code_objects::select(&choice, &code_objects::embedded())?;
        Ok(Box::new(kernel::HipKernel::new(
            &found, code, &choice, plan, problem, inputs, mode,
        )?))
    }
}
