use super::*;

/// splitmix64: a seeded generator, so every run draws the same series.
struct Rng(u64);

impl Rng {
    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f64 {
        crate::test_rng::uniform(&mut self.0) * 2.0 - 1.0
    }

    /// `level` with uniform relative jitter of ± `pct` percent.
    fn around(&mut self, level: f64, pct: f64) -> f64 {
        level * (1.0 + pct / 100.0 * self.unit())
    }
}

fn series(rng: &mut Rng, n: usize, level: f64, jitter_pct: f64) -> Vec<f64> {
    (0..n).map(|_| rng.around(level, jitter_pct)).collect()
}

/// Round figures for tests of the mechanics (window, bound, spread): 10 points, 5%, k = 3.
fn mechanics() -> DetectConfig {
    DetectConfig {
        baseline_n: 10,
        threshold_pct: 5.0,
        k: 3.0,
        ..DetectConfig::default()
    }
}

fn suspect(direction: Direction) -> Verdict {
    Verdict::Suspect { direction }
}

fn reason(a: &Assessment) -> &str {
    match &a.verdict {
        Verdict::NoVerdict { reason } => reason,
        v => panic!("expected no verdict, got {v:?}"),
    }
}

#[test]
fn defaults_and_validation() {
    let cfg = DetectConfig::default();
    assert_eq!((cfg.baseline_n, cfg.min_baseline), (20, 5));
    assert_eq!((cfg.threshold_pct, cfg.k), (6.0, 2.0));
    assert!(!cfg.include_noisy);
    assert_eq!(cfg.validate(), Ok(()));
    let bad = |f: fn(&mut DetectConfig)| {
        let mut c = DetectConfig::default();
        f(&mut c);
        c.validate().unwrap_err()
    };
    assert!(bad(|c| c.min_baseline = 2).starts_with("min_baseline must be >= 3"));
    assert!(bad(|c| c.baseline_n = 4).starts_with("baseline_n must be >= min_baseline"));
    assert!(bad(|c| c.threshold_pct = -1.0).starts_with("threshold_pct must be finite and >= 0"));
    assert!(bad(|c| c.threshold_pct = f64::NAN).starts_with("threshold_pct must be finite"));
    assert!(bad(|c| c.k = -0.5).starts_with("k must be finite and >= 0"));
    assert!(bad(|c| c.k = f64::INFINITY).starts_with("k must be finite and >= 0"));
    let a = assess(&[1.0; 10], 1.0, true, &DetectConfig { k: -1.0, ..cfg });
    assert!(reason(&a).starts_with("invalid detection config: k must be"));
}

