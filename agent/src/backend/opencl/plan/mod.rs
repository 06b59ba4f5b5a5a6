//! What to build and launch for each catalog kernel on an OpenCL device.
//! Pure: a problem and the device's capabilities in, a [`Plan`] out. The
//! host side (`kernel.rs`) executes plans without knowing any kernel.
//!
//! `gemm.rs` holds the GEMM and conv2d planners (they share the blocked
//! GEMM), `tests.rs` the unit tests.

mod gemm;
#[cfg(test)]
mod tests;

use crate::backend::{config, param};
use gemm::{plan_conv_direct, plan_conv_im2col, plan_gemm};
use gpufleet_kernels::Problem;
use std::collections::BTreeMap;

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

/// One kernel argument.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    /// The problem's input buffer `i` (in `Problem::inputs` order).
    Input(usize),
    /// The output buffer.
    Output,
    /// Scratch buffer `i` of [`Plan::scratch_bytes`].
    Scratch(usize),
    Int(i32),
    Float(f32),
    /// `__local` memory of this many bytes.
    Local(usize),
}

/// One enqueue of one kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    pub kernel: String,
    pub global: Vec<usize>,
    /// `None` lets the driver choose.
    pub local: Option<Vec<usize>>,
    pub args: Vec<Arg>,
}

/// Everything needed to run one problem: source, options, buffers and the
/// launches of one iteration (timed from the first launch's start to the
/// last one's end).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// File name of the source (`gemm.cl`), for logs and cache keys.
    pub program: String,
    pub source: String,
    /// Build options: `-cl-std=CL1.1` or higher as the device allows, `-D` parameters.
    pub options: String,
    pub input_storage: Vec<Storage>,
    pub output_storage: Storage,
    pub scratch_bytes: Vec<usize>,
    pub launches: Vec<Launch>,
    /// The launch configuration, recorded with the result.
    pub config: BTreeMap<String, String>,
}

/// Register-blocked GEMM parameters (the autotuner's search space).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct GemmTuning {
    /// Work-group tile of C: tile_m × tile_n; k step tile_k.
    pub tile_m: u32,
    pub tile_n: u32,
    pub tile_k: u32,
    /// Outputs per work-item: work_m × work_n.
    pub work_m: u32,
    pub work_n: u32,
    /// Vector width of global loads (1, 2 or 4).
    pub vector: u32,
}

/// Why a plan cannot be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct Unsupported(pub String);

// Planning notes (the sources in `kernels/opencl/` document their `-D` parameters):
// - Every size reaches the device as an `int`; `int()` refuses a value above i32::MAX with the
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
use gpufleet_kernels::{Dtype, KernelId, NORM_EPS, TRIAD_SCALAR};

/// Local size of the one-dimensional kernels (element-wise, conv2d), capped by the device.
const FLAT_GROUP: usize = 256;
/// Groups of a row kernel; more rows are strided over, so the launch stays small whatever `rows`.
const ROW_GROUPS_MAX: usize = 65536;
/// Row elements a work-item may keep in registers; longer rows are read again from cache.
const ROW_CHUNKS_MAX: usize = 16;
/// Above this many columns the row kernels use 1024 work-items where the device allows.
const WIDE_ROW_COLS: usize = 8192;
/// Bytes of im2col column matrices held at once; the batch is processed in chunks that fit.
const IM2COL_SCRATCH_BYTES: usize = 256 << 20;
/// Accumulators per work-item of `gemm_blocked` beyond which registers spill.
const MAX_WORK_PER_ITEM: u32 = 64;

