//! Binding and launching plans: buffers, the code object loaded as a module, one stream, and two
//! events around each iteration.

use super::code_objects::{ArchChoice, Embedded};
use super::device::Found;
use super::ffi::{
    self, ArgValue, DeviceBuffer, Event, Function, Graph, Module, PinnedBuffer, Stream,
};
use super::plan::{self, Arg, Launch, Plan};
use crate::backend::storage::{self, Elem};
use crate::backend::{BackendError, Mode, PreparedKernel, debug_switch};
use gpufleet_kernels::{Buffer, KernelId, Problem};
use std::collections::BTreeMap;
use std::time::Duration;

/// A prepared HIP kernel. Field order is drop order: the stream (whose destruction waits for
/// queued work) goes first, the module last, so nothing is freed while the device may use it.
pub struct HipKernel {
    stream: Stream,
    start: Event,
    stop: Event,
    /// The launches captured once as a graph and replayed each iteration (a transformer or a
    /// network in compute-only mode), or `None`: launched one by one.
    graph: Option<Graph>,
    launches: Vec<(Function, Launch, Vec<ArgValue>)>,
    inputs: Vec<DeviceBuffer>,
    output: DeviceBuffer,
    _scratch: Vec<DeviceBuffer>,
    /// Pinned copies of the inputs and the output, used in `with_transfers` mode.
    staged_inputs: Vec<PinnedBuffer>,
    staged_output: Option<PinnedBuffer>,
    _module: Module,
    ordinal: i32,
    mode: Mode,
    output_storage: Elem,
    config: BTreeMap<String, String>,
}

/// `plan`'s arguments with buffers resolved to device addresses.
fn resolve(
    l: &Launch,
    inputs: &[DeviceBuffer],
    output: &DeviceBuffer,
    scratch: &[DeviceBuffer],
) -> Result<Vec<ArgValue>, BackendError> {
    let missing = |what: String| BackendError::Driver {
        backend: "hip".into(),
        call: format!("binding {}", l.kernel),
        message: what,
    };
    l.args
        .iter()
        .map(|a| {
            Ok(match a {
                Arg::Input(i) => ArgValue::Ptr(
                    inputs
                        .get(*i)
                        .ok_or_else(|| missing(format!("no input {i}")))?
                        .device_ptr(),
                ),
                Arg::Output => ArgValue::Ptr(output.device_ptr()),
                Arg::Scratch(i) => ArgValue::Ptr(
                    scratch
                        .get(*i)
                        .ok_or_else(|| missing(format!("no scratch buffer {i}")))?
                        .device_ptr(),
                ),
                Arg::Int(v) => ArgValue::Int(*v),
                Arg::Long(v) => ArgValue::Long(*v),
                Arg::Float(v) => ArgValue::Float(*v),
            })
        })
        .collect()
}

impl HipKernel {
    /// Loads `code` on `found`, allocates and fills the buffers of `plan` and looks up its
    /// kernels.
    ///
    /// # Errors
    /// `OutOfMemory` or `Driver` naming the failing call (hipModuleLoadData with the status the
    /// runtime gives for a code object the device cannot run).
    pub fn new(
        found: &Found,
        code: Embedded,
        choice: &ArchChoice,
        plan: Plan,
        problem: &Problem,
        inputs: &[Buffer],
        mode: Mode,
    ) -> Result<HipKernel, BackendError> {
        ffi::set_device(found.ordinal)?;
        let module = Module::load(code.bytes, code.target)?;
        let stream = Stream::new()?;
        let (start, stop) = (Event::new()?, Event::new()?);
        let host = storage::input_bytes(inputs, &plan.input_storage);
        let mut device_inputs = Vec::with_capacity(host.len());
        for data in &host {
            let mut b = DeviceBuffer::new(data.len())?;
            b.upload(data)?;
            device_inputs.push(b);
        }
        let output_bytes = problem.output_len() * plan.output_storage.size();
        let mut output = DeviceBuffer::new(output_bytes)?;
        // A transformer's arena has regions no step writes (a cache's unused positions): zeros,
        // not whatever the allocation held, for validation's NaN scan (as on OpenCL).
        if problem.id().zeroed_output() {
            output.upload(&vec![0u8; output_bytes])?;
        }
        let scratch = plan
            .scratch_bytes
            .iter()
            .map(|&n| DeviceBuffer::new(n))
            .collect::<Result<Vec<_>, _>>()?;
        let (staged_inputs, staged_output) = if mode == Mode::WithTransfers {
            let mut staged = Vec::with_capacity(host.len());
            for data in &host {
                let mut p = PinnedBuffer::new(data.len())?;
                p.as_mut_slice()[..data.len()].copy_from_slice(data);
                staged.push(p);
            }
            (staged, Some(PinnedBuffer::new(output_bytes)?))
        } else {
            (Vec::new(), None)
        };
        let mut launches = Vec::with_capacity(plan.launches.len());
        for l in &plan.launches {
            let f = module.function(&l.kernel)?;
            let args = resolve(l, &device_inputs, &output, &scratch)?;
            launches.push((f, l.clone(), args));
        }
        let mut config = plan.config.clone();
        let graph = capture(problem, mode, &stream, &mut launches, &mut config);
        config.insert("code_object".into(), code.target.to_string());
        config.insert("compiler".into(), code.compiler.to_string());
        config.insert("device_arch".into(), choice.device_arch.clone());
        if let Some(v) = &choice.override_value {
            config.insert("hsa_override_gfx_version".into(), v.clone());
        }
        Ok(HipKernel {
            stream,
            start,
            stop,
            graph,
            launches,
            inputs: device_inputs,
            output,
            _scratch: scratch,
            staged_inputs,
            staged_output,
            _module: module,
            ordinal: found.ordinal,
            mode,
            output_storage: plan.output_storage,
            config,
        })
    }
}

