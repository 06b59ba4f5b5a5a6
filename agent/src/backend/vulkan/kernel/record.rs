//! The timed command buffer of a [`VulkanKernel`]: timestamps around the work, the uploads and
//! readback in `with_transfers` mode, one dispatch per plan step with barriers between them; for
//! `transfer`, its one copy.

use super::{DevBuffer, VulkanKernel};
use crate::backend::planning::Direction;
use crate::backend::vulkan::ffi::fail;
use crate::backend::vulkan::plan::{Plan, Replay, Replayed};
use crate::backend::{BackendError, Mode, debug_switch};
use ash::vk;
use std::ops::Range;

/// A debug switch: `1` writes a timestamp after every dispatch and records in the result's
/// configuration (`dispatch_profile_us`) the time of each kind of dispatch in the last
/// iteration, most first. The timestamps may slow the work a little; the result's time is still
/// the whole command buffer's.
pub const PROFILE_ENV: &str = "GPUFLEET_DEBUG_VULKAN_PROFILE";

/// A debug switch: `1` records a decode's passes one after the other instead of replaying its last
/// (`Replay`), to measure what the replay changes.
pub const INLINE_ENV: &str = "GPUFLEET_DEBUG_VULKAN_INLINE";

/// A debug switch: `1` records no barrier between a plan's consecutive dispatches, so a GPU may
/// start each before the one it reads from has finished. The results are then wrong wherever
/// dispatches overlapped (validation says so) and the time is a bound on what overlapping
/// dependent dispatches could win (a dependent launch, or one persistent kernel): the drain and
/// ramp a barrier costs. The result's configuration says `barriers: none (debug)`.
pub const NO_BARRIERS_ENV: &str = "GPUFLEET_DEBUG_VULKAN_NO_BARRIERS";

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

    #[allow(clippy::too_many_arguments)]
    pub(super) fn record(
        &mut self,
        plan: &Plan,
        sets: &[vk::DescriptorSet],
        device_inputs: &[DevBuffer],
        staging_inputs: &[DevBuffer],
        scratch: &[DevBuffer],
        mode: Mode,
    ) -> Result<(), BackendError> {
        let dev = self.dev().clone();
        self.overlap = debug_switch(NO_BARRIERS_ENV);
        if self.overlap {
            self.config.insert("barriers".into(), "none (debug)".into());
        }
        // A replayed decode records one pass once, in a secondary command buffer (not when every
        // dispatch is timed: the profile needs a timestamp after each).
        // A chained plan's counters are one a dispatch: recorded inline (kernel/chain.rs).
        let inline = debug_switch(INLINE_ENV) || self.chain.is_some();
        let replay = (plan.passes.replay.as_ref()).filter(|_| self.profile.is_empty() && !inline);
        let body = match replay {
            Some(r) => Some(self.record_body(plan, sets, r.body.clone())?),
            None => None,
        };
        let mut recorded = plan.dispatches.len();
        if let Some(r) = replay {
            // The kept passes that run their own dispatches, and those dispatches.
            let own: Vec<usize> = (r.passes.iter())
                .filter_map(|p| match p {
                    Replayed::Own(range) => Some(range.len()),
                    Replayed::Body { .. } => None,
                })
                .collect();
            recorded = r.prologue + r.body.len() + own.iter().sum::<usize>();
            self.config.insert(
                "replay".into(),
                format!(
                    "{} passes replay one recorded pass of {} dispatches, {} kept run their own",
                    r.passes.len() - own.len(),
                    r.body.len(),
                    own.len()
                ),
            );
        }
        self.config
            .insert("recorded_dispatches".into(), recorded.to_string());
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
            let uploads = mode == Mode::WithTransfers && self.transfer.is_none();
            if uploads {
                for (st, d) in staging_inputs.iter().zip(device_inputs) {
                    Self::record_copy(&dev, cb, *st, *d);
                }
            }
            // The pass shift starts at zero, or at the first replayed pass's. Each replay's LM head
            // adds one for the next: a write by the GPU between passes, as a fill between them
            // cost the H200 about 20 µs a token (docs/PERFORMANCE.md).
            let shift = plan.passes.shift.map(|i| scratch[i].buffer);
            let first = match replay.and_then(|r| r.passes.first()) {
                Some(Replayed::Body { shift, .. }) => *shift,
                _ => 0,
            };
            if let Some(b) = shift {
                dev.cmd_fill_buffer(cb, b, 0, 4, first);
            }
            if let Some(c) = &self.chain {
                dev.cmd_fill_buffer(cb, scratch[c.counters].buffer, 0, vk::WHOLE_SIZE, 0);
            }
            if uploads || shift.is_some() || self.chain.is_some() {
                barrier(&dev, cb, TRANSFER, COMPUTE);
            }
            match (replay, body, shift, plan.passes.replay.as_ref()) {
                (Some(r), Some(body), Some(buf), _) => {
                    self.record_dispatches(&dev, cb, plan, sets, 0..r.prologue);
                    self.record_replay(&dev, cb, plan, sets, r, body, buf, first);
                }
                (None, _, Some(buf), Some(r)) => {
                    // Inline: the passes after the body's need the shift back at zero.
                    self.record_dispatches(&dev, cb, plan, sets, 0..r.body.end);
                    set_shift(&dev, cb, buf, 0);
                    let rest = r.body.end..plan.dispatches.len();
                    self.record_dispatches(&dev, cb, plan, sets, rest);
                }
                _ => self.record_dispatches(&dev, cb, plan, sets, 0..plan.dispatches.len()),
            }
            if uploads {
                barrier(&dev, cb, COMPUTE | TRANSFER, TRANSFER);
                // The readback buffer has the output's size.
                Self::record_copy(&dev, cb, self.output, self.readback);
            }
            if timed {
                dev.cmd_write_timestamp(cb, vk::PipelineStageFlags::BOTTOM_OF_PIPE, self.query, 1);
            }
            if let (Some(c), Some(word)) = (&self.chain, self.chain_error) {
                barrier(&dev, cb, COMPUTE, TRANSFER);
                Self::record_copy(&dev, cb, scratch[c.counters], word);
            }
            dev.end_command_buffer(cb)
                .map_err(|e| fail("vkEndCommandBuffer", e))?;
        }
        Ok(())
    }

    /// The passes of `r`: the body (the secondary command buffer `body`) or a pass's own
    /// dispatches, each with the shift it needs in `buf` (which holds `at` first).
    #[allow(clippy::too_many_arguments)]
    fn record_replay(
        &self,
        dev: &ash::Device,
        cb: vk::CommandBuffer,
        plan: &Plan,
        sets: &[vk::DescriptorSet],
        r: &Replay,
        body: vk::CommandBuffer,
        buf: vk::Buffer,
        mut at: u32,
    ) {
        let region = r.region.clone().unwrap_or_default();
        for pass in &r.passes {
            let want = match pass {
                Replayed::Body { shift, .. } => *shift,
                Replayed::Own(_) => 0,
            };
            // The last pass (or the prologue) has written what the next reads, and the shift.
            if want == at {
                barrier(dev, cb, COMPUTE, COMPUTE);
            } else {
                set_shift(dev, cb, buf, want);
            }
            match pass {
                Replayed::Body { copy_to, .. } => {
                    // SAFETY: `body` is a secondary command buffer of this device, recorded.
                    unsafe { dev.cmd_execute_commands(cb, &[body]) };
                    at = want.wrapping_add(1);
                    if let Some(to) = copy_to {
                        barrier(dev, cb, COMPUTE, TRANSFER);
                        let copy = vk::BufferCopy {
                            src_offset: 4 * region.start as u64,
                            dst_offset: 4 * *to as u64,
                            size: 4 * region.len() as u64,
                        };
                        let out = self.output.buffer;
                        // SAFETY: two disjoint regions of the arena, in the recording state.
                        unsafe { dev.cmd_copy_buffer(cb, out, out, &[copy]) };
                        // The next replay overwrites what this copy reads.
                        barrier(dev, cb, TRANSFER, COMPUTE);
                    }
                }
                Replayed::Own(range) => self.record_dispatches(dev, cb, plan, sets, range.clone()),
            }
        }
    }

    /// The secondary command buffer of a replayed pass: its dispatches `range`, executed once per
    /// pass from the timed command buffer.
    fn record_body(
        &mut self,
        plan: &Plan,
        sets: &[vk::DescriptorSet],
        range: Range<usize>,
    ) -> Result<vk::CommandBuffer, BackendError> {
        let dev = self.dev().clone();
        // SAFETY: a fresh secondary command buffer of our pool, recorded with objects of this
        // device; freed with the pool.
        unsafe {
            let alloc = vk::CommandBufferAllocateInfo::default()
                .command_pool(self.pool)
                .level(vk::CommandBufferLevel::SECONDARY)
                .command_buffer_count(1);
            let cb = dev
                .allocate_command_buffers(&alloc)
                .map_err(|e| fail("vkAllocateCommandBuffers (secondary)", e))?[0];
            let inheritance = vk::CommandBufferInheritanceInfo::default();
            // Executed many times from one primary command buffer: simultaneous use.
            let begin = vk::CommandBufferBeginInfo::default()
                .flags(vk::CommandBufferUsageFlags::SIMULTANEOUS_USE)
                .inheritance_info(&inheritance);
            dev.begin_command_buffer(cb, &begin)
                .map_err(|e| fail("vkBeginCommandBuffer (secondary)", e))?;
            self.record_dispatches(&dev, cb, plan, sets, range);
            dev.end_command_buffer(cb)
                .map_err(|e| fail("vkEndCommandBuffer (secondary)", e))?;
            Ok(cb)
        }
    }

    /// Dispatches `range` of `plan` into `cb`, a compute barrier between each and the next (after
    /// the last, the caller's) unless the next waits on it by counters (`chain.rs`), a timestamp
    /// after each when profiling.
    fn record_dispatches(
        &self,
        dev: &ash::Device,
        cb: vk::CommandBuffer,
        plan: &Plan,
        sets: &[vk::DescriptorSet],
        range: Range<usize>,
    ) {
        let end = range.end;
        for i in range {
            let d = &plan.dispatches[i];
            let (pipeline, layout, _, _) = self.pipelines[self.pipeline_of[i]];
            // SAFETY: recording into a command buffer in the recording state, with this
            // kernel's pipelines and sets.
            unsafe {
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
            }
            // Between dispatches the next one reads what this one wrote. After the last one the
            // caller decides: a compute-to-compute barrier drains the pipe, which an empty
            // kernel's timestamps would otherwise include.
            let chained = (self.chain.as_ref()).is_some_and(|c| c.linked[i]);
            if i + 1 < end && !self.overlap && !chained {
                barrier(dev, cb, COMPUTE, COMPUTE);
            }
        }
    }
}

