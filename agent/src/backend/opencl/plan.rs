//! What to build and launch for each catalog kernel on an OpenCL device.
//! Pure: a problem and the device's capabilities in, a [`Plan`] out. The
//! host side (`kernel.rs`) executes plans without knowing any kernel.
//!
//! (Interface fixed by the lead; implementation by the kernel-source work.)

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

/// How a buffer is stored on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    F32,
    /// IEEE half in 16-bit words; the host converts the f32 data.
    F16,
    U32,
}

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
    let name = problem.kernel.name;
    let listed = supported()
        .into_iter()
        .find(|(k, _, _)| *k == name)
        .ok_or_else(|| {
            let why = match problem.id() {
                KernelId::MembwCpu | KernelId::MemlatCpu => {
                    "it measures host memory, so only the cpu backend runs it"
                }
                KernelId::DebugCrash | KernelId::DebugHang => {
                    "it crashes or hangs its worker on purpose, which the cpu backend covers"
                }
                _ => "the OpenCL backend has no kernel for it",
            };
            Unsupported(format!("kernel {name} is not available on opencl: {why}"))
        })?;
    if !listed.1.contains(&problem.variant.as_str()) {
        return Err(Unsupported(format!(
            "variant `{}` of {name} is not implemented on opencl (implemented: {})",
            problem.variant,
            listed.1.join(", ")
        )));
    }
    if !listed.2.contains(&problem.dtype.name()) {
        return Err(Unsupported(format!(
            "dtype {} of {name} is not implemented on opencl (implemented: {})",
            problem.dtype,
            listed.2.join(", ")
        )));
    }
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
    let gpu = [
        t(128, 128, 8, 8, 8, 4),
        t(128, 128, 16, 8, 8, 4),
        t(128, 64, 16, 8, 4, 4),
        t(64, 128, 16, 4, 8, 4),
        t(128, 64, 8, 8, 8, 4),
        t(64, 64, 8, 4, 4, 4),
        t(64, 64, 16, 4, 4, 4),
        t(64, 64, 16, 8, 8, 4),
        t(32, 64, 16, 4, 4, 4),
        t(32, 32, 16, 4, 4, 4),
        t(32, 32, 8, 2, 2, 4),
        t(16, 16, 16, 2, 2, 2),
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

fn param(problem: &Problem, name: &str) -> usize {
    usize::try_from(problem.params.get(name).copied().unwrap_or(0)).unwrap_or(0)
}

/// The launch configuration recorded with a result.
fn config(entries: &[(&str, String)]) -> BTreeMap<String, String> {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
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

/// `gemm_blocked` for one device and shape: the tuning, the vector width that is safe for the
/// shape, and whether the shape is a whole number of tiles.
struct Blocked {
    tuning: GemmTuning,
    /// Effective width of global loads: f32 vectors must stay aligned, so 4 (or 2) only when
    /// `k`, `n` and with them every row and batch offset are multiples of it; vload_half needs
    /// no alignment.
    vector: u32,
    exact: bool,
}

impl Blocked {
    fn new(
        caps: &DeviceCaps,
        tuning: GemmTuning,
        half: bool,
        (m, n, k): (usize, usize, usize),
    ) -> Result<Blocked, Unsupported> {
        if let Some(why) = tuning_error(&tuning, caps) {
            return Err(Unsupported(format!(
                "gemm tuning {tuning:?} cannot run on this device: {why}"
            )));
        }
        let vector = if half {
            tuning.vector
        } else {
            [4, 2, 1]
                .into_iter()
                .find(|&v| {
                    v <= tuning.vector
                        && k.is_multiple_of(v as usize)
                        && n.is_multiple_of(v as usize)
                })
                .unwrap_or(1)
        };
        let t = &tuning;
        let exact = m.is_multiple_of(t.tile_m as usize)
            && n.is_multiple_of(t.tile_n as usize)
            && k.is_multiple_of(t.tile_k as usize);
        Ok(Blocked {
            tuning,
            vector,
            exact,
        })
    }

    fn defines(&self) -> Vec<(&'static str, String)> {
        let t = &self.tuning;
        let mut d = vec![
            ("GPUFLEET_TILE_M", t.tile_m.to_string()),
            ("GPUFLEET_TILE_N", t.tile_n.to_string()),
            ("GPUFLEET_TILE_K", t.tile_k.to_string()),
            ("GPUFLEET_WORK_M", t.work_m.to_string()),
            ("GPUFLEET_WORK_N", t.work_n.to_string()),
            ("GPUFLEET_VEC", self.vector.to_string()),
        ];
        if self.exact {
            d.push(("GPUFLEET_EXACT", String::new()));
        }
        d
    }

    /// Global and local sizes covering an m×n product, `batch` products deep.
    fn geometry(&self, m: usize, n: usize, batch: usize) -> (Vec<usize>, Vec<usize>) {
        let t = &self.tuning;
        let (tpm, tpn) = (
            (t.tile_m / t.work_m) as usize,
            (t.tile_n / t.work_n) as usize,
        );
        let global = vec![
            n.div_ceil(t.tile_n as usize) * tpn,
            m.div_ceil(t.tile_m as usize) * tpm,
        ];
        let local = vec![tpn, tpm];
        if batch == 1 {
            (global, local)
        } else {
            ([global, vec![batch]].concat(), [local, vec![1]].concat())
        }
    }

    fn config(&self) -> Vec<(&'static str, String)> {
        let t = &self.tuning;
        vec![
            ("tile_m", t.tile_m.to_string()),
            ("tile_n", t.tile_n.to_string()),
            ("tile_k", t.tile_k.to_string()),
            ("work_m", t.work_m.to_string()),
            ("work_n", t.work_n.to_string()),
            ("vector", self.vector.to_string()),
            ("exact_tiles", self.exact.to_string()),
        ]
    }
}

/// Side of `gemm_naive`'s work-group and `gemm_tiled`'s tile: 16, or less on small devices.
fn square_side(caps: &DeviceCaps) -> usize {
    let mut side = 16;
    while side > 1
        && (side * side > caps.max_work_group_size
            || (2 * side * (side + 1) * 4) as u64 > caps.local_mem_bytes)
    {
        side /= 2;
    }
    side
}

fn plan_gemm(
    problem: &Problem,
    caps: &DeviceCaps,
    tuning: Option<&GemmTuning>,
) -> Result<Plan, Unsupported> {
    let (m, n, k) = (
        param(problem, "m"),
        param(problem, "n"),
        param(problem, "k"),
    );
    let half = problem.dtype == Dtype::F16;
    let tuning = tuning.copied().unwrap_or_else(|| default_gemm_tuning(caps));
    let blocked = Blocked::new(caps, tuning, half, (m, n, k))?;
    let side = square_side(caps);
    let mut defines = blocked.defines();
    defines.push(("GPUFLEET_TS", side.to_string()));
    if half {
        defines.push(("GPUFLEET_HALF", String::new()));
    }
    let (kernel, global, local, mut cfg) = match problem.variant.as_str() {
        "naive" => (
            "gemm_naive",
            vec![round_up(n, side), round_up(m, side)],
            vec![side, side],
            vec![],
        ),
        "tiled" => (
            "gemm_tiled",
            vec![round_up(n, side), round_up(m, side)],
            vec![side, side],
            vec![("tile", side.to_string())],
        ),
        _ => {
            let (g, l) = blocked.geometry(m, n, 1);
            ("gemm_blocked", g, l, blocked.config())
        }
    };
    let args = vec![
        Arg::Input(0),
        Arg::Input(1),
        Arg::Output,
        int(problem, "m", m)?,
        int(problem, "n", n)?,
        int(problem, "k", k)?,
        Arg::Int(0),
        Arg::Int(0),
        Arg::Int(0),
        Arg::Int(0),
    ];
    let storage = if half { Storage::F16 } else { Storage::F32 };
    cfg.extend([
        ("kernel", kernel.to_string()),
        ("global", dims(&global)),
        ("local", dims(&local)),
    ]);
    Ok(Plan {
        program: "gemm.cl".into(),
        source: cl::GEMM.into(),
        options: options(caps, &defines),
        input_storage: vec![storage; 2],
        output_storage: storage,
        scratch_bytes: Vec::new(),
        launches: vec![Launch {
            kernel: kernel.into(),
            global,
            local: Some(local),
            args,
        }],
        config: config(&cfg),
    })
}

/// conv2d's shape: (batch, channels, height, width, filters, ksize, stride, pad, out_h, out_w).
struct Conv {
    batch: usize,
    channels: usize,
    height: usize,
    width: usize,
    filters: usize,
    ksize: usize,
    stride: usize,
    pad: usize,
    out_h: usize,
    out_w: usize,
}

impl Conv {
    fn of(problem: &Problem) -> Conv {
        let p = |name| param(problem, name);
        let (ksize, stride, pad) = (p("ksize"), p("stride").max(1), p("pad"));
        let out = |size: usize| (size + 2 * pad).saturating_sub(ksize) / stride + 1;
        Conv {
            batch: p("batch"),
            channels: p("channels"),
            height: p("height"),
            width: p("width"),
            filters: p("filters"),
            ksize,
            stride,
            pad,
            out_h: out(p("height")),
            out_w: out(p("width")),
        }
    }

    /// The `int` arguments describing the input and the window, from `channels` on.
    fn args(&self, problem: &Problem, with_filters: bool) -> Result<Vec<Arg>, Unsupported> {
        let mut args = vec![
            int(problem, "channels", self.channels)?,
            int(problem, "height", self.height)?,
            int(problem, "width", self.width)?,
        ];
        if with_filters {
            args.push(int(problem, "filters", self.filters)?);
        }
        args.extend([
            int(problem, "stride", self.stride)?,
            int(problem, "pad", self.pad)?,
            int(problem, "out_h", self.out_h)?,
            int(problem, "out_w", self.out_w)?,
        ]);
        Ok(args)
    }
}

fn plan_conv_direct(problem: &Problem, caps: &DeviceCaps) -> Result<Plan, Unsupported> {
    let s = Conv::of(problem);
    let group = flat_group(caps);
    let total = s.batch * s.filters * s.out_h * s.out_w;
    let global = round_up(total, group);
    let mut args = vec![
        Arg::Input(0),
        Arg::Input(1),
        Arg::Output,
        int(problem, "batch", s.batch)?,
    ];
    args.extend(s.args(problem, true)?);
    let defines = [("GPUFLEET_KSIZE", s.ksize.to_string())];
    Ok(Plan {
        program: "conv.cl".into(),
        source: cl::CONV.into(),
        options: options(caps, &defines),
        input_storage: vec![Storage::F32; 2],
        output_storage: Storage::F32,
        scratch_bytes: Vec::new(),
        launches: vec![Launch {
            kernel: "conv2d_direct".into(),
            global: vec![global],
            local: Some(vec![group]),
            args,
        }],
        config: config(&[
            ("kernel", "conv2d_direct".into()),
            ("global", global.to_string()),
            ("local", group.to_string()),
        ]),
    })
}

/// im2col into scratch, then `gemm_blocked` of the weights (filters × channels·k²) with each
/// image's column matrix (channels·k² × out_h·out_w), whose product is that image's NCHW output.
/// Images go in chunks whose column matrices fit [`IM2COL_SCRATCH_BYTES`]; each chunk is one
/// im2col launch and one batched GEMM launch.
fn plan_conv_im2col(
    problem: &Problem,
    caps: &DeviceCaps,
    tuning: Option<&GemmTuning>,
) -> Result<Plan, Unsupported> {
    let s = Conv::of(problem);
    let (ckk, plane) = (s.channels * s.ksize * s.ksize, s.out_h * s.out_w);
    let per_image = ckk * plane;
    // The GEMM's batch strides are int arguments.
    int(problem, "channels·ksize²·out_h·out_w", per_image)?;
    int(problem, "filters·out_h·out_w", s.filters * plane)?;
    let tuning = match tuning {
        Some(t) => *t,
        // Few filters make a short GEMM: the first candidate whose tile is not mostly padding.
        None => gemm_candidates(caps)
            .into_iter()
            .find(|t| t.tile_m as usize <= s.filters.next_power_of_two().max(16))
            .unwrap_or_else(|| default_gemm_tuning(caps)),
    };
    let blocked = Blocked::new(caps, tuning, false, (s.filters, plane, ckk))?;
    let chunk = (IM2COL_SCRATCH_BYTES / (per_image * 4).max(1)).clamp(1, s.batch.max(1));
    let group = flat_group(caps);
    let mut launches = Vec::new();
    for first in (0..s.batch).step_by(chunk) {
        let count = chunk.min(s.batch - first);
        let mut args = vec![
            Arg::Input(0),
            Arg::Scratch(0),
            int(problem, "first image", first)?,
            int(problem, "images per chunk", count)?,
        ];
        args.extend(s.args(problem, false)?);
        launches.push(Launch {
            kernel: "im2col".into(),
            global: vec![round_up(count * per_image, group)],
            local: Some(vec![group]),
            args,
        });
        let (global, local) = blocked.geometry(s.filters, plane, count);
        launches.push(Launch {
            kernel: "gemm_blocked".into(),
            global,
            local: Some(local),
            args: vec![
                Arg::Input(1),
                Arg::Scratch(0),
                Arg::Output,
                int(problem, "filters", s.filters)?,
                int(problem, "out_h·out_w", plane)?,
                int(problem, "channels·ksize²", ckk)?,
                Arg::Int(0),
                int(problem, "channels·ksize²·out_h·out_w", per_image)?,
                int(problem, "filters·out_h·out_w", s.filters * plane)?,
                int(problem, "first image", first)?,
            ],
        });
    }
    let mut defines = blocked.defines();
    defines.push(("GPUFLEET_KSIZE", s.ksize.to_string()));
    let mut cfg = blocked.config();
    cfg.extend([
        ("kernel", "im2col + gemm_blocked".to_string()),
        ("images_per_chunk", chunk.to_string()),
    ]);
    Ok(Plan {
        program: "gemm.cl+conv.cl".into(),
        source: format!("{}\n{}", cl::GEMM, cl::CONV),
        options: options(caps, &defines),
        input_storage: vec![Storage::F32; 2],
        output_storage: Storage::F32,
        scratch_bytes: vec![chunk * per_image * 4],
        launches,
        config: config(&cfg),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufleet_kernels::catalog;

    fn caps(max_wg: usize, local: u64, c: (u32, u32), multiple: usize) -> DeviceCaps {
        DeviceCaps {
            max_work_group_size: max_wg,
            local_mem_bytes: local,
            fp16: false,
            opencl_c: c,
            vendor: "test".into(),
            compute_units: 8,
            preferred_multiple: multiple,
        }
    }

    /// An NVIDIA-like GPU, a CPU (PoCL), Clover on an old Radeon, and a very small device.
    fn devices() -> Vec<DeviceCaps> {
        vec![
            caps(1024, 48 * 1024, (1, 2), 32),
            caps(4096, 512 * 1024, (1, 2), 8),
            caps(256, 32 * 1024, (1, 1), 64),
            caps(64, 4 * 1024, (1, 1), 1),
        ]
    }

    fn problem(kernel: &str, variant: &str, params: &[(&str, i64)], dtype: &str) -> Problem {
        let params = params.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        Problem::new(kernel, variant, &params, dtype, true).unwrap()
    }

    fn define(plan: &Plan, name: &str) -> Option<String> {
        plan.options.split(' ').find_map(|o| {
            let rest = o.strip_prefix("-D")?.strip_prefix(name)?;
            match rest.strip_prefix('=') {
                Some(v) => Some(v.to_string()),
                None => rest.is_empty().then(String::new),
            }
        })
    }

    /// Structural checks every plan must pass on `caps`.
    fn check_plan(p: &Problem, plan: &Plan, caps: &DeviceCaps) {
        let what = format!("{}/{}/{} {:?}", p.kernel.name, p.variant, p.dtype, p.params);
        assert_eq!(plan.input_storage.len(), p.input_lens().len(), "{what}");
        assert!(!plan.launches.is_empty(), "{what}");
        let mut output_written = false;
        for l in &plan.launches {
            assert!(
                plan.source.contains(&format!("{}(", l.kernel)),
                "{what}: {} not in {}",
                l.kernel,
                plan.program
            );
            let local = l.local.as_ref().expect("every launch sets its local size");
            assert_eq!(local.len(), l.global.len(), "{what}: {l:?}");
            assert!((1..=3).contains(&l.global.len()), "{what}: {l:?}");
            for (g, lo) in l.global.iter().zip(local) {
                assert!(
                    *lo > 0 && g.is_multiple_of(*lo),
                    "{what}: global {g} vs local {lo}"
                );
            }
            let items: usize = local.iter().product();
            assert!(items <= caps.max_work_group_size, "{what}: {items} items");
            for a in &l.args {
                match a {
                    Arg::Input(i) => assert!(*i < plan.input_storage.len(), "{what}: {a:?}"),
                    Arg::Scratch(i) => assert!(*i < plan.scratch_bytes.len(), "{what}: {a:?}"),
                    Arg::Output => output_written = true,
                    Arg::Int(v) => assert!(*v >= 0, "{what}: {a:?}"),
                    Arg::Float(_) | Arg::Local(_) => {}
                }
            }
        }
        assert!(output_written, "{what}: no launch writes the output");
        let std = if caps.opencl_c == (1, 1) {
            "CL1.1"
        } else {
            "CL1.2"
        };
        assert!(
            plan.options.starts_with(&format!("-cl-std={std}")),
            "{what}: {}",
            plan.options
        );
        assert!(!plan.config.is_empty(), "{what}");
    }

    #[test]
    fn supported_lists_every_device_kernel_with_the_catalog_variants_and_dtypes() {
        let listed = supported();
        for k in catalog() {
            let entry = listed.iter().find(|(name, _, _)| *name == k.name);
            if k.host_only || (k.debug && k.name != "debug_wrong") {
                assert!(entry.is_none(), "{} must not be listed", k.name);
                continue;
            }
            let (_, variants, dtypes) = entry.unwrap_or_else(|| panic!("{} missing", k.name));
            assert_eq!(variants.as_slice(), k.variants, "{}", k.name);
            let names: Vec<&str> = k.dtypes.iter().map(|d| d.name()).collect();
            assert_eq!(dtypes, &names, "{}", k.name);
        }
        assert_eq!(listed.len(), 14);
    }

    #[test]
    fn every_supported_combination_plans_on_every_device_at_default_and_awkward_sizes() {
        let odd: &[(&str, &[(&str, i64)])] = &[
            ("gemm", &[("m", 37), ("n", 53), ("k", 29)]),
            ("gemm", &[("m", 1), ("n", 1), ("k", 1)]),
            ("vec_add", &[("n", 7)]),
            ("softmax", &[("rows", 3), ("cols", 1)]),
            ("layernorm", &[("rows", 100_000), ("cols", 1_000_000)]),
            (
                "conv2d",
                &[("batch", 3), ("height", 5), ("width", 6), ("ksize", 5)],
            ),
        ];
        for caps in devices() {
            for (kernel, variants, dtypes) in supported() {
                for v in &variants {
                    for d in &dtypes {
                        let sizes = odd.iter().filter(|(k, _)| *k == kernel).map(|(_, p)| *p);
                        for params in std::iter::once(&[][..]).chain(sizes) {
                            let p = problem(kernel, v, params, d);
                            let plan = plan(&p, &caps, None)
                                .unwrap_or_else(|e| panic!("{kernel}/{v}/{d} on {caps:?}: {e}"));
                            check_plan(&p, &plan, &caps);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn language_version_follows_the_device_and_never_exceeds_1_2() {
        let p = problem("vec_add", "", &[], "f32");
        let opts = |c| plan(&p, &caps(256, 32768, c, 32), None).unwrap().options;
        assert!(opts((1, 1)).starts_with("-cl-std=CL1.1"));
        assert!(opts((1, 2)).starts_with("-cl-std=CL1.2"));
        assert!(opts((3, 0)).starts_with("-cl-std=CL1.2"));
        let err = plan(&p, &caps(256, 32768, (1, 0), 32), None).unwrap_err();
        assert!(err.0.contains("OpenCL C 1.0"), "{err}");
        let err = plan(&p, &caps(0, 32768, (1, 2), 32), None).unwrap_err();
        assert!(err.0.contains("max_work_group_size=0"), "{err}");
        let mut fp16 = caps(256, 32768, (1, 2), 32);
        fp16.fp16 = true;
        assert_eq!(
            define(&plan(&p, &fp16, None).unwrap(), "GPUFLEET_HAS_FP16"),
            Some(String::new())
        );
        assert_eq!(
            define(
                &plan(&p, &caps(256, 32768, (1, 2), 32), None).unwrap(),
                "GPUFLEET_HAS_FP16"
            ),
            None
        );
    }

    #[test]
    fn unsupported_kernels_and_dtypes_say_why() {
        let gpu = &devices()[0];
        for (kernel, word) in [
            ("membw_cpu", "host memory"),
            ("memlat_cpu", "host memory"),
            ("debug_crash", "on purpose"),
            ("debug_hang", "on purpose"),
        ] {
            let err = plan(&problem(kernel, "", &[], "f32"), gpu, None).unwrap_err();
            assert!(err.0.contains(kernel) && err.0.contains(word), "{err}");
        }
        // Problem::new refuses these, but Problem's fields are public.
        let mut p = problem("softmax", "", &[], "f32");
        p.dtype = Dtype::F16;
        let err = plan(&p, gpu, None).unwrap_err();
        assert!(err.0.contains("dtype f16 of softmax"), "{err}");
        let mut p = problem("gemm", "", &[], "f32");
        p.variant = "strassen".into();
        let err = plan(&p, gpu, None).unwrap_err();
        assert!(
            err.0.contains("strassen") && err.0.contains("blocked"),
            "{err}"
        );
    }

    #[test]
    fn a_tuning_the_device_cannot_run_is_refused_with_the_limit() {
        let small = caps(64, 4096, (1, 2), 32);
        let p = problem("gemm", "blocked", &[], "f32");
        let big = GemmTuning {
            tile_m: 128,
            tile_n: 128,
            tile_k: 8,
            work_m: 8,
            work_n: 8,
            vector: 4,
        };
        let err = plan(&p, &small, Some(&big)).unwrap_err();
        assert!(
            err.0.contains("256 work-items") && err.0.contains("max_work_group_size 64"),
            "{err}"
        );
        let wide = GemmTuning {
            tile_m: 64,
            tile_n: 64,
            tile_k: 16,
            work_m: 8,
            work_n: 8,
            vector: 4,
        };
        let err = plan(&p, &small, Some(&wide)).unwrap_err();
        assert!(err.0.contains("local memory"), "{err}");
        let ragged = GemmTuning {
            tile_m: 30,
            tile_n: 32,
            tile_k: 8,
            work_m: 4,
            work_n: 4,
            vector: 4,
        };
        assert!(plan(&p, &devices()[0], Some(&ragged)).is_err());
        let odd_vector = GemmTuning { vector: 3, ..wide };
        let err = plan(&p, &devices()[1], Some(&odd_vector)).unwrap_err();
        assert!(err.0.contains("vector=3"), "{err}");
    }

    #[test]
    fn candidates_respect_the_device_and_put_big_tiles_first_on_gpus() {
        for caps in devices() {
            let cands = gemm_candidates(&caps);
            assert!(
                (4..=24).contains(&cands.len()),
                "{} candidates on {caps:?}",
                cands.len()
            );
            for (i, c) in cands.iter().enumerate() {
                assert_eq!(tuning_error(c, &caps), None, "{c:?}");
                assert!(blocked_threads(c) <= caps.max_work_group_size);
                assert!(blocked_local_bytes(c) <= caps.local_mem_bytes);
                assert!(!cands[..i].contains(c), "{c:?} listed twice");
            }
            assert_eq!(default_gemm_tuning(&caps), cands[0]);
        }
        let gpu = gemm_candidates(&devices()[0]);
        let big = |t: &GemmTuning| t.tile_m == 128 && t.tile_n == 128 && t.work_m * t.work_n == 64;
        assert!(big(&gpu[0]), "{:?}", gpu[0]);
        assert!(
            gpu.iter().any(|t| t.tile_m <= 32),
            "small tiles for small problems"
        );
        let cpu = gemm_candidates(&devices()[1]);
        assert!(!big(&cpu[0]) && cpu.iter().any(big), "{cpu:?}");
    }

    #[test]
    fn default_tuning_is_valid_even_on_a_tiny_device() {
        let tiny = caps(1, 512, (1, 1), 1);
        let t = default_gemm_tuning(&tiny);
        assert_eq!(tuning_error(&t, &tiny), None, "{t:?}");
        let p = problem("gemm", "blocked", &[("m", 5), ("n", 3), ("k", 9)], "f16");
        check_plan(&p, &plan(&p, &tiny, None).unwrap(), &tiny);
    }

    #[test]
    fn blocked_gemm_parameters_follow_the_tuning_and_the_shape() {
        let gpu = &devices()[0];
        let t = GemmTuning {
            tile_m: 128,
            tile_n: 64,
            tile_k: 8,
            work_m: 8,
            work_n: 4,
            vector: 4,
        };
        let shaped = |m, n, k, dtype| {
            let p = problem("gemm", "blocked", &[("m", m), ("n", n), ("k", k)], dtype);
            plan(&p, gpu, Some(&t)).unwrap()
        };
        let pl = shaped(4096, 4096, 4096, "f32");
        for (name, value) in [
            ("TILE_M", "128"),
            ("TILE_N", "64"),
            ("TILE_K", "8"),
            ("WORK_M", "8"),
        ] {
            assert_eq!(
                define(&pl, &format!("GPUFLEET_{name}")).as_deref(),
                Some(value)
            );
        }
        assert_eq!(define(&pl, "GPUFLEET_VEC").as_deref(), Some("4"));
        assert_eq!(define(&pl, "GPUFLEET_EXACT"), Some(String::new()));
        assert_eq!(pl.launches[0].global, [4096 / 64 * 16, 4096 / 128 * 16]);
        assert_eq!(pl.launches[0].local, Some(vec![16, 16]));
        assert_eq!(pl.config.get("tile_m").map(String::as_str), Some("128"));
        // Ragged sizes: bounds checks on, f32 vectors only as wide as k and n allow.
        let pl = shaped(37, 54, 30, "f32");
        assert_eq!(define(&pl, "GPUFLEET_EXACT"), None);
        assert_eq!(define(&pl, "GPUFLEET_VEC").as_deref(), Some("2"));
        assert_eq!(pl.launches[0].global, [16, 16]);
        assert_eq!(
            define(&shaped(37, 53, 29, "f32"), "GPUFLEET_VEC").as_deref(),
            Some("1")
        );
        // vload_half needs no alignment, so f16 keeps the tuned width.
        let pl = shaped(37, 53, 29, "f16");
        assert_eq!(define(&pl, "GPUFLEET_VEC").as_deref(), Some("4"));
        assert_eq!(define(&pl, "GPUFLEET_HALF"), Some(String::new()));
        assert_eq!(pl.input_storage, [Storage::F16, Storage::F16]);
        assert_eq!(pl.output_storage, Storage::F16);
    }

    #[test]
    fn row_kernels_size_their_groups_to_the_row() {
        let gpu = &devices()[0];
        let rows = |kernel, r, c| {
            plan(
                &problem(kernel, "", &[("rows", r), ("cols", c)], "f32"),
                gpu,
                None,
            )
            .unwrap()
        };
        let pl = rows("softmax", 10, 1);
        assert_eq!(define(&pl, "GPUFLEET_WG").as_deref(), Some("32"));
        assert_eq!(define(&pl, "GPUFLEET_CHUNKS").as_deref(), Some("1"));
        assert_eq!(pl.launches[0].global, [320]);
        let pl = rows("layernorm", 1 << 20, 1024);
        assert_eq!(define(&pl, "GPUFLEET_WG").as_deref(), Some("256"));
        assert_eq!(define(&pl, "GPUFLEET_CHUNKS").as_deref(), Some("4"));
        assert_eq!(
            pl.launches[0].global,
            [ROW_GROUPS_MAX * 256],
            "groups stride over rows"
        );
        assert!(
            matches!(pl.launches[0].args.last(), Some(Arg::Float(e)) if (*e - 1e-5).abs() < 1e-12)
        );
        let pl = rows("rmsnorm", 2, 1 << 20);
        assert_eq!(define(&pl, "GPUFLEET_WG").as_deref(), Some("1024"));
        assert_eq!(
            define(&pl, "GPUFLEET_CHUNKS").as_deref(),
            Some("0"),
            "too long for registers"
        );
    }

    #[test]
    fn elementwise_plans_cover_n_with_one_float4_per_item() {
        let gpu = &devices()[0];
        for n in [1, 4, 5, 1 << 26] {
            let pl = plan(&problem("triad", "", &[("n", n)], "f32"), gpu, None).unwrap();
            let l = &pl.launches[0];
            assert!(l.global[0] * 4 >= n as usize && l.global[0] < (n as usize).div_ceil(4) + 256);
            assert_eq!(l.args[3], Arg::Float(TRIAD_SCALAR));
            assert_eq!(l.args[4], Arg::Int(n as i32));
        }
        let wrong = plan(&problem("debug_wrong", "", &[], "f32"), gpu, None).unwrap();
        assert_eq!(define(&wrong, "GPUFLEET_WRONG"), Some(String::new()));
        assert_eq!(wrong.launches[0].kernel, "vec_add_f32");
        let right = plan(&problem("vec_add", "", &[], "f32"), gpu, None).unwrap();
        assert_eq!(define(&right, "GPUFLEET_WRONG"), None);
        let noop = plan(&problem("noop", "", &[], "f32"), gpu, None).unwrap();
        assert_eq!(noop.launches[0].global, [1]);
    }

    #[test]
    fn im2col_chunks_the_batch_and_refuses_int_overflow() {
        let gpu = &devices()[0];
        let params = [
            ("batch", 64),
            ("channels", 64),
            ("height", 128),
            ("width", 128),
        ];
        let pl = plan(&problem("conv2d", "im2col", &params, "f32"), gpu, None).unwrap();
        // 64·9·128·128 floats = 36 MiB per image: 7 images per 256 MiB chunk.
        assert_eq!(
            pl.config.get("images_per_chunk").map(String::as_str),
            Some("7")
        );
        assert_eq!(pl.launches.len(), 2 * 64usize.div_ceil(7));
        assert_eq!(pl.scratch_bytes, [7 * 64 * 9 * 128 * 128 * 4]);
        let last = pl.launches.last().unwrap();
        assert_eq!(
            last.global.get(2).copied().unwrap_or(1),
            64 - 9 * 7,
            "the last chunk holds the remaining images"
        );
        assert_eq!(last.args[9], Arg::Int(63));
        // channels·25·512·512 does not fit an int stride.
        let huge = [
            ("channels", 512),
            ("height", 512),
            ("width", 512),
            ("ksize", 5),
            ("pad", 2),
        ];
        let err = plan(&problem("conv2d", "im2col", &huge, "f32"), gpu, None).unwrap_err();
        assert!(err.0.contains("exceeds the largest OpenCL int"), "{err}");
        assert!(plan(&problem("conv2d", "direct", &huge, "f32"), gpu, None).is_ok());
    }
}
