//! The types a Vulkan plan is made of: the device capabilities the planner may assume, the
//! dispatches, bindings and specialization constants of a [`Plan`], and the blocked GEMM's
//! [`GemmTuning`].

use crate::backend::planning;
use std::collections::BTreeMap;

/// What the planner may assume about a device.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct VkCaps {
    /// Default subgroup size (VkPhysicalDeviceSubgroupProperties).
    pub subgroup_size: u32,
    /// Subgroup arithmetic (add/max reductions) supported in compute.
    pub subgroup_arithmetic: bool,
    pub max_workgroup_invocations: u32,
    pub max_workgroup_size: [u32; 3],
    pub max_shared_memory_bytes: u32,
    /// `shaderFloat16` + 16-bit storage buffer access: the `f16acc32` GEMM.
    pub shader_float16: bool,
    /// `shaderFloat64`: compute_peak's fp64.
    pub shader_float64: bool,
    /// `shaderIntegerDotProduct` (VK_KHR_shader_integer_dot_product): compute_peak's int8.
    pub integer_dot_product: bool,
    /// Which packed formats' team gemvs take a quarter-row's dot product in integers.
    pub quant_dot: QuantDot,
    pub storage_buffer_16bit: bool,
    pub max_compute_workgroup_count: [u32; 3],
    pub vendor_id: u32,
    /// SMs or CUs where `VK_NV_shader_sm_builtins` or `VK_AMD_shader_core_properties` says, else 0.
    pub compute_units: u32,
    /// `llm_attention` reads keys and values element by element even where 4-vectors would do
    /// (set from [`SCALAR_ATTENTION_ENV`](crate::backend::vulkan::kernel::SCALAR_ATTENTION_ENV)).
    pub scalar_attention: bool,
    /// A prefill's attention runs `llm_attention`, not `llm_attention_tile` (set from
    /// [`NO_TILE_ATTENTION_ENV`](crate::backend::vulkan::kernel::NO_TILE_ATTENTION_ENV)).
    pub no_tile_attention: bool,
    /// NVIDIA's cooperative matrices (`VK_NV_cooperative_matrix`) with a 16×16×16 shape of half
    /// inputs and f32 sums in subgroups of 32, and half arithmetic: `llm_linear_f16_coopmat`,
    /// `_q8_coopmat` and `_q4_coopmat`.
    /// Cleared by [`NO_COOPMAT_ENV`](crate::backend::vulkan::kernel::NO_COOPMAT_ENV).
    pub coopmat_f16: bool,
    /// The blocks a lane of a packed team gemv takes a quarter of a trip (`QB` in
    /// llm_gemv_team.glsl); 0: the planner's own (set from
    /// [`QUANT_BLOCKS_ENV`](crate::backend::vulkan::kernel::QUANT_BLOCKS_ENV)).
    pub quant_blocks: u32,
}

/// Which packed formats' team gemvs take their dot products in integers (`llm_gemv_team_q8_dot`,
/// `_q4_dot`), where the device accelerates dot products of packed bytes (signed, unsigned and
/// mixed), or as [`QUANT_DOT_ENV`](crate::backend::vulkan::kernel::QUANT_DOT_ENV) says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QuantDot {
    /// Neither (no accelerated dot products, or the switch at `0`).
    #[default]
    Off,
    /// Q8_0 only, where the device accelerates them: on an H100 the `8b` q8_0 decode 1.05×, the
    /// q4_0 one 0.87× (six half-rate products for a Q4_0 quarter-row do not beat its 27 float
    /// instructions; docs/PERFORMANCE.md).
    Q8,
    /// Both (the switch at `1`, wherever the device has `shaderIntegerDotProduct`).
    All,
}

impl QuantDot {
    /// Whether `format`'s team gemvs take their dot products in integers.
    pub fn takes(self, format: gpufleet_kernels::quant::BlockFormat) -> bool {
        use gpufleet_kernels::quant::BlockFormat;
        match self {
            QuantDot::Off => false,
            QuantDot::Q8 => format == BlockFormat::Q8_0,
            QuantDot::All => true,
        }
    }
}

/// How a buffer is stored on the device (f16: IEEE half, converted on the
/// host); the element format every GPU backend shares.
pub use crate::backend::storage::Elem as Storage;

