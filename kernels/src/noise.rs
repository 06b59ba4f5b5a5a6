//! How far a result's figures can be trusted: the robust spread of its iteration times, its high
//! outliers, the interval of its median, and the one rule that calls a result noisy.
//!
//! Iteration times are not normal. A quiet run has a tight bulk and a long right tail (a
//! scheduler preemption, an interrupt, a clock step): a few iterations at 5× the median raise the
//! standard deviation, so a flag on the plain CV fires on nearly every run of a shared machine
//! while the median is known to ±1%. So the flag looks at the bulk instead:
//!
//! - the **robust CV**, 1.4826 × MAD / median (it estimates σ/µ of normal noise and ignores up to
//!   half the samples being wild);
//! - the **quartile CV**, IQR / 1.349 / median (the same estimate from the quartiles): it ignores
//!   a tail of up to a quarter of the samples, so a run where a third of the iterations are slow
//!   (two modes) widens it, while the MAD can stay in the fast mode;
//! - the **median's interval** against the target the run measured to.
//!
//! Outliers are counted, not judged: iterations above the Tukey upper fence (Q3 + 1.5 × IQR) are
//! stored as a count and drawn in the histogram. The regression check calls a baseline too noisy
//! to judge by the same robust CV and the same limit ([`NOISY_SPREAD`]).

/// Scales the median absolute deviation to estimate the standard deviation of normal noise.
pub const MAD_TO_SIGMA: f64 = 1.4826;

/// The interquartile range of normal noise is this many standard deviations.
const IQR_PER_SIGMA: f64 = 1.349;

/// Tukey's fence: an iteration beyond Q3 + this × IQR is a high outlier.
pub const TUKEY_K: f64 = 1.5;

/// A result whose robust spread (robust CV or quartile CV) is above this is noisy, and a
/// regression baseline whose robust CV is above it is too noisy to judge.
pub const NOISY_SPREAD: f64 = 0.125;

/// The noise rule in words, for legends: what `~ noisy` means.
pub fn noisy_rule() -> String {
    format!(
        "robust or quartile CV above {}% or the median's interval wider than its target",
        NOISY_SPREAD * 100.0
    )
}

/// Percentile `p` (0..=100) of ascending samples, linear interpolation between closest ranks
/// (numpy's default, so figures can be checked against it). `None` for an empty slice.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    let n = sorted.len();
    let rank = (p / 100.0).clamp(0.0, 1.0) * n.checked_sub(1)? as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    // Written as lo + (hi − lo) × frac so two values near f64::MAX do not overflow.
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64))
}

/// The robust CV of ascending samples: 1.4826 × MAD / median. `None` unless the median is
/// positive (a spread relative to nothing means nothing).
pub fn robust_cv(sorted: &[f64]) -> Option<f64> {
    let median = percentile(sorted, 50.0).filter(|m| *m > 0.0)?;
    let mut deviations: Vec<f64> = sorted.iter().map(|v| (v - median).abs()).collect();
    deviations.sort_by(f64::total_cmp);
    Some(MAD_TO_SIGMA * percentile(&deviations, 50.0)? / median)
}

/// The quartile CV: IQR / 1.349 / median; `None` unless the median is positive.
pub fn quartile_cv(p25: f64, p75: f64, median: f64) -> Option<f64> {
    (median > 0.0 && p75 >= p25).then(|| (p75 - p25) / IQR_PER_SIGMA / median)
}

/// The robust figures of one run's iteration times.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Robust {
    /// 1.4826 × MAD / median.
    pub robust_cv: f64,
    /// First quartile, seconds.
    pub p25: f64,
    /// Third quartile, seconds.
    pub p75: f64,
    /// Q3 + 1.5 × IQR: iterations above it are high outliers.
    pub upper_fence: f64,
    /// Iterations above the upper fence.
    pub outliers_high: u32,
}

impl Robust {
    /// The robust figures of ascending samples; `None` for an empty slice.
    pub fn of_sorted(sorted: &[f64]) -> Option<Robust> {
        let p25 = percentile(sorted, 25.0)?;
        let p75 = percentile(sorted, 75.0)?;
        let upper_fence = p75 + TUKEY_K * (p75 - p25);
        Some(Robust {
            robust_cv: robust_cv(sorted).unwrap_or(0.0),
            p25,
            p75,
            upper_fence,
            outliers_high: sorted.iter().filter(|t| **t > upper_fence).count() as u32,
        })
    }
}

/// The figures a noise verdict is made from. `None`: not known (a result from an older agent, or
/// without a measurement); unknown figures count as quiet.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct NoiseFigures {
    /// 1.4826 × MAD / median.
    pub robust_cv: Option<f64>,
    /// IQR / 1.349 / median.
    pub quartile_cv: Option<f64>,
    /// Half-width of the median's 95% interval, percent of the median.
    pub ci_pct: Option<f64>,
    /// The interval target the run measured to, percent; 0 or `None`: no target.
    pub target_ci_pct: Option<f64>,
}

impl NoiseFigures {
    /// The figures of a result that carries its robust CV, quartiles (`p25`, `p75`) and median:
    /// the quartile CV is derived here, once, for the agent and the store alike.
    pub fn of(
        robust_cv: Option<f64>,
        quartiles: Option<(f64, f64)>,
        median: Option<f64>,
        ci_pct: Option<f64>,
        target_ci_pct: Option<f64>,
    ) -> NoiseFigures {
        NoiseFigures {
            robust_cv,
            quartile_cv: match (quartiles, median) {
                (Some((p25, p75)), Some(m)) => quartile_cv(p25, p75, m),
                _ => None,
            },
            ci_pct,
            target_ci_pct,
        }
    }

