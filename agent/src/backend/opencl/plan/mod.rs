//! What to build and launch for each catalog kernel on an OpenCL device.
//! Pure: a problem and the device's capabilities in, a [`Plan`] out. The
//! host side (`kernel.rs`) executes plans without knowing any kernel.
//!
//! `gemm.rs` holds the GEMM and conv2d planners (they share the blocked
//! GEMM), `tests.rs` the unit tests.

mod gemm;
#[cfg(test)]
mod tests;

use crate::backend::config;
use crate::backend::planning::{self, Tile, dims, pow2_floor, round_up};
use gemm::{plan_conv_direct, plan_conv_im2col, plan_gemm};
use gpufleet_kernels::Problem;

/// What the planner may assume about a device.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeviceCaps {
    pub max_work_group_size: usize,
    pub local_mem_bytes: u64,
    /// `cl_khr_fp16`: half arithmetic. Without it half data is still read
    /// and written through vload_half/vstore_half.
    pub fp16: bool,
    /// OpenCL C version the device compiles (1.1 on Clover, 1.2 on PoCL...).
    pub opencl_c: (u32, u32),
    pub vendor: String,
    pub compute_units: u32,
    /// Preferred work-group size multiple (warp/wavefront width), 1 if unknown.
    pub preferred_multiple: usize,
}

/// How a buffer is stored on the device (f16: IEEE half, converted on the
/// host); the element format every GPU backend shares.
pub use crate::backend::storage::Elem as Storage;

/// One kernel argument (shared with the HIP planner). Local memory is sized by `-D` parameters
/// in the sources, never passed as an argument.
pub use crate::backend::planning::Arg;

/// One enqueue of one kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    pub kernel: String,
    pub global: Vec<usize>,
    /// `None` lets the driver choose.
    pub local: Option<Vec<usize>>,
    pub args: Vec<Arg>,
}

/// The OpenCL C program a plan's launches come from.
#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    /// File name of the source (`gemm.cl`), for logs and cache keys.
    pub name: String,
    pub source: String,
    /// Build options: `-cl-std=CL1.1` or higher as the device allows, `-D` parameters.
    pub options: String,
}

impl Program {
    fn new((name, source): (&str, &str), options: String) -> Program {
        Program {
            name: name.into(),
            source: source.into(),
            options,
        }
    }
}

/// Everything needed to run one problem: the program, buffers and the launches of one iteration
/// (timed from the first launch's start to the last one's end), enqueued in order on one in-order
/// queue.
pub type Plan = planning::Plan<Launch, Program>;

/// Register-blocked GEMM parameters (the autotuner's search space): the shared tile plus the
/// width of global loads. It reads as its tile (`t.tile_m`) through `Deref`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct GemmTuning {
    #[serde(flatten)]
    pub tile: planning::GemmTile,
    /// Vector width of global loads (1, 2 or 4).
    pub vector: u32,
}

impl GemmTuning {
    /// The tuning of `tile` (`[tile_m, tile_n, tile_k, work_m, work_n]`) with `vector`-wide loads.
    pub const fn new(tile: [u32; 5], vector: u32) -> GemmTuning {
        GemmTuning {
            tile: planning::GemmTile::new(tile),
            vector,
        }
    }
}

impl std::ops::Deref for GemmTuning {
    type Target = planning::GemmTile;

    fn deref(&self) -> &planning::GemmTile {
        &self.tile
    }
}

impl Tile for GemmTuning {
    fn tile(&self) -> [u32; 5] {
        self.tile.tile()
    }
}

/// Why a plan cannot be made (shared by the GPU planners).
pub use crate::backend::planning::Unsupported;

// Planning notes (the sources in `kernels/opencl/` document their `-D` parameters):
// - Every size reaches the device as an `int`; `ints()` refuses a value above i32::MAX with the
//   name of the quantity, and the kernels compute element offsets in `long`.
// - Every launch sets its local size (global sizes are rounded up to it, kernels bounds-check), so
//   the `reqd_work_group_size` attributes hold and no driver picks a poor size for odd globals.
// - Element-wise kernels move one float4 per work-item (full HBM bandwidth on an H100: 2.9-3.0
//   TB/s for vec_add, copy and triad at 2^26 elements); row kernels stride their groups over the
//   rows and keep a row in registers when it is at most 16 chunks of the group size.
// - gemm `blocked` and conv2d `im2col` share `gemm_blocked`, sized by a `GemmTuning` whose
//   validity rules (`tuning_error`) mirror the `#error` checks in gemm.cl plus the device limits.
// - conv2d `im2col` is "gemm.cl" and "conv.cl" in one program: per chunk of images, one im2col
//   launch into scratch 0 and one GEMM launch batched over the chunk's images (dimension 2).

use gpufleet_kernels::sources::opencl as cl;
use gpufleet_kernels::{Dtype, KernelId};

