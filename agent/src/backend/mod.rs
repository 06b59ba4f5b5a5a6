//! Compute backends: one object-safe trait, one folder per backend.
//!
//! Every backend folder has the same shape: `mod.rs` (the [`Backend`]
//! implementation and notes on the backend's internals), `device.rs`
//! (discovery), `kernel.rs` (preparation and launch). A backend that needs a
//! system library loads it at run time, so one agent binary runs on any host
//! and a missing library is an `unavailable` backend with its reason.
//!
//! Backends are only ever called inside a worker process (see
//! [`crate::isolation`]): a driver that crashes or hangs takes down a worker,
//! never the agent.
//!
//! The backends' names are one list below both binaries, [`gpufleet_kernels::BackendKind`]: the
//! coordinator checks `--backend` against it, the catalog says per kernel which backends
//! implement it, and [`registry::all`] builds one backend per kind compiled into this binary
//! ([`registry::of`]).
//!
//! Adding a backend:
//! 1. a variant of `BackendKind` (`kernels/src/backend.rs`), with its name;
//! 2. a folder here with the files every backend has (declared below), its [`Backend`]
//!    returning that kind;
//! 3. its arm in [`registry::of`] (the compiler asks for it);
//! 4. the kind in the `backends` of every catalog kernel it implements (`kernels/src/catalog/`;
//!    a GPU backend's support list is [`planning::gpu_support`] of its kind), and its device
//!    sources under `kernels/` if it has any.
//!
//! # Layout
//!
//! - [`cpu`], [`opencl`], [`vulkan`], `hip` (cargo feature `hip`): one folder per backend.
//! - [`registry`]: the one registry, a backend per [`gpufleet_kernels::BackendKind`] compiled in.
//! - [`planning`]: what the OpenCL, Vulkan and HIP planners share (the `Unsupported` error, the
//!   support list from the catalog, element-wise and row launches from the families' entry
//!   points, bounded integer arguments, conv2d window arguments and im2col chunking, GEMM size
//!   arguments, blocked-GEMM tile rules and candidates, a network's launches).
//! - [`tuning`]: the one autotuner (search, validation, timing) and its cache, keyed by device,
//!   problem class and a hash of the kernel's device code.
//! - [`lookup`]: the device lookup every GPU backend's `prepare` does (by id, or `unavailable`).
//! - [`storage`]: how buffers are stored on a device (f32, or f16 converted on the host).
//! - [`peaks`]: theoretical peaks from spec tables and formulas.

pub mod cpu;
#[cfg(feature = "hip")]
pub mod hip;
pub mod lookup;
pub mod opencl;
pub mod peaks;
pub mod planning;
pub mod registry;
pub mod storage;
pub mod tuning;
pub mod vulkan;

use gpufleet_kernels::{BackendKind, Buffer, Problem};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// A device as a backend sees it. Crosses the worker boundary as JSON and
/// becomes a `gpufleet.v1.Device` on the wire.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// Stable id `<backend>:<pci bus id | uuid | index>`.
    pub id: String,
    pub backend: String,
    pub vendor: String,
    pub name: String,
    /// ISA / architecture, e.g. `gfx803`, `sm_90`, `x86_64-avx2`.
    pub arch: String,
    /// The join key with power sensors; empty where there is none.
    pub pci_bus_id: String,
    pub compute_units: u32,
    pub clock_mhz: u32,
    pub memory_bytes: u64,
    pub driver_version: String,
    pub api_version: String,
    pub features: Vec<String>,
    pub peaks: Peaks,
    /// `cpu`, `discrete_gpu`, `integrated_gpu`, `virtual_gpu`, `other`.
    pub device_type: String,
}

/// Theoretical peaks and where each came from, so "% of peak" can be judged.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Peaks {
    pub fp32_flops: f64,
    pub fp16_flops: f64,
    pub memory_bytes_per_s: f64,
    pub fp32_source: String,
    pub fp16_source: String,
    pub memory_source: String,
}

/// How a run is timed (defined with the catalog so every layer parses it the same way).
pub use gpufleet_kernels::Mode;

/// Kernels, variants and dtypes one backend implements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelSupport {
    pub kernel: String,
    pub variants: Vec<String>,
    pub dtypes: Vec<String>,
}

