//! What to dispatch for each catalog kernel on a Vulkan device. Pure: a
//! problem and the device's capabilities in, a [`Plan`] out; the host side
//! (`kernel.rs`) executes plans without knowing any kernel.
//!
//! (Interface fixed by the lead; implementation by the shader work.)

use crate::backend::config;
use gpufleet_kernels::Problem;
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
    pub storage_buffer_16bit: bool,
    pub max_compute_workgroup_count: [u32; 3],
    pub vendor_id: u32,
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
}

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
}

/// Register-blocked GEMM parameters (specialization constants): the shared tile, nothing more.
pub type GemmTuning = planning::GemmTile;

/// Why a plan cannot be made (shared by the GPU planners).
pub use crate::backend::planning::Unsupported;

// Planning notes (each shader in `kernels/vulkan/` documents its bindings, push constants and
// specialization constants at its top):
// - Specialization constants 0 and 1 are always the local size x and y; kernel constants start at
//   2. Booleans are passed as `U32(0 | 1)` (a VkBool32).
// - Sizes reach the shaders as `uint` push constants and indices are `uint`, so every buffer must
//   fit in 2^32 - 1 bytes (the most one storage-buffer binding can address: maxStorageBufferRange
//   is a 32-bit limit; the host still checks the device's own, smaller, limit).
// - One-dimensional shaders (element-wise, conv2d, im2col) use grid-stride loops with at most
//   [`GRID_GROUPS_MAX`] groups, so 2^26 elements fit a 65535-group dispatch; element-wise ones move
//   one vec4 per invocation and iteration.
// - Row kernels stride their groups over the rows and keep a row in registers when it is at most
//   [`planning::ROW_CHUNKS_MAX`] chunks of the group size; the `_subgroup` shaders reduce with subgroup
//   arithmetic where the device has it (a module that declares the capability cannot even be
//   loaded elsewhere, hence two modules rather than a specialization constant).
// - gemm `blocked` and conv2d `im2col` share `gemm_blocked` (`gemm_f16acc32` for f16), sized by a
//   `GemmTuning` whose validity rules (`tuning_error`) mirror the shader's assumptions plus the
//   device limits. f16 gemm needs only 16-bit storage in the shaders (f32 arithmetic); it is
//   offered where the device also has shaderFloat16, which the host enables with it.
// - llvmpipe (lavapipe) ends any loop after 65535 iterations per invocation, so trip counts stay
//   well below that on its 1024-invocation groups: a 2^20-column row is 1024 iterations a pass,
//   gemm_naive unrolls k by 4 (k may be 65536), the other loops step by tiles or grids.

mod gemm;
#[cfg(test)]
mod tests;

use crate::backend::Missing;
use crate::backend::planning::{self, dims};
use gemm::{plan_conv_direct, plan_conv_im2col, plan_gemm};
use gpufleet_kernels::sources::vulkan as spv;
use gpufleet_kernels::{Dtype, KernelId, find_kernel};

/// gemm's variant naming the blocked f16 GEMM with f32 accumulation (f16 only).
const F16ACC32: &str = "f16acc32";

/// Specialization constant of the local size x (every shader) and y (the GEMMs).
const SPEC_LOCAL_X: u32 = 0;
const SPEC_LOCAL_Y: u32 = 1;
/// Invocations per group of the one-dimensional shaders, capped by the device.
const FLAT_GROUP: u32 = 256;
/// Groups of a grid-stride or row dispatch: the smallest maxComputeWorkGroupCount[0] Vulkan
/// allows, and plenty to fill any GPU.
const GRID_GROUPS_MAX: u32 = 65535;
/// Bytes of im2col column matrices held at once: 2^27, the smallest maxStorageBufferRange Vulkan
/// allows (lavapipe's), so the scratch binding fits any device unless one image needs more.
const IM2COL_SCRATCH_BYTES: usize = 128 << 20;

