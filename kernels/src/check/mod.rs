//! Validation: a backend's output against an f64 reference, element by element, within a tolerance.
//!
//! Each kernel family (see `catalog/`) has a *visitor* that computes reference values (and the
//! tolerance of each) for the elements of a [`harness::Plan`]: all of them, or a deterministic
//! sample when the full reference would cost more than [`harness::FULL_CHECK_OPS`] (a 4096³ GEMM
//! would take seconds in f64; its sample takes milliseconds). The harness does the rest once for
//! everyone: shape and kind checks, a full NaN/Inf scan of the output (cheap, so never sampled),
//! the comparison and the message (`harness.rs`; [`Problem::check`] in `problem.rs` runs it). The
//! networks validate layer by layer (`model.rs`).
//!
//! Tolerances are derived from how an fp32 implementation accumulates error, not tuned to one backend:
//! dot products get `c·2^-24·Σ|a·b|` (the standard bound, `c = max(16, 4·sqrt(k))` for the
//! probabilistic growth) plus the output storage rounding; row reductions get `(8+sqrt(cols))·2^-24`
//! relative; exact operations a few ulps; transcendental activations `1e-5` absolute and relative, which
//! admits GPUs' fast math.

pub(crate) mod harness;
pub(crate) mod llm;
pub(crate) mod model;

#[cfg(test)]
mod tests;
