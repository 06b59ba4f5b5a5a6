//! The graph of a whole model's prefill or decode ([`model_graph`]), with the arena laid out as the
//! module doc says.

use super::{BlockCheck, Cache, Config, Heads, LOGITS_STEP, LlmGraph, Op, Ref, Rows, Step};

/// Model inputs, in order.
const TOKENS: usize = 0;
const WEIGHTS: usize = 1;
const ROPE: usize = 2;
const PREFIX: usize = 3;

/// The timed work of an `llm` run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `prompt` tokens per sequence in one pass.
    Prefill {
        /// Tokens per sequence.
        prompt: usize,
    },
    /// `gen` passes of one token per sequence.
    Decode {
        /// Passes (the `gen` parameter).
        steps: usize,
    },
}

/// One decode pass of a [`model_graph`]: what a backend needs to record one pass and replay it
/// for the others. Passes differ only in their position (`Rows::pos0`, each one more than the
/// last), the offset of their tokens (the pass number) and, for kept passes, their region: a kept
/// pass's tensors are in its region, laid out as every other kept pass's (the same tensors at the
/// same offsets from its start), or in the work tensors every pass shares (the middle blocks'
/// layers), which no step reads before writing them in the same pass. A pass that is not kept
/// writes work tensors instead, so it may as well write the last pass's region, which the last
/// pass overwrites.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pass {
    /// The pass number (0 first).
    pub index: usize,
    /// Its steps.
    pub steps: std::ops::Range<usize>,
    /// Its tensors' arena elements, where it is kept for checking.
    pub region: Option<std::ops::Range<usize>>,
}

/// Hands out arena offsets.
struct Arena {
    len: usize,
}

impl Arena {
    fn take(&mut self, n: usize) -> Ref {
        let r = Ref::arena(self.len);
        self.len += n;
        r
    }
}

/// Where one block's tensors go.
#[derive(Clone, Copy)]
struct Slots {
    n1: Ref,
    qkv: Ref,
    q: Ref,
    attn: Ref,
    o: Ref,
    x1: Ref,
    n2: Ref,
    gu: Ref,
    h: Ref,
    down: Ref,
}

impl Slots {
    fn new(a: &mut Arena, c: &Config, rows: usize) -> Slots {
        Slots {
            n1: a.take(rows * c.dim),
            qkv: a.take(rows * c.qkv_dim()),
            q: a.take(rows * c.q_dim()),
            attn: a.take(rows * c.q_dim()),
            o: a.take(rows * c.dim),
            x1: a.take(rows * c.dim),
            n2: a.take(rows * c.dim),
            gu: a.take(rows * 2 * c.ffn),
            h: a.take(rows * c.ffn),
            down: a.take(rows * c.dim),
        }
    }
}

/// The tensors non-kept passes and blocks share.
struct Work {
    slots: Slots,
    x0: Ref,
    /// Block outputs, alternately.
    xb: [Ref; 2],
    norm: Ref,
    logits: Ref,
}

/// Builds the steps; `kept` says whether the pass's tensors stay for checking.
struct Builder<'a> {
    c: &'a Config,
    steps: Vec<Step>,
    blocks: Vec<BlockCheck>,
    caches: Vec<Cache>,
}

impl Builder<'_> {
    fn push(&mut self, name: String, op: Op, rows: Rows, x: Ref, out: Ref, check: bool) {
        self.steps.push(Step {
            name,
            op,
            rows,
            x,
            out,
            check,
        });
    }

    /// The steps of block `b` from `x` to `out` over `rows`; `slots` hold its layers, checked when
    /// `detailed`.
    #[allow(clippy::too_many_arguments)]
    fn block(
        &mut self,
        pass: &str,
        b: usize,
        rows: Rows,
        x: Ref,
        out: Ref,
        s: Slots,
        detailed: bool,
    ) {
        let c = *self.c;
        let w = c.block_weights(b);
        let heads = Heads::of(&c);
        let cache = self.caches[b];
        let d = c.dim;
        let n = |part: &str| format!("{pass}layers.{b}.{part}");
        let lin = |k, n, w| Op::Linear { k, n, w };
        let norm = |gamma| Op::RmsNorm {
            dim: d,
            gamma,
            in_stride: d,
        };
        let steps: [(String, Op, Ref, Ref); 11] = [
            (n("attention_norm"), norm(w.attn_norm), x, s.n1),
            (
                n("attention.wqkv"),
                lin(d, c.qkv_dim(), w.wqkv),
                s.n1,
                s.qkv,
            ),
            (
                n("attention.rope"),
                Op::Rope {
                    heads,
                    table: Ref::input(ROPE, 0),
                    positions: cache.cap,
                    cache,
                },
                s.qkv,
                s.q,
            ),
            (
                n("attention.sdpa"),
                Op::Attention { heads, cache },
                s.q,
                s.attn,
            ),
            (n("attention.wo"), lin(c.q_dim(), d, w.wo), s.attn, s.o),
            (
                n("attention.residual"),
                Op::Add { dim: d, other: x },
                s.o,
                s.x1,
            ),
            (n("ffn_norm"), norm(w.ffn_norm), s.x1, s.n2),
            (
                n("feed_forward.w_gate_up"),
                lin(d, 2 * c.ffn, w.w_gate_up),
                s.n2,
                s.gu,
            ),
            (
                n("feed_forward.swiglu"),
                Op::SwiGlu { ffn: c.ffn },
                s.gu,
                s.h,
            ),
            (n("feed_forward.w2"), lin(c.ffn, d, w.w_down), s.h, s.down),
            (
                n("feed_forward.residual"),
                Op::Add {
                    dim: d,
                    other: s.x1,
                },
                s.down,
                out,
            ),
        ];
        for (name, op, x, o) in steps {
            self.push(name, op, rows, x, o, detailed);
        }
    }
}

