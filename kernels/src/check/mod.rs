//! Validation: a backend's output against an f64 reference, element by element, within a tolerance.
//!
//! Each kernel family has a *visitor* that computes reference values (and the tolerance of each) for
//! the elements of a [`Plan`]: all of them, or a deterministic sample when the full reference would cost
//! more than [`FULL_CHECK_OPS`] (a 4096³ GEMM would take seconds in f64; its sample takes milliseconds).
//! The harness here does the rest once for everyone: shape and kind checks, a full NaN/Inf scan of the
//! output (cheap, so never sampled), the comparison and the message.
//!
//! Tolerances are derived from how an fp32 implementation accumulates error, not tuned to one backend:
//! dot products get `c·2^-24·Σ|a·b|` (the standard bound, `c = max(16, 4·sqrt(k))` for the
//! probabilistic growth) plus the output storage rounding; row reductions get `(8+sqrt(cols))·2^-24`
//! relative; exact operations a few ulps; transcendental activations `1e-5` absolute and relative, which
//! admits GPUs' fast math.

mod dense;
pub(crate) mod model;
mod pointwise;
mod rows;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;

use crate::catalog::KernelId;
use crate::problem::Problem;
use crate::types::Buffer;

/// Above this many reference operations the check samples instead of computing every element.
pub(crate) const FULL_CHECK_OPS: f64 = 2e8;
/// Reference operations a sampled check aims to spend.
pub(crate) const SAMPLE_OPS: f64 = 2e7;
/// Unit roundoff of f32 (half an ulp at 1.0).
pub(crate) const EPS32: f64 = 1.0 / 16_777_216.0;
/// Unit roundoff of fp16.
pub(crate) const EPS16: f64 = 1.0 / 2048.0;

/// Outcome of comparing a backend's output with the f64 reference.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Validation {
    /// Every checked element within tolerance, no NaN/Inf, right length and kind.
    pub passed: bool,
    /// Largest `|out - ref|` over the checked elements (`f64::MAX` for a NaN/Inf output, so the value
    /// stays representable in JSON).
    pub max_abs_error: f64,
    /// Largest `|out - ref| / tol`; at most 1 when passed (`f64::MAX` for NaN/Inf).
    pub worst_ratio: f64,
    /// Elements compared with the reference.
    pub elements_checked: u64,
    /// Elements in the expected output.
    pub elements_total: u64,
    /// Whether only a deterministic sample was compared because the full reference would be too slow.
    pub sampled: bool,
    /// What failed where (`element [12,7]: got 1.5, expected 0.25 (tol 1e-5)`), or a summary.
    pub message: String,
}

impl Validation {
    fn failed(total: u64, message: String) -> Validation {
        Validation {
            passed: false,
            max_abs_error: f64::MAX,
            worst_ratio: f64::MAX,
            elements_checked: 0,
            elements_total: total,
            sampled: false,
            message,
        }
    }
}

/// Which elements a visitor computes.
#[derive(Debug)]
pub(crate) enum Plan {
    /// Every element.
    Full,
    /// A deterministic sample; the visitor draws from this generator and always includes the
    /// boundaries (first/last rows, corners) where tiling bugs live.
    Sampled(Pcg64),
}

impl Plan {
    /// `Full` when `ops` is affordable, else a sample seeded from the problem's spec key.
    pub(crate) fn for_cost(problem: &Problem, ops: f64) -> Plan {
        if ops <= FULL_CHECK_OPS {
            return Plan::Full;
        }
        // FNV-1a of the spec key: deterministic per problem, independent of the input seed.
        let seed = problem
            .spec_key_prefix()
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
        Plan::Sampled(Pcg64::seed_from_u64(seed))
    }

    pub(crate) fn is_sampled(&self) -> bool {
        matches!(self, Plan::Sampled(_))
    }
}

