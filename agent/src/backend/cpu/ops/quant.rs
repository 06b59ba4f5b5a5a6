//! Dot products of f32 rows with a matrix row in Q8_0 or Q4_0 blocks, split as the packed weights
//! keep them (`gpufleet_kernels::quant::split`: the blocks' values, then their f16 scales).
//!
//! The activations stay f32 (llama.cpp quantizes them to 8 bits for its integer dot products;
//! validation here holds the result to f32 accumulation over the row): each block's values are
//! made f32, multiplied with the row, and the block's sum is scaled by its `d` into the running
//! sum. The AVX2 copy loads a block's 32 (Q8_0) or 16 (Q4_0) bytes at once, widens and converts
//! eight values an instruction pair and widens eight blocks' scales with one F16C instruction.
//! The AVX-512 copy ([`dots`], four matrix rows at a time, each block of the input read once for
//! the four) makes a Q4_0 nibble a float without converting it: the sixteen values `-8..=7` are a
//! table in one register and `vpermps` looks sixteen nibbles up at once (it reads the low four bits
//! of each index, so a byte's low nibble needs no mask and its high nibble one shift); Q8_0's bytes
//! are widened and converted sixteen at a time.
//!
//! Where an integer copy exists a row's dot product is one on the input's 8-bit digits
//! ([`super::digits`], [`super::digit_dots`]), made once per matrix ([`Input`]): Q4_0 on a CPU whose
//! widest set is AVX2 (Zen 3), Q4_0 and Q8_0 on one with AVX-512 VNNI (Ice Lake and later Xeons, Zen
//! 4 and 5). AVX-512 without VNNI (Skylake-SP) keeps the `vpermps` copy, AVX2 the f32 Q8_0 one.

use gpufleet_kernels::quant::{BlockFormat, QK};

#[cfg(target_arch = "x86_64")]
use super::digit_dots::{dot_q4_avx2, dots_q4_vnni, dots_q8_vnni};
#[cfg(target_arch = "x86_64")]
use super::digits::{Digits, Layout};
#[cfg(target_arch = "x86_64")]
use super::qrow::{PREFETCH_BYTES, prefetch_far};
use super::qrow::{scale, scale_group};
use super::{Isa, has_avx2_fma};

pub use super::qrow::QRow;

/// An input row as [`dots`] reads it: its f32 values, and its digits where the dot products
/// take them (where [`digit_layout`] names a layout for the rows' format).
pub struct Input<'a> {
    x: &'a [f32],
    #[cfg(target_arch = "x86_64")]
    digits: Option<Digits>,
}

