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

use super::shape::{Draw, WeightTensor, weight_tensors};
use super::{Config, PackedLayout};
use crate::inputs::{GAMMA, UNIT, ValueSet, fill, fill_into, rng_for};
use crate::quant::{QK, fill_exact, fill_exact_split, scale_bits};
use crate::{Buffer, Dtype};

/// Scale exponent `s` of a projection with fan-in `fan_in` whose bound is divided by `shrink`:
/// values are `k·2^-s`, `|k| ≤ 256`.
pub fn weight_scale_bits(fan_in: usize, shrink: f64) -> i32 {
    let bound = 1.0 / ((fan_in as f64).sqrt() * shrink);
    (256.0 / bound).log2().round() as i32
}

/// The bound of a projection's weights with fan-in `fan_in`, divided by `shrink` (He-like).
fn projection_bound(fan_in: usize, shrink: f64) -> f64 {
    1.0 / ((fan_in as f64).sqrt() * shrink)
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
    let mut out = vec![0f32; len];
    draw_tensor(Draw::Projection { fan_in, shrink }, dtype, &mut out, rng);
    out
}

/// The weights of `c` in `dtype` (see the module doc), `c.weights_len()` elements, each tensor
/// drawn in place.
pub fn model_weights(c: &Config, seed: u64, dtype: Dtype) -> Vec<f32> {
    let mut rng = rng_for(seed, 1);
    let mut w = vec![0f32; c.weights_len()];
    for t in weight_tensors(c) {
        draw_tensor(t.draw, dtype, &mut w[t.elem..t.elem + t.len], &mut rng);
    }
    w
}

/// Elements a stretch of [`model_weights_half`]'s draw (16 MiB of f32).
const HALF_STRETCH: usize = 1 << 22;

/// The weights [`model_weights`] draws in f16, as IEEE half words ([`half_words`]; every value
/// is exact in fp16), drawn a stretch at a time (even lengths, so the draws are the same): the
/// f32 weights are never held (an 8B model's 32 GB, where its halves are 16).
pub fn model_weights_half(c: &Config, seed: u64) -> Vec<u16> {
    let mut rng = rng_for(seed, 1);
    let mut w = Vec::with_capacity(c.weights_len());
    let mut stretch = vec![0f32; HALF_STRETCH];
    for t in weight_tensors(c) {
        debug_assert_eq!(w.len(), t.elem);
        let mut left = t.len;
        while left > 0 {
            let n = left.min(HALF_STRETCH);
            draw_tensor(t.draw, Dtype::F16, &mut stretch[..n], &mut rng);
            w.extend(half_words(&stretch[..n]));
            left -= n;
        }
    }
    w
}

/// `values` as IEEE half words, rounded to nearest (the weights drawn here are exact in fp16).
pub fn half_words(values: &[f32]) -> Vec<u16> {
    use half::vec::HalfFloatVecExt;
    Vec::<half::f16>::from_f32_slice(values).reinterpret_into()
}

/// Draws `out`, (a stretch of) a tensor drawn as `draw`, in `dtype` from `rng`: a stretch's
/// values are those of the whole tensor's draw there, the stretches taken in order (whole blocks
/// when quantized).
fn draw_tensor(draw: Draw, dtype: Dtype, out: &mut [f32], rng: &mut Pcg64) {
    match (draw, dtype.block_format()) {
        (Draw::Gains, _) => fill_into(GAMMA, out, rng),
        (Draw::Projection { fan_in, shrink }, Some(f)) => {
            fill_exact(f, scale_bits(f, projection_bound(fan_in, shrink)), out, rng);
        }
        (Draw::Projection { fan_in, shrink }, None) => {
            let set = ValueSet::scaled(-256, 256, weight_scale_bits(fan_in, shrink));
            fill_into(set, out, rng);
        }
        (Draw::Embedding, Some(f)) => fill_exact(f, scale_bits(f, 1.0), out, rng),
        (Draw::Embedding, None) => fill_into(UNIT, out, rng),
    }
}

/// The weights [`model_weights`] draws in the quantized `dtype`, straight into `layout`'s packed
/// buffer (`PackedLayout::pack` of them, without ever holding them as f32: an 8B model's
/// 32 GB). Tensors the layout does not hold are drawn past.
///
/// # Panics
/// If `dtype` is not quantized in the layout's format.
pub fn model_weights_packed(c: &Config, layout: &PackedLayout, seed: u64, dtype: Dtype) -> Vec<u8> {
    assert_eq!(
        dtype.block_format(),
        Some(layout.format()),
        "{}",
        dtype.name()
    );
    draw_packed(&weight_tensors(c), layout, &mut rng_for(seed, 1))
}

/// The one projection of `layout` (a `gemv`'s: `len` weights at element 0, fan-in `fan_in`)
/// drawn as [`projection`] draws it in the layout's format, straight into the packed buffer.
pub fn projection_packed(
    layout: &PackedLayout,
    fan_in: usize,
    len: usize,
    rng: &mut Pcg64,
) -> Vec<u8> {
    let draw = Draw::Projection {
        fan_in,
        shrink: 1.0,
    };
    draw_packed(&[WeightTensor { elem: 0, len, draw }], layout, rng)
}

/// `tensors` drawn from `rng` in order into `layout`'s buffer, in its format.
fn draw_packed(tensors: &[WeightTensor], layout: &PackedLayout, rng: &mut Pcg64) -> Vec<u8> {
    let f = layout.format();
    let mut out = vec![0u8; layout.bytes()];
    for t in tensors {
        let bits = match t.draw {
            Draw::Gains => {
                let gains = fill(GAMMA, t.len, rng);
                if let Some(at) = layout.find_vector(t.elem) {
                    for (o, v) in out[at..].chunks_exact_mut(4).zip(&gains) {
                        o.copy_from_slice(&v.to_le_bytes());
                    }
                }
                continue;
            }
            Draw::Projection { fan_in, shrink } => scale_bits(f, projection_bound(fan_in, shrink)),
            Draw::Embedding => scale_bits(f, 1.0),
        };
        let blocks = t.len / QK;
        match layout.find_matrix(t.elem) {
            Some(m) => {
                let (head, scales) = out.split_at_mut(m.scales);
                let values = &mut head[m.values..m.values + blocks * f.quant_bytes()];
                fill_exact_split(f, bits, values, &mut scales[..2 * blocks], rng);
            }
            None => rng.advance(blocks as u128 * (QK as u128 + 1)),
        }
    }
    out
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
/// [`super::model_sizes`]'): token ids, weights in `dtype` (quantized: packed by
/// [`PackedLayout::of_model`], [`Buffer::Packed`]; f16: half words, [`Buffer::Half`]), the RoPE
/// table and the cache prefix.
pub fn model_inputs(c: &Config, input_lens: &[usize], seed: u64, dtype: Dtype) -> Vec<Buffer> {
    let positions = input_lens[2] / c.head_dim.max(2);
    let weights = match dtype.block_format() {
        Some(f) => Buffer::Packed(model_weights_packed(
            c,
            &PackedLayout::of_model(c, f),
            seed,
            dtype,
        )),
        None if dtype == Dtype::F16 => Buffer::Half(model_weights_half(c, seed)),
        None => Buffer::F32(model_weights(c, seed, dtype)),
    };
    vec![
        Buffer::F32(tokens(input_lens[0], c.vocab, seed)),
        weights,
        Buffer::F32(rope_table(positions, c.head_dim, c.rope_theta)),
        Buffer::F32(fill(UNIT, input_lens[3], &mut rng_for(seed, 3))),
    ]
}
