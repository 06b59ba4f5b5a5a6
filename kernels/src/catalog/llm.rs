//! The transformer kernels: `llm` (a Llama-shaped model's prefill or decode) and its layers one at
//! a time (`rope`, `attention`, `swiglu`, `gemv`), all run as an [`LlmGraph`] of steps (see
//! [`crate::llm`]) and validated step by step (`check/llm.rs`). This module holds their catalog
//! entries, the graph of each problem and its sizes.

use super::{
    F32_F16_QUANT, F32_ONLY, Family, KernelDef, KernelId, ParamDef, Problem, Visit, lens, named, p,
};
use crate::backend::BackendKind;
use crate::check::harness::Validation;
use crate::check::llm::{check_llm, with_weights};
use crate::inputs::{UNIT, ValueSet, WIDE, fill, rng_for};
use crate::llm::{
    Config, Heads, LayerKind, LlmGraph, LlmModel, MODEL_ALIASES, MODEL_NAMES, ModelSizes,
    PackedLayout, Phase, check_heads, half_words, layer_graph, model_graph, model_inputs,
    model_sizes, projection, projection_packed, rope_table,
};
use crate::quant::QK;
use crate::types::{Buffer, Dtype, MetricKind};

/// The kernels that run a graph of transformer steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LlmKernel {
    /// `llm`: a Llama-shaped model's prefill (variant `prefill`) or decode (`decode`).
    Llm,
    /// `rope`: rotary position embedding of the queries and keys, keys and values into the cache.
    Rope,
    /// `attention`: causal grouped-query attention over a KV cache.
    Attention,
    /// `swiglu`: `silu(gate) · up`.
    SwiGlu,
    /// `gemv`: rows × a `[n][k]` weight matrix (f32 or f16 weights), the decode projections.
    Gemv,
}

/// The backends that implement the transformer kernels.
pub(crate) const LLM_BACKENDS: &[BackendKind] = &[
    BackendKind::Cpu,
    BackendKind::OpenCl,
    BackendKind::Vulkan,
    BackendKind::Hip,
];

const LLM_PARAMS: &[ParamDef] = &[
    named(
        "model",
        &["shape"],
        0,
        MODEL_NAMES,
        MODEL_ALIASES,
        "model shape: tiny, small, 1b (Llama-3.2-1B; also llama-3.2-1b), 8b (Llama-3-8B and \
         3.1-8B; also llama-3.1-8b), llama-3.2-3b, qwen2.5-7b (no q/k/v biases), mistral-7b (v0.1), \
         custom (every dimension from the parameters below; `--model-config` reads them from a \
         Hugging Face config.json); also given as shape=NAME",
    ),
    shape_param("dim", 65_536, "model width (hidden_size); 0: the model's"),
    shape_param(
        "layers",
        512,
        "decoder blocks (num_hidden_layers); 0: the model's",
    ),
    shape_param(
        "heads",
        1024,
        "query heads (num_attention_heads); 0: the model's",
    ),
    shape_param(
        "kv_heads",
        1024,
        "key/value heads (num_key_value_heads), dividing heads; 0: the model's (custom: heads)",
    ),
    shape_param(
        "head_dim",
        512,
        "width of a head, even; 0: the model's, or dim/heads when dim or heads is given",
    ),
    shape_param(
        "ffn",
        262_144,
        "MLP width (intermediate_size); 0: the model's",
    ),
    shape_param("vocab", 1 << 20, "vocabulary (vocab_size); 0: the model's"),
    shape_param(
        "rope_theta",
        1_000_000_000,
        "RoPE base (rope_theta); 0: the model's (custom: 10,000)",
    ),
    named(
        "tied",
        &[],
        0,
        &["model", "yes", "no"],
        &[],
        "LM head tied to the embedding (tie_word_embeddings): model (the model's; custom: no), \
         yes or no",
    )
    .optional(),
    p("batch", 1, 1, 256, "sequences"),
    p("prompt", 512, 1, 8192, "prefill: tokens per sequence"),
    p(
        "context",
        0,
        0,
        32768,
        "positions already in the KV cache (seeded) before the timed work",
    ),
    p("gen", 128, 1, 4096, "decode: tokens generated per sequence"),
];

/// A dimension of an `llm` shape: 0 (the named model's) by default and left out of spec keys there.
const fn shape_param(name: &'static str, max: i64, doc: &'static str) -> ParamDef {
    p(name, 0, 0, max, doc).optional()
}