#[test]
fn config_json_fills_missing_fields_with_defaults() {
    let cfg: DetectConfig = serde_json::from_str(r#"{"k": 2.5}"#).unwrap();
    assert_eq!(
        cfg,
        DetectConfig {
            k: 2.5,
            ..DetectConfig::default()
        }
    );
}

#[test]
fn assessment_json_shape() {
    let a = assess(&[100.0; 10], 80.0, true, &DetectConfig::default());
    let json = serde_json::to_value(&a).unwrap();
    assert_eq!(json["verdict"]["verdict"], "suspect");
    assert_eq!(json["verdict"]["direction"], "regression");
    assert_eq!(serde_json::from_value::<Assessment>(json).unwrap(), a);
    let none = assess(&[], f64::NAN, true, &DetectConfig::default());
    let back: Assessment = serde_json::from_str(&serde_json::to_string(&none).unwrap()).unwrap();
    assert_eq!(back, none);
}

#[test]
fn ten_percent_step_down_is_a_confirmed_regression() {
    let cfg = mechanics();
    let mut rng = Rng(1);
    let history = series(&mut rng, 20, 1000.0, 1.0);
    let night = assess(&history, rng.around(900.0, 1.0), true, &cfg);
    assert_eq!(night.verdict, suspect(Direction::Regression), "{night:?}");
    assert_eq!(night.baseline_points, 10);
    assert!((night.baseline_median - 1000.0).abs() < 10.0);
    assert!(night.change_pct < -8.0 && night.change_pct > -12.0);
    assert_eq!(night.bound_pct, 5.0, "quiet baseline: the threshold rules");
    let rerun = assess(&history, rng.around(900.0, 1.0), true, &cfg);
    assert_eq!(confirmed(&night, &rerun), Some(Direction::Regression));
}

#[test]
fn ten_percent_step_up_is_a_confirmed_improvement() {
    let cfg = DetectConfig::default();
    let mut rng = Rng(2);
    let history = series(&mut rng, 20, 1000.0, 1.0);
    let night = assess(&history, rng.around(1100.0, 1.0), true, &cfg);
    assert_eq!(night.verdict, suspect(Direction::Improvement));
    let rerun = assess(&history, rng.around(1100.0, 1.0), true, &cfg);
    assert_eq!(confirmed(&night, &rerun), Some(Direction::Improvement));
}

#[test]
fn lower_is_better_flips_the_direction() {
    let cfg = DetectConfig::default();
    let mut rng = Rng(3);
    let latency_us = series(&mut rng, 20, 50.0, 1.0);
    let slower = assess(&latency_us, 55.0, false, &cfg);
    assert_eq!(slower.verdict, suspect(Direction::Regression));
    let faster = assess(&latency_us, 45.0, false, &cfg);
    assert_eq!(faster.verdict, suspect(Direction::Improvement));
    assert_eq!(
        confirmed(&slower, &assess(&latency_us, 54.5, false, &cfg)),
        Some(Direction::Regression)
    );
    // A regression and an improvement do not confirm each other.
    assert_eq!(confirmed(&slower, &faster), None);
}

#[test]
fn step_not_reproduced_by_the_rerun_is_not_confirmed() {
    let cfg = DetectConfig::default();
    let mut rng = Rng(4);
    let history = series(&mut rng, 20, 1000.0, 1.0);
    let night = assess(&history, 900.0, true, &cfg);
    assert_eq!(night.verdict, suspect(Direction::Regression));
    let rerun = assess(&history, rng.around(1000.0, 1.0), true, &cfg);
    assert_eq!(rerun.verdict, Verdict::Stable);
    assert_eq!(confirmed(&night, &rerun), None);
    let stable = assess(&history, 1000.0, true, &cfg);
    assert_eq!(confirmed(&stable, &stable), None);
}

/// Totals of a simulated noise-only history.
#[derive(Debug, Default)]
struct NoiseRun {
    nights_with_verdict: usize,
    suspects: usize,
    alerts: usize,
    series_with_an_alert: usize,
}

/// Per seed, 100 nights of `level` ± `jitter_pct` uniform noise and no
/// step, each night assessed against the rolling baseline of the nights
/// before it; a suspect night gets one independent rerun from the same
/// noise, assessed against the same baseline.
fn simulate_noise(seeds: std::ops::Range<u64>, jitter_pct: f64, cfg: &DetectConfig) -> NoiseRun {
    let mut run = NoiseRun::default();
    for seed in seeds {
        let mut rng = Rng(0xC0FFEE + seed);
        let mut history: Vec<f64> = Vec::new();
        let mut alerts = 0;
        for _ in 0..100 {
            let value = rng.around(1000.0, jitter_pct);
            let night = assess(&history, value, true, cfg);
            match night.verdict {
                Verdict::NoVerdict { .. } => assert!(history.len() < cfg.min_baseline),
                Verdict::Stable => run.nights_with_verdict += 1,
                Verdict::Suspect { .. } => {
                    run.nights_with_verdict += 1;
                    run.suspects += 1;
                    let rerun = assess(&history, rng.around(1000.0, jitter_pct), true, cfg);
                    if confirmed(&night, &rerun).is_some() {
                        alerts += 1;
                    }
                }
            }
            history.push(value);
        }
        run.alerts += alerts;
        run.series_with_an_alert += usize::from(alerts > 0);
    }
    run
}

/// ±4% jitter, no step, 100 nights, no alert. It holds for these seeds, not for every seed: see
/// `the_defaults_meet_both_goals` for how often it fails with the defaults.
#[test]
fn pure_noise_raises_no_alert() {
    let run = simulate_noise(0..8, 4.0, &DetectConfig::default());
    assert_eq!(run.alerts, 0, "{run:?}");
    assert!(
        run.suspects > 0,
        "the simulation exercises confirmation: {run:?}"
    );
    assert_eq!(run.nights_with_verdict, 8 * 95);
}

/// The goals the defaults were chosen for, at ±4% uniform jitter: a confirmed false alert in at
/// most 1% of 100-night series, and at least 90% of 10% steps confirmed within two nights.
/// Measured on these 1000 seeds: 0.5% and 98% (the grid above has the neighbours: 5% gives 10%
/// false alerts, k = 3 confirms only 72% of steps in time).
#[test]
fn the_defaults_meet_both_goals() {
    let cfg = DetectConfig::default();
    let noise = simulate_noise(0..1000, 4.0, &cfg);
    let false_alert_series = noise.series_with_an_alert as f64 / 1000.0;
    assert!(false_alert_series <= 0.01, "{noise:?}");
    let steps = simulate_steps(0..1000, 4.0, 10.0, &cfg);
    let found = steps.within_two_nights as f64 / steps.steps as f64;
    assert!(found >= 0.90, "{steps:?}");
    // `-- --nocapture` shows the figures docs/architecture.md records.
    println!(
        "false alerts in {:.1}% of series, {:.1}% of 10% steps confirmed within two nights",
        false_alert_series * 100.0,
        found * 100.0
    );
    // The old defaults (5%, k = 3, 10 points) fail both: the test can tell.
    let old = DetectConfig {
        baseline_n: 10,
        threshold_pct: 5.0,
        k: 3.0,
        ..cfg
    };
    assert!(simulate_noise(0..1000, 4.0, &old).series_with_an_alert > 100);
    assert!(simulate_steps(0..1000, 4.0, 10.0, &old).within_two_nights < 800);
    // ±1% jitter is far from the 6% threshold: not even a suspect.
    let quiet = simulate_noise(0..50, 1.0, &cfg);
    assert_eq!(quiet.suspects, 0, "{quiet:?}");
}

#[test]
fn too_few_points_say_how_many() {
    let cfg = DetectConfig::default();
    let a = assess(&[100.0, 101.0, 99.0], 80.0, true, &cfg);
    assert_eq!(reason(&a), "3 baseline points, 5 needed");
    assert_eq!(a.baseline_points, 3);
    assert_eq!(a.baseline_median, 100.0);
    assert_eq!(a.change_pct, -20.0);
    assert_eq!(
        reason(&assess(&[100.0], 80.0, true, &cfg)),
        "1 baseline point, 5 needed"
    );
    let empty = assess(&[], 80.0, true, &cfg);
    assert_eq!(reason(&empty), "0 baseline points, 5 needed");
    assert_eq!(
        (empty.baseline_median, empty.change_pct, empty.spread_pct),
        (0.0, 0.0, 0.0)
    );
}

#[test]
fn only_the_last_baseline_n_points_count() {
    let cfg = mechanics();
    // An old level of 500 followed by ten nights at 1000.
    let mut history = vec![500.0; 30];
    history.extend([1000.0; 10]);
    let a = assess(&history, 1000.0, true, &cfg);
    assert_eq!(a.verdict, Verdict::Stable);
    assert_eq!((a.baseline_points, a.baseline_median), (10, 1000.0));
}

#[test]
fn noisy_baseline_widens_the_bound() {
    let cfg = mechanics();
    // ±10% jitter: spread about 7%, so k × spread (about 20%) rules.
    let mut rng = Rng(5);
    let history = series(&mut rng, 10, 1000.0, 10.0);
    let a = assess(&history, 0.9 * median_or_panic(&history), true, &cfg);
    assert!(a.spread_pct > 3.0, "{a:?}");
    assert_eq!(a.bound_pct, 3.0 * a.spread_pct);
    assert!(a.bound_pct > cfg.threshold_pct);
    assert_eq!(a.verdict, Verdict::Stable, "10% is within the noise");
    let far = assess(&history, 0.5 * a.baseline_median, true, &cfg);
    assert_eq!(far.verdict, suspect(Direction::Regression));
    // The exact figures on a hand-computed baseline: median 100,
    // deviations 0,0,2,2,4 → MAD 2 → spread 2.9652%, bound 8.8956%.
    let a = assess(&[96.0, 98.0, 100.0, 102.0, 104.0, 100.0], 91.0, true, &cfg);
    assert!((a.spread_pct - 2.9652).abs() < 1e-9, "{a:?}");
    assert!((a.bound_pct - 8.8956).abs() < 1e-9);
    assert_eq!(a.change_pct, -9.0);
    assert_eq!(a.verdict, suspect(Direction::Regression));
    let a = assess(&[96.0, 98.0, 100.0, 102.0, 104.0, 100.0], 92.0, true, &cfg);
    assert_eq!(a.verdict, Verdict::Stable);
}

fn median_or_panic(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    gpufleet_kernels::percentile(&sorted, 50.0).unwrap()
}

#[test]
fn bound_is_strict() {
    let cfg = mechanics();
    let flat = [100.0; 10];
    assert_eq!(assess(&flat, 95.0, true, &cfg).verdict, Verdict::Stable);
    assert_eq!(assess(&flat, 105.0, true, &cfg).verdict, Verdict::Stable);
    assert_eq!(
        assess(&flat, 94.9, true, &cfg).verdict,
        suspect(Direction::Regression)
    );
}

#[test]
fn bad_values_are_refused_or_left_out() {
    let cfg = mechanics();
    let good = [100.0; 10];
    for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -5.0] {
        let a = assess(&good, v, true, &cfg);
        assert!(
            reason(&a).contains("is not a positive finite number"),
            "{v}: {a:?}"
        );
        assert!(a.value.is_finite() && a.change_pct == 0.0);
        assert_eq!(a.baseline_median, 100.0);
    }
    assert_eq!(
        reason(&assess(&good, f64::NAN, true, &cfg)),
        "value NaN is not a positive finite number"
    );
    // Bad baseline points are dropped before counting and windowing.
    let mixed = [
        100.0,
        f64::NAN,
        101.0,
        0.0,
        99.0,
        -3.0,
        f64::INFINITY,
        100.0,
    ];
    let a = assess(&mixed, 100.0, true, &cfg);
    assert_eq!(
        reason(&a),
        "4 baseline points, 5 needed (4 not positive and finite, left out)"
    );
    let mut enough = mixed.to_vec();
    enough.push(100.5);
    let a = assess(&enough, 80.0, true, &cfg);
    assert_eq!(a.verdict, suspect(Direction::Regression));
    assert_eq!((a.baseline_points, a.baseline_median), (5, 100.0));
    // A bad point among many good ones leaves a full window.
    let mut long = vec![100.0; 12];
    long[11] = f64::NAN;
    assert_eq!(assess(&long, 100.0, true, &cfg).baseline_points, 10);
}

