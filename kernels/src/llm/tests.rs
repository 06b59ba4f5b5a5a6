use super::*;
use crate::check::harness::Validation;
use crate::check::llm::{check_llm, reference_arena, with_weights};
use crate::{Buffer, Dtype};

fn graph_inputs(g: &LlmGraph, dtype: Dtype) -> Vec<Buffer> {
    model_inputs(&g.config, &g.input_lens, 7, dtype)
}

/// The arena of a perfect fp32 backend given `inputs` in `dtype`.
fn reference(g: &LlmGraph, dtype: Dtype, inputs: &[Buffer]) -> Vec<f32> {
    with_weights(g, dtype.block_format(), inputs, |x, w| {
        reference_arena(g, x, w)
    })
}

/// The arena of a perfect backend given `inputs` with layer `layer` perturbed, checked against
/// `inputs`.
fn check_perturbed(g: &LlmGraph, dtype: Dtype, inputs: &[Buffer], layer: &str) -> Validation {
    let mut bad = inputs.to_vec();
    perturb(g, &mut bad[1], dtype.block_format(), layer).unwrap();
    check(g, dtype, inputs, &reference(g, dtype, &bad))
}

/// `arena` checked against `inputs` in `dtype`.
fn check(g: &LlmGraph, dtype: Dtype, inputs: &[Buffer], arena: &[f32]) -> Validation {
    with_weights(g, dtype.block_format(), inputs, |x, w| {
        check_llm(g, x, w, arena)
    })
}

#[test]
fn shapes_match_the_published_models() {
    let b1 = LlmModel::B1.config();
    assert_eq!(b1.head_dim, 64);
    // Llama-3.2-1B: 1.236 billion parameters with the tied embedding.
    assert_eq!(b1.weights_len(), 1_235_814_400);
    let b8 = LlmModel::B8.config();
    // Llama-3-8B: 8.03 billion.
    assert_eq!(b8.weights_len(), 8_030_261_248);
    // Llama-3.2-3B: 3.21 billion, tied.
    assert_eq!(LlmModel::B3.config().weights_len(), 3_212_749_824);
    // Qwen2.5-7B: 7,615,616,512 less its q/k/v biases, 28 × (3,584 + 512 + 512).
    assert_eq!(
        LlmModel::Qwen7b.config().weights_len(),
        7_615_616_512 - 28 * 4608
    );
    // Mistral-7B-v0.1: 7.24 billion.
    assert_eq!(LlmModel::Mistral7b.config().weights_len(), 7_241_732_096);
    for m in [LlmModel::B3, LlmModel::Qwen7b, LlmModel::Mistral7b] {
        assert_eq!(m.config().head_dim, 128, "{}", m.name());
    }
    for m in LlmModel::ALL {
        for (what, width) in m.config().row_widths() {
            assert_eq!(
                width % crate::quant::QK,
                0,
                "{} {what} in whole blocks",
                m.name()
            );
        }
    }
    // llama-bench's sizes with every matrix in the format: the 8B in Q4_0 4.21 GiB (llama.cpp's
    // own Q4_0 file, whose LM head stays Q6_K, is 4.33), in Q8_0 7.95 GiB.
    let gib = |d| b8.stored_bytes(d) as f64 / f64::from(1 << 30);
    assert!(
        (gib(crate::Dtype::Q4_0) - 4.21).abs() < 0.01,
        "{}",
        gib(crate::Dtype::Q4_0)
    );
    assert!(
        (gib(crate::Dtype::Q8_0) - 7.95).abs() < 0.01,
        "{}",
        gib(crate::Dtype::Q8_0)
    );
    assert_eq!(LlmModel::from_index(2), Some(LlmModel::B1));
    assert_eq!(LlmModel::from_index(7), None);
}