/// `count` distinct sorted indices in `0..total`: `must` (clamped into range) plus random ones.
pub(crate) fn pick(rng: &mut Pcg64, total: usize, count: usize, must: &[usize]) -> Vec<usize> {
    let mut picked: Vec<usize> = must
        .iter()
        .map(|&i| i.min(total.saturating_sub(1)))
        .collect();
    if count >= total {
        return (0..total).collect();
    }
    picked.sort_unstable();
    picked.dedup();
    let mut tries = 0;
    while picked.len() < count && tries < count * 8 {
        let i = rng.random_range(0..total);
        if let Err(pos) = picked.binary_search(&i) {
            picked.insert(pos, i);
        }
        tries += 1;
    }
    picked
}

/// An error `err` as a fraction of its tolerance `tol`: 0 for an exact value, `f64::MAX` for any
/// error where nothing is tolerated and for a NaN (a NaN output never passes), above 1 when out of
/// tolerance.
pub(crate) fn error_ratio(err: f64, tol: f64) -> f64 {
    if err == 0.0 {
        0.0
    } else if err.is_nan() || tol <= 0.0 {
        f64::MAX
    } else {
        err / tol
    }
}

/// Receives reference values from a visitor and compares them with the output.
pub(crate) struct Comparer<'a> {
    out: &'a [f32],
    dims: &'a [usize],
    checked: u64,
    bad: u64,
    max_abs: f64,
    worst: f64,
    first_bad: Option<String>,
}

impl<'a> Comparer<'a> {
    fn new(out: &'a [f32], dims: &'a [usize]) -> Comparer<'a> {
        Comparer {
            out,
            dims,
            checked: 0,
            bad: 0,
            max_abs: 0.0,
            worst: 0.0,
            first_bad: None,
        }
    }

    /// Compares output element `index` (flat) with `expected` within `tol`.
    #[inline]
    pub(crate) fn expect(&mut self, index: usize, expected: f64, tol: f64) {
        let got = f64::from(self.out[index]);
        let err = (got - expected).abs();
        self.checked += 1;
        let ratio = error_ratio(err, tol);
        if err > self.max_abs {
            self.max_abs = err;
        }
        self.worst = self.worst.max(ratio);
        if ratio > 1.0 {
            self.bad += 1;
            if self.first_bad.is_none() {
                self.first_bad = Some(format!(
                    "element {}: got {got}, expected {expected} (tol {tol:.3e})",
                    format_index(index, self.dims)
                ));
            }
        }
    }
}

/// `[i,j,...]` of flat `index` in a row-major array of shape `dims`.
pub(crate) fn format_index(index: usize, dims: &[usize]) -> String {
    let mut parts = vec![0usize; dims.len()];
    let mut rest = index;
    for (part, &dim) in parts.iter_mut().zip(dims).rev() {
        *part = rest % dim.max(1);
        rest /= dim.max(1);
    }
    let parts: Vec<String> = parts.iter().map(usize::to_string).collect();
    format!("[{}]", parts.join(","))
}

/// Output shape for messages (`[m, n]` for gemm, `[rows, cols]`, NCHW for conv2d).
fn output_dims(problem: &Problem) -> Vec<usize> {
    match problem.id() {
        KernelId::Gemm => vec![problem.uparam("m"), problem.uparam("n")],
        KernelId::Softmax
        | KernelId::LayerNorm
        | KernelId::RmsNorm
        | KernelId::LayerNormRmsNormFused => vec![problem.uparam("rows"), problem.uparam("cols")],
        KernelId::Conv2d => {
            let c = problem.conv_shape();
            vec![c.batch, c.filters, c.out_h, c.out_w]
        }
        _ => vec![problem.output_len()],
    }
}

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
        check(self, inputs, output)
    }
}

