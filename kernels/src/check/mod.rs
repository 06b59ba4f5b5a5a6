//! Validation: a backend's output against an f64 reference, element by element, within a tolerance.
//!
//! Each kernel family (see `catalog/`) has a *visitor* that computes reference values (and the
//! tolerance of each) for the elements of a [`harness::Plan`]: all of them, or a deterministic
//! sample when the full reference would cost more than [`harness::FULL_CHECK_OPS`] (a 4096³ GEMM
//! would take seconds in f64; its sample takes milliseconds). The harness does the rest once for
//! everyone: shape and kind checks, a full NaN/Inf scan of the output (cheap, so never sampled),
//! the comparison and the message ([`Problem::check`], here). The networks validate layer by layer
//! (`model.rs`).
//!
//! Tolerances are derived from how an fp32 implementation accumulates error, not tuned to one backend:
//! dot products get `c·2^-24·Σ|a·b|` (the standard bound, `c = max(16, 4·sqrt(k))` for the
//! probabilistic growth) plus the output storage rounding; row reductions get `(8+sqrt(cols))·2^-24`
//! relative; exact operations a few ulps; transcendental activations `1e-5` absolute and relative, which
//! admits GPUs' fast math.

pub(crate) mod harness;
pub(crate) mod model;

use crate::catalog::Problem;
use crate::types::Buffer;
use harness::{Comparer, Validation, format_index};

/// Checks that `inputs` have the problem's shape; a mismatch is a caller bug reported as a failure.
fn check_inputs(problem: &Problem, inputs: &[Buffer]) -> Result<(), String> {
    let kinds = problem.input_kinds();
    let lens = problem.input_lens();
    if inputs.len() != kinds.len() {
        return Err(format!(
            "got {} input buffers, expected {}",
            inputs.len(),
            kinds.len()
        ));
    }
    for (i, (buf, (kind, len))) in inputs.iter().zip(kinds.iter().zip(&lens)).enumerate() {
        if buf.kind() != *kind || buf.len() != *len {
            return Err(format!(
                "input {i} is {} with {} elements, expected {} with {len}",
                buf.kind().name(),
                buf.len(),
                kind.name()
            ));
        }
    }
    Ok(())
}

/// Compares `output` with the reference computed from `inputs`; never panics on bad buffers.
impl Problem {
    /// Compares `output` with the f64 reference computed from `inputs`; see this module.
    ///
    /// Defined here rather than in `problem.rs` so the problem module does not depend on the
    /// references (they depend on it).
    pub fn check(&self, inputs: &[Buffer], output: &Buffer) -> Validation {
        let total = self.output_len();
        if let Err(message) = check_inputs(self, inputs) {
            return Validation::failed(total as u64, message);
        }
        if output.kind() != self.output_kind() || output.len() != total {
            return Validation::failed(
                total as u64,
                format!(
                    "output is {} with {} elements, expected {} with {total}",
                    output.kind().name(),
                    output.len(),
                    self.output_kind().name()
                ),
            );
        }
        let family = self.kernel.id.family();
        let dims = family.output_dims(self);
        if let Buffer::F32(out) = output
            && let Some(i) = out.iter().position(|v| !v.is_finite())
        {
            return Validation::failed(
                total as u64,
                format!(
                    "element {}: got {} (non-finite output)",
                    format_index(i, &dims),
                    out[i]
                ),
            );
        }
        if let Some(whole) = family.validate(self, inputs, output) {
            return whole;
        }
        let Buffer::F32(out) = output else {
            return Validation::failed(
                total as u64,
                format!("{} output must be f32", self.kernel.name),
            );
        };
        let f32s: Vec<&[f32]> = inputs.iter().filter_map(Buffer::as_f32).collect();
        let mut cmp = Comparer::new(out, &dims);
        match family.visit(self, &f32s, &mut |i, e, t| cmp.expect(i, e, t)) {
            Ok(sampled) => cmp.finish(total, sampled),
            Err(message) => Validation::failed(total as u64, message),
        }
    }
}

/// The full reference output rounded to f32 (tests only: it is what a perfect backend returns).
#[cfg(test)]
pub(crate) fn reference_output(problem: &Problem, inputs: &[Buffer]) -> Buffer {
    problem.kernel.id.family().reference(problem, inputs)
}

#[cfg(test)]
mod tests;