#[test]
fn extreme_ratios_stay_finite() {
    let cfg = DetectConfig::default();
    let tiny = [f64::MIN_POSITIVE; 10];
    let a = assess(&tiny, f64::MAX, true, &cfg);
    assert!(reason(&a).contains("too large to express"));
    assert!(a.change_pct.is_finite() && a.spread_pct.is_finite() && a.bound_pct.is_finite());
}

/// A baseline so noisy that its bound is ±hundreds of percent cannot call anything "stable".
#[test]
fn a_very_noisy_baseline_is_too_noisy_to_judge_not_stable() {
    let cfg = DetectConfig::default();
    let baseline = [10.0, 80.0, 5.0, 120.0, 30.0, 2.0, 60.0, 15.0, 90.0, 40.0];
    let a = assess(&baseline, 40.0, true, &cfg);
    assert!(a.spread_pct > NOISY_SPREAD_PCT, "{a:?}");
    assert!(matches!(a.verdict, Verdict::NoVerdict { .. }), "{a:?}");
    assert!(reason(&a).contains("too noisy to judge"), "{}", reason(&a));
    // A quiet baseline still says stable.
    let quiet = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8];
    assert_eq!(assess(&quiet, 100.3, true, &cfg).verdict, Verdict::Stable);
}

/// Totals of simulated 10% steps.
#[derive(Debug, Default)]
struct StepRun {
    steps: usize,
    /// Steps confirmed on the night of the step or the night after.
    within_two_nights: usize,
}