/// What a planner function returns.
type Planned = Result<Plan, Unsupported>;
/// Accumulators per invocation of `gemm_blocked` beyond which registers spill.
const MAX_WORK_PER_INVOCATION: u32 = 64;
/// Largest buffer a shader may index: one binding's range is a 32-bit byte count.
const MAX_BINDING_BYTES: u64 = u32::MAX as u64;
/// The push-constant block every device has (maxPushConstantsSize is at least 128).
pub const MAX_PUSH_BYTES: usize = 128;

/// Whether the device can run the f16 GEMMs (see the planning notes).
fn has_f16(caps: &VkCaps) -> bool {
    caps.shader_float16 && caps.storage_buffer_16bit
}

/// Kernels/variants/dtypes the Vulkan backend implements on a device with `caps`: every
/// non-host-only, non-debug catalog kernel with all its variants; gemm in f32, and in f16 (half
/// storage, f32 accumulation: `gemm_f16acc32` for `blocked`) where the device has shaderFloat16
/// and 16-bit storage buffers; plus debug_wrong (vec_add with a deliberate error).
///
/// gemm's `f16acc32` variant (the blocked f16 GEMM under its own name, f16 only) is listed with
/// the f16 dtype when the catalog defines it.
pub fn supported(caps: &VkCaps) -> Vec<(&'static str, Vec<&'static str>, Vec<&'static str>)> {
    let mut gemm_variants = vec!["naive", "tiled", "blocked"];
    let mut gemm_dtypes = vec!["f32"];
    if has_f16(caps) {
        gemm_dtypes.push("f16");
        let catalog = find_kernel("gemm").map_or(&[][..], |k| k.variants);
        if catalog.contains(&F16ACC32) {
            gemm_variants.push(F16ACC32);
        }
    }
    planning::gpu_support(gemm_variants, gemm_dtypes)
}

/// What to dispatch for `problem` on a device with `caps`. `tuning` sets `gemm_blocked`'s
/// parameters (gemm `blocked` and conv2d `im2col`); `None` takes [`default_gemm_tuning`].
///
/// # Errors
/// [`Unsupported`] naming the reason: a host-only or crashing kernel, a dtype or variant the
/// backend does not implement (f16 without 16-bit support), a device reporting no invocations or
/// groups, a tuning the device cannot run, a dispatch beyond the device's group counts, or a
/// buffer above the 2^32 - 1 bytes a binding can address.
pub fn plan(
    problem: &Problem,
    caps: &VkCaps,
    tuning: Option<&GemmTuning>,
) -> Result<Plan, Unsupported> {
    check_caps(caps)?;
    let name = problem.kernel.name;
    if let Err(miss) = crate::backend::check_listed(
        supported(caps),
        problem,
        "vulkan",
        "the Vulkan backend has no shader for it",
    ) {
        return Err(Unsupported(match miss.missing {
            Missing::Variant if problem.variant == F16ACC32 && !has_f16(caps) => format!(
                "variant {F16ACC32} of gemm needs shaderFloat16 ({}) and \
                 storageBuffer16BitAccess ({})",
                caps.shader_float16, caps.storage_buffer_16bit
            ),
            Missing::Dtype => {
                let why = if problem.id() == KernelId::Gemm && problem.dtype == Dtype::F16 {
                    format!(
                        "the device lacks shaderFloat16 ({}) or storageBuffer16BitAccess ({})",
                        caps.shader_float16, caps.storage_buffer_16bit
                    )
                } else {
                    let dtypes = miss.entry.map(|e| e.2.join(", ")).unwrap_or_default();
                    format!("implemented: {dtypes}")
                };
                format!(
                    "dtype {} of {name} is not available on vulkan ({why})",
                    problem.dtype
                )
            }
            _ => miss.message,
        }));
    }
    let plan = match problem.id() {
        KernelId::Gemm => plan_gemm(problem, caps, tuning)?,
        KernelId::Conv2d if problem.variant == "im2col" => plan_conv_im2col(problem, caps, tuning)?,
        KernelId::Conv2d => plan_conv_direct(problem, caps)?,
        KernelId::Softmax
        | KernelId::LayerNorm
        | KernelId::RmsNorm
        | KernelId::LayerNormRmsNormFused => plan_rows(problem, caps)?,
        _ => plan_elementwise(problem, caps)?,
    };
    check_buffers(problem, &plan)?;
    Ok(plan)
}

