//! The model shapes: the named ones of the `model` parameter ([`LlmModel`]), a shape's
//! dimensions ([`Config`]) and where a block's weights lie ([`BlockWeights`]).

/// A named model shape (the `model` parameter of `llm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LlmModel {
    /// dim 256, 4 blocks, 8 / 4 heads, FFN 704 (whole blocks of 32 for q8_0 / q4_0), vocab 4,096:
    /// seconds on a CPU, for CI.
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
    "custom",
];

/// The index of `custom` in [`MODEL_NAMES`]: a shape given whole by the [`SHAPE_PARAMS`].
pub const CUSTOM_MODEL: i64 = 7;

/// The `llm` parameters that give a shape's dimensions one by one, each 0 for the named model's
/// (`tied`: 0 the model's, 1 tied, 2 an own LM head).
pub const SHAPE_PARAMS: [&str; 9] = [
    "dim",
    "layers",
    "heads",
    "kv_heads",
    "head_dim",
    "ffn",
    "vocab",
    "rope_theta",
    "tied",
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
            LlmModel::Tiny => c(256, 4, 8, 4, 704, 4096, true, 10_000.0),
            LlmModel::Small => c(768, 12, 12, 4, 2048, 32_000, true, 10_000.0),
            LlmModel::B1 => c(2048, 16, 32, 8, 8192, 128_256, true, 500_000.0),
            LlmModel::B8 => c(4096, 32, 32, 8, 14_336, 128_256, false, 500_000.0),
            LlmModel::B3 => c(3072, 28, 24, 8, 8192, 128_256, true, 500_000.0),
            LlmModel::Qwen7b => c(3584, 28, 28, 4, 18_944, 152_064, false, 1_000_000.0),
            LlmModel::Mistral7b => c(4096, 32, 32, 8, 14_336, 32_000, false, 10_000.0),
        }
    }
}