/// Kernels/variants/dtypes the OpenCL backend implements (every non-host-only, non-debug catalog
/// kernel and all its variants; gemm in f32 and f16; plus debug_wrong = vec_add with a deliberate
/// error via -DGPUFLEET_WRONG).
pub fn supported() -> Vec<(&'static str, Vec<&'static str>, Vec<&'static str>)> {
    let f32_only = || vec!["f32"];
    let default = || vec!["default"];
    let mut out = vec![(
        "gemm",
        vec!["naive", "tiled", "blocked"],
        vec!["f32", "f16"],
    )];
    for name in [
        "vec_add",
        "copy",
        "triad",
        "noop",
        "softmax",
        "layernorm",
        "rmsnorm",
        "layernorm_rmsnorm_fused",
    ] {
        out.push((name, default(), f32_only()));
    }
    out.push(("conv2d", vec!["direct", "im2col"], f32_only()));
    for name in ["relu", "sigmoid", "tanh", "debug_wrong"] {
        out.push((name, default(), f32_only()));
    }
    out
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
    crate::backend::check_listed(
        supported(),
        problem,
        "opencl",
        "the OpenCL backend has no kernel for it",
    )
    .map_err(|m| Unsupported(m.message))?;
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
    let t = |tile_m, tile_n, tile_k, work_m, work_n, vector| GemmTuning {
        tile_m,
        tile_n,
        tile_k,
        work_m,
        work_n,
        vector,
    };
    // Ordered by GFLOP/s of a 4096³ f32 product on an H100 (128×128×8: 41.7 TFLOP/s, 83% of
    // cuBLAS SGEMM; 64×64×16 with 64 work-items ties and gives mid-sized problems more groups).
    let gpu = [
        t(128, 128, 8, 8, 8, 4),
        t(64, 64, 16, 8, 8, 4),
        t(128, 128, 16, 8, 8, 4),
        t(128, 64, 16, 8, 4, 4),
        t(64, 128, 16, 4, 8, 4),
        t(64, 64, 8, 8, 8, 4),
        t(64, 32, 16, 8, 4, 4),
        t(128, 64, 8, 8, 8, 4),
        t(64, 64, 16, 4, 4, 4),
        t(32, 64, 16, 4, 4, 4),
        t(64, 64, 8, 4, 4, 4),
        t(32, 32, 16, 4, 4, 4),
    ];
    let small = [
        t(64, 64, 16, 8, 8, 4),
        t(64, 64, 8, 8, 8, 4),
        t(32, 32, 16, 4, 4, 4),
        t(64, 32, 16, 8, 4, 4),
        t(32, 32, 8, 4, 4, 4),
        t(16, 16, 16, 4, 4, 4),
        t(16, 32, 8, 4, 4, 4),
        t(16, 16, 8, 4, 4, 4),
        t(16, 16, 8, 2, 2, 2),
        t(8, 8, 8, 2, 2, 1),
        t(4, 4, 4, 4, 4, 1),
    ];
    let (first, second): (&[GemmTuning], &[GemmTuning]) = if caps.preferred_multiple >= 32 {
        (&gpu, &small)
    } else {
        (&small, &gpu)
    };
    let mut out: Vec<GemmTuning> = Vec::new();
    for c in first.iter().chain(second) {
        if out.len() < 24 && !out.contains(c) && tuning_error(c, caps).is_none() {
            out.push(*c);
        }
    }
    out
}

/// A safe default when nothing is tuned: the first candidate, or a one-work-item 4×4 tile that
/// any device with 384 bytes of local memory runs.
pub fn default_gemm_tuning(caps: &DeviceCaps) -> GemmTuning {
    gemm_candidates(caps)
        .into_iter()
        .next()
        .unwrap_or(GemmTuning {
            tile_m: 4,
            tile_n: 4,
            tile_k: 4,
            work_m: 4,
            work_n: 4,
            vector: 1,
        })
}

