//! Seeded input generation.
//!
//! Every value is a small multiple of a power of two, so it is exact in fp16 (fp16 storage changes
//! nothing), sums of many of them stay exact in f64, and partial sums stay exact in f32 much longer than
//! arbitrary floats would. That keeps the references honest and the tolerances tight.
//!
//! Values depend only on the Pcg64 (PCG XSL RR 128/64) stream seeded from `(seed, input index)` and on
//! the mapping below, not on `rand`'s distribution code, so they are stable across `rand` versions.
//! Changing any of this changes results: bump [`crate::KERNELS_VERSION`].

use rand::{RngCore, SeedableRng};
use rand_pcg::Pcg64;

use crate::catalog::KernelId;
use crate::problem::Problem;
use crate::types::Buffer;

/// A set of values `k / denom` for integer `k` in `lo..=hi`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ValueSet {
    lo: i32,
    hi: i32,
    denom: f32,
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

fn rng_for(seed: u64, index: usize) -> Pcg64 {
    Pcg64::seed_from_u64(seed ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// Maps 32 random bits onto `0..span` with a multiply-shift (bias below 2^-22 for our spans).
fn below(bits: u32, span: u32) -> u32 {
    ((u64::from(bits) * u64::from(span)) >> 32) as u32
}

fn fill(set: ValueSet, len: usize, rng: &mut Pcg64) -> Vec<f32> {
    let span = (set.hi - set.lo + 1) as u32;
    // `denom` is a power of two, so multiplying by its inverse is exact (and cheaper than dividing).
    let scale = 1.0 / set.denom;
    let value = |bits: u32| (set.lo + below(bits, span) as i32) as f32 * scale;
    let mut out = vec![0f32; len];
    let mut pairs = out.chunks_exact_mut(2);
    for pair in &mut pairs {
        let r = rng.next_u64();
        pair[0] = value((r >> 32) as u32);
        pair[1] = value(r as u32);
    }
    if let [last] = pairs.into_remainder() {
        *last = value((rng.next_u64() >> 32) as u32);
    }
    out
}

/// The pointer-chasing table of `memlat_cpu`: `entries / 16` nodes of 64 bytes; the first u32 of each
/// node holds the entry index of the next node in one random cycle over all nodes (Sattolo's
/// algorithm), the rest are 0.
fn chase_table(entries: usize, rng: &mut Pcg64) -> Vec<u32> {
    let nodes = entries / 16;
    let mut next: Vec<u32> = (0..nodes as u32).collect();
    for i in (1..nodes).rev() {
        // j uniform in 0..i (Sattolo: strictly below i, which makes one single cycle).
        let j = ((u128::from(rng.next_u64()) * i as u128) >> 64) as usize;
        next.swap(i, j);
    }
    let mut table = vec![0u32; entries];
    for (node, &to) in next.iter().enumerate() {
        table[node * 16] = to * 16;
    }
    table
}

/// Inputs of `problem` for `seed`, in the order the kernels take them.
impl Problem {
    /// Seeded inputs, deterministic for `(problem, seed)`; see this module for the value sets.
    ///
    /// Defined here rather than in `problem.rs` so the problem module does not depend on how inputs
    /// are made (this module depends on it).
    pub fn inputs(&self, seed: u64) -> Vec<Buffer> {
        generate(self, seed)
    }
}

fn generate(problem: &Problem, seed: u64) -> Vec<Buffer> {
    let lens = problem.input_lens();
    let sets: Vec<ValueSet> = match problem.id() {
        KernelId::MemlatCpu => {
            let mut rng = rng_for(seed, 0);
            return vec![Buffer::U32(chase_table(lens[0], &mut rng))];
        }
        KernelId::Softmax | KernelId::Relu | KernelId::Sigmoid | KernelId::Tanh => vec![WIDE],
        KernelId::LayerNorm => vec![UNIT, GAMMA, UNIT],
        KernelId::RmsNorm => vec![UNIT, GAMMA],
        KernelId::LayerNormRmsNormFused => vec![UNIT, GAMMA, UNIT, GAMMA],
        // Images like every other input; weights scaled per layer by the model.
        KernelId::Model(_) => {
            let images = fill(UNIT, lens[0], &mut rng_for(seed, 0));
            let weights = problem.graph().weights(&mut rng_for(seed, 1));
            return vec![Buffer::F32(images), Buffer::F32(weights)];
        }
        _ => vec![UNIT; lens.len()],
    };
    sets.into_iter()
        .zip(lens)
        .enumerate()
        .map(|(i, (set, len))| Buffer::F32(fill(set, len, &mut rng_for(seed, i))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
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

    #[test]
    fn chase_table_is_one_cycle_over_all_nodes() {
        let p = problem("memlat_cpu", &[("size_kib", 64)]);
        let inputs = p.inputs(42);
        let table = inputs[0].as_u32().unwrap();
        let nodes = table.len() / 16;
        assert_eq!(nodes, 1024);
        let mut seen = vec![false; nodes];
        let mut at = 0usize;
        for _ in 0..nodes {
            assert!(!seen[at / 16], "node {} visited twice", at / 16);
            seen[at / 16] = true;
            assert_eq!(at % 16, 0);
            at = table[at] as usize;
        }
        assert_eq!(at, 0, "cycle closes after visiting every node");
        assert!(
            table
                .iter()
                .enumerate()
                .all(|(i, v)| i % 16 == 0 || *v == 0)
        );
    }
}
