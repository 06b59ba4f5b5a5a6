//! A transformer graph on OpenCL (`llm`, `rope`, `attention`, `swiglu`, `gemv`): one launch per
//! step of the [`LlmGraph`], in order, from `kernels/opencl/llm.cl`. Every tensor is its buffer
//! (an input or the output, the arena) and an element offset; offsets and sizes are `int`
//! arguments, refused above `i32::MAX`, but the weights' offsets, which are `long` (the `8b`
//! shape's weights pass 2^31 elements).
//!
//! - On a GPU, projections over [`MATMUL_ROWS`] rows or more run `llm_matmul` (64×64 tiles of
//!   rows × features), fewer rows (decode) `llm_gemv`, a group per [`GEMV_FEATS`] output features
//!   reading their weight rows eight weights a load, once for [`GEMV_ROWS`] rows at a time. On a
//!   CPU device (PoCL) every projection runs `llm_gemv_rows`, a work-item per output feature over
//!   all rows: no barriers, which PoCL runs slowly (a tiled GEMM there is 10× slower).
//! - Attention runs a group per row and head of [`attention_group`] work-items, each taking every
//!   `ATT_WG`-th position with an online softmax, merged at the end; the head width is a build
//!   parameter (its accumulators are private).
//! - The element-wise steps (embedding, RoPE, SwiGLU, add, copy) grid-stride over their elements.

use super::args::{INT_ARG, flat_group, options};
use super::types::{Arg, DeviceCaps, Launch, Plan, Program, Storage, Unsupported};
use crate::backend::planning::{bounded, pow2_floor, round_up};
use gpufleet_kernels::llm::{Buf, LlmGraph, Op, Ref};
use gpufleet_kernels::{Dtype, NORM_EPS, Problem, sources::opencl as cl};
use std::collections::BTreeMap;

