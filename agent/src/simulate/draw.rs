//! The seeded distribution simulated results are drawn from. Pure: a seed, an agent's index and
//! a run's number in, iteration times out; the same inputs give the same times.
//!
//! One iteration of a problem takes [`ideal_s`] on the simulated device (a launch overhead plus
//! its FLOPs at a fixed fraction of the device's peak and its bytes at the copy rate, by default
//! a fixed fraction of the device's, or `--copy-gbps`), times three factors:
//! - the **device's factor**, drawn once per agent from the seed: `exp(spread · z)`, so devices
//!   differ by about `spread` (1 % by default), and an agent planted slow by `--slow` multiplies
//!   it by `1 + FRACTION`;
//! - the **run's factor**, drawn per run: `exp(spread / 4 · z)`, the small run-to-run noise;
//! - each **iteration's** jitter, `exp(0.3 % · z)`, well inside the noise rule's limits.

use super::device::{FP32_FLOPS, MEMORY_BYTES_PER_S};
use gpufleet_kernels::Problem;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;

/// Launch overhead of one iteration, seconds: what a `noop` measures.
const LAUNCH_S: f64 = 8e-6;
/// Fractions of the peaks an iteration runs at.
const FLOPS_EFFICIENCY: f64 = 0.6;
const BYTES_EFFICIENCY: f64 = 0.8;
/// The run-to-run noise, as a fraction of the device-to-device spread.
const RUN_NOISE_PER_SPREAD: f64 = 0.25;
/// The iteration-to-iteration jitter (relative standard deviation).
const ITERATION_JITTER: f64 = 0.003;
/// The stream of the device's factor (the runs' streams are numbered from 0).
const DEVICE_STREAM: u64 = u64::MAX;

/// The bytes a second an average simulated device moves unless `--copy-gbps` says otherwise.
pub const COPY_BYTES_PER_S: f64 = BYTES_EFFICIENCY * MEMORY_BYTES_PER_S;

/// One iteration of `problem` on the simulated device with no noise, its bytes moved at
/// `bytes_per_s`, seconds.
pub fn ideal_s(problem: &Problem, bytes_per_s: f64) -> f64 {
    LAUNCH_S + problem.flops() / (FLOPS_EFFICIENCY * FP32_FLOPS) + problem.bytes() / bytes_per_s
}

/// SplitMix64's finaliser: spreads nearby inputs over the whole range.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The generator of stream `stream` of agent `index` under `seed`.
fn rng(seed: u64, index: u64, stream: u64) -> Pcg64 {
    Pcg64::seed_from_u64(mix(mix(mix(seed) ^ index) ^ stream))
}

/// A standard normal draw (Box–Muller).
fn normal(rng: &mut Pcg64) -> f64 {
    // 1 - [0, 1) is (0, 1]: the logarithm stays finite.
    let u1: f64 = 1.0 - rng.random::<f64>();
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// What makes one simulated agent's results its own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profile {
    seed: u64,
    index: u64,
    spread: f64,
    /// The device's factor, with the planted slowdown.
    factor: f64,
    /// An average device's memory rate, bytes/s.
    bytes_per_s: f64,
}

impl Profile {
    /// Agent `index` under `seed`, devices spread by `spread`, planted `slow` (0: none).
    pub fn new(seed: u64, index: u64, spread: f64, slow: f64) -> Profile {
        let z = normal(&mut rng(seed, index, DEVICE_STREAM));
        Profile {
            seed,
            index,
            spread,
            factor: (spread * z).exp() * (1.0 + slow),
            bytes_per_s: COPY_BYTES_PER_S,
        }
    }

    /// The same profile with an average device moving `bytes_per_s` (what its `copy` measures).
    pub fn at_copy_rate(self, bytes_per_s: f64) -> Profile {
        Profile {
            bytes_per_s,
            ..self
        }
    }

    /// The device's factor (1: an average device).
    pub fn factor(&self) -> f64 {
        self.factor
    }

    /// The `count` iteration times of this agent's run number `run` of `problem`.
    pub fn times(&self, problem: &Problem, run: u64, count: usize) -> Vec<f64> {
        let mut rng = rng(self.seed, self.index, run);
        let base = ideal_s(problem, self.bytes_per_s)
            * self.factor
            * (RUN_NOISE_PER_SPREAD * self.spread * normal(&mut rng)).exp();
        (0..count)
            .map(|_| base * (ITERATION_JITTER * normal(&mut rng)).exp())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn problem(kernel: &str) -> Problem {
        Problem::new(kernel, "", &BTreeMap::new(), "", false).unwrap()
    }

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(f64::total_cmp);
        gpufleet_kernels::percentile(&v, 50.0).unwrap()
    }

    #[test]
    fn the_same_seed_gives_the_same_times_and_another_seed_others() {
        let copy = problem("copy");
        let a = Profile::new(7, 3, 0.01, 0.0);
        assert_eq!(a, Profile::new(7, 3, 0.01, 0.0));
        assert_eq!(a.times(&copy, 0, 10), a.times(&copy, 0, 10));
        assert_ne!(a.times(&copy, 0, 10), a.times(&copy, 1, 10));
        assert_ne!(a.factor(), Profile::new(8, 3, 0.01, 0.0).factor());
        assert_ne!(a.factor(), Profile::new(7, 4, 0.01, 0.0).factor());
    }

    #[test]
    fn devices_spread_as_asked_and_a_planted_agent_is_that_much_slower() {
        let factors: Vec<f64> = (0..2000)
            .map(|i| Profile::new(1, i, 0.01, 0.0).factor())
            .collect();
        let mean = factors.iter().sum::<f64>() / factors.len() as f64;
        let sd =
            (factors.iter().map(|f| (f - mean).powi(2)).sum::<f64>() / factors.len() as f64).sqrt();
        assert!((mean - 1.0).abs() < 0.002, "mean {mean}");
        assert!((sd - 0.01).abs() < 0.001, "sd {sd}");
        let (plain, slow) = (
            Profile::new(1, 5, 0.01, 0.0),
            Profile::new(1, 5, 0.01, 0.10),
        );
        assert!((slow.factor() / plain.factor() - 1.10).abs() < 1e-12);
        let copy = problem("copy");
        let ratio = median(slow.times(&copy, 0, 21)) / median(plain.times(&copy, 0, 21));
        assert!(
            (ratio - 1.10).abs() < 1e-9,
            "the same draws, 10 % longer: {ratio}"
        );
    }

    #[test]
    fn times_follow_the_problem_and_stay_quiet() {
        let p = Profile::new(3, 0, 0.0, 0.0);
        let noop = median(p.times(&problem("noop"), 0, 21));
        let gemm = median(p.times(&problem("gemm"), 0, 21));
        assert!((noop / LAUNCH_S - 1.0).abs() < 0.01, "noop {noop}");
        assert!(gemm > 1.5 * noop, "gemm {gemm} vs noop {noop}");
        let copy = problem("copy");
        let times = p.times(&copy, 0, 64);
        let m = median(times.clone());
        assert!(times.iter().all(|t| (t / m - 1.0).abs() < 0.02));
        // At a copy rate of 5 GB/s a large copy takes its bytes / 5 GB/s, within the jitter.
        let slow = p.at_copy_rate(5e9);
        let m = median(slow.times(&copy, 0, 21));
        let want = LAUNCH_S + copy.bytes() / 5e9;
        assert!((m / want - 1.0).abs() < 0.01, "{m} vs {want}");
    }
}