const HEAD_PARAMS: [ParamDef; 6] = [
    p("batch", 1, 1, 256, "sequences"),
    p(
        "tokens",
        512,
        1,
        8192,
        "new positions (queries) per sequence",
    ),
    p("context", 0, 0, 32768, "positions before them"),
    p("heads", 32, 1, 256, "query heads"),
    p("kv_heads", 8, 1, 256, "key/value heads (divides heads)"),
    p("head_dim", 64, 2, 512, "width of a head (even)"),
];

/// Every transformer kernel, in display order.
pub(super) static TABLE: [KernelDef; 5] = [
    KernelDef {
        id: KernelId::Llm(LlmKernel::Llm),
        name: "llm",
        description: "Llama-style decoder inference (RMSNorm, fused QKV, RoPE, grouped-query \
                      attention over a KV cache, SwiGLU MLP, tied or own LM head), seeded weights \
                      stored f32 or f16, or the matrices in llama.cpp's q8_0 / q4_0 blocks, with \
                      f32 accumulation; prefill: prompt tokens per sequence in one pass; decode: \
                      gen tokens one pass each; validated step by step",
        variants: &["prefill", "decode"],
        default_variant: "decode",
        params: LLM_PARAMS,
        dtypes: F32_F16_QUANT,
        metric: MetricKind::TokensPerS,
        host_only: false,
        debug: false,
        backends: LLM_BACKENDS,
    },
    KernelDef {
        id: KernelId::Llm(LlmKernel::Rope),
        name: "rope",
        description: "rotary position embedding (rotate-half pairs, f64 table) of the queries and \
                      keys of [q | k | v] rows; queries out, keys and values into a KV cache",
        variants: &["default"],
        default_variant: "default",
        params: &HEAD_PARAMS,
        dtypes: F32_ONLY,
        metric: MetricKind::Gbps,
        host_only: false,
        debug: false,
        backends: LLM_BACKENDS,
    },
    KernelDef {
        id: KernelId::Llm(LlmKernel::Attention),
        name: "attention",
        description: "causal grouped-query attention of batch×tokens queries over a KV cache of \
                      context+tokens positions; prefill: tiled over keys; decode: split along the \
                      sequence and merged",
        variants: &["prefill", "decode"],
        default_variant: "prefill",
        params: &HEAD_PARAMS,
        dtypes: F32_ONLY,
        metric: MetricKind::Gflops,
        host_only: false,
        debug: false,
        backends: LLM_BACKENDS,
    },
    KernelDef {
        id: KernelId::Llm(LlmKernel::SwiGlu),
        name: "swiglu",
        description: "SwiGLU of [gate | up] rows: silu(gate) · up",
        variants: &["default"],
        default_variant: "default",
        params: &[
            p("rows", 512, 1, 65536, "rows (tokens)"),
            p("ffn", 8192, 1, 65536, "hidden width"),
        ],
        dtypes: F32_ONLY,
        metric: MetricKind::Gbps,
        host_only: false,
        debug: false,
        backends: LLM_BACKENDS,
    },
    KernelDef {
        id: KernelId::Llm(LlmKernel::Gemv),
        name: "gemv",
        description: "rows × a [n][k] weight matrix (PyTorch's Linear without bias), f32 \
                      activations, f32, f16, q8_0 or q4_0 weights (k a multiple of 32 for the \
                      blocks), f32 accumulation: the decode projections",
        variants: &["default"],
        default_variant: "default",
        params: &[
            p("batch", 1, 1, 4096, "rows of the input (tokens)"),
            p("k", 2048, 1, 65536, "input width"),
            p("n", 8192, 1, 262_144, "output width"),
        ],
        dtypes: F32_F16_QUANT,
        metric: MetricKind::Gbps,
        host_only: false,
        debug: false,
        backends: LLM_BACKENDS,
    },
];

impl LlmKernel {
    /// Every transformer kernel.
    pub const ALL: [LlmKernel; 5] = [
        LlmKernel::Llm,
        LlmKernel::Rope,
        LlmKernel::Attention,
        LlmKernel::SwiGlu,
        LlmKernel::Gemv,
    ];

    /// Whether it runs the whole model (`llm`), not one layer.
    pub(crate) fn whole_model(self) -> bool {
        match self {
            LlmKernel::Llm => true,
            LlmKernel::Rope | LlmKernel::Attention | LlmKernel::SwiGlu | LlmKernel::Gemv => false,
        }
    }

    fn heads(p: &Problem) -> Heads {
        Heads {
            heads: p.uparam("heads"),
            kv_heads: p.uparam("kv_heads"),
            head_dim: p.uparam("head_dim"),
        }
    }

    fn phase(p: &Problem) -> Phase {
        if p.variant == "prefill" {
            Phase::Prefill {
                prompt: p.uparam("prompt"),
            }
        } else {
            Phase::Decode {
                steps: p.uparam("gen"),
            }
        }
    }

