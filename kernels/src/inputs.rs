//! Seeded input generation.
//!
//! Every value is a small multiple of a power of two, so it is exact in fp16 (fp16 storage changes
//! nothing), sums of many of them stay exact in f64, and partial sums stay exact in f32 much longer than
//! arbitrary floats would. That keeps the references honest and the tolerances tight.
//!
//! Values depend only on the Pcg64 (PCG XSL RR 128/64) stream seeded from `(seed, input index)` and on
//! the mapping below, not on `rand`'s distribution code, so they are stable across `rand` versions.
//! Changing any of this changes results: bump [`crate::KERNELS_VERSION`].
//!
//! Pure and below the catalog: each kernel family says which value set each of its inputs takes
//! (`Family::inputs` in `catalog/`), and [`Problem::inputs`](crate::Problem::inputs) asks it.

use rand::{RngCore, SeedableRng};
use rand_pcg::Pcg64;

use crate::types::Buffer;

/// A set of values `k / denom` for integer `k` in `lo..=hi`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ValueSet {
    lo: i32,
    hi: i32,
    denom: f32,
}

impl ValueSet {
    /// Multiples of `2^-bits` from `lo` to `hi` of them: exact in fp16 while `|lo|, |hi|` ≤ 2048.
    pub(crate) fn scaled(lo: i32, hi: i32, bits: i32) -> ValueSet {
        ValueSet {
            lo,
            hi,
            denom: 2f32.powi(bits),
        }
    }
}

/// Multiples of 1/256 in [-1, 1]: matrices, vectors, layer-norm input, beta.
pub(crate) const UNIT: ValueSet = ValueSet {
    lo: -256,
    hi: 256,
    denom: 256.0,
};
/// Multiples of 1/64 in [-4, 4]: softmax and activation inputs, where the interesting range is wider.
pub(crate) const WIDE: ValueSet = ValueSet {
    lo: -256,
    hi: 256,
    denom: 64.0,
};
/// Multiples of 1/256 in [0.5, 1.5]: gamma, so normalised outputs keep their scale.
pub(crate) const GAMMA: ValueSet = ValueSet {
    lo: 128,
    hi: 384,
    denom: 256.0,
};

