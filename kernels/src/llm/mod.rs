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
mod layers;
mod reference;
mod weights;

pub use build::{ModelSizes, Pass, Phase, model_graph, model_sizes};
pub use layers::{LayerKind, layer_graph};
pub use reference::{Tensors, block_row, check_width, output_index, step_element};
pub use weights::{model_inputs, model_weights, rope_table, tokens, weight_scale_bits};

/// A named model shape (the `model` parameter of `llm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LlmModel {
    /// dim 256, 4 blocks, 8 / 4 heads, FFN 688, vocab 4,096: seconds on a CPU, for CI.
    Tiny,
    /// dim 768, 12 blocks, 12 / 4 heads, FFN 2,048, vocab 32,000.
    Small,
    /// The Llama-3.2-1B shape: dim 2,048, 16 blocks, 32 / 8 heads, FFN 8,192, vocab 128,256, tied.
    B1,
    /// The Llama-3-8B (and Llama-3.1-8B) shape: dim 4,096, 32 blocks, 32 / 8 heads, FFN 14,336,
    /// vocab 128,256.
    B8,
    /// Llama-3.2-3B: dim 3,072, 28 blocks, 24 / 8 heads, FFN 8,192, vocab 128,256, tied.
    B3,
    /// Qwen2.5-7B without its q/k/v biases: dim 3,584, 28 blocks, 28 / 4 heads, FFN 18,944, vocab
    /// 152,064, RoPE θ 10⁶.
    Qwen7b,
    /// Mistral-7B-v0.1: dim 4,096, 32 blocks, 32 / 8 heads, FFN 14,336, vocab 32,000.
    Mistral7b,
}

/// The names of [`LlmModel`]s, in the order of the `model` parameter's values.
pub const MODEL_NAMES: &[&str] = &[
    "tiny",
    "small",
    "1b",
    "8b",
    "llama-3.2-3b",
    "qwen2.5-7b",
    "mistral-7b",
];

/// Other names of some [`LlmModel`]s (the published models' own), with their indices.
pub const MODEL_ALIASES: &[(&str, i64)] = &[("llama-3.2-1b", 2), ("llama-3.1-8b", 3)];

impl LlmModel {
    /// Every model, in [`MODEL_NAMES`] order.
    pub const ALL: [LlmModel; 7] = [
        LlmModel::Tiny,
        LlmModel::Small,
        LlmModel::B1,
        LlmModel::B8,
        LlmModel::B3,
        LlmModel::Qwen7b,
        LlmModel::Mistral7b,
    ];

    /// The model of parameter value `v` (an index into [`MODEL_NAMES`]).
    pub fn from_index(v: i64) -> Option<LlmModel> {
        usize::try_from(v)
            .ok()
            .and_then(|i| Self::ALL.get(i).copied())
    }

    /// The model called `name`, one of [`MODEL_NAMES`] or [`MODEL_ALIASES`].
    pub fn parse(name: &str) -> Option<LlmModel> {
        let name = name.trim();
        let i = MODEL_NAMES
            .iter()
            .position(|n| *n == name)
            .map(|i| i as i64)
            .or_else(|| MODEL_ALIASES.iter().find(|(n, _)| *n == name).map(|a| a.1))?;
        Self::from_index(i)
    }

    /// Its name (`tiny`, `1b`).
    pub fn name(self) -> &'static str {
        MODEL_NAMES[self as usize]
    }

    /// Its shape.
    pub fn config(self) -> Config {
        let c = |dim, blocks, heads, kv_heads, ffn, vocab, tied, rope_theta| Config {
            dim,
            blocks,
            heads,
            kv_heads,
            head_dim: dim / heads,
            ffn,
            vocab,
            tied,
            rope_theta,
        };
        match self {
            LlmModel::Tiny => c(256, 4, 8, 4, 688, 4096, true, 10_000.0),
            LlmModel::Small => c(768, 12, 12, 4, 2048, 32_000, true, 10_000.0),
            LlmModel::B1 => c(2048, 16, 32, 8, 8192, 128_256, true, 500_000.0),
            LlmModel::B8 => c(4096, 32, 32, 8, 14_336, 128_256, false, 500_000.0),
            LlmModel::B3 => c(3072, 28, 24, 8, 8192, 128_256, true, 500_000.0),
            LlmModel::Qwen7b => c(3584, 28, 28, 4, 18_944, 152_064, false, 1_000_000.0),
            LlmModel::Mistral7b => c(4096, 32, 32, 8, 14_336, 32_000, false, 10_000.0),
        }
    }

    /// Whether every pass and every timed position is validated (tiny, small) rather than a sample
    /// of them (the published shapes).
    pub fn checks_every_position(self) -> bool {
        matches!(self, LlmModel::Tiny | LlmModel::Small)
    }
}

