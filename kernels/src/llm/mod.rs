//! Transformer inference: a Llama-style decoder (`llm`) and its layers one at a time (`rope`,
//! `attention`, `swiglu`, `gemv`), all run as an [`LlmGraph`]: a list of [`Step`]s every backend
//! executes in order, each reading and writing tensors at fixed element offsets.
//!
//! The model: token embedding, `blocks` × (RMSNorm → fused Q/K/V projection → RoPE (writing the new
//! keys and values into the KV cache) → causal grouped-query attention over the cache → output
//! projection → residual add → RMSNorm → fused gate/up projection → SwiGLU → down projection →
//! residual add), final RMSNorm, LM head (the embedding, transposed, when tied). Weights are
//! PyTorch's layout (`[out][in]` per projection), seeded where the run happens.
//!
//! Buffers. Every tensor is addressed as a [`Ref`]: an input of the problem or the *arena* (the
//! problem's output buffer), and an offset in elements. The model's inputs are the token ids (f32,
//! exact below 2^24), the weights (the one input stored as f16 when the dtype is f16), the RoPE
//! table (`cos` then `sin`, `[positions][head_dim/2]` each, computed in f64 and rounded) and the
//! seeded KV-cache prefix (the `context` positions cached before the timed work, `[blocks][k|v]
//! [context][batch][kv_dim]`). The arena holds the KV cache (`[blocks][k|v][cap][batch][kv_dim]`),
//! then every tensor a check reads (the layers of the first and last block, every block's output,
//! the logits) for the *kept* passes, then a work area that the other passes and blocks reuse.
//! Validation (`check/llm.rs`) reads only what stays: each checked step's output, from the
//! backend's own inputs to that step.
//!
//! A pass is the work of one set of rows: prefill runs one pass of `batch × prompt` rows (row
//! `r` is sequence `r / prompt`, position `context + r % prompt`); decode runs `gen` passes of
//! `batch` rows, pass `s` at position `context + s`, each reading the cache every earlier pass
//! wrote. An iteration starts by copying the seeded prefix into the cache, so every iteration does
//! the same work on the same data.

mod build;
mod hf_config;
mod layers;
mod packed;
mod reference;
mod shape;
mod weights;

pub use build::{ModelSizes, Pass, Phase, model_graph, model_sizes};
pub use hf_config::{read_shape_params, shape_params};
pub use layers::{LayerKind, layer_graph};
pub use packed::{ALIGN, PackedLayout, PackedMatrix, Weights};
pub use reference::{Tensors, block_row, check_width, output_index, step_element};
pub use shape::{
    BlockWeights, CUSTOM_MODEL, Config, Draw, LlmModel, MODEL_ALIASES, MODEL_NAMES, SHAPE_PARAMS,
    WeightTensor, check_heads, weight_tensors,
};
pub use weights::{
    half_words, model_inputs, model_weights, model_weights_half, model_weights_packed, projection,
    projection_packed, rope_table, tokens, weight_scale_bits,
};

/// Which buffer a tensor lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Buf {
    /// Input `i` of the problem.
    Input(usize),
    /// The output buffer.
    Arena,
}

/// A tensor: its buffer and its offset there, in elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ref {
    /// Which buffer.
    pub buf: Buf,
    /// Offset in elements.
    pub off: usize,
}

impl Ref {
    /// Offset `off` of the arena.
    pub fn arena(off: usize) -> Ref {
        Ref {
            buf: Buf::Arena,
            off,
        }
    }

    /// Offset `off` of input `i`.
    pub fn input(i: usize, off: usize) -> Ref {
        Ref {
            buf: Buf::Input(i),
            off,
        }
    }

    /// `n` elements further.
    pub fn at(self, n: usize) -> Ref {
        Ref {
            buf: self.buf,
            off: self.off + n,
        }
    }
}

