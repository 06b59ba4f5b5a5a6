//! The timed command buffer of a [`VulkanKernel`]: timestamps around the work, the uploads and
//! readback in `with_transfers` mode, one dispatch per plan step with barriers between them; for
//! `transfer`, its one copy.

use super::{DevBuffer, VulkanKernel};
use crate::backend::planning::Direction;
use crate::backend::vulkan::ffi::fail;
use crate::backend::vulkan::plan::Plan;
use crate::backend::{BackendError, Mode};
use ash::vk;

/// A debug switch: `1` writes a timestamp after every dispatch and records in the result's
/// configuration (`dispatch_profile_us`) the time of each kind of dispatch in the last
/// iteration, most first. The timestamps may slow the work a little; the result's time is still
/// the whole command buffer's.
pub const PROFILE_ENV: &str = "GPUFLEET_DEBUG_VULKAN_PROFILE";

impl VulkanKernel {
    /// Nanoseconds between timestamps `from` and `to` (ticks masked by the valid bits, scaled by
    /// the period).
    pub(super) fn elapsed_ns(&self, from: u64, to: u64) -> f64 {
        (to.wrapping_sub(from) & self.timestamp_mask) as f64 * self.timestamp_ns
    }

    /// Notes the profile of the iteration whose timestamps are `ts` (start, end, then one after
    /// each dispatch): microseconds and count per dispatch label.
    pub(super) fn note_profile(&mut self, ts: &[u64]) {
        if self.profile.is_empty() {
            return;
        }
        let mut by: std::collections::BTreeMap<&str, (f64, usize)> = Default::default();
        let mut before = ts[0];
        for (label, &t) in self.profile.iter().zip(&ts[2..]) {
            let us = self.elapsed_ns(before, t) / 1e3;
            let e = by.entry(label).or_default();
            e.0 += us;
            e.1 += 1;
            before = t;
        }
        let mut rows: Vec<_> = by.into_iter().collect();
        rows.sort_by(|a, b| b.1.0.total_cmp(&a.1.0));
        let text = rows
            .iter()
            .map(|(l, (us, n))| format!("{l}: {us:.1} ×{n}"))
            .collect::<Vec<_>>()
            .join("; ");
        self.config.insert("dispatch_profile_us".into(), text);
    }

    pub(super) fn record(
        &mut self,
        plan: &Plan,
        sets: &[vk::DescriptorSet],
        device_inputs: &[DevBuffer],
        staging_inputs: &[DevBuffer],
        mode: Mode,
    ) -> Result<(), BackendError> {
        let dev = self.dev().clone();
        let barrier = |cb,
                       src: vk::AccessFlags,
                       dst: vk::AccessFlags,
                       from: vk::PipelineStageFlags,
                       to: vk::PipelineStageFlags| {
            let b = [vk::MemoryBarrier::default()
                .src_access_mask(src)
                .dst_access_mask(dst)];
            // SAFETY: recording into a command buffer in the recording state.
            unsafe {
                dev.cmd_pipeline_barrier(cb, from, to, vk::DependencyFlags::empty(), &b, &[], &[])
            };
        };
        // SAFETY: recording into a freshly allocated command buffer of our
        // pool with objects of this device.
        unsafe {
            let alloc = vk::CommandBufferAllocateInfo::default()
                .command_pool(self.pool)
                .level(vk::CommandBufferLevel::PRIMARY)
                .command_buffer_count(1);
            self.cmd = dev
                .allocate_command_buffers(&alloc)
                .map_err(|e| fail("vkAllocateCommandBuffers", e))?[0];
            let cb = self.cmd;
            dev.begin_command_buffer(cb, &vk::CommandBufferBeginInfo::default())
                .map_err(|e| fail("vkBeginCommandBuffer", e))?;
            let timed = self.query != vk::QueryPool::null();
            if timed {
                let queries = 2 + self.profile.len() as u32;
                dev.cmd_reset_query_pool(cb, self.query, 0, queries);
                dev.cmd_write_timestamp(cb, vk::PipelineStageFlags::TOP_OF_PIPE, self.query, 0);
            }
            // transfer: one copy (see `VulkanKernel::transfer`), whatever the mode.
            if let Some((t, _)) = &self.transfer {
                let (src, dst) = match t.direction {
                    Direction::HostToDevice => (staging_inputs[0], self.output),
                    Direction::DeviceToHost => (device_inputs[0], self.readback),
                    Direction::DeviceToDevice => (device_inputs[0], self.output),
                };
                Self::record_copy(&dev, cb, src, dst);
            }
            if mode == Mode::WithTransfers && self.transfer.is_none() {
                for (st, d) in staging_inputs.iter().zip(device_inputs) {
                    Self::record_copy(&dev, cb, *st, *d);
                }
                barrier(
                    cb,
                    vk::AccessFlags::TRANSFER_WRITE,
                    vk::AccessFlags::SHADER_READ,
                    vk::PipelineStageFlags::TRANSFER,
                    vk::PipelineStageFlags::COMPUTE_SHADER,
                );
            }
            for (i, d) in plan.dispatches.iter().enumerate() {
                let (pipeline, layout, _, _) = self.pipelines[self.pipeline_of[i]];
                dev.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, pipeline);
                dev.cmd_bind_descriptor_sets(
                    cb,
                    vk::PipelineBindPoint::COMPUTE,
                    layout,
                    0,
                    &[sets[i]],
                    &[],
                );
                if !d.push.is_empty() {
                    let bytes: Vec<u8> = d.push.iter().flat_map(|w| w.to_le_bytes()).collect();
                    dev.cmd_push_constants(cb, layout, vk::ShaderStageFlags::COMPUTE, 0, &bytes);
                }
                dev.cmd_dispatch(cb, d.groups[0], d.groups[1], d.groups[2]);
                if !self.profile.is_empty() {
                    let q = 2 + i as u32;
                    dev.cmd_write_timestamp(
                        cb,
                        vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                        self.query,
                        q,
                    );
                }
                // Between dispatches the next one reads what this one wrote. After the last one
                // nothing in this command buffer does (the readback has its own barrier below, and
                // the host waits on the fence before the next submission), so no barrier there: a
                // compute-to-compute barrier drains the pipe, which an empty kernel's timestamps
                // would otherwise include.
                if i + 1 < plan.dispatches.len() {
                    barrier(
                        cb,
                        vk::AccessFlags::SHADER_WRITE,
                        vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE,
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                    );
                }
            }
            if mode == Mode::WithTransfers && self.transfer.is_none() {
                barrier(
                    cb,
                    vk::AccessFlags::SHADER_WRITE,
                    vk::AccessFlags::TRANSFER_READ,
                    vk::PipelineStageFlags::COMPUTE_SHADER,
                    vk::PipelineStageFlags::TRANSFER,
                );
                // The readback buffer has the output's size.
                Self::record_copy(&dev, cb, self.output, self.readback);
            }
            if timed {
                dev.cmd_write_timestamp(cb, vk::PipelineStageFlags::BOTTOM_OF_PIPE, self.query, 1);
            }
            dev.end_command_buffer(cb)
                .map_err(|e| fail("vkEndCommandBuffer", e))?;
        }
        Ok(())
    }
}
