//! The input of Q4_0 dot products as 8-bit digits, and the integer dot product that reads them
//! (AVX2; [`super::quant::dots`] takes it on CPUs whose widest set is AVX2, such as Zen 3).
//!
//! The activations stay f32 as far as validation can tell: an input row is written once per matrix
//! as three 8-bit digits a value ([`Digits`]: `x = unit · (q1·2^14 + q2·2^7 + q3)` per 32-value
//! block, short of `x` by at most 2^-15 of a unit of `q1`, about 2^-22 of the block's largest
//! magnitude), and each block's 32 nibbles meet the three digit vectors in `vpmaddubsw` (unsigned
//! nibble times signed digit, exact); `vpmaddwd` weighs the three levels into one exact 32-bit sum
//! a lane. That is llama.cpp's integer kernel with three digits where it has one: its 8-bit
//! activations are a 0.4 % error a value, three digits are below what f32 accumulation over the row
//! may err, the tolerance validation holds every result to.

use gpufleet_kernels::quant::QK;

use super::qrow::{QRow, scale_group};

/// Weight of a digit of the first level in units of the last: `q1 · 2^14 + q2 · 2^7 + q3`.
const LEVEL: [i32; 3] = [1 << 14, 1 << 7, 1];

/// An input row's values as three 8-bit digits each, per 32-value block `b`:
/// `x ≈ unit[b] · (q1 · 2^14 + q2 · 2^7 + q3)`, `q1` in `-127..=127`, `q2` and `q3` in `-64..=64`.
#[derive(Debug)]
pub(super) struct Digits {
    /// The digits, 96 a block, laid out as [`Digits::offset`] says.
    q: Vec<i8>,
    /// Per block the value of the combined integer's unit: the block's largest magnitude / 127 /
    /// 2^14 (NaN where the block holds a NaN or an infinity, so that the dot product is NaN too).
    unit: Vec<f32>,
    /// Per block `8 · unit · Σ (q1 · 2^14 + q2 · 2^7 + q3)`: what a Q4_0 row's nibbles read
    /// unsigned (`0..=15` for `-8..=7`) add to its dot product once its scale multiplies it.
    bias: Vec<f32>,
}

impl Digits {
    /// Where value `i` of block `b`'s digits of `level` (0, 1, 2 for q1, q2, q3) is in `q`. Blocks
    /// go by pairs, a pair's levels one after another, and a level's 64 digits in the order that
    /// the pair's 32 bytes of nibbles give them: low nibbles of the first block (values 0..16),
    /// of the second, then the high nibbles (values 16..32) of the first and of the second.
    const fn offset(b: usize, level: usize, i: usize) -> usize {
        (b / 2) * 6 * QK + level * 2 * QK + (i / 16) * 32 + (b % 2) * 16 + i % 16
    }