/// A KV cache: keys and values, each `[cap][batch][kv_dim]` (position-major, so the seeded
/// prefix of every sequence is one contiguous copy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cache {
    /// The keys.
    pub k: Ref,
    /// The values.
    pub v: Ref,
    /// Positions per sequence.
    pub cap: usize,
    /// Sequences.
    pub batch: usize,
}

impl Cache {
    /// Offset of sequence `seq`'s key (or value) at position `pos`, from the start of the keys (or
    /// values), for keys `kv_dim` wide.
    pub fn index(&self, seq: usize, pos: usize, kv_dim: usize) -> usize {
        (pos * self.batch + seq) * kv_dim
    }
}

/// The rows a step works on: row `r` is sequence `r / per_seq` at position `pos0 + r % per_seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rows {
    /// Rows of the step.
    pub rows: usize,
    /// Consecutive rows of one sequence.
    pub per_seq: usize,
    /// Position of each sequence's first row.
    pub pos0: usize,
}

impl Rows {
    /// Sequence and position of row `r`.
    pub fn of(&self, r: usize) -> (usize, usize) {
        (r / self.per_seq, self.pos0 + r % self.per_seq)
    }
}

/// Attention heads: `heads` queries share `kv_heads` key/value heads of `head_dim`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Heads {
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Width of a head.
    pub head_dim: usize,
}

impl Heads {
    /// Of a model.
    pub fn of(c: &Config) -> Heads {
        Heads {
            heads: c.heads,
            kv_heads: c.kv_heads,
            head_dim: c.head_dim,
        }
    }

    /// Width of the queries (and of the attention's output).
    pub fn q_dim(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Width of the keys.
    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// The key/value head query head `h` reads.
    pub fn kv_head(&self, h: usize) -> usize {
        h / (self.heads / self.kv_heads).max(1)
    }

    /// The softmax scale, `1/√head_dim`.
    pub fn scale(&self) -> f64 {
        1.0 / (self.head_dim as f64).sqrt()
    }
}

/// What a step computes. `x` and `out` of the [`Step`] are its input and output; weights are
/// offsets in the weights input.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    /// `out[r] = embedding[token r]`, `dim` wide; token `r` is `tokens[r·tok_stride]` (`x` is the
    /// token ids).
    Embed {
        /// Width.
        dim: usize,
        /// Rows of the table (a token id outside is clamped to the last).
        vocab: usize,
        /// Offset of the table in the weights.
        table: usize,
        /// Elements between consecutive rows' token ids.
        tok_stride: usize,
    },
    /// `out[r] = x[r] / rms(x[r]) · gamma`; row `r` of `x` starts at `r · in_stride`.
    RmsNorm {
        /// Width.
        dim: usize,
        /// Offset of the gains in the weights.
        gamma: usize,
        /// Elements between consecutive input rows (`dim`, or more to read one row per
        /// sequence).
        in_stride: usize,
    },
    /// `out[r][j] = Σ_i x[r][i] · W[j][i]`, `W` `[n][k]` (PyTorch's `nn.Linear` without bias).
    Linear {
        /// Input width.
        k: usize,
        /// Output width.
        n: usize,
        /// Offset of `W` in the weights.
        w: usize,
    },
    /// RoPE (rotate-half pairs `i`, `i + head_dim/2`) on the queries and keys of `x`
    /// (`[rows][q | k | v]`): the queries to `out`, the keys and values to the cache at each row's
    /// sequence and position.
    Rope {
        /// The heads.
        heads: Heads,
        /// `cos` then `sin`, each `[positions][head_dim/2]`.
        table: Ref,
        /// Positions of the table.
        positions: usize,
        /// Where the keys and values go.
        cache: Cache,
    },
    /// Causal attention of the queries `x` (`[rows][q_dim]`) over the cache: row `r` at position
    /// `p` attends to its sequence's positions `0..=p`.
    Attention {
        /// The heads.
        heads: Heads,
        /// The keys and values.
        cache: Cache,
    },
    /// `out[r][i] = silu(x[r][i]) · x[r][ffn + i]` (`x` is `[rows][gate | up]`).
    SwiGlu {
        /// Hidden width.
        ffn: usize,
    },
    /// `out = x + other`, `dim` wide.
    Add {
        /// Width.
        dim: usize,
        /// The other addend.
        other: Ref,
    },
    /// Copies `len` elements of `x` to `out` (the seeded KV-cache prefix into the cache).
    Copy {
        /// Elements.
        len: usize,
    },
}

