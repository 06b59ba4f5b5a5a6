//! A plan bound to a Vulkan device: buffers (device-local, filled through
//! staging), one compute pipeline per dispatch with its specialization
//! constants (through an on-disk pipeline cache), descriptor sets, and one
//! pre-recorded command buffer with timestamps around the work.

mod buffers;
mod chain;
mod record;
mod segments;
mod stats;
mod switches;

pub use stats::PIPELINE_STATS_ENV;
pub use switches::{
    NO_COOPMAT_ENV, NO_TILE_ATTENTION_ENV, QUANT_BLOCKS_ENV, QUANT_DOT_ENV, SCALAR_ATTENTION_ENV,
};

use super::device::{Found, create_device, enumerate};
use super::ffi::{Vk, fail};
use super::plan::{self, Binding, Dispatch, Passes, Plan, SpecValue, Storage};
use crate::backend::planning::{Direction, Transfer};
use crate::backend::storage;
use crate::backend::{BackendError, Mode, PreparedKernel, debug_switch, lookup};
use crate::cache;
use ash::vk;
use gpufleet_kernels::{Buffer, Problem};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A buffer and the memory bound to it.
#[derive(Clone, Copy)]
struct DevBuffer {
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    size: u64,
}

/// A debug switch: the largest allocation in bytes, below the device's maxMemoryAllocationSize,
/// so that a small model's weights are made in segments (`kernel/segments.rs`) as a large one's
/// are, where CI can validate them.
pub const MAX_ALLOCATION_ENV: &str = "GPUFLEET_DEBUG_VULKAN_MAX_ALLOCATION";

/// Everything made on the device, destroyed in reverse order on drop.
pub struct VulkanKernel {
    // Declared first, dropped... manually in Drop (the device must go before the instance).
    vk: Option<Arc<Vk>>,
    device: Option<ash::Device>,
    queue: vk::Queue,
    pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
    fence: vk::Fence,
    query: vk::QueryPool,
    desc_pool: vk::DescriptorPool,
    pipeline_cache: vk::PipelineCache,
    pipelines: Vec<(
        vk::Pipeline,
        vk::PipelineLayout,
        vk::DescriptorSetLayout,
        vk::ShaderModule,
    )>,
    /// `pipelines[pipeline_of[i]]` runs dispatch i: dispatches with the same shader, constants
    /// and interface share one pipeline (a network's layers all run `model_layer`).
    pipeline_of: Vec<usize>,
    buffers: Vec<DevBuffer>,
    output: DevBuffer,
    readback: DevBuffer,
    output_storage: Storage,
    output_len: usize,
    timestamp_ns: f64,
    timestamp_mask: u64,
    config: BTreeMap<String, String>,
    /// `transfer`: what the timed command buffer copies instead of dispatching (see
    /// `record.rs`), and for pageable host memory the host side (`run` copies through it).
    transfer: Option<(Transfer, Vec<u8>)>,
    /// Input 0 in its host-visible staging buffer and on the device (h2d reads the first, d2h
    /// and d2d the second).
    staging_input: Option<DevBuffer>,
    /// The dispatches' labels when each is timed ([`record::PROFILE_ENV`]), else empty.
    profile: Vec<String>,
    /// No barrier between a plan's consecutive dispatches ([`record::NO_BARRIERS_ENV`]).
    overlap: bool,
    /// Counters instead of barriers between some dispatches ([`chain::CHAIN_ENV`]), and the
    /// host-visible copy of their error word.
    chain: Option<chain::Chain>,
    chain_error: Option<DevBuffer>,
    /// The driver's statistics of each pipeline are asked for ([`stats::PIPELINE_STATS_ENV`]).
    stats: Option<ash::khr::pipeline_executable_properties::Device>,
}

impl VulkanKernel {
    fn dev(&self) -> &ash::Device {
        self.device.as_ref().expect("device lives until drop")
    }