fn check(problem: &Problem, inputs: &[Buffer], output: &Buffer) -> Validation {
    let total = problem.output_len();
    if let Err(message) = check_inputs(problem, inputs) {
        return Validation::failed(total as u64, message);
    }
    if output.kind() != problem.output_kind() || output.len() != total {
        return Validation::failed(
            total as u64,
            format!(
                "output is {} with {} elements, expected {} with {total}",
                output.kind().name(),
                output.len(),
                problem.output_kind().name()
            ),
        );
    }
    let out = match output {
        Buffer::U32(out) => return pointwise::check_memlat(problem, inputs, out),
        Buffer::F32(out) => out,
    };
    let dims = output_dims(problem);
    if let Some(i) = out.iter().position(|v| !v.is_finite()) {
        return Validation::failed(
            total as u64,
            format!(
                "element {}: got {} (non-finite output)",
                format_index(i, &dims),
                out[i]
            ),
        );
    }
    if problem.net().is_some() {
        let f32s: Vec<&[f32]> = inputs.iter().filter_map(Buffer::as_f32).collect();
        return model::check_model(problem, &f32s, out);
    }
    let mut cmp = Comparer::new(out, &dims);
    let sampled = match visit(problem, inputs, &mut |i, e, t| cmp.expect(i, e, t)) {
        Ok(sampled) => sampled,
        Err(message) => return Validation::failed(total as u64, message),
    };
    let passed = cmp.bad == 0 && cmp.checked > 0;
    let scope = if sampled {
        format!("{} sampled of {total}", cmp.checked)
    } else {
        format!("all {total}")
    };
    let message = match &cmp.first_bad {
        Some(first) => format!(
            "{first}; {} of {} checked elements out of tolerance ({scope})",
            cmp.bad, cmp.checked
        ),
        None if cmp.checked == 0 => "no element was checked".to_string(),
        None => format!(
            "max |err| {:.3e}, {:.3} of tolerance over {scope} elements",
            cmp.max_abs, cmp.worst
        ),
    };
    Validation {
        passed,
        max_abs_error: cmp.max_abs,
        worst_ratio: cmp.worst,
        elements_checked: cmp.checked,
        elements_total: total as u64,
        sampled,
        message,
    }
}

/// Runs the kernel's visitor; returns whether it sampled, or why the reference cannot be computed.
fn visit(
    problem: &Problem,
    inputs: &[Buffer],
    f: &mut impl FnMut(usize, f64, f64),
) -> Result<bool, String> {
    let f32s: Vec<&[f32]> = inputs.iter().filter_map(Buffer::as_f32).collect();
    match problem.id() {
        KernelId::Gemm => Ok(dense::gemm(problem, &f32s, f)),
        KernelId::Conv2d => Ok(dense::conv2d(problem, &f32s, f)),
        KernelId::Softmax
        | KernelId::LayerNorm
        | KernelId::RmsNorm
        | KernelId::LayerNormRmsNormFused => Ok(rows::check_rows(problem, &f32s, f)),
        KernelId::MemlatCpu => Err("memlat_cpu output must be u32".to_string()),
        _ => Ok(pointwise::elementwise(problem, &f32s, f)),
    }
}

/// The full reference output rounded to f32 (tests only: it is what a perfect backend returns).
#[cfg(test)]
pub(crate) fn reference_output(problem: &Problem, inputs: &[Buffer]) -> Buffer {
    if problem.output_kind() == crate::types::BufferKind::U32 {
        return Buffer::U32(vec![pointwise::memlat_reference(problem, inputs).unwrap()]);
    }
    let f32s: Vec<&[f32]> = inputs.iter().filter_map(Buffer::as_f32).collect();
    if problem.net().is_some() {
        return Buffer::F32(model::reference_arena(&problem.graph(), f32s[0], f32s[1]));
    }
    let mut out = vec![f32::NAN; problem.output_len()];
    let mut store = |i: usize, e: f64, _t: f64| out[i] = e as f32;
    match problem.id() {
        KernelId::Gemm => dense::gemm_full(problem, &f32s, &mut store),
        KernelId::Conv2d => dense::conv2d_full(problem, &f32s, &mut store),
        _ => {
            assert!(!visit(problem, inputs, &mut store).unwrap());
        }
    }
    Buffer::F32(out)
}

#[cfg(test)]
mod tests;