/// What a descriptor binding points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    Input(usize),
    Output,
    Scratch(usize),
    /// Elements `first..first + len` of input `input` (counted in its storage), bound at that
    /// offset: one tensor of an input larger than one binding or one allocation (a model's
    /// weights). `first` is a multiple of [`SLICE_ALIGN`] bytes, which every device's
    /// minStorageBufferOffsetAlignment divides.
    Slice {
        input: usize,
        first: usize,
        len: usize,
    },
}

/// The alignment in bytes of a [`Binding::Slice`]'s start: the largest
/// minStorageBufferOffsetAlignment the Vulkan specification allows.
pub const SLICE_ALIGN: usize = 256;

/// A specialization constant value (constant_id → value).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SpecValue {
    U32(u32),
    I32(i32),
    F32(f32),
}

/// One vkCmdDispatch of one pipeline.
#[derive(Debug, Clone, PartialEq)]
pub struct Dispatch {
    /// Shader stem (`gemm_blocked`), for logs and cache keys.
    pub shader: String,
    /// What it does, for the per-dispatch profile (`gemv 2048×3072 +norm`); the shader's stem
    /// unless the planner says more.
    pub label: String,
    /// SPIR-V words of the shader (from `gpufleet_kernels::sources::vulkan`).
    pub spirv: &'static [u8],
    pub spec: Vec<(u32, SpecValue)>,
    /// Push-constant block as 32-bit words (ints and f32 bit patterns), in
    /// the shader's declared order; at most 128 bytes.
    pub push: Vec<u32>,
    /// Storage buffers at set 0, binding 0.. in this order.
    pub bindings: Vec<Binding>,
    pub groups: [u32; 3],
}

/// Everything needed to run one problem. Dispatches run in order with a
/// compute→compute barrier between them; one iteration is timed from a
/// timestamp before the first to one after the last.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// How each input is stored on the device (f16 is converted on the host).
    pub input_storage: Vec<Storage>,
    pub output_storage: Storage,
    /// Bytes of each scratch buffer (device-local, bound like the others).
    pub scratch_bytes: Vec<usize>,
    pub dispatches: Vec<Dispatch>,
    /// The dispatch configuration, recorded with the result.
    pub config: BTreeMap<String, String>,
    /// A transformer's pass shift and the decode passes replayed (none elsewhere).
    pub passes: Passes,
}

/// The passes of a decode, for recording one pass and replaying it for the others
/// (`kernel/record.rs`; `gpufleet_kernels::llm::Pass` says why a pass is the last one moved).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Passes {
    /// The scratch buffer of one `uint`, the pass shift, that `llm_embed`, `llm_rope` and
    /// `llm_attention` add to their positions: zero, or in a replayed decode the first pass's number
    /// minus the last's at the start of an iteration, one more after each replay (the body's LM
    /// head adds it).
    pub shift: Option<usize>,
    /// Where the decode's passes can be replayed: how.
    pub replay: Option<Replay>,
}

/// A decode's pass recorded once and replayed: the body is the last pass not kept for checking
/// (all folded), replayed for every such pass while the kept ones run their own dispatches; where
/// every pass is kept (`tiny`, `small`), the last pass, replayed for each and its region copied out
/// to the pass's own. The dispatches before the first pass (the cache prefix) run as they are. The
/// body's LM head moves the shift on to the next pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Replay {
    /// The dispatches before the first pass.
    pub prologue: usize,
    /// The body's dispatches, the ones recorded once.
    pub body: std::ops::Range<usize>,
    /// The body's arena elements where it is a kept pass (the kept passes' regions are copied
    /// from there).
    pub region: Option<std::ops::Range<usize>>,
    /// Each pass in order.
    pub passes: Vec<Replayed>,
}

/// How one pass of a [`Replay`] runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Replayed {
    /// The body with this shift, then its region copied to this arena element where given.
    Body { shift: u32, copy_to: Option<usize> },
    /// Its own dispatches (a kept pass where the body is not), with the shift at zero.
    Own(std::ops::Range<usize>),
}

/// Register-blocked GEMM parameters (specialization constants): the shared tile, nothing more.
pub type GemmTuning = planning::GemmTile;

/// Why a plan cannot be made (shared by the GPU planners).
pub use crate::backend::planning::Unsupported;

/// What a planner function returns.
pub(super) type Planned = Result<Plan, Unsupported>;
