//! A model shape from a Hugging Face `config.json`: the `llm` parameters of `model=custom`
//! ([`shape_params`]), so a user can measure the shape of the model they run. The file is read
//! where the spec is written (the CLI, a suite file); an agent receives the numbers only.

use super::shape::CUSTOM_MODEL;
use crate::error::quote;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// Keys of a mixture of experts' expert count, which this dense decoder cannot run.
const EXPERT_KEYS: [&str; 3] = ["num_local_experts", "num_experts", "n_routed_experts"];

/// The `llm` parameters (`model=custom`, `dim`, `layers`, `heads`, `kv_heads`, `ffn`, `vocab`,
/// `rope_theta`, `tied`, and `head_dim` where the file gives one) of the decoder `text` describes,
/// a Hugging Face `config.json` (a multimodal one's `text_config`). Fields read: `hidden_size`,
/// `num_hidden_layers`, `num_attention_heads`, `intermediate_size`, `vocab_size` (all needed),
/// `num_key_value_heads` (default: the heads), `head_dim`, `rope_theta` (default 10,000) and
/// `tie_word_embeddings` (default false). Biases, RoPE scaling and sliding windows change no
/// weight bytes a decode reads per token and are not modelled.
///
/// # Errors
/// Not JSON, a needed field missing or not a positive integer, a mixture of experts; each names the
/// field, with `origin` (the file) in front.
pub fn shape_params(text: &str, origin: &str) -> Result<BTreeMap<String, i64>, String> {
    let fail = |m: String| format!("{origin}: {m}");
    let doc: Value =
        serde_json::from_str(text).map_err(|e| fail(format!("not a JSON config.json: {e}")))?;
    let top = doc
        .as_object()
        .ok_or_else(|| fail("not a JSON object".to_string()))?;
    // A multimodal model (Llama 4, Gemma 3, Mistral 3) keeps its decoder under `text_config`.
    let c = match top.get("text_config") {
        Some(Value::Object(t)) if !top.contains_key("hidden_size") => t,
        _ => top,
    };
    for key in EXPERT_KEYS {
        if let Some(n) = c.get(key).and_then(Value::as_i64).filter(|&n| n > 1) {
            return Err(fail(format!(
                "field `{key}`: {n} experts: a mixture of experts is not a dense Llama-shaped \
                 decoder, which `llm` runs"
            )));
        }
    }
    let int = |key: &str| integer(c, key).map_err(&fail);
    let need = |key: &str| int(key)?.ok_or_else(|| fail(format!("field `{key}` is missing")));
    let heads = need("num_attention_heads")?;
    let mut params = BTreeMap::from([
        ("model".to_string(), CUSTOM_MODEL),
        ("dim".to_string(), need("hidden_size")?),
        ("layers".to_string(), need("num_hidden_layers")?),
        ("heads".to_string(), heads),
        (
            "kv_heads".to_string(),
            int("num_key_value_heads")?.unwrap_or(heads),
        ),
        ("ffn".to_string(), need("intermediate_size")?),
        ("vocab".to_string(), need("vocab_size")?),
        (
            "rope_theta".to_string(),
            int("rope_theta")?.unwrap_or(10_000),
        ),
    ]);
    if let Some(h) = int("head_dim")? {
        params.insert("head_dim".to_string(), h);
    }
    let tied = match c.get("tie_word_embeddings") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            return Err(fail(format!(
                "field `tie_word_embeddings`: {} is not true or false",
                quote(&v.to_string())
            )));
        }
    };
    params.insert("tied".to_string(), if tied { 1 } else { 2 });
    Ok(params)
}

/// [`shape_params`] of the file at `path`.
///
/// # Errors
/// The file cannot be read, or [`shape_params`]'s.
pub fn read_shape_params(path: &Path) -> Result<BTreeMap<String, i64>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read model config {}: {e}", path.display()))?;
    shape_params(&text, &path.display().to_string())
}