/// Per seed: `nights_before` nights of 1000 ± `jitter_pct` uniform noise, then a step of
/// `step_pct` (a regression for a higher-is-better metric). The step night and the next are
/// assessed like nightly runs: a suspect gets one rerun from the new level, against the same
/// baseline; an unconfirmed night joins the baseline, its rerun does not.
fn simulate_steps(
    seeds: std::ops::Range<u64>,
    jitter_pct: f64,
    step_pct: f64,
    cfg: &DetectConfig,
) -> StepRun {
    let mut run = StepRun::default();
    for seed in seeds {
        let mut rng = Rng(0x5EED_0000 + seed);
        // A random phase: the step comes after 10 to 40 quiet nights.
        let nights_before = 10 + (crate::test_rng::splitmix64(&mut rng.0) % 31) as usize;
        let mut history = series(&mut rng, nights_before, 1000.0, jitter_pct);
        let level = 1000.0 * (1.0 - step_pct / 100.0);
        run.steps += 1;
        for _ in 0..2 {
            let value = rng.around(level, jitter_pct);
            let night = assess(&history, value, true, cfg);
            if matches!(night.verdict, Verdict::Suspect { .. }) {
                let rerun = assess(&history, rng.around(level, jitter_pct), true, cfg);
                if confirmed(&night, &rerun) == Some(Direction::Regression) {
                    run.within_two_nights += 1;
                    break;
                }
            }
            history.push(value);
        }
    }
    run
}