/// A model's shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    /// Model width.
    pub dim: usize,
    /// Decoder blocks.
    pub blocks: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention: `heads / kv_heads` queries share one).
    pub kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Hidden width of the MLP.
    pub ffn: usize,
    /// Vocabulary.
    pub vocab: usize,
    /// Whether the LM head is the embedding (Llama 3.2 1B) or its own matrix (Llama 3 8B).
    pub tied: bool,
    /// RoPE base.
    pub rope_theta: f64,
}

impl Config {
    /// Width of the fused Q/K/V projection's output.
    pub fn qkv_dim(&self) -> usize {
        (self.heads + 2 * self.kv_heads) * self.head_dim
    }

    /// Width of the keys (and of the values) of one position.
    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// Width of the attention's output.
    pub fn q_dim(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Weights of one block, in elements: two norms and four projections.
    pub fn block_len(&self) -> usize {
        let d = self.dim;
        2 * d + self.qkv_dim() * d + d * self.q_dim() + 2 * self.ffn * d + d * self.ffn
    }

    /// Elements of the weights buffer: the blocks, the final norm, the embedding and, untied, the
    /// LM head.
    pub fn weights_len(&self) -> usize {
        let head = if self.tied { 0 } else { self.vocab * self.dim };
        self.blocks * self.block_len() + self.dim + self.vocab * self.dim + head
    }

    /// Weights read by one decode pass (everything but the embedding's unread rows).
    pub fn weights_read_per_pass(&self) -> usize {
        let head = self.vocab * self.dim;
        self.blocks * self.block_len() + self.dim + head
    }

    /// Multiply-adds of the projections for one row through every block.
    pub fn block_macs_per_row(&self) -> usize {
        let d = self.dim;
        self.blocks * (self.qkv_dim() * d + d * self.q_dim() + 3 * self.ffn * d)
    }

    /// Where block `b`'s weights start, and where each of its parts starts.
    pub fn block_weights(&self, b: usize) -> BlockWeights {
        let d = self.dim;
        let at = b * self.block_len();
        let attn_norm = at;
        let wqkv = attn_norm + d;
        let wo = wqkv + self.qkv_dim() * d;
        let ffn_norm = wo + d * self.q_dim();
        let w_gate_up = ffn_norm + d;
        let w_down = w_gate_up + 2 * self.ffn * d;
        BlockWeights {
            attn_norm,
            wqkv,
            wo,
            ffn_norm,
            w_gate_up,
            w_down,
        }
    }

    /// The final norm's offset.
    pub fn final_norm(&self) -> usize {
        self.blocks * self.block_len()
    }

    /// The embedding's offset (`[vocab][dim]`).
    pub fn embedding(&self) -> usize {
        self.final_norm() + self.dim
    }

    /// The LM head's offset (`[vocab][dim]`): the embedding when tied.
    pub fn lm_head(&self) -> usize {
        if self.tied {
            self.embedding()
        } else {
            self.embedding() + self.vocab * self.dim
        }
    }
}

/// Offsets of one block's weights in the weights buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockWeights {
    /// RMSNorm gains before attention, `[dim]`.
    pub attn_norm: usize,
    /// Q, K then V projections, `[qkv_dim][dim]`.
    pub wqkv: usize,
    /// Output projection, `[dim][q_dim]`.
    pub wo: usize,
    /// RMSNorm gains before the MLP, `[dim]`.
    pub ffn_norm: usize,
    /// Gate then up projections, `[2·ffn][dim]`.
    pub w_gate_up: usize,
    /// Down projection, `[dim][ffn]`.
    pub w_down: usize,
}

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
/// its pass prefix) by [`PERTURB_FACTOR`].
///
/// # Errors
/// A name that is no step with weights, with some that are.
pub fn perturb(graph: &LlmGraph, weights: &mut [f32], name: &str) -> Result<(), String> {
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
    for v in &mut weights[r] {
        *v *= PERTURB_FACTOR;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