    /// The shape of an `llm` problem ([`Config::from_params`]; `check_params` refused one it
    /// rejects, so tiny's only stands in for what cannot happen).
    fn config(p: &Problem) -> Config {
        Config::from_params(|n| p.param(n)).unwrap_or_else(|_| LlmModel::Tiny.config())
    }

    /// An `llm` problem's sizes, without building its graph.
    fn sizes(self, p: &Problem) -> ModelSizes {
        model_sizes(
            &Self::config(p),
            Self::phase(p),
            p.uparam("batch"),
            p.uparam("context"),
        )
    }

    /// The graph `p` runs.
    pub(crate) fn graph(self, p: &Problem) -> LlmGraph {
        let u = |n: &str| p.uparam(n);
        match self {
            LlmKernel::Llm => {
                model_graph(&Self::config(p), Self::phase(p), u("batch"), u("context"))
            }
            LlmKernel::Rope => layer_graph(LayerKind::Rope {
                batch: u("batch"),
                tokens: u("tokens"),
                context: u("context"),
                heads: Self::heads(p),
            }),
            LlmKernel::Attention => layer_graph(LayerKind::Attention {
                batch: u("batch"),
                tokens: u("tokens"),
                context: u("context"),
                heads: Self::heads(p),
            }),
            LlmKernel::SwiGlu => layer_graph(LayerKind::SwiGlu {
                rows: u("rows"),
                ffn: u("ffn"),
            }),
            LlmKernel::Gemv => layer_graph(LayerKind::Gemv {
                rows: u("batch"),
                k: u("k"),
                n: u("n"),
            }),
        }
    }

    /// Input and arena sizes; a model's in u128 without building its graph (for footprints of
    /// absurd parameters).
    fn lens(self, p: &Problem) -> (Vec<u128>, u128) {
        match self {
            LlmKernel::Llm => {
                let s = self.sizes(p);
                (s.inputs, s.arena)
            }
            // One step: its graph is cheap, and the parameters' bounds keep its sizes far inside
            // usize.
            LlmKernel::Rope | LlmKernel::Attention | LlmKernel::SwiGlu | LlmKernel::Gemv => {
                let g = self.graph(p);
                let inputs = g.input_lens.iter().map(|&n| n as u128).collect();
                (inputs, g.arena_len as u128)
            }
        }
    }
}

impl Family for LlmKernel {
    fn zeroed_output(&self) -> bool {
        true
    }

    fn check_params(&self, p: &Problem) -> Result<(), String> {
        match self {
            LlmKernel::Rope | LlmKernel::Attention => check_heads(
                p.uparam("heads"),
                p.uparam("kv_heads"),
                p.uparam("head_dim"),
            ),
            LlmKernel::Gemv => match p.dtype.block_format() {
                Some(_) if p.param("k") % QK as i64 != 0 => Err(format!(
                    "k={} must be a multiple of {QK} in {} (a row is whole blocks of {QK} weights)",
                    p.param("k"),
                    p.dtype
                )),
                _ => Ok(()),
            },
            LlmKernel::Llm => {
                let c = Config::from_params(|n| p.param(n))?;
                if p.dtype.block_format().is_some() {
                    for (name, width) in c.row_widths() {
                        if !width.is_multiple_of(QK) {
                            return Err(format!(
                                "{name}={width} must be a multiple of {QK} in {} (a row is whole \
                                 blocks of {QK} weights)",
                                p.dtype
                            ));
                        }
                    }
                }
                Ok(())
            }
            LlmKernel::SwiGlu => Ok(()),
        }
    }

    fn flops(&self, p: &Problem) -> f64 {
        match self {
            LlmKernel::Llm => self.sizes(p).flops,
            _ => self.graph(p).flops,
        }
    }

    fn bytes(&self, p: &Problem) -> f64 {
        let (all, weights) = match self {
            LlmKernel::Llm => {
                let s = self.sizes(p);
                (s.bytes_f32, s.weight_bytes_f32)
            }
            _ => {
                let g = self.graph(p);
                (g.bytes_f32, g.weight_bytes_f32)
            }
        };
        // Quantized, the norms count at the blocks' rate too (under 0.1% of the weights).
        all - weights * (1.0 - p.dtype.bytes_per_element() / 4.0)
    }

    fn input_lens(&self, p: &Problem) -> Vec<u128> {
        self.lens(p).0
    }

    fn output_len(&self, p: &Problem) -> u128 {
        self.lens(p).1
    }

