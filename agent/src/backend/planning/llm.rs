//! A transformer graph's launches for the OpenCL and HIP planners: a launch per step of the
//! [`LlmGraph`], in order, from `kernels/opencl/llm.cl` or `kernels/hip/llm.hip` (same kernels,
//! same arguments), but where a projection takes over its neighbours (below). Every tensor is its
//! buffer (an input or the output, the arena) and an element offset; offsets and sizes are `int`
//! arguments, refused above `i32::MAX`, but the weights' offsets, which are 64-bit (the `8b`
//! shape's weights pass 2^31 elements).
//!
//! - Projections over [`MATMUL_ROWS`] rows or more run `llm_matmul` (square tiles of rows ×
//!   features, [`LlmGroups::matmul`] a side, 16×16 work-items; `llm_matmul_64`, half the rows,
//!   where the full tiles would leave compute units idle). Fewer rows (decode) run `llm_gemv`, a
//!   group per [`GEMV_FEATS`] output features reading their weight rows eight weights a load,
//!   once for [`GEMV_ROWS`] rows at a time; where the device has [`LlmGroups::gemv_team`], one
//!   row runs `llm_gemv_team` instead, teams of work-items a few features each, which also
//!   folds in the RMSNorm before the projection and the SwiGLU or residual add after it when
//!   nothing else reads what they pass on ([`folded`]), and on OpenCL the RoPE after the Q/K/V
//!   projection ([`LlmGroups::fold_rope`]): 5 launches a decode block instead of 11. Where
//!   [`LlmGroups::rows_only`] (a CPU device) every projection runs `llm_gemv_rows`, a
//!   work-item per output feature over all rows: no barriers.
//! - Attention runs a group per row and head, each work-item taking every group-size-th position
//!   with an online softmax, merged at the end; over many rows a sequence (prefill) where the
//!   device has [`LlmGroups::attention_tiled`], a group per block of rows and head, tiled over
//!   keys. The head width is fixed at build time (the accumulators are private). Where a step's
//!   rows × heads are too few groups for the compute units (decode over a long cache), it is
//!   split along the sequence ([`attention_chunks`], flash-decoding): a group per (row, head,
//!   chunk) writes its partial sums to scratch 0, `llm_attention_merge` adds them by log-sum-exp.
//! - The element-wise steps (embedding, RoPE, SwiGLU, add, copy) grid-stride over their elements.
//! - Quantized weights (q8_0, q4_0: [`Elem::Packed`], laid out by [`PackedLayout`]): a
//!   projection over [`MATMUL_ROWS`] rows or more runs `llm_qmatmul` / `llm_qmatmul_64` (the
//!   tiles of `llm_matmul`, each fetch of four weights of one block made floats and scaled) where
//!   unpacked weights would run `llm_matmul`; where the device has teams and the rows are few,
//!   `llm_qgemv_team_*` (a team per FT features, each work-item every team-th block of each, their
//!   blocks loaded before any sum; teams widened for narrow projections where the backend asks,
//!   [`quant_lanes`]) with `llm_gemv_team`'s folds; else `llm_qgemv` (a work-item per output
//!   feature over all rows, a block's dot product scaled once); the embedding `llm_qembed`, from
//!   the matrices' byte offsets; the norms read their f32 gains in the same buffer.
//!
//! Each planner maps [`LlmLaunch`] onto its API: OpenCL passes the sizes as `-D` options and
//! global/local sizes, HIP picks the compiled instantiation (dtype, head width) by name.

use super::{Arg, Unsupported, bounded, round_up};
use crate::backend::storage::Elem;
use gpufleet_kernels::llm::{Buf, LlmGraph, Op, PackedLayout, Ref, Step};
use gpufleet_kernels::{Dtype, NORM_EPS, Problem};

mod config;
mod fold;
mod quant_teams;
pub use config::config;
pub(crate) use fold::{Folded, folded};
pub use quant_teams::quant_lanes;
use quant_teams::{no_rope, team_launch};

/// Projections with at least this many rows use the tiled `llm_matmul`.
pub const MATMUL_ROWS: usize = 16;
/// Rows a `llm_gemv` group accumulates at once (`ROWS` in the kernels).
pub const GEMV_ROWS: usize = 8;
/// Output features a `llm_gemv` group takes at once (`FEATS` in the kernels).
pub const GEMV_FEATS: usize = 4;
/// Work-items of a `llm_gemv` group on a GPU.
pub const GEMV_WG: usize = 64;
/// Most groups of a grid-strided launch.
const GROUPS_MAX: usize = 65536;

