//! A transformer graph on OpenCL (`llm`, `rope`, `attention`, `swiglu`, `gemv`): the launches
//! [`planning::llm`] lays out, from `kernels/opencl/llm.cl`, with the group sizes as `-D` build
//! options. On a GPU one-row projections run by teams ([`TEAMS`]) with the RMSNorm before them
//! and the SwiGLU or residual add after them folded in where unchecked, prefill's projections in
//! 128×128 tiles (64×128 where those would leave compute units idle), and prefill's attention
//! tiled over keys. On a CPU device (PoCL) every projection runs `llm_gemv_rows`: no barriers,
//! which PoCL runs slowly (a tiled GEMM there is 10× slower).

use super::args::{INT_ARG, flat_group, options};
use super::types::{DeviceCaps, Launch, Plan, Program, Storage, Unsupported};
use crate::backend::planning::llm::{self, GEMV_FEATS, GEMV_ROWS, GEMV_WG, LlmGroups, Teams};
use crate::backend::planning::pow2_floor;
use gpufleet_kernels::llm::LlmGraph;
use gpufleet_kernels::{Dtype, Problem, sources::opencl as cl};

/// `llm_gemv_team`'s shape on a GPU (one-row projections): teams of 32 in groups of 256, four
/// features a team, the fastest of the shapes tried on an H200 over the `1b` and `8b` widths
/// (1.3-2.0x the former `llm_gemv` and teams of 8; docs/PERFORMANCE.md).
const TEAMS: Teams = Teams {
    lanes: 32,
    group: 256,
    features: 4,
};
/// Work-items a compute unit a packed team gemv's launch aims at ([`llm::quant_lanes`]) under the
/// experiment switch `wide_quant_teams` (an SM of an H100 holds 2,048). Not by default: with a
/// kernel a width, teams of 32 read faster on an H100 (q4_0 gemv 14,336 × 4,096 1.18x, `8b` q4_0
/// decode 1.12x, q8_0 1.16x; docs/PERFORMANCE.md).
const QUANT_LANES_PER_UNIT: usize = 2048;
/// The side of `llm_matmul`'s tile (`MM` in the kernel).
const MATMUL_TILE: usize = 128;
/// Local memory `llm_matmul` needs (two operands, double-buffered, 8 × (MM + 4) f32 each); a
/// device with less runs `llm_gemv`.
const MATMUL_LOCAL_BYTES: u64 = 2 * 2 * 8 * (MATMUL_TILE as u64 + 4) * 4;
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

/// `llm_attention_tiled`'s rows a group and keys a tile for heads `head_dim` wide: 64 rows, and
/// as many keys (up to 32, at least 4) as [`ATTENTION_LOCAL_MAX`] holds keys and values of; `None`
/// on a CPU device, for heads not a multiple of 4 wide, or where that does not fit.
fn attention_tiles(head_dim: usize, caps: &DeviceCaps) -> Option<(usize, usize)> {
    let local = (ATTENTION_LOCAL_MAX as u64).min(caps.local_mem_bytes) as usize;
    let bk = pow2_floor((local / (8 * head_dim.max(1))).min(32));
    let bq = pow2_floor(64.min(caps.max_work_group_size));
    (!caps.cpu && head_dim.is_multiple_of(4) && bk >= 4 && bq >= 16).then_some((bq, bk))
}

/// Work-items of a `llm_gemv` group: [`GEMV_WG`], fewer where the group size or half the local
/// memory (its `FEATS × ROWS` partial sums a work-item) is smaller.
fn gemv_group(group: usize, caps: &DeviceCaps) -> usize {
    let fit = (caps.local_mem_bytes / 2) as usize / (4 * GEMV_FEATS * GEMV_ROWS);
    pow2_floor(GEMV_WG.min(group).min(fit.max(1)))
}

/// [`TEAMS`], fewer work-items where the device's groups or local memory (a float per partial
/// sum) are smaller; `None` on a CPU device or one without groups of a team.
fn team_shape(caps: &DeviceCaps) -> Option<Teams> {
    let fit = (caps.local_mem_bytes / 2) as usize / (4 * (2 * TEAMS.features + 2));
    let group = pow2_floor(TEAMS.group.min(caps.max_work_group_size).min(fit.max(1)));
    (!caps.cpu && group >= TEAMS.lanes).then_some(Teams { group, ..TEAMS })
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
    let tiled = attention_tiles(head_dim, caps);
    let teams = team_shape(caps);
    let groups = LlmGroups {
        flat,
        gemv,
        gemv_team: teams,
        attention: attention_group(head_dim, caps),
        attention_tiled: tiled.map(|(bq, _)| bq),
        fold_rope: !caps.unfused_rope,
        rows_only: caps.cpu,
        matmul: (caps.local_mem_bytes >= MATMUL_LOCAL_BYTES).then_some(MATMUL_TILE),
        matmul_half_rows: true,
        compute_units: caps.compute_units as usize,
        quant_lanes_per_unit: if caps.wide_quant_teams {
            QUANT_LANES_PER_UNIT
        } else {
            0
        },
    };
    if llm::has_attention(g) && groups.attention == 0 {
        return Err(Unsupported(format!(
            "attention over heads of {head_dim} needs {} bytes of local memory; the device has {}",
            4 * (3 * head_dim + 2),
            caps.local_mem_bytes
        )));
    }
    let planned = llm::launches(problem, g, groups, INT_ARG)?;
    let config = llm::config(problem, g, &planned.launches, groups);
    let launches = planned
        .launches
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
        ("HEAD_DIM", head_dim.to_string()),
        ("ATT_WG", groups.attention.max(1).to_string()),
    ];
    if let Some(t) = teams {
        defines.extend([
            ("TEAM", t.lanes.to_string()),
            ("TEAM_WG", t.group.to_string()),
            ("FT", t.features.to_string()),
        ]);
    }
    if groups.rows_only {
        defines.push(("ROWS_ONLY", String::new()));
    }
    if let Some((bq, bk)) = tiled {
        defines.extend([
            ("ATT_TILED", String::new()),
            ("BQ", bq.to_string()),
            ("BK", bk.to_string()),
        ]);
    }
    match problem.dtype {
        Dtype::F16 => defines.push(("W_HALF", String::new())),
        Dtype::Q8_0 => defines.push(("W_Q8", String::new())),
        Dtype::Q4_0 => defines.push(("W_Q4", String::new())),
        Dtype::F32 => {}
    }
    Ok(Plan {
        program: Program::new(("llm.cl", cl::LLM), options(caps, &defines)),
        input_storage: llm::input_storage(problem, g),
        output_storage: Storage::F32,
        scratch_bytes: planned.scratch_bytes,
        launches,
        config,
    })
}