/// Candidate register-blocked configurations for the autotuner, valid for this device
/// (invocation, workgroup-size and shared-memory limits), best guesses first; 4..20 of them.
///
/// GPUs (a subgroup of 32 or more) get the large tiles that reach their FMA peak first (the
/// OpenCL shader of the same design ran 128×128×8 with 8×8 per invocation at 83% of cuBLAS on an
/// H100); CPUs such as lavapipe and unknown devices get fewer invocations with much work each.
pub fn gemm_candidates(caps: &VkCaps) -> Vec<GemmTuning> {
    let gpu = planning::GPU_TILES.map(GemmTuning::new);
    let small = planning::SMALL_TILES.map(GemmTuning::new);
    planning::candidates(&gpu, &small, caps.subgroup_size >= 32, 20, |c| {
        tuning_error(c, caps).is_none()
    })
}

/// A safe default when nothing is tuned: the first candidate, or a one-invocation 4×4 tile that
/// any device with 384 bytes of shared memory runs.
pub fn default_gemm_tuning(caps: &VkCaps) -> GemmTuning {
    let fallback = GemmTuning::new([4, 4, 4, 4, 4]);
    gemm_candidates(caps).first().copied().unwrap_or(fallback)
}

/// Why `t` cannot run on `caps`, or `None` when it can. The rules mirror what
/// `gemm_blocked.glsl` assumes (vec4 shared tiles, whole vec4 loads along k) plus the device
/// limits.
fn tuning_error(t: &GemmTuning, caps: &VkCaps) -> Option<String> {
    let vec4 = || {
        (!(t.tile_m.is_multiple_of(4) && t.tile_n.is_multiple_of(4) && t.tile_k.is_multiple_of(4)))
            .then(|| {
                format!(
                    "tile {}×{}×{} must be multiples of 4 (vec4 shared tiles)",
                    t.tile_m, t.tile_n, t.tile_k
                )
            })
    };
    if let Some(why) = planning::tile_error(t, &[], vec4, "invocation", MAX_WORK_PER_INVOCATION) {
        return Some(why);
    }
    let (x, y) = blocked_local(t);
    if x > caps.max_workgroup_size[0] || y > caps.max_workgroup_size[1] {
        return Some(format!(
            "local size {x}×{y} exceeds maxComputeWorkGroupSize {}×{}",
            caps.max_workgroup_size[0], caps.max_workgroup_size[1]
        ));
    }
    if x * y > caps.max_workgroup_invocations {
        return Some(format!(
            "{} invocations per group exceed maxComputeWorkGroupInvocations {}",
            x * y,
            caps.max_workgroup_invocations
        ));
    }
    let shared = blocked_shared_bytes(t);
    if shared > u64::from(caps.max_shared_memory_bytes) {
        return Some(format!(
            "{shared} bytes of shared memory exceed maxComputeSharedMemorySize {}",
            caps.max_shared_memory_bytes
        ));
    }
    None
}

/// Local size (x, y) of `gemm_blocked`: (tile_n / work_n, tile_m / work_m).
fn blocked_local(t: &GemmTuning) -> (u32, u32) {
    (t.tile_n / t.work_n, t.tile_m / t.work_m)
}

/// Shared memory of `gemm_blocked`: two buffers of the transposed A slice (rows padded by one
/// vec4) and of the B slice.
fn blocked_shared_bytes(t: &GemmTuning) -> u64 {
    4 * 2 * u64::from(t.tile_k) * u64::from(t.tile_m + 4 + t.tile_n)
}