/// Sets the pass shift in `buf` to `value` between the dispatches before and after.
fn set_shift(dev: &ash::Device, cb: vk::CommandBuffer, buf: vk::Buffer, value: u32) {
    barrier(dev, cb, COMPUTE, TRANSFER);
    // SAFETY: a buffer of this device with transfer-destination usage, in the recording state.
    unsafe { dev.cmd_fill_buffer(cb, buf, 0, 4, value) };
    barrier(dev, cb, TRANSFER, COMPUTE);
}

const COMPUTE: vk::PipelineStageFlags = vk::PipelineStageFlags::COMPUTE_SHADER;
const TRANSFER: vk::PipelineStageFlags = vk::PipelineStageFlags::TRANSFER;

/// A memory barrier from the writes of stages `from` to the reads and writes of stages `to`.
fn barrier(
    dev: &ash::Device,
    cb: vk::CommandBuffer,
    from: vk::PipelineStageFlags,
    to: vk::PipelineStageFlags,
) {
    let access = |s: vk::PipelineStageFlags, what: [vk::AccessFlags; 2]| {
        let mut a = vk::AccessFlags::empty();
        if s.contains(COMPUTE) {
            a |= what[0];
        }
        if s.contains(TRANSFER) {
            a |= what[1];
        }
        a
    };
    let write = [
        vk::AccessFlags::SHADER_WRITE,
        vk::AccessFlags::TRANSFER_WRITE,
    ];
    let b = [vk::MemoryBarrier::default()
        .src_access_mask(access(from, write))
        .dst_access_mask(
            access(
                to,
                [vk::AccessFlags::SHADER_READ, vk::AccessFlags::TRANSFER_READ],
            ) | access(to, write),
        )];
    // SAFETY: recording into a command buffer in the recording state.
    unsafe { dev.cmd_pipeline_barrier(cb, from, to, vk::DependencyFlags::empty(), &b, &[], &[]) };
}
