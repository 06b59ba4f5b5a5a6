//! What to dispatch for each catalog kernel on a Vulkan device. Pure: a
//! problem and the device's capabilities in, a [`Plan`] out; the host side
//! (`kernel.rs`) executes plans without knowing any kernel.
//!
//! `types.rs` holds what a plan is made of (caps, dispatches, bindings, GEMM
//! tuning), `tuning.rs` the GEMM tuning candidates and their rules, `args.rs`
//! what the planners hand a dispatch (module, spec and push constants, group
//! counts), `gemm.rs` the GEMM and conv2d planners, `llm.rs` the transformer
//! kernels' (one dispatch per step), `tests.rs` the unit tests. This file holds the entry points, the device and buffer checks and
//! the element-wise and row planners.
//!
//! (Interface fixed by the lead; implementation by the shader work.)

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
// - The transformer kernels (`llm.rs`) run one dispatch per step of their graph, binding the arena
//   (the output) once per role; the shaders that reduce take a power-of-two group of at most 128
//   that the device's shared memory holds. Their f16 weights need 16-bit storage only.
// - llvmpipe (lavapipe) ends any loop after 65535 iterations per invocation, so trip counts stay
//   well below that on its 1024-invocation groups: a 2^20-column row is 1024 iterations a pass,
//   gemm_naive unrolls k by 4 (k may be 65536), the other loops step by tiles or grids.

mod args;
mod gemm;
mod llm;
#[cfg(test)]
mod tests;
mod tuning;
mod types;

pub use tuning::{default_gemm_tuning, gemm_candidates};
pub use types::{
    Binding, Dispatch, GemmTuning, Passes, Plan, QuantDot, Replay, Replayed, SLICE_ALIGN,
    SpecValue, Storage, Unsupported, VkCaps,
};

use crate::backend::planning::{self, Route};
use crate::backend::{Missing, check_listed};
use args::{
    GRID_GROUPS_MAX, SPEC_LOCAL_X, SPEC_SPLIT, SPEC_SPLIT_SOFTMAX, check_groups, dispatch,
    flat_group, grid_groups, pow2_floor, word, words,
};
use gemm::{F16ACC32, plan_conv_direct, plan_conv_im2col, plan_gemm};
use gpufleet_kernels::{BackendKind, Dtype, KernelId, Problem, RowKernel, SplitStats, find_kernel};
use llm::plan_llm;

