//! How a spec is measured, as opposed to what it computes: the timing [`Mode`] and the one set of
//! [`RunDefaults`] that suite files, the coordinator's CLI and the agent all read.
//!
//! These live in the kernels crate because every layer needs the same answer: a suite file that
//! leaves `timeout_s` out, a `gpufleet run` without `--timeout-s` and a RunSpec with `timeout_s = 0`
//! must all mean the same number, written once here.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What a run's timed window contains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Mode {
    /// Inputs already on the device; only the kernel is timed.
    #[default]
    ComputeOnly,
    /// Upload, kernel and readback are timed together.
    WithTransfers,
}

impl Mode {
    /// Every mode, in display order.
    pub const ALL: [Mode; 2] = [Mode::ComputeOnly, Mode::WithTransfers];

    /// Canonical name (`"compute_only"`, `"with_transfers"`), as used in spec keys, suites and the CLI.
    pub fn name(self) -> &'static str {
        match self {
            Mode::ComputeOnly => "compute_only",
            Mode::WithTransfers => "with_transfers",
        }
    }

    /// Parses a canonical name; `None` for anything else (callers name the field in their error).
    pub fn parse(s: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == s.trim())
    }

    /// The known names, for error messages (`"compute_only, with_transfers"`).
    pub fn known() -> String {
        Mode::ALL.map(Mode::name).join(", ")
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        Mode::parse(s).ok_or_else(|| format!("unknown mode `{s}` (known: {})", Mode::known()))
    }
}

impl Serialize for Mode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Mode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Measurement settings used wherever a run leaves one out: a suite file without the field, the CLI
/// without the flag, a RunSpec with the field at 0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunDefaults {
    /// Untimed iterations before measuring (caches, clocks, JIT).
    pub warmup: u32,
    /// Iterations measured at least, however long they take.
    pub min_iterations: u32,
    /// Seconds measured at least, so short kernels get enough samples.
    pub min_seconds: f64,
    /// Iterations measured at most, so tiny kernels stop.
    pub max_iterations: u32,
    /// Wall-clock limit of the whole run, after which the worker is killed.
    pub timeout_s: f64,
    /// Half-width of the 95% confidence interval of the median, in percent of the median, that
    /// ends measuring early (after the minimums); 0 turns the target off (the minimums decide).
    pub target_ci_pct: f64,
}

impl RunDefaults {
    /// The defaults every layer applies.
    pub const STANDARD: RunDefaults = RunDefaults {
        warmup: 3,
        min_iterations: 10,
        min_seconds: 0.5,
        max_iterations: 10_000,
        timeout_s: 120.0,
        target_ci_pct: 1.0,
    };

    /// The measuring budget where a run names none: [`RunDefaults::BUDGET_FACTOR`] times its
    /// `min_seconds`, so a suite that measures briefly (smoke) stays brief and one that measures
    /// long gets room to narrow its interval.
    pub fn budget(min_seconds: f64) -> f64 {
        min_seconds * Self::BUDGET_FACTOR
    }

    /// See [`RunDefaults::budget`].
    pub const BUDGET_FACTOR: f64 = 5.0;

    /// Longest deadline a run may ask for.
    pub const MAX_TIMEOUT_S: f64 = 24.0 * 3600.0;

    /// Most timed iterations a run may ask for.
    pub const MAX_ITERATIONS: u32 = 100_000;
}

/// A result whose coefficient of variation (stddev / mean) is above this is noisy.
pub const NOISY_CV: f64 = 0.10;

/// Whether a result is noisy: its CV is above [`NOISY_CV`], or the 95% interval of its median
/// (`ci_pct`, half-width in percent of the median) is wider than the target it was measured
/// to (`target_ci_pct`; 0 or missing: no target). A noisy result is marked in every view, never
/// the best of its row and not part of a regression baseline. Unknown figures count as quiet.
pub fn is_noisy(cv: Option<f64>, ci_pct: Option<f64>, target_ci_pct: Option<f64>) -> bool {
    let wide = match (ci_pct, target_ci_pct) {
        (Some(ci), Some(target)) if target > 0.0 => ci > target,
        _ => false,
    };
    wide || cv.is_some_and(|c| c > NOISY_CV)
}

