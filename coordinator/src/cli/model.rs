//! `export-model`: a network's seeded buffers and graph for another framework (the PyTorch
//! comparison in bench/models_vs_torch.py builds the same network from them).

use anyhow::{Context, bail};
use gpufleet_kernels::Problem;
use gpufleet_kernels::model::Op;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;

use super::args::ExportModelArgs;

/// Writes graph.json, weights.f32, images.f32 and reference_logits.f64 into `args.out`.
///
/// # Errors
/// A kernel that is not a network, a batch out of range, or a file that cannot be written.
pub fn export_model(args: &ExportModelArgs) -> anyhow::Result<()> {
    if gpufleet_kernels::find_kernel(&args.kernel).is_some_and(|k| k.id.whole_transformer()) {
        return export_llm(args);
    }
    let params = BTreeMap::from([("batch".to_string(), args.batch)]);
    let problem = Problem::new(&args.kernel, "", &params, "f32", false)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if problem.net().is_none() {
        bail!(
            "kernel `{}` is not a network (simple_cnn, resnet18, mobilenet_v2)",
            args.kernel
        );
    }
    let graph = problem.graph();
    eprintln!(
        "{}: batch {}, {} layers, {} weights, seed {}",
        args.kernel,
        graph.batch,
        graph.layers.len(),
        graph.weights_len,
        args.seed
    );
    let inputs = problem.inputs(args.seed);
    let (Some(images), Some(weights)) = (inputs[0].as_f32(), inputs[1].as_f32()) else {
        bail!("{}: the generated inputs are not f32", args.kernel);
    };
    let layers: Vec<_> = graph
        .layers
        .iter()
        .map(|l| {
            let mut v = json!({
                "name": l.name,
                "kind": l.op.kind(),
                "input": l.input,
                "in": [l.inp.c, l.inp.h, l.inp.w],
                "out": [l.out.c, l.out.h, l.out.w],
                "w_offset": l.w_offset,
                "w_len": l.w_len,
                "bias_len": l.bias_len(),
            });
            let op = match l.op {
                Op::Conv(c) => json!({"op": "conv", "k": c.k, "stride": c.stride, "pad": c.pad,
                    "groups": c.groups, "act": c.act.name()}),
                Op::MaxPool { k, stride, pad } => {
                    json!({"op": "maxpool", "k": k, "stride": stride, "pad": pad})
                }
                Op::GlobalAvgPool => json!({"op": "avgpool"}),
                Op::Add { skip, act: a } => json!({"op": "add", "skip": skip, "act": a.name()}),
                Op::Linear { act: a, .. } => json!({"op": "linear", "act": a.name()}),
            };
            if let (Some(v), Some(op)) = (v.as_object_mut(), op.as_object()) {
                v.extend(op.clone());
            }
            v
        })
        .collect();
    let doc = json!({
        "net": args.kernel,
        "batch": graph.batch,
        "seed": args.seed,
        "image": [graph.image.c, graph.image.h, graph.image.w],
        "classes": graph.classes(),
        "weights_len": graph.weights_len,
        "gflop_per_batch": graph.flops() / 1e9,
        "layers": layers,
        "files": {
            "weights.f32": "the weights buffer, little-endian f32 (each layer's filters then biases)",
            "images.f32": "batch × image, NCHW, little-endian f32",
            "reference_logits.f64": "batch × classes, the f64 reference network, little-endian f64",
        },
    });
    let out = &args.out;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let write = |name: &str, bytes: Vec<u8>| -> anyhow::Result<()> {
        let path: &Path = &out.join(name);
        std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
    };
    write("graph.json", serde_json::to_vec_pretty(&doc)?)?;
    write(
        "weights.f32",
        weights.iter().flat_map(|v| v.to_le_bytes()).collect(),
    )?;
    write(
        "images.f32",
        images.iter().flat_map(|v| v.to_le_bytes()).collect(),
    )?;
    eprintln!(
        "computing the f64 reference logits of {} images",
        graph.batch
    );
    let logits: Vec<u8> = (0..graph.batch)
        .flat_map(|img| graph.forward_f64(img, images, weights))
        .flat_map(|v| v.to_le_bytes())
        .collect();
    write("reference_logits.f64", logits)?;
    println!("{}", out.display());
    Ok(())
}

