//! Memory-system probes: read bandwidth ([`sum_f64`]), dependent-load latency ([`pointer_chase`]) and
//! the CPU backend's "launch latency" ([`pool_roundtrip`]).
//!
//! They mirror the GPU micro-benchmarks so the CPU row of each table measures the same thing:
//! `sum_f64` is bound by how fast memory streams into the cores, `pointer_chase` by how long one load
//! takes when the next address depends on it, and `pool_roundtrip` by what it costs to hand a trivial
//! task to the thread pool and wait for it, the CPU counterpart of launching an empty kernel.

use rayon::prelude::*;

use super::elementwise::CHUNK;
use super::has_avx2_fma;

/// f64 lanes of [`chunk_sum`]: enough independent adds to hide the add latency, so the loop keeps up
/// with memory.
const LANES: usize = 16;

/// Sum of `x` in f64, one rayon task per chunk of 64K elements.
///
/// Each chunk is summed in 16 f64 lanes of converted floats (vectorized), and the chunk sums are added
/// in chunk order, so the result does not depend on the thread count or on scheduling.
pub fn sum_f64(x: &[f32]) -> f64 {
    let fma = has_avx2_fma();
    if x.len() <= CHUNK {
        return chunk_sum(x, fma);
    }
    let partials: Vec<f64> = x.par_chunks(CHUNK).map(|c| chunk_sum(c, fma)).collect();
    partials.iter().sum()
}

/// Sum of `x` in f64 on the calling thread (vectorized, AVX2 where available); for callers that
/// already run inside a task, like a row of [`super::rows::layernorm`].
pub(super) fn sum_f64_serial(x: &[f32]) -> f64 {
    chunk_sum(x, has_avx2_fma())
}

fma_dispatch! {
    /// Sum of one chunk, dispatched to the AVX2 copy when `fma` is set (AVX converts four floats per
    /// instruction where SSE2 converts two, which matters once the data sits in cache).
    fn chunk_sum(x: &[f32]) -> f64 => chunk_sum_impl
}

#[inline(always)]
fn chunk_sum_impl(x: &[f32]) -> f64 {
    let mut lanes = [0.0f64; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (acc, &v) in lanes.iter_mut().zip(chunk) {
            *acc += f64::from(v);
        }
    }
    let tail: f64 = chunks.remainder().iter().map(|&v| f64::from(v)).sum();
    lanes.iter().sum::<f64>() + tail
}

/// Follows `idx = next[idx]` `hops` times from `start` and returns the last index.
///
/// Every load depends on the one before, so the time per hop is the load latency of wherever `next`
/// lives (L1 … DRAM). The result goes through [`std::hint::black_box`], and the caller gets it, so the
/// chain cannot be skipped.
///
/// # Panics
///
/// Panics if the chain reaches an index that is not below `next.len()` (the caller builds `next` as a
/// permutation, which never does).
pub fn pointer_chase(next: &[u32], start: u32, hops: u64) -> u32 {
    let mut idx = start;
    for _ in 0..hops {
        idx = next[idx as usize];
    }
    std::hint::black_box(idx)
}

/// One trivial task through the current rayon pool: `out[0] = input[0]` in a task spawned inside
/// `rayon::scope`, joined before returning.
///
/// Called from outside the pool, this is the full round trip a real kernel pays: the scope is injected
/// into the pool, a worker wakes, runs the spawned task and signals the caller. Empty slices skip the
/// copy but still make the round trip.
pub fn pool_roundtrip(input: &[f32], out: &mut [f32]) {
    rayon::scope(|scope| {
        scope.spawn(|_| {
            if let (Some(dst), Some(&src)) = (out.first_mut(), input.first()) {
                *dst = src;
            }
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::backend::cpu::ops::test_data as data;

    #[test]
    fn sum_matches_a_sequential_f64_sum() {
        for len in [0, 1, 17, CHUNK, CHUNK + 5, 5 * CHUNK + 3] {
            let x = data(len, len as u64 + 1);
            let exact: f64 = x.iter().map(|&v| f64::from(v)).sum();
            let magnitude: f64 = x.iter().map(|&v| f64::from(v).abs()).sum();
            for dispatched in [false, true] {
                let got = if dispatched {
                    sum_f64(&x)
                } else {
                    chunk_sum_impl(&x)
                };
                assert!(
                    (got - exact).abs() <= 1e-13 * magnitude,
                    "len={len} dispatched={dispatched}: {got} vs {exact}"
                );
            }
        }
        // Values that an f32 accumulator would lose: 2^24 + many ones.
        let mut x = vec![1.0f32; 3 * CHUNK];
        x[0] = 16_777_216.0;
        assert_eq!(sum_f64(&x), 16_777_216.0 + (3 * CHUNK - 1) as f64);
    }

    #[test]
    fn sum_does_not_depend_on_the_thread_count() {
        let x = data(7 * CHUNK + 11, 3);
        let results: Vec<f64> = [1, 2, 3]
            .iter()
            .map(|&threads| {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .expect("test pool");
                pool.install(|| sum_f64(&x))
            })
            .collect();
        assert!(results.iter().all(|&r| r == results[0]), "{results:?}");
    }

    /// A single cycle through all `len` slots in a shuffled order; returns (next, order).
    fn cycle(len: usize, seed: u64) -> (Vec<u32>, Vec<u32>) {
        let mut order: Vec<u32> = (0..len as u32).collect();
        let mut s = seed | 1;
        for i in (1..len).rev() {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            order.swap(i, (s >> 33) as usize % (i + 1));
        }
        let mut next = vec![0u32; len];
        for i in 0..len {
            next[order[i] as usize] = order[(i + 1) % len];
        }
        (next, order)
    }

    #[test]
    fn pointer_chase_lands_where_the_cycle_says() {
        for len in [1, 2, 1000] {
            let (next, order) = cycle(len, 42 + len as u64);
            for hops in [0, 1, 7, len as u64, 3 * len as u64 + 5] {
                let expected = order[(hops % len as u64) as usize];
                assert_eq!(
                    pointer_chase(&next, order[0], hops),
                    expected,
                    "len={len} hops={hops}"
                );
            }
        }
        assert_eq!(pointer_chase(&[], 5, 0), 5);
    }

    #[test]
    fn pool_roundtrip_copies_the_first_element() {
        let mut out = [0.0f32, 9.0];
        pool_roundtrip(&[3.5, 1.0], &mut out);
        assert_eq!(out, [3.5, 9.0]);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("test pool");
        pool.install(|| pool_roundtrip(&[-2.0], &mut out));
        assert_eq!(out[0], -2.0);
        pool_roundtrip(&[], &mut []);
    }
}
