//! A transformer graph on HIP (`llm`, `rope`, `attention`, `swiglu`, `gemv`): the launches
//! [`planning::llm`](crate::backend::planning::llm) lays out, from `kernels/hip/llm.hip`. The code
//! objects are compiled ahead of time, so the weights' dtype and the head width pick an
//! instantiation by name (`llm_gemv_f16`, `llm_attention_hd64`) and the group sizes are fixed:
//! 256 for the element-wise kernels and the norm, 64 for gemv, 16×16 for the tiled matmul, 32 for
//! attention (16 for heads 256 wide, whose merge would not fit otherwise). Decode attention over a
//! long cache with too few (row, head) blocks for the compute units is split along the sequence
//! and merged (`llm_attention_merge`, [`llm::attention_chunks`]).

use super::types::{HipCaps, Launch, Plan, Unsupported};
use crate::backend::planning::llm::{self, GEMV_WG, LlmGroups};
use crate::backend::storage::Elem;
use gpufleet_kernels::llm::LlmGraph;
use gpufleet_kernels::{Dtype, Problem};

/// The head widths `llm.hip` instantiates attention for, with each one's group size.
pub const ATTENTION_HEADS: [(usize, usize); 4] = [(32, 32), (64, 32), (128, 32), (256, 16)];

/// The kernels whose instantiation is chosen by the weights' dtype.
pub const BY_DTYPE: [&str; 4] = ["llm_embed", "llm_rmsnorm", "llm_gemv", "llm_matmul"];

/// The kernels of quantized weights, one instantiation per format (`_q8`, `_q4`).
pub const BY_FORMAT: [&str; 3] = ["llm_qembed", "llm_qgemv", "llm_qmatmul"];

/// The kernels with one instantiation.
pub const PLAIN: [&str; 5] = [
    "llm_rope",
    "llm_swiglu",
    "llm_add",
    "llm_copy",
    "llm_attention_merge",
];

/// What to say, as an argument's bound, when a size does not fit.
const INT_ARG: &str = "HIP int kernel argument";

/// Every `llm.hip` symbol the planner may launch.
pub fn symbols() -> Vec<String> {
    let mut out: Vec<String> = BY_DTYPE
        .iter()
        .flat_map(|k| ["f32", "f16"].map(|d| format!("{k}_{d}")))
        .collect();
    out.extend(
        BY_FORMAT
            .iter()
            .flat_map(|k| ["q8", "q4"].map(|f| format!("{k}_{f}"))),
    );
    out.extend(PLAIN.map(String::from));
    out.extend(ATTENTION_HEADS.map(|(hd, _)| format!("llm_attention_hd{hd}")));
    out
}

/// The plan of a transformer problem.
///
/// # Errors
/// [`Unsupported`] for an offset or size above `i32::MAX`, or heads of a width the code objects
/// have no attention for.
pub fn plan_llm(problem: &Problem, g: &LlmGraph, caps: &HipCaps) -> Result<Plan, Unsupported> {
    let head_dim = llm::head_dim(g);
    let attention = ATTENTION_HEADS
        .iter()
        .find(|(hd, _)| *hd == head_dim)
        .map(|&(_, wg)| wg);
    let attention = match attention {
        Some(wg) => wg,
        None if !llm::has_attention(g) => 1,
        None => {
            return Err(Unsupported(format!(
                "{}: the HIP code objects have attention for heads {} wide; head_dim={head_dim}",
                problem.kernel.name,
                ATTENTION_HEADS.map(|(hd, _)| hd.to_string()).join(", ")
            )));
        }
    };
    let groups = LlmGroups {
        flat: 256,
        gemv: GEMV_WG,
        gemv_team: None,
        attention,
        attention_tiled: None,
        fold_rope: false,
        rows_only: false,
        matmul: Some(64),
        matmul_half_rows: false,
        compute_units: caps.compute_units as usize,
        quant_lanes_per_unit: 0,
    };
    let planned = llm::launches(problem, g, groups, INT_ARG)?;
    let config = llm::config(problem, g, &planned.launches, groups);
    // Quantized, the norms' gains stay f32 (`llm_rmsnorm_f32`); the matrices' kernels are the
    // format's.
    let dtype = if problem.dtype == Dtype::F16 {
        "f16"
    } else {
        "f32"
    };
    let format = problem.dtype.block_format().map_or("", |f| f.suffix());
    let mut launches = Vec::with_capacity(planned.launches.len());
    for l in planned.launches {
        let kernel = if BY_DTYPE.contains(&l.kernel) {
            format!("{}_{dtype}", l.kernel)
        } else if BY_FORMAT.contains(&l.kernel) {
            format!("{}_{format}", l.kernel)
        } else if l.kernel == "llm_attention" {
            format!("llm_attention_hd{head_dim}")
        } else {
            l.kernel.to_string()
        };
        let mut grid = [1u32; 3];
        let mut block = [1u32; 3];
        for (d, (&items, &local)) in l.global.iter().zip(&l.local).enumerate() {
            // Every size is far below 2^32: groups are capped at 65536 and `plan` checks the
            // grid against HIP's limit.
            grid[d] = u32::try_from(items / local).unwrap_or(u32::MAX);
            block[d] = local as u32;
        }
        launches.push(Launch {
            kernel,
            grid,
            block,
            args: l.args,
        });
    }
    Ok(Plan {
        program: (),
        input_storage: llm::input_storage(problem, g),
        output_storage: Elem::F32,
        scratch_bytes: planned.scratch_bytes,
        launches,
        config,
    })
}
