//! The transformer kernels (`llm`, `rope`, `attention`, `swiglu`, `gemv`): one dispatch per step of
//! the problem's [`LlmGraph`], in order, so one iteration is one submission of one command buffer;
//! but a one-row projection (decode) runs `llm_gemv_team`, which also does the RMSNorm before it and
//! the SwiGLU or residual add after it where nothing else reads what they pass on
//! (`planning::llm::folded`, the OpenCL planner's rule): 6 dispatches a decode block instead of 11.
//!
//! Every tensor of a step is a buffer (an input, or the arena: the output buffer) and an offset in
//! elements: the buffer becomes the dispatch's binding, the offset a `uint` push constant. The
//! arena is bound once per role (a step's input, its output, the KV cache), which the shaders
//! allow (`kernels/vulkan/include/llm.glsl`). In the f16 dtype the weights input is stored as half
//! and read by the `_f16` shaders, which need only 16-bit storage buffers (f32 arithmetic).
//!
//! | op | shader | bindings | groups |
//! | --- | --- | --- | --- |
//! | Embed | `llm_embed[_f16]` | tokens, weights, arena | grid over rows × dim |
//! | RmsNorm | `llm_rmsnorm[_f16]` | x, weights, arena | one per row (strided) |
//! | Linear | `llm_linear[_f16][_subgroup]` | x, weights, arena | 4 features × 4 rows each |
//! | Linear, half weights, 16 rows or more, NVIDIA cooperative matrices | `llm_linear_f16_coopmat` | x, weights, arena | 128 features × 64 rows each |
//! | Linear, one row (+ norm, SwiGLU, add) | `llm_gemv_team[_f16\|_q8\|_q4][_subgroup]` | x, weights, arena, addend | teams (subgroups) of 4 features each |
//! | Rope | `llm_rope` | x, table, arena | grid over rows × pairs |
//! | Attention | `llm_attention` | queries, keys, values, arena | one per (row, head) |
//! | Attention, 16 rows a sequence or more | `llm_attention_tile` | queries, keys, values, arena | one per (32 rows, head) |
//! | Add, Copy, SwiGlu | `llm_eltwise` | x, other, arena | grid over elements |
//! | Embed, q8_0 / q4_0 | `llm_qembed_q8` / `_q4` | tokens, weights, arena | grid over rows × dim |
//! | Linear, q8_0 / q4_0, many rows | `llm_linear_q8` / `_q4` [`_subgroup`] | x, weights, arena | (n/4, rows/4) groups |
//! | Linear, q8_0 / q4_0, 16 rows or more, NVIDIA cooperative matrices | `llm_linear_q8_coopmat` / `_q4_coopmat` | x, weights, arena | 128 features × 64 rows each |
//!
//! Quantized weights (q8_0, q4_0) are the packed buffer (`gpufleet_kernels::llm::PackedLayout`),
//! bound in byte slices: the matrices read by the `llm_qembed_q*`, `llm_linear_q*` and `llm_gemv_team_q*` shaders as words,
//! the norms' f32 gains by `llm_rmsnorm` or the team that folds the norm in. A one-row projection
//! runs by teams as unpacked weights do, so a quantized decode is replayed too.

mod attention;
mod packed;
mod replay;
mod team;

use std::collections::BTreeMap;

use super::args::{
    GRID_GROUPS_MAX, SPEC_LOCAL_X, dispatch, flat_group, grid_groups, pow2_floor, words,
};
use super::types::{
    Binding, Dispatch, Passes, Plan, Planned, SLICE_ALIGN, SpecValue, Storage, Unsupported, VkCaps,
};
use crate::backend::planning::llm::folded;
use gpufleet_kernels::llm::{Buf, LlmGraph, Op, PackedLayout, Ref, Step};
use gpufleet_kernels::{Dtype, NORM_EPS, Problem};