/// The group sizes a device takes, chosen by its planner.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LlmGroups {
    /// Work-items of the element-wise and `llm_rmsnorm` groups (a power of two).
    pub flat: usize,
    /// Work-items of a `llm_gemv` group.
    pub gemv: usize,
    /// How `llm_gemv_team` runs the one-row projections, folding in the RMSNorm before them and
    /// the SwiGLU or residual add after them where nothing else reads what they pass on; `None`:
    /// `llm_gemv` always, nothing folded.
    pub gemv_team: Option<Teams>,
    /// Work-items of an attention group.
    pub attention: usize,
    /// Rows (work-items) of a `llm_attention_tiled` group, which runs attention over
    /// [`MATMUL_ROWS`] rows a sequence or more (prefill); `None`: `llm_attention` always.
    pub attention_tiled: Option<usize>,
    /// `llm_gemv_team` also takes the RoPE after a Q/K/V projection (OpenCL), writing the keys
    /// and values into the cache: a launch fewer a decode block.
    pub fold_rope: bool,
    /// Every projection runs `llm_gemv_rows` (a CPU device, where barriers are slow).
    pub rows_only: bool,
    /// The side of `llm_matmul`'s square tile of rows × features (16×16 work-items a tile),
    /// where the device's local memory holds its tiles; `None`: every projection runs a gemv.
    pub matmul: Option<usize>,
    /// `llm_matmul_64` exists (half the rows of `llm_matmul`'s tile): projections whose tiles
    /// would not give each of the device's `compute_units` one run it instead.
    pub matmul_half_rows: bool,
    /// The device's compute units (0: unknown).
    pub compute_units: usize,
    /// Work-items a compute unit that a packed team gemv (`llm_qgemv_team_*`) aims to keep busy:
    /// its teams are widened (see [`quant_lanes`]) until a projection's launch has that many; 0:
    /// the teams keep [`Teams::lanes`].
    pub quant_lanes_per_unit: usize,
}

/// `llm_gemv_team`'s shape: a group of `group` work-items, teams of `lanes` (`TEAM`), each team
/// taking `features` output features at once (`FT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Teams {
    pub lanes: usize,
    pub group: usize,
    pub features: usize,
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

/// The fewest positions a chunk of a split attention takes ([`attention_chunks`]).
/// 16 rather than 64: on the H200, Vulkan `1b` decode from an empty cache 823 tok/s against 745
/// at gen 128 (docs/PERFORMANCE.md, issue 53).
pub const MIN_CHUNK: usize = 16;

