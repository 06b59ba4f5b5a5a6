//! A transformer graph on OpenCL (`llm`, `rope`, `attention`, `swiglu`, `gemv`): the launches
//! [`planning::llm`] lays out, from `kernels/opencl/llm.cl`, with the group sizes as `-D` build
//! options; wide one-row projections (the LM head, gate/up) by teams of [`GEMV_TEAM`] work-items a
//! feature. On a CPU device (PoCL) every projection runs `llm_gemv_rows`: no barriers, which PoCL
//! runs slowly (a tiled GEMM there is 10× slower).

use super::args::{INT_ARG, flat_group, options};
use super::types::{DeviceCaps, Launch, Plan, Program, Storage, Unsupported};
use crate::backend::planning::llm::{self, GEMV_FEATS, GEMV_ROWS, GEMV_WG, LlmGroups};
use crate::backend::planning::pow2_floor;
use gpufleet_kernels::llm::LlmGraph;
use gpufleet_kernels::{Dtype, Problem, sources::opencl as cl};

/// Work-items a feature takes in `llm_gemv_team` (wide one-row projections, see
/// [`llm::TEAM_MIN_N`]): 8 read 1.3-1.45x faster than 16 or 32 on an H200.
const GEMV_TEAM: usize = 8;
/// Local memory `llm_matmul` needs (two 16×65 f32 tiles); a device with less runs `llm_gemv`.
const MATMUL_LOCAL_BYTES: u64 = 2 * 16 * 65 * 4;
/// Local memory an attention group may use for its merge, in bytes.
const ATTENTION_LOCAL_MAX: usize = 16 << 10;

/// Work-items of an attention group for heads `head_dim` wide: 32, fewer for wide heads or small
/// local memories so that the merge's `ATT_WG × (head_dim + 2)` floats and the query fit
/// [`ATTENTION_LOCAL_MAX`] and the device; 0 when not even one fits.
pub fn attention_group(head_dim: usize, caps: &DeviceCaps) -> usize {
    let local = (ATTENTION_LOCAL_MAX as u64).min(caps.local_mem_bytes) as usize;
    let fit = local.saturating_sub(4 * head_dim) / (4 * (head_dim + 2));
    if fit == 0 {
        return 0;
    }
    pow2_floor(fit.min(32).min(caps.max_work_group_size.max(1)))
}

/// Work-items of a `llm_gemv` group: [`GEMV_WG`], fewer where the group size or half the local
/// memory (its `FEATS × ROWS` partial sums a work-item) is smaller.
fn gemv_group(group: usize, caps: &DeviceCaps) -> usize {
    let fit = (caps.local_mem_bytes / 2) as usize / (4 * GEMV_FEATS * GEMV_ROWS);
    pow2_floor(GEMV_WG.min(group).min(fit.max(1)))
}

/// The plan of a transformer problem.
///
/// # Errors
/// [`Unsupported`] for an offset or size above `i32::MAX`, or a device whose local memory cannot
/// hold the attention's merge.
pub fn plan_llm(problem: &Problem, g: &LlmGraph, caps: &DeviceCaps) -> Result<Plan, Unsupported> {
    let flat = flat_group(caps);
    let head_dim = llm::head_dim(g);
    let gemv = gemv_group(flat, caps);
    let groups = LlmGroups {
        flat,
        gemv,
        gemv_team: Some(GEMV_TEAM.min(gemv)),
        attention: attention_group(head_dim, caps),
        rows_only: caps.cpu,
        matmul: caps.local_mem_bytes >= MATMUL_LOCAL_BYTES,
    };
    if llm::has_attention(g) && groups.attention == 0 {
        return Err(Unsupported(format!(
            "attention over heads of {head_dim} needs {} bytes of local memory; the device has {}",
            4 * (3 * head_dim + 2),
            caps.local_mem_bytes
        )));
    }
    let planned = llm::launches(problem, g, groups, INT_ARG)?;
    let config = llm::config(problem, &planned, groups);
    let launches = planned
        .into_iter()
        .map(|l| Launch {
            kernel: l.kernel.into(),
            global: l.global,
            local: Some(l.local),
            args: l.args,
        })
        .collect();
    let mut defines = vec![
        ("WG", flat.to_string()),
        ("GEMV_WG", groups.gemv.to_string()),
        ("ROWS", GEMV_ROWS.to_string()),
        ("TEAM", groups.gemv_team.unwrap_or(1).to_string()),
        ("HEAD_DIM", head_dim.to_string()),
        ("ATT_WG", groups.attention.max(1).to_string()),
    ];
    if problem.dtype == Dtype::F16 {
        defines.push(("W_HALF", String::new()));
    }
    Ok(Plan {
        program: Program::new(("llm.cl", cl::LLM), options(caps, &defines)),
        input_storage: llm::input_storage(problem, g),
        output_storage: Storage::F32,
        scratch_bytes: Vec::new(),
        launches,
        config,
    })
}