/// The table in docs/architecture.md ("Choosing the regression defaults"): false alerts per
/// 100-night series and 10% steps confirmed within two nights, at ±4% uniform jitter, over a
/// grid of the knobs. `cargo test -p gpufleet-coordinator regression_defaults_grid -- --ignored
/// --nocapture` prints it.
#[test]
#[ignore = "prints the table the defaults were chosen from (about 10 s)"]
fn regression_defaults_grid() {
    println!(
        "| baseline_n | threshold_pct | k | series with a false alert | steps confirmed in 2 nights |"
    );
    println!("| --- | --- | --- | --- | --- |");
    for baseline_n in [10, 20] {
        for threshold_pct in [5.0, 6.0, 7.0, 8.0] {
            for k in [0.0, 1.5, 2.0, 3.0] {
                let cfg = DetectConfig {
                    baseline_n,
                    threshold_pct,
                    k,
                    ..DetectConfig::default()
                };
                let noise = simulate_noise(0..2000, 4.0, &cfg);
                let steps = simulate_steps(0..2000, 4.0, 10.0, &cfg);
                println!(
                    "| {baseline_n} | {threshold_pct} | {k} | {:.2}% | {:.1}% |",
                    noise.series_with_an_alert as f64 / 20.0,
                    steps.within_two_nights as f64 / 20.0
                );
            }
        }
    }
}
