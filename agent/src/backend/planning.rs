//! The planning pieces the OpenCL, Vulkan and HIP planners share, so a catalog kernel means the
//! same entry point, the same scalar arguments in the same order and the same refusals on every
//! GPU backend: the `Unsupported` error, the element-wise and row entry tables, integer
//! arguments checked against their 32-bit bound, conv2d's window arguments and im2col chunking,
//! the GEMM size arguments, row-kernel group sizes, and the register-blocked GEMM tile rules and
//! candidate ordering. Pure: no device, no I/O.
//!
//! Each planner keeps what is its API's own (OpenCL build options, Vulkan specialization
//! constants and push-constant words, HIP's compiled instantiations) and maps these pieces onto it.

use super::storage::Elem;
use super::{BackendError, SupportEntry, check_listed};
use gpufleet_kernels::{ConvShape, KernelId, NORM_EPS, Problem, TRIAD_SCALAR};
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
    backend: &str,
    no_kernel: &str,
) -> Result<(), Unsupported> {
    check_listed(list, problem, backend, no_kernel).map_err(|m| Unsupported(m.message))
}

/// The support list every GPU planner starts from: each non-host-only catalog kernel in f32 with
/// its variants (gemm as `gemm_variants` in `gemm_dtypes`), plus debug_wrong, the networks and
/// the `cnn_*` layers.
pub fn gpu_support(
    gemm_variants: Vec<&'static str>,
    gemm_dtypes: Vec<&'static str>,
) -> Vec<SupportEntry> {
    let mut out = vec![("gemm", gemm_variants, gemm_dtypes)];
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
        out.push((name, vec!["default"], vec!["f32"]));
    }
    out.push(("conv2d", vec!["direct", "im2col"], vec!["f32"]));
    for name in ["relu", "sigmoid", "tanh", "debug_wrong"] {
        out.push((name, vec!["default"], vec!["f32"]));
    }
    // The networks and the `cnn_*` layers: every GPU planner runs them through `model`.
    for k in gpufleet_kernels::catalog() {
        if matches!(k.id, gpufleet_kernels::KernelId::Model(_)) {
            out.push((k.name, k.variants.to_vec(), vec!["f32"]));
        }
    }
    out
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

/// An element-wise kernel as every GPU planner launches it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Elementwise {
    /// Entry-point stem (`vec_add`; debug_wrong is vec_add with a deliberate error).
    pub stem: &'static str,
    /// Input buffers read.
    pub inputs: usize,
    /// Elements; `None` for noop, which copies one element with one work-item.
    pub n: Option<usize>,
    /// triad's scalar.
    pub scalar: Option<f32>,
}

impl Elementwise {
    /// The configuration its plan records: the entry point (`("kernel", …)` or `("shader", …)`),
    /// the grid (`("global", work-items)` or `("groups", workgroups)`), the group size and, under
    /// `per_item`, the elements one work-item handles: one vector of 4, or 1 for noop.
    pub fn config(
        &self,
        entry: (&str, String),
        grid: (&str, usize),
        local: usize,
        per_item: &str,
    ) -> BTreeMap<String, String> {
        let per = if self.n.is_some() { "4" } else { "1" };
        super::config(&[
            entry,
            (grid.0, grid.1.to_string()),
            ("local", local.to_string()),
            (per_item, per.into()),
        ])
    }
}

/// `problem` as an element-wise kernel.
///
/// # Errors
/// [`Unsupported`] for a kernel that is not element-wise.
pub fn elementwise(problem: &Problem) -> Result<Elementwise, Unsupported> {
    let (stem, inputs) = match problem.id() {
        KernelId::VecAdd | KernelId::DebugWrong => ("vec_add", 2),
        KernelId::Copy => ("copy", 1),
        KernelId::Triad => ("triad", 2),
        KernelId::Relu => ("relu", 1),
        KernelId::Sigmoid => ("sigmoid", 1),
        KernelId::Tanh => ("tanh", 1),
        KernelId::Noop => ("noop", 1),
        other => {
            return Err(Unsupported(format!(
                "kernel {other:?} has no element-wise plan"
            )));
        }
    };
    let noop = problem.id() == KernelId::Noop;
    Ok(Elementwise {
        stem,
        inputs,
        n: (!noop).then(|| super::param(problem, "n")),
        scalar: (problem.id() == KernelId::Triad).then_some(TRIAD_SCALAR),
    })
}