/// `export-model llm`: model.json, the weights (f32 or f16, little-endian) and `batch × tokens`
/// token ids (i32), as an agent generates them for this model and seed.
///
/// # Errors
/// An unknown model or dtype, or a file that cannot be written.
fn export_llm(args: &ExportModelArgs) -> anyhow::Result<()> {
    use gpufleet_kernels::llm::{
        Config, MODEL_NAMES, model_weights, model_weights_half, read_shape_params, tokens,
    };
    // The `model` parameter's own reading (a name, another name of one, or an index), or the
    // shape of a config.json, made as a run's is.
    let params = match &args.model_config {
        Some(path) => read_shape_params(path).map_err(|e| anyhow::anyhow!("--model-config {e}"))?,
        None => {
            let Some(model) = gpufleet_kernels::find_kernel("llm")
                .and_then(|k| k.param("model"))
                .and_then(|p| p.parse_value(&args.model).ok())
                .filter(|&m| m != gpufleet_kernels::llm::CUSTOM_MODEL)
            else {
                bail!(
                    "--model {}: one of {} (or --model-config FILE)",
                    gpufleet_kernels::quote(&args.model),
                    MODEL_NAMES[..MODEL_NAMES.len() - 1].join(", ")
                );
            };
            std::collections::BTreeMap::from([("model".to_string(), model)])
        }
    };
    let name = MODEL_NAMES
        .get(usize::try_from(params["model"]).unwrap_or(usize::MAX))
        .copied()
        .unwrap_or("custom");
    let c = Config::from_params(|n| params.get(n).copied().unwrap_or(0))
        .map_err(|e| anyhow::anyhow!("--model-config: {e}"))?;
    let Some(dtype) = gpufleet_kernels::Dtype::parse(&args.dtype) else {
        bail!(
            "--dtype {}: f32, f16, q8_0 or q4_0",
            gpufleet_kernels::quote(&args.dtype)
        );
    };
    let half = dtype == gpufleet_kernels::Dtype::F16;
    let batch = usize::try_from(args.batch).unwrap_or(0).max(1);
    eprintln!(
        "{}: {} weights ({}), {} × {} tokens, seed {}",
        name,
        c.weights_len(),
        args.dtype,
        batch,
        args.tokens,
        args.seed
    );
    // In f16 the agent's own half words (half the memory of the f32 draw).
    let weights = if half {
        gpufleet_kernels::Buffer::Half(model_weights_half(&c, args.seed))
    } else {
        gpufleet_kernels::Buffer::F32(model_weights(&c, args.seed, dtype))
    };
    let ids = tokens(batch * args.tokens, c.vocab, args.seed);
    let blocks: Vec<_> = (0..c.blocks)
        .map(|b| {
            let w = c.block_weights(b);
            json!({"attention_norm": w.attn_norm, "wqkv": w.wqkv, "wo": w.wo,
                   "ffn_norm": w.ffn_norm, "w_gate_up": w.w_gate_up, "w2": w.w_down})
        })
        .collect();
    let file = if half { "weights.f16" } else { "weights.f32" };
    let doc = json!({
        "model": name, "seed": args.seed, "dtype": dtype.name(),
        "dim": c.dim, "blocks": c.blocks, "heads": c.heads, "kv_heads": c.kv_heads,
        "head_dim": c.head_dim, "ffn": c.ffn, "vocab": c.vocab, "tied": c.tied,
        "rope_theta": c.rope_theta, "norm_eps": gpufleet_kernels::NORM_EPS,
        "weights_len": c.weights_len(), "layers": blocks, "norm": c.final_norm(),
        "tok_embeddings": c.embedding(), "output": c.lm_head(),
        "batch": batch, "tokens": args.tokens,
        "files": {
            file: if dtype.block_format().is_some() {
                "the weights buffer, little-endian f32; each projection [out][in] (PyTorch's \
                 Linear); every matrix holds values its blocks of 32 keep exactly, so llama.cpp's \
                 quantizer (the gguf package's) gives the blocks the agent runs"
            } else {
                "the weights buffer, little-endian; each projection [out][in] (PyTorch's Linear)"
            },
            "tokens.i32": "batch × tokens token ids, little-endian i32",
        },
    });
    let out = &args.out;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let write = |name: &str, bytes: Vec<u8>| -> anyhow::Result<()> {
        let path: &Path = &out.join(name);
        std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
    };
    write("model.json", serde_json::to_vec_pretty(&doc)?)?;
    // A stretch at a time: `8b`'s weights are 32 GB in f32, and a second copy as bytes would double
    // the peak.
    let path = out.join(file);
    let stream = || -> std::io::Result<()> {
        use gpufleet_kernels::Buffer;
        let mut sink = std::io::BufWriter::new(std::fs::File::create(&path)?);
        let mut bytes = Vec::with_capacity(4 << 20);
        for at in (0..weights.len()).step_by(1 << 20) {
            let stretch = at..weights.len().min(at + (1 << 20));
            bytes.clear();
            match &weights {
                Buffer::Half(w) => bytes.extend(w[stretch].iter().flat_map(|v| v.to_le_bytes())),
                Buffer::F32(w) => bytes.extend(w[stretch].iter().flat_map(|v| v.to_le_bytes())),
                _ => unreachable!("the weights are drawn as f32 or half words above"),
            }
            std::io::Write::write_all(&mut sink, &bytes)?;
        }
        std::io::Write::flush(&mut sink)
    };
    stream().with_context(|| format!("writing {}", path.display()))?;
    write(
        "tokens.i32",
        ids.iter().flat_map(|v| (*v as i32).to_le_bytes()).collect(),
    )?;
    println!("{}", out.display());
    Ok(())
}
