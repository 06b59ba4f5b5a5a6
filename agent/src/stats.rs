//! Summary statistics of per-iteration times, and the measurement loop's decisions on them (when
//! warm-up is over, when there are enough samples, which first samples were still warming up).
//! Pure: no I/O, no clocks.
//!
//! Percentiles use linear interpolation between closest ranks (the same
//! definition as numpy's default), so figures can be checked against it.

use gpufleet_kernels::{NoiseFigures, Robust, RunSettings, percentile};
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
    /// The robust figures: robust CV, quartiles, Tukey fence and high outliers.
    pub robust: Robust,
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
        let at = |p| percentile(&sorted, p).unwrap_or(0.0);
        Some(Summary {
            count: n,
            median: at(50.0),
            p10: at(10.0),
            p90: at(90.0),
            min: sorted[0],
            max: sorted[n - 1],
            mean,
            stddev,
            cv: if mean != 0.0 { stddev / mean } else { 0.0 },
            robust: Robust::of_sorted(&sorted)?,
        })
    }

    /// The figures the noise rule judges, with the median's interval `ci_pct` and the run's
    /// target.
    pub fn noise(&self, ci_pct: Option<f64>, target_ci_pct: Option<f64>) -> NoiseFigures {
        NoiseFigures::of(
            Some(self.robust.robust_cv),
            Some((self.robust.p25, self.robust.p75)),
            Some(self.median),
            ci_pct,
            target_ci_pct,
        )
    }
}

/// Warm-up iterations looked at per window: warm-up is over when the median of the last window is
/// not below that of the window before by more than [`WARMUP_TREND`].
pub const WARMUP_WINDOW: usize = 5;

/// A drop of the window median larger than this (relative) is a downward trend: still warming up.
pub const WARMUP_TREND: f64 = 0.02;

/// Seconds of warm-up at least, whatever the count: clocks, caches and lazily mapped pages take
/// time, not iterations, to settle.
pub const WARMUP_MIN_S: f64 = 0.05;

/// Seconds of warm-up at most: a run whose times keep falling is measured anyway after this (or
/// after its measuring budget, when that is shorter), and the result says the cap was hit.
pub const WARMUP_CAP_S: f64 = 1.0;

/// Whether the warm-up times so far (`recent`, the last two windows or fewer, oldest first) show
/// no downward trend. Fewer than two windows: nothing to compare, so steady (a kernel that slow
/// warms up in its minimum count and time; [`slow_start`] catches what is left).
pub fn steady(recent: &[f64]) -> bool {
    let n = recent.len();
    if n < 2 * WARMUP_WINDOW {
        return true;
    }
    let median = |w: &[f64]| {
        let mut w = w.to_vec();
        w.sort_by(f64::total_cmp);
        percentile(&w, 50.0).unwrap_or(0.0)
    };
    let last = median(&recent[n - WARMUP_WINDOW..]);
    let before = median(&recent[n - 2 * WARMUP_WINDOW..n - WARMUP_WINDOW]);
    last >= before * (1.0 - WARMUP_TREND)
}

/// Consecutive samples at the steady level that end a slow start.
const STEADY_RUN: usize = 5;

/// How many of the first `times` were still warming up: the samples before the first run of
/// [`STEADY_RUN`] consecutive samples within the steady level, where the steady level is the
/// median of the second half plus max(5%, 3 robust CVs of the second half). 0 when there are
/// fewer than 20 samples or no such run starts in the first half (then the run is not a warm-up
/// followed by a steady state, and nothing is dropped). A plateau of slow first iterations
/// looks steady while it lasts, so no rule during warm-up can see it; this one, after the fact,
/// does.
pub fn slow_start(times: &[f64]) -> usize {
    let n = times.len();
    if n < 20 {
        return 0;
    }
    let mut tail = times[n / 2..].to_vec();
    tail.sort_by(f64::total_cmp);
    let (Some(median), Some(spread)) =
        (percentile(&tail, 50.0), gpufleet_kernels::robust_cv(&tail))
    else {
        return 0;
    };
    let level = median * (1.0 + (3.0 * spread).max(0.05));
    let mut run = 0;
    for (i, t) in times[..n / 2 + STEADY_RUN].iter().enumerate() {
        run = if *t <= level { run + 1 } else { 0 };
        if run == STEADY_RUN {
            return i + 1 - STEADY_RUN;
        }
    }
    0
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
    gpufleet_kernels::ci_pct(lo, hi, percentile(&sorted, 50.0)?)
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
    fn robust_figures_ride_along() {
        let mut t = vec![1.0; 99];
        t.push(9.0);
        let s = Summary::of(&t).unwrap();
        assert_eq!(s.robust.outliers_high, 1);
        assert_eq!(s.robust.robust_cv, 0.0);
        assert!(s.cv > 0.5, "{}", s.cv);
        assert!(!s.noise(Some(0.0), Some(1.0)).is_noisy());
    }

    #[test]
    fn a_falling_warm_up_is_not_steady_and_a_flat_one_is() {
        let falling: Vec<f64> = (0..10).map(|i| 3.0 - 0.1 * f64::from(i)).collect();
        assert!(!steady(&falling));
        assert!(steady(&[1.0; 10]));
        // Noise within the trend allowance, and too few samples to compare, are steady.
        let jitter: Vec<f64> = (0..10).map(|i| 1.0 + 0.01 * f64::from(i % 2)).collect();
        assert!(steady(&jitter));
        assert!(steady(&falling[..9]));
    }

    #[test]
    fn a_slow_start_is_found_and_a_steady_run_loses_nothing() {
        // Twenty slow first samples (a plateau, which looks steady while it lasts).
        let mut t = vec![3.0; 20];
        t.extend((0..200).map(|i| 1.0 + 0.002 * f64::from(i % 5)));
        assert_eq!(slow_start(&t), 20);
        // A slow sample inside the steady part does not end the start early.
        t[10] = 1.0;
        assert_eq!(slow_start(&t), 20);
        // Steady from the first sample, with a tail of slow ones: nothing dropped.
        let mut steady_run: Vec<f64> = (0..200).map(|i| 1.0 + 0.002 * f64::from(i % 5)).collect();
        steady_run[0] = 5.0;
        steady_run[50] = 5.0;
        assert_eq!(slow_start(&steady_run[1..]), 0);
        assert_eq!(slow_start(&steady_run), 1);
        // Never more than the first half; too few samples to tell: nothing.
        let mut late = vec![3.0; 150];
        late.extend(vec![1.0; 100]);
        assert_eq!(slow_start(&late), 0);
        assert_eq!(slow_start(&[3.0, 3.0, 1.0, 1.0, 1.0, 1.0, 1.0]), 0);
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
