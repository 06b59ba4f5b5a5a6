//! The planning pieces the OpenCL, Vulkan and HIP planners share, so a catalog kernel means the
//! same entry point, the same scalar arguments in the same order and the same refusals on every
//! GPU backend. Pure: no device, no I/O.
//!
//! This file: the `Unsupported` error, the support list from the catalog, the launch arguments
//! and plan shape OpenCL and HIP share, and integer arguments checked against their 32-bit bound.
//! `elementwise.rs` and `rows.rs`: those families' launches, their entry points taken from the
//! family's definition in the catalog (row group sizes and splits in `rows.rs`). `gemm.rs`:
//! conv2d's window arguments and im2col chunking, the GEMM size arguments, and the
//! register-blocked GEMM tile rules and candidate ordering. `model.rs`: a network's launches.
//! `llm.rs`: a transformer graph's launches (OpenCL and HIP) and its inputs' storage (all three).
//! `route.rs`: which planner a catalog kernel needs (the one place a GPU planner learns what a
//! kernel is; each backend's `plan` matches on the route). `ceilings.rs`: compute_peak's entry point, group and the arithmetic it needs of a device, and
//! transfer's direction, size and host memory.
//!
//! Each planner keeps what is its API's own (OpenCL build options, Vulkan specialization
//! constants and push-constant words, HIP's compiled instantiations) and maps these pieces onto it.

mod ceilings;
mod elementwise;
mod gemm;
/// The launches of a transformer graph, shared by the OpenCL and HIP planners.
pub mod llm;
/// The launches of a network or a `cnn_*` layer, shared by the OpenCL, Vulkan and HIP planners.
pub mod model;
mod route;
mod rows;
/// Test helpers the planners' unit tests share.
#[cfg(test)]
pub mod testing;
#[cfg(test)]
mod tests;

pub use ceilings::{
    Direction, PEAK_GROUP, PeakLaunch, PeakTypes, Roofline, Transfer, peak, transfer_has_no_plan,
};
pub use elementwise::Elementwise;
pub use gemm::{
    GPU_TILES, GemmTile, Im2col, MAX_WORK_PER_ITEM, SMALL_TILES, Tile, candidates,
    conv_direct_args, conv_window, exact_tiles, gemm_args, gemm_dims, im2col_tuning, square_side,
    tile_config, tile_error,
};
pub use route::{Route, route};
pub use rows::{
    ROW_CHUNKS_MAX, RowLaunch, RowSplit, SPLIT_GROUP, SPLIT_GROUPS_PER_UNIT, SPLIT_MAX,
    WIDE_ROW_COLS, row_group, row_split, rows,
};

use super::storage::Elem;
use super::{BackendError, SupportEntry, check_listed};
use gpufleet_kernels::{BackendKind, Dtype, KernelId, Problem, catalog};
use std::collections::BTreeMap;
use std::fmt::Display;

/// Why a plan cannot be made; becomes [`BackendError::Unsupported`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct Unsupported(pub String);

impl Unsupported {
    /// The backend error for `backend` (`opencl`).
    pub fn for_backend(self, backend: &str) -> BackendError {
        BackendError::Unsupported {
            backend: backend.into(),
            what: self.0,
        }
    }
}

/// Checks `problem` against a planner's support `list` (see [`check_listed`]).
///
/// # Errors
/// [`Unsupported`] with the shared message for the missing kernel, variant or dtype.
pub fn listed(
    list: Vec<SupportEntry>,
    problem: &Problem,
    backend: BackendKind,
    no_kernel: &str,
) -> Result<(), Unsupported> {
    check_listed(list, problem, backend.name(), no_kernel).map_err(|m| Unsupported(m.message))
}

/// The support list of `backend`: every catalog kernel that lists it among its backends, with
/// all its variants in its dtypes but the quantized ones (`quantized`: those a backend runs, for
/// the kernels that take them), and gemm as `gemm_variants` in `gemm_dtypes` (what the backend
/// builds of it).
pub fn gpu_support(
    backend: BackendKind,
    gemm_variants: Vec<&'static str>,
    gemm_dtypes: Vec<&'static str>,
    quantized: &[Dtype],
) -> Vec<SupportEntry> {
    catalog()
        .iter()
        .filter(|k| k.backends.contains(&backend))
        .map(|k| {
            if k.id == KernelId::Gemm {
                (k.name, gemm_variants.clone(), gemm_dtypes.clone())
            } else {
                let dtypes = k
                    .dtypes
                    .iter()
                    .filter(|d| d.block_format().is_none() || quantized.contains(d))
                    .map(|d| d.name())
                    .collect();
                (k.name, k.variants.to_vec(), dtypes)
            }
        })
        .collect()
}