    /// Prepares `problem` on the device `id`.
    ///
    /// # Errors
    /// `Unavailable`, `Unsupported`, `OutOfMemory` or `Driver` with the step.
    pub fn new(
        id: &str,
        problem: &Problem,
        inputs: &[Buffer],
        mode: Mode,
        tuning: Option<&plan::GemmTuning>,
    ) -> Result<Self, BackendError> {
        let vk = Vk::shared()?;
        let found: Found = lookup::find("vulkan", enumerate(&vk)?, id)?;
        let transfer = Transfer::of(problem);
        let mut plan = match transfer {
            // A copy in the timed command buffer instead of dispatches: nothing is bound.
            Some(t) => Plan {
                input_storage: vec![Storage::F32],
                output_storage: Storage::F32,
                scratch_bytes: Vec::new(),
                passes: Passes::default(),
                dispatches: Vec::new(),
                config: t.config(
                    if t.pinned || t.direction == Direction::DeviceToDevice {
                        "vkCmdCopyBuffer"
                    } else {
                        "memcpy through a host-visible buffer + vkCmdCopyBuffer (host clock)"
                    },
                    "host-visible coherent memory",
                ),
            },
            None => {
                let caps = switches::planning_caps(&found.caps);
                plan::plan(problem, &caps, tuning).map_err(|e| e.for_backend("vulkan"))?
            }
        };
        // A binding past maxStorageBufferRange reads garbage on some drivers
        // (lavapipe: 128 MiB) instead of failing, so refuse it up front (a transfer binds none).
        let limit = u64::from(found.max_storage_buffer_range);
        if let Some((what, big)) = plan::bound_bytes(problem, &plan).find(|(_, n)| *n > limit) {
            return Err(BackendError::Unsupported {
                backend: "vulkan".into(),
                what: format!(
                    "{} with {}: {what} binds {big} bytes, above maxStorageBufferRange ({limit} bytes) of {id}",
                    problem.kernel.name,
                    problem.params_string()
                ),
            });
        }
        let chain = debug_switch(chain::CHAIN_ENV)
            .then(|| chain::chain(&mut plan))
            .flatten();
        let inst = &vk.instance;
        let device = create_device(&vk, &found, stats::wanted())?;
        let mut config = plan.config.clone();
        let stats = stats::open(inst, &found, &device, &mut config);
        // SAFETY: queue 0 of a family we created.
        let queue = unsafe { device.get_device_queue(found.queue_family, 0) };
        // SAFETY: `found.physical` was enumerated from `inst`, which is alive here; the call only
        // fills a plain-data struct.
        let mem = unsafe { inst.get_physical_device_memory_properties(found.physical) };
        let mut k = VulkanKernel {
            vk: None,
            device: Some(device),
            queue,
            pool: vk::CommandPool::null(),
            cmd: vk::CommandBuffer::null(),
            fence: vk::Fence::null(),
            query: vk::QueryPool::null(),
            desc_pool: vk::DescriptorPool::null(),
            pipeline_cache: vk::PipelineCache::null(),
            pipelines: Vec::new(),
            pipeline_of: Vec::new(),
            buffers: Vec::new(),
            output: DevBuffer {
                buffer: vk::Buffer::null(),
                memory: vk::DeviceMemory::null(),
                size: 0,
            },
            readback: DevBuffer {
                buffer: vk::Buffer::null(),
                memory: vk::DeviceMemory::null(),
                size: 0,
            },
            output_storage: plan.output_storage,
            output_len: problem.output_len(),
            timestamp_ns: found.timestamp_period as f64,
            timestamp_mask: if found.timestamp_bits >= 64 {
                u64::MAX
            } else {
                (1u64 << found.timestamp_bits) - 1
            },
            config,
            transfer: transfer.map(|t| (t, Vec::new())),
            staging_input: None,
            profile: Vec::new(),
            overlap: false,
            chain,
            chain_error: None,
            stats,
        };
        k.vk = Some(vk);
        k.build(&found, &plan, &mem, inputs, mode)?;
        Ok(k)
    }