impl<'a> Input<'a> {
    /// `x` prepared for the dot products of rows in format `f` (`x` is `32 · blocks` long): made
    /// once for all the rows of a matrix.
    pub fn new(f: BlockFormat, x: &'a [f32]) -> Input<'a> {
        #[cfg(target_arch = "x86_64")]
        {
            let digits = digit_layout(f)
                // SAFETY: `digit_layout` names a layout only where the CPU has AVX2, FMA and F16C.
                .and_then(|layout| unsafe { Digits::of(x, layout) });
            Input { x, digits }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = f; // only x86-64 has the integer copy
            Input { x }
        }
    }
}

/// Experiment switch: `1` or `4` makes [`dots`]' AVX-512 copies take that many rows at a time,
/// whatever [`rows_at_once`]'s rule says (unset or any other value: the rule). Four rows read each
/// block of the input once for the four and win on a lone `gemv` from DRAM (q8_0 8192 × 16384 on
/// Zen 4: 1.9×); one row wins Q8_0's decode on AMD cores (docs/PERFORMANCE.md). The result's
/// `quant_rows` config says what ran where it is not the default four.
pub const ROWS_ENV: &str = "GPUFLEET_CPU_QUANT_ROWS";

/// The rows [`dots`]' AVX-512 copies take at a time for rows in format `f`: four, except Q8_0 on an
/// AMD CPU, one at a time. Measured in `small`'s q8_0 decode beside llama.cpp's CPU build: one row
/// 1.3–1.5× four on Zen 4 (three sessions), 1.0–1.2× on Zen 5; Q4_0 four rows on both (Zen 5: one
/// row 0.84×); the Xeons meet llama.cpp with four. [`ROWS_ENV`] overrides the rule.
pub fn rows_at_once(f: BlockFormat) -> usize {
    forced_rows().unwrap_or(if f == BlockFormat::Q8_0 && amd() {
        1
    } else {
        4
    })
}

/// The rows [`ROWS_ENV`] forces, if it does; read once.
fn forced_rows() -> Option<usize> {
    static FORCED: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *FORCED.get_or_init(|| match std::env::var(ROWS_ENV).as_deref().map(str::trim) {
        Ok("1") => Some(1),
        Ok("4") => Some(4),
        _ => None,
    })
}

/// What the result's `quant_rows` config records for rows in format `f`: nothing for the default
/// four, else the rows and why (`"1 (debug)"` under [`ROWS_ENV`], `"1 (q8_0 on AMD)"` by the rule).
pub fn rows_note(f: BlockFormat) -> Option<String> {
    match (forced_rows(), rows_at_once(f)) {
        (Some(rows), _) => Some(format!("{rows} (debug)")),
        (None, 4) => None,
        (None, rows) => Some(format!("{rows} (q8_0 on AMD)")),
    }
}

/// Whether this is an AMD CPU (`/proc/cpuinfo`'s vendor, as the device description reads it); read
/// once.
fn amd() -> bool {
    static AMD: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AMD.get_or_init(|| {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        crate::host::cpu_vendor(&cpuinfo) == "AMD"
    })
}

/// The layout of the digits an input of rows in format `f` is made into, where their dot products
/// are integer ones: Q4_0 by pairs where AVX2 is the widest set [`Isa::active`] allows; Q4_0 by
/// fours and Q8_0 by pairs where it allows AVX-512 and the CPU has VNNI (and BW); none elsewhere.
#[cfg(target_arch = "x86_64")]
fn digit_layout(f: BlockFormat) -> Option<Layout> {
    use std::arch::is_x86_feature_detected as has;
    let vnni = || has!("avx512bw") && has!("avx512vnni");
    match (f, Isa::active()) {
        (BlockFormat::Q4_0, Isa::Avx2Fma) => Some(Layout::Pairs),
        (BlockFormat::Q4_0, Isa::Avx512) if vnni() => Some(Layout::Fours),
        (BlockFormat::Q8_0, Isa::Avx512) if vnni() => Some(Layout::Q8Pairs),
        _ => None,
    }
}

/// `out[j] = Σ_i x[i] · w[j][i]` for the rows `w` in format `f` (`x` as [`Input::new`] made it for
/// `f`, `out` as long as `w`).
pub fn dots(f: BlockFormat, w: &[QRow<'_>], input: &Input<'_>, out: &mut [f32]) {
    assert_eq!(w.len(), out.len(), "one output per matrix row");
    let x = input.x;
    #[cfg(target_arch = "x86_64")]
    if let Some(g) = &input.digits {
        assert_eq!(
            g.layout == Layout::Q8Pairs,
            f == BlockFormat::Q8_0,
            "the input's digits were made for rows of another format"
        );
        // Digits are made only where `digit_layout` names their layout: for Q4_0 pairs where the
        // CPU has AVX2, FMA and F16C, fours (and Q8_0's pairs) where it also has AVX-512F, BW and
        // VNNI.
        let four = |r: [QRow<'_>; 4]| match g.layout {
            Layout::Pairs => unreachable!("the AVX2 copy takes one row at a time"),
            // SAFETY: as `one` below.
            Layout::Fours => unsafe { dots_q4_vnni(r, g) },
            // SAFETY: as `one` below.
            Layout::Q8Pairs => unsafe { dots_q8_vnni(r, g) },
        };
        let one = |r: QRow<'_>| match g.layout {
            // SAFETY: pairs, so this CPU has AVX2, FMA and F16C (above); the lengths are the ones
            // the dot product reads (asserted there), here and below.
            Layout::Pairs => unsafe { dot_q4_avx2(r, g) },
            // SAFETY: fours, so this CPU has AVX-512F, BW and VNNI, AVX2, FMA and F16C (above).
            Layout::Fours => unsafe { dots_q4_vnni([r], g)[0] },
            // SAFETY: Q8_0's pairs, made where fours are.
            Layout::Q8Pairs => unsafe { dots_q8_vnni([r], g)[0] },
        };
        let mut done = 0;
        if g.layout != Layout::Pairs && rows_at_once(f) == 4 {
            for (r, o) in w.chunks_exact(4).zip(out.chunks_exact_mut(4)) {
                o.copy_from_slice(&four([r[0], r[1], r[2], r[3]]));
            }
            done = w.len() / 4 * 4;
        }
        for (row, o) in w[done..].iter().zip(&mut out[done..]) {
            *o = one(*row);
        }
        return;
    }
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if Isa::active() >= Isa::Avx512 && rows_at_once(f) == 4 {
        for (rows, o) in w.chunks_exact(4).zip(out.chunks_exact_mut(4)) {
            // SAFETY: `Isa::active()` is at least Avx512 only where the CPU has AVX-512F, AVX2, FMA
            // and F16C; the lengths are the ones `dots4_avx512` reads (asserted there).
            o.copy_from_slice(&unsafe { dots4_avx512(f, [rows[0], rows[1], rows[2], rows[3]], x) });
        }
        done = w.len() / 4 * 4;
    }
    for (row, o) in w[done..].iter().zip(&mut out[done..]) {
        *o = dot(f, *row, x);
    }
}

/// `Σ_i x[i] · w[i]` for the row `w` in format `f` (`x` is `32 · blocks` long).
fn dot(f: BlockFormat, w: QRow<'_>, x: &[f32]) -> f32 {
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
        let halves = scale_group(w.scales, b0, &mut group);
        // SAFETY: `halves` holds 16 bytes, what the unaligned 128-bit load reads; `d` holds the
        // 8 floats the unaligned store writes.
        unsafe {
            let h = _mm_loadu_si128(halves.as_ptr().cast());
            _mm256_storeu_ps(d.as_mut_ptr(), _mm256_cvtph_ps(h));
        }
        prefetch_far(vp.wrapping_add(b0 * f.quant_bytes()), n * f.quant_bytes());
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

/// [`dots`] of four rows at once with AVX-512F: per block the input's 32 floats are two loads for
/// the four rows, whose sums are four independent chains.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
fn dots4_avx512(f: BlockFormat, w: [QRow<'_>; 4], x: &[f32]) -> [f32; 4] {
    use std::arch::x86_64::*;
    let blocks = w[0].scales.len() / 2;
    assert!(x.len() >= blocks * QK);
    for row in &w {
        assert!(row.scales.len() >= 2 * blocks && row.values.len() >= blocks * f.quant_bytes());
    }
    // Q4_0's values, q - 8 for each nibble q.
    let table = _mm512_setr_ps(
        -8.0, -7.0, -6.0, -5.0, -4.0, -3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0,
    );
    let mut acc = [_mm512_setzero_ps(); 4];
    // Sixteen blocks' scales of each row, widened by one instruction.
    let mut d = [[0f32; 16]; 4];
    let mut group = [0u8; 32];
    let xp = x.as_ptr();
    for b0 in (0..blocks).step_by(16) {
        let n = (blocks - b0).min(16);
        for (row, dr) in w.iter().zip(d.iter_mut()) {
            let halves = scale_group(row.scales, b0, &mut group);
            // SAFETY: `halves` holds 32 bytes, what the unaligned 256-bit load reads; `dr` holds
            // the 16 floats the unaligned store writes.
            unsafe {
                let h = _mm256_loadu_si256(halves.as_ptr().cast());
                _mm512_storeu_ps(dr.as_mut_ptr(), _mm512_cvtph_ps(h));
            }
        }
        for (i, b) in (b0..b0 + n).enumerate() {
            // SAFETY: block `b` < `blocks` lies inside every slice (asserted above): 32 floats of
            // `x` at `32·b`, 32 values of Q8_0 or 16 bytes of Q4_0 at `b · quant_bytes` of each
            // row. The loads are unaligned ones.
            unsafe {
                let xl = _mm512_loadu_ps(xp.add(b * QK));
                let xh = _mm512_loadu_ps(xp.add(b * QK + 16));
                for r in 0..4 {
                    // Block b's values in row r (`quant_bytes` a block in either format).
                    let p = w[r].values.as_ptr().add(b * f.quant_bytes());
                    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PREFETCH_BYTES).cast());
                    let s = match f {
                        BlockFormat::Q4_0 => {
                            let v = _mm512_cvtepu8_epi32(_mm_loadu_si128(p.cast()));
                            let lo = _mm512_permutexvar_ps(v, table);
                            let hi = _mm512_permutexvar_ps(_mm512_srli_epi32::<4>(v), table);
                            _mm512_fmadd_ps(hi, xh, _mm512_mul_ps(lo, xl))
                        }
                        BlockFormat::Q8_0 => {
                            let q = |o: usize| {
                                _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                    p.add(o).cast(),
                                )))
                            };
                            _mm512_fmadd_ps(q(16), xh, _mm512_mul_ps(q(0), xl))
                        }
                    };
                    acc[r] = _mm512_fmadd_ps(s, _mm512_set1_ps(d[r][i]), acc[r]);
                }
            }
        }
    }
    acc.map(|a| _mm512_reduce_add_ps(a))
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
            // Six rows of 20 blocks (four at a time and two alone; a group of sixteen scales
            // and a part one) against each row's own dequantized dot.
            let k = 20 * QK;
            let x: Vec<f32> = (0..k)
                .map(|i| ((i * 29 % 31) as f32 - 15.0) / 8.0)
                .collect();
            let rows: Vec<Vec<u8>> = (0..6)
                .map(|r| {
                    let w: Vec<f32> = (0..k)
                        .map(|i| (((i + 7 * r) * 37 % 23) as f32 - 11.0) / (4 << r) as f32)
                        .collect();
                    split(f, &w)
                })
                .collect();
            let qrows: Vec<QRow<'_>> = rows
                .iter()
                .map(|s| {
                    let (values, scales) = s.split_at(k / QK * f.quant_bytes());
                    QRow { values, scales }
                })
                .collect();
            let mut got = [0f32; 6];
            dots(f, &qrows, &Input::new(f, &x), &mut got);
            for (r, q) in qrows.iter().enumerate() {
                let deq = dequantize_split(f, q.values, q.scales);
                let want: f64 = deq.iter().zip(&x).map(|(a, b)| f64::from(a * b)).sum();
                let tol = 1e-5
                    * deq
                        .iter()
                        .zip(&x)
                        .map(|(a, b)| f64::from((a * b).abs()))
                        .sum::<f64>();
                assert!(
                    (f64::from(got[r]) - want).abs() <= tol,
                    "{f:?} row {r}: {} vs {want}",
                    got[r]
                );
            }
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