/// Why a catalog kernel this backend does not list is refused.
const NO_SHADER: &str = "the Vulkan backend has no shader for it";

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
/// and 16-bit storage buffers; plus debug_wrong (vec_add with a deliberate error). The
/// transformer kernels (`llm`, `gemv`) list f16 (half weights) where the device has 16-bit storage
/// buffers.
///
/// gemm's `f16acc32` variant (the blocked f16 GEMM under its own name, f16 only) is listed with
/// the f16 dtype when the catalog defines it. compute_peak lists fp16 where the device has
/// shaderFloat16, fp64 where it has shaderFloat64 and int8 where it has shaderIntegerDotProduct.
pub fn supported(caps: &VkCaps) -> Vec<(&'static str, Vec<&'static str>, Vec<&'static str>)> {
    let mut gemm_variants = vec!["naive", "tiled", "blocked"];
    let mut gemm_dtypes = vec!["f32"];
    if has_f16(caps) {
        gemm_dtypes.push("f16");
        let catalog = gpufleet_kernels::catalog()
            .iter()
            .find(|k| k.id == KernelId::Gemm)
            .map_or(&[][..], |k| k.variants);
        if catalog.contains(&F16ACC32) {
            gemm_variants.push(F16ACC32);
        }
    }
    let mut list = planning::gpu_support(
        BackendKind::Vulkan,
        gemm_variants,
        gemm_dtypes,
        &[Dtype::Q8_0, Dtype::Q4_0],
    );
    // compute_peak's arithmetic types beyond fp32 and int32 need their shader features.
    for (name, variants, _) in &mut list {
        if find_kernel(name).is_some_and(|k| matches!(k.id, KernelId::Ceiling(_))) {
            variants.retain(|v| match *v {
                "fp16" => caps.shader_float16,
                "fp64" => caps.shader_float64,
                "int8" => caps.integer_dot_product,
                _ => true,
            });
        }
    }
    // The f16 storage of the transformer and CNN kernels needs 16-bit storage buffers (their
    // arithmetic is f32).
    if !caps.storage_buffer_16bit {
        for (name, _, dtypes) in &mut list {
            if find_kernel(name).is_some_and(|k| k.id.f16_is_storage()) {
                dtypes.retain(|&d| d != Dtype::F16.name());
            }
        }
    }
    list
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
    let vulkan = BackendKind::Vulkan.name();
    if let Err(miss) = check_listed(supported(caps), problem, vulkan, NO_SHADER) {
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
                } else if problem.id().f16_is_storage() && problem.dtype == Dtype::F16 {
                    "the device lacks storageBuffer16BitAccess".to_string()
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
    let plan = match planning::route(problem)? {
        Route::Gemm => plan_gemm(problem, caps, tuning)?,
        Route::Conv { im2col: true } => plan_conv_im2col(problem, caps, tuning)?,
        Route::Conv { im2col: false } => plan_conv_direct(problem, caps)?,
        Route::Rows(k) => plan_rows(problem, k, caps)?,
        Route::Model => plan_model(problem, caps)?,
        Route::Llm(g) => plan_llm(problem, &g, caps)?,
        Route::Peak => plan_peak(problem, caps)?,
        Route::Roofline => plan_roofline(problem, caps)?,
        Route::Elementwise(e) => plan_elementwise(problem, &e, caps)?,
    };
    check_buffers(problem, &plan)?;
    Ok(plan)
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

/// Refuses a plan with a binding the shaders' `uint` indices and one descriptor cannot cover.
fn check_buffers(problem: &Problem, plan: &Plan) -> Result<(), Unsupported> {
    match bound_bytes(problem, plan).find(|(_, n)| *n > MAX_BINDING_BYTES) {
        Some((what, bytes)) => Err(Unsupported(format!(
            "{what} of {} binds {bytes} bytes, above the {MAX_BINDING_BYTES} one Vulkan \
             storage-buffer binding can address",
            problem.kernel.name
        ))),
        None => Ok(()),
    }
}

/// Bytes of each binding of `plan`, with what it binds: an input whole, a slice of one (a
/// tensor of a model's weights), the output, a scratch buffer.
pub fn bound_bytes<'a>(
    problem: &Problem,
    plan: &'a Plan,
) -> impl Iterator<Item = (String, u64)> + 'a {
    let lens = problem.input_lens();
    let elem = |s: Storage| s.size() as u64;
    let output = problem.output_len() as u64 * elem(plan.output_storage);
    plan.dispatches
        .iter()
        .flat_map(|d| &d.bindings)
        .map(move |b| match *b {
            Binding::Input(i) => (
                format!("input {i}"),
                lens[i] as u64 * elem(plan.input_storage[i]),
            ),
            Binding::Slice { input, len, .. } => (
                format!("a slice of input {input}"),
                len as u64 * elem(plan.input_storage[input]),
            ),
            Binding::Output => ("the output".into(), output),
            Binding::Scratch(i) => (format!("scratch {i}"), plan.scratch_bytes[i] as u64),
        })
}

fn plan_elementwise(
    problem: &Problem,
    e: &planning::Elementwise,
    caps: &VkCaps,
) -> Result<Plan, Unsupported> {
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
    if let Some(wrong) = e.wrong {
        spec.push((2, SpecValue::U32(u32::from(wrong))));
    }
    Ok(Plan {
        input_storage: vec![Storage::F32; inputs],
        output_storage: Storage::F32,
        scratch_bytes: Vec::new(),
        passes: Passes::default(),
        dispatches: vec![dispatch(shader, spec, push, bindings, [groups, 1, 1])?],
        config: e.config(
            ("shader", shader.into()),
            ("groups", groups as usize),
            group as usize,
            "elements_per_invocation",
        ),
    })
}