/// Heads that grouped-query attention and RoPE can take: `kv_heads` dividing `heads`, an even
/// `head_dim` (a model's shape, and the `rope` and `attention` kernels' parameters).
///
/// # Errors
/// Either rule broken, naming the parameters.
pub fn check_heads(heads: usize, kv_heads: usize, head_dim: usize) -> Result<(), String> {
    if !heads.is_multiple_of(kv_heads) {
        return Err(format!(
            "kv_heads={kv_heads} must divide heads={heads} (each key/value head serves heads/kv_heads queries)"
        ));
    }
    if !head_dim.is_multiple_of(2) {
        return Err(format!(
            "head_dim={head_dim} must be even (RoPE turns pairs)"
        ));
    }
    Ok(())
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
    /// The shape of an `llm` problem whose parameter `name` has value `param(name)`: the named
    /// `model`'s, each of [`SHAPE_PARAMS`] that is not 0 in its place. `model=custom` takes them all
    /// from the parameters: `dim`, `layers`, `heads`, `ffn` and `vocab` must be given; `kv_heads`
    /// defaults to `heads`, `head_dim` to `dim / heads`, `rope_theta` to 10,000, the LM head to an
    /// own one (as Hugging Face's `LlamaConfig` does).
    ///
    /// # Errors
    /// A parameter `custom` needs left out, or dimensions that do not fit together, naming them.
    pub fn from_params(param: impl Fn(&str) -> i64) -> Result<Config, String> {
        let model = param("model");
        let base = match LlmModel::from_index(model) {
            Some(m) => m.config(),
            None if model == CUSTOM_MODEL => {
                let missing: Vec<&str> = ["dim", "layers", "heads", "ffn", "vocab"]
                    .into_iter()
                    .filter(|n| param(n) == 0)
                    .collect();
                if !missing.is_empty() {
                    return Err(format!(
                        "model=custom needs {} (a Hugging Face config.json gives them)",
                        missing.join(", ")
                    ));
                }
                Config {
                    dim: 0,
                    blocks: 0,
                    heads: 0,
                    kv_heads: 0,
                    head_dim: 0,
                    ffn: 0,
                    vocab: 0,
                    tied: false,
                    rope_theta: 10_000.0,
                }
            }
            None => return Err(format!("model={model} names no model")),
        };
        let given = |name: &str, fallback: usize| match usize::try_from(param(name)) {
            Ok(0) | Err(_) => fallback,
            Ok(v) => v,
        };
        let dim = given("dim", base.dim);
        let heads = given("heads", base.heads);
        let changed = dim != base.dim || heads != base.heads;
        let head_dim = match (param("head_dim"), changed) {
            (0, true) if !dim.is_multiple_of(heads) => {
                return Err(format!(
                    "dim={dim} is not a multiple of heads={heads}: give head_dim"
                ));
            }
            (0, true) => dim / heads,
            _ => given("head_dim", base.head_dim),
        };
        let c = Config {
            dim,
            blocks: given("layers", base.blocks),
            heads,
            kv_heads: match param("kv_heads") {
                0 if model == CUSTOM_MODEL => heads,
                _ => given("kv_heads", base.kv_heads),
            },
            head_dim,
            ffn: given("ffn", base.ffn),
            vocab: given("vocab", base.vocab),
            tied: match param("tied") {
                1 => true,
                2 => false,
                _ => base.tied,
            },
            rope_theta: match param("rope_theta") {
                0 => base.rope_theta,
                t => t as f64,
            },
        };
        check_heads(c.heads, c.kv_heads, c.head_dim)?;
        Ok(c)
    }

    /// Whether every pass and every timed position is validated (a shape of `small`'s weights or
    /// fewer) rather than a sample of them (the published shapes).
    pub fn checks_every_position(&self) -> bool {
        self.weights_len() <= LlmModel::Small.config().weights_len()
    }

    /// The widths a quantized row runs along (`dim`, the attention's output, `ffn`), each a
    /// multiple of [`QK`](crate::quant::QK) for q8_0 / q4_0.
    pub fn row_widths(&self) -> [(&'static str, usize); 3] {
        [
            ("dim", self.dim),
            ("heads·head_dim", self.q_dim()),
            ("ffn", self.ffn),
        ]
    }

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

    /// Bytes of the weights stored in `dtype`, as a model file holds them: quantized, the matrices
    /// in blocks and the norms in f32 (llama-bench's size).
    pub fn stored_bytes(&self, dtype: crate::Dtype) -> u128 {
        let norms = ((2 * self.blocks + 1) * self.dim) as u128;
        let all = self.weights_len() as u128;
        match dtype.block_format() {
            Some(_) => 4 * norms + dtype.storage_bytes(all - norms),
            None => dtype.storage_bytes(all),
        }
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

/// What one tensor of the weights holds (`weights.rs` says how each is drawn).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Draw {
    /// A norm's gains.
    Gains,
    /// A projection with fan-in `fan_in` (its rows' length) whose bound is divided by `shrink`.
    Projection {
        /// Weights a row.
        fan_in: usize,
        /// Divides the He-like bound.
        shrink: f64,
    },
    /// The token embedding, `[vocab][dim]`.
    Embedding,
}

/// One tensor of a model's weights: where it starts in the f32 weights, its elements, what it
/// holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WeightTensor {
    /// Element offset in the f32 weights.
    pub elem: usize,
    /// Elements.
    pub len: usize,
    /// What is drawn into it.
    pub draw: Draw,
}

impl WeightTensor {
    /// Whether it is a matrix (kept in blocks when quantized) rather than a norm's gains.
    pub fn is_matrix(&self) -> bool {
        self.draw != Draw::Gains
    }
}

/// The tensors of `c`'s weights in the order they lie and are drawn: per block its attention
/// norm, QKV, output projection, MLP norm, gate-and-up and down projections; then the final
/// norm, the embedding and, untied, the LM head.
pub fn weight_tensors(c: &Config) -> Vec<WeightTensor> {
    let shrink = (2.0 * c.blocks as f64).sqrt();
    let d = c.dim;
    let proj = |fan_in, shrink| Draw::Projection { fan_in, shrink };
    let mut parts: Vec<(usize, Draw)> = Vec::with_capacity(6 * c.blocks + 3);
    for _ in 0..c.blocks {
        parts.extend([
            (d, Draw::Gains),
            (c.qkv_dim() * d, proj(d, 1.0)),
            (d * c.q_dim(), proj(c.q_dim(), shrink)),
            (d, Draw::Gains),
            (2 * c.ffn * d, proj(d, 1.0)),
            (d * c.ffn, proj(c.ffn, shrink)),
        ]);
    }
    parts.push((d, Draw::Gains));
    parts.push((c.vocab * d, Draw::Embedding));
    if !c.tied {
        parts.push((c.vocab * d, proj(d, 1.0)));
    }
    let mut elem = 0;
    let tensors: Vec<WeightTensor> = parts
        .into_iter()
        .map(|(len, draw)| {
            let t = WeightTensor { elem, len, draw };
            elem += len;
            t
        })
        .collect();
    debug_assert_eq!(elem, c.weights_len());
    tensors
}