impl Op {
    /// Short kind name (`rmsnorm`, `linear`, `attention`).
    pub fn kind(&self) -> &'static str {
        match self {
            Op::Embed { .. } => "embed",
            Op::RmsNorm { .. } => "rmsnorm",
            Op::Linear { .. } => "linear",
            Op::Rope { .. } => "rope",
            Op::Attention { .. } => "attention",
            Op::SwiGlu { .. } => "swiglu",
            Op::Add { .. } => "add",
            Op::Copy { .. } => "copy",
        }
    }

    /// Elements of one output row (of the whole output for `Copy`, which has one row).
    pub fn out_width(&self) -> usize {
        match *self {
            Op::Embed { dim, .. } | Op::RmsNorm { dim, .. } | Op::Add { dim, .. } => dim,
            Op::Linear { n, .. } => n,
            Op::Rope { heads, .. } | Op::Attention { heads, .. } => heads.q_dim(),
            Op::SwiGlu { ffn } => ffn,
            Op::Copy { len } => len,
        }
    }

    /// Elements of one input row.
    pub fn in_width(&self) -> usize {
        match *self {
            Op::Embed { .. } => 1,
            Op::RmsNorm { dim, .. } | Op::Add { dim, .. } => dim,
            Op::Linear { k, .. } => k,
            Op::Rope { heads, .. } => heads.q_dim() + 2 * heads.kv_dim(),
            Op::Attention { heads, .. } => heads.q_dim(),
            Op::SwiGlu { ffn } => 2 * ffn,
            Op::Copy { len } => len,
        }
    }
}

/// One step of a graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Name, PyTorch-like (`layers.0.attention.wqkv`, `norm`, `output`), with the pass
    /// (`pass 3: layers.15.feed_forward.w2`) when there are several.
    pub name: String,
    /// What it computes.
    pub op: Op,
    /// Its rows.
    pub rows: Rows,
    /// Its input.
    pub x: Ref,
    /// Its output, `rows × out_width` elements.
    pub out: Ref,
    /// Whether its output stays in the arena to be checked (not overwritten by a later step).
    pub check: bool,
}

/// A whole block checked at once, from the backend's own input to the block: the check for the
/// blocks whose layers are not kept one by one.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockCheck {
    /// Name (`pass 0: layers.7`).
    pub name: String,
    /// Index of the block's last step: the check comes right after that step's.
    pub at: usize,
    /// Which block.
    pub block: usize,
    /// Its rows.
    pub rows: Rows,
    /// The block's input, `rows × dim`.
    pub x: Ref,
    /// The block's output, `rows × dim`.
    pub out: Ref,
    /// The block's KV cache.
    pub cache: Cache,
}

/// The steps of a model or of one layer, the buffers they need and what validation reads.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmGraph {
    /// The model's shape (a layer kernel's: only the fields its step uses are meaningful).
    pub config: Config,
    /// Steps of one iteration, in order.
    pub steps: Vec<Step>,
    /// Blocks checked as a whole.
    pub blocks: Vec<BlockCheck>,
    /// Elements of each input.
    pub input_lens: Vec<usize>,
    /// Which input holds the weights (stored as f16 in the f16 dtype), if any.
    pub weights_input: Option<usize>,
    /// Elements of the arena.
    pub arena_len: usize,
    /// Floating-point operations of one iteration.
    pub flops: f64,
    /// Bytes one iteration must read or write at least (weights once per pass, the cache, the
    /// tokens and the logits), with the weights at 4 bytes an element.
    pub bytes_f32: f64,
    /// The weights' share of `bytes_f32` (halved in f16).
    pub weight_bytes_f32: f64,
    /// A decode's passes, in order (empty for a single step or a prefill's one pass).
    pub passes: Vec<Pass>,
}

