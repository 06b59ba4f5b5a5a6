//! The noise rule and warm-up through a real agent (gRPC, a real worker process), on
//! `debug_noise`, whose iteration times follow the distribution its parameters draw:
//!
//! - 1% of iterations 5× slower (a long tail): not noisy, the median within 1% of the base, the
//!   tail counted as high outliers;
//! - 30% of iterations 1.5× slower (two modes): noisy, by the quartile spread;
//! - a ramp of 20 slow first iterations: warmed up through, recorded as warm-up;
//! - a plateau of 20 slow first iterations (which looks steady while it lasts): dropped from the
//!   samples after the fact and recorded as warm-up.
//!
//! The cases run one after another in one test: the kernel spins on a core, and cases run side by
//! side on a 2-core machine would preempt each other, which is noise of another kind.

mod common;

use common::{client, run, spec, start};
use gpufleet_kernels::PartialSettings;
use gpufleet_proto::v1 as pb;

const BASE_US: i64 = 1000;

fn noise_spec(params: &[(&str, i64)], min_iterations: u32) -> pb::RunSpec {
    pb::RunSpec {
        settings: Some(PartialSettings {
            warmup: Some(1),
            min_iterations: Some(min_iterations),
            min_seconds: Some(0.2),
            max_seconds: Some(4.0),
            target_ci_pct: Some(1.0),
            ..PartialSettings::default()
        }),
        ..spec("debug_noise", params)
    }
}

fn stats(r: &pb::RunResult) -> &pb::Stats {
    assert_eq!(r.status(), pb::RunStatus::Ok, "{}", r.message);
    r.stats.as_ref().expect("an ok run has stats")
}

/// The median's distance from `base_s`, relative.
fn off_base(s: &pb::Stats, base_s: f64) -> f64 {
    (s.median_s - base_s).abs() / base_s
}

fn config_u32(r: &pb::RunResult, key: &str) -> u32 {
    r.config
        .get(key)
        .unwrap_or_else(|| panic!("config has no {key}: {:?}", r.config))
        .parse()
        .unwrap()
}

#[tokio::test]
async fn debug_noise_cases_hold_through_a_real_agent() {
    let a = start(|_| {}).await;
    let mut c = client(&a).await;
    let base_s = BASE_US as f64 * 1e-6;

    // A long tail: 1% of iterations 5× slower.
    let (_, r) = run(
        &mut c,
        "tail",
        noise_spec(
            &[
                ("base_us", BASE_US),
                ("slow_pct", 1),
                ("slow_factor_pct", 500),
            ],
            1000,
        ),
    )
    .await;
    let s = stats(&r);
    assert!(!s.noisy, "a 1% tail is not noise: {s:?}");
    assert!(off_base(s, base_s) < 0.01, "median {} s: {s:?}", s.median_s);
    assert!(s.outliers_high >= 1, "the tail is counted: {s:?}");
    assert!(s.upper_fence_s < 5.0 * base_s, "{s:?}");
    assert!(s.robust_cv < 0.05 && s.cv > s.robust_cv, "{s:?}");

    // Two modes: 30% of iterations 1.5× slower.
    let (_, r) = run(
        &mut c,
        "bimodal",
        noise_spec(
            &[
                ("base_us", BASE_US),
                ("slow_pct", 30),
                ("slow_factor_pct", 150),
            ],
            400,
        ),
    )
    .await;
    let s = stats(&r);
    assert!(s.noisy, "two modes are noise: {s:?}");
    let quartile_cv = (s.p75_s - s.p25_s) / 1.349 / s.median_s;
    assert!(quartile_cv > gpufleet_kernels::NOISY_SPREAD, "{s:?}");

    // A ramp: the first 20 iterations fall from 5× to the base.
    let (_, r) = run(
        &mut c,
        "ramp",
        noise_spec(
            &[("base_us", BASE_US), ("ramp", 20), ("ramp_factor_pct", 500)],
            100,
        ),
    )
    .await;
    let s = stats(&r);
    assert!(r.warmup_done >= 20, "warm-up {} < 20", r.warmup_done);
    assert_eq!(config_u32(&r, "warmup_iterations"), r.warmup_done);
    assert!(r.config.contains_key("warmup_s"), "{:?}", r.config);
    assert!(!s.noisy, "{s:?}");
    assert!(off_base(s, base_s) < 0.01, "median {} s: {s:?}", s.median_s);
    let first: Vec<f64> = r.times_s.iter().take(5).copied().collect();
    assert!(
        first.iter().filter(|t| **t < 1.3 * base_s).count() >= 4,
        "the ramp is not in the samples: {first:?}"
    );

    // A plateau: the first 20 iterations all 3× the base, 5 ms each, longer than the minimum
    // warm-up time, and flat, so warm-up alone cannot see it.
    let plateau_base = 5 * BASE_US;
    let (_, r) = run(
        &mut c,
        "plateau",
        noise_spec(
            &[
                ("base_us", plateau_base),
                ("ramp", 20),
                ("ramp_factor_pct", 300),
                ("plateau", 1),
            ],
            60,
        ),
    )
    .await;
    let s = stats(&r);
    let base_s = plateau_base as f64 * 1e-6;
    assert!(r.warmup_done >= 20, "warm-up {} < 20", r.warmup_done);
    assert!(
        config_u32(&r, "warmup_trimmed") >= 1,
        "the plateau's rest was dropped after the fact: {:?}",
        r.config
    );
    assert!(
        r.times_s.iter().take(3).all(|t| *t < 2.0 * base_s),
        "{:?}",
        &r.times_s[..3]
    );
    assert!(off_base(s, base_s) < 0.01, "median {} s: {s:?}", s.median_s);
}