    /// f32 buffers but the weights, stored in the dtype (quantized: all of them at the blocks' rate,
    /// the norms' few elements too).
    fn footprint(&self, p: &Problem) -> Option<u128> {
        let (inputs, arena) = self.lens(p);
        let weights = match self {
            LlmKernel::Llm | LlmKernel::Gemv => Some(1),
            _ => None,
        };
        let bytes = inputs
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                if Some(i) == weights {
                    p.dtype.storage_bytes(n)
                } else {
                    4 * n
                }
            })
            .sum::<u128>();
        Some(bytes + 4 * arena)
    }

    /// `llm`: the model's weights as a file holds them (quantized: matrices in blocks, norms f32);
    /// `gemv`: its matrix.
    fn weight_bytes(&self, p: &Problem) -> Option<u128> {
        match self {
            LlmKernel::Llm => Some(Self::config(p).stored_bytes(p.dtype)),
            LlmKernel::Gemv => Some(
                p.dtype
                    .storage_bytes((p.uparam("k") * p.uparam("n")) as u128),
            ),
            LlmKernel::Rope | LlmKernel::Attention | LlmKernel::SwiGlu => None,
        }
    }

    fn llm(&self, p: &Problem) -> Option<LlmGraph> {
        Some(self.graph(p))
    }

    fn tokens(&self, p: &Problem) -> f64 {
        match (self, Self::phase(p)) {
            (LlmKernel::Llm, Phase::Prefill { prompt }) => (p.uparam("batch") * prompt) as f64,
            (LlmKernel::Llm, Phase::Decode { steps }) => (p.uparam("batch") * steps) as f64,
            _ => 0.0,
        }
    }

    fn make_inputs(&self, p: &Problem, seed: u64) -> Vec<Buffer> {
        // The model's sizes without its graph (a long decode has many steps).
        let lens = lens(&self.lens(p).0);
        let f = |set: ValueSet, i: usize| fill(set, lens[i], &mut rng_for(seed, i));
        let bufs = match self {
            // Quantized, the weights are drawn straight into their blocks.
            LlmKernel::Llm => return model_inputs(&Self::config(p), &lens, seed, p.dtype),
            LlmKernel::Rope => {
                let hd = p.uparam("head_dim");
                let cap = p.uparam("context") + p.uparam("tokens");
                vec![f(UNIT, 0), rope_table(cap, hd, 10_000.0)]
            }
            LlmKernel::Attention => vec![f(UNIT, 0), f(UNIT, 1), f(UNIT, 2)],
            LlmKernel::SwiGlu => vec![f(WIDE, 0)],
            LlmKernel::Gemv => {
                let (k, mut rng) = (p.uparam("k"), rng_for(seed, 1));
                let w = match p.dtype.block_format() {
                    Some(f) => {
                        let layout = PackedLayout::of(&self.graph(p), f);
                        Buffer::Packed(projection_packed(&layout, k, lens[1], &mut rng))
                    }
                    None if p.dtype == Dtype::F16 => {
                        Buffer::Half(half_words(&projection(p.dtype, k, 1.0, lens[1], &mut rng)))
                    }
                    None => Buffer::F32(projection(p.dtype, k, 1.0, lens[1], &mut rng)),
                };
                return vec![Buffer::F32(f(UNIT, 0)), w];
            }
        };
        bufs.into_iter().map(Buffer::F32).collect()
    }

    fn packed_input(&self, p: &Problem) -> Option<(usize, u128)> {
        let f = p.dtype.block_format()?;
        let layout = match self {
            LlmKernel::Llm => PackedLayout::of_model(&Self::config(p), f),
            LlmKernel::Gemv => PackedLayout::of(&self.graph(p), f),
            _ => return None,
        };
        Some((1, layout.bytes() as u128))
    }

    fn half_input(&self, p: &Problem) -> Option<usize> {
        let weights = matches!(self, LlmKernel::Llm | LlmKernel::Gemv);
        (weights && p.dtype == Dtype::F16).then_some(1)
    }

    fn validate(&self, p: &Problem, inputs: &[Buffer], output: &Buffer) -> Option<Validation> {
        let arena = output.as_f32()?;
        let g = self.graph(p);
        Some(with_weights(
            &g,
            p.dtype.block_format(),
            inputs,
            |f32s, weights| check_llm(&g, f32s, weights, arena),
        ))
    }

    fn visit(&self, p: &Problem, _x: &[&[f32]], _f: Visit<'_>) -> Result<bool, String> {
        Err(format!(
            "{} validates step by step, not element by element",
            p.kernel.name
        ))
    }

    #[cfg(test)]
    fn reference(&self, p: &Problem, inputs: &[Buffer]) -> Buffer {
        let g = self.graph(p);
        Buffer::F32(with_weights(
            &g,
            p.dtype.block_format(),
            inputs,
            |f32s, weights| crate::check::llm::reference_arena(&g, f32s, weights),
        ))
    }
}