/// Invocations per group of the shaders that reduce (`llm_rmsnorm`, `llm_linear`,
/// `llm_attention`) where the device allows: every Vulkan device allows 128.
pub(super) const REDUCE_GROUP: u32 = 128;
/// Output features and rows of one `llm_linear` group (NF and RB in its source).
pub(super) const LINEAR_FEATURES: usize = 4;
pub(super) const LINEAR_ROWS: usize = 4;
/// Rows of a projection from which half or packed weights run on cooperative matrices where the
/// device has them (`llm_linear_f16_coopmat`, `_q8_coopmat`, `_q4_coopmat`): a prefill's, not a
/// batch's decode.
pub(super) const COOPMAT_ROWS: usize = 16;
/// Its tiles (BM and BN in its source) and its group: eight subgroups of 32, a 32 × 32 part of
/// the tile each.
pub(super) const COOPMAT_TILE_ROWS: usize = 64;
pub(super) const COOPMAT_TILE_FEATURES: usize = 128;
/// The cooperative-matrix shaders' suffix (after `llm_linear_f16`, `_q8`, `_q4`).
const COOPMAT_SUFFIX: &str = "_coopmat";
const COOPMAT_GROUP: u32 = 256;
/// The widest head `llm_attention` keeps in shared memory (MAX_HD in its source), and the
/// dimensions one invocation may take (ND), so heads up to `ND × group` wide.
pub(super) const MAX_HEAD_DIM: usize = 512;
pub(super) const ATTENTION_DIMS: usize = 8;
/// `llm_linear`'s and `llm_attention`'s specialization constant VEC4: rows (keys and values)
/// read as 4-vectors.
pub(super) const SPEC_VEC4: u32 = 2;
/// `llm_gemv_team`'s specialization constants: the team size (shared-memory teams), the aligned
/// loads, and the norm, SwiGLU and residual add it folds in.
const SPEC_TEAM: u32 = 6;
const SPEC_ALIGNED: u32 = 2;
const SPEC_NORM: u32 = 3;
const SPEC_GLU: u32 = 4;
const SPEC_ADD: u32 = 5;
const SPEC_TEAM_SPLIT: u32 = 7;
const SPEC_ADVANCE: u32 = 8;
const SPEC_ROPE: u32 = 9;
/// Teams `llm_gemv_team` aims to have in flight a compute unit (a 2,048-wide projection has 512
/// teams of 4 features: on the H200's 132 SMs, four warps each, its weights read at a fifth of copy),
/// and the compute units assumed where the device does not say. 16, not 32: aiming at 32 split
/// `8b`'s gate/up projection (3,584 teams) in two, which made it slower (docs/PERFORMANCE.md).
const TEAMS_PER_UNIT: usize = 16;
/// The same for packed weights (q8_0, q4_0), which take about three instructions a weight: 64, so
/// that 8b's gate/up projection splits four ways (on an H100 `8b` q4_0 decode 244.5 → 263.6 tok/s,
/// docs/PERFORMANCE.md "Quantized decode: quarters of blocks").
const QUANT_TEAMS_PER_UNIT: usize = 64;
/// The blocks a lane of a packed team gemv takes a quarter of a trip (`QB`): 2, which on an H100
/// took `8b` q4_0's gate/up projection from 51 to 39 µs and its token 1.12× over 4 (the compiler
/// keeps a trip's loads in flight better at half the length; docs/PERFORMANCE.md "The driver's own
/// count of a pipeline").
const QUANT_BLOCKS: u32 = 2;
/// `llm_gemv_team`'s specialization constant QB.
const SPEC_QUANT_BLOCKS: u32 = 10;
const UNITS_UNKNOWN: usize = 32;
/// Output features an `llm_gemv_team` team takes at once (FT in its source).
const TEAM_FEATURES: usize = 4;
/// The scratch buffers: the pass shift (a `uint`, see [`Passes`]) and a split attention's partials.
pub(super) const SHIFT: usize = 0;
const PARTIALS: usize = 1;
/// `llm_eltwise`'s ops.
const ADD: u32 = 0;
const COPY: u32 = 1;
const SWIGLU: u32 = 2;