/// One kernel argument of an OpenCL or HIP launch (Vulkan binds buffers and pushes constants
/// instead).
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    /// The problem's input buffer `i` (in `Problem::inputs` order).
    Input(usize),
    /// The output buffer.
    Output,
    /// Scratch buffer `i` of the plan's `scratch_bytes`.
    Scratch(usize),
    Int(i32),
    /// A 64-bit offset (`long` in OpenCL C, `long long` in HIP): the transformer's weight offsets,
    /// which pass 2^31 elements for the 8b shape.
    Long(i64),
    Float(f32),
}

/// A GPU planner's plan: the device code the launches come from, how the buffers are stored,
/// and the launches of one iteration (timed from before the first to after the last), with the
/// configuration recorded with the result. OpenCL and HIP share it; `P` is OpenCL's program
/// (HIP's code objects are embedded per arch, so it has none).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan<L, P = ()> {
    /// Where the launches' kernels come from.
    pub program: P,
    /// How each input is stored on the device (f16 is converted on the host).
    pub input_storage: Vec<Elem>,
    /// f32, or f16 for gemm in f16 (read back through the host conversion).
    pub output_storage: Elem,
    /// Bytes of each scratch buffer (allocated once, reused by every iteration).
    pub scratch_bytes: Vec<usize>,
    /// Launched in this order.
    pub launches: Vec<L>,
    /// The launch configuration, recorded with the result.
    pub config: BTreeMap<String, String>,
}

impl<L, P> Plan<L, P> {
    /// A plan of one launch over f32 buffers: `inputs` inputs, no scratch.
    pub fn one_launch(
        program: P,
        inputs: usize,
        launch: L,
        config: BTreeMap<String, String>,
    ) -> Self {
        Plan {
            program,
            input_storage: vec![Elem::F32; inputs],
            output_storage: Elem::F32,
            scratch_bytes: Vec::new(),
            launches: vec![launch],
            config,
        }
    }
}

/// The buffer arguments every kernel starts with: its `inputs` in order, then the output.
pub fn buffers<A>(inputs: usize, input: fn(usize) -> A, output: A) -> Vec<A> {
    (0..inputs).map(input).chain([output]).collect()
}

/// `value` as a 32-bit kernel argument of type `T`, or a refusal naming the quantity `what`,
/// the kernel and the bound (`largest`: "OpenCL int argument").
///
/// # Errors
/// [`Unsupported`] when `value` exceeds `max`.
pub fn bounded<T: TryFrom<usize> + Display>(
    problem: &Problem,
    what: &str,
    value: usize,
    max: T,
    largest: &str,
) -> Result<T, Unsupported> {
    T::try_from(value).map_err(|_| {
        Unsupported(format!(
            "{what}={value} of {} exceeds the largest {largest} ({max})",
            problem.kernel.name
        ))
    })
}

/// Named sizes as `int` kernel arguments made by `arg` (`Arg::Int`), each refused above `i32::MAX`
/// as [`bounded`] says; `largest` names the bound ("OpenCL int argument").
///
/// # Errors
/// [`Unsupported`] for the first size that does not fit.
pub fn int_args<A>(
    problem: &Problem,
    named: &[(&str, usize)],
    largest: &str,
    arg: fn(i32) -> A,
) -> Result<Vec<A>, Unsupported> {
    named
        .iter()
        .map(|&(what, v)| bounded(problem, what, v, i32::MAX, largest).map(arg))
        .collect()
}

/// Largest power of two at most `n` (1 for 0).
pub fn pow2_floor(n: usize) -> usize {
    if n == 0 { 1 } else { 1 << n.ilog2() }
}

/// `n` rounded up to a multiple of `multiple`.
pub fn round_up(n: usize, multiple: usize) -> usize {
    n.div_ceil(multiple) * multiple
}

/// Sizes as recorded in a configuration: `64x32x1`.
pub fn dims<T: Display>(v: &[T]) -> String {
    let parts: Vec<String> = v.iter().map(T::to_string).collect();
    parts.join("x")
}
