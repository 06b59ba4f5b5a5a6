//! The types an OpenCL plan is made of: the device capabilities the planner may assume, the
//! program, launches and arguments of a [`Plan`], and the blocked GEMM's [`GemmTuning`].

use crate::backend::planning::{self, Tile};

/// What the planner may assume about a device.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeviceCaps {
    pub max_work_group_size: usize,
    pub local_mem_bytes: u64,
    /// `cl_khr_fp16`: half arithmetic. Without it half data is still read
    /// and written through vload_half/vstore_half.
    pub fp16: bool,
    /// `cl_khr_fp64`: double arithmetic (compute_peak's fp64).
    pub fp64: bool,
    /// `cl_khr_integer_dot_product` with packed bytes: compute_peak's int8.
    pub int8_dot: bool,
    /// OpenCL C version the device compiles (1.1 on Clover, 1.2 on PoCL...).
    pub opencl_c: (u32, u32),
    pub vendor: String,
    pub compute_units: u32,
    /// Preferred work-group size multiple (warp/wavefront width), 1 if unknown.
    pub preferred_multiple: usize,
    /// The device is a CPU (PoCL): work-items of a group run one after another between barriers,
    /// so kernels that reduce across a group through barriers are slow there.
    pub cpu: bool,
    /// A debug switch (`GPUFLEET_DEBUG_OPENCL_UNFUSED_ROPE=1`): the RoPE runs its own launch
    /// rather than folded into the Q/K/V projection, to measure what the fusion gives.
    pub unfused_rope: bool,
    /// An experiment switch (`GPUFLEET_DEBUG_OPENCL_WIDE_QUANT_TEAMS=1`): packed team gemvs
    /// widen their teams for projections with few features (`planning::llm::quant_lanes`) instead
    /// of keeping 32 work-items a team; slower on an H100 (docs/PERFORMANCE.md), kept to measure
    /// on other GPUs.
    pub wide_quant_teams: bool,
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
    pub(super) fn new((name, source): (&str, &str), options: String) -> Program {
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

/// What a planner function returns.
pub(super) type Planned = Result<Plan, Unsupported>;
