//! The one-step graphs of the layer kernels (`gemv`, `rope`, `attention`, `swiglu`).

use super::{Buf, Cache, Heads, LlmGraph, LlmModel, Op, Ref, Rows, Step};

/// A layer kernel's one step (see `catalog/llm.rs` for each kernel's inputs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerKind {
    /// `gemv`: `rows` × `[n][k]`.
    Gemv {
        /// Rows of the input.
        rows: usize,
        /// Input width.
        k: usize,
        /// Output width.
        n: usize,
    },
    /// `rope`: `batch × tokens` rows of `[q | k | v]`, after `context` positions.
    Rope {
        /// Sequences.
        batch: usize,
        /// New positions per sequence.
        tokens: usize,
        /// Positions before.
        context: usize,
        /// The heads.
        heads: Heads,
    },
    /// `attention`: `batch × tokens` queries after `context` positions, over a full cache.
    Attention {
        /// Sequences.
        batch: usize,
        /// Queries per sequence.
        tokens: usize,
        /// Positions before.
        context: usize,
        /// The heads.
        heads: Heads,
    },
    /// `swiglu`: `rows` × `[gate | up]` of `ffn` each.
    SwiGlu {
        /// Rows.
        rows: usize,
        /// Hidden width.
        ffn: usize,
    },
}

/// The one-step graph of a layer kernel.
pub fn layer_graph(kind: LayerKind) -> LlmGraph {
    let mut config = LlmModel::Tiny.config();
    let (step, input_lens, weights_input, arena_len, flops, bytes, wbytes) = match kind {
        LayerKind::Gemv { rows, k, n } => {
            let r = Rows {
                rows,
                per_seq: rows,
                pos0: 0,
            };
            let w = (k * n) as f64 * 4.0;
            (
                step("gemv", Op::Linear { k, n, w: 0 }, r, 0, Ref::arena(0)),
                vec![rows * k, k * n],
                Some(1),
                rows * n,
                2.0 * (rows * k * n) as f64,
                w + 4.0 * (rows * (k + n)) as f64,
                w,
            )
        }
        LayerKind::Rope {
            batch,
            tokens,
            context,
            heads,
        } => {
            let cap = context + tokens;
            let rows = batch * tokens;
            let kv = batch * cap * heads.kv_dim();
            let q = rows * heads.q_dim();
            let cache = Cache {
                k: Ref::arena(q),
                v: Ref::arena(q + kv),
                cap,
                batch,
            };
            let op = Op::Rope {
                heads,
                table: Ref::input(1, 0),
                positions: cap,
                cache,
            };
            let r = Rows {
                rows,
                per_seq: tokens,
                pos0: context,
            };
            let width = heads.q_dim() + 2 * heads.kv_dim();
            (
                step("rope", op, r, 0, Ref::arena(0)),
                vec![rows * width, cap * heads.head_dim],
                None,
                q + 2 * kv,
                3.0 * (rows * (heads.q_dim() + heads.kv_dim())) as f64,
                8.0 * (rows * width) as f64,
                0.0,
            )
        }
        LayerKind::Attention {
            batch,
            tokens,
            context,
            heads,
        } => {
            let cap = context + tokens;
            let rows = batch * tokens;
            let cache = Cache {
                k: Ref::input(1, 0),
                v: Ref::input(2, 0),
                cap,
                batch,
            };
            let r = Rows {
                rows,
                per_seq: tokens,
                pos0: context,
            };
            let keys: f64 =
                (0..tokens).map(|i| (context + i + 1) as f64).sum::<f64>() * batch as f64;
            let kv = batch * cap * heads.kv_dim();
            (
                step(
                    "attention",
                    Op::Attention { heads, cache },
                    r,
                    0,
                    Ref::arena(0),
                ),
                vec![rows * heads.q_dim(), kv, kv],
                None,
                rows * heads.q_dim(),
                4.0 * heads.q_dim() as f64 * keys,
                4.0 * (2 * rows * heads.q_dim() + 2 * kv) as f64,
                0.0,
            )
        }
        LayerKind::SwiGlu { rows, ffn } => {
            let r = Rows {
                rows,
                per_seq: rows,
                pos0: 0,
            };
            (
                step("swiglu", Op::SwiGlu { ffn }, r, 0, Ref::arena(0)),
                vec![rows * 2 * ffn],
                None,
                rows * ffn,
                6.0 * (rows * ffn) as f64,
                12.0 * (rows * ffn) as f64,
                0.0,
            )
        }
    };
    if let Op::Rope { heads, .. } | Op::Attention { heads, .. } = step.op {
        config.heads = heads.heads;
        config.kv_heads = heads.kv_heads;
        config.head_dim = heads.head_dim;
    }
    LlmGraph {
        config,
        steps: vec![step],
        blocks: Vec::new(),
        input_lens,
        weights_input,
        arena_len,
        flops,
        bytes_f32: bytes,
        weight_bytes_f32: wbytes,
        passes: Vec::new(),
    }
}

fn step(name: &str, op: Op, rows: Rows, input: usize, out: Ref) -> Step {
    Step {
        name: name.into(),
        op,
        rows,
        x: Ref {
            buf: Buf::Input(input),
            off: 0,
        },
        out,
        check: true,
    }
}