/// The plan of a transformer problem, its graph `graph` (from `planning::route`), on a device
/// with `caps`.
///
/// # Errors
/// [`Unsupported`]: f16 weights without 16-bit storage buffers, a head wider than
/// [`MAX_HEAD_DIM`] (or than the device's groups can take), or a size past a `uint`.
pub(super) fn plan_llm(problem: &Problem, graph: &LlmGraph, caps: &VkCaps) -> Planned {
    let name = problem.kernel.name;
    let half = problem.dtype == Dtype::F16;
    if half && !caps.storage_buffer_16bit {
        return Err(Unsupported(format!(
            "dtype f16 of {name} needs storageBuffer16BitAccess (false on this device)"
        )));
    }
    let input_storage = crate::backend::planning::llm::input_storage(problem, graph);
    let packed = problem
        .dtype
        .block_format()
        .map(|f| PackedLayout::of(graph, f));
    let planner = StepPlanner {
        problem,
        caps,
        graph,
        half,
        packed: packed.as_ref(),
        flat: flat_group(caps),
    };
    // A one-row projection runs `llm_gemv_team` (`_q8`, `_q4` for packed weights) with the steps
    // it folds in (where a group holds a team); every other step its own dispatch.
    let teams = planner.teams().1 as usize >= TEAM_FEATURES;
    let mut dispatches = Vec::with_capacity(graph.steps.len());
    // The partials' bytes of the largest split attention, and how many were split.
    let (mut scratch, mut split) = (0, 0);
    let mut at = 0;
    // The dispatch each step starts, where it starts one (a folded step does not).
    let mut starts = vec![None; graph.steps.len()];
    while at < graph.steps.len() {
        starts[at] = Some(dispatches.len());
        if teams && let Some(f) = folded(graph, at, true) {
            let mut d = planner.team(&f)?;
            let folds = [
                (f.norm.is_some(), " +norm"),
                (f.glu, " +swiglu"),
                (f.add.is_some(), " +add"),
                (f.rope.is_some(), " +rope"),
            ];
            d.label = format!("gemv {}×{}", f.k, f.n);
            d.label
                .extend(folds.iter().filter(|(on, _)| *on).map(|(_, s)| *s));
            dispatches.push(d);
            at += f.steps;
        } else {
            let s = &graph.steps[at];
            let mut d = planner.step(s)?;
            d.label = match s.op {
                Op::Linear { k, n, .. } => format!("linear {k}×{n}"),
                _ => s.op.kind().to_string(),
            };
            dispatches.push(d);
            if let Some((merge, bytes)) = planner.merge(s)? {
                dispatches.push(merge);
                scratch = scratch.max(bytes);
                split += 1;
            }
            at += 1;
        }
    }
    let mut config = config(graph, &dispatches, problem.dtype);
    if split > 0 {
        config.insert(
            "attention_split".into(),
            format!("{split} split along the sequence, merged by log-sum-exp"),
        );
    }
    let replay = replay::replay(graph, &starts, &mut dispatches);
    let mut scratch_bytes = vec![4];
    if scratch > 0 {
        scratch_bytes.push(scratch);
    }
    Ok(Plan {
        input_storage,
        output_storage: Storage::F32,
        scratch_bytes,
        dispatches,
        config,
        passes: Passes {
            shift: Some(SHIFT),
            replay,
        },
    })
}

/// What the dispatch of each step needs to know.
struct StepPlanner<'a> {
    problem: &'a Problem,
    caps: &'a VkCaps,
    graph: &'a LlmGraph,
    /// Whether the weights are stored as half.
    half: bool,
    /// The packed layout of quantized weights.
    packed: Option<&'a PackedLayout>,
    /// Invocations per group of the grid-stride shaders.
    flat: u32,
}

/// The binding of a tensor's buffer.
fn binding(r: Ref) -> Binding {
    match r.buf {
        Buf::Input(i) => Binding::Input(i),
        Buf::Arena => Binding::Output,
    }
}