/// roofline: one vec4 per invocation and iteration of a grid-stride dispatch.
fn plan_roofline(problem: &Problem, caps: &VkCaps) -> Result<Plan, Unsupported> {
    let r = planning::Roofline::of(problem);
    let group = flat_group(caps);
    let groups = grid_groups(caps, r.items(), group);
    let push = words(problem, &[("n", r.n), ("pairs", r.pairs)])?;
    let bindings = vec![Binding::Input(0), Binding::Input(1), Binding::Output];
    let spec = vec![(SPEC_LOCAL_X, SpecValue::U32(group))];
    Ok(Plan {
        input_storage: vec![Storage::F32; 2],
        output_storage: Storage::F32,
        scratch_bytes: Vec::new(),
        passes: Passes::default(),
        dispatches: vec![dispatch("roofline", spec, push, bindings, [groups, 1, 1])?],
        config: r.config(
            ("shader", "roofline".into()),
            groups as usize,
            group as usize,
        ),
    })
}

/// compute_peak: `compute_peak_<variant>`, fp16 where the device has shaderFloat16, fp64 where
/// it has shaderFloat64 and int8 where it has shaderIntegerDotProduct; a grid-stride dispatch of
/// the one-dimensional group size.
fn plan_peak(problem: &Problem, caps: &VkCaps) -> Result<Plan, Unsupported> {
    let types = planning::PeakTypes {
        fp16: (caps.shader_float16, "shaderFloat16"),
        fp64: (caps.shader_float64, "shaderFloat64"),
        int8: (caps.integer_dot_product, "shaderIntegerDotProduct"),
    };
    let p = planning::peak(problem, types, "Vulkan")?;
    let group = flat_group(caps);
    let groups = grid_groups(caps, p.items, group);
    let push = words(problem, &[("items", p.items), ("pairs", p.pairs)])?;
    let bindings = planning::buffers(1, Binding::Input, Binding::Output);
    let spec = vec![(SPEC_LOCAL_X, SpecValue::U32(group))];
    let config = p.config(("shader", p.entry.clone()), groups as usize, group as usize);
    Ok(Plan {
        input_storage: vec![Storage::F32],
        output_storage: Storage::F32,
        scratch_bytes: Vec::new(),
        passes: Passes::default(),
        dispatches: vec![dispatch(&p.entry, spec, push, bindings, [groups, 1, 1])?],
        config,
    })
}