    /// The digits of `x` (`32 · blocks` long). Per block: the unit from the largest magnitude,
    /// then per level each value's digit is the nearest multiple of the level's unit `u` (the
    /// quotient may round; the digit is then one off at a tie at most) and what it leaves,
    /// `t - digit · u`, is exact (a fused multiply-add of nearby values). So the digits are short of
    /// `x` by half a unit of `q3` at most, and `|q1| <= 127`, `|q2|, |q3| <= 64`. `None` where a
    /// block's unit would not be a normal f32 (its values all below about 3e-39): the f32 dot
    /// products take such a row.
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn of(x: &[f32]) -> Option<Digits> {
        use std::arch::x86_64::*;
        let blocks = x.len() / QK;
        // Units and biases padded with zeros to whole groups of eight, the dot product's loads.
        let mut g = Digits {
            q: vec![0; blocks.div_ceil(2) * 6 * QK],
            unit: vec![0.0; blocks.next_multiple_of(8)],
            bias: vec![0.0; blocks.next_multiple_of(8)],
        };
        let magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        // The 32-bit groups of packed digits in the values' order (the packs work per 128 bits).
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for (b, xb) in x.chunks_exact(QK).enumerate() {
            // SAFETY: `xb` holds the 32 floats the four unaligned 256-bit loads read; block `b`'s
            // 96 digits lie inside `g.q` (made that long above), where the three stores write.
            unsafe {
                // Plain loops, no `map` or `fold` over vectors: a generic function's body is
                // compiled without this function's target features, so each intrinsic in it would
                // be a call.
                let mut rest = [_mm256_setzero_ps(); 4];
                let mut most = _mm256_setzero_ps();
                for (i, r) in rest.iter_mut().enumerate() {
                    *r = _mm256_loadu_ps(xb.as_ptr().add(8 * i));
                    most = _mm256_max_ps(most, _mm256_and_ps(*r, magnitude));
                }
                let mut lanes = [0f32; 8];
                _mm256_storeu_ps(lanes.as_mut_ptr(), most);
                let m = lanes.iter().fold(0f32, |a, v| a.max(*v));
                if xb.iter().any(|v| !v.is_finite()) {
                    (g.unit[b], g.bias[b]) = (f32::NAN, f32::NAN);
                    continue;
                }
                if m == 0.0 {
                    continue;
                }
                let unit = m / 127.0 / LEVEL[0] as f32;
                if !unit.is_normal() {
                    return None;
                }
                let mut sum = _mm256_setzero_si256();
                for (level, weight) in LEVEL.iter().enumerate() {
                    let u = _mm256_set1_ps(unit * *weight as f32);
                    let inv = _mm256_set1_ps(1.0 / (unit * *weight as f32));
                    let mut ints = [_mm256_setzero_si256(); 4];
                    for (r, int) in rest.iter_mut().zip(ints.iter_mut()) {
                        let digit = _mm256_round_ps::<
                            { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
                        >(_mm256_mul_ps(*r, inv));
                        *r = _mm256_fnmadd_ps(digit, u, *r);
                        *int = _mm256_cvtps_epi32(digit);
                        sum = _mm256_add_epi32(
                            sum,
                            _mm256_mullo_epi32(*int, _mm256_set1_epi32(*weight)),
                        );
                    }
                    let bytes = _mm256_packs_epi16(
                        _mm256_packs_epi32(ints[0], ints[1]),
                        _mm256_packs_epi32(ints[2], ints[3]),
                    );
                    let bytes = _mm256_permutevar8x32_epi32(bytes, order);
                    let at = g.q.as_mut_ptr().add(Digits::offset(b, level, 0));
                    _mm_storeu_si128(at.cast(), _mm256_castsi256_si128(bytes));
                    let at = g.q.as_mut_ptr().add(Digits::offset(b, level, QK / 2));
                    _mm_storeu_si128(at.cast(), _mm256_extracti128_si256::<1>(bytes));
                }
                let mut sums = [0i32; 8];
                _mm256_storeu_si256(sums.as_mut_ptr().cast(), sum);
                g.unit[b] = unit;
                g.bias[b] = (8.0 * f64::from(unit) * f64::from(sums.iter().sum::<i32>())) as f32;
            }
        }
        Some(g)
    }
}

/// A Q4_0 row's dot product with an input's [`Digits`] (AVX2), two blocks at a time: their 32
/// bytes of nibbles give 32 low and 32 high nibbles by a mask and a shift, which `vpmaddubsw`
/// multiplies with a level's digits (unsigned nibble times signed digit, pairs summed into 16 bits:
/// at most 2 · 15 · 127); the low and high sums are added (at most 7,620), `vpmaddwd` weighs the
/// three levels into 32-bit lanes (at most 2^28), four lanes a block; as floats, times each block's
/// scale and the input's unit, they join one of two running sums. The bias of the unsigned nibbles
/// is taken off at the end, eight blocks' worth a multiply-add.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_q4_avx2(w: QRow<'_>, g: &Digits) -> f32 {
    use std::arch::x86_64::*;
    let blocks = w.scales.len() / 2;
    assert!(
        g.unit.len() >= blocks.next_multiple_of(8)
            && g.bias.len() >= blocks.next_multiple_of(8)
            && g.q.len() >= blocks.div_ceil(2) * 6 * QK
            && w.values.len() >= blocks * QK / 2
    );
    // No array `map`s or iterator adaptors over vectors here: a generic function's body is
    // compiled without this function's target features, so each intrinsic in it would be a call.
    let low = _mm256_set1_epi8(15);
    let (l1, l2, l3) = (
        _mm256_set1_epi16(LEVEL[0] as i16),
        _mm256_set1_epi16(LEVEL[1] as i16),
        _mm256_set1_epi16(LEVEL[2] as i16),
    );
    // Pair `p` of a group of eight blocks: its first block's scale in lanes 0..4, its second's
    // in lanes 4..8.
    let spread = [
        _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1),
        _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3),
        _mm256_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5),
        _mm256_setr_epi32(6, 6, 6, 6, 7, 7, 7, 7),
    ];
    let (vp, qp) = (w.values.as_ptr(), g.q.as_ptr());
    // The pair of blocks at `pair` (its nibbles `packed`) times `scale`, added to `acc`.
    let two = |pair: usize, packed: __m256i, scale: __m256, acc: __m256| {
        // SAFETY: pair `pair` < `blocks.div_ceil(2)`: its 192 digits lie inside `g.q` (asserted
        // above). The loads are unaligned ones.
        unsafe {
            let lo = _mm256_and_si256(packed, low);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(packed), low);
            let q = qp.add(pair * 6 * QK);
            let d = |o: usize| _mm256_loadu_si256(q.add(o).cast());
            let t1 = _mm256_add_epi16(
                _mm256_maddubs_epi16(lo, d(0)),
                _mm256_maddubs_epi16(hi, d(32)),
            );
            let t2 = _mm256_add_epi16(
                _mm256_maddubs_epi16(lo, d(64)),
                _mm256_maddubs_epi16(hi, d(96)),
            );
            let t3 = _mm256_add_epi16(
                _mm256_maddubs_epi16(lo, d(128)),
                _mm256_maddubs_epi16(hi, d(160)),
            );
            let s = _mm256_add_epi32(
                _mm256_add_epi32(_mm256_madd_epi16(t1, l1), _mm256_madd_epi16(t2, l2)),
                _mm256_madd_epi16(t3, l3),
            );
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, acc)
        }
    };
    let (mut even, mut odd, mut bias) = (
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
    );
    let mut group = [0u8; 16];
    for b0 in (0..blocks).step_by(8) {
        let n = (blocks - b0).min(8);
        let halves = scale_group(w.scales, b0, &mut group);
        // SAFETY: `halves` holds 16 bytes, what the unaligned 128-bit load reads; the unit and
        // bias of blocks b0..b0 + 8 lie inside `g` (padded to whole groups of eight, asserted
        // above); the nibbles of blocks b0..b0 + n lie inside `w.values` (asserted above): 32
        // bytes a whole pair, 16 the last block of an odd group, loaded alone.
        unsafe {
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(halves.as_ptr().cast()));
            bias = _mm256_fmadd_ps(dw, _mm256_loadu_ps(g.bias.as_ptr().add(b0)), bias);
            let d = _mm256_mul_ps(dw, _mm256_loadu_ps(g.unit.as_ptr().add(b0)));
            let nibbles = |b: usize| _mm256_loadu_si256(vp.add(b * QK / 2).cast());
            let scale = |p: usize| _mm256_permutevar8x32_ps(d, spread[p]);
            let mut p = 0;
            while 2 * p + 3 < n {
                even = two(b0 / 2 + p, nibbles(b0 + 2 * p), scale(p), even);
                odd = two(b0 / 2 + p + 1, nibbles(b0 + 2 * p + 2), scale(p + 1), odd);
                p += 2;
            }
            if 2 * p + 1 < n {
                even = two(b0 / 2 + p, nibbles(b0 + 2 * p), scale(p), even);
                p += 1;
            }
            if 2 * p < n {
                let last =
                    _mm256_zextsi128_si256(_mm_loadu_si128(vp.add((b0 + 2 * p) * QK / 2).cast()));
                odd = two(b0 / 2 + p, last, scale(p), odd);
            }
        }
    }
    let mut lanes = [0f32; 8];
    // SAFETY: `lanes` holds 8 floats, what an unaligned 256-bit store writes.
    unsafe {
        _mm256_storeu_ps(
            lanes.as_mut_ptr(),
            _mm256_sub_ps(_mm256_add_ps(even, odd), bias),
        )
    };
    lanes.iter().sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufleet_kernels::quant::{BlockFormat, dequantize_split, split};

    /// Inputs of every kind a block can hold: one large value among small ones, all alike,
    /// negative and positive, zero, and values far below and above 1.
    fn awkward_input(blocks: usize) -> Vec<f32> {
        (0..blocks * QK)
            .map(|i| {
                let (b, j) = (i / QK, i % QK);
                let v = ((i * 7919 % 1009) as f32 - 504.0) / 97.0;
                match b % 5 {
                    0 => v,
                    1 if j == 3 => 1e4,
                    1 => v * 1e-3,
                    2 => 0.0,
                    3 => -0.75,
                    _ => v * 1e-20,
                }
            })
            .collect()
    }

    /// The digits of `x` where this CPU can make them (AVX2, FMA and F16C), else `None` and a
    /// line saying the test skipped (a test that expects `None` asks the CPU first).
    fn digits_here(x: &[f32]) -> Option<Digits> {
        use std::is_x86_feature_detected as has;
        if has!("avx2") && has!("fma") && has!("f16c") {
            // SAFETY: this CPU has AVX2 and FMA (checked on the line above).
            unsafe { Digits::of(x) }
        } else {
            eprintln!("skipped: this CPU has no AVX2, FMA and F16C");
            None
        }
    }

    #[test]
    fn three_digits_give_back_each_value_within_a_quarter_of_a_millionth_of_its_block() {
        let x = awkward_input(10);
        let Some(g) = digits_here(&x) else { return };
        for (b, xb) in x.chunks_exact(QK).enumerate() {
            let m = xb.iter().fold(0f64, |a, v| a.max(f64::from(v.abs())));
            let mut sum = 0f64;
            for (i, &v) in xb.iter().enumerate() {
                let q = |level: usize| i32::from(g.q[Digits::offset(b, level, i)]);
                assert!((-127..=127).contains(&q(0)));
                assert!((-64..=64).contains(&q(1)) && (-64..=64).contains(&q(2)));
                let whole = q(0) * LEVEL[0] + q(1) * LEVEL[1] + q(2);
                sum += f64::from(whole);
                let back = f64::from(g.unit[b]) * f64::from(whole);
                // Half a unit of q3: m / 127 / 2^15, with the unit rounded to f32.
                assert!(
                    (back - f64::from(v)).abs() <= m / 127.0 / 32768.0 * (1.0 + 1e-6),
                    "block {b} value {i}: {v} came back as {back}"
                );
            }
            let bias = 8.0 * f64::from(g.unit[b]) * sum;
            assert!(
                (f64::from(g.bias[b]) - bias).abs() <= bias.abs() * 1e-7,
                "block {b}"
            );
        }
        // A NaN or an infinity makes its block's unit NaN, so the dot product says so.
        let mut bad = awkward_input(2);
        bad[40] = f32::INFINITY;
        let g = digits_here(&bad).expect("made above");
        assert!(g.unit[0].is_finite() && g.unit[1].is_nan() && g.bias[1].is_nan());
        // A block of subnormal values has no normal unit: no digits, the row goes the f32 way.
        let mut tiny = awkward_input(2);
        tiny[32..].fill(1e-40);
        assert!(digits_here(&tiny).is_none());
    }

    #[test]
    fn the_digit_dot_product_is_the_dequantized_one_within_f32_accumulation() {
        // 37 blocks: four groups of eight scales and a part one.
        let k = 37 * QK;
        let x = awkward_input(37);
        let Some(g) = digits_here(&x) else { return };
        for r in 0..4 {
            let w: Vec<f32> = (0..k)
                .map(|i| (((i + 13 * r) * 37 % 23) as f32 - 11.0) / (3 << r) as f32)
                .collect();
            let s = split(BlockFormat::Q4_0, &w);
            let (values, scales) = s.split_at(k / QK * BlockFormat::Q4_0.quant_bytes());
            let deq = dequantize_split(BlockFormat::Q4_0, values, scales);
            let want: f64 = deq
                .iter()
                .zip(&x)
                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                .sum();
            let scale: f64 = deq
                .iter()
                .zip(&x)
                .map(|(a, b)| f64::from((a * b).abs()))
                .sum();
            // The tolerance validation gives a dot product of this length (kernels' dot_tol).
            let tol = (4.0 * (k as f64).sqrt()).max(16.0) * f64::from(f32::EPSILON) / 2.0 * scale;
            // SAFETY: this CPU has AVX2, FMA and F16C (checked above).
            let got = unsafe { dot_q4_avx2(QRow { values, scales }, &g) };
            assert!(
                (f64::from(got) - want).abs() <= tol,
                "row {r}: {got} against {want} (tolerance {tol:e})"
            );
            // A wrong digit is seen: the result must depend on the digits.
            let mut off = digits_here(&x).expect("made above");
            off.q[Digits::offset(1, 0, 3)] -= 1; // q1 of the 1e4 in block 1
            // SAFETY: as above.
            let moved = unsafe { dot_q4_avx2(QRow { values, scales }, &off) };
            assert_ne!(moved, got, "row {r}");
        }
        let mut bad = x.clone();
        bad[100] = f32::NAN;
        let s = split(BlockFormat::Q4_0, &vec![0.5; k]);
        let (values, scales) = s.split_at(k / QK * BlockFormat::Q4_0.quant_bytes());
        let bad = digits_here(&bad).expect("made above");
        // SAFETY: as above.
        let got = unsafe { dot_q4_avx2(QRow { values, scales }, &bad) };
        assert!(got.is_nan(), "{got}");
    }
}
