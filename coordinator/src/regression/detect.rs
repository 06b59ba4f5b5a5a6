//! Regression verdicts on one series of results (one device, spec key and
//! environment segment). Pure: numbers in, verdicts out; the campaign code
//! decides which results form the series and runs the confirmation.
//!
//! Nightly results are noisy: machines are shared and GPUs boost with their
//! temperature. A fixed threshold either cries wolf on a noisy series or
//! misses real steps on a quiet one, so the bound adapts to the baseline:
//!
//! 1. The baseline is the last `baseline_n` usable results (positive, finite),
//!    oldest first. Fewer than `min_baseline` → no verdict, and the reason says
//!    how many there were.
//! 2. Its centre is the median and its spread the robust CV (1.4826 × MAD /
//!    median, which estimates the standard deviation of normal noise but
//!    ignores a few outliers): the same figure, by the same function
//!    ([`gpufleet_kernels::robust_cv`]), that marks one result noisy. A
//!    baseline spread above the same limit is too noisy to call anything stable.
//! 3. A new value is suspect when it moves beyond
//!    `max(threshold_pct, k × spread_pct)` from the median.
//! 4. A suspect value is rerun once on the same device and the rerun assessed
//!    against the same baseline; only when both are suspect in the same
//!    direction is the change [`confirmed`] and worth an alert. One noisy
//!    night rarely repeats itself in the same direction.
//!
//! Whether a change is a regression depends on the metric: GFLOP/s and GB/s
//! are better higher, latencies lower.

use serde::{Deserialize, Serialize};

/// The knobs of detection. The defaults were chosen by simulation (`regression_defaults_grid` in
/// the tests, table in docs/architecture.md): at ±4% uniform night-to-night jitter they raise a
/// confirmed false alert in about 0.5% of 100-night series and confirm about 98% of 10% steps
/// within two nights.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DetectConfig {
    /// How many of the latest usable results form the baseline.
    pub baseline_n: usize,
    /// Fewer usable baseline results than this → no verdict: a median and a
    /// spread of two or three points say little.
    pub min_baseline: usize,
    /// The smallest change (percent of the baseline median) ever flagged,
    /// even on a very quiet baseline.
    pub threshold_pct: f64,
    /// How many robust spreads a value must move to be flagged on a noisy
    /// baseline.
    pub k: f64,
    /// Let noisy results (robust spread above 12.5%, or an interval wider than their target) into
    /// baselines.
    pub include_noisy: bool,
}

impl DetectConfig {
    /// The defaults, as a constant for CLI defaults.
    pub const DEFAULT: DetectConfig = DetectConfig {
        baseline_n: 20,
        min_baseline: 5,
        threshold_pct: 6.0,
        k: 2.0,
        include_noisy: false,
    };
}

impl Default for DetectConfig {
    fn default() -> Self {
        DetectConfig::DEFAULT
    }
}

impl DetectConfig {
    /// Checks the bounds of every field.
    ///
    /// # Errors
    /// A message naming the first field out of bounds and its value.
    pub fn validate(&self) -> Result<(), String> {
        if self.min_baseline < 3 {
            return Err(format!(
                "min_baseline must be >= 3, got {}",
                self.min_baseline
            ));
        }
        if self.baseline_n < self.min_baseline {
            return Err(format!(
                "baseline_n must be >= min_baseline, got baseline_n {} < min_baseline {}",
                self.baseline_n, self.min_baseline
            ));
        }
        if !(self.threshold_pct.is_finite() && self.threshold_pct >= 0.0) {
            return Err(format!(
                "threshold_pct must be finite and >= 0, got {}",
                self.threshold_pct
            ));
        }
        if !(self.k.is_finite() && self.k >= 0.0) {
            return Err(format!("k must be finite and >= 0, got {}", self.k));
        }
        Ok(())
    }
}

/// Which way a change goes, for the metric at hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Regression,
    Improvement,
}

/// The outcome of assessing one value against its baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// Nothing can be said; `reason` is for people ("3 baseline points, 5
    /// needed").
    NoVerdict { reason: String },
    /// Within the bound.
    Stable,
    /// Beyond the bound: rerun once to confirm.
    Suspect { direction: Direction },
}

/// A verdict with the figures behind it, for reports and alerts (before =
/// `baseline_median`, after = `value`). Every figure is finite so the JSON
/// round-trips; figures that cannot be computed are 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Assessment {
    pub verdict: Verdict,
    /// The assessed value (0 when it was not finite; the reason quotes it).
    pub value: f64,
    /// Usable baseline points taken into account.
    pub baseline_points: usize,
    /// Median of the baseline; 0 when there is no baseline.
    pub baseline_median: f64,
    /// Robust relative spread: 1.4826 × MAD / |median| × 100.
    pub spread_pct: f64,
    /// The bound a change must pass: max(threshold_pct, k × spread_pct).
    pub bound_pct: f64,
    /// (value − median) / |median| × 100, signed.
    pub change_pct: f64,
}

