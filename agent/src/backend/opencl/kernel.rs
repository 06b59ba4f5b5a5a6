//! Building, binding and launching plans; GEMM `blocked` tuned through the shared
//! [`tuning::search`].

use super::device::Found;
use super::ffi::{self, ArgValue, driver};
use super::plan::{self, Arg, GemmTuning, Plan, Storage};
use crate::backend::storage;
use crate::backend::tuning;
use crate::backend::{BackendError, Mode, Prepare, PreparedKernel, debug_switch};
use crate::cache;
use gpufleet_kernels::{Buffer, Problem};
use opencl3::command_queue::{CL_QUEUE_PROFILING_ENABLE, CommandQueue};
use opencl3::context::Context;
use opencl3::kernel::Kernel;
use opencl3::memory::Buffer as ClBuffer;
use opencl3::program::Program;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Builds `plan`'s program, from the binary cache when possible. Returns
/// the program and whether the cache hit.
///
/// # Errors
/// `Compile` with the driver's build log, or `Driver`.
pub fn build(
    ctx: &Context,
    found: &Found,
    plan: &Plan,
    kernel_name: &str,
) -> Result<(Program, bool), BackendError> {
    let key = cache::fnv64(&[
        found.fingerprint.as_bytes(),
        plan.program.options.as_bytes(),
        plan.program.source.as_bytes(),
        env!("CARGO_PKG_VERSION").as_bytes(),
    ]);
    let path: PathBuf = cache::dir().join("opencl").join(format!("{key:016x}.bin"));
    if let Ok(bin) = std::fs::read(&path)
        && let Ok(p) = Program::create_and_build_from_binary(ctx, &[&bin], &plan.program.options)
    {
        return Ok((p, true));
    }
    let mut program = Program::create_from_source(ctx, &plan.program.source).map_err(|e| {
        driver(
            format!("clCreateProgramWithSource({})", plan.program.name),
            e,
        )
    })?;
    if program.build(ctx.devices(), &plan.program.options).is_err() {
        let log = program.get_build_log(found.id).unwrap_or_default();
        return Err(BackendError::Compile {
            backend: "opencl".into(),
            kernel: kernel_name.to_string(),
            log: format!(
                "{} with `{}`:\n{}",
                plan.program.name,
                plan.program.options,
                log.trim()
            ),
        });
    }
    if let Ok(bins) = program.get_binaries()
        && let Some(bin) = bins.into_iter().next().filter(|b| !b.is_empty())
    {
        if let Some(parent) = path.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        // Write then rename, so a concurrent reader never sees half a file.
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &bin).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    }
    Ok((program, false))
}

/// A plan with its program built and its buffers and arguments bound.
struct Bound {
    queue: CommandQueue,
    _program: Program,
    kernels: Vec<(Kernel, plan::Launch)>,
    inputs: Vec<ClBuffer<u8>>,
    output: ClBuffer<u8>,
    _scratch: Vec<ClBuffer<u8>>,
    output_bytes: usize,
    /// Host memory a `with_transfers` iteration reads the output back into, allocated once: a
    /// fresh allocation each iteration made the driver fault in every page inside the timed
    /// window (5x the time of the same read into memory already touched, on an H100).
    readback: Vec<u8>,
    cache_hit: bool,
}

