//! What to build and launch for each catalog kernel on an OpenCL device.
//! Pure: a problem and the device's capabilities in, a [`Plan`] out. The
//! host side (`kernel.rs`) executes plans without knowing any kernel.
//!
//! `types.rs` holds what a plan is made of (caps, program, launches, GEMM
//! tuning), `tuning.rs` the GEMM tuning candidates and their rules,
//! `args.rs` the build options and kernel arguments the planners share,
//! `gemm.rs` the GEMM and conv2d planners (they share the blocked GEMM),
//! `tests.rs` the unit tests. This file holds the entry points and the
//! element-wise and row planners.

mod args;
mod gemm;
mod llm;
#[cfg(test)]
mod tests;
mod tuning;
mod types;

pub use tuning::{default_gemm_tuning, gemm_candidates};
pub use types::{Arg, DeviceCaps, GemmTuning, Launch, Plan, Program, Storage, Unsupported};

use crate::backend::planning::{self, Route, pow2_floor, round_up};
use args::{INT_ARG, flat_group, ints, options};
use gemm::{plan_conv_direct, plan_conv_im2col, plan_gemm};
use gpufleet_kernels::Problem;

// Planning notes (the sources in `kernels/opencl/` document their `-D` parameters):
// - Every size reaches the device as an `int`; `ints()` refuses a value above i32::MAX with the
//   name of the quantity, and the kernels compute element offsets in `long`.
// - Every launch sets its local size (global sizes are rounded up to it, kernels bounds-check), so
//   the `reqd_work_group_size` attributes hold and no driver picks a poor size for odd globals.
// - Element-wise kernels move one float4 per work-item (full HBM bandwidth on an H100: 2.9-3.0
//   TB/s for vec_add, copy and triad at 2^26 elements); row kernels stride their groups over the
//   rows and keep a row in registers when it is at most 16 chunks of the group size; a few wide
//   rows of softmax or layernorm are split over several groups each (`plan_rows_split`).
// - gemm `blocked` and conv2d `im2col` share `gemm_blocked`, sized by a `GemmTuning` whose
//   validity rules (`tuning_error`) mirror the `#error` checks in gemm.cl plus the device limits.
// - conv2d `im2col` is "gemm.cl" and "conv.cl" in one program: per chunk of images, one im2col
//   launch into scratch 0 and one GEMM launch batched over the chunk's images (dimension 2).

use gpufleet_kernels::sources::opencl as cl;
use gpufleet_kernels::{BackendKind, Dtype, RowKernel, SplitStats};

/// Why a catalog kernel this backend does not list is refused.
const NO_KERNEL: &str = "the OpenCL backend has no kernel for it";

/// Groups of a row kernel; more rows are strided over, so the launch stays small whatever `rows`.
const ROW_GROUPS_MAX: usize = 65536;

/// Kernels/variants/dtypes the OpenCL backend implements (every non-host-only, non-debug catalog
/// kernel and all its variants; gemm in f32 and f16; plus debug_wrong = vec_add with a deliberate
/// error via -DGPUFLEET_WRONG).
pub fn supported() -> Vec<(&'static str, Vec<&'static str>, Vec<&'static str>)> {
    planning::gpu_support(
        BackendKind::OpenCl,
        vec!["naive", "tiled", "blocked"],
        vec!["f32", "f16"],
        &[Dtype::Q8_0, Dtype::Q4_0],
    )
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
    planning::listed(supported(), problem, BackendKind::OpenCl, NO_KERNEL)?;
    match planning::route(problem)? {
        Route::Gemm => plan_gemm(problem, caps, tuning),
        Route::Conv { im2col: true } => plan_conv_im2col(problem, caps, tuning),
        Route::Conv { im2col: false } => plan_conv_direct(problem, caps),
        Route::Rows(k) => plan_rows(problem, k, caps),
        Route::Model => plan_model(problem, caps),
        Route::Llm(g) => llm::plan_llm(problem, &g, caps),
        Route::Peak => plan_peak(problem, caps),
        Route::Roofline => plan_roofline(problem, caps),
        Route::Elementwise(e) => plan_elementwise(problem, &e, caps),
    }
}

/// roofline: `roofline` from peak.cl, one float4 per work-item.
fn plan_roofline(problem: &Problem, caps: &DeviceCaps) -> Result<Plan, Unsupported> {
    let r = planning::Roofline::of(problem);
    let group = flat_group(caps);
    let groups = r.items().div_ceil(group);
    let launch = Launch {
        kernel: "roofline".into(),
        global: vec![groups * group],
        local: Some(vec![group]),
        args: r.args(problem, INT_ARG)?,
    };
    let defines = [("GPUFLEET_WG", group.to_string())];
    Ok(Plan::one_launch(
        Program::new(("peak.cl", cl::PEAK), options(caps, &defines)),
        2,
        launch,
        r.config(("kernel", "roofline".into()), groups, group),
    ))
}

/// compute_peak: `compute_peak_<variant>` from peak.cl, fp16 where the device has cl_khr_fp16,
/// fp64 where it has cl_khr_fp64 and int8 where it has cl_khr_integer_dot_product.
fn plan_peak(problem: &Problem, caps: &DeviceCaps) -> Result<Plan, Unsupported> {
    let types = planning::PeakTypes {
        fp16: (caps.fp16, "cl_khr_fp16"),
        fp64: (caps.fp64, "cl_khr_fp64"),
        int8: (
            caps.int8_dot,
            "cl_khr_integer_dot_product (packed 4x8-bit input)",
        ),
    };
    let p = planning::peak(problem, types, "OpenCL")?;
    let group = flat_group(caps);
    let mut defines = vec![("GPUFLEET_WG", group.to_string())];
    if caps.fp64 {
        defines.push(("GPUFLEET_HAS_FP64", String::new()));
    }
    if caps.int8_dot {
        defines.push(("GPUFLEET_HAS_INT8_DOT", String::new()));
    }
    let groups = p.groups(group);
    let launch = Launch {
        kernel: p.entry.clone(),
        global: vec![groups * group],
        local: Some(vec![group]),
        args: p.args(problem, INT_ARG)?,
    };
    Ok(Plan::one_launch(
        Program::new(("peak.cl", cl::PEAK), options(caps, &defines)),
        1,
        launch,
        p.config(("kernel", p.entry.clone()), groups, group),
    ))
}

