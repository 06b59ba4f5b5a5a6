//! What to launch for each catalog kernel on a HIP device. Pure: a problem and the device's
//! capabilities in, a [`Plan`] out; `kernel.rs` executes plans without knowing any kernel.
//!
//! The code objects are compiled ahead of time, so where the OpenCL planner passes `-D`
//! parameters this one picks among the instantiations `kernels/hip/*.hip` define (named in each
//! file's header and in [`kernel_symbols`]): GEMM tile configurations, row-kernel block sizes,
//! the filter size of conv2d.
//!
//! `types.rs` holds what a plan is made of (caps, launches, arguments), `args.rs` the kernel
//! arguments and block counts the planners share, `gemm.rs` the GEMM and conv2d planners (they
//! share the blocked GEMM), `llm.rs` the transformer's instantiations, `tests.rs` the unit tests; the pieces every GPU planner shares are in
//! [`crate::backend::planning`]. This file holds the entry points and the element-wise and row
//! planners.

mod args;
mod gemm;
mod llm;
#[cfg(test)]
mod tests;
mod types;

pub use gemm::{BLOCKED, Blocked};
pub use types::{Arg, HipCaps, Launch, Plan, Unsupported};

use crate::backend::config;
use crate::backend::planning::{self, ROW_CHUNKS_MAX, Route, WIDE_ROW_COLS};
use args::{FLAT, INT_ARG, blocks};
use gemm::{plan_conv_direct, plan_conv_im2col, plan_gemm};
use gpufleet_kernels::{BackendKind, DebugKernel, Dtype, ElementwiseKernel, Problem, RowKernel};

/// Why a catalog kernel this backend does not list is refused.
const NO_KERNEL: &str = "the HIP backend has no kernel for it";

/// Blocks of a row kernel; more rows are strided over.
const ROW_GROUPS_MAX: usize = 65536;

/// Every kernel symbol the planner may launch; each must be in every code object (the build test
/// checks it).
pub fn kernel_symbols() -> Vec<String> {
    let mut out: Vec<String> = ElementwiseKernel::ALL
        .into_iter()
        .map(|k| format!("{}_f32", k.stem()))
        .collect();
    // The debug kernels' deliberately wrong versions.
    for k in DebugKernel::ALL
        .into_iter()
        .filter_map(DebugKernel::on_device)
    {
        out.push(format!("{}_wrong_f32", k.stem()));
    }
    for variant in ["naive", "tiled"] {
        out.extend(["f32", "f16"].map(|d| format!("gemm_{variant}_{d}")));
    }
    for k in [3, 5] {
        out.extend([format!("conv2d_direct_k{k}"), format!("im2col_k{k}")]);
    }
    for suffix in ["", "_f16"] {
        out.extend(["model_layer", "model_conv"].map(|k| format!("{k}{suffix}")));
    }
    out.extend(llm::symbols());
    out.extend(
        gpufleet_kernels::PEAK_VARIANTS
            .iter()
            .map(|v| format!("compute_peak_{v}")),
    );
    out.push("roofline".into());
    for b in BLOCKED {
        out.push(b.symbol(false));
        out.push(b.symbol(true));
    }
    for k in RowKernel::ALL.map(RowKernel::stem) {
        for wg in [64, 256, 1024] {
            out.push(format!("{k}_rows_{wg}"));
        }
        for wg in [64, 256] {
            out.push(format!("{k}_rows_{wg}_cached"));
        }
    }
    out
}

/// Kernels/variants/dtypes the HIP backend implements: the OpenCL backend's list (every
/// non-host-only, non-debug catalog kernel with all its variants, gemm in f32 and f16, plus
/// debug_wrong, the networks and the `cnn_*` layers).
pub fn supported() -> Vec<(&'static str, Vec<&'static str>, Vec<&'static str>)> {
    planning::gpu_support(
        BackendKind::Hip,
        vec!["naive", "tiled", "blocked"],
        vec!["f32", "f16"],
        &[Dtype::Q8_0, Dtype::Q4_0],
    )
}

/// What to launch for `problem` on a device with `caps`.
///
/// # Errors
/// [`Unsupported`] naming the reason: a host-only or crashing kernel, a variant or dtype not
/// implemented, a size whose arguments do not fit an `int` or whose grid exceeds HIP's 2^32
/// work-items per dimension.
pub fn plan(problem: &Problem, caps: &HipCaps) -> Result<Plan, Unsupported> {
    let name = problem.kernel.name;
    planning::listed(supported(), problem, BackendKind::Hip, NO_KERNEL)?;
    if caps.max_threads_per_block < 1024 || caps.shared_mem_per_block < 32 * 1024 {
        return Err(Unsupported(format!(
            "the code objects need blocks of 1024 work-items and 32 KiB of LDS; the device \
             reports {} and {} bytes",
            caps.max_threads_per_block, caps.shared_mem_per_block
        )));
    }
    let plan = match planning::route(problem)? {
        Route::Gemm => plan_gemm(problem, caps)?,
        Route::Conv { im2col: true } => plan_conv_im2col(problem, caps)?,
        Route::Conv { im2col: false } => plan_conv_direct(problem)?,
        Route::Rows(k) => plan_rows(problem, k)?,
        Route::Model => plan_model(problem, caps)?,
        Route::Llm(g) => llm::plan_llm(problem, &g, caps)?,
        Route::Peak => plan_peak(problem, caps)?,
        Route::Roofline => plan_roofline(problem)?,
        Route::Elementwise(e) => plan_elementwise(problem, &e)?,
    };
    for l in &plan.launches {
        for d in 0..3 {
            if u64::from(l.grid[d]) * u64::from(l.block[d]) > u64::from(u32::MAX) {
                return Err(Unsupported(format!(
                    "{name}: launch of {} needs {} work-items in dimension {d}, above HIP's 2^32 - 1",
                    l.kernel,
                    u64::from(l.grid[d]) * u64::from(l.block[d])
                )));
            }
        }
    }
    Ok(plan)
}