impl Bound {
    fn new(
        ctx: &Context,
        found: &Found,
        plan: &Plan,
        problem: &Problem,
        host: &[Cow<'_, [u8]>],
    ) -> Result<Bound, BackendError> {
        let queue = CommandQueue::create_default(ctx, CL_QUEUE_PROFILING_ENABLE)
            .map_err(|e| driver("clCreateCommandQueue", e))?;
        let (program, cache_hit) = build(ctx, found, plan, problem.kernel.name)?;
        let mut inputs = Vec::with_capacity(host.len());
        for data in host {
            let mut b = ffi::buffer(ctx, data.len())?;
            ffi::write(&queue, &mut b, data, true)?;
            inputs.push(b);
        }
        let output_bytes = problem.output_len() * plan.output_storage.size();
        let mut output = ffi::buffer(ctx, output_bytes)?;
        // A transformer's arena has regions no step writes (a cache's unused positions): zeros,
        // not whatever the allocation held, for validation's NaN scan.
        if problem.id().zeroed_output() {
            ffi::write(&queue, &mut output, &vec![0u8; output_bytes], true)?;
        }
        let scratch = plan
            .scratch_bytes
            .iter()
            .map(|&n| ffi::buffer(ctx, n))
            .collect::<Result<Vec<_>, _>>()?;
        let mut kernels = Vec::new();
        for l in &plan.launches {
            let k = Kernel::create(&program, &l.kernel)
                .map_err(|e| driver(format!("clCreateKernel({})", l.kernel), e))?;
            let args: Vec<ArgValue> = l
                .args
                .iter()
                .map(|a| match a {
                    Arg::Input(i) => ArgValue::Mem(&inputs[*i]),
                    Arg::Output => ArgValue::Mem(&output),
                    Arg::Scratch(i) => ArgValue::Mem(&scratch[*i]),
                    Arg::Int(v) => ArgValue::Int(*v),
                    Arg::Long(v) => ArgValue::Long(*v),
                    Arg::Float(v) => ArgValue::Float(*v),
                })
                .collect();
            ffi::set_args(&k, &l.kernel, &args)?;
            kernels.push((k, l.clone()));
        }
        Ok(Bound {
            queue,
            _program: program,
            kernels,
            inputs,
            output,
            _scratch: scratch,
            output_bytes,
            readback: Vec::new(),
            cache_hit,
        })
    }

    /// One iteration; the device time from the first command's start to the
    /// last one's end (profiling events).
    fn run(
        &mut self,
        uploads: Option<&[Vec<u8>]>,
        readback: bool,
    ) -> Result<Duration, BackendError> {
        let mut events = Vec::new();
        if let Some(host) = uploads {
            for (b, data) in self.inputs.iter_mut().zip(host) {
                events.extend(ffi::write(&self.queue, b, data, false)?);
            }
        }
        // Events only where the timing needs them, the first command and the last: on an H200
        // an event a launch made a `tiny` decode 2.4x slower (about 7.5 us more a launch).
        let last = self.kernels.len().saturating_sub(1);
        for (i, (k, l)) in self.kernels.iter().enumerate() {
            let (global, local) = (&l.global, l.local.as_deref());
            if (i > 0 || !events.is_empty()) && i < last {
                ffi::launch_quiet(&self.queue, k, &l.kernel, global, local)?;
            } else {
                events.push(ffi::launch(&self.queue, k, &l.kernel, global, local)?);
            }
        }
        if readback {
            if self.readback.len() != self.output_bytes {
                self.readback = vec![0u8; self.output_bytes];
            }
            events.extend(ffi::read(&self.queue, &self.output, &mut self.readback)?);
        }
        self.queue.finish().map_err(|e| driver("clFinish", e))?;
        let (Some(first), Some(last)) = (events.first(), events.last()) else {
            return Ok(Duration::ZERO);
        };
        ffi::elapsed(first, last)
    }

    fn output(&self, storage: Storage) -> Result<Buffer, BackendError> {
        let mut out = vec![0u8; self.output_bytes];
        ffi::read(&self.queue, &self.output, &mut out)?;
        Ok(storage::from_bytes(&out, storage))
    }
}

/// A prepared OpenCL kernel.
pub struct OpenClKernel {
    _ctx: Context,
    bound: Bound,
    /// The inputs as uploaded, under [`Mode::WithTransfers`] alone (empty otherwise).
    host: Vec<Vec<u8>>,
    mode: Mode,
    output_storage: Storage,
    config: BTreeMap<String, String>,
}

/// A candidate tuning bound for the autotuner: its plan's buffers and launches.
struct Trial {
    bound: Bound,
    storage: Storage,
}

impl tuning::Trial for Trial {
    fn run(&mut self) -> Result<Duration, BackendError> {
        self.bound.run(None, false)
    }