    /// Creates dispatch `d`'s pipeline (shader module, set layout, pipeline layout, pipeline
    /// through the pipeline cache) and appends it to `pipelines`.
    fn create_pipeline(&mut self, dev: &ash::Device, d: &Dispatch) -> Result<(), BackendError> {
        let code = ash::util::read_spv(&mut std::io::Cursor::new(d.spirv)).map_err(|e| {
            BackendError::Compile {
                backend: "vulkan".into(),
                kernel: d.shader.clone(),
                log: format!("invalid SPIR-V: {e}"),
            }
        })?;
        let layout_bindings: Vec<_> = (0..d.bindings.len() as u32)
            .map(|i| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(i)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let mut spec_data = Vec::new();
        let entries: Vec<_> = d
            .spec
            .iter()
            .map(|(id, v)| {
                let offset = spec_data.len() as u32;
                spec_data.extend_from_slice(&match v {
                    SpecValue::U32(x) => x.to_le_bytes(),
                    SpecValue::I32(x) => x.to_le_bytes(),
                    SpecValue::F32(x) => x.to_le_bytes(),
                });
                vk::SpecializationMapEntry::default()
                    .constant_id(*id)
                    .offset(offset)
                    .size(4)
            })
            .collect();
        let spec = vk::SpecializationInfo::default()
            .map_entries(&entries)
            .data(&spec_data);
        // SAFETY: `dev` is this kernel's device and every create info is built above from valid
        // slices that outlive the calls; the SPIR-V words come from our own compiled shaders. The
        // pipeline's handles are pushed to `self.pipelines` (a null pipeline when its creation
        // fails), so Drop destroys them.
        unsafe {
            let module = dev
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&code), None)
                .map_err(|e| fail(&format!("vkCreateShaderModule({})", d.shader), e))?;
            let dsl = dev
                .create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default().bindings(&layout_bindings),
                    None,
                )
                .map_err(|e| fail("vkCreateDescriptorSetLayout", e))?;
            let ranges = [vk::PushConstantRange::default()
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
                .size((d.push.len() * 4) as u32)];
            let layouts = [dsl];
            let mut pl = vk::PipelineLayoutCreateInfo::default().set_layouts(&layouts);
            if !d.push.is_empty() {
                pl = pl.push_constant_ranges(&ranges);
            }
            let layout = dev
                .create_pipeline_layout(&pl, None)
                .map_err(|e| fail("vkCreatePipelineLayout", e))?;
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(module)
                .name(c"main")
                .specialization_info(&spec);
            let info = [vk::ComputePipelineCreateInfo::default()
                .flags(stats::flags(self.stats.is_some()))
                .stage(stage)
                .layout(layout)];
            let pipeline = match dev.create_compute_pipelines(self.pipeline_cache, &info, None) {
                Ok(p) => p[0],
                Err((_, e)) => {
                    self.pipelines
                        .push((vk::Pipeline::null(), layout, dsl, module));
                    return Err(fail(&format!("vkCreateComputePipelines({})", d.shader), e));
                }
            };
            self.pipelines.push((pipeline, layout, dsl, module));
        }
        let pipeline = self.pipelines[self.pipelines.len() - 1].0;
        (self.stats.as_ref()).map_or(Ok(()), |e| {
            stats::note(e, &mut self.config, &d.shader, pipeline)
        })
    }

    fn build(
        &mut self,
        found: &Found,
        plan: &Plan,
        mem: &vk::PhysicalDeviceMemoryProperties,
        inputs: &[Buffer],
        mode: Mode,
    ) -> Result<(), BackendError> {
        let dev = self.dev().clone();
        // SAFETY: `dev` is this kernel's live device and `found.queue_family` the family it was
        // created with; each create info is built here and outlives its call; each handle is
        // stored in `self` right away, so Drop destroys it once even when a later step fails.
        unsafe {
            let pool_info = vk::CommandPoolCreateInfo::default()
                .queue_family_index(found.queue_family)
                .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
            self.pool = dev
                .create_command_pool(&pool_info, None)
                .map_err(|e| fail("vkCreateCommandPool", e))?;
            self.fence = dev
                .create_fence(&vk::FenceCreateInfo::default(), None)
                .map_err(|e| fail("vkCreateFence", e))?;
            if found.timestamp_bits > 0 {
                if debug_switch(record::PROFILE_ENV) {
                    self.profile = plan.dispatches.iter().map(|d| d.label.clone()).collect();
                }
                let q = vk::QueryPoolCreateInfo::default()
                    .query_type(vk::QueryType::TIMESTAMP)
                    .query_count(2 + self.profile.len() as u32);
                self.query = dev
                    .create_query_pool(&q, None)
                    .map_err(|e| fail("vkCreateQueryPool", e))?;
            }
        }
        // Buffers: device-local inputs (in segments where sliced, `segments.rs`) filled through
        // staging buffers, kept where the timed command buffer copies from them.
        let keep = mode == Mode::WithTransfers || self.transfer.is_some();
        let limit = std::env::var(MAX_ALLOCATION_ENV)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(found.max_allocation, |v| v.min(found.max_allocation));
        let mut placed = Vec::new();
        let mut staging_inputs = Vec::new();
        for (i, (b, s)) in inputs.iter().zip(&plan.input_storage).enumerate() {
            let p = self.place(mem, plan, i, b, *s, limit, keep, &mut staging_inputs)?;
            if p.segments.len() > 1 {
                self.config.insert(
                    format!("input{i}_buffers"),
                    format!(
                        "{} (allocations of at most {limit} bytes)",
                        p.segments.len()
                    ),
                );
            }
            placed.push(p);
        }
        // Every segment in order, as `staging_inputs` holds their staging buffers.
        let device_inputs: Vec<DevBuffer> = placed
            .iter()
            .flat_map(|p| p.segments.iter().map(|s| s.2))
            .collect();
        self.staging_input = staging_inputs.first().copied();
        if let Some((t, host)) = &mut self.transfer
            && !t.pinned
        {
            *host = inputs
                .first()
                .map(|b| storage::to_bytes(b, Storage::F32))
                .unwrap_or_default();
        }
        let out_bytes = (self.output_len * plan.output_storage.size()) as u64;
        self.output = self.create_buffer(mem, out_bytes, false)?;
        self.readback = self.create_buffer(mem, out_bytes, true)?;
        // Zeros once: a transformer's arena has regions no step writes (validation scans it all
        // for NaN), and fresh device memory holds whatever was there.
        self.fill_zero_now(self.output)?;
        let mut scratch = Vec::new();
        for &n in &plan.scratch_bytes {
            scratch.push(self.create_buffer(mem, n as u64, false)?);
        }
        if self.chain.is_some() {
            self.chain_error = Some(self.create_buffer(mem, 4, true)?);
        }
        let output = self.output;
        let resolve = |b: &Binding| match b {
            Binding::Input(i) | Binding::Slice { input: i, .. } => placed[*i].bound(b),
            Binding::Output => (output.buffer, 0, vk::WHOLE_SIZE),
            Binding::Scratch(i) => (scratch[*i].buffer, 0, vk::WHOLE_SIZE),
        };
        let cache_path = cache::dir().join("vulkan").join(format!(
            "{:016x}.pipeline_cache",
            cache::fnv64(&[found.fingerprint.as_bytes()])
        ));
        let initial = std::fs::read(&cache_path).unwrap_or_default();
        let total_bindings: u32 = plan
            .dispatches
            .iter()
            .map(|d| d.bindings.len() as u32)
            .sum();
        // SAFETY: `dev` is this kernel's live device; `pc` borrows `initial` and `dp` borrows
        // `sizes`, both alive through their calls; the cache and the pool go into `self` right
        // away, so Drop destroys them once even when a later step fails.
        unsafe {
            let pc = vk::PipelineCacheCreateInfo::default().initial_data(&initial);
            self.pipeline_cache = dev
                .create_pipeline_cache(&pc, None)
                .or_else(|_| {
                    dev.create_pipeline_cache(&vk::PipelineCacheCreateInfo::default(), None)
                })
                .map_err(|e| fail("vkCreatePipelineCache", e))?;
            let sizes = [vk::DescriptorPoolSize::default()
                .ty(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(total_bindings.max(1))];
            let dp = vk::DescriptorPoolCreateInfo::default()
                .max_sets(plan.dispatches.len().max(1) as u32)
                .pool_sizes(&sizes);
            self.desc_pool = dev
                .create_descriptor_pool(&dp, None)
                .map_err(|e| fail("vkCreateDescriptorPool", e))?;
        }
        let mut sets = Vec::new();
        for (i, d) in plan.dispatches.iter().enumerate() {
            let same = plan.dispatches[..i].iter().position(|p| {
                p.shader == d.shader
                    && p.spec == d.spec
                    && p.push.len() == d.push.len()
                    && p.bindings.len() == d.bindings.len()
            });
            let index = match same {
                Some(j) => self.pipeline_of[j],
                None => {
                    self.create_pipeline(&dev, d)?;
                    self.pipelines.len() - 1
                }
            };
            self.pipeline_of.push(index);
            let layouts = [self.pipelines[index].2];
            // SAFETY: `self.desc_pool` was created above with room for one set per dispatch and
            // `layouts` holds a live layout of this device; each write names that fresh set and a
            // live buffer of this kernel (`resolve`), with `infos` alive through the update.
            unsafe {
                let alloc = vk::DescriptorSetAllocateInfo::default()
                    .descriptor_pool(self.desc_pool)
                    .set_layouts(&layouts);
                let set = dev
                    .allocate_descriptor_sets(&alloc)
                    .map_err(|e| fail("vkAllocateDescriptorSets", e))?[0];
                let infos: Vec<[vk::DescriptorBufferInfo; 1]> = d
                    .bindings
                    .iter()
                    .map(|b| {
                        let (buffer, offset, range) = resolve(b);
                        [vk::DescriptorBufferInfo::default()
                            .buffer(buffer)
                            .offset(offset)
                            .range(range)]
                    })
                    .collect();
                let writes: Vec<_> = infos
                    .iter()
                    .enumerate()
                    .map(|(i, info)| {
                        vk::WriteDescriptorSet::default()
                            .dst_set(set)
                            .dst_binding(i as u32)
                            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                            .buffer_info(info)
                    })
                    .collect();
                dev.update_descriptor_sets(&writes, &[]);
                sets.push(set);
            }
        }
        // SAFETY: a valid pipeline cache of this device.
        if let Ok(data) = unsafe { dev.get_pipeline_cache_data(self.pipeline_cache) } {
            if let Some(parent) = cache_path.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            let tmp = cache_path.with_extension(format!("tmp{}", std::process::id()));
            if std::fs::write(&tmp, &data).is_ok() {
                let _ = std::fs::rename(&tmp, &cache_path);
            }
        }
        self.config.insert(
            "pipeline_cache".into(),
            if initial.is_empty() { "miss" } else { "hit" }.into(),
        );
        self.config.insert(
            "timing".into(),
            if self.query != vk::QueryPool::null() {
                "timestamps"
            } else {
                "host clock (no timestamps)"
            }
            .into(),
        );
        self.record(plan, &sets, &device_inputs, &staging_inputs, &scratch, mode)
    }
}

