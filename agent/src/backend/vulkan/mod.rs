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
//! crash: that is what RADV on an MI300X answers.

pub mod device;
pub mod ffi;
pub mod kernel;
pub mod plan;

use super::{Backend, BackendError, DeviceInfo, KernelSupport, Mode, PreparedKernel, tuning};
use gpufleet_kernels::{Buffer, KernelId, Problem};
use std::time::Instant;

/// The Vulkan backend.
#[derive(Debug, Default)]
pub struct VulkanBackend;

impl Backend for VulkanBackend {
    fn name(&self) -> &'static str {
        "vulkan"
    }

    fn discover(&self) -> Result<Vec<DeviceInfo>, BackendError> {
        let vk = ffi::Vk::new()?;
        Ok(device::enumerate(&vk)?
            .into_iter()
            .map(|f| f.info)
            .collect())
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
            storage_buffer_16bit: true,
            max_compute_workgroup_count: [65535, 65535, 65535],
            vendor_id: 0,
        };
        KernelSupport::from_list(plan::supported(&caps))
    }

    fn prepare(
        &self,
        info: &DeviceInfo,
        problem: &Problem,
        inputs: &[Buffer],
        mode: Mode,
    ) -> Result<Box<dyn PreparedKernel>, BackendError> {
        if problem.id() != KernelId::Gemm || problem.variant != "blocked" {
            return Ok(Box::new(kernel::VulkanKernel::new(
                &info.id, problem, inputs, mode, None,
            )?));
        }
        let (fingerprint, caps) = {
            let vk = ffi::Vk::new()?;
            let found = device::enumerate(&vk)?
                .into_iter()
                .find(|f| f.info.id == info.id)
                .ok_or_else(|| BackendError::Unavailable {
                    backend: "vulkan".into(),
                    reason: format!("device {} is gone", info.id),
                })?;
            (found.fingerprint, found.caps)
        };
        let key = tuning::key(&fingerprint, problem);
        let (entry, searched) = match tuning::load::<plan::GemmTuning>("vulkan", &key) {
            Some(e) => (e, false),
            None => {
                let e = autotune(&info.id, &caps, problem, inputs)?;
                tuning::store("vulkan", &key, &e);
                (e, true)
            }
        };
        let mut k =
            kernel::VulkanKernel::new(&info.id, problem, inputs, mode, Some(&entry.tuning))?;
        k.note("tuning", tuning::describe(&entry, searched));
        Ok(Box::new(k))
    }
}

/// Searches `gemm_blocked`'s specialization constants on the real problem:
/// each candidate is prepared, timed (median of 3 after a warm-up) and
/// validated; the fastest valid one wins. Bounded by [`tuning::budget`].
fn autotune(
    id: &str,
    caps: &plan::VkCaps,
    problem: &Problem,
    inputs: &[Buffer],
) -> Result<tuning::Tuned<plan::GemmTuning>, BackendError> {
    let started = Instant::now();
    let mut best: Option<(std::time::Duration, plan::GemmTuning)> = None;
    let (mut tried, mut last_err) = (0, None);
    for cand in plan::gemm_candidates(caps) {
        if tried > 0 && started.elapsed() > tuning::budget() {
            break;
        }
        tried += 1;
        let mut k =
            match kernel::VulkanKernel::new(id, problem, inputs, Mode::ComputeOnly, Some(&cand)) {
                Ok(k) => k,
                Err(e) => {
                    last_err = Some(e);
                    continue;
                }
            };
        let mut times = Vec::new();
        for _ in 0..4 {
            match k.run() {
                Ok(t) => times.push(t),
                Err(e) => {
                    last_err = Some(e);
                    break;
                }
            }
        }
        if times.len() < 4 || !k.output().is_ok_and(|o| problem.check(inputs, &o).passed) {
            continue;
        }
        times.remove(0);
        times.sort();
        if best.is_none_or(|(t, _)| times[1] < t) {
            best = Some((times[1], cand));
        }
    }
    match best {
        Some((_, tuning)) => Ok(tuning::Tuned {
            tuning,
            seconds: started.elapsed().as_secs_f64(),
            candidates: tried,
        }),
        None => Err(last_err.unwrap_or(BackendError::Unsupported {
            backend: "vulkan".into(),
            what: format!("gemm/blocked on {id}: no tuning candidate prepared and validated"),
        })),
    }
}