#[test]
fn sizes_agree_with_the_layout() {
    for model in [LlmModel::Tiny, LlmModel::Small] {
        for phase in [
            Phase::Prefill { prompt: 5 },
            Phase::Decode { steps: 4 },
            Phase::Decode { steps: 1 },
        ] {
            for (batch, context) in [(1, 0), (3, 2)] {
                let g = model_graph(&model.config(), phase, batch, context);
                let s = model_sizes(&model.config(), phase, batch, context);
                assert_eq!(
                    s.arena, g.arena_len as u128,
                    "{model:?} {phase:?} {batch} {context}"
                );
                assert_eq!(s.inputs.len(), 4);
            }
        }
    }
}

#[test]
fn the_logits_are_the_lm_head_of_every_pass() {
    let g = model_graph(&LlmModel::Tiny.config(), Phase::Decode { steps: 3 }, 1, 0);
    let vocab = g.config.vocab;
    let logits: Vec<&Step> = g.steps.iter().filter(|s| s.is_logits()).collect();
    assert_eq!(logits.len(), 3);
    assert!(
        logits
            .iter()
            .all(|s| matches!(s.op, Op::Linear { n, .. } if n == vocab))
    );
    let prefill = model_graph(&LlmModel::Tiny.config(), Phase::Prefill { prompt: 4 }, 1, 0);
    assert_eq!(prefill.steps.iter().filter(|s| s.is_logits()).count(), 1);
    // A step whose name merely ends in the word is not the LM head.
    let mut other = logits[0].clone();
    other.name = "layers.0.attention_output".into();
    assert!(!other.is_logits());
}

#[test]
fn a_perfect_arena_passes_and_a_perturbed_weight_is_named() {
    let g = model_graph(&LlmModel::Tiny.config(), Phase::Decode { steps: 3 }, 2, 4);
    // Quantized, the weights are packed and the perturbation scales the blocks' scales; in f16
    // they are half words, each perturbed weight rounded to fp16.
    for dtype in [Dtype::F32, Dtype::F16, Dtype::Q8_0, Dtype::Q4_0] {
        let inputs = graph_inputs(&g, dtype);
        let arena = reference(&g, dtype, &inputs);
        let v = check(&g, dtype, &inputs, &arena);
        assert!(v.passed, "{dtype:?}: {}", v.message);
        assert!(v.worst_ratio < 0.5, "{dtype:?}: {}", v.message);

        let v = check_perturbed(&g, dtype, &inputs, "layers.3.feed_forward.w2");
        assert!(!v.passed, "{dtype:?}");
        assert!(
            v.message.contains("layers.3.feed_forward.w2"),
            "{dtype:?}: {}",
            v.message
        );
        assert!(v.message.contains("pass 0"), "{}", v.message);
    }
}

#[test]
fn f16_weights_are_the_f32_draw_as_half_words() {
    let c = LlmModel::Small.config();
    let wide = model_weights(&c, 11, Dtype::F16);
    let half = model_weights_half(&c, 11);
    assert_eq!(half.len(), c.weights_len());
    // Every value is exact in fp16, so widening the words gives the f32 draw back bit for bit.
    for (i, (h, w)) in half.iter().zip(&wide).enumerate() {
        let back = half::f16::from_bits(*h).to_f32();
        assert_eq!(
            back.to_bits(),
            w.to_bits(),
            "weight {i}: {w} drawn, {back} held"
        );
    }
    let g = model_graph(&LlmModel::Tiny.config(), Phase::Decode { steps: 1 }, 1, 0);
    let inputs = graph_inputs(&g, Dtype::F16);
    assert!(
        matches!(inputs[1], Buffer::Half(_)),
        "{:?}",
        inputs[1].kind()
    );
    assert!(
        inputs
            .iter()
            .enumerate()
            .all(|(i, b)| i == 1 || b.as_f32().is_some())
    );
}

#[test]
fn a_middle_block_is_caught_as_a_whole() {
    let g = model_graph(&LlmModel::Tiny.config(), Phase::Prefill { prompt: 6 }, 1, 2);
    for dtype in [Dtype::F32, Dtype::F16, Dtype::Q4_0] {
        let inputs = graph_inputs(&g, dtype);
        let v = check_perturbed(&g, dtype, &inputs, "layers.1.attention.wqkv");
        assert!(!v.passed, "{dtype:?}");
        assert!(
            v.message.contains("block `layers.1`"),
            "{dtype:?}: {}",
            v.message
        );
    }
}

