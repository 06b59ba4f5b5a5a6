//! Validation of a transformer run (`llm` and its layer kernels): every checked step of the graph
//! against the f64 reference of that step from the backend's own inputs to it (a sample of its
//! elements; the logits of every row of a checked pass), and the blocks whose layers are not kept
//! one by one as whole blocks, in graph order. The first step out of tolerance is named.

use rand::SeedableRng;
use rand_pcg::Pcg64;

use super::harness::{Tally, Validation, pick};
use crate::Buffer;
use crate::llm::{
    LlmGraph, Op, PackedLayout, Step, Tensors, Weights, block_row, check_width, output_index,
    step_element,
};
use crate::quant::BlockFormat;

/// Elements of a step compared.
const SAMPLES_PER_STEP: usize = 256;
/// Elements of each row of the logits compared (with the row's first and last).
const SAMPLES_PER_LOGITS_ROW: usize = 12;

/// The `(row, column)` pairs of `step` compared.
fn samples(step: &Step, rng: &mut Pcg64) -> Vec<(usize, usize)> {
    let width = check_width(&step.op);
    let rows = step.rows.rows;
    if step.is_logits() {
        // Every row of the logits.
        return (0..rows)
            .flat_map(|r| {
                pick(rng, width, SAMPLES_PER_LOGITS_ROW, &[0, width - 1])
                    .into_iter()
                    .map(move |j| (r, j))
            })
            .collect();
    }
    let total = rows * width;
    pick(rng, total, SAMPLES_PER_STEP, &[0, total - 1])
        .into_iter()
        .map(|i| (i / width, i % width))
        .collect()
}

fn describe(g: &LlmGraph, i: usize) -> String {
    let s = &g.steps[i];
    format!(
        "step {} `{}` ({}, {} of {})",
        i + 1,
        s.name,
        s.op.kind(),
        i + 1,
        g.steps.len()
    )
}

/// Validates the arena of a transformer graph: `inputs` are the problem's inputs as f32 and
/// `weights` its weights (as generated, before any debug perturbation), `arena` the backend's
/// output.
pub(crate) fn check_llm(
    g: &LlmGraph,
    inputs: &[&[f32]],
    weights: Weights<'_>,
    arena: &[f32],
) -> Validation {
    let total = arena.len() as u64;
    let t = Tensors { inputs, arena };
    let mut tally = Tally::default();
    let fail = |tally: &Tally, message: String| tally.outcome(total, true, message);
    let mut rng = Pcg64::seed_from_u64(0x6c6c_6d73 ^ g.steps.len() as u64);
    let (mut steps, mut blocks) = (0usize, 0usize);
    for (i, step) in g.steps.iter().enumerate() {
        if step.check {
            steps += 1;
            for (r, j) in samples(step, &mut rng) {
                let (v, tol) = step_element(step, &t, weights, r, j);
                let got = t
                    .at(output_index(step, r, j))
                    .first()
                    .map_or(f64::NAN, |&x| f64::from(x));
                if tally.misses(got, v, tol) {
                    let what = match step.op {
                        Op::Copy { .. } => format!("element {j}"),
                        _ => {
                            let (seq, pos) = step.rows.of(r);
                            format!("row {r} (sequence {seq}, position {pos}), element {j}")
                        }
                    };
                    return fail(
                        &tally,
                        format!(
                            "{} diverges first: {what}: got {got}, expected {v} (tol {tol:.3e})",
                            describe(g, i)
                        ),
                    );
                }
            }
        }
        for b in g.blocks.iter().filter(|b| b.at == i) {
            blocks += 1;
            let last = b.rows.rows - 1;
            let mut rows = vec![last];
            if last > 0 {
                rows.push(pick(&mut rng, last, 1, &[]).first().copied().unwrap_or(0));
            }
            for r in rows {
                let reference = block_row(g, b, &t, weights, r);
                let got = t.at(b.out.at(r * g.config.dim));
                for (j, (v, tol)) in reference.iter().enumerate() {
                    let x = got.get(j).map_or(f64::NAN, |&x| f64::from(x));
                    if tally.misses(x, *v, *tol) {
                        let (seq, pos) = b.rows.of(r);
                        return fail(
                            &tally,
                            format!(
                                "block `{}` (checked whole after step {}) diverges first: row {r} (sequence {seq}, position {pos}), element {j}: got {x}, expected {v} (tol {tol:.3e})",
                                b.name,
                                i + 1
                            ),
                        );
                    }
                }
            }
        }
    }
    let whole = if blocks > 0 {
        format!(" and {blocks} whole blocks")
    } else {
        String::new()
    };
    let message = format!(
        "{steps} steps{whole} sampled against their f64 reference from the backend's own inputs: max |err| {:.3e}, {:.3} of tolerance",
        tally.max_abs, tally.worst
    );
    tally.outcome(total, false, message)
}

/// Runs `then` on `inputs` (a transformer problem's) as the validation reads them: every input
/// as f32 (the packed weights as an empty one), and the weights, packed by the graph's layout in
/// `format` when quantized.
pub(crate) fn with_weights<T>(
    g: &LlmGraph,
    format: Option<BlockFormat>,
    inputs: &[Buffer],
    then: impl FnOnce(&[&[f32]], Weights<'_>) -> T,
) -> T {
    let f32s: Vec<&[f32]> = inputs.iter().map(|b| b.as_f32().unwrap_or(&[])).collect();
    let layout = format.map(|f| PackedLayout::of(g, f));
    then(
        &f32s,
        Weights::of_inputs(inputs, g.weights_input, layout.as_ref()),
    )
}

/// The arena of a perfect fp32 backend: each step in f64 from the rounded earlier tensors, then
/// rounded (tests only).
#[cfg(test)]
pub fn reference_arena(g: &LlmGraph, inputs: &[&[f32]], weights: Weights<'_>) -> Vec<f32> {
    let mut arena = vec![0f32; g.arena_len];
    for step in &g.steps {
        let width = check_width(&step.op);
        let rows = match step.op {
            Op::Copy { .. } => 1,
            _ => step.rows.rows,
        };
        let mut out = Vec::with_capacity(rows * width);
        {
            let t = Tensors {
                inputs,
                arena: &arena,
            };
            for r in 0..rows {
                for j in 0..width {
                    let (v, _) = step_element(step, &t, weights, r, j);
                    out.push((output_index(step, r, j), v as f32));
                }
            }
        }
        for (at, v) in out {
            if at.buf == crate::llm::Buf::Arena {
                arena[at.off] = v;
            }
        }
    }
    arena
}
