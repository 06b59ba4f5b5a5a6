//! A model's seeded inputs: the weights, the token ids, the RoPE table and the KV-cache prefix.
//!
//! Weights are drawn like every other input (`inputs.rs`): integers `k` in `[-256, 256]` over a
//! power of two, so each is exact in fp16 and f16 storage computes on the same numbers as f32. A
//! projection with fan-in `K` takes `2^-s` with `256·2^-s` near `1/√K` (He-like uniform); the
//! projections that end a residual branch (`wo`, `w2`) are `1/√(2·blocks)` smaller, as GPT-2
//! initialises them, so the residual stream keeps its scale through the blocks. The norms' gains
//! are in [0.5, 1.5]; the embedding in [-1, 1].
//!
//! In a quantized dtype the matrices (the embedding too) are drawn as blocks that hold them
//! exactly ([`crate::quant`]), with about the same bounds; the norms' gains stay as above.

use rand::RngCore;
use rand_pcg::Pcg64;

use super::Config;
use crate::Dtype;
use crate::inputs::{GAMMA, UNIT, ValueSet, fill, rng_for};
use crate::quant::{fill_exact, scale_bits};

/// Scale exponent `s` of a projection with fan-in `fan_in` whose bound is divided by `shrink`:
/// values are `k·2^-s`, `|k| ≤ 256`.
pub fn weight_scale_bits(fan_in: usize, shrink: f64) -> i32 {
    let bound = 1.0 / ((fan_in as f64).sqrt() * shrink);
    (256.0 / bound).log2().round() as i32
}

/// `len` weights of a projection with fan-in `fan_in` whose bound is divided by `shrink`, in
/// `dtype`: multiples of `2^-s` up to 256 of them, or, quantized, blocks of about the same bound.
pub fn projection(
    dtype: Dtype,
    fan_in: usize,
    shrink: f64,
    len: usize,
    rng: &mut Pcg64,
) -> Vec<f32> {
    match dtype.block_format() {
        Some(f) => {
            let bound = 1.0 / ((fan_in as f64).sqrt() * shrink);
            fill_exact(f, scale_bits(f, bound), len, rng)
        }
        None => fill(
            ValueSet::scaled(-256, 256, weight_scale_bits(fan_in, shrink)),
            len,
            rng,
        ),
    }
}

/// The weights of `c` in `dtype` (see the module doc), `c.weights_len()` elements.
pub fn model_weights(c: &Config, seed: u64, dtype: Dtype) -> Vec<f32> {
    let mut rng = rng_for(seed, 1);
    let mut w = Vec::with_capacity(c.weights_len());
    let shrink = (2.0 * c.blocks as f64).sqrt();
    let d = c.dim;
    for _ in 0..c.blocks {
        w.extend(fill(GAMMA, d, &mut rng));
        w.extend(projection(dtype, d, 1.0, c.qkv_dim() * d, &mut rng));
        w.extend(projection(
            dtype,
            c.q_dim(),
            shrink,
            d * c.q_dim(),
            &mut rng,
        ));
        w.extend(fill(GAMMA, d, &mut rng));
        w.extend(projection(dtype, d, 1.0, 2 * c.ffn * d, &mut rng));
        w.extend(projection(dtype, c.ffn, shrink, d * c.ffn, &mut rng));
    }
    w.extend(fill(GAMMA, d, &mut rng));
    w.extend(match dtype.block_format() {
        Some(f) => fill_exact(f, scale_bits(f, 1.0), c.vocab * d, &mut rng),
        None => fill(UNIT, c.vocab * d, &mut rng),
    });
    if !c.tied {
        w.extend(projection(dtype, d, 1.0, c.vocab * d, &mut rng));
    }
    debug_assert_eq!(w.len(), c.weights_len());
    w
}

/// The RoPE table of `positions` positions for heads of `head_dim` with base `theta`: `cos` then
/// `sin`, each `[positions][head_dim/2]`, pair `i` turning by `pos · theta^(-2i/head_dim)`
/// (computed in f64, rounded once).
pub fn rope_table(positions: usize, head_dim: usize, theta: f64) -> Vec<f32> {
    let half = head_dim / 2;
    let mut t = vec![0f32; 2 * positions * half];
    let (cos, sin) = t.split_at_mut(positions * half);
    for p in 0..positions {
        for i in 0..half {
            let freq = theta.powf(-2.0 * i as f64 / head_dim as f64);
            let a = p as f64 * freq;
            cos[p * half + i] = a.cos() as f32;
            sin[p * half + i] = a.sin() as f32;
        }
    }
    t
}

/// `n` token ids below `vocab`, as f32 (exact).
pub fn tokens(n: usize, vocab: usize, seed: u64) -> Vec<f32> {
    let mut rng = rng_for(seed, 0);
    (0..n)
        .map(|_| ((rng.next_u64() >> 11) % vocab as u64) as f32)
        .collect()
}

/// The inputs of a model of shape `c` whose inputs have `input_lens` elements (a graph's, or
/// [`super::model_sizes`]'): token ids, weights in `dtype`, the RoPE table and the cache prefix.
pub fn model_inputs(c: &Config, input_lens: &[usize], seed: u64, dtype: Dtype) -> Vec<Vec<f32>> {
    let positions = input_lens[2] / c.head_dim.max(2);
    vec![
        tokens(input_lens[0], c.vocab, seed),
        model_weights(c, seed, dtype),
        rope_table(positions, c.head_dim, c.rope_theta),
        fill(UNIT, input_lens[3], &mut rng_for(seed, 3)),
    ]
}