/// The name of the LM head's step (with its pass, `pass 2: output`, when there are several).
pub const LOGITS_STEP: &str = "output";

impl Step {
    /// Whether this is the LM head, whose output is the logits (every row of them is checked).
    pub fn is_logits(&self) -> bool {
        self.name
            .rsplit(": ")
            .next()
            .is_some_and(|n| n == LOGITS_STEP)
    }
}

impl LlmGraph {
    /// The step called `name`.
    pub fn step(&self, name: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.name == name)
    }
}

/// Debug switch, set per run on an agent with debug kernels enabled
/// (`--env GPUFLEET_DEBUG_PERTURB_LAYER=layers.0.feed_forward.w_gate_up`): the backend gets that
/// projection's weights scaled by [`crate::model::PERTURB_FACTOR`] while validation keeps the true
/// ones. The same variable as the CNNs'.
pub use crate::model::{PERTURB_ENV, PERTURB_FACTOR};

/// Scales the weights of the step called `name` (a projection, a norm or the embedding; without
/// its pass prefix) by [`PERTURB_FACTOR`]: in f32 weights each weight, in half ones each weight
/// rounded to fp16, in packed ones (`format`'s [`PackedLayout`] of the graph) a matrix's block
/// scales or a norm's gains.
///
/// # Errors
/// A name that is no step with weights, with some that are; weights the graph's layout does not
/// hold.
pub fn perturb(
    graph: &LlmGraph,
    weights: &mut crate::Buffer,
    format: Option<crate::quant::BlockFormat>,
    name: &str,
) -> Result<(), String> {
    let bare = |s: &Step| s.name.rsplit(": ").next().unwrap_or("").to_string();
    let range = |op: &Op| match *op {
        Op::Embed {
            dim, vocab, table, ..
        } => Some(table..table + dim * vocab),
        Op::RmsNorm { dim, gamma, .. } => Some(gamma..gamma + dim),
        Op::Linear { k, n, w } => Some(w..w + k * n),
        _ => None,
    };
    let found = graph
        .steps
        .iter()
        .find(|s| bare(s) == name)
        .and_then(|s| range(&s.op));
    let Some(r) = found else {
        let mut names: Vec<String> = graph
            .steps
            .iter()
            .filter(|s| range(&s.op).is_some())
            .map(bare)
            .collect();
        names.dedup();
        let shown = names.iter().take(6).cloned().collect::<Vec<_>>().join(", ");
        return Err(format!(
            "{PERTURB_ENV}: no step {} with weights in this model (some that have: {shown}, … {} in all)",
            crate::error::quote(name),
            names.len()
        ));
    };
    let scaled = match (weights, format) {
        (crate::Buffer::F32(w), None) => w.get_mut(r.clone()).map(|w| {
            for v in w {
                *v *= PERTURB_FACTOR;
            }
        }),
        (crate::Buffer::Half(w), None) => w.get_mut(r.clone()).map(|w| {
            for v in w {
                let x = half::f16::from_bits(*v).to_f32() * PERTURB_FACTOR;
                *v = half::f16::from_f32(x).to_bits();
            }
        }),
        (crate::Buffer::Packed(buf), Some(f)) => PackedLayout::of(graph, f)
            .scale(buf, r.start, PERTURB_FACTOR)
            .then_some(()),
        _ => None,
    };
    scaled.ok_or_else(|| {
        format!(
            "{PERTURB_ENV}: the weights of {} are not where this model's layout puts them",
            crate::error::quote(name)
        )
    })
}

#[cfg(test)]
mod tests;