impl StepPlanner<'_> {
    /// The dispatch of step `s`.
    fn step(&self, s: &Step) -> Result<Dispatch, Unsupported> {
        let rows = s.rows.rows;
        let (x, out) = (binding(s.x), Binding::Output);
        if let Some(layout) = self.packed
            && let Some(d) = self.quantized(s, layout)?
        {
            return Ok(d);
        }
        match s.op {
            Op::Embed {
                dim,
                vocab,
                table,
                tok_stride,
            } => {
                let total = rows * dim;
                // Packed, the table is its blocks' values (bytes) and the scales' offset follows
                // llm_embed's push constants (`llm_qembed_*`).
                let (at, len, scales, shader) = match self.packed {
                    Some(l) => {
                        let m = l.matrix(table);
                        let len = vocab * dim / 32 * l.format().block_bytes();
                        let shader = format!("llm_qembed_{}", l.format().suffix());
                        (m.values, len, Some(m.scales), shader)
                    }
                    None => (table, vocab * dim, None, self.weighted("llm_embed")),
                };
                let (w, base) = self.weights(&[(at, len)])?;
                let mut push = self.words(&[
                    ("rows·dim", total),
                    ("dim", dim),
                    ("vocab", vocab),
                    ("table", at - base),
                    ("tok_stride", tok_stride),
                    ("x offset", s.x.off),
                    ("out offset", s.out.off),
                ])?;
                if let Some(scales) = scales {
                    push.extend(self.words(&[("scales", scales - base)])?);
                }
                let shift = Binding::Scratch(SHIFT);
                self.grid(&shader, total, push, vec![x, w, out, shift])
            }
            Op::RmsNorm {
                dim,
                gamma,
                in_stride,
            } => {
                // Packed, the gains are f32 at a byte offset: bound in bytes, pushed in floats.
                let (at, len, per) = match self.packed {
                    Some(l) => (l.vector(gamma), 4 * dim, 4),
                    None => (gamma, dim, 1),
                };
                let (w, base) = self.weights(&[(at, len)])?;
                let mut push = self.words(&[
                    ("rows", rows),
                    ("dim", dim),
                    ("gamma", (at - base) / per),
                    ("in_stride", in_stride),
                    ("x offset", s.x.off),
                    ("out offset", s.out.off),
                ])?;
                push.push((NORM_EPS as f32).to_bits());
                let groups = self.groups(rows, 0);
                dispatch(
                    &self.weighted("llm_rmsnorm"),
                    self.reducing(0, 4),
                    push,
                    vec![x, w, out],
                    [groups, 1, 1],
                )
            }
            Op::Linear { k, n, w } => {
                let (weights, base) = self.weights(&[(w, n * k)])?;
                let w = w - base;
                let push = self.words(&[
                    ("rows", rows),
                    ("k", k),
                    ("n", n),
                    ("x offset", s.x.off),
                    ("w", w),
                    ("out offset", s.out.off),
                ])?;
                // Every row of x and W starts at a multiple of 4 elements.
                let vec4 = [k, s.x.off, w].iter().all(|v| v.is_multiple_of(4));
                let shader = self.weighted("llm_linear");
                let bindings = vec![x, weights, out];
                self.linear(shader, self.half, vec4, rows, n, push, bindings)
            }
            Op::Rope {
                heads,
                table,
                positions,
                cache,
            } => {
                self.in_arena(s, "the KV cache", cache.k)?;
                self.in_arena(s, "the KV cache", cache.v)?;
                let half = heads.head_dim / 2;
                let items = (heads.heads + heads.kv_heads) * half + heads.kv_dim();
                let push = self.words(&[
                    ("rows", rows),
                    ("per_seq", s.rows.per_seq),
                    ("pos0", s.rows.pos0),
                    ("heads", heads.heads),
                    ("kv_heads", heads.kv_heads),
                    ("head_dim/2", half),
                    ("positions", positions),
                    ("batch", cache.batch),
                    ("x offset", s.x.off),
                    ("table offset", table.off),
                    ("out offset", s.out.off),
                    ("cache k offset", cache.k.off),
                    ("cache v offset", cache.v.off),
                ])?;
                self.words(&[("rows·items", rows * items)])?;
                let bindings = vec![x, binding(table), out, Binding::Scratch(SHIFT)];
                self.grid("llm_rope", rows * items, push, bindings)
            }
            Op::Attention { .. } => self.attention(s, x),
            Op::Add { dim, other } => {
                self.eltwise(s, ADD, rows * dim, 0, other.off, binding(other))
            }
            Op::Copy { len } => self.eltwise(s, COPY, len, 0, 0, x),
            Op::SwiGlu { ffn } => self.eltwise(s, SWIGLU, rows * ffn, ffn, 0, x),
        }
    }

    /// An `llm_linear` dispatch (`shader`: `llm_linear`, `_f16` or `_q8`/`_q4`, the `_subgroup`
    /// variant added where the device has subgroup arithmetic): groups of four features × four
    /// rows over `n` features and `rows` rows, 4-vector loads with `vec4`. Half and packed weights
    /// (`tensor_cores`) over 16 rows or more run `_coopmat` instead where the device has NVIDIA's
    /// cooperative matrices: a group a tile of 64 rows × 128 features.
    #[allow(clippy::too_many_arguments)]
    fn linear(
        &self,
        mut shader: String,
        tensor_cores: bool,
        vec4: bool,
        rows: usize,
        n: usize,
        push: Vec<u32>,
        bindings: Vec<Binding>,
    ) -> Result<Dispatch, Unsupported> {
        let coopmat = tensor_cores && self.caps.coopmat_f16 && rows >= COOPMAT_ROWS;
        let (features, tile_rows) = if coopmat {
            (COOPMAT_TILE_FEATURES, COOPMAT_TILE_ROWS)
        } else {
            (LINEAR_FEATURES, LINEAR_ROWS)
        };
        let groups = [
            self.groups(n.div_ceil(features), 0),
            self.groups(rows.div_ceil(tile_rows), 1),
            1,
        ];
        let mut spec = if coopmat {
            shader.push_str(COOPMAT_SUFFIX);
            vec![(SPEC_LOCAL_X, SpecValue::U32(COOPMAT_GROUP))]
        } else {
            if self.caps.subgroup_arithmetic {
                shader.push_str("_subgroup");
            }
            // The partials: NF·RB floats per invocation.
            self.reducing(0, 4 * LINEAR_FEATURES * LINEAR_ROWS)
        };
        spec.push((SPEC_VEC4, SpecValue::U32(u32::from(vec4))));
        dispatch(&shader, spec, push, bindings, groups)
    }

    /// An `llm_eltwise` dispatch of `op` over `n` elements.
    fn eltwise(
        &self,
        s: &Step,
        op: u32,
        n: usize,
        width: usize,
        other_off: usize,
        other: Binding,
    ) -> Result<Dispatch, Unsupported> {
        let mut push = vec![op];
        push.extend(self.words(&[
            ("elements", n),
            ("width", width),
            ("x offset", s.x.off),
            ("other offset", other_off),
            ("out offset", s.out.off),
        ])?);
        self.grid(
            "llm_eltwise",
            n,
            push,
            vec![binding(s.x), other, Binding::Output],
        )
    }

    /// A grid-stride dispatch of `shader` over `items`.
    fn grid(
        &self,
        shader: &str,
        items: usize,
        push: Vec<u32>,
        bindings: Vec<Binding>,
    ) -> Result<Dispatch, Unsupported> {
        let groups = grid_groups(self.caps, items, self.flat);
        let spec = vec![(SPEC_LOCAL_X, SpecValue::U32(self.flat))];
        dispatch(shader, spec, push, bindings, [groups, 1, 1])
    }

    /// Groups along `axis` for `items` group-sized pieces of work: the shaders stride their
    /// groups over them, so at most [`GRID_GROUPS_MAX`] and the device's count.
    fn groups(&self, items: usize, axis: usize) -> u32 {
        u32::try_from(items)
            .unwrap_or(u32::MAX)
            .min(GRID_GROUPS_MAX)
            .min(self.caps.max_compute_workgroup_count[axis])
            .max(1)
    }

    /// Invocations per group of a reducing shader taking `fixed` bytes of shared memory and
    /// `per_invocation` more per invocation: [`REDUCE_GROUP`] or the largest power of two below
    /// it that the device's groups and shared memory hold.
    fn group(&self, fixed: usize, per_invocation: usize) -> u32 {
        let mut g = REDUCE_GROUP.min(self.flat);
        let shared = self.caps.max_shared_memory_bytes as usize;
        while g > 1 && fixed + per_invocation * g as usize > shared {
            g /= 2;
        }
        pow2_floor(g)
    }

    /// The specialization of a reducing shader (see [`Self::group`]).
    fn reducing(&self, fixed: usize, per_invocation: usize) -> Vec<(u32, SpecValue)> {
        let g = self.group(fixed, per_invocation);
        vec![(SPEC_LOCAL_X, SpecValue::U32(g))]
    }

    /// `stem`, or its half-weights variant.
    fn weighted(&self, stem: &str) -> String {
        if self.half {
            format!("{stem}_f16")
        } else {
            stem.to_string()
        }
    }

    /// The binding of the weights a dispatch reads, `(offset, len)` element ranges of the
    /// weights input, and the element its offsets count from: a slice from the first range's
    /// start (aligned down to [`SLICE_ALIGN`] bytes) to the last range's end, so no offset
    /// outgrows a `uint` and no binding one tensor's size, whatever the model's.
    fn weights(&self, ranges: &[(usize, usize)]) -> Result<(Binding, usize), Unsupported> {
        let input = self.graph.weights_input.ok_or_else(|| {
            Unsupported(format!(
                "{} has a step with weights but no weights input",
                self.problem.kernel.name
            ))
        })?;
        // In the storage's elements: halves, packed bytes, or floats.
        let align = SLICE_ALIGN
            / match (self.half, self.packed) {
                (true, _) => 2,
                (false, Some(_)) => 1,
                (false, None) => 4,
            };
        let lo = ranges.iter().map(|r| r.0).min().unwrap_or(0);
        let hi = ranges.iter().map(|r| r.0 + r.1).max().unwrap_or(0);
        let first = lo - lo % align;
        // Packed bytes are read as words: a slice ends on one (the layout pads every tensor to
        // 64 bytes, so the word is in the buffer).
        let len = if self.packed.is_some() {
            (hi - first).next_multiple_of(4)
        } else {
            hi - first
        };
        Ok((Binding::Slice { input, first, len }, first))
    }

    /// Refuses a step writing `what` outside the arena (graphs write only the arena).
    fn in_arena(&self, s: &Step, what: &str, r: Ref) -> Result<(), Unsupported> {
        if r.buf == Buf::Arena {
            Ok(())
        } else {
            Err(Unsupported(format!(
                "step {} of {} writes {what} outside the output buffer",
                s.name, self.problem.kernel.name
            )))
        }
    }

    fn words(&self, named: &[(&str, usize)]) -> Result<Vec<u32>, Unsupported> {
        words(self.problem, named)
    }
}

