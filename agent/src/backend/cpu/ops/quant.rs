//! Dot products of f32 rows with a matrix row in Q8_0 or Q4_0 blocks, split as the packed weights
//! keep them (`gpufleet_kernels::quant::split`: the blocks' values, then their f16 scales).
//!
//! The activations stay f32 (llama.cpp quantizes them to 8 bits for its integer dot products;
//! validation here holds the result to f32 accumulation over the row): each block's values are
//! widened to f32, multiplied with the row in 8-wide vectors, and the block's sum is scaled by its
//! `d` into the running sum. The AVX2 copy loads a block's 32 (Q8_0) or 16 (Q4_0) bytes at once and
//! widens eight blocks' scales with one F16C instruction.

use gpufleet_kernels::quant::{BlockFormat, QK};

use super::has_avx2_fma;

/// One matrix row: `k / 32` blocks' values and their scales.
#[derive(Debug, Clone, Copy)]
pub struct QRow<'a> {
    /// The blocks' values, `quant_bytes` each.
    pub values: &'a [u8],
    /// The blocks' f16 scales, little-endian.
    pub scales: &'a [u8],
}

/// Block `b`'s scale: its f16 bits widened by bit arithmetic (exact for every finite half, and
/// inlined where the `half` crate would call out per block).
#[inline(always)]
fn scale(scales: &[u8], b: usize) -> f32 {
    let h = u32::from(u16::from_le_bytes([scales[2 * b], scales[2 * b + 1]]));
    let magnitude = f32::from_bits((h & 0x7fff) << 13) * f32::from_bits(0x7780_0000); // 2^112
    f32::from_bits(magnitude.to_bits() | ((h & 0x8000) << 16))
}

/// `Σ_i x[i] · w[i]` for the row `w` in format `f` (`x` is `32 · blocks` long).
pub fn dot(f: BlockFormat, w: QRow<'_>, x: &[f32]) -> f32 {
    debug_assert_eq!(x.len(), w.scales.len() / 2 * QK);
    debug_assert_eq!(w.values.len(), w.scales.len() / 2 * f.quant_bytes());
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: `has_avx2_fma()` checked that this CPU has AVX2 and FMA; the lengths are the
        // ones `dot_avx2` reads (asserted there).
        return unsafe { dot_avx2(f, w, x) };
    }
    dot_portable(f, w, x)
}

/// Block `b`'s values as `i8`s into `q`.
fn unpack(f: BlockFormat, values: &[u8], b: usize, q: &mut [f32; QK]) {
    match f {
        BlockFormat::Q8_0 => {
            for (v, &byte) in q.iter_mut().zip(&values[b * QK..(b + 1) * QK]) {
                *v = f32::from(byte as i8);
            }
        }
        BlockFormat::Q4_0 => {
            let bytes = &values[b * QK / 2..(b + 1) * QK / 2];
            for (j, &byte) in bytes.iter().enumerate() {
                q[j] = f32::from(byte & 15) - 8.0;
                q[j + QK / 2] = f32::from(byte >> 4) - 8.0;
            }
        }
    }
}

fn dot_portable(f: BlockFormat, w: QRow<'_>, x: &[f32]) -> f32 {
    let mut q = [0f32; QK];
    let mut total = 0f32;
    for (b, xb) in x.chunks_exact(QK).enumerate() {
        unpack(f, w.values, b, &mut q);
        let mut acc = [0f32; 8];
        for (i, (v, xv)) in q.iter().zip(xb).enumerate() {
            acc[i % 8] += v * xv;
        }
        total += acc.iter().sum::<f32>() * scale(w.scales, b);
    }
    total
}

