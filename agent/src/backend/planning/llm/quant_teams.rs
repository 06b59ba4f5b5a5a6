//! The team gemvs' launches: their kernel and grid, the packed ones' widths (OpenCL's
//! `llm_qgemv_team_<lanes>`), and the arguments a team launch takes when it folds nothing.

use super::{Arg, GROUPS_MAX, LlmGroups, Teams};

/// The packed team gemv's kernels by their teams' width (OpenCL: each a constant where its body
/// is compiled).
const QUANT_TEAM_KERNELS: [(usize, &str); 4] = [
    (32, "llm_qgemv_team_32"),
    (64, "llm_qgemv_team_64"),
    (128, "llm_qgemv_team_128"),
    (256, "llm_qgemv_team_256"),
];

/// The packed team gemv's kernel for teams of `lanes` (the widest where none is that wide).
fn quant_team_kernel(lanes: usize) -> &'static str {
    QUANT_TEAM_KERNELS.iter().find(|(l, _)| *l == lanes).map_or(
        QUANT_TEAM_KERNELS[QUANT_TEAM_KERNELS.len() - 1].1,
        |(_, name)| name,
    )
}

/// A team launch's RoPE arguments when it takes no RoPE: the flag, the table and nine zeros.
pub(super) fn no_rope() -> Vec<Arg> {
    [vec![Arg::Int(0), Arg::Output], vec![Arg::Int(0); 9]].concat()
}

/// Work-items a team of `llm_qgemv_team_*` for a `k × n` packed projection: `t.lanes` doubled,
/// while the launch has fewer than [`LlmGroups::quant_lanes_per_unit`] a compute unit, up to the
/// group (and the widest kernel) and no further than a block a work-item in a trip (k / 32
/// lanes). A packed feature is about a quarter of a half one's bytes, so a narrow projection's
/// teams of 32 (`8b`'s down projection: 1,024 of them on 132 compute units) leave the memory idle.
pub fn quant_lanes(t: Teams, k: usize, n: usize, groups: &LlmGroups) -> usize {
    let want = groups.quant_lanes_per_unit * groups.compute_units;
    let widest = QUANT_TEAM_KERNELS[QUANT_TEAM_KERNELS.len() - 1].0;
    let mut lanes = t.lanes;
    while lanes * 2 <= t.group.min(widest)
        && lanes * 2 <= k / 32
        && n.div_ceil(t.features) * lanes < want
    {
        lanes *= 2;
    }
    lanes
}

/// A team gemv's launch over a `k × n` projection: its kernel and work-items (whole groups of
/// `t.group`, at most [`GROUPS_MAX`] of them). Packed weights take `llm_qgemv_team_<lanes>`, their
/// teams widened by [`quant_lanes`]; f32 and f16 ones `llm_gemv_team` with teams of `t.lanes`.
pub(super) fn team_launch(
    t: Teams,
    k: usize,
    n: usize,
    packed: bool,
    groups: &LlmGroups,
) -> (&'static str, usize) {
    let (kernel, lanes) = if packed {
        let lanes = quant_lanes(t, k, n, groups);
        (quant_team_kernel(lanes), lanes)
    } else {
        ("llm_gemv_team", t.lanes)
    };
    let per_group = t.features * (t.group / lanes);
    (kernel, n.div_ceil(per_group).min(GROUPS_MAX) * t.group)
}