/// Why `t` cannot run on `caps`, or `None` when it can. The rules mirror the `#error` checks of
/// `gemm.cl` plus the device limits.
fn tuning_error(t: &GemmTuning, caps: &DeviceCaps) -> Option<String> {
    let fields = [t.tile_m, t.tile_n, t.tile_k, t.work_m, t.work_n, t.vector];
    if fields.iter().any(|&f| f == 0 || f > 1024) {
        return Some("every field must be between 1 and 1024".into());
    }
    if ![1, 2, 4].contains(&t.vector) {
        return Some(format!("vector={} must be 1, 2 or 4", t.vector));
    }
    if !t.tile_m.is_multiple_of(t.work_m) || !t.tile_n.is_multiple_of(t.work_n) {
        return Some(format!(
            "tile {}×{} is not a multiple of the work per item {}×{}",
            t.tile_m, t.tile_n, t.work_m, t.work_n
        ));
    }
    if t.work_m * t.work_n > MAX_WORK_PER_ITEM {
        return Some(format!(
            "work_m·work_n={} exceeds {MAX_WORK_PER_ITEM} accumulators per work-item",
            t.work_m * t.work_n
        ));
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

/// Largest power of two at most `n` (1 for 0).
fn pow2_floor(n: usize) -> usize {
    if n == 0 { 1 } else { 1 << n.ilog2() }
}

fn round_up(n: usize, multiple: usize) -> usize {
    n.div_ceil(multiple) * multiple
}

/// `value` as an `int` kernel argument.
fn int(problem: &Problem, what: &str, value: usize) -> Result<Arg, Unsupported> {
    i32::try_from(value).map(Arg::Int).map_err(|_| {
        Unsupported(format!(
            "{what}={value} of {} exceeds the largest OpenCL int argument ({})",
            problem.kernel.name,
            i32::MAX
        ))
    })
}

fn dims(v: &[usize]) -> String {
    let parts: Vec<String> = v.iter().map(usize::to_string).collect();
    parts.join("x")
}

/// Local size of the one-dimensional kernels.
fn flat_group(caps: &DeviceCaps) -> usize {
    FLAT_GROUP.min(pow2_floor(caps.max_work_group_size))
}

fn plan_elementwise(problem: &Problem, caps: &DeviceCaps) -> Result<Plan, Unsupported> {
    let (kernel, inputs) = match problem.id() {
        KernelId::VecAdd | KernelId::DebugWrong => ("vec_add_f32", 2),
        KernelId::Copy => ("copy_f32", 1),
        KernelId::Triad => ("triad_f32", 2),
        KernelId::Relu => ("relu_f32", 1),
        KernelId::Sigmoid => ("sigmoid_f32", 1),
        KernelId::Tanh => ("tanh_f32", 1),
        KernelId::Noop => ("noop_f32", 1),
        other => {
            return Err(Unsupported(format!(
                "kernel {other:?} has no element-wise plan"
            )));
        }
    };
    let mut args: Vec<Arg> = (0..inputs).map(Arg::Input).collect();
    args.push(Arg::Output);
    let (global, local) = if problem.id() == KernelId::Noop {
        (1, 1)
    } else {
        let n = param(problem, "n");
        if problem.id() == KernelId::Triad {
            args.push(Arg::Float(TRIAD_SCALAR));
        }
        args.push(int(problem, "n", n)?);
        let group = flat_group(caps);
        // One float4 per work-item.
        (round_up(n.div_ceil(4), group), group)
    };
    let mut defines = Vec::new();
    if problem.id() == KernelId::DebugWrong {
        defines.push(("GPUFLEET_WRONG", String::new()));
    }
    Ok(Plan {
        program: "elementwise.cl".into(),
        source: cl::ELEMENTWISE.into(),
        options: options(caps, &defines),
        input_storage: vec![Storage::F32; inputs],
        output_storage: Storage::F32,
        scratch_bytes: Vec::new(),
        launches: vec![Launch {
            kernel: kernel.into(),
            global: vec![global],
            local: Some(vec![local]),
            args,
        }],
        config: config(&[
            ("kernel", kernel.into()),
            ("global", global.to_string()),
            ("local", local.to_string()),
            (
                "elements_per_item",
                if global == 1 { "1" } else { "4" }.into(),
            ),
        ]),
    })
}

fn plan_rows(problem: &Problem, caps: &DeviceCaps) -> Result<Plan, Unsupported> {
    let (rows, cols) = (param(problem, "rows"), param(problem, "cols"));
    let (kernel, inputs) = match problem.id() {
        KernelId::Softmax => ("softmax_rows", 1),
        KernelId::LayerNorm => ("layernorm_rows", 3),
        KernelId::RmsNorm => ("rmsnorm_rows", 2),
        _ => ("layernorm_rmsnorm_rows", 4),
    };
    let cap = pow2_floor(caps.max_work_group_size).min(pow2_floor(
        usize::try_from(caps.local_mem_bytes / 4).unwrap_or(usize::MAX),
    ));
    let mut group = if cols >= WIDE_ROW_COLS { 1024 } else { 256 }.min(cap);
    // Short rows: no more work-items than columns, but a warp's worth.
    while group > 32 && group / 2 >= cols {
        group /= 2;
    }
    let chunks = cols.div_ceil(group);
    let chunks = if chunks <= ROW_CHUNKS_MAX { chunks } else { 0 };
    let groups = rows.min(ROW_GROUPS_MAX);
    let mut args: Vec<Arg> = (0..inputs).map(Arg::Input).collect();
    args.push(Arg::Output);
    args.push(int(problem, "rows", rows)?);
    args.push(int(problem, "cols", cols)?);
    if problem.id() != KernelId::Softmax {
        args.push(Arg::Float(NORM_EPS as f32));
    }
    let defines = [
        ("GPUFLEET_WG", group.to_string()),
        ("GPUFLEET_CHUNKS", chunks.to_string()),
    ];
    Ok(Plan {
        program: "rows.cl".into(),
        source: cl::ROWS.into(),
        options: options(caps, &defines),
        input_storage: vec![Storage::F32; inputs],
        output_storage: Storage::F32,
        scratch_bytes: Vec::new(),
        launches: vec![Launch {
            kernel: kernel.into(),
            global: vec![groups * group],
            local: Some(vec![group]),
            args,
        }],
        config: config(&[
            ("kernel", kernel.into()),
            ("local", group.to_string()),
            ("groups", groups.to_string()),
            (
                "row_in_registers",
                if chunks > 0 { "yes" } else { "no" }.into(),
            ),
        ]),
    })
}