/// The graph of the model of shape `c`'s `phase` at `batch` sequences after `context` cached
/// positions. `kept_passes`: which decode passes keep their tensors for checking (every one for
/// tiny and small; the first, middle and last otherwise).
pub fn model_graph(c: &Config, phase: Phase, batch: usize, context: usize) -> LlmGraph {
    let c = *c;
    let (new, passes, per_seq) = match phase {
        Phase::Prefill { prompt } => (prompt, 1, prompt),
        Phase::Decode { steps } => (steps, steps, 1),
    };
    let cap = context + new;
    let kv = c.kv_dim();
    let mut arena = Arena { len: 0 };
    // The caches first: block b's keys then values.
    let caches: Vec<Cache> = (0..c.blocks)
        .map(|_| Cache {
            k: arena.take(batch * cap * kv),
            v: arena.take(batch * cap * kv),
            cap,
            batch,
        })
        .collect();
    let rows_per_pass = batch * per_seq;
    let kept = kept_passes(&c, passes);
    let mut b = Builder {
        c: &c,
        steps: Vec::new(),
        blocks: Vec::new(),
        caches: caches.clone(),
    };
    // The seeded prefix into the cache: one copy per block's keys and values.
    let len = context * batch * kv;
    if context > 0 {
        for (blk, cache) in caches.iter().enumerate() {
            for (i, (which, dst)) in [("k", cache.k), ("v", cache.v)].into_iter().enumerate() {
                b.push(
                    format!("layers.{blk}.cache.{which}"),
                    Op::Copy { len },
                    Rows {
                        rows: 1,
                        per_seq: 1,
                        pos0: 0,
                    },
                    Ref::input(PREFIX, (blk * 2 + i) * len),
                    dst,
                    true,
                );
            }
        }
    }
    let logit_rows = batch;
    let work = Work {
        slots: Slots::new(&mut arena, &c, rows_per_pass),
        x0: arena.take(rows_per_pass * c.dim),
        xb: [
            arena.take(rows_per_pass * c.dim),
            arena.take(rows_per_pass * c.dim),
        ],
        norm: arena.take(logit_rows * c.dim),
        logits: arena.take(logit_rows * c.vocab),
    };
    let mut pass_list = Vec::new();
    for s in 0..passes {
        let keep = kept.contains(&s);
        let (first_step, region_start) = (b.steps.len(), arena.len);
        // Whole blocks cost a row of every projection each: on three passes at most.
        let block_checked = keep && (passes <= 3 || s == 0 || s == passes / 2 || s + 1 == passes);
        let pass = if passes > 1 {
            format!("pass {s}: ")
        } else {
            String::new()
        };
        let rows = Rows {
            rows: rows_per_pass,
            per_seq,
            pos0: context + if passes > 1 { s } else { 0 },
        };
        let (tok_off, tok_stride) = match phase {
            Phase::Prefill { .. } => (0, 1),
            Phase::Decode { steps } => (s, steps),
        };
        let x0 = if keep {
            arena.take(rows_per_pass * c.dim)
        } else {
            work.x0
        };
        b.push(
            format!("{pass}tok_embeddings"),
            Op::Embed {
                dim: c.dim,
                vocab: c.vocab,
                table: c.embedding(),
                tok_stride,
            },
            rows,
            Ref::input(TOKENS, tok_off),
            x0,
            keep,
        );
        let mut x = x0;
        for (blk, &cache) in caches.iter().enumerate() {
            let detailed = keep && (blk == 0 || blk + 1 == c.blocks);
            let out = if keep {
                arena.take(rows_per_pass * c.dim)
            } else {
                work.xb[blk % 2]
            };
            let slots = if detailed {
                Slots::new(&mut arena, &c, rows_per_pass)
            } else {
                work.slots
            };
            b.block(&pass, blk, rows, x, out, slots, detailed);
            if block_checked && !detailed {
                b.blocks.push(BlockCheck {
                    name: format!("{pass}layers.{blk}"),
                    at: b.steps.len() - 1,
                    block: blk,
                    rows,
                    x,
                    out,
                    cache,
                });
            }
            x = out;
        }
        // The logits of each sequence's last row.
        let last = Rows {
            rows: batch,
            per_seq: 1,
            pos0: rows.pos0 + per_seq - 1,
        };
        let (norm, logits) = if keep {
            (
                arena.take(logit_rows * c.dim),
                arena.take(logit_rows * c.vocab),
            )
        } else {
            (work.norm, work.logits)
        };
        b.push(
            format!("{pass}norm"),
            Op::RmsNorm {
                dim: c.dim,
                gamma: c.final_norm(),
                in_stride: per_seq * c.dim,
            },
            last,
            x.at((per_seq - 1) * c.dim),
            norm,
            keep,
        );
        b.push(
            format!("{pass}{LOGITS_STEP}"),
            Op::Linear {
                k: c.dim,
                n: c.vocab,
                w: c.lm_head(),
            },
            last,
            norm,
            logits,
            keep,
        );
        if passes > 1 {
            pass_list.push(Pass {
                index: s,
                steps: first_step..b.steps.len(),
                region: keep.then_some(region_start..arena.len),
            });
        }
    }
    let sizes = model_sizes(&c, phase, batch, context);
    debug_assert_eq!(
        sizes.arena, arena.len as u128,
        "model_sizes and the layout disagree"
    );
    LlmGraph {
        config: c,
        steps: b.steps,
        blocks: b.blocks,
        input_lens: sizes.inputs.iter().map(|&n| n as usize).collect(),
        weights_input: Some(WEIGHTS),
        arena_len: arena.len,
        flops: sizes.flops,
        bytes_f32: sizes.bytes_f32,
        weight_bytes_f32: sizes.weight_bytes_f32,
        passes: pass_list,
    }
}

