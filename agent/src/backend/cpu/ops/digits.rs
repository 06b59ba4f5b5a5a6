//! The input of integer dot products as 8-bit digits ([`Digits`]), made once per matrix; the dot
//! products that read them are in [`super::digit_dots`].
//!
//! The activations stay f32 as far as validation can tell: an input row is written as three 8-bit
//! digits a value (`x = unit · (q1·2^14 + q2·2^7 + q3)` per 32-value block, short of `x` by at most
//! 2^-15 of a unit of `q1`, about 2^-22 of the block's largest magnitude), and a block's weights, read
//! unsigned, meet the three digit vectors in integer multiply-adds that are exact; the levels are
//! weighed into one 32-bit sum a lane. That is llama.cpp's integer kernel with three digits where it
//! has one: its 8-bit activations are a 0.4 % error a value, three digits are below what f32
//! accumulation over the row may err, the tolerance validation holds every result to.

use gpufleet_kernels::quant::QK;

/// Weight of a digit of the first level in units of the last: `q1 · 2^14 + q2 · 2^7 + q3`.
pub(super) const LEVEL: [i32; 3] = [1 << 14, 1 << 7, 1];

/// Units and biases are padded to whole groups of this many blocks: the scales the VNNI copy
/// widens at once (the AVX2 copy takes eight).
pub(super) const SCALES: usize = 16;

/// How [`Digits`] are laid out for the dot product that reads them (in
/// [`super::digit_dots`]): in the order of Q4_0's nibbles by pairs of blocks for the AVX2 copy's
/// 256-bit registers or by fours for the VNNI copy's 512-bit ones, in the order of Q8_0's values by
/// pairs for its VNNI copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Layout {
    /// Q4_0 rows, `dot_q4_avx2`.
    Pairs,
    /// Q4_0 rows, `dots_q4_vnni`; made only where the CPU has AVX-512F, BW and VNNI.
    Fours,
    /// Q8_0 rows, `dots_q8_vnni`; made only where the CPU has AVX-512F, BW and VNNI.
    Q8Pairs,
}

impl Layout {
    /// Blocks a group.
    pub(super) const fn blocks(self) -> usize {
        match self {
            Layout::Pairs | Layout::Q8Pairs => 2,
            Layout::Fours => 4,
        }
    }

    /// What the dot product adds to each weight by reading it unsigned: 8 to Q4_0's nibbles (`0..=15`
    /// for `-8..=7`), 128 to Q8_0's bytes once their sign bits are flipped.
    const fn unsigned_offset(self) -> f64 {
        match self {
            Layout::Pairs | Layout::Fours => 8.0,
            Layout::Q8Pairs => 128.0,
        }
    }
}

/// An input row's values as three 8-bit digits each, per 32-value block `b`:
/// `x ≈ unit[b] · (q1 · 2^14 + q2 · 2^7 + q3)`, `q1` in `-127..=127`, `q2` and `q3` in `-64..=64`.
#[derive(Debug)]
pub(super) struct Digits {
    /// How `q` is laid out (which dot product reads it).
    pub(super) layout: Layout,
    /// The digits, 96 a block, laid out as [`Digits::offset`] says.
    pub(super) q: Vec<i8>,
    /// Per block the value of the combined integer's unit: the block's largest magnitude / 127 /
    /// 2^14 (NaN where the block holds a NaN or an infinity, so that the dot product is NaN too).
    pub(super) unit: Vec<f32>,
    /// Per block `o · unit · Σ (q1 · 2^14 + q2 · 2^7 + q3)`, `o` the layout's offset of unsigned
    /// weights (8 for Q4_0's nibbles, 128 for Q8_0's flipped bytes): what reading a row's weights
    /// unsigned adds to its dot product once its scale multiplies it.
    pub(super) bias: Vec<f32>,
}

impl Digits {
    /// Where value `i` of block `b`'s digits of `level` (0, 1, 2 for q1, q2, q3) is in `q`. Blocks
    /// go by groups (`G` of them: pairs or fours), a group's levels one after another, and a level's
    /// `32 · G` digits in the order of the group's weights: for Q4_0 as its `16 · G` bytes of
    /// nibbles give them, the low nibbles (values 0..16) of each block in turn, then their high
    /// nibbles (values 16..32); for Q8_0 block after block.
    pub(super) const fn offset(&self, b: usize, level: usize, i: usize) -> usize {
        let g = self.layout.blocks();
        let group = (b / g) * 3 * g * QK + level * g * QK;
        match self.layout {
            Layout::Q8Pairs => group + (b % g) * QK + i,
            Layout::Pairs | Layout::Fours => group + (i / 16) * 16 * g + (b % g) * 16 + i % 16,
        }
    }

    /// Whether these digits hold `blocks` blocks with the padding the dot products load.
    pub(super) fn fits(&self, blocks: usize) -> bool {
        self.unit.len() >= blocks.next_multiple_of(SCALES)
            && self.bias.len() >= blocks.next_multiple_of(SCALES)
            && self.q.len() >= blocks.next_multiple_of(self.layout.blocks()) * 3 * QK
    }

