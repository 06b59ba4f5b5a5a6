//! A transformer graph's launches for the OpenCL and HIP planners: one launch per step of the
//! [`LlmGraph`], in order, from `kernels/opencl/llm.cl` or `kernels/hip/llm.hip` (same kernels,
//! same arguments). Every tensor is its buffer (an input or the output, the arena) and an element
//! offset; offsets and sizes are `int` arguments, refused above `i32::MAX`, but the weights'
//! offsets, which are 64-bit (the `8b` shape's weights pass 2^31 elements).
//!
//! - Projections over [`MATMUL_ROWS`] rows or more run `llm_matmul` (64×64 tiles of rows ×
//!   features, 16×16 work-items), fewer rows (decode) `llm_gemv`, a group per [`GEMV_FEATS`]
//!   output features reading their weight rows eight weights a load, once for [`GEMV_ROWS`] rows
//!   at a time. Where [`LlmGroups::rows_only`] (a CPU device) every projection runs
//!   `llm_gemv_rows`, a work-item per output feature over all rows: no barriers.
//! - Attention runs a group per row and head, each work-item taking every group-size-th position
//!   with an online softmax, merged at the end; the head width is fixed at build time (its
//!   accumulators are private).
//! - The element-wise steps (embedding, RoPE, SwiGLU, add, copy) grid-stride over their elements.
//!
//! Each planner maps [`LlmLaunch`] onto its API: OpenCL passes the sizes as `-D` options and
//! global/local sizes, HIP picks the compiled instantiation (dtype, head width) by name.

use super::{Arg, Unsupported, bounded, round_up};
use crate::backend::storage::Elem;
use gpufleet_kernels::llm::{Buf, LlmGraph, Op, Ref};
use gpufleet_kernels::{Dtype, NORM_EPS, Problem};
use std::collections::BTreeMap;

/// Projections with at least this many rows use the tiled `llm_matmul`.
pub const MATMUL_ROWS: usize = 16;
/// Rows a `llm_gemv` group accumulates at once (`ROWS` in the kernels).
pub const GEMV_ROWS: usize = 8;
/// Output features a `llm_gemv` group takes at once (`FEATS` in the kernels).
pub const GEMV_FEATS: usize = 4;
/// Work-items of a `llm_gemv` group on a GPU.
pub const GEMV_WG: usize = 64;
/// Output features from which a one-row projection runs `llm_gemv_team` where the device has it:
/// on an H200 (OpenCL, f16, teams of 8) it read 1.3-1.45x faster than `llm_gemv` at 16,384 to
/// 128,256 features, 0.5-0.6x as fast at 2,048 and 3,072 (too few groups, one load a work-item in
/// flight), and slower at 8 rows.
pub const TEAM_MIN_N: usize = 8192;
/// Most groups of a grid-strided launch.
const GROUPS_MAX: usize = 65536;

/// The group sizes a device takes, chosen by its planner.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LlmGroups {
    /// Work-items of the element-wise and `llm_rmsnorm` groups (a power of two).
    pub flat: usize,
    /// Work-items of a `llm_gemv` group.
    pub gemv: usize,
    /// Work-items a feature takes in `llm_gemv_team` (`gemv / team` features a group), which runs
    /// the one-row projections [`TEAM_MIN_N`] features wide or wider; `None`: `llm_gemv` always.
    pub gemv_team: Option<usize>,
    /// Work-items of an attention group.
    pub attention: usize,
    /// Every projection runs `llm_gemv_rows` (a CPU device, where barriers are slow).
    pub rows_only: bool,
    /// `llm_matmul`'s two 16×65 tiles fit the device's local memory.
    pub matmul: bool,
}

/// One launch: the kernel's base name (`llm_attention`, not its HIP instantiation), the global
/// and local sizes in work-items (one or two dimensions), and the arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmLaunch {
    pub kernel: &'static str,
    pub global: Vec<usize>,
    pub local: Vec<usize>,
    pub args: Vec<Arg>,
}