    /// Why these figures make a result noisy, for people ("robust CV 14.2% > 12.5%"); `None` when
    /// they do not. The first reason found: the interval, then the spreads.
    pub fn reason(&self) -> Option<String> {
        let limit = NOISY_SPREAD * 100.0;
        if let (Some(ci), Some(target)) = (self.ci_pct, self.target_ci_pct)
            && target > 0.0
            && ci > target
        {
            return Some(format!("median ±{ci:.1}% > target ±{target}%"));
        }
        if let Some(r) = self.robust_cv.filter(|r| *r > NOISY_SPREAD) {
            return Some(format!("robust CV {:.1}% > {limit}%", r * 100.0));
        }
        if let Some(q) = self.quartile_cv.filter(|q| *q > NOISY_SPREAD) {
            return Some(format!(
                "quartile CV {:.1}% > {limit}% (two modes?)",
                q * 100.0
            ));
        }
        None
    }

    /// Whether a result with these figures is noisy: its robust spread is above
    /// [`NOISY_SPREAD`], or its median's interval is wider than its target. A noisy result is
    /// marked in every view, never the best of its row and not part of a regression baseline. A
    /// few slow iterations (a long tail, however slow) do not make a result noisy.
    pub fn is_noisy(&self) -> bool {
        self.reason().is_some()
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(mut v: Vec<f64>) -> Vec<f64> {
        v.sort_by(f64::total_cmp);
        v
    }

    /// `n` iteration times around 1.0 with a small deterministic jitter (±0.5%).
    fn quiet(n: usize) -> Vec<f64> {
        (0..n)
            .map(|i| 1.0 + ((i * 7919) % 101) as f64 / 100.0 * 0.01 - 0.005)
            .collect()
    }

    #[test]
    fn percentiles_match_numpy_linear() {
        // numpy.percentile([1,2,3,4,5,10], [10,25,50,75,90]) == [1.5, 2.25, 3.5, 4.75, 7.5]
        let s = [1.0, 2.0, 3.0, 4.0, 5.0, 10.0];
        let got: Vec<f64> = [10.0, 25.0, 50.0, 75.0, 90.0]
            .iter()
            .map(|p| percentile(&s, *p).unwrap())
            .collect();
        assert_eq!(got, [1.5, 2.25, 3.5, 4.75, 7.5]);
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[2.0], 90.0), Some(2.0));
        assert_eq!(percentile(&[f64::MAX, f64::MAX], 50.0), Some(f64::MAX));
    }

    #[test]
    fn robust_cv_is_the_scaled_mad() {
        // median 4.5, deviations 2.5, 0.5 ×5, 2.5, 4.5 → MAD 0.5.
        let s = sorted(vec![2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        let r = robust_cv(&s).unwrap();
        assert!((r - MAD_TO_SIGMA * 0.5 / 4.5).abs() < 1e-12, "{r}");
        assert_eq!(robust_cv(&[0.0, 0.0]), None);
        assert_eq!(robust_cv(&[]), None);
    }

    #[test]
    fn a_long_tail_is_counted_as_outliers_not_spread() {
        // 1% of iterations 5× slower: the plain CV passes 10%, the robust figures stay small.
        let mut t = quiet(1000);
        for i in (0..1000).step_by(100) {
            t[i] = 5.0;
        }
        let s = sorted(t);
        let r = Robust::of_sorted(&s).unwrap();
        assert_eq!(r.outliers_high, 10);
        assert!(r.robust_cv < 0.01, "{r:?}");
        let median = percentile(&s, 50.0).unwrap();
        let f = NoiseFigures {
            robust_cv: Some(r.robust_cv),
            quartile_cv: quartile_cv(r.p25, r.p75, median),
            ci_pct: None,
            target_ci_pct: None,
        };
        assert!(!f.is_noisy(), "{:?}", f.reason());
    }

    #[test]
    fn two_modes_widen_the_quartiles_though_the_mad_stays_small() {
        // 30% of iterations 1.5× slower: the MAD stays in the fast mode, the IQR spans both.
        let t: Vec<f64> = quiet(1000)
            .into_iter()
            .enumerate()
            .map(|(i, x)| if i % 10 < 3 { x * 1.5 } else { x })
            .collect();
        let s = sorted(t);
        let r = Robust::of_sorted(&s).unwrap();
        let median = percentile(&s, 50.0).unwrap();
        assert!(r.robust_cv < NOISY_SPREAD, "{r:?}");
        let f = NoiseFigures {
            robust_cv: Some(r.robust_cv),
            quartile_cv: quartile_cv(r.p25, r.p75, median),
            ..NoiseFigures::default()
        };
        let why = f.reason().expect("two modes are noisy");
        assert!(why.contains("quartile CV"), "{why}");
        // Nothing beyond the fence: the slow mode is a quarter of the run, not its tail.
        assert_eq!(r.outliers_high, 0);
    }

    #[test]
    fn noisy_by_spread_or_by_an_interval_wider_than_the_target() {
        let f = |robust: Option<f64>, ci: Option<f64>, target: Option<f64>| NoiseFigures {
            robust_cv: robust,
            quartile_cv: None,
            ci_pct: ci,
            target_ci_pct: target,
        };
        assert!(!f(None, None, None).is_noisy());
        assert!(!f(Some(0.05), Some(0.8), Some(1.0)).is_noisy());
        assert!(f(Some(0.13), Some(0.8), Some(1.0)).is_noisy());
        let wide = f(Some(0.05), Some(1.2), Some(1.0));
        assert_eq!(wide.reason().as_deref(), Some("median ±1.2% > target ±1%"));
        // No target: only the spread decides.
        assert!(!f(Some(0.05), Some(5.0), Some(0.0)).is_noisy());
        assert!(!f(Some(0.05), Some(5.0), None).is_noisy());
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
}