impl PreparedKernel for HipKernel {
    /// One iteration timed by events on the stream: the launches, plus the uploads before and the
    /// readback after in `with_transfers` mode.
    fn run(&mut self) -> Result<Duration, BackendError> {
        ffi::set_device(self.ordinal)?;
        self.start.record(&self.stream)?;
        if self.mode == Mode::WithTransfers {
            for (d, p) in self.inputs.iter().zip(&self.staged_inputs) {
                self.stream.upload(d, p)?;
            }
        }
        match &self.graph {
            Some(g) => g.launch(&self.stream)?,
            None => launch_all(&self.stream, &mut self.launches)?,
        }
        if let Some(out) = self.staged_output.as_mut() {
            self.stream.download(out, &self.output)?;
        }
        self.stop.record(&self.stream)?;
        let ms = self.stop.elapsed_since(&self.start)?;
        Ok(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3))
    }

    fn output(&mut self) -> Result<Buffer, BackendError> {
        ffi::set_device(self.ordinal)?;
        self.stream.synchronize()?;
        let mut out = vec![0u8; self.output.bytes()];
        self.output.download(&mut out)?;
        Ok(storage::from_bytes(&out, self.output_storage))
    }

    fn config(&self) -> BTreeMap<String, String> {
        self.config.clone()
    }
}

/// A debug switch: a transformer's or network's launches queued one by one each iteration rather
/// than captured once as a HIP graph, to measure what the graph gives.
pub const NO_GRAPH_ENV: &str = "GPUFLEET_DEBUG_HIP_NO_GRAPH";

/// Queues every launch on `stream`, in order.
fn launch_all(
    stream: &Stream,
    launches: &mut [(Function, Launch, Vec<ArgValue>)],
) -> Result<(), BackendError> {
    for (f, l, args) in launches {
        ffi::launch(stream, f, &l.kernel, l.grid, l.block, args)?;
    }
    Ok(())
}

/// The launches of a transformer or network (compute-only, more than one launch) captured as a
/// graph, replayed by each iteration with one `hipGraphLaunch`; `config` says which (`hip_graph`).
/// A capture that fails (a ROCm without stream capture for this device) leaves the launches one by
/// one, saying why.
fn capture(
    problem: &Problem,
    mode: Mode,
    stream: &Stream,
    launches: &mut [(Function, Launch, Vec<ArgValue>)],
    config: &mut BTreeMap<String, String>,
) -> Option<Graph> {
    let graphed = matches!(problem.id(), KernelId::Llm(_) | KernelId::Model(_));
    if !graphed || mode == Mode::WithTransfers || launches.len() < 2 {
        return None;
    }
    if debug_switch(NO_GRAPH_ENV) {
        config.insert("hip_graph".into(), format!("off ({NO_GRAPH_ENV}=1)"));
        return None;
    }
    match Graph::capture(stream, |s| launch_all(s, launches)) {
        Ok(g) => {
            config.insert(
                "hip_graph".into(),
                format!(
                    "{} launches captured once, replayed each iteration",
                    launches.len()
                ),
            );
            Some(g)
        }
        Err(e) => {
            config.insert("hip_graph".into(), format!("launched one by one: {e}"));
            None
        }
    }
}

/// The plan for `problem` on `found`.
///
/// # Errors
/// `Unsupported` with the planner's reason.
pub fn plan_for(found: &Found, problem: &Problem) -> Result<Plan, BackendError> {
    plan::plan(problem, &found.caps).map_err(|e| BackendError::Unsupported {
        backend: "hip".into(),
        what: e.0,
    })
}