fn check_caps(caps: &VkCaps) -> Result<(), Unsupported> {
    if caps.max_workgroup_invocations == 0 || caps.max_workgroup_size.contains(&0) {
        return Err(Unsupported(format!(
            "device reports maxComputeWorkGroupInvocations={} and maxComputeWorkGroupSize={:?}: \
             no workgroup can run",
            caps.max_workgroup_invocations, caps.max_workgroup_size
        )));
    }
    if caps.max_compute_workgroup_count.contains(&0) {
        return Err(Unsupported(format!(
            "device reports maxComputeWorkGroupCount={:?}: nothing can be dispatched",
            caps.max_compute_workgroup_count
        )));
    }
    Ok(())
}

/// Refuses a plan with a buffer the shaders' `uint` indices and one binding cannot cover.
fn check_buffers(problem: &Problem, plan: &Plan) -> Result<(), Unsupported> {
    let elem = |s: Storage| if s == Storage::F16 { 2 } else { 4 };
    let lens = problem.input_lens();
    let mut sizes: Vec<(String, u64)> = lens
        .iter()
        .zip(&plan.input_storage)
        .enumerate()
        .map(|(i, (&len, &s))| (format!("input {i}"), len as u64 * elem(s)))
        .collect();
    sizes.push((
        "the output".into(),
        problem.output_len() as u64 * elem(plan.output_storage),
    ));
    for (i, &bytes) in plan.scratch_bytes.iter().enumerate() {
        sizes.push((format!("scratch {i}"), bytes as u64));
    }
    for (what, bytes) in sizes {
        if bytes > MAX_BINDING_BYTES {
            return Err(Unsupported(format!(
                "{what} of {} takes {bytes} bytes, above the {MAX_BINDING_BYTES} one Vulkan \
                 storage-buffer binding can address",
                problem.kernel.name
            )));
        }
    }
    Ok(())
}

/// Largest power of two at most `n` (1 for 0).
fn pow2_floor(n: u32) -> u32 {
    planning::pow2_floor(n as usize) as u32
}

/// `value` as a `uint` push constant.
fn word(problem: &Problem, what: &str, value: usize) -> Result<u32, Unsupported> {
    planning::bounded(problem, what, value, u32::MAX, "uint push constant")
}

/// Named sizes as `uint` push constants.
fn words(problem: &Problem, named: &[(&str, usize)]) -> Result<Vec<u32>, Unsupported> {
    named
        .iter()
        .map(|&(what, v)| word(problem, what, v))
        .collect()
}

/// The SPIR-V of `shader`; every name the planners use is in `sources::vulkan::ALL` (a test
/// checks), so a miss is reported rather than panicking.
fn module(shader: &str) -> Result<&'static [u8], Unsupported> {
    spv::spirv(shader).ok_or_else(|| {
        Unsupported(format!(
            "shader {shader} is not embedded in gpufleet-kernels"
        ))
    })
}

/// One dispatch of `shader`.
fn dispatch(
    shader: &str,
    spec: Vec<(u32, SpecValue)>,
    push: Vec<u32>,
    bindings: Vec<Binding>,
    groups: [u32; 3],
) -> Result<Dispatch, Unsupported> {
    Ok(Dispatch {
        shader: shader.to_string(),
        spirv: module(shader)?,
        spec,
        push,
        bindings,
        groups,
    })
}

/// Invocations per group of the one-dimensional shaders.
fn flat_group(caps: &VkCaps) -> u32 {
    FLAT_GROUP.min(pow2_floor(
        caps.max_workgroup_invocations
            .min(caps.max_workgroup_size[0]),
    ))
}