/// A row kernel (softmax and the normalisations) as every GPU planner launches it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowKernel {
    /// Entry-point stem: `softmax`, `layernorm`, `rmsnorm`, `layernorm_rmsnorm`.
    pub stem: &'static str,
    /// Input buffers read: the rows, then gamma/beta as the kernel needs.
    pub inputs: usize,
    pub rows: usize,
    pub cols: usize,
    /// The normalisations' epsilon; softmax has none.
    pub eps: Option<f32>,
}

impl RowKernel {
    /// The configuration its plan records: the entry point (`("kernel", …)` or `("shader", …)`),
    /// the group size, the number of groups, and whether a row is held in registers (`chunks` > 0).
    pub fn config(
        &self,
        entry: (&str, String),
        local: usize,
        groups: usize,
        chunks: usize,
    ) -> BTreeMap<String, String> {
        let in_registers = if chunks > 0 { "yes" } else { "no" };
        super::config(&[
            entry,
            ("local", local.to_string()),
            ("groups", groups.to_string()),
            ("row_in_registers", in_registers.into()),
        ])
    }

    /// How this kernel's rows are split over several groups, or `None` for one group per row:
    /// [`row_split`] decides, and only for softmax and layernorm (their one-group kernels read a
    /// row three times; rmsnorm reads it twice either way and measured no faster split, the fused
    /// kernel has three dependent reductions), on a device whose groups (at most `cap`
    /// invocations) hold [`SPLIT_GROUP`].
    pub fn split(&self, chunks: usize, compute_units: usize, cap: usize) -> Option<RowSplit> {
        let split = row_split(self.rows, self.cols, chunks, compute_units);
        let splits = matches!(self.stem, "softmax" | "layernorm");
        (split > 1 && splits && SPLIT_GROUP <= cap).then(|| RowSplit {
            split,
            len: self.cols.div_ceil(split),
            groups: self.rows * split,
        })
    }

    /// [`RowKernel::config`] of a split plan, with the groups per row.
    pub fn split_config(&self, entry: (&str, String), s: &RowSplit) -> BTreeMap<String, String> {
        let mut config = self.config(entry, SPLIT_GROUP, s.groups, 0);
        config.insert("groups_per_row".into(), s.split.to_string());
        config
    }
}

/// A split of few wide rows (see [`RowKernel::split`]): `split` groups of [`SPLIT_GROUP`] per row,
/// group g on row g / split and columns [s·len, min((s+1)·len, cols)) with s = g % split; a
/// statistics launch writes two partials per chunk into scratch 0, an apply launch merges them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowSplit {
    pub split: usize,
    /// Columns per chunk.
    pub len: usize,
    /// Groups in all: rows × split.
    pub groups: usize,
}

impl RowSplit {
    /// Bytes of the partials (two f32 per chunk: max and Σ exp for softmax, mean and Σ squared
    /// deviations for layernorm).
    pub fn scratch_bytes(&self) -> usize {
        4 * 2 * self.groups
    }
}

/// `problem` as a row kernel.
pub fn rows(problem: &Problem) -> RowKernel {
    let (stem, inputs) = match problem.id() {
        KernelId::Softmax => ("softmax", 1),
        KernelId::LayerNorm => ("layernorm", 3),
        KernelId::RmsNorm => ("rmsnorm", 2),
        _ => ("layernorm_rmsnorm", 4),
    };
    RowKernel {
        stem,
        inputs,
        rows: super::param(problem, "rows"),
        cols: super::param(problem, "cols"),
        eps: (problem.id() != KernelId::Softmax).then_some(NORM_EPS as f32),
    }
}

/// Row elements a work-item may keep in registers; longer rows are read again from cache.
pub const ROW_CHUNKS_MAX: usize = 16;
/// From this many columns on, the row kernels use 1024 work-items where the device allows.
pub const WIDE_ROW_COLS: usize = 8192;

/// Work-group size of a row kernel over `cols` columns, at most `cap` (a power of two), and the
/// chunks of that size a work-item keeps in registers (0: the row is read again from cache).
pub fn row_group(cols: usize, cap: usize) -> (usize, usize) {
    let mut group = if cols >= WIDE_ROW_COLS { 1024 } else { 256 }.min(cap);
    // Short rows: no more work-items than columns, but a warp's worth.
    while group > 32 && group / 2 >= cols {
        group /= 2;
    }
    let chunks = cols.div_ceil(group);
    (group, if chunks <= ROW_CHUNKS_MAX { chunks } else { 0 })
}