/// A network: `model_conv` for its dense convolutions and linear layers, `model_layer` for the rest
/// (see `planning::model`), in order.
fn plan_model(problem: &Problem, caps: &DeviceCaps) -> Result<Plan, Unsupported> {
    use planning::model::{CONV_GROUP, StepKernel, layer_steps, model_config};
    let tiled = caps.max_work_group_size >= CONV_GROUP;
    let model = layer_steps(problem, caps.compute_units as usize, tiled)?;
    let group = flat_group(caps);
    let launches = model
        .steps
        .iter()
        .map(|st| {
            let (global, local) = match st.kernel {
                StepKernel::Layer { total } => {
                    let groups = total.div_ceil(group).min(ROW_GROUPS_MAX);
                    (vec![groups * group], group)
                }
                StepKernel::Conv {
                    tiles_n,
                    tiles_m,
                    splits,
                } => (vec![tiles_n * CONV_GROUP, tiles_m, splits], CONV_GROUP),
            };
            let mut local = vec![local];
            local.resize(global.len(), 1);
            Launch {
                kernel: st.kernel.entry().into(),
                global,
                local: Some(local),
                args: st.launch_args(),
            }
        })
        .collect();
    let mut defines = vec![("GPUFLEET_WG", group.to_string())];
    if model.storage == Storage::F16 {
        defines.push(("HALF", String::new()));
    }
    Ok(Plan {
        program: Program::new(("model.cl", cl::MODEL), options(caps, &defines)),
        input_storage: vec![model.storage; 2],
        output_storage: model.storage,
        scratch_bytes: model.scratch_bytes(),
        launches,
        config: model_config(problem, &model, group),
    })
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

fn plan_elementwise(
    problem: &Problem,
    e: &planning::Elementwise,
    caps: &DeviceCaps,
) -> Result<Plan, Unsupported> {
    let kernel = format!("{}_f32", e.stem);
    let args = e.args(problem, INT_ARG)?;
    let (global, local) = match e.n {
        None => (1, 1),
        Some(n) => {
            let group = flat_group(caps);
            // One float4 per work-item.
            (round_up(n.div_ceil(4), group), group)
        }
    };
    let mut defines = Vec::new();
    if e.wrong == Some(true) {
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

fn plan_rows(problem: &Problem, kernel: RowKernel, caps: &DeviceCaps) -> Result<Plan, Unsupported> {
    let r = planning::rows(problem, kernel);
    let kernel = format!("{}_rows", r.stem);
    let cap = pow2_floor(caps.max_work_group_size).min(pow2_floor(
        usize::try_from(caps.local_mem_bytes / 4).unwrap_or(usize::MAX),
    ));
    let (group, chunks) = planning::row_group(r.cols, cap);
    if let Some(split) = r.split(chunks, caps.compute_units as usize, cap) {
        return plan_rows_split(problem, caps, &r, &split);
    }
    let groups = r.rows.min(ROW_GROUPS_MAX);
    let args = r.args(problem, INT_ARG)?;
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

/// Wide rows, few of them (softmax, layernorm): a `split_stats` launch into scratch 0 (the
/// chunks' partials) and an apply launch that merges a row's partials and writes its chunks (see
/// the split kernels in rows.cl).
fn plan_rows_split(
    problem: &Problem,
    caps: &DeviceCaps,
    r: &planning::RowLaunch,
    s: &planning::RowSplit,
) -> Result<Plan, Unsupported> {
    let group = planning::SPLIT_GROUP;
    let dims = ints(
        problem,
        &[("rows", r.rows), ("cols", r.cols), ("chunk", s.len)],
    )?;
    // The kernels take their row and chunk from an `int` group id.
    ints(problem, &[("groups", s.groups)])?;
    let launch = |kernel: String, mut args: Vec<Arg>| {
        args.extend(dims.iter().cloned());
        Launch {
            kernel,
            global: vec![s.groups * group],
            local: Some(vec![group]),
            args,
        }
    };
    let stats = launch("split_stats".into(), vec![Arg::Input(0), Arg::Scratch(0)]);
    let mut apply_args: Vec<Arg> = (0..r.inputs).map(Arg::Input).collect();
    apply_args.extend([Arg::Scratch(0), Arg::Output]);
    let mut apply = launch(format!("{}_split_apply", r.stem), apply_args);
    apply.args.extend(r.eps.map(Arg::Float));
    let mut defines = vec![
        ("GPUFLEET_WG", group.to_string()),
        ("GPUFLEET_CHUNKS", "0".to_string()),
        ("GPUFLEET_SPLIT", s.split.to_string()),
    ];
    if r.split_stats == Some(SplitStats::MaxSumExp) {
        defines.push(("GPUFLEET_SPLIT_SOFTMAX", String::new()));
    }
    Ok(Plan {
        program: Program::new(("rows.cl", cl::ROWS), options(caps, &defines)),
        input_storage: vec![Storage::F32; r.inputs],
        output_storage: Storage::F32,
        scratch_bytes: vec![s.scratch_bytes()],
        launches: vec![stats, apply],
        config: r.split_config(
            ("kernel", format!("split_stats + {}_split_apply", r.stem)),
            s,
        ),
    })
}
