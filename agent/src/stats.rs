//! Summary statistics of per-iteration times. Pure: no I/O, no clocks.
//!
//! Percentiles use linear interpolation between closest ranks (the same
//! definition as numpy's default), so figures can be checked against it.

use gpufleet_kernels::RunSettings;
use serde::{Deserialize, Serialize};

/// Summary of a run's per-iteration times, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Summary {
    pub count: usize,
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    /// Sample standard deviation (n - 1); 0 for a single sample.
    pub stddev: f64,
    /// Coefficient of variation, stddev / mean; 0 when the mean is 0.
    pub cv: f64,
}

impl Summary {
    /// Summarises `samples`. Returns `None` for an empty slice or one that
    /// holds a NaN, since neither has a meaningful median.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() || samples.iter().any(|x| x.is_nan()) {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(|a, b| a.total_cmp(b));
        let n = sorted.len();
        let mean = sorted.iter().sum::<f64>() / n as f64;
        let var = if n > 1 {
            sorted.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64
        } else {
            0.0
        };
        let stddev = var.sqrt();
        Some(Summary {
            count: n,
            median: percentile_sorted(&sorted, 50.0),
            p10: percentile_sorted(&sorted, 10.0),
            p90: percentile_sorted(&sorted, 90.0),
            min: sorted[0],
            max: sorted[n - 1],
            mean,
            stddev,
            cv: if mean != 0.0 { stddev / mean } else { 0.0 },
        })
    }
}

/// Percentile `p` (0..=100) of an ascending slice, linear interpolation.
///
/// # Panics
/// On an empty slice (callers check first).
pub fn percentile_sorted(sorted: &[f64], p: f64) -> f64 {
    let n = sorted.len();
    if n == 1 {
        return sorted[0];
    }
    let rank = (p / 100.0).clamp(0.0, 1.0) * (n - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    let frac = rank - lo as f64;
    sorted[lo] + (sorted[hi] - sorted[lo]) * frac
}

/// Whether a measurement loop has enough samples after `times` (the samples so far) and
/// `elapsed_s` seconds of wall time spent measuring: at least `min_iterations` and at least
/// `min_seconds` of measured time; then, with an interval target, until the 95% interval of the
/// median is within `target_ci_pct` of it or `max_seconds` have passed; never more than
/// `max_iterations`. Takes the settings as resolved (each maximum at least its minimum). Sorting
/// for the interval costs O(n log n), so the interval is only looked at when the count has grown
/// by an eighth since `checked` (updated here).
pub fn enough_samples(
    rule: &RunSettings,
    times: &[f64],
    elapsed_s: f64,
    checked: &mut usize,
) -> bool {
    let n = times.len();
    if n >= rule.max_iterations as usize {
        return true;
    }
    if n < rule.min_iterations as usize || elapsed_s < rule.min_seconds {
        return false;
    }
    let target = match rule.target_ci_pct {
        Some(t) if t > 0.0 && elapsed_s < rule.max_seconds => t,
        _ => return true,
    };
    if n < *checked + (*checked / 8).max(1) {
        return false;
    }
    *checked = n;
    interval_pct(times).is_some_and(|ci| ci <= target)
}

/// Half-width of the 95% interval of the median of `times`, percent of the median.
pub fn interval_pct(times: &[f64]) -> Option<f64> {
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    let (lo, hi) = gpufleet_kernels::median_ci(&sorted)?;
    gpufleet_kernels::ci_pct(lo, hi, percentile_sorted(&sorted, 50.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_nan_have_no_summary() {
        assert!(Summary::of(&[]).is_none());
        assert!(Summary::of(&[1.0, f64::NAN]).is_none());
    }

    #[test]
    fn single_sample() {
        let s = Summary::of(&[2.5]).unwrap();
        assert_eq!(
            (s.median, s.p10, s.p90, s.min, s.max),
            (2.5, 2.5, 2.5, 2.5, 2.5)
        );
        assert_eq!(s.stddev, 0.0);
        assert_eq!(s.count, 1);
    }

    #[test]
    fn matches_numpy_linear_percentiles() {
        // numpy.percentile([4,1,3,2,5,10], [10,50,90]) == [1.5, 3.5, 7.5]
        let s = Summary::of(&[4.0, 1.0, 3.0, 2.0, 5.0, 10.0]).unwrap();
        assert!((s.p10 - 1.5).abs() < 1e-12, "{}", s.p10);
        assert!((s.median - 3.5).abs() < 1e-12);
        assert!((s.p90 - 7.5).abs() < 1e-12);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 10.0);
        assert!((s.mean - 25.0 / 6.0).abs() < 1e-12);
    }

    #[test]
    fn stddev_is_sample_stddev_and_cv_relative() {
        // values 2,4,4,4,5,5,7,9: sample variance 32/7
        let s = Summary::of(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert!((s.stddev - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        assert!((s.cv - s.stddev / 5.0).abs() < 1e-12);
    }

    #[test]
    fn odd_count_median_is_middle_element() {
        let s = Summary::of(&[9.0, 1.0, 5.0]).unwrap();
        assert_eq!(s.median, 5.0);
    }

    #[test]
    fn stop_rule_needs_both_minimums_and_caps() {
        let r = RunSettings {
            min_iterations: 5,
            min_seconds: 1.0,
            max_iterations: 100,
            target_ci_pct: None,
            max_seconds: 2.0,
            ..RunSettings::DEFAULT
        };
        let done = |n: usize, s: f64| enough_samples(&r, &vec![1.0; n], s, &mut 0);
        assert!(!done(4, 10.0));
        assert!(!done(50, 0.5));
        assert!(done(5, 1.0));
        assert!(done(100, 0.0));
    }

    #[test]
    fn stop_rule_goes_on_until_the_interval_meets_the_target_or_the_budget() {
        let r = RunSettings {
            min_iterations: 5,
            min_seconds: 0.0,
            max_iterations: 10_000,
            target_ci_pct: Some(1.0),
            max_seconds: 2.0,
            ..RunSettings::DEFAULT
        };
        // Alternating 0.9/1.1: the median's interval spans both values however many samples
        // there are, so only the budget ends the loop.
        let wide: Vec<f64> = (0..200)
            .map(|i| if i % 2 == 0 { 0.9 } else { 1.1 })
            .collect();
        assert!(!enough_samples(&r, &wide, 1.0, &mut 0));
        assert!(enough_samples(&r, &wide, 2.0, &mut 0));
        // Quiet samples meet ±1% as soon as they are looked at.
        let quiet: Vec<f64> = (0..20).map(|i| 1.0 + (i % 3) as f64 * 0.001).collect();
        assert!(enough_samples(&r, &quiet, 0.1, &mut 0));
        // Not looked at again until the count grew by an eighth.
        let mut checked = 19;
        assert!(!enough_samples(&r, &quiet, 0.1, &mut checked));
        assert_eq!(checked, 19);
    }
}