impl KernelSupport {
    /// The list a backend's planner gives as `(kernel, variants, dtypes)`.
    pub fn from_list(list: Vec<(&str, Vec<&str>, Vec<&str>)>) -> Vec<KernelSupport> {
        list.into_iter()
            .map(|(k, v, d)| KernelSupport {
                kernel: k.to_string(),
                variants: v.into_iter().map(str::to_string).collect(),
                dtypes: d.into_iter().map(str::to_string).collect(),
            })
            .collect()
    }
}

/// What can go wrong in a backend. Each variant maps to one run status.
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, Deserialize)]
pub enum BackendError {
    /// The backend's library or driver is missing or refused to start.
    #[error("{backend} unavailable: {reason}")]
    Unavailable { backend: String, reason: String },
    /// The backend cannot run this kernel / variant / dtype / mode here.
    #[error("{backend} does not support {what}")]
    Unsupported { backend: String, what: String },
    /// Device code failed to build; `log` is the build log.
    #[error("{backend}: building {kernel} failed: {log}")]
    Compile {
        backend: String,
        kernel: String,
        log: String,
    },
    /// A driver/API call failed; `call` names the step (`vkQueueSubmit`).
    #[error("{backend}: {call}: {message}")]
    Driver {
        backend: String,
        call: String,
        message: String,
    },
    /// Not enough memory for the problem's buffers.
    #[error("{backend}: out of memory: {message}")]
    OutOfMemory { backend: String, message: String },
}

/// A compute backend. Object safe; every method is safe and reports failure
/// as a [`BackendError`] instead of panicking.
pub trait Backend: Send + Sync {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;

    /// Short name used in device ids and on the command line (`cpu`, `opencl`).
    fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// Loads the driver and enumerates devices.
    ///
    /// # Errors
    /// [`BackendError::Unavailable`] when the library or driver is missing.
    fn discover(&self) -> Result<Vec<DeviceInfo>, BackendError>;

    /// Kernels, variants and dtypes implemented, independent of any device.
    fn kernels(&self) -> Vec<KernelSupport>;

    /// Prepares `job.problem` on `job.device`: allocates buffers, uploads the
    /// inputs (in compute-only mode), builds device code.
    ///
    /// # Errors
    /// `Unsupported`, `Compile`, `OutOfMemory` or `Driver`.
    fn prepare(&self, job: &Prepare<'_>) -> Result<Box<dyn PreparedKernel>, BackendError>;
}

/// What [`Backend::prepare`] is asked to make ready: one problem with its
/// inputs on one device, timed in one mode.
#[derive(Debug, Clone, Copy)]
pub struct Prepare<'a> {
    /// The device as discovery reported it (the backend finds its handles by id).
    pub device: &'a DeviceInfo,
    /// The validated problem.
    pub problem: &'a Problem,
    /// Its seeded inputs, in [`Problem::inputs`] order.
    pub inputs: &'a [Buffer],
    /// Whether host transfers are inside the timed window.
    pub mode: Mode,
    /// How long an autotuner may search before this run ([`tuning::budget`]).
    pub tune_budget: Duration,
}

/// A kernel ready to launch on one device with its buffers bound.
pub trait PreparedKernel {
    /// Runs one iteration and returns its time measured on the device (device
    /// events or timestamps; the monotonic clock on the CPU).
    ///
    /// # Errors
    /// `Driver` when a launch or wait fails.
    fn run(&mut self) -> Result<Duration, BackendError>;

    /// Reads the output of the last iteration back to the host.
    ///
    /// # Errors
    /// `Driver` when the readback fails.
    fn output(&mut self) -> Result<Buffer, BackendError>;

    /// The launch configuration used (tile sizes, work-group shape, library),
    /// recorded with every result.
    fn config(&self) -> BTreeMap<String, String>;
}

/// One entry of a planner's support list: kernel, its variants, its dtypes.
pub type SupportEntry = (&'static str, Vec<&'static str>, Vec<&'static str>);

/// Which part of a problem a backend's support list lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    Kernel,
    Variant,
    Dtype,
}

/// A problem a backend's support list does not cover: what is missing, the message every
/// backend gives for it, and the kernel's entry when the kernel is listed.
#[derive(Debug, Clone, PartialEq)]
pub struct NotListed {
    pub missing: Missing,
    pub message: String,
    pub entry: Option<SupportEntry>,
}