/// The recorded configuration: the shaders and how many dispatches each has.
fn config(graph: &LlmGraph, dispatches: &[Dispatch], dtype: Dtype) -> BTreeMap<String, String> {
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for d in dispatches {
        *count.entry(&d.shader).or_default() += 1;
    }
    let shaders = count
        .iter()
        .map(|(s, n)| format!("{s} ×{n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut c = BTreeMap::new();
    c.insert("shaders".into(), shaders);
    c.insert("dispatches".into(), dispatches.len().to_string());
    c.insert("steps".into(), graph.steps.len().to_string());
    // Steps an `llm_gemv_team` dispatch did beside its projection (norms, SwiGLUs, adds); a
    // split attention's merge is a dispatch of no step.
    let merges = count.get("llm_attention_merge").copied().unwrap_or(0);
    c.insert(
        "folded_steps".into(),
        (graph.steps.len() + merges - dispatches.len()).to_string(),
    );
    let weights = match dtype {
        Dtype::F32 => "f32",
        Dtype::F16 => "f16 (16-bit storage)",
        Dtype::Q8_0 => "q8_0 blocks (read as words), f32 norms",
        Dtype::Q4_0 => "q4_0 blocks (read as words), f32 norms",
    };
    c.insert("weights".into(), weights.into());
    let linear = if count.keys().any(|s| s.ends_with(COOPMAT_SUFFIX)) {
        let split = if matches!(dtype, Dtype::Q8_0 | Dtype::Q4_0) {
            "x and the dequantized weights split into two halves each"
        } else {
            "x split into two halves"
        };
        format!(
            "cooperative matrices (VK_NV_cooperative_matrix 16×16×16, {split}), \
             {COOPMAT_TILE_FEATURES} features × {COOPMAT_TILE_ROWS} rows per group"
        )
    } else {
        format!("{LINEAR_FEATURES} features × {LINEAR_ROWS} rows per group")
    };
    c.insert("linear".into(), linear);
    c
}