    fn output(&mut self) -> Result<Buffer, BackendError> {
        self.bound.output(self.storage)
    }
}

/// GEMM `blocked`'s tuning for `found`'s class of `problem`: cached, else searched over
/// [`plan::gemm_candidates`] (a candidate the planner refuses is skipped). Returns the tuning and
/// the line recorded with the result.
fn tuned(
    ctx: &Context,
    found: &Found,
    problem: &Problem,
    inputs: &[Buffer],
    host: &[Cow<'_, [u8]>],
    source: &str,
    budget: Duration,
) -> Result<(GemmTuning, String), BackendError> {
    let key = tuning::key(&found.fingerprint, problem, &[source.as_bytes()]);
    let (entry, line) = tuning::cached_or_search("opencl", &key, || {
        let candidates = plan::gemm_candidates(&found.caps);
        tuning::search(
            "opencl",
            &found.info.id,
            budget,
            candidates,
            problem,
            inputs,
            |cand| {
                let Ok(p) = plan::plan(problem, &found.caps, Some(cand)) else {
                    return Ok(None);
                };
                let bound = Bound::new(ctx, found, &p, problem, host)?;
                Ok(Some(Trial {
                    bound,
                    storage: p.output_storage,
                }))
            },
        )
    })?;
    Ok((entry.tuning, line))
}

/// A debug switch: plan a CPU device (PoCL) as a GPU, so that the transformer's GPU kernels
/// (`llm_gemv`, `llm_gemv_team`, `llm_matmul`) run, and are validated, where no GPU is (CI).
pub const GPU_PLANS_ENV: &str = "GPUFLEET_DEBUG_OPENCL_GPU_PLANS";

/// A debug switch: the transformer's RoPE in its own launch, not folded into the Q/K/V projection.
pub const UNFUSED_ROPE_ENV: &str = "GPUFLEET_DEBUG_OPENCL_UNFUSED_ROPE";

/// An experiment switch: packed team gemvs widen their teams for narrow projections (teams of 32
/// work-items unless set).
pub const WIDE_QUANT_TEAMS_ENV: &str = "GPUFLEET_DEBUG_OPENCL_WIDE_QUANT_TEAMS";

/// `caps` as the planner should see them: a CPU device planned as a GPU under [`GPU_PLANS_ENV`],
/// the RoPE unfused under [`UNFUSED_ROPE_ENV`], wide packed teams under
/// [`WIDE_QUANT_TEAMS_ENV`].
fn planned_caps(caps: &plan::DeviceCaps) -> plan::DeviceCaps {
    let mut caps = caps.clone();
    if debug_switch(GPU_PLANS_ENV) {
        caps.cpu = false;
    }
    caps.unfused_rope = debug_switch(UNFUSED_ROPE_ENV);
    caps.wide_quant_teams = debug_switch(WIDE_QUANT_TEAMS_ENV);
    caps
}

impl OpenClKernel {
    /// Builds and binds `job`'s problem on `found` (tuning GEMM `blocked` first, within
    /// `job.tune_budget`, when its class has no cached tuning).
    ///
    /// # Errors
    /// `Unsupported`, `Compile`, `OutOfMemory` or `Driver`.
    pub fn new(found: &Found, job: &Prepare<'_>) -> Result<Self, BackendError> {
        let (problem, inputs, mode) = (job.problem, job.inputs, job.mode);
        let ctx = Context::from_device(&opencl3::device::Device::new(found.id))
            .map_err(|e| driver("clCreateContext", e))?;
        let caps = planned_caps(&found.caps);
        let base = plan::plan(problem, &caps, None).map_err(|e| e.for_backend("opencl"))?;
        let host = storage::input_bytes(inputs, &base.input_storage);
        let mut config = BTreeMap::new();
        let plan = if tuning::tunable(problem) {
            let (tuning, line) = tuned(
                &ctx,
                found,
                problem,
                inputs,
                &host,
                &base.program.source,
                job.tune_budget,
            )?;
            config.insert("tuning".into(), line);
            plan::plan(problem, &found.caps, Some(&tuning)).map_err(|e| e.for_backend("opencl"))?
        } else {
            base
        };
        let bound = Bound::new(&ctx, found, &plan, problem, &host)?;
        config.extend(plan.config.clone());
        config.insert("program".into(), plan.program.name.clone());
        config.insert("build_options".into(), plan.program.options.clone());
        config.insert(
            "binary_cache".into(),
            if bound.cache_hit { "hit" } else { "miss" }.into(),
        );
        Ok(OpenClKernel {
            _ctx: ctx,
            bound,
            // Kept only where every iteration uploads them again; compute-only runs read the
            // device's copy, so the host's (a whole model's weights) goes now.
            host: match mode {
                Mode::WithTransfers => host.into_iter().map(Cow::into_owned).collect(),
                Mode::ComputeOnly => Vec::new(),
            },
            mode,
            output_storage: plan.output_storage,
            config,
        })
    }
}

impl PreparedKernel for OpenClKernel {
    fn run(&mut self) -> Result<Duration, BackendError> {
        match self.mode {
            Mode::ComputeOnly => self.bound.run(None, false),
            Mode::WithTransfers => self.bound.run(Some(&self.host), true),
        }
    }

    fn output(&mut self) -> Result<Buffer, BackendError> {
        self.bound.output(self.output_storage)
    }

    fn config(&self) -> BTreeMap<String, String> {
        self.config.clone()
    }
}