/// A baseline whose robust spread is above this (percent) is too noisy for a "stable" verdict:
/// such a result gets no verdict, with the reason, unless it moved beyond the bound. The same
/// robust CV and the same limit that make one result noisy ([`gpufleet_kernels::NOISY_SPREAD`]).
pub const NOISY_SPREAD_PCT: f64 = gpufleet_kernels::NOISY_SPREAD * 100.0;

/// Assesses `value` against `baseline`: the values of the last ok results,
/// oldest first. Values that are not positive and finite are left out first;
/// of the rest, only the last `cfg.baseline_n` are used.
///
/// Never fails: an invalid `cfg`, a bad value or too thin a baseline give
/// [`Verdict::NoVerdict`] with the reason.
pub fn assess(
    baseline: &[f64],
    value: f64,
    higher_is_better: bool,
    cfg: &DetectConfig,
) -> Assessment {
    let usable: Vec<f64> = baseline.iter().copied().filter(|v| is_usable(*v)).collect();
    let left_out = baseline.len() - usable.len();
    let window = &usable[usable.len().saturating_sub(cfg.baseline_n)..];

    let mut sorted = window.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = gpufleet_kernels::percentile(&sorted, 50.0).unwrap_or(0.0);
    let spread_pct = gpufleet_kernels::robust_cv(&sorted).map_or(0.0, |r| r * 100.0);
    let bound_pct = if cfg.k.is_finite() && cfg.threshold_pct.is_finite() {
        cfg.threshold_pct.max(cfg.k * spread_pct)
    } else {
        0.0
    };
    let change_pct = if median > 0.0 && is_usable(value) {
        (value - median) / median * 100.0
    } else {
        0.0
    };

    let mut assessment = Assessment {
        verdict: Verdict::Stable,
        value: if value.is_finite() { value } else { 0.0 },
        baseline_points: window.len(),
        baseline_median: median,
        spread_pct,
        bound_pct,
        change_pct,
    };
    let no_verdict = |reason: String| Verdict::NoVerdict { reason };
    assessment.verdict = if let Err(e) = cfg.validate() {
        no_verdict(format!("invalid detection config: {e}"))
    } else if !is_usable(value) {
        no_verdict(format!("value {value} is not a positive finite number"))
    } else if window.len() < cfg.min_baseline {
        let mut reason = format!(
            "{} baseline point{}, {} needed",
            window.len(),
            if window.len() == 1 { "" } else { "s" },
            cfg.min_baseline
        );
        if left_out > 0 {
            reason += &format!(" ({left_out} not positive and finite, left out)");
        }
        no_verdict(reason)
    } else if median <= 0.0 {
        // Unreachable with positive points, kept so a change in filtering
        // cannot divide by zero.
        no_verdict("baseline median is 0".to_string())
    } else if !change_pct.is_finite() || !spread_pct.is_finite() {
        no_verdict(format!(
            "change from median {median} to {value} is too large to express"
        ))
    } else if change_pct.abs() > bound_pct {
        let dropped = change_pct < 0.0;
        let direction = if dropped == higher_is_better {
            Direction::Regression
        } else {
            Direction::Improvement
        };
        Verdict::Suspect { direction }
    } else if spread_pct > NOISY_SPREAD_PCT {
        // Within a bound that wide, "stable" would claim more than the baseline can tell.
        no_verdict(format!(
            "too noisy to judge: the baseline's robust CV is {spread_pct:.1}% (above \
             {NOISY_SPREAD_PCT}%), so it allows ±{bound_pct:.1}% (change {change_pct:+.1}%)"
        ))
    } else {
        Verdict::Stable
    };
    // Keep every figure finite (the NoVerdict above already said why).
    for figure in [
        &mut assessment.change_pct,
        &mut assessment.spread_pct,
        &mut assessment.bound_pct,
    ] {
        if !figure.is_finite() {
            *figure = 0.0;
        }
    }
    assessment
}

/// The confirmed direction when both the suspect result and its
/// confirmation rerun are suspect in the same direction; `None` otherwise.
///
/// Both must have been assessed against the same baseline (the confirmation
/// rerun does not join the baseline of its own suspect).
pub fn confirmed(suspect: &Assessment, confirmation: &Assessment) -> Option<Direction> {
    match (&suspect.verdict, &confirmation.verdict) {
        (Verdict::Suspect { direction: a }, Verdict::Suspect { direction: b }) if a == b => {
            Some(*a)
        }
        _ => None,
    }
}

/// A metric value that can be compared: positive and finite.
fn is_usable(v: f64) -> bool {
    v.is_finite() && v > 0.0
}

#[cfg(test)]
mod tests;