/// Groups of a grid-stride dispatch over `items` with `group` invocations each.
fn grid_groups(caps: &VkCaps, items: usize, group: u32) -> u32 {
    let needed = u32::try_from(items.div_ceil(group as usize)).unwrap_or(u32::MAX);
    needed
        .min(GRID_GROUPS_MAX)
        .min(caps.max_compute_workgroup_count[0])
        .max(1)
}

/// Refuses `groups` beyond the device's maxComputeWorkGroupCount.
fn check_groups(
    problem: &Problem,
    caps: &VkCaps,
    groups: [u64; 3],
) -> Result<[u32; 3], Unsupported> {
    let mut out = [1u32; 3];
    for (axis, (&g, &limit)) in groups
        .iter()
        .zip(&caps.max_compute_workgroup_count)
        .enumerate()
    {
        if g > u64::from(limit) {
            return Err(Unsupported(format!(
                "{} needs {g} workgroups along {} above maxComputeWorkGroupCount {limit}",
                problem.kernel.name,
                ["x", "y", "z"][axis]
            )));
        }
        out[axis] = g.max(1) as u32;
    }
    Ok(out)
}

fn plan_elementwise(problem: &Problem, caps: &VkCaps) -> Result<Plan, Unsupported> {
    let e = planning::elementwise(problem)?;
    let (shader, inputs) = (e.stem, e.inputs);
    let bindings = planning::buffers(inputs, Binding::Input, Binding::Output);
    let (group, groups, mut push) = match e.n {
        None => (1, 1, Vec::new()),
        Some(n) => {
            let group = flat_group(caps);
            // One vec4 per invocation and iteration.
            let groups = grid_groups(caps, n.div_ceil(4), group);
            (group, groups, vec![word(problem, "n", n)?])
        }
    };
    push.extend(e.scalar.map(f32::to_bits));
    let mut spec = vec![(SPEC_LOCAL_X, SpecValue::U32(group))];
    if shader == "vec_add" {
        let wrong = u32::from(problem.id() == KernelId::DebugWrong);
        spec.push((2, SpecValue::U32(wrong)));
    }
    Ok(Plan {
        input_storage: vec![Storage::F32; inputs],
        output_storage: Storage::F32,
        scratch_bytes: Vec::new(),
        dispatches: vec![dispatch(shader, spec, push, bindings, [groups, 1, 1])?],
        config: e.config(
            ("shader", shader.into()),
            ("groups", groups as usize),
            group as usize,
            "elements_per_invocation",
        ),
    })
}

fn plan_rows(problem: &Problem, caps: &VkCaps) -> Result<Plan, Unsupported> {
    let r = planning::rows(problem);
    let shader = if caps.subgroup_arithmetic {
        format!("{}_subgroup", r.stem)
    } else {
        r.stem.to_string()
    };
    let cap = pow2_floor(
        caps.max_workgroup_invocations
            .min(caps.max_workgroup_size[0])
            .min(caps.max_shared_memory_bytes / 4),
    );
    let (group, chunks) = planning::row_group(r.cols, cap as usize);
    let group = group as u32;
    let groups = u32::try_from(r.rows)
        .unwrap_or(u32::MAX)
        .min(GRID_GROUPS_MAX)
        .min(caps.max_compute_workgroup_count[0])
        .max(1);
    let bindings = planning::buffers(r.inputs, Binding::Input, Binding::Output);
    let mut push = words(problem, &[("rows", r.rows), ("cols", r.cols)])?;
    push.extend(r.eps.map(f32::to_bits));
    let spec = vec![
        (SPEC_LOCAL_X, SpecValue::U32(group)),
        (2, SpecValue::U32(chunks as u32)),
    ];
    Ok(Plan {
        input_storage: vec![Storage::F32; r.inputs],
        output_storage: Storage::F32,
        scratch_bytes: Vec::new(),
        dispatches: vec![dispatch(&shader, spec, push, bindings, [groups, 1, 1])?],
        config: r.config(
            ("shader", shader.clone()),
            group as usize,
            groups as usize,
            chunks,
        ),
    })
}