/// A model graph's sizes, computed without building it (in u128, so absurd parameters are sized
/// without overflow and refused for their footprint).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSizes {
    /// Elements of each input.
    pub inputs: Vec<u128>,
    /// Elements of the arena.
    pub arena: u128,
    /// FLOPs of one iteration.
    pub flops: f64,
    /// Bytes of one iteration, weights at 4 bytes.
    pub bytes_f32: f64,
    /// The weights' share of `bytes_f32`.
    pub weight_bytes_f32: f64,
}

/// Decode passes whose tensors are kept for checking, of `passes`.
fn kept_passes(c: &Config, passes: usize) -> Vec<usize> {
    if c.checks_every_position() || passes <= 3 {
        (0..passes).collect()
    } else {
        vec![0, passes / 2, passes - 1]
    }
}

/// The sizes of [`model_graph`]`(c, phase, batch, context)`.
pub fn model_sizes(c: &Config, phase: Phase, batch: usize, context: usize) -> ModelSizes {
    let w = |n: usize| n as u128;
    let (new, passes, per_seq) = match phase {
        Phase::Prefill { prompt } => (prompt, 1, prompt),
        Phase::Decode { steps } => (steps, steps, 1),
    };
    let kept = if c.checks_every_position() || passes <= 3 {
        w(passes)
    } else {
        3
    };
    let (b, d) = (w(batch), w(c.dim));
    let cap = w(context) + w(new);
    let kv = w(c.kv_dim());
    let rows = b * w(per_seq);
    let slot = rows * (5 * d + w(c.qkv_dim()) + 2 * w(c.q_dim()) + 3 * w(c.ffn));
    let logits = b * (d + w(c.vocab));
    let detailed = if c.blocks > 1 { 2 } else { 1 };
    let per_kept = rows * d * (1 + w(c.blocks)) + detailed * slot + logits;
    let work = slot + 3 * rows * d + logits;
    let arena = w(c.blocks) * 2 * cap * kv * b + work + kept * per_kept;
    let (flops, bytes_f32, weight_bytes_f32) = model_costs(c, phase, batch, context);
    ModelSizes {
        inputs: vec![
            b * w(new),
            w(c.weights_len()),
            cap * w(c.head_dim),
            // A device buffer cannot be empty: one unused element without a context.
            (w(c.blocks) * 2 * w(context) * b * kv).max(1),
        ],
        arena,
        flops,
        bytes_f32,
        weight_bytes_f32,
    }
}

/// FLOPs, bytes and the weights' bytes (f32) of a model's phase.
fn model_costs(c: &Config, phase: Phase, batch: usize, context: usize) -> (f64, f64, f64) {
    let (passes, per_seq) = match phase {
        Phase::Prefill { prompt } => (1, prompt),
        Phase::Decode { steps } => (steps, 1),
    };
    let rows = (batch * per_seq) as f64;
    let head = (c.vocab * c.dim) as f64;
    // Keys each query attends to, summed over one sequence's rows of every pass.
    let keys: f64 = (0..passes * per_seq)
        .map(|i| (context + i + 1) as f64)
        .sum();
    let attn = 4.0 * (c.q_dim() * c.blocks) as f64 * keys * batch as f64;
    let flops =
        2.0 * passes as f64 * (rows * c.block_macs_per_row() as f64 + batch as f64 * head) + attn;
    let weights = 4.0 * passes as f64 * c.weights_read_per_pass() as f64;
    // Keys and values read per query head group: once per row and kv head.
    let cache = 4.0 * 2.0 * (c.kv_dim() * c.blocks) as f64 * keys * batch as f64;
    let io = 4.0 * (passes as f64 * (rows + batch as f64 * c.vocab as f64));
    (flops, weights + cache + io, weights)
}
