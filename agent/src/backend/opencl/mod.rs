//! The `opencl` backend: Clover, rusticl, ROCm, PoCL and NVIDIA through one
//! code path.
//!
//! Internals: `libOpenCL.so.1` is loaded at run time (opencl3's `dynamic`
//! feature), so a host without it lists the backend as unavailable with the
//! reason. Discovery walks every platform's devices and takes the PCI bus id
//! from `cl_khr_pci_bus_info`, `CL_DEVICE_TOPOLOGY_AMD` or
//! `cl_nv_device_attribute_query`. Each catalog kernel becomes a [`plan`]:
//! the source from `kernels/opencl/`, build options (`-cl-std=CL1.1` where
//! that is all the device speaks), buffers and launches. Programs are built
//! once per device fingerprint, options and source hash and their binaries
//! cached under the agent cache dir. Times come from profiling events
//! (start of the first command to end of the last). `transfer` launches
//! nothing: `transfer.rs` runs it as one copy command. GEMM `blocked` is tuned
//! per device and size class through the shared autotuner
//! ([`crate::backend::tuning`], keyed also by the source's hash) and the
//! winner cached.
//!
//! Shared with the other GPU backends: the planner's tables, argument checks,
//! conv2d/im2col geometry and GEMM tile rules live in
//! [`crate::backend::planning`]; `prepare` finds its device through
//! [`crate::backend::lookup`]. What stays here is OpenCL's own: build options,
//! the program binary cache, events.

pub mod device;
pub mod ffi;
pub mod kernel;
pub mod plan;
pub mod transfer;

use super::{
    Backend, BackendError, DeviceInfo, KernelSupport, Prepare, PreparedKernel, lookup, planning,
};
use gpufleet_kernels::BackendKind;

/// The OpenCL backend.
#[derive(Debug, Default)]
pub struct OpenClBackend;

impl Backend for OpenClBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::OpenCl
    }

    fn discover(&self) -> Result<Vec<DeviceInfo>, BackendError> {
        Ok(lookup::infos(device::enumerate()?))
    }

    fn kernels(&self) -> Vec<KernelSupport> {
        KernelSupport::from_list(plan::supported())
    }

    fn prepare(&self, job: &Prepare<'_>) -> Result<Box<dyn PreparedKernel>, BackendError> {
        let found = lookup::find(self.name(), device::enumerate()?, &job.device.id)?;
        if let Some(t) = planning::Transfer::of(job.problem) {
            return Ok(Box::new(transfer::OpenClTransfer::new(&found, job, t)?));
        }
        let kernel = kernel::OpenClKernel::new(&found, job)?;
        Ok(Box::new(kernel))
    }
}
