//! The `llm` results as llama-bench prints its own: one Markdown row per model, backend and test
//! (`pp512`, `tg128`), with the model's size and parameter count and t/s ± its standard
//! deviation, so that a gpufleet row can be put beside a llama-bench row of the same card.
//!
//! llama-bench's columns, in its order: model (`llama 1B F16`, `qwen2 7B F16`), size (of the
//! weights, in GiB, or MiB below one), params (`1.24 B`, or `3.95 M` below a billion), backend,
//! test, t/s; then `device` (agent and device id), which llama-bench leaves out because it runs
//! on one. A test is `pp<prompt>` (prefill) or `tg<gen>` (decode), with
//! ` @ d<context>` where positions were already in the cache (llama-bench's `-d` depth) and
//! ` ×<batch>` where several sequences ran at once (llama-bench has no such test). The t/s
//! deviation is the time's relative standard deviation applied to the median's rate (to first
//! order the same spread), since a result stores its times, not a rate per repetition.

use crate::store::ResultRow;
use crate::table::Table;
use gpufleet_kernels::Dtype;
use gpufleet_kernels::llm::{Config, LlmModel, SHAPE_PARAMS};

/// The table's headers, llama-bench's first.
pub const HEADERS: [&str; 7] = [
    "model", "size", "params", "backend", "test", "t/s", "device",
];

const MIB: f64 = (1u64 << 20) as f64;
const GIB: f64 = (1u64 << 30) as f64;

/// The table of the `ok` `llm` results among `rows`, and how many rows it left out (other kernels,
/// results that are not `ok` or have no rate). Rows sorted by model, dtype, backend, device, then
/// prefill before decode.
pub fn llama_bench(rows: &[ResultRow]) -> (Table, usize) {
    let mut lines: Vec<(Key, Vec<String>)> = rows.iter().filter_map(line).collect();
    let left_out = rows.len() - lines.len();
    lines.sort_by(|a, b| a.0.cmp(&b.0));
    let mut t = Table::new(&HEADERS);
    for (_, cells) in lines {
        t.push(cells);
    }
    (t, left_out)
}

/// The sort key of a line: model, its weights, dtype, backend, device, phase (prefill first), the
/// test's numbers.
type Key = (i64, usize, String, String, String, u8, [i64; 3]);

/// One result's line, or `None` where it is not an `ok` `llm` result with a rate.
fn line(r: &ResultRow) -> Option<(Key, Vec<String>)> {
    let rec = &r.record;
    if rec.kernel != "llm" || rec.status != "ok" {
        return None;
    }
    let rate = rec.metric_value.filter(|v| v.is_finite() && *v > 0.0)?;
    let param = |name: &str| rec.params.get(name).copied().unwrap_or(0);
    let config = Config::from_params(param).ok()?;
    // A named model's label unless a dimension of it was given (custom, or a cut-down one).
    let named =
        LlmModel::from_index(param("model")).filter(|_| SHAPE_PARAMS.iter().all(|n| param(n) == 0));
    let prefill = rec.variant == "prefill";
    let (tokens, batch, context) = (
        param(if prefill { "prompt" } else { "gen" }),
        param("batch"),
        param("context"),
    );
    let mut test = format!("{}{tokens}", if prefill { "pp" } else { "tg" });
    if context > 0 {
        test.push_str(&format!(" @ d{context}"));
    }
    if batch > 1 {
        test.push_str(&format!(" ×{batch}"));
    }
    let elements = config.weights_len();
    let size = Dtype::parse(&rec.dtype).map_or("-".to_string(), |d| {
        let bytes = config.stored_bytes(d) as f64;
        if bytes < GIB {
            format!("{:.2} MiB", bytes / MIB)
        } else {
            format!("{:.2} GiB", bytes / GIB)
        }
    });
    let spread = match (rec.stddev_s, rec.median_s) {
        (Some(sd), Some(median)) if median > 0.0 => format!(" ± {:.2}", rate * sd / median),
        _ => String::new(),
    };
    let cells = vec![
        format!(
            "{} {}",
            named.map_or_else(|| size_label(elements), |m| model_label(m).to_string()),
            rec.dtype.to_uppercase()
        ),
        size,
        if elements < 1_000_000_000 {
            format!("{:.2} M", elements as f64 / 1e6)
        } else {
            format!("{:.2} B", elements as f64 / 1e9)
        },
        backend_name(&rec.backend).to_string(),
        test,
        format!("{rate:.2}{spread}"),
        format!("{}:{}", r.agent, rec.device_id),
    ];
    let key = (
        param("model"),
        elements,
        rec.dtype.clone(),
        rec.backend.clone(),
        cells[6].clone(),
        u8::from(!prefill),
        [tokens, context, batch],
    );
    Some((key, cells))
}

/// The model as llama-bench names a GGUF file's: its architecture and size label (`llama 1B`,
/// `qwen2 7B`; Mistral's files say `llama`); tiny and small by their names.
fn model_label(model: LlmModel) -> &'static str {
    match model {
        LlmModel::Tiny => "llama tiny",
        LlmModel::Small => "llama small",
        LlmModel::B1 => "llama 1B",
        LlmModel::B3 => "llama 3B",
        LlmModel::B8 => "llama 8B",
        LlmModel::Qwen7b => "qwen2 7B",
        LlmModel::Mistral7b => "llama 7B",
    }
}

/// A shape given by its dimensions, labelled as llama.cpp labels a file by its parameter count
/// (`llama 4B`, `llama 135M`).
fn size_label(elements: usize) -> String {
    if elements < 1_000_000_000 {
        format!("llama {:.0}M", elements as f64 / 1e6)
    } else {
        format!("llama {:.0}B", elements as f64 / 1e9)
    }
}

/// The backend as llama-bench names its own (`Vulkan`, `CPU`).
fn backend_name(backend: &str) -> &str {
    match backend {
        "vulkan" => "Vulkan",
        "opencl" => "OpenCL",
        "cpu" => "CPU",
        "hip" => "HIP",
        other => other,
    }
}
