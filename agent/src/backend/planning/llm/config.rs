//! The configuration a transformer's launches record with the result (OpenCL and HIP).

use super::{LlmGroups, LlmLaunch, MATMUL_ROWS};
use gpufleet_kernels::llm::LlmGraph;
use gpufleet_kernels::{Dtype, Problem};
use std::collections::BTreeMap;

/// The configuration recorded with the result: launches, group sizes, how the projections ran
/// and the weights' storage.
pub fn config(
    problem: &Problem,
    g: &LlmGraph,
    launches: &[LlmLaunch],
    groups: LlmGroups,
) -> BTreeMap<String, String> {
    let count = |name: &str| launches.iter().filter(|l| l.kernel == name).count();
    // The packed team gemvs by their teams' width (`llm_qgemv_team_<lanes>`).
    let mut widths = BTreeMap::<usize, usize>::new();
    for l in launches {
        if let Some(w) = l.kernel.strip_prefix("llm_qgemv_team_") {
            *widths.entry(w.parse().unwrap_or(0)).or_default() += 1;
        }
    }
    let quant_teams: usize = widths.values().sum();
    let team = count("llm_gemv_team") + quant_teams;
    let quantized = count("llm_qgemv") + quant_teams;
    let gemv = count("llm_gemv") + count("llm_gemv_team") + count("llm_gemv_rows") + quantized;
    let tile = groups.matmul.unwrap_or(0);
    let tiled_quantized = count("llm_qmatmul") + count("llm_qmatmul_64");
    let tiled = count("llm_matmul") + count("llm_matmul_64") + tiled_quantized;
    let half_rows = count("llm_matmul_64") + count("llm_qmatmul_64");
    let split = count("llm_attention_merge");
    let weights = match problem.dtype {
        Dtype::F32 => "f32",
        Dtype::F16 => "f16",
        // The packed layout: the matrices in blocks, the norms f32.
        Dtype::Q8_0 => "q8_0 blocks, f32 norms",
        Dtype::Q4_0 => "q4_0 blocks, f32 norms",
    };
    let mut config = BTreeMap::from([
        ("launches".to_string(), launches.len().to_string()),
        ("group".to_string(), groups.flat.to_string()),
        ("attention_group".to_string(), groups.attention.to_string()),
        (
            "attention".to_string(),
            format!(
                "{} tiled ({} rows a group), {} by row",
                count("llm_attention_tiled"),
                groups.attention_tiled.unwrap_or(0),
                count("llm_attention")
            ),
        ),
        (
            "projections".to_string(),
            format!(
                "{tiled} tiled ({tile}x{tile}, {MATMUL_ROWS}+ rows; {half_rows} of them {}x{tile}{}), \
                 {gemv} gemv ({team} by teams{})",
                tile / 2,
                if tiled_quantized > 0 {
                    format!("; {tiled_quantized} of quantized blocks")
                } else {
                    String::new()
                },
                if quantized > 0 {
                    format!(", {quantized} of quantized blocks")
                } else {
                    String::new()
                },
            ),
        ),
        ("weights".to_string(), weights.to_string()),
        (
            "folded_steps".to_string(),
            g.steps
                .len()
                .saturating_sub(launches.len() - split)
                .to_string(),
        ),
    ]);
    if quant_teams > 0 {
        let widths: Vec<String> = widths
            .iter()
            .map(|(w, c)| format!("{c} of {w} work-items"))
            .collect();
        config.insert("quant_teams".into(), widths.join(", "));
    }
    if split > 0 {
        config.insert(
            "attention_split".into(),
            format!("{split} split along the sequence, merged by log-sum-exp"),
        );
    }
    config
}