    /// The digits of `x` (`32 · blocks` long) laid out for `layout`. Per block: the unit from the largest magnitude,
    /// then per level each value's digit is the nearest multiple of the level's unit `u` (the
    /// quotient may round; the digit is then one off at a tie at most) and what it leaves,
    /// `t - digit · u`, is exact (a fused multiply-add of nearby values). So the digits are short of
    /// `x` by half a unit of `q3` at most, and `|q1| <= 127`, `|q2|, |q3| <= 64`. `None` where a
    /// block's unit would not be a normal f32 (its values all below about 3e-39): the f32 dot
    /// products take such a row.
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn of(x: &[f32], layout: Layout) -> Option<Digits> {
        use std::arch::x86_64::*;
        let blocks = x.len() / QK;
        // Digits padded with zeros to whole groups, units and biases to whole groups of sixteen,
        // the dot products' loads.
        let mut g = Digits {
            layout,
            q: vec![0; blocks.next_multiple_of(layout.blocks()) * 3 * QK],
            unit: vec![0.0; blocks.next_multiple_of(SCALES)],
            bias: vec![0.0; blocks.next_multiple_of(SCALES)],
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
                    let at = g.q.as_mut_ptr().add(g.offset(b, level, 0));
                    _mm_storeu_si128(at.cast(), _mm256_castsi256_si128(bytes));
                    let at = g.q.as_mut_ptr().add(g.offset(b, level, QK / 2));
                    _mm_storeu_si128(at.cast(), _mm256_extracti128_si256::<1>(bytes));
                }
                let mut sums = [0i32; 8];
                _mm256_storeu_si256(sums.as_mut_ptr().cast(), sum);
                g.unit[b] = unit;
                let sum = f64::from(sums.iter().sum::<i32>());
                g.bias[b] = (layout.unsigned_offset() * f64::from(unit) * sum) as f32;
            }
        }
        Some(g)
    }
}

#[cfg(test)]
#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Inputs of every kind a block can hold: one large value among small ones, all alike,
    /// negative and positive, zero, and values far below and above 1.
    pub(in crate::backend::cpu::ops) fn awkward_input(blocks: usize) -> Vec<f32> {
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

    /// Whether this CPU runs the dot product that reads `layout` (AVX2, FMA and F16C; for
    /// the VNNI layouts AVX-512F, BW and VNNI too), else `false` and a line saying what is skipped.
    fn runs_here(layout: Layout) -> bool {
        use std::is_x86_feature_detected as has;
        let avx2 = has!("avx2") && has!("fma") && has!("f16c");
        let here = match layout {
            Layout::Pairs => avx2,
            Layout::Fours | Layout::Q8Pairs => {
                avx2 && has!("avx512f") && has!("avx512bw") && has!("avx512vnni")
            }
        };
        if !here {
            eprintln!("skipped {layout:?}: this CPU lacks the instructions its dot product takes");
        }
        here
    }

    /// The digits of `x` for `layout` where this CPU runs its dot product, else `None` and a line
    /// saying the test skipped (a test that expects `None` asks the CPU first).
    pub(in crate::backend::cpu::ops) fn digits_here(x: &[f32], layout: Layout) -> Option<Digits> {
        // SAFETY: this CPU has AVX2 and FMA (`runs_here` checked).
        runs_here(layout).then(|| unsafe { Digits::of(x, layout) })?
    }

    #[test]
    fn three_digits_give_back_each_value_within_a_quarter_of_a_millionth_of_its_block() {
        for layout in [Layout::Pairs, Layout::Fours, Layout::Q8Pairs] {
            three_digits_give_back_each_value(layout);
        }
    }

    fn three_digits_give_back_each_value(layout: Layout) {
        let x = awkward_input(10);
        let Some(g) = digits_here(&x, layout) else {
            return;
        };
        for (b, xb) in x.chunks_exact(QK).enumerate() {
            let m = xb.iter().fold(0f64, |a, v| a.max(f64::from(v.abs())));
            let mut sum = 0f64;
            for (i, &v) in xb.iter().enumerate() {
                let q = |level: usize| i32::from(g.q[g.offset(b, level, i)]);
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
            let bias = layout.unsigned_offset() * f64::from(g.unit[b]) * sum;
            assert!(
                (f64::from(g.bias[b]) - bias).abs() <= bias.abs() * 1e-7,
                "block {b}"
            );
        }
        // A NaN or an infinity makes its block's unit NaN, so the dot product says so.
        let mut bad = awkward_input(2);
        bad[40] = f32::INFINITY;
        let g = digits_here(&bad, layout).expect("made above");
        assert!(g.unit[0].is_finite() && g.unit[1].is_nan() && g.bias[1].is_nan());
        // A block of subnormal values has no normal unit: no digits, the row goes the f32 way.
        let mut tiny = awkward_input(2);
        tiny[32..].fill(1e-40);
        assert!(digits_here(&tiny, layout).is_none());
    }
}
