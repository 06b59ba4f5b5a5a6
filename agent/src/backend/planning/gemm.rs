//! The GEMM and conv2d pieces every GPU planner shares: conv2d's window arguments and im2col
//! chunking, the GEMM size arguments, and the register-blocked GEMM's tile, its rules and the
//! autotuner's candidate ordering.

use gpufleet_kernels::{ConvShape, Problem};

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
    let p = |name| crate::backend::param(problem, name);
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