/// The chunk of positions and the chunks an attention step `s` is split into along the sequence
/// (flash-decoding) on a device of `units` compute units: where its rows × heads are fewer than
/// two groups a unit and its longest row attends to at least two [`MIN_CHUNK`]s, chunks of at
/// least [`MIN_CHUNK`] positions making about four groups a unit; else one chunk, unsplit
/// (`units` 0: never split).
pub fn attention_chunks(s: &Step, units: usize) -> (usize, usize) {
    let Op::Attention { heads, .. } = s.op else {
        return (0, 1);
    };
    let positions = s.rows.pos0 + s.rows.per_seq;
    let tasks = s.rows.rows * heads.heads;
    if units == 0 || positions < 2 * MIN_CHUNK || tasks >= 2 * units {
        return (positions, 1);
    }
    let chunk = positions
        .div_ceil((4 * units).div_ceil(tasks))
        .max(MIN_CHUNK);
    (chunk, positions.div_ceil(chunk))
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

/// How each input is stored: f32, but the weights in f16 for an f16 problem and packed for a
/// quantized one.
pub fn input_storage(problem: &Problem, g: &LlmGraph) -> Vec<Elem> {
    let mut out = vec![Elem::F32; g.input_lens.len()];
    if let Some(i) = g.weights_input {
        match problem.dtype {
            Dtype::F16 => out[i] = Elem::F16,
            Dtype::Q8_0 | Dtype::Q4_0 => out[i] = Elem::Packed,
            Dtype::F32 => {}
        }
    }
    out
}

/// The launches of a graph, in order, and the scratch buffers they use: none, or scratch 0 for the
/// partials of the attention steps split along the sequence (the largest step's; one step at a
/// time uses it).
#[derive(Debug, Clone, PartialEq)]
pub struct LlmLaunches {
    pub launches: Vec<LlmLaunch>,
    pub scratch_bytes: Vec<usize>,
}

/// The launches of `g`.
///
/// # Errors
/// [`Unsupported`] for an offset or size above `i32::MAX` (named, with `int_arg` saying what
/// bounds it).
pub fn launches(
    problem: &Problem,
    g: &LlmGraph,
    groups: LlmGroups,
    int_arg: &str,
) -> Result<LlmLaunches, Unsupported> {
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
    let packed = problem.dtype.block_format().map(|f| PackedLayout::of(g, f));
    // Where a matrix's weights are: its element offset, or, packed, the byte offsets of its
    // blocks' values and of their scales (the `llm_q*` kernels' two arguments).
    let matrix = |at: usize| match &packed {
        Some(l) => {
            let m = l.matrix(at);
            vec![long(m.values), long(m.scales)]
        }
        None => vec![long(at)],
    };
    // A team launch's arguments after the row stride when it folds nothing (norm, gains, addend,
    // add, its offset, glu, eps, then rope and its ten).
    let unfolded = || {
        [
            vec![
                Arg::Int(0),
                Arg::Long(0),
                Arg::Output,
                Arg::Int(0),
                Arg::Int(0),
                Arg::Int(0),
                Arg::Float(NORM_EPS as f32),
            ],
            no_rope(),
        ]
        .concat()
    };
    let mut out = Vec::with_capacity(g.steps.len());
    let mut partials = 0;
    let mut at = 0;
    while at < g.steps.len() {
        if let Some(teams) = groups.gemv_team.filter(|_| !groups.rows_only)
            && let Some(f) = folded(g, at, groups.fold_rope)
        {
            let s = &g.steps[f.linear];
            let (k, n, w_off) = (f.k, f.n, f.w);
            let (x, x_off) = tensor(f.x, "input offset")?;
            let (o, out_off) = tensor(f.out, "output offset")?;
            let (res, res_off) = match f.add {
                Some(r) => tensor(r, "addend offset")?,
                None => (Arg::Output, Arg::Int(0)),
            };
            let (g_off, x_stride) = f.norm.unwrap_or((0, k));
            // Packed, the gains' f32 word in the same buffer.
            let g_off = match &packed {
                Some(l) if f.norm.is_some() => l.vector(g_off) / 4,
                _ => g_off,
            };
            // With the SwiGLU, n outputs from 2n weight rows (gate j and up n + j); with the
            // RoPE, n/2 features of two rows each (the halves of a head).
            let n = if f.glu || f.rope.is_some() { n / 2 } else { n };
            int("input", x_stride * s.rows.rows + f.x.off)?;
            int("output", n * s.rows.rows + f.out.off)?;
            let rope = match f.rope.map(|i| &g.steps[i]) {
                Some(r) => {
                    let Op::Rope {
                        heads,
                        table,
                        positions,
                        cache,
                    } = r.op
                    else {
                        unreachable!("folded() takes a RoPE step only")
                    };
                    let (t, t_off) = tensor(table, "table offset")?;
                    vec![
                        Arg::Int(1),
                        t,
                        t_off,
                        int("key cache offset", cache.k.off)?,
                        int("value cache offset", cache.v.off)?,
                        int("rows per sequence", r.rows.per_seq)?,
                        int("first position", r.rows.pos0)?,
                        int("heads", heads.heads)?,
                        int("kv_heads", heads.kv_heads)?,
                        int("positions", positions)?,
                        int("batch", cache.batch)?,
                    ]
                }
                None => no_rope(),
            };
            let (kernel, global) = team_launch(teams, k, n, packed.is_some(), &groups);
            out.push(one(
                kernel,
                vec![global],
                teams.group,
                [x, Arg::Input(g.weights_input.unwrap_or(0)), o, x_off]
                    .into_iter()
                    .chain(matrix(w_off))
                    .chain([
                        out_off,
                        int("rows", s.rows.rows)?,
                        int("k", k)?,
                        int("n", n)?,
                        int("row stride", x_stride)?,
                        Arg::Int(i32::from(f.norm.is_some())),
                        long(g_off),
                        res,
                        Arg::Int(i32::from(f.add.is_some())),
                        res_off,
                        Arg::Int(i32::from(f.glu)),
                        Arg::Float(NORM_EPS as f32),
                    ])
                    .chain(rope)
                    .collect(),
            ));
            at += f.steps;
            continue;
        }
        let s = &g.steps[at];
        at += 1;
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
            } => {
                let mut args = vec![x, w, o, x_off, int("token stride", tok_stride)?];
                args.extend(matrix(table));
                args.extend([
                    out_off,
                    int("rows", rows)?,
                    int("dim", dim)?,
                    int("vocab", vocab)?,
                ]);
                let kernel = if packed.is_some() {
                    "llm_qembed"
                } else {
                    "llm_embed"
                };
                one(kernel, strided(rows * dim), flat, args)
            }
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
                    // Packed, the gains' f32 index in the same buffer.
                    long(packed.as_ref().map_or(gamma, |l| l.vector(gamma) / 4)),
                    out_off,
                    int("rows", rows)?,
                    int("dim", dim)?,
                    Arg::Float(NORM_EPS as f32),
                ],
            ),
            Op::Linear { k, n, w: w_off } => {
                int("input", rows * k + s.x.off)?;
                int("output", rows * n + s.out.off)?;
                let mut args = vec![x, w, o, x_off];
                args.extend(matrix(w_off));
                args.extend([out_off, int("rows", rows)?, int("k", k)?, int("n", n)?]);
                // Packed: on a GPU, few rows by teams (a team a feature, coalesced block loads),
                // many by tiles as unpacked weights; on a CPU device a work-item a feature.
                let team = groups
                    .gemv_team
                    .filter(|_| !groups.rows_only && rows < MATMUL_ROWS);
                let tiled = groups
                    .matmul
                    .filter(|_| !groups.rows_only && rows >= MATMUL_ROWS);
                if packed.is_some()
                    && let Some(t) = team
                {
                    args.push(int("row stride", k)?);
                    args.extend(unfolded());
                    let (kernel, global) = team_launch(t, k, n, true, &groups);
                    one(kernel, vec![global], t.group, args)
                } else if let Some(tile) = tiled {
                    let short = groups.matmul_half_rows
                        && n.div_ceil(tile) * rows.div_ceil(tile) < groups.compute_units;
                    let (kernel, tile_rows) = match (packed.is_some(), short) {
                        (false, false) => ("llm_matmul", tile),
                        (false, true) => ("llm_matmul_64", tile / 2),
                        (true, false) => ("llm_qmatmul", tile),
                        (true, true) => ("llm_qmatmul_64", tile / 2),
                    };
                    LlmLaunch {
                        kernel,
                        global: vec![n.div_ceil(tile) * 16, rows.div_ceil(tile_rows) * 16],
                        local: vec![16, 16],
                        args,
                    }
                } else if packed.is_some() {
                    one("llm_qgemv", strided(n), flat, args)
                } else if groups.rows_only {
                    one("llm_gemv_rows", strided(n), flat, args)
                } else {
                    let count = n.div_ceil(GEMV_FEATS).min(GROUPS_MAX);
                    one("llm_gemv", vec![count * groups.gemv], groups.gemv, args)
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
                let tiled = groups
                    .attention_tiled
                    .filter(|_| s.rows.per_seq >= MATMUL_ROWS);
                let (chunk, chunks) = match tiled {
                    Some(_) => (0, 1),
                    None => attention_chunks(s, groups.compute_units),
                };
                let mut args = vec![
                    x,
                    kc,
                    vc,
                    o.clone(),
                    x_off,
                    k_off,
                    v_off,
                    out_off.clone(),
                    int("rows", rows)?,
                    int("rows per sequence", s.rows.per_seq)?,
                    int("first position", s.rows.pos0)?,
                    int("heads", heads.heads)?,
                    int("kv_heads", heads.kv_heads)?,
                    int("batch", cache.batch)?,
                    Arg::Float(heads.scale() as f32),
                ];
                let Some(bq) = tiled else {
                    // A split's partials go to scratch 0 (the output where unsplit: unused).
                    let part = if chunks > 1 {
                        Arg::Scratch(0)
                    } else {
                        o.clone()
                    };
                    args.insert(4, part);
                    args.extend([int("chunk", chunk)?, int("chunks", chunks)?]);
                    let tasks = rows * heads.heads * chunks;
                    let local = groups.attention;
                    out.push(one(
                        "llm_attention",
                        vec![tasks.min(GROUPS_MAX) * local],
                        local,
                        args,
                    ));
                    if chunks > 1 {
                        let n = rows * heads.heads * heads.head_dim;
                        let floats = rows * heads.heads * chunks * (heads.head_dim + 2);
                        int("partials", floats)?;
                        partials = partials.max(4 * floats);
                        out.push(one(
                            "llm_attention_merge",
                            strided(n),
                            flat,
                            vec![
                                Arg::Scratch(0),
                                o,
                                out_off,
                                int("rows·heads·head_dim", n)?,
                                int("head_dim", heads.head_dim)?,
                                int("chunks", chunks)?,
                            ],
                        ));
                    }
                    continue;
                };
                let tasks =
                    rows.div_ceil(s.rows.per_seq) * s.rows.per_seq.div_ceil(bq) * heads.heads;
                one(
                    "llm_attention_tiled",
                    vec![tasks.min(GROUPS_MAX) * bq],
                    bq,
                    args,
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
    Ok(LlmLaunches {
        launches: out,
        scratch_bytes: if partials > 0 {
            vec![partials]
        } else {
            Vec::new()
        },
    })
}