/// The generator of input `index` for `seed`.
pub(crate) fn rng_for(seed: u64, index: usize) -> Pcg64 {
    Pcg64::seed_from_u64(seed ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// Maps 32 random bits onto `0..span` with a multiply-shift (bias below 2^-22 for our spans).
fn below(bits: u32, span: u32) -> u32 {
    ((u64::from(bits) * u64::from(span)) >> 32) as u32
}

/// `len` values of `set` drawn from `rng`.
pub(crate) fn fill(set: ValueSet, len: usize, rng: &mut Pcg64) -> Vec<f32> {
    let mut out = vec![0f32; len];
    fill_into(set, &mut out, rng);
    out
}

/// [`fill`] into `out`: its values drawn from `rng`. Drawing a buffer in consecutive stretches
/// of even lengths draws what one call over it draws.
pub(crate) fn fill_into(set: ValueSet, out: &mut [f32], rng: &mut Pcg64) {
    let len = out.len();
    let span = (set.hi - set.lo + 1) as u32;
    // `denom` is a power of two, so multiplying by its inverse is exact (and cheaper than dividing).
    let scale = 1.0 / set.denom;
    let value = |bits: u32| (set.lo + below(bits, span) as i32) as f32 * scale;
    let whole = len - len % 2;
    // A pair a draw.
    crate::draw::draw_units(&mut out[..whole], 2, 1, rng, |part, rng| {
        for pair in part.chunks_exact_mut(2) {
            let r = rng.next_u64();
            pair[0] = value((r >> 32) as u32);
            pair[1] = value(r as u32);
        }
    });
    if let [last] = &mut out[whole..] {
        *last = value((rng.next_u64() >> 32) as u32);
    }
}

/// Input `i` of length `lens[i]` drawn from `sets[i]`, each from its own stream of `seed`.
pub(crate) fn seeded(sets: &[ValueSet], lens: &[usize], seed: u64) -> Vec<Buffer> {
    sets.iter()
        .zip(lens)
        .enumerate()
        .map(|(i, (&set, &len))| Buffer::F32(fill(set, len, &mut rng_for(seed, i))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Problem;
    use std::collections::BTreeMap;

    fn problem(kernel: &str, params: &[(&str, i64)]) -> Problem {
        let params: BTreeMap<String, i64> =
            params.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        Problem::new(kernel, "", &params, "", true).expect("valid spec")
    }

    fn exact_in_f16(v: f32) -> bool {
        // Normal fp16 has 11 significant bits; our values are >= 2^-8 in magnitude or zero.
        if v == 0.0 {
            return true;
        }
        let a = v.abs();
        let exp = a.log2().floor() as i32;
        assert!((-14..=15).contains(&exp), "{v} outside fp16 normal range");
        let scaled = a * 2f32.powi(10 - exp);
        scaled == scaled.round()
    }

    #[test]
    fn filling_across_threads_gives_the_values_of_one_stream() {
        // `fill` past the threshold, odd length: the pairs and the last value as one stream draws them.
        let len = (1 << 22) + 3;
        let got = fill(UNIT, len, &mut rng_for(9, 1));
        let mut rng = rng_for(9, 1);
        let at = |r: u32| (-256 + below(r, 513) as i32) as f32 / 256.0;
        for (i, pair) in got.chunks(2).enumerate() {
            let r = rng.next_u64();
            assert_eq!(pair[0], at((r >> 32) as u32), "value {}", 2 * i);
            if let Some(&b) = pair.get(1) {
                assert_eq!(b, at(r as u32), "value {}", 2 * i + 1);
            }
        }
    }

    #[test]
    fn deterministic_per_seed_and_different_across_seeds() {
        let p = problem("vec_add", &[("n", 1001)]);
        let a = p.inputs(7);
        assert_eq!(a, p.inputs(7));
        assert_ne!(a, p.inputs(8));
        assert_ne!(a[0], a[1], "inputs use distinct streams");
        assert_eq!(a[0].len(), 1001);
    }

    #[test]
    fn values_are_in_their_sets_and_exact_in_fp16() {
        let p = problem("layernorm", &[("rows", 16), ("cols", 512)]);
        let inputs = p.inputs(1);
        let x = inputs[0].as_f32().unwrap();
        let gamma = inputs[1].as_f32().unwrap();
        assert!(
            x.iter()
                .all(|v| (-1.0..=1.0).contains(v) && (v * 256.0).fract() == 0.0)
        );
        assert!(gamma.iter().all(|v| (0.5..=1.5).contains(v)));
        assert!(x.iter().chain(gamma).all(|v| exact_in_f16(*v)));
        // Both ends of the range show up, so the mapping covers the whole set.
        assert!(x.contains(&1.0) || x.contains(&-1.0));
        let wide = problem("tanh", &[("n", 4096)]).inputs(3);
        let w = wide[0].as_f32().unwrap();
        assert!(
            w.iter()
                .all(|v| (-4.0..=4.0).contains(v) && (v * 64.0).fract() == 0.0)
        );
        assert!(w.iter().any(|v| v.abs() > 3.0));
        assert!(w.iter().all(|v| exact_in_f16(*v)));
    }

    #[test]
    fn buffer_counts_and_lengths_match_the_problem() {
        for (kernel, params) in [
            ("gemm", vec![("m", 3), ("n", 5), ("k", 7)]),
            ("conv2d", vec![("channels", 2), ("height", 5), ("width", 6)]),
            ("layernorm_rmsnorm_fused", vec![("rows", 3), ("cols", 9)]),
            ("noop", vec![]),
            ("memlat_cpu", vec![("size_kib", 4)]),
        ] {
            let p = problem(kernel, &params);
            let inputs = p.inputs(0);
            let kinds: Vec<_> = inputs.iter().map(Buffer::kind).collect();
            assert_eq!(kinds, p.input_kinds(), "{kernel}");
            let lens: Vec<_> = inputs.iter().map(Buffer::len).collect();
            assert_eq!(lens, p.input_lens(), "{kernel}");
        }
    }
}