/// Checks `problem` against a planner's support `list` for `backend` (`opencl`); `no_kernel`
/// is the reason given for a kernel the backend simply lacks ("the OpenCL backend has no kernel
/// for it"). Host-only and crashing kernels get their own reasons.
///
/// # Errors
/// [`NotListed`] for the first of kernel, variant, dtype that is not listed.
pub fn check_listed(
    list: Vec<SupportEntry>,
    problem: &Problem,
    backend: &str,
    no_kernel: &str,
) -> Result<(), NotListed> {
    let name = problem.kernel.name;
    let Some(entry) = list.into_iter().find(|(k, _, _)| *k == name) else {
        let why = if problem.kernel.host_only {
            "it measures host memory, so only the cpu backend runs it"
        } else if problem.kernel.debug {
            "it crashes, hangs or exhausts its worker on purpose, which the cpu backend covers"
        } else {
            no_kernel
        };
        return Err(NotListed {
            missing: Missing::Kernel,
            message: format!("kernel {name} is not available on {backend}: {why}"),
            entry: None,
        });
    };
    let (missing, message) = if !entry.1.contains(&problem.variant.as_str()) {
        (
            Missing::Variant,
            format!(
                "variant `{}` of {name} is not implemented on {backend} (implemented: {})",
                problem.variant,
                entry.1.join(", ")
            ),
        )
    } else if !entry.2.contains(&problem.dtype.name()) {
        (
            Missing::Dtype,
            format!(
                "dtype {} of {name} is not implemented on {backend} (implemented: {})",
                problem.dtype,
                entry.2.join(", ")
            ),
        )
    } else {
        return Ok(());
    };
    Err(NotListed {
        missing,
        message,
        entry: Some(entry),
    })
}

/// Whether the debug switch `name` (a `GPUFLEET_DEBUG_*` variable of the worker) is on: set to `1`.
pub(crate) fn debug_switch(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| v == "1")
}

/// A problem's integer parameter as `usize` for the planners (0 when absent or negative).
pub(crate) fn param(problem: &Problem, name: &str) -> usize {
    usize::try_from(problem.params.get(name).copied().unwrap_or(0)).unwrap_or(0)
}

/// The launch configuration recorded with a result, from (name, value) pairs.
pub(crate) fn config(entries: &[(&str, String)]) -> BTreeMap<String, String> {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// True when `support` lists `variant` of `kernel` in `dtype`.
pub fn supports(support: &[KernelSupport], kernel: &str, variant: &str, dtype: &str) -> bool {
    support.iter().any(|s| {
        s.kernel == kernel
            && s.variants.iter().any(|v| v == variant)
            && s.dtypes.iter().any(|d| d == dtype)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(kernel: &str, variant: &str, dtype: &str) -> Problem {
        Problem::new(kernel, variant, &Default::default(), dtype, true).unwrap()
    }

    #[test]
    fn support_list_misses_name_the_part_and_the_alternatives() {
        let list = || vec![("gemm", vec!["naive", "tiled"], vec!["f32"])];
        assert_eq!(
            check_listed(list(), &problem("gemm", "tiled", "f32"), "x", "-"),
            Ok(())
        );
        let m = check_listed(list(), &problem("gemm", "blocked", "f32"), "x", "-").unwrap_err();
        assert_eq!(m.missing, Missing::Variant);
        assert_eq!(
            m.message,
            "variant `blocked` of gemm is not implemented on x (implemented: naive, tiled)"
        );
        let m = check_listed(list(), &problem("gemm", "naive", "f16"), "x", "-").unwrap_err();
        assert_eq!(m.missing, Missing::Dtype);
        assert_eq!(
            m.message,
            "dtype f16 of gemm is not implemented on x (implemented: f32)"
        );
        assert_eq!(m.entry.unwrap().2, vec!["f32"]);
        let m = check_listed(
            list(),
            &problem("copy", "default", "f32"),
            "x",
            "no copy here",
        )
        .unwrap_err();
        assert_eq!(m.missing, Missing::Kernel);
        assert_eq!(m.message, "kernel copy is not available on x: no copy here");
        let m =
            check_listed(list(), &problem("membw_cpu", "default", "f32"), "x", "-").unwrap_err();
        assert!(
            m.message.ends_with("only the cpu backend runs it"),
            "{}",
            m.message
        );
    }
}