/// Groups a split-row launch aims for per compute unit: enough waves that no SM idles at the tail.
pub const SPLIT_GROUPS_PER_UNIT: usize = 8;
/// Most groups that share one row.
pub const SPLIT_MAX: usize = 64;
/// Work-group size of the split-row kernels (several resident per compute unit).
pub const SPLIT_GROUP: usize = 256;

/// How many work-groups share each row of a row kernel (1: one group per row, the plain kernels).
///
/// Rows are split only when one group cannot keep its row in registers (`chunks == 0`, so the
/// plain kernel reads the row from memory more than once anyway) and there are too few rows to
/// give every compute unit [`SPLIT_GROUPS_PER_UNIT`] groups; then each row gets the power of two
/// of groups that does, at most [`SPLIT_MAX`] and never so many that a group has less than four
/// columns per work-item of [`SPLIT_GROUP`].
pub fn row_split(rows: usize, cols: usize, chunks: usize, compute_units: usize) -> usize {
    let target = SPLIT_GROUPS_PER_UNIT * compute_units.max(1);
    if chunks > 0 || rows == 0 || rows >= target {
        return 1;
    }
    let most = (cols / (4 * SPLIT_GROUP)).clamp(1, SPLIT_MAX);
    target
        .div_ceil(rows)
        .next_power_of_two()
        .min(pow2_floor(most))
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

/// conv2d's arguments describing the input and the window, from `channels` on, each with its
/// name; `with_filters` adds `filters` after `width` (the direct kernel's order).
pub fn conv_window(s: &ConvShape, with_filters: bool) -> Vec<(&'static str, usize)> {
    let mut out = vec![
        ("channels", s.channels),
        ("height", s.height),
        ("width", s.width),
    ];
    if with_filters {
        out.push(("filters", s.filters));
    }
    out.extend([
        ("stride", s.stride),
        ("pad", s.pad),
        ("out_h", s.out_h),
        ("out_w", s.out_w),
    ]);
    out
}

/// The direct conv2d's scalar arguments: `batch`, then [`conv_window`] with the filters.
pub fn conv_direct_args(s: &ConvShape) -> Vec<(&'static str, usize)> {
    let mut out = vec![("batch", s.batch)];
    out.extend(conv_window(s, true));
    out
}

/// The size arguments of every GEMM kernel for one m×n×k product: m, n, k, then the batch strides
/// of A, B, C and C's first batch, all 0.
pub fn gemm_args(m: usize, n: usize, k: usize) -> [(&'static str, usize); 7] {
    [
        ("m", m),
        ("n", n),
        ("k", k),
        ("a batch stride", 0),
        ("b batch stride", 0),
        ("c batch stride", 0),
        ("first c batch", 0),
    ]
}

/// conv2d `im2col`: images unfolded into scratch column matrices (channels·k² × out_h·out_w), then
/// the GEMM of the weights (filters × channels·k²) with each image's columns, batched over a chunk
/// of images whose column matrices fit the scratch budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Im2col {
    pub shape: ConvShape,
    /// channels·ksize²: the GEMM's k.
    pub ckk: usize,
    /// out_h·out_w: the GEMM's n.
    pub plane: usize,
    /// Elements of one image's column matrix.
    pub per_image: usize,
    /// Images per chunk.
    pub chunk: usize,
}

impl Im2col {
    /// The chunking of `s` when at most `scratch_bytes` of f32 columns are held at once.
    pub fn new(s: &ConvShape, scratch_bytes: usize) -> Im2col {
        let (ckk, plane) = (s.channels * s.ksize * s.ksize, s.out_h * s.out_w);
        let per_image = ckk * plane;
        Im2col {
            shape: *s,
            ckk,
            plane,
            per_image,
            chunk: (scratch_bytes / (per_image * 4).max(1)).clamp(1, s.batch.max(1)),
        }
    }

    /// `(first image, images)` of each chunk.
    pub fn chunks(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        (0..self.shape.batch)
            .step_by(self.chunk)
            .map(|first| (first, self.chunk.min(self.shape.batch - first)))
    }

    /// Bytes of the scratch buffer holding one chunk's columns.
    pub fn scratch_bytes(&self) -> usize {
        self.chunk * self.per_image * 4
    }

    /// The im2col kernel's scalar arguments for a chunk: first image, images, then the window.
    pub fn unfold_args(&self, first: usize, count: usize) -> Vec<(&'static str, usize)> {
        let mut out = vec![("first image", first), ("images per chunk", count)];
        out.extend(conv_window(&self.shape, false));
        out
    }

    /// The batched GEMM's size arguments for the chunk starting at `first` (see [`gemm_args`]).
    pub fn gemm_args(&self, first: usize) -> [(&'static str, usize); 7] {
        let filters = self.shape.filters;
        [
            ("filters", filters),
            ("out_h·out_w", self.plane),
            ("channels·ksize²", self.ckk),
            ("a batch stride", 0),
            ("channels·ksize²·out_h·out_w", self.per_image),
            ("filters·out_h·out_w", filters * self.plane),
            ("first image", first),
        ]
    }
}

/// A register-blocked GEMM configuration: `[tile_m, tile_n, tile_k, work_m, work_n]`, a tile of C
/// per work-group and the outputs each work-item computes.
pub trait Tile {
    fn tile(&self) -> [u32; 5];
}

/// A GEMM's `(m, n, k)`.
pub fn gemm_dims(problem: &Problem) -> (usize, usize, usize) {
    let p = |name| super::param(problem, name);
    (p("m"), p("n"), p("k"))
}

/// A register-blocked GEMM tile, the part of a tuning every GPU backend shares: a work-group tile of
/// C of tile_m × tile_n stepping k by tile_k, each work-item computing work_m × work_n outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct GemmTile {
    pub tile_m: u32,
    pub tile_n: u32,
    pub tile_k: u32,
    pub work_m: u32,
    pub work_n: u32,
}

impl GemmTile {
    /// The tile `[tile_m, tile_n, tile_k, work_m, work_n]`.
    pub const fn new(tile: [u32; 5]) -> GemmTile {
        let [tile_m, tile_n, tile_k, work_m, work_n] = tile;
        GemmTile {
            tile_m,
            tile_n,
            tile_k,
            work_m,
            work_n,
        }
    }
}

impl Tile for GemmTile {
    fn tile(&self) -> [u32; 5] {
        [
            self.tile_m,
            self.tile_n,
            self.tile_k,
            self.work_m,
            self.work_n,
        ]
    }
}

/// The configuration lines every blocked GEMM records: its tile, then `extra`.
pub fn tile_config<const N: usize>(
    t: &impl Tile,
    extra: [(&'static str, String); N],
) -> Vec<(&'static str, String)> {
    let [tile_m, tile_n, tile_k, work_m, work_n] = t.tile();
    let mut out = vec![
        ("tile_m", tile_m.to_string()),
        ("tile_n", tile_n.to_string()),
        ("tile_k", tile_k.to_string()),
        ("work_m", work_m.to_string()),
        ("work_n", work_n.to_string()),
    ];
    out.extend(extra);
    out
}

/// Side of a square work-group or tile (`gemm_naive`, `gemm_tiled`): 16, halved until the device
/// `fits` it.
pub fn square_side(fits: impl Fn(usize) -> bool) -> usize {
    let mut side = 16;
    while side > 1 && !fits(side) {
        side /= 2;
    }
    side
}

/// Whether an m×n×k product is a whole number of `t`'s tiles.
pub fn exact_tiles(t: &impl Tile, m: usize, n: usize, k: usize) -> bool {
    let [tile_m, tile_n, tile_k, ..] = t.tile().map(|v| v as usize);
    m.is_multiple_of(tile_m) && n.is_multiple_of(tile_n) && k.is_multiple_of(tile_k)
}

/// Accumulators per work-item of a blocked GEMM beyond which registers spill: 128 accumulators,
/// 2·(work_m + work_n) fragments and the prefetched slice fit a GPU's 255 registers per thread
/// (cuBLAS's own fp32 kernels on Ampere and Hopper keep 128 per thread).
pub const MAX_WORK_PER_ITEM: u32 = 128;

/// The rules every blocked GEMM shares: each field in 1..=1024 (`extra` fields too), and, after
/// `more` (the API's own layout rules), the tile a multiple of the work per `item` and at most
/// [`MAX_WORK_PER_ITEM`] accumulators per `item`.
pub fn tile_error(
    t: &impl Tile,
    extra: &[u32],
    more: impl FnOnce() -> Option<String>,
    item: &str,
) -> Option<String> {
    let f = t.tile();
    if f.iter().chain(extra).any(|&v| v == 0 || v > 1024) {
        return Some("every field must be between 1 and 1024".into());
    }
    if let Some(why) = more() {
        return Some(why);
    }
    let [tile_m, tile_n, _, work_m, work_n] = f;
    if !tile_m.is_multiple_of(work_m) || !tile_n.is_multiple_of(work_n) {
        return Some(format!(
            "tile {tile_m}×{tile_n} is not a multiple of the work per {item} {work_m}×{work_n}"
        ));
    }
    if work_m * work_n > MAX_WORK_PER_ITEM {
        return Some(format!(
            "work_m·work_n={} exceeds {MAX_WORK_PER_ITEM} accumulators per {item}",
            work_m * work_n
        ));
    }
    None
}

/// Blocked GEMM tiles `[tile_m, tile_n, tile_k, work_m, work_n]` for GPUs, best first: ordered by
/// GFLOP/s of a 4096³ f32 product on an H100 (OpenCL: 128×128×8 reached 41.7 TFLOP/s, 83% of
/// cuBLAS SGEMM; 64×64×16 with 64 work-items ties and gives mid-sized problems more groups).
/// The 16×8 tiles are cuBLAS's shape: 128 work-items of 128 accumulators each, half the shared
/// reads per FMA of 8×8.
#[rustfmt::skip]
pub const GPU_TILES: [[u32; 5]; 15] = [
    [128, 128, 8, 8, 8], [64, 64, 16, 8, 8], [128, 128, 8, 16, 8], [128, 128, 16, 16, 8],
    [128, 128, 8, 8, 16], [128, 128, 16, 8, 8], [128, 64, 16, 8, 4],
    [64, 128, 16, 4, 8], [64, 64, 8, 8, 8], [64, 32, 16, 8, 4], [128, 64, 8, 8, 8],
    [64, 64, 16, 4, 4], [32, 64, 16, 4, 4], [64, 64, 8, 4, 4], [32, 32, 16, 4, 4],
];

/// Blocked GEMM tiles for CPUs and unknown devices: few work-items with much work each, the
/// cheapest to build first. The first is the default tuning and the one a search always tries,
/// and CPU compilers are slow on big register tiles: PoCL builds a half-precision 4×4-per-item
/// tile in about 4 s but an 8×8 one in about 15 s (2-core Xeon, LLVM 14), while on f32 the two run
/// within noise of each other (9 ms for 512³).
#[rustfmt::skip]
pub const SMALL_TILES: [[u32; 5]; 11] = [
    [32, 32, 8, 4, 4], [64, 64, 16, 8, 8], [32, 32, 16, 4, 4], [64, 32, 16, 8, 4],
    [64, 64, 8, 8, 8], [16, 16, 16, 4, 4], [16, 32, 8, 4, 4], [16, 16, 8, 4, 4],
    [16, 16, 8, 2, 2], [8, 8, 8, 2, 2], [4, 4, 4, 4, 4],
];

/// The autotuner's candidates: `gpu` first on a GPU (a warp or wavefront of 32 or more), else
/// `small` first; without repeats, only those `valid` on the device, at most `limit`.
pub fn candidates<T: PartialEq + Copy>(
    gpu: &[T],
    small: &[T],
    gpu_first: bool,
    limit: usize,
    valid: impl Fn(&T) -> bool,
) -> Vec<T> {
    let (first, second) = if gpu_first {
        (gpu, small)
    } else {
        (small, gpu)
    };
    let mut out: Vec<T> = Vec::new();
    for c in first.iter().chain(second) {
        if out.len() < limit && !out.contains(c) && valid(c) {
            out.push(*c);
        }
    }
    out
}

/// The tuning of conv2d `im2col`'s GEMM: the explicit one, else the first candidate whose tile
/// is not mostly padding for so few `filters` (a short GEMM), else `default`.
pub fn im2col_tuning<T: Tile + Copy>(
    explicit: Option<&T>,
    candidates: Vec<T>,
    filters: usize,
    default: impl FnOnce() -> T,
) -> T {
    match explicit {
        Some(t) => *t,
        None => candidates
            .into_iter()
            .find(|t| t.tile()[0] as usize <= filters.next_power_of_two().max(16))
            .unwrap_or_else(default),
    }
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

/// The launches of a network or a `cnn_*` layer, shared by the OpenCL, Vulkan and HIP planners.
pub mod model;
/// Test helpers the planners' unit tests share.
#[cfg(test)]
pub mod testing;
#[cfg(test)]
mod tests;