/// Block `b`'s dequantized weights (its values times its scale) into `out`, 32 of them.
pub fn dequantize_block(f: BlockFormat, w: QRow<'_>, b: usize, out: &mut [f32]) {
    let mut q = [0f32; QK];
    unpack(f, w.values, b, &mut q);
    let d = scale(w.scales, b);
    for (o, v) in out.iter_mut().zip(q) {
        *o = v * d;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_avx2(f: BlockFormat, w: QRow<'_>, x: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let blocks = w.scales.len() / 2;
    assert!(x.len() >= blocks * QK && w.values.len() >= blocks * f.quant_bytes());
    let mut acc = _mm256_setzero_ps();
    let xp = x.as_ptr();
    let vp = w.values.as_ptr();
    let low = _mm_set1_epi8(15);
    let eight = _mm_set1_epi8(8);
    // The scales of eight blocks at a time, widened by one F16C instruction (per block the bit
    // arithmetic of `scale` was half the loop's instructions).
    let mut d = [0f32; 8];
    let mut group = [0u8; 16];
    for b0 in (0..blocks).step_by(8) {
        let n = (blocks - b0).min(8);
        let halves = if n == 8 {
            &w.scales[2 * b0..2 * b0 + 16]
        } else {
            group[..2 * n].copy_from_slice(&w.scales[2 * b0..2 * (b0 + n)]);
            &group[..]
        };
        // SAFETY: `halves` holds 16 bytes, what the unaligned 128-bit load reads; `d` holds the
        // 8 floats the unaligned store writes.
        unsafe {
            let h = _mm_loadu_si128(halves.as_ptr().cast());
            _mm256_storeu_ps(d.as_mut_ptr(), _mm256_cvtph_ps(h));
        }
        for (i, &scale) in d.iter().enumerate().take(n) {
            let b = b0 + i;
            // SAFETY: block `b` < `blocks` lies inside both slices (asserted above): 32 values of
            // Q8_0 or 16 bytes of Q4_0 at `b · quant_bytes`, 32 floats of `x` at `32·b`. The
            // loads are unaligned ones.
            unsafe {
                let xb = xp.add(b * QK);
                let s = match f {
                    BlockFormat::Q8_0 => {
                        // Eight values at a time, sign-extended straight from memory.
                        let p = vp.add(b * QK);
                        let q = |o: usize| {
                            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                                p.add(o).cast(),
                            )))
                        };
                        let mut s = _mm256_mul_ps(q(0), _mm256_loadu_ps(xb));
                        s = _mm256_fmadd_ps(q(8), _mm256_loadu_ps(xb.add(8)), s);
                        s = _mm256_fmadd_ps(q(16), _mm256_loadu_ps(xb.add(16)), s);
                        _mm256_fmadd_ps(q(24), _mm256_loadu_ps(xb.add(24)), s)
                    }
                    BlockFormat::Q4_0 => {
                        let raw = _mm_loadu_si128(vp.add(b * QK / 2).cast());
                        let lo = _mm_sub_epi8(_mm_and_si128(raw, low), eight);
                        let hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), low), eight);
                        let widen = |v: __m128i| _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
                        let mut s = _mm256_mul_ps(widen(lo), _mm256_loadu_ps(xb));
                        s = _mm256_fmadd_ps(
                            widen(_mm_srli_si128(lo, 8)),
                            _mm256_loadu_ps(xb.add(8)),
                            s,
                        );
                        s = _mm256_fmadd_ps(widen(hi), _mm256_loadu_ps(xb.add(16)), s);
                        _mm256_fmadd_ps(
                            widen(_mm_srli_si128(hi, 8)),
                            _mm256_loadu_ps(xb.add(24)),
                            s,
                        )
                    }
                };
                acc = _mm256_fmadd_ps(s, _mm256_set1_ps(scale), acc);
            }
        }
    }
    let mut lanes = [0f32; 8];
    // SAFETY: `lanes` holds 8 floats, what an unaligned 256-bit store writes.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc) };
    lanes.iter().sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufleet_kernels::quant::{dequantize_split, split};

    #[test]
    fn both_copies_match_the_dequantized_dot() {
        let k = 4 * QK;
        let w: Vec<f32> = (0..k)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) / 16.0)
            .collect();
        let x: Vec<f32> = (0..k).map(|i| ((i * 13 % 17) as f32 - 8.0) / 8.0).collect();
        for f in [BlockFormat::Q8_0, BlockFormat::Q4_0] {
            let s = split(f, &w);
            let (values, scales) = s.split_at(k / QK * f.quant_bytes());
            let row = QRow { values, scales };
            let deq = dequantize_split(f, values, scales);
            let want: f64 = deq.iter().zip(&x).map(|(a, b)| f64::from(a * b)).sum();
            let tol = 1e-5 * deq.iter().map(|v| f64::from(v.abs())).sum::<f64>();
            assert!(
                (f64::from(dot_portable(f, row, &x)) - want).abs() <= tol,
                "{f:?}"
            );
            assert!((f64::from(dot(f, row, &x)) - want).abs() <= tol, "{f:?}");
            let mut out = [0f32; QK];
            dequantize_block(f, row, 2, &mut out);
            assert_eq!(&out[..], &deq[2 * QK..3 * QK]);
        }
        // The scale's widening, on every finite half (normals, subnormals, zeros of both signs).
        for bits in (0u16..=0xffff).filter(|b| b & 0x7c00 != 0x7c00) {
            let want = half::f16::from_bits(bits).to_f32();
            let got = scale(&bits.to_le_bytes(), 0);
            assert_eq!(got.to_bits(), want.to_bits(), "{bits:#06x}");
        }
    }
}