/// Field `key` of `c` as a positive integer (a float with no fraction too: `rope_theta` is often
/// written `500000.0`); `None` when absent or null.
fn integer(c: &Map<String, Value>, key: &str) -> Result<Option<i64>, String> {
    let bad = |v: &Value| {
        Err(format!(
            "field `{key}`: {} is not a positive integer",
            quote(&v.to_string())
        ))
    };
    match c.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_i64() {
            Some(n) if n > 0 => Ok(Some(n)),
            Some(_) => bad(v),
            None => match v.as_f64() {
                Some(f) if f >= 1.0 && f.fract() == 0.0 && f < 9.0e15 => Ok(Some(f as i64)),
                _ => bad(v),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{Config, LlmModel};

    /// Llama-3.2-3B's config.json as Hugging Face publishes it (the fields read, and some not).
    const LLAMA_3B: &str = r#"{
      "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 128000,
      "head_dim": 128, "hidden_act": "silu", "hidden_size": 3072, "intermediate_size": 8192,
      "max_position_embeddings": 131072, "model_type": "llama", "num_attention_heads": 24,
      "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
      "rope_scaling": {"factor": 32.0, "rope_type": "llama3"}, "rope_theta": 500000.0,
      "tie_word_embeddings": true, "torch_dtype": "bfloat16", "vocab_size": 128256
    }"#;

    fn config(params: &BTreeMap<String, i64>) -> Result<Config, String> {
        Config::from_params(|n| params.get(n).copied().unwrap_or(0))
    }

    #[test]
    fn a_published_config_gives_the_catalog_shape() {
        let p = shape_params(LLAMA_3B, "config.json").unwrap();
        assert_eq!(p["model"], CUSTOM_MODEL);
        assert_eq!(config(&p).unwrap(), LlmModel::B3.config());
        // Mistral-7B-v0.1: no head_dim, no tie_word_embeddings, an integer rope_theta.
        let mistral = r#"{"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
            "num_hidden_layers": 32, "num_key_value_heads": 8, "rope_theta": 10000,
            "vocab_size": 32000, "sliding_window": 4096}"#;
        let p = shape_params(mistral, "m.json").unwrap();
        assert_eq!(config(&p).unwrap(), LlmModel::Mistral7b.config());
        // A multimodal model's decoder.
        let nested = format!(r#"{{"model_type": "mllama", "text_config": {LLAMA_3B}}}"#);
        assert_eq!(
            config(&shape_params(&nested, "n.json").unwrap()).unwrap(),
            LlmModel::B3.config()
        );
    }

    #[test]
    fn bad_configs_name_the_field() {
        let err = |text: &str| shape_params(text, "c.json").unwrap_err();
        assert_eq!(
            err(r#"{"hidden_size": 64}"#),
            "c.json: field `num_attention_heads` is missing"
        );
        let e = err(&LLAMA_3B.replace("3072", "\"big\""));
        assert_eq!(
            e,
            "c.json: field `hidden_size`: `\"big\"` is not a positive integer"
        );
        let e = err(&LLAMA_3B.replace("500000.0", "-1"));
        assert!(e.contains("field `rope_theta`"), "{e}");
        let e = err(&LLAMA_3B.replace("\"head_dim\"", "\"num_local_experts\": 8, \"head_dim\""));
        assert!(e.contains("field `num_local_experts`: 8 experts"), "{e}");
        assert!(err("[1]").contains("not a JSON object"));
        assert!(err("{").starts_with("c.json: not a JSON config.json"));
        // Dimensions that do not fit together are refused when the shape is made.
        let p = shape_params(
            &LLAMA_3B.replace("\"num_key_value_heads\": 8", "\"num_key_value_heads\": 7"),
            "c",
        )
        .unwrap();
        assert!(
            config(&p)
                .unwrap_err()
                .contains("kv_heads=7 must divide heads=24")
        );
    }
}
