//! The pieces every validation shares: the [`Validation`] outcome, the full-or-sampled decision
//! ([`Plan`]) and sample picking, the comparison of an output with reference values
//! ([`Comparer`]), and the f32/fp16 unit roundoffs the tolerances are built from.
//!
//! Pure and below the catalog: the kernel families compute their references with these pieces, and
//! `check/mod.rs` runs a whole validation through them.

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;

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
    /// A failure before any element was compared (`total` elements expected), with why.
    pub(crate) fn failed(total: u64, message: String) -> Validation {
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
    /// `Full` when `ops` is affordable, else a sample seeded from `key` (the problem's spec key
    /// without its mode, so a sample does not depend on the input seed or on how the run is timed).
    pub(crate) fn for_cost(key: &str, ops: f64) -> Plan {
        if ops <= FULL_CHECK_OPS {
            return Plan::Full;
        }
        // FNV-1a of the key: deterministic per problem.
        let seed = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
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

/// The running figures of a graph's validation (a network's layers, a transformer's steps): elements
/// compared, the largest error and the largest error-to-tolerance ratio.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) checked: u64,
    pub(crate) max_abs: f64,
    pub(crate) worst: f64,
}

impl Tally {
    /// Records one comparison; whether it is out of tolerance.
    pub(crate) fn misses(&mut self, got: f64, expected: f64, tol: f64) -> bool {
        let err = (got - expected).abs();
        self.checked += 1;
        let ratio = error_ratio(err, tol);
        self.max_abs = self.max_abs.max(if err.is_nan() { f64::MAX } else { err });
        self.worst = self.worst.max(ratio);
        ratio > 1.0
    }

    /// The sampled validation of `total` elements so far: passed when nothing missed and something
    /// was compared (`failed`: something missed), with `message`.
    pub(crate) fn outcome(&self, total: u64, failed: bool, message: String) -> Validation {
        Validation {
            passed: !failed && self.checked > 0,
            max_abs_error: self.max_abs,
            worst_ratio: self.worst,
            elements_checked: self.checked,
            elements_total: total,
            sampled: true,
            message,
        }
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
    pub(crate) fn new(out: &'a [f32], dims: &'a [usize]) -> Comparer<'a> {
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

    /// The outcome over `total` output elements, of which a sample was compared when `sampled`.
    pub(crate) fn finish(self, total: usize, sampled: bool) -> Validation {
        let passed = self.bad == 0 && self.checked > 0;
        let scope = if sampled {
            format!("{} sampled of {total}", self.checked)
        } else {
            format!("all {total}")
        };
        let message = match &self.first_bad {
            Some(first) => format!(
                "{first}; {} of {} checked elements out of tolerance ({scope})",
                self.bad, self.checked
            ),
            None if self.checked == 0 => "no element was checked".to_string(),
            None => format!(
                "max |err| {:.3e}, {:.3} of tolerance over {scope} elements",
                self.max_abs, self.worst
            ),
        };
        Validation {
            passed,
            max_abs_error: self.max_abs,
            worst_ratio: self.worst,
            elements_checked: self.checked,
            elements_total: total as u64,
            sampled,
            message,
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

/// `f(0)`, …, `f(n - 1)` in order, across the host's cores when the items read many elements
/// together (`n · cost`, `cost` an item's): the references of a whole block of a large model.
pub(crate) fn par_map<T: Send>(n: usize, cost: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    if threads == 1 || n.saturating_mul(cost) < 1 << 20 {
        return (0..n).map(f).collect();
    }
    let per = n.div_ceil(threads);
    let f = &f;
    std::thread::scope(|s| {
        let parts: Vec<_> = (0..n)
            .step_by(per)
            .map(|start| s.spawn(move || (start..(start + per).min(n)).map(f).collect::<Vec<T>>()))
            .collect();
        parts
            .into_iter()
            .flat_map(|p| p.join().expect("a reference thread panicked"))
            .collect()
    })
}

#[cfg(test)]
mod par_tests {
    use super::par_map;

    #[test]
    fn par_map_keeps_the_order_of_one_thread() {
        let f = |j: usize| (j * j) % 7919;
        for (n, cost) in [(10, 1), (1000, 1 << 12), (1003, 1 << 20), (3, 1 << 30)] {
            let want: Vec<usize> = (0..n).map(f).collect();
            assert_eq!(par_map(n, cost, f), want, "{n} items of {cost}");
        }
    }
}