/// Projections with at least this many rows use the tiled `llm_matmul`.
pub const MATMUL_ROWS: usize = 16;
/// Local memory `llm_matmul` needs (two 16×65 f32 tiles); a device with less runs `llm_gemv`.
const MATMUL_LOCAL_BYTES: u64 = 2 * 16 * 65 * 4;
/// Rows a `llm_gemv` group accumulates at once.
pub const GEMV_ROWS: usize = 8;
/// Output features a `llm_gemv` group takes at once (`FEATS` in `llm.cl`).
pub const GEMV_FEATS: usize = 4;
/// Work-items of a `llm_gemv` group (GPUs; on a CPU device `llm_gemv_rows` takes a work-item per
/// output feature instead).
pub const GEMV_WG: usize = 64;
/// Most groups of a grid-strided launch.
const GROUPS_MAX: usize = 65536;
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
/// [`Unsupported`] for an offset or size above `i32::MAX`, a graph whose heads differ in width,
/// or a device whose local memory cannot hold the attention's merge.
pub fn plan_llm(problem: &Problem, g: &LlmGraph, caps: &DeviceCaps) -> Result<Plan, Unsupported> {
    let group = flat_group(caps);
    let gemv_wg = gemv_group(group, caps);
    let int = |what: &str, v: usize| -> Result<Arg, Unsupported> {
        bounded(problem, what, v, i32::MAX, INT_ARG).map(Arg::Int)
    };
    // Weight offsets are `long`: the 8b shape's pass 2^31 elements.
    let long = |v: usize| Arg::Long(v as i64);
    let tensor = |r: Ref, what: &str| -> Result<(Arg, Arg), Unsupported> {
        let buf = match r.buf {
            Buf::Input(i) => Arg::Input(i),
            Buf::Arena => Arg::Output,
        };
        Ok((buf, int(what, r.off)?))
    };
    let grid = |n: usize| vec![round_up(n.min(GROUPS_MAX * group), group)];
    let head_dim = g
        .steps
        .iter()
        .find_map(|s| match s.op {
            Op::Attention { heads, .. } | Op::Rope { heads, .. } => Some(heads.head_dim),
            _ => None,
        })
        .unwrap_or(2);
    let att_wg = attention_group(head_dim, caps);
    if g.steps.iter().any(|s| matches!(s.op, Op::Attention { .. })) && att_wg == 0 {
        return Err(Unsupported(format!(
            "attention over heads of {head_dim} needs {} bytes of local memory; the device has {}",
            4 * (3 * head_dim + 2),
            caps.local_mem_bytes
        )));
    }
    let mut launches = Vec::with_capacity(g.steps.len());
    for s in &g.steps {
        let rows = s.rows.rows;
        let (x, x_off) = tensor(s.x, "input offset")?;
        let (out, out_off) = tensor(s.out, "output offset")?;
        let w = Arg::Input(g.weights_input.unwrap_or(0));
        let one = |kernel: &str, global: Vec<usize>, local: usize, args: Vec<Arg>| Launch {
            kernel: kernel.into(),
            local: Some(
                [local]
                    .into_iter()
                    .chain(std::iter::repeat(1))
                    .take(global.len())
                    .collect(),
            ),
            global,
            args,
        };
        let launch = match s.op {
            Op::Embed {
                dim,
                vocab,
                table,
                tok_stride,
            } => one(
                "llm_embed",
                grid(rows * dim),
                group,
                vec![
                    x,
                    w,
                    out,
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
                vec![rows.min(GROUPS_MAX) * group],
                group,
                vec![
                    x,
                    w,
                    out,
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
                    out,
                    x_off,
                    long(w_off),
                    out_off,
                    int("rows", rows)?,
                    int("k", k)?,
                    int("n", n)?,
                ];
                if caps.cpu {
                    one("llm_gemv_rows", grid(n), group, args)
                } else if rows >= MATMUL_ROWS && caps.local_mem_bytes >= MATMUL_LOCAL_BYTES {
                    Launch {
                        kernel: "llm_matmul".into(),
                        global: vec![n.div_ceil(64) * 16, rows.div_ceil(64) * 16],
                        local: Some(vec![16, 16]),
                        args,
                    }
                } else {
                    let groups = n.div_ceil(GEMV_FEATS).min(GROUPS_MAX);
                    one("llm_gemv", vec![groups * gemv_wg], gemv_wg, args)
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
                    grid(rows * width),
                    group,
                    vec![
                        x,
                        t,
                        out,
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
                    vec![tasks.min(GROUPS_MAX) * att_wg],
                    att_wg,
                    vec![
                        x,
                        kc,
                        vc,
                        out,
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
                grid(rows * ffn),
                group,
                vec![x, out, x_off, out_off, int("rows", rows)?, int("ffn", ffn)?],
            ),
            Op::Add { dim, other } => {
                let (b, b_off) = tensor(other, "addend offset")?;
                one(
                    "llm_add",
                    grid(rows * dim),
                    group,
                    vec![
                        x,
                        b,
                        out,
                        x_off,
                        b_off,
                        out_off,
                        int("elements", rows * dim)?,
                    ],
                )
            }
            Op::Copy { len } => one(
                "llm_copy",
                grid(len),
                group,
                vec![x, out, x_off, out_off, int("elements", len)?],
            ),
        };
        launches.push(launch);
    }
    let half = problem.dtype == Dtype::F16;
    let mut defines = vec![
        ("WG", group.to_string()),
        ("GEMV_WG", gemv_wg.to_string()),
        ("ROWS", GEMV_ROWS.to_string()),
        ("HEAD_DIM", head_dim.to_string()),
        ("ATT_WG", att_wg.max(1).to_string()),
    ];
    if half {
        defines.push(("W_HALF", String::new()));
    }
    let mut input_storage = vec![Storage::F32; g.input_lens.len()];
    if let (true, Some(i)) = (half, g.weights_input) {
        input_storage[i] = Storage::F16;
    }
    let matmuls = launches.iter().filter(|l| l.kernel == "llm_matmul").count();
    let config = BTreeMap::from([
        ("launches".to_string(), launches.len().to_string()),
        ("group".to_string(), group.to_string()),
        ("attention_group".to_string(), att_wg.to_string()),
        (
            "projections".to_string(),
            format!(
                "{matmuls} tiled (64x64, {MATMUL_ROWS}+ rows), {} gemv",
                launches
                    .iter()
                    .filter(|l| l.kernel.starts_with("llm_gemv"))
                    .count()
            ),
        ),
        (
            "weights".to_string(),
            if half { "f16" } else { "f32" }.to_string(),
        ),
    ]);
    Ok(Plan {
        program: Program::new(("llm.cl", cl::LLM), options(caps, &defines)),
        input_storage,
        output_storage: Storage::F32,
        scratch_bytes: Vec::new(),
        launches,
        config,
    })
}
