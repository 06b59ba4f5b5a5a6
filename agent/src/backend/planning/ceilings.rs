//! The ceiling kernels as every GPU backend runs them: `compute_peak` launched with one work-item
//! per `items` (256 to a group where the device allows it), the entry point
//! `compute_peak_<variant>` and the device features its arithmetic type needs; `transfer`, which
//! launches nothing, as its direction, size and host memory.

use super::{Arg, Unsupported, buffers, int_args};
use gpufleet_kernels::{CHAINS, CeilingKernel, KernelId, Problem};
use std::collections::BTreeMap;

/// Work-items per group of the compute_peak kernels: HIP's compiled size, and OpenCL's and
/// Vulkan's where the device allows it (their one-dimensional group size).
pub const PEAK_GROUP: usize = 256;

/// What a device offers of the arithmetic types beyond fp32 and int32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeakTypes {
    /// Half arithmetic (the fp16 variant), and the feature's name on this API for refusals.
    pub fp16: (bool, &'static str),
    /// Double arithmetic (the fp64 variant), and the feature's name.
    pub fp64: (bool, &'static str),
    /// A dot product of four bytes into an int (the int8 variant), and the feature's name.
    pub int8: (bool, &'static str),
}

/// A compute_peak launch: its entry point and work-items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeakLaunch {
    /// `compute_peak_fp32` and so on.
    pub entry: String,
    /// Work-items (the output's elements).
    pub items: usize,
    /// Pairs of fused multiply-adds per chain.
    pub pairs: usize,
}

impl PeakLaunch {
    /// Groups of `group` work-items covering every work-item.
    pub fn groups(&self, group: usize) -> usize {
        self.items.div_ceil(group)
    }

    /// The arguments of an OpenCL or HIP launch: the constants, the output, then `items` and
    /// `pairs` as `int`s (`largest` names their bound).
    ///
    /// # Errors
    /// [`Unsupported`] when a count exceeds an `int` (the catalog's bounds keep them below).
    pub fn args(&self, problem: &Problem, largest: &str) -> Result<Vec<Arg>, Unsupported> {
        launch_args(
            problem,
            1,
            &[("items", self.items), ("pairs", self.pairs)],
            largest,
        )
    }

    /// The configuration recorded with the result: the entry point (`("kernel", …)` or
    /// `("shader", …)`), `groups` of `group` work-items and the chains per work-item.
    pub fn config(
        &self,
        entry: (&str, String),
        groups: usize,
        group: usize,
    ) -> BTreeMap<String, String> {
        launch_config(
            entry,
            (groups, group),
            [("chains_per_item", CHAINS.to_string())],
        )
    }
}

/// `problem` (compute_peak) as a launch on a device offering `types` on `backend`.
///
/// # Errors
/// [`Unsupported`] for fp16, fp64 or int8 on a device without that arithmetic, naming the
/// feature.
pub fn peak(problem: &Problem, types: PeakTypes, backend: &str) -> Result<PeakLaunch, Unsupported> {
    let variant = problem.variant.as_str();
    let lacking = match variant {
        "fp16" => (!types.fp16.0).then_some(types.fp16.1),
        "fp64" => (!types.fp64.0).then_some(types.fp64.1),
        "int8" => (!types.int8.0).then_some(types.int8.1),
        _ => None,
    };
    if let Some(feature) = lacking {
        return Err(Unsupported(format!(
            "variant {variant} of compute_peak needs {feature}, which this {backend} device lacks"
        )));
    }
    Ok(PeakLaunch {
        entry: format!("compute_peak_{variant}"),
        items: crate::backend::param(problem, "items"),
        pairs: crate::backend::param(problem, "pairs"),
    })
}

/// A `roofline` point as every GPU planner launches it: one vector of 4 elements per work-item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Roofline {
    /// Elements.
    pub n: usize,
    /// Pairs of fused multiply-adds per element.
    pub pairs: usize,
}

impl Roofline {
    /// `problem` (roofline) as a launch.
    pub fn of(problem: &Problem) -> Roofline {
        Roofline {
            n: crate::backend::param(problem, "n"),
            pairs: crate::backend::param(problem, "pairs"),
        }
    }