#[test]
fn an_unknown_layer_to_perturb_lists_some_that_exist() {
    let g = model_graph(&LlmModel::Tiny.config(), Phase::Decode { steps: 1 }, 1, 0);
    let mut w = Buffer::F32(vec![0f32; g.input_lens[1]]);
    let e = perturb(&g, &mut w, None, "layers.9.nope").unwrap_err();
    assert!(e.contains("layers.0.attention_norm"), "{e}");
    // Weights not in the dtype's form are refused, not scaled by halves.
    let e = perturb(
        &g,
        &mut w,
        Some(crate::quant::BlockFormat::Q4_0),
        "layers.0.attention_norm",
    );
    assert!(e.unwrap_err().contains("layout"));
}

#[test]
fn rope_table_turns_pairs_by_position() {
    let t = rope_table(3, 4, 10_000.0);
    // cos then sin, [3][2] each; position 0 does not turn.
    assert_eq!(&t[0..2], &[1.0, 1.0]);
    assert_eq!(&t[6..8], &[0.0, 0.0]);
    assert!((f64::from(t[2]) - 1f64.cos()).abs() < 1e-7);
    assert!((f64::from(t[8]) - 1f64.sin()).abs() < 1e-7);
}

/// A decode pass is the last one moved: kept passes have their tensors at the same offsets of their
/// regions (or in the same shared work tensors), every pass its position and tokens one further
/// per pass, and the same operations.
#[test]
fn a_decode_pass_is_the_last_one_moved() {
    for (model, steps, batch, context) in [
        (LlmModel::Tiny, 4, 1, 0),
        (LlmModel::Small, 5, 2, 3),
        (LlmModel::B1, 8, 1, 2),
    ] {
        let g = model_graph(&model.config(), Phase::Decode { steps }, batch, context);
        let what = format!("{model:?} gen {steps}");
        assert_eq!(g.passes.len(), steps, "{what}");
        let last = g.passes.last().unwrap();
        let lr = last.region.clone().expect("the last pass is kept");
        let kept = g.passes.iter().filter(|p| p.region.is_some()).count();
        assert_eq!(
            kept,
            if model.config().checks_every_position() {
                steps
            } else {
                3
            }
        );
        for p in &g.passes {
            assert_eq!(p.steps.len(), last.steps.len(), "{what} pass {}", p.index);
            let back = last.index - p.index;
            let moved = |r: Ref| match &p.region {
                Some(reg) if r.buf == Buf::Arena && reg.contains(&r.off) => {
                    assert_eq!(reg.len(), lr.len());
                    Ref::arena(r.off - reg.start + lr.start)
                }
                _ => r,
            };
            for (a, b) in g.steps[p.steps.clone()]
                .iter()
                .zip(&g.steps[last.steps.clone()])
            {
                let at = format!("{what}: {} against {}", a.name, b.name);
                assert_eq!(a.rows.pos0 + back, b.rows.pos0, "{at}");
                // A pass that is not kept adds its work tensors.
                let op = match (a.op, b.op) {
                    (Op::Add { dim, other }, Op::Add { other: last, .. }) => Op::Add {
                        dim,
                        other: if p.region.is_some() {
                            moved(other)
                        } else {
                            last
                        },
                    },
                    (op, _) => op,
                };
                assert_eq!(op, b.op, "{at}");
                if p.region.is_none() {
                    continue;
                }
                assert_eq!(moved(a.out), b.out, "{at}");
                let x = moved(a.x);
                if let Op::Embed { .. } = a.op {
                    assert_eq!(x.at(back), b.x, "{at}");
                } else {
                    assert_eq!(x, b.x, "{at}");
                }
            }
        }
    }
    let prefill = model_graph(&LlmModel::Tiny.config(), Phase::Prefill { prompt: 4 }, 1, 0);
    assert!(prefill.passes.is_empty());
}