/// The 95% confidence interval of the median of ascending `sorted` samples, distribution-free:
/// the order statistics at ranks n/2 ∓ 1.96·√n/2 (the binomial's normal approximation), clamped to
/// the samples. `None` for an empty slice.
pub fn median_ci(sorted: &[f64]) -> Option<(f64, f64)> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let half = 1.96 * (n as f64).sqrt() / 2.0;
    let centre = n as f64 / 2.0;
    // 1-based ranks j = floor(n/2 − half), k = ceil(n/2 + 1 + half), as 0-based indices.
    let lo = ((centre - half).floor() as isize - 1).clamp(0, n as isize - 1) as usize;
    let hi = ((centre + 1.0 + half).ceil() as isize - 1).clamp(0, n as isize - 1) as usize;
    Some((sorted[lo], sorted[hi]))
}

/// Half-width of `(low, high)` in percent of `median`; `None` unless the median is positive.
pub fn ci_pct(low: f64, high: f64, median: f64) -> Option<f64> {
    (median > 0.0 && high >= low).then(|| (high - low) / 2.0 / median * 100.0)
}

impl Default for RunDefaults {
    fn default() -> Self {
        RunDefaults::STANDARD
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_names_round_trip_and_unknown_is_refused() {
        for m in Mode::ALL {
            assert_eq!(Mode::parse(m.name()), Some(m));
            assert_eq!(m.name().parse::<Mode>(), Ok(m));
        }
        assert_eq!(Mode::parse("fast"), None);
        let err = "fast".parse::<Mode>().unwrap_err();
        assert!(
            err.contains("`fast`") && err.contains("with_transfers"),
            "{err}"
        );
        assert_eq!(Mode::default(), Mode::ComputeOnly);
    }

    #[test]
    fn mode_serde_uses_the_canonical_name() {
        let json = serde_json::to_string(&Mode::WithTransfers).unwrap();
        assert_eq!(json, "\"with_transfers\"");
        assert_eq!(
            serde_json::from_str::<Mode>(&json).unwrap(),
            Mode::WithTransfers
        );
        assert!(serde_json::from_str::<Mode>("\"x\"").is_err());
    }

    #[test]
    fn defaults_are_within_the_bounds() {
        let d = RunDefaults::default();
        assert!(d.timeout_s > 0.0 && d.timeout_s <= RunDefaults::MAX_TIMEOUT_S);
        assert!(d.min_iterations <= d.max_iterations);
        assert!(d.max_iterations <= RunDefaults::MAX_ITERATIONS);
        assert!(RunDefaults::budget(d.min_seconds) < d.timeout_s);
        assert!(d.target_ci_pct > 0.0);
    }

    #[test]
    fn median_interval_brackets_the_median_and_narrows_with_n() {
        assert_eq!(median_ci(&[]), None);
        assert_eq!(median_ci(&[3.0]), Some((3.0, 3.0)));
        let few: Vec<f64> = (1..=5).map(f64::from).collect();
        // Five samples cannot give a 95% interval narrower than the whole range.
        assert_eq!(median_ci(&few), Some((1.0, 5.0)));
        // n = 100: ranks 40 and 61 (1-based), the textbook table's values.
        let many: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(median_ci(&many), Some((40.0, 61.0)));
        let (lo, hi) = median_ci(&many).unwrap();
        assert_eq!(ci_pct(lo, hi, 50.5), Some(10.5 / 50.5 * 100.0));
        assert_eq!(ci_pct(1.0, 2.0, 0.0), None);
    }

    #[test]
    fn noisy_by_cv_or_by_an_interval_wider_than_the_target() {
        assert!(!is_noisy(None, None, None));
        assert!(!is_noisy(Some(0.05), Some(0.8), Some(1.0)));
        assert!(is_noisy(Some(0.11), Some(0.8), Some(1.0)));
        assert!(is_noisy(Some(0.05), Some(1.2), Some(1.0)));
        // No target: only the CV decides.
        assert!(!is_noisy(Some(0.05), Some(5.0), Some(0.0)));
        assert!(!is_noisy(Some(0.05), Some(5.0), None));
    }
}