impl PreparedKernel for VulkanKernel {
    fn run(&mut self) -> Result<Duration, BackendError> {
        let host_start = Instant::now();
        // A pageable transfer: the host copy into or out of the host-visible buffer is part of
        // it, so the host clock times the whole.
        if let Some((t, mut host)) = self.transfer.take_if(|(t, _)| !t.pinned) {
            let done = match (t.direction, self.staging_input) {
                (Direction::HostToDevice, Some(staging)) => self
                    .write_host(staging, &host)
                    .and_then(|()| self.submit_and_wait(self.cmd)),
                (Direction::DeviceToHost, _) => self
                    .submit_and_wait(self.cmd)
                    .and_then(|()| self.read_host_into(self.readback, &mut host)),
                _ => self.submit_and_wait(self.cmd),
            };
            let elapsed = host_start.elapsed();
            self.transfer = Some((t, host));
            return done.map(|()| elapsed);
        }
        // Waits for completion before the queries are read.
        self.submit_and_wait(self.cmd)?;
        self.check_chain()?;
        let dev = self.dev();
        if self.query == vk::QueryPool::null() {
            return Ok(host_start.elapsed());
        }
        let mut ts = vec![0u64; 2 + self.profile.len()];
        // SAFETY: the 64-bit timestamp queries written by the finished submit (two, and one a
        // dispatch when profiled).
        unsafe {
            dev.get_query_pool_results(
                self.query,
                0,
                &mut ts,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
            .map_err(|e| fail("vkGetQueryPoolResults", e))?;
        }
        self.note_profile(&ts);
        Ok(Duration::from_nanos(self.elapsed_ns(ts[0], ts[1]) as u64))
    }

    fn output(&mut self) -> Result<Buffer, BackendError> {
        let (out, rb) = (self.output, self.readback);
        // d2h copied into the readback buffer (pinned) or through it into host memory.
        if let Some((t, host)) = &self.transfer
            && t.direction == Direction::DeviceToHost
        {
            let bytes = if t.pinned {
                self.read_host(rb, t.bytes)?
            } else {
                host.clone()
            };
            return Ok(storage::from_bytes(&bytes, Storage::F32));
        }
        self.copy_now(out, rb)?;
        let bytes = self.read_host(rb, self.output_len * self.output_storage.size())?;
        Ok(storage::from_bytes(&bytes, self.output_storage))
    }

    fn config(&self) -> BTreeMap<String, String> {
        self.config.clone()
    }
}

impl VulkanKernel {
    /// Adds a line to the recorded configuration.
    pub fn note(&mut self, key: &str, value: String) {
        self.config.insert(key.to_string(), value);
    }
}

impl Drop for VulkanKernel {
    fn drop(&mut self) {
        if let Some(dev) = self.device.take() {
            // SAFETY: we wait for the device to be idle, then destroy every
            // object we created (null handles are ignored by Vulkan) before
            // the device itself.
            unsafe {
                let _ = dev.device_wait_idle();
                for (p, l, d, m) in self.pipelines.drain(..) {
                    dev.destroy_pipeline(p, None);
                    dev.destroy_pipeline_layout(l, None);
                    dev.destroy_descriptor_set_layout(d, None);
                    dev.destroy_shader_module(m, None);
                }
                dev.destroy_pipeline_cache(self.pipeline_cache, None);
                dev.destroy_descriptor_pool(self.desc_pool, None);
                for b in self.buffers.drain(..) {
                    dev.destroy_buffer(b.buffer, None);
                    dev.free_memory(b.memory, None);
                }
                dev.destroy_query_pool(self.query, None);
                dev.destroy_fence(self.fence, None);
                dev.destroy_command_pool(self.pool, None);
                dev.destroy_device(None);
            }
        }
        // The instance goes last.
        self.vk.take();
    }
}