/// Local size of the one-dimensional kernels (element-wise, conv2d), capped by the device.
const FLAT_GROUP: usize = 256;
/// Groups of a row kernel; more rows are strided over, so the launch stays small whatever `rows`.
const ROW_GROUPS_MAX: usize = 65536;
/// Bytes of im2col column matrices held at once; the batch is processed in chunks that fit.
const IM2COL_SCRATCH_BYTES: usize = 256 << 20;

/// What a planner function returns.
type Planned = Result<Plan, Unsupported>;
/// Accumulators per work-item of `gemm_blocked` beyond which registers spill.
const MAX_WORK_PER_ITEM: u32 = 64;

/// Kernels/variants/dtypes the OpenCL backend implements (every non-host-only, non-debug catalog
/// kernel and all its variants; gemm in f32 and f16; plus debug_wrong = vec_add with a deliberate
/// error via -DGPUFLEET_WRONG).
pub fn supported() -> Vec<(&'static str, Vec<&'static str>, Vec<&'static str>)> {
    planning::gpu_support(vec!["naive", "tiled", "blocked"], vec!["f32", "f16"])
}

/// What to build and launch for `problem` on a device with `caps`. `tuning` sets `gemm_blocked`'s
/// parameters (gemm `blocked` and conv2d `im2col`); `None` takes [`default_gemm_tuning`].
///
/// # Errors
/// [`Unsupported`] naming the reason: a host-only or crashing kernel, a dtype or variant the backend
/// does not implement, a device below OpenCL C 1.1 or without work-items, a tuning the device
/// cannot run, or a size whose kernel arguments do not fit in an `int`.
pub fn plan(
    problem: &Problem,
    caps: &DeviceCaps,
    tuning: Option<&GemmTuning>,
) -> Result<Plan, Unsupported> {
    check_caps(caps)?;
    planning::listed(
        supported(),
        problem,
        "opencl",
        "the OpenCL backend has no kernel for it",
    )?;
    match problem.id() {
        KernelId::Gemm => plan_gemm(problem, caps, tuning),
        KernelId::Conv2d if problem.variant == "im2col" => plan_conv_im2col(problem, caps, tuning),
        KernelId::Conv2d => plan_conv_direct(problem, caps),
        KernelId::Softmax
        | KernelId::LayerNorm
        | KernelId::RmsNorm
        | KernelId::LayerNormRmsNormFused => plan_rows(problem, caps),
        _ => plan_elementwise(problem, caps),
    }
}

/// Candidate register-blocked configurations for the autotuner, valid for this device
/// (work-group size and local memory limits), best guesses first; 4..24 of them.
///
/// GPUs (a warp or wavefront of 32 or more) get the large tiles that reach their FMA peak first;
/// CPUs and unknown devices get few work-items with much work each first.
pub fn gemm_candidates(caps: &DeviceCaps) -> Vec<GemmTuning> {
    // Vector widths of the small tiles (the GPU tiles all load 4-vectors).
    const SMALL_VECTORS: [u32; 11] = [4, 4, 4, 4, 4, 4, 4, 4, 2, 1, 1];
    let gpu = planning::GPU_TILES.map(|t| GemmTuning::new(t, 4));
    let mut small = planning::SMALL_TILES.map(|t| GemmTuning::new(t, 4));
    for (t, v) in small.iter_mut().zip(SMALL_VECTORS) {
        t.vector = v;
    }
    planning::candidates(&gpu, &small, caps.preferred_multiple >= 32, 24, |c| {
        tuning_error(c, caps).is_none()
    })
}

/// A safe default when nothing is tuned: the first candidate, or a one-work-item 4×4 tile that
/// any device with 384 bytes of local memory runs.
pub fn default_gemm_tuning(caps: &DeviceCaps) -> GemmTuning {
    let fallback = GemmTuning::new([4, 4, 4, 4, 4], 1);
    gemm_candidates(caps).first().copied().unwrap_or(fallback)
}

/// Why `t` cannot run on `caps`, or `None` when it can. The rules mirror the `#error` checks of
/// `gemm.cl` plus the device limits.
fn tuning_error(t: &GemmTuning, caps: &DeviceCaps) -> Option<String> {
    let vector = || {
        (![1, 2, 4].contains(&t.vector)).then(|| format!("vector={} must be 1, 2 or 4", t.vector))
    };
    if let Some(why) = planning::tile_error(t, &[t.vector], vector, "work-item", MAX_WORK_PER_ITEM)
    {
        return Some(why);
    }
    let threads = blocked_threads(t);
    if threads > caps.max_work_group_size {
        return Some(format!(
            "{threads} work-items per group exceed max_work_group_size {}",
            caps.max_work_group_size
        ));
    }
    if !t.tile_k.is_multiple_of(t.vector) || !t.tile_n.is_multiple_of(t.vector) {
        return Some(format!(
            "tile_k={} and tile_n={} must be multiples of vector={}",
            t.tile_k, t.tile_n, t.vector
        ));
    }
    let local = blocked_local_bytes(t);
    if local > caps.local_mem_bytes {
        return Some(format!(
            "{local} bytes of local memory exceed the device's {}",
            caps.local_mem_bytes
        ));
    }
    None
}