/// A network: `model_conv` for its dense convolutions and linear layers, `model_layer` for the rest
/// (see `planning::model`), in order, in blocks of 256 (every AMD GPU allows them).
fn plan_model(problem: &Problem, caps: &HipCaps) -> Result<Plan, Unsupported> {
    use planning::model::{CONV_GROUP, StepKernel, layer_steps, model_config};
    let model = layer_steps(problem, caps.compute_units as usize, true)?;
    let block = CONV_GROUP as u32;
    let mut launches = Vec::with_capacity(model.steps.len());
    for st in &model.steps {
        let grid = match st.kernel {
            StepKernel::Layer { total } => {
                let groups = blocks(problem, &st.name, total, block)?;
                [groups.min(ROW_GROUPS_MAX as u32), 1, 1]
            }
            // Each fits: tiles and splits are far below 2^32 for the catalog's sizes, and
            // `plan` checks every grid against HIP's limit.
            StepKernel::Conv {
                tiles_n,
                tiles_m,
                splits,
            } => [tiles_n, tiles_m, splits].map(|g| u32::try_from(g).unwrap_or(u32::MAX)),
        };
        launches.push(Launch {
            kernel: model.symbol(st.kernel),
            grid,
            block: [block, 1, 1],
            args: st.launch_args(),
        });
    }
    Ok(Plan {
        program: (),
        input_storage: vec![model.storage; 2],
        output_storage: model.storage,
        scratch_bytes: model.scratch_bytes(),
        launches,
        config: model_config(problem, &model, CONV_GROUP),
    })
}

fn plan_elementwise(problem: &Problem, e: &planning::Elementwise) -> Result<Plan, Unsupported> {
    let kernel = if e.wrong == Some(true) {
        format!("{}_wrong_f32", e.stem)
    } else {
        format!("{}_f32", e.stem)
    };
    let args = e.args(problem, INT_ARG)?;
    let (grid, block) = match e.n {
        None => (1, 1),
        // One float4 per work-item.
        Some(n) => (blocks(problem, "n", n.div_ceil(4), FLAT)?, FLAT),
    };
    let launch = Launch {
        kernel: kernel.clone(),
        grid: [grid, 1, 1],
        block: [block, 1, 1],
        args,
    };
    Ok(Plan::one_launch(
        (),
        e.inputs,
        launch,
        config(&[
            ("kernel", kernel),
            ("grid", grid.to_string()),
            ("block", block.to_string()),
        ]),
    ))
}

/// roofline: `roofline` from peak.hip, one float4 per work-item in blocks of 256.
fn plan_roofline(problem: &Problem) -> Result<Plan, Unsupported> {
    let r = planning::Roofline::of(problem);
    let grid = blocks(problem, "n", r.items(), FLAT)?;
    let launch = Launch {
        kernel: "roofline".into(),
        grid: [grid, 1, 1],
        block: [FLAT, 1, 1],
        args: r.args(problem, INT_ARG)?,
    };
    Ok(Plan::one_launch(
        (),
        2,
        launch,
        r.config(("kernel", "roofline".into()), grid as usize, FLAT as usize),
    ))
}

/// compute_peak: `compute_peak_<variant>` from peak.hip; every AMD GPU has half and double
/// arithmetic (packed halves from gfx9 on), and int8 where it has a dot instruction.
fn plan_peak(problem: &Problem, caps: &HipCaps) -> Result<Plan, Unsupported> {
    let types = planning::PeakTypes {
        fp16: (true, "half arithmetic"),
        fp64: (true, "double arithmetic"),
        int8: (
            caps.int8_dot,
            "a dot product of four bytes (gfx906, gfx90a, gfx94x, gfx103x, gfx11 and later)",
        ),
    };
    let p = planning::peak(problem, types, "HIP")?;
    let block = planning::PEAK_GROUP as u32;
    let grid = blocks(problem, "items", p.items, block)?;
    let groups = grid as usize;
    let launch = Launch {
        kernel: p.entry.clone(),
        grid: [grid, 1, 1],
        block: [block, 1, 1],
        args: p.args(problem, INT_ARG)?,
    };
    Ok(Plan::one_launch(
        (),
        1,
        launch,
        p.config(("kernel", p.entry.clone()), groups, block as usize),
    ))
}

fn plan_rows(problem: &Problem, kernel: RowKernel) -> Result<Plan, Unsupported> {
    let r = planning::rows(problem, kernel);
    let base = format!("{}_rows", r.stem);
    let group: usize = if r.cols >= WIDE_ROW_COLS {
        1024
    } else if r.cols <= 64 {
        64
    } else {
        256
    };
    let cached = group <= 256 && r.cols <= group * ROW_CHUNKS_MAX;
    let kernel = if cached {
        format!("{base}_{group}_cached")
    } else {
        format!("{base}_{group}")
    };
    let groups = r.rows.clamp(1, ROW_GROUPS_MAX);
    let args = r.args(problem, INT_ARG)?;
    let launch = Launch {
        kernel: kernel.clone(),
        grid: [groups as u32, 1, 1],
        block: [group as u32, 1, 1],
        args,
    };
    Ok(Plan::one_launch(
        (),
        r.inputs,
        launch,
        config(&[
            ("kernel", kernel),
            ("block", group.to_string()),
            ("groups", groups.to_string()),
            ("row_in_registers", if cached { "yes" } else { "no" }.into()),
        ]),
    ))
}