#[test]
fn a_shape_is_given_by_name_alias_or_index_as_model_or_shape() {
    let def = crate::catalog::find_kernel("llm").unwrap();
    let model = def.param("shape").unwrap();
    assert_eq!(model.name, "model");
    let parsed = |name: &str| model.parse_value(name).ok().and_then(LlmModel::from_index);
    assert_eq!(parsed("llama-3.2-1b"), Some(LlmModel::B1));
    assert_eq!(parsed("llama-3.1-8b"), Some(LlmModel::B8));
    assert_eq!(parsed("qwen2.5-7b"), Some(LlmModel::Qwen7b));
    assert_eq!(parsed("llama-4"), None);
    let unknown = model.parse_value("llama-4").unwrap_err();
    assert!(unknown.contains("mistral-7b"), "{unknown}");
    let problem = |params: &[(&str, i64)]| {
        let params = params.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        crate::Problem::new("llm", "decode", &params, "f16", false)
    };
    // Stored under the parameter's own name.
    let by_shape = problem(&[("shape", 4)]).unwrap();
    assert_eq!(by_shape.params["model"], 4);
    assert!(!by_shape.params.contains_key("shape"));
    let both = problem(&[("shape", 4), ("model", 2)])
        .unwrap_err()
        .to_string();
    assert!(
        both.contains("model and shape name the same parameter"),
        "{both}"
    );
}

#[test]
fn a_shape_is_given_dimension_by_dimension() {
    let problem = |params: &[(&str, i64)], dtype: &str| {
        let params = params.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        crate::Problem::new("llm", "decode", &params, dtype, false)
    };
    let key = |p: &crate::Problem| p.spec_key(crate::Mode::ComputeOnly);
    // A named shape's key leaves the dimensions out, as before they existed.
    let named = problem(&[("model", 3)], "q4_0").unwrap();
    assert_eq!(
        key(&named),
        "llm/decode/batch=1,context=0,gen=128,model=8b,prompt=512/q4_0/compute_only"
    );
    assert_eq!(named.param("dim"), 0);
    // One dimension overrides the named model's (a cut-down 8b); the rest stay.
    let cut = problem(&[("model", 3), ("layers", 2)], "f16").unwrap();
    assert!(key(&cut).contains("layers=2,model=8b"), "{}", key(&cut));
    let g = cut.llm_graph().unwrap();
    assert_eq!(g.config.blocks, 2);
    assert_eq!(g.config.ffn, 14_336);
    // custom: every dimension from the parameters; kv_heads defaults to heads, head_dim to
    // dim/heads, the LM head to an own one.
    let custom = [
        ("model", CUSTOM_MODEL),
        ("dim", 512),
        ("layers", 3),
        ("heads", 8),
        ("ffn", 1024),
        ("vocab", 1000),
    ];
    let c = problem(&custom, "q8_0")
        .unwrap()
        .llm_graph()
        .unwrap()
        .config;
    assert_eq!((c.kv_heads, c.head_dim, c.tied), (8, 64, false));
    assert_eq!(c.rope_theta, 10_000.0);
    let e = problem(&custom[..4], "f32").unwrap_err().to_string();
    assert!(e.contains("model=custom needs ffn, vocab"), "{e}");
    // Quantized rows must be whole blocks, named by the width at fault.
    let mut odd = custom.to_vec();
    odd[4] = ("ffn", 1000);
    assert!(problem(&odd, "f32").is_ok());
    let e = problem(&odd, "q4_0").unwrap_err().to_string();
    assert!(
        e.contains("ffn=1000 must be a multiple of 32 in q4_0"),
        "{e}"
    );
    let e = problem(&[("model", 1), ("heads", 5)], "f32")
        .unwrap_err()
        .to_string();
    assert!(e.contains("dim=768 is not a multiple of heads=5"), "{e}");
    // A small custom shape is validated at every position, like tiny and small.
    assert!(c.checks_every_position());
    assert!(!LlmModel::B1.config().checks_every_position());
}