fn blocked_threads(t: &GemmTuning) -> usize {
    ((t.tile_m / t.work_m) * (t.tile_n / t.work_n)) as usize
}

/// Local memory of `gemm_blocked`: two buffers of the transposed, padded A slice and the B slice.
fn blocked_local_bytes(t: &GemmTuning) -> u64 {
    let pad = if t.work_m.is_multiple_of(4) && t.work_n.is_multiple_of(4) {
        4
    } else {
        1
    };
    4 * 2 * u64::from(t.tile_k) * u64::from(t.tile_m + pad + t.tile_n)
}

fn check_caps(caps: &DeviceCaps) -> Result<(), Unsupported> {
    if caps.opencl_c < (1, 1) {
        return Err(Unsupported(format!(
            "device compiles OpenCL C {}.{}; the kernels need OpenCL C 1.1 or later",
            caps.opencl_c.0, caps.opencl_c.1
        )));
    }
    if caps.max_work_group_size == 0 {
        return Err(Unsupported(
            "device reports max_work_group_size=0: no work-group can run".into(),
        ));
    }
    Ok(())
}

/// Build options: the language version (1.1 where that is all the device speaks, else 1.2, never
/// higher since nothing newer is used), the fp16 flag and `defines`.
fn options(caps: &DeviceCaps, defines: &[(&str, String)]) -> String {
    let std = if caps.opencl_c == (1, 1) {
        "CL1.1"
    } else {
        "CL1.2"
    };
    let mut out = format!("-cl-std={std}");
    if caps.fp16 {
        out.push_str(" -DGPUFLEET_HAS_FP16");
    }
    for (name, value) in defines {
        if value.is_empty() {
            out.push_str(&format!(" -D{name}"));
        } else {
            out.push_str(&format!(" -D{name}={value}"));
        }
    }
    out
}

/// Named sizes as `int` kernel arguments.
fn ints(problem: &Problem, named: &[(&str, usize)]) -> Result<Vec<Arg>, Unsupported> {
    planning::int_args(problem, named, "OpenCL int argument", Arg::Int)
}

/// Local size of the one-dimensional kernels.
fn flat_group(caps: &DeviceCaps) -> usize {
    FLAT_GROUP.min(pow2_floor(caps.max_work_group_size))
}

fn plan_elementwise(problem: &Problem, caps: &DeviceCaps) -> Result<Plan, Unsupported> {
    let e = planning::elementwise(problem)?;
    let kernel = format!("{}_f32", e.stem);
    let mut args = planning::buffers(e.inputs, Arg::Input, Arg::Output);
    args.extend(e.scalar.map(Arg::Float));
    let (global, local) = match e.n {
        None => (1, 1),
        Some(n) => {
            args.extend(ints(problem, &[("n", n)])?);
            let group = flat_group(caps);
            // One float4 per work-item.
            (round_up(n.div_ceil(4), group), group)
        }
    };
    let mut defines = Vec::new();
    if problem.id() == KernelId::DebugWrong {
        defines.push(("GPUFLEET_WRONG", String::new()));
    }
    let launch = Launch {
        kernel: kernel.clone(),
        global: vec![global],
        local: Some(vec![local]),
        args,
    };
    Ok(Plan::one_launch(
        Program::new(("elementwise.cl", cl::ELEMENTWISE), options(caps, &defines)),
        e.inputs,
        launch,
        e.config(
            ("kernel", kernel),
            ("global", global),
            local,
            "elements_per_item",
        ),
    ))
}

fn plan_rows(problem: &Problem, caps: &DeviceCaps) -> Result<Plan, Unsupported> {
    let r = planning::rows(problem);
    let kernel = format!("{}_rows", r.stem);
    let cap = pow2_floor(caps.max_work_group_size).min(pow2_floor(
        usize::try_from(caps.local_mem_bytes / 4).unwrap_or(usize::MAX),
    ));
    let (group, chunks) = planning::row_group(r.cols, cap);
    let groups = r.rows.min(ROW_GROUPS_MAX);
    let mut args = planning::buffers(r.inputs, Arg::Input, Arg::Output);
    args.extend(ints(problem, &[("rows", r.rows), ("cols", r.cols)])?);
    args.extend(r.eps.map(Arg::Float));
    let defines = [
        ("GPUFLEET_WG", group.to_string()),
        ("GPUFLEET_CHUNKS", chunks.to_string()),
    ];
    let launch = Launch {
        kernel: kernel.clone(),
        global: vec![groups * group],
        local: Some(vec![group]),
        args,
    };
    Ok(Plan::one_launch(
        Program::new(("rows.cl", cl::ROWS), options(caps, &defines)),
        r.inputs,
        launch,
        r.config(("kernel", kernel), group, groups, chunks),
    ))
}