    /// Work-items: one per vector of 4 elements.
    pub fn items(&self) -> usize {
        self.n.div_ceil(4)
    }

    /// The arguments of an OpenCL or HIP launch: x, the constants, y, then `n` and `pairs` as
    /// `int`s (`largest` names their bound).
    ///
    /// # Errors
    /// [`Unsupported`] when `n` exceeds an `int` (the catalog keeps it at 2^30).
    pub fn args(&self, problem: &Problem, largest: &str) -> Result<Vec<Arg>, Unsupported> {
        launch_args(problem, 2, &[("n", self.n), ("pairs", self.pairs)], largest)
    }

    /// The configuration recorded with the result: the entry point, `groups` of `group`
    /// work-items, 4 elements a work-item, and the point's operational intensity.
    pub fn config(
        &self,
        entry: (&str, String),
        groups: usize,
        group: usize,
    ) -> BTreeMap<String, String> {
        launch_config(
            entry,
            (groups, group),
            [
                ("elements_per_item", "4".to_string()),
                ("flops_per_byte", format!("{}", self.pairs as f64 / 2.0)),
            ],
        )
    }
}

/// A ceiling kernel's OpenCL or HIP arguments: `inputs` input buffers, the output, then `named`
/// counts as `int`s (`largest` names their bound).
fn launch_args(
    problem: &Problem,
    inputs: usize,
    named: &[(&str, usize)],
    largest: &str,
) -> Result<Vec<Arg>, Unsupported> {
    let mut args = buffers(inputs, Arg::Input, Arg::Output);
    args.extend(int_args(problem, named, largest, Arg::Int)?);
    Ok(args)
}

/// The configuration a ceiling kernel's launch records: its entry point, `groups` of `group`
/// work-items, then what is its own.
fn launch_config<const N: usize>(
    entry: (&str, String),
    (groups, group): (usize, usize),
    own: [(&str, String); N],
) -> BTreeMap<String, String> {
    let mut out = crate::backend::config(&[
        entry,
        ("groups", groups.to_string()),
        ("local", group.to_string()),
    ]);
    out.extend(own.map(|(k, v)| (k.to_string(), v)));
    out
}

/// Where a `transfer` copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Host memory into a device buffer.
    HostToDevice,
    /// A device buffer into host memory.
    DeviceToHost,
    /// One device buffer into another.
    DeviceToDevice,
}

/// A `transfer` problem as the GPU backends run it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    pub direction: Direction,
    pub bytes: usize,
    /// Page-locked host memory (else pageable).
    pub pinned: bool,
}

impl Transfer {
    /// `problem` as a transfer; `None` for any other kernel.
    pub fn of(problem: &Problem) -> Option<Transfer> {
        if problem.id() != KernelId::Ceiling(CeilingKernel::Transfer) {
            return None;
        }
        let direction = match problem.variant.as_str() {
            "d2h" => Direction::DeviceToHost,
            "d2d" => Direction::DeviceToDevice,
            _ => Direction::HostToDevice,
        };
        Some(Transfer {
            direction,
            bytes: crate::backend::param(problem, "bytes"),
            pinned: crate::backend::param(problem, "pinned") == 1,
        })
    }

    /// The configuration recorded with the result: the copy (`call`), and the host memory as
    /// this backend gets it (`pinned_how`: "CL_MEM_ALLOC_HOST_PTR, mapped"), or none for `d2d`.
    pub fn config(&self, call: &str, pinned_how: &str) -> BTreeMap<String, String> {
        let host = match (self.direction, self.pinned) {
            (Direction::DeviceToDevice, _) => "none (device to device)".to_string(),
            (_, true) => format!("pinned ({pinned_how})"),
            (_, false) => "pageable".to_string(),
        };
        crate::backend::config(&[("copy", call.to_string()), ("host_memory", host)])
    }
}

/// Why the planners refuse `transfer`: it launches nothing, so each backend runs it from its
/// `transfer.rs` without a plan.
pub fn transfer_has_no_plan() -> Unsupported {
    Unsupported("transfer launches no kernel: the backend runs it as a copy".into())
}