/// A network: `model_conv` for its dense convolutions and linear layers, `model_layer` for the rest
/// (see `planning::model`), in order. Every dispatch binds x, the weights, the arena and a fourth
/// buffer (the residual addend, or the partial sums).
fn plan_model(problem: &Problem, caps: &VkCaps) -> Result<Plan, Unsupported> {
    use planning::model::{CONV_GROUP, StepKernel, Tensor, layer_steps, model_config};
    let tiled = caps.max_workgroup_invocations as usize >= CONV_GROUP
        && caps.max_workgroup_size[0] as usize >= CONV_GROUP;
    let model = layer_steps(problem, caps.compute_units as usize, tiled)?;
    let group = flat_group(caps);
    let binding = |t: Tensor| match t {
        Tensor::Images => Binding::Input(0),
        Tensor::Arena => Binding::Output,
        Tensor::Partials => Binding::Scratch(0),
    };
    let dispatches = model
        .steps
        .iter()
        .map(|st| {
            // layer_steps checked that every value fits an int, so a uint too.
            let push = st.args.iter().map(|&v| v as u32).collect();
            let bindings = vec![
                binding(st.x),
                Binding::Input(1),
                Binding::Output,
                binding(st.s),
            ];
            match st.kernel {
                StepKernel::Layer { total } => dispatch(
                    &model.symbol(st.kernel),
                    vec![(SPEC_LOCAL_X, SpecValue::U32(group))],
                    push,
                    bindings,
                    [grid_groups(caps, total, group), 1, 1],
                ),
                StepKernel::Conv {
                    tiles_n,
                    tiles_m,
                    splits,
                } => {
                    let groups = check_groups(
                        problem,
                        caps,
                        [tiles_n as u64, tiles_m as u64, splits as u64],
                    )?;
                    let local = vec![(SPEC_LOCAL_X, SpecValue::U32(CONV_GROUP as u32))];
                    dispatch(&model.symbol(st.kernel), local, push, bindings, groups)
                }
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Plan {
        input_storage: vec![model.storage; 2],
        output_storage: model.storage,
        scratch_bytes: model.scratch_bytes(),
        passes: Passes::default(),
        dispatches,
        config: model_config(problem, &model, group as usize),
    })
}

fn plan_rows(problem: &Problem, kernel: RowKernel, caps: &VkCaps) -> Result<Plan, Unsupported> {
    let r = planning::rows(problem, kernel);
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
    if let Some(split) = r.split(chunks, caps.compute_units as usize, cap as usize) {
        return plan_rows_split(problem, caps, &r, &split);
    }
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
        passes: Passes::default(),
        dispatches: vec![dispatch(&shader, spec, push, bindings, [groups, 1, 1])?],
        config: r.config(
            ("shader", shader.clone()),
            group as usize,
            groups as usize,
            chunks,
        ),
    })
}

/// Wide rows, few of them (softmax, layernorm): `split_stats` into scratch 0 (two partials per
/// chunk), then `<stem>_split_apply` (kernels/vulkan/include/split.glsl).
fn plan_rows_split(
    problem: &Problem,
    caps: &VkCaps,
    r: &planning::RowLaunch,
    s: &planning::RowSplit,
) -> Result<Plan, Unsupported> {
    let group = planning::SPLIT_GROUP as u32;
    let groups = s.groups;
    let count = u32::try_from(groups)
        .ok()
        .filter(|&g| g <= caps.max_compute_workgroup_count[0])
        .ok_or_else(|| {
            Unsupported(format!(
                "{groups} groups of a split {} exceed maxComputeWorkGroupCount",
                problem.kernel.name
            ))
        })?;
    let push = words(
        problem,
        &[("rows", r.rows), ("cols", r.cols), ("chunk", s.len)],
    )?;
    let local = (SPEC_LOCAL_X, SpecValue::U32(group));
    let split_spec = (SPEC_SPLIT, SpecValue::U32(s.split as u32));
    let stats_shader = if caps.subgroup_arithmetic {
        "split_stats_subgroup"
    } else {
        "split_stats"
    };
    let softmax = u32::from(r.split_stats == Some(SplitStats::MaxSumExp));
    let stats = dispatch(
        stats_shader,
        vec![
            local,
            split_spec,
            (SPEC_SPLIT_SOFTMAX, SpecValue::U32(softmax)),
        ],
        push.clone(),
        vec![Binding::Input(0), Binding::Scratch(0)],
        [count, 1, 1],
    )?;
    let mut bindings: Vec<Binding> = (0..r.inputs).map(Binding::Input).collect();
    bindings.extend([Binding::Scratch(0), Binding::Output]);
    let mut apply_push = push;
    apply_push.extend(r.eps.map(f32::to_bits));
    let apply_shader = format!("{}_split_apply", r.stem);
    let apply = dispatch(
        &apply_shader,
        vec![local, split_spec],
        apply_push,
        bindings,
        [count, 1, 1],
    )?;
    Ok(Plan {
        input_storage: vec![Storage::F32; r.inputs],
        output_storage: Storage::F32,
        scratch_bytes: vec![s.scratch_bytes()],
        passes: Passes::default(),
        dispatches: vec![stats, apply],
        config: r.split_config(("shader", format!("{stats_shader} + {apply_shader}")), s),
    })
}
