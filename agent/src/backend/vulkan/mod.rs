//! The `vulkan` backend: RADV (the RX 580, RX 5600 XT and Ryzen APUs),
//! lavapipe, NVIDIA, through one code path.
//!
//! Internals: libvulkan is loaded at run time (`ash::Entry::load`), so a host
//! without it lists the backend as unavailable. Discovery walks the physical
//! devices with `VK_EXT_pci_bus_info`, subgroup and driver properties,
//! 16-bit features, timestamp support and heaps. Each catalog kernel becomes
//! a [`plan`] of dispatches (SPIR-V compiled from `kernels/vulkan/*.comp`,
//! specialization constants for tile sizes and workgroup shape, push
//! constants for sizes). [`kernel`] fills device-local buffers through
//! staging buffers, creates pipelines through an on-disk pipeline cache and
//! records one command buffer with timestamps before and after the work
//! (after the uploads and readback too in `with_transfers` mode), scaled by
//! `timestampPeriod` and masked by `timestampValidBits`. Every failing call is
//! a result naming the step (`vkQueueSubmit: ERROR_DEVICE_LOST`), never a
//! crash: that is what RADV on an MI300X answers. `kernel/buffers.rs` holds
//! the buffers and one-shot copies, `kernel/record.rs` the timed command
//! buffer.
//!
//! Shared with the other GPU backends: the planner's tables, argument checks,
//! conv2d/im2col geometry and GEMM tile rules live in
//! [`crate::backend::planning`]; GEMM `blocked` is tuned by the shared
//! autotuner ([`crate::backend::tuning`], keyed also by the SPIR-V's hash);
//! devices are found through [`crate::backend::lookup`].

pub mod device;
pub mod ffi;
pub mod kernel;
pub mod plan;

use super::{
    Backend, BackendError, DeviceInfo, KernelSupport, Mode, Prepare, PreparedKernel, lookup, tuning,
};
use gpufleet_kernels::BackendKind;

/// The Vulkan backend.
#[derive(Debug, Default)]
pub struct VulkanBackend;

impl Backend for VulkanBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Vulkan
    }

    fn discover(&self) -> Result<Vec<DeviceInfo>, BackendError> {
        let vk = ffi::Vk::new()?;
        Ok(lookup::infos(device::enumerate(&vk)?))
    }

    fn kernels(&self) -> Vec<KernelSupport> {
        // Without a device, list what a capable device runs; the planner
        // refuses (as `unsupported`) what a given device lacks, e.g. fp16.
        let caps = plan::VkCaps {
            subgroup_size: 32,
            subgroup_arithmetic: true,
            max_workgroup_invocations: 1024,
            max_workgroup_size: [1024, 1024, 64],
            max_shared_memory_bytes: 48 * 1024,
            shader_float16: true,
            shader_float64: true,
            integer_dot_product: true,
            quant_dot: plan::QuantDot::Q8,
            storage_buffer_16bit: true,
            max_compute_workgroup_count: [65535, 65535, 65535],
            vendor_id: 0,
            compute_units: 0,
            scalar_attention: false,
            no_tile_attention: false,
            coopmat_f16: false,
            quant_blocks: 0,
        };
        KernelSupport::from_list(plan::supported(&caps))
    }

    fn prepare(&self, job: &Prepare<'_>) -> Result<Box<dyn PreparedKernel>, BackendError> {
        let (info, problem, inputs, mode) = (job.device, job.problem, job.inputs, job.mode);
        if !tuning::tunable(problem) {
            return Ok(Box::new(kernel::VulkanKernel::new(
                &info.id, problem, inputs, mode, None,
            )?));
        }
        let (fingerprint, caps) = {
            let vk = ffi::Vk::shared()?;
            let found = lookup::find(self.name(), device::enumerate(&vk)?, &info.id)?;
            (found.fingerprint, found.caps)
        };
        let sources: Vec<&[u8]> = plan::plan(problem, &caps, None)
            .map_err(|e| e.for_backend("vulkan"))?
            .dispatches
            .iter()
            .map(|d| d.spirv)
            .collect();
        let key = tuning::key(&fingerprint, problem, &sources);
        let (entry, line) = tuning::cached_or_search("vulkan", &key, || {
            let candidates = plan::gemm_candidates(&caps);
            tuning::search(
                "vulkan",
                &info.id,
                job.tune_budget,
                candidates,
                problem,
                inputs,
                |cand| {
                    let k = kernel::VulkanKernel::new(
                        &info.id,
                        problem,
                        inputs,
                        Mode::ComputeOnly,
                        Some(cand),
                    )?;
                    Ok(Some(k))
                },
            )
        })?;
        let mut k =
            kernel::VulkanKernel::new(&info.id, problem, inputs, mode, Some(&entry.tuning))?;
        k.note("tuning", line);
        Ok(Box::new(k))
    }
}