/// The width of the graph's attention heads (2 where it has none: any even value builds).
pub fn head_dim(g: &LlmGraph) -> usize {
    g.steps
        .iter()
        .find_map(|s| match s.op {
            Op::Attention { heads, .. } | Op::Rope { heads, .. } => Some(heads.head_dim),
            _ => None,
        })
        .unwrap_or(2)
}

/// Whether the graph has an attention step.
pub fn has_attention(g: &LlmGraph) -> bool {
    g.steps.iter().any(|s| matches!(s.op, Op::Attention { .. }))
}

/// How each input is stored: f32, but the weights in f16 for an f16 problem.
pub fn input_storage(problem: &Problem, g: &LlmGraph) -> Vec<Elem> {
    let mut out = vec![Elem::F32; g.input_lens.len()];
    if let (Dtype::F16, Some(i)) = (problem.dtype, g.weights_input) {
        out[i] = Elem::F16;
    }
    out
}

/// The launches of `g`, in order.
///
/// # Errors
/// [`Unsupported`] for an offset or size above `i32::MAX` (named, with `int_arg` saying what
/// bounds it).
pub fn launches(
    problem: &Problem,
    g: &LlmGraph,
    groups: LlmGroups,
    int_arg: &str,
) -> Result<Vec<LlmLaunch>, Unsupported> {
    let flat = groups.flat;
    let int = |what: &str, v: usize| -> Result<Arg, Unsupported> {
        bounded(problem, what, v, i32::MAX, int_arg).map(Arg::Int)
    };
    let long = |v: usize| Arg::Long(v as i64);
    let tensor = |r: Ref, what: &str| -> Result<(Arg, Arg), Unsupported> {
        let buf = match r.buf {
            Buf::Input(i) => Arg::Input(i),
            Buf::Arena => Arg::Output,
        };
        Ok((buf, int(what, r.off)?))
    };
    let strided = |n: usize| vec![round_up(n.min(GROUPS_MAX * flat), flat)];
    let one = |kernel: &'static str, global: Vec<usize>, local: usize, args: Vec<Arg>| LlmLaunch {
        kernel,
        local: std::iter::once(local)
            .chain(std::iter::repeat(1))
            .take(global.len())
            .collect(),
        global,
        args,
    };
    let mut out = Vec::with_capacity(g.steps.len());
    for s in &g.steps {
        let rows = s.rows.rows;
        let (x, x_off) = tensor(s.x, "input offset")?;
        let (o, out_off) = tensor(s.out, "output offset")?;
        let w = Arg::Input(g.weights_input.unwrap_or(0));
        let launch = match s.op {
            Op::Embed {
                dim,
                vocab,
                table,
                tok_stride,
            } => one(
                "llm_embed",
                strided(rows * dim),
                flat,
                vec![
                    x,
                    w,
                    o,
                    x_off,
                    int("token stride", tok_stride)?,
                    long(table),
                    out_off,
                    int("rows", rows)?,
                    int("dim", dim)?,
                    int("vocab", vocab)?,
                ],
            ),
            Op::RmsNorm {
                dim,
                gamma,
                in_stride,
            } => one(
                "llm_rmsnorm",
                vec![rows.min(GROUPS_MAX) * flat],
                flat,
                vec![
                    x,
                    w,
                    o,
                    x_off,
                    int("row stride", in_stride)?,
                    long(gamma),
                    out_off,
                    int("rows", rows)?,
                    int("dim", dim)?,
                    Arg::Float(NORM_EPS as f32),
                ],
            ),
            Op::Linear { k, n, w: w_off } => {
                int("input", rows * k + s.x.off)?;
                int("output", rows * n + s.out.off)?;
                let args = vec![
                    x,
                    w,
                    o,
                    x_off,
                    long(w_off),
                    out_off,
                    int("rows", rows)?,
                    int("k", k)?,
                    int("n", n)?,
                ];
                if groups.rows_only {
                    one("llm_gemv_rows", strided(n), flat, args)
                } else if rows >= MATMUL_ROWS && groups.matmul {
                    LlmLaunch {
                        kernel: "llm_matmul",
                        global: vec![n.div_ceil(64) * 16, rows.div_ceil(64) * 16],
                        local: vec![16, 16],
                        args,
                    }
                } else {
                    let (kernel, feats) = match groups.gemv_team {
                        Some(team) if n >= TEAM_MIN_N && rows == 1 => {
                            ("llm_gemv_team", groups.gemv / team)
                        }
                        _ => ("llm_gemv", GEMV_FEATS),
                    };
                    let count = n.div_ceil(feats).min(GROUPS_MAX);
                    one(kernel, vec![count * groups.gemv], groups.gemv, args)
                }
            }
            Op::Rope {
                heads,
                table,
                positions,
                cache,
            } => {
                let (t, t_off) = tensor(table, "table offset")?;
                let width = heads.q_dim() + 2 * heads.kv_dim();
                one(
                    "llm_rope",
                    strided(rows * width),
                    flat,
                    vec![
                        x,
                        t,
                        o,
                        x_off,
                        t_off,
                        out_off,
                        int("key cache offset", cache.k.off)?,
                        int("value cache offset", cache.v.off)?,
                        int("rows", rows)?,
                        int("rows per sequence", s.rows.per_seq)?,
                        int("first position", s.rows.pos0)?,
                        int("heads", heads.heads)?,
                        int("kv_heads", heads.kv_heads)?,
                        int("head_dim", heads.head_dim)?,
                        int("positions", positions)?,
                        int("batch", cache.batch)?,
                    ],
                )
            }
            Op::Attention { heads, cache } => {
                let (kc, k_off) = tensor(cache.k, "key cache offset")?;
                let (vc, v_off) = tensor(cache.v, "value cache offset")?;
                int(
                    "cache",
                    cache.cap * cache.batch * heads.kv_dim() + cache.k.off.max(cache.v.off),
                )?;
                let tasks = rows * heads.heads;
                one(
                    "llm_attention",
                    vec![tasks.min(GROUPS_MAX) * groups.attention],
                    groups.attention,
                    vec![
                        x,
                        kc,
                        vc,
                        o,
                        x_off,
                        k_off,
                        v_off,
                        out_off,
                        int("rows", rows)?,
                        int("rows per sequence", s.rows.per_seq)?,
                        int("first position", s.rows.pos0)?,
                        int("heads", heads.heads)?,
                        int("kv_heads", heads.kv_heads)?,
                        int("batch", cache.batch)?,
                        Arg::Float(heads.scale() as f32),
                    ],
                )
            }
            Op::SwiGlu { ffn } => one(
                "llm_swiglu",
                strided(rows * ffn),
                flat,
                vec![x, o, x_off, out_off, int("rows", rows)?, int("ffn", ffn)?],
            ),
            Op::Add { dim, other } => {
                let (b, b_off) = tensor(other, "addend offset")?;
                one(
                    "llm_add",
                    strided(rows * dim),
                    flat,
                    vec![x, b, o, x_off, b_off, out_off, int("elements", rows * dim)?],
                )
            }
            Op::Copy { len } => one(
                "llm_copy",
                strided(len),
                flat,
                vec![x, o, x_off, out_off, int("elements", len)?],
            ),
        };
        out.push(launch);
    }
    Ok(out)
}

/// The configuration recorded with the result: launches, group sizes, how the projections ran
/// and the weights' storage.
pub fn config(
    problem: &Problem,
    launches: &[LlmLaunch],
    groups: LlmGroups,
) -> BTreeMap<String, String> {
    let count = |name: &str| launches.iter().filter(|l| l.kernel == name).count();
    let team = count("llm_gemv_team");
    let gemv = count("llm_gemv") + team + count("llm_gemv_rows");
    let weights = if problem.dtype == Dtype::F16 {
        "f16"
    } else {
        "f32"
    };
    BTreeMap::from([
        ("launches".to_string(), launches.len().to_string()),
        ("group".to_string(), groups.flat.to_string()),
        ("attention_group".to_string(), groups.attention.to_string()),
        (
            "projections".to_string(),
            format!(
                "{} tiled (64x64, {MATMUL_ROWS}+ rows), {gemv} gemv ({team} by teams)",
                count("llm_matmul")
            ),
        ),
        ("weights".to_string(), weights.to_string()),
    ])
}
