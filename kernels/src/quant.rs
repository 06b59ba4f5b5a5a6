//! llama.cpp's block formats for weight matrices: [`BlockFormat::Q8_0`] and [`BlockFormat::Q4_0`].
//!
//! A block is [`QK`] = 32 consecutive weights of a row with one f16 scale `d`; weight `i` is
//! `d · q_i`. Q8_0 stores `q_i` as int8 (a block is 2 + 32 = 34 bytes); Q4_0 stores `q_i + 8` in
//! 4 bits (`q_i` in -8..=7), two a byte, weight `j` in the low nibble of byte `j` and weight
//! `j + 16` in its high nibble (2 + 16 = 18 bytes). [`quantize`] is llama.cpp's reference
//! quantizer (`quantize_row_q8_0_ref`, `quantize_row_q4_0_ref`) and writes the blocks as a GGUF
//! file holds them (the scale first), so a block read from such a file means the same here.
//!
//! On a device the blocks of a matrix are kept as two arrays ([`split`]): every block's values,
//! then every block's scale — the same bytes, 4-byte aligned, so a kernel reads values as 32-bit
//! words without 8- or 16-bit storage.
//!
//! Seeded weights ([`fill_exact`]) are chosen so that quantizing them changes nothing: each block
//! holds `d · q_i` for a power-of-two `d` with one value at the format's extreme (`±127·d`,
//! `-8·d`), which is where llama.cpp's quantizer puts the scale. So the f64 reference computes on
//! the very values the device reads, and a GGUF file written with the `gguf` package's own
//! quantizer from the same f32 weights holds the same blocks.

use rand::RngCore;
use rand_pcg::Pcg64;

/// Weights per block.
pub const QK: usize = 32;

/// A block format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockFormat {
    /// 32 int8 values and an f16 scale.
    Q8_0,
    /// 32 4-bit values offset by 8 and an f16 scale.
    Q4_0,
}

impl BlockFormat {
    /// Bytes of a block's values, without its scale (32, 16).
    pub fn quant_bytes(self) -> usize {
        match self {
            BlockFormat::Q8_0 => QK,
            BlockFormat::Q4_0 => QK / 2,
        }
    }

    /// Bytes of a block with its scale (34, 18).
    pub fn block_bytes(self) -> usize {
        2 + self.quant_bytes()
    }

    /// The suffix of the device kernels of this format (`q8`, `q4`: `llm_qgemv_q8`, `llm_linear_q8`).
    pub fn suffix(self) -> &'static str {
        match self {
            BlockFormat::Q8_0 => "q8",
            BlockFormat::Q4_0 => "q4",
        }
    }
}

/// One block's scale (f16 bits) and values (`q_i`, before Q4_0's offset and packing).
fn quantize_block(f: BlockFormat, x: &[f32]) -> (u16, [i8; QK]) {
    let mut q = [0i8; QK];
    match f {
        BlockFormat::Q8_0 => {
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            for (q, v) in q.iter_mut().zip(x) {
                *q = (v * id).round() as i8;
            }
            (half::f16::from_f32(d).to_bits(), q)
        }
        BlockFormat::Q4_0 => {
            // The value of largest magnitude, with its sign (the first of equal ones).
            let (mut amax, mut max) = (0f32, 0f32);
            for &v in x {
                if v.abs() > amax {
                    amax = v.abs();
                    max = v;
                }
            }
            let d = max / -8.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            for (q, v) in q.iter_mut().zip(x) {
                *q = (((v * id + 8.5) as i8).min(15)) - 8;
            }
            (half::f16::from_f32(d).to_bits(), q)
        }
    }
}

/// The stored bytes of values `q` (Q4_0: offset by 8, packed in llama.cpp's nibble order).
fn pack_values(f: BlockFormat, q: &[i8; QK], out: &mut [u8]) {
    match f {
        BlockFormat::Q8_0 => {
            for (o, v) in out.iter_mut().zip(q) {
                *o = *v as u8;
            }
        }
        BlockFormat::Q4_0 => {
            for (j, o) in out.iter_mut().enumerate().take(QK / 2) {
                *o = (q[j] + 8) as u8 | (((q[j + QK / 2] + 8) as u8) << 4);
            }
        }
    }
}

/// Appends the 32 weights of the block whose f16 scale is `scale` (little-endian) and whose stored
/// values are `qs`.
fn push_block(f: BlockFormat, scale: &[u8], qs: &[u8], out: &mut Vec<f32>) {
    let d = half::f16::from_bits(u16::from_le_bytes([scale[0], scale[1]])).to_f32();
    // A loop a format (not `value` an element): validation of an `8b` model dequantizes every
    // row it checks.
    match f {
        BlockFormat::Q8_0 => out.extend(qs[..QK].iter().map(|&q| d * f32::from(q as i8))),
        BlockFormat::Q4_0 => {
            let qs = &qs[..QK / 2];
            out.extend(qs.iter().map(|&b| d * (f32::from(b & 15) - 8.0)));
            out.extend(qs.iter().map(|&b| d * (f32::from(b >> 4) - 8.0)));
        }
    }
}

/// `x` (a whole number of blocks) as llama.cpp's blocks: each block's f16 scale (little-endian),
/// then its values.
///
/// # Panics
/// If `x.len()` is not a multiple of [`QK`].
pub fn quantize(f: BlockFormat, x: &[f32]) -> Vec<u8> {
    assert_eq!(x.len() % QK, 0, "{} values are not whole blocks", x.len());
    let mut out = vec![0u8; x.len() / QK * f.block_bytes()];
    for (xb, ob) in x
        .chunks_exact(QK)
        .zip(out.chunks_exact_mut(f.block_bytes()))
    {
        let (d, q) = quantize_block(f, xb);
        ob[..2].copy_from_slice(&d.to_le_bytes());
        pack_values(f, &q, &mut ob[2..]);
    }
    out
}

/// The weights that llama.cpp's blocks `blocks` hold.
///
/// # Panics
/// If `blocks` is not a whole number of blocks.
pub fn dequantize(f: BlockFormat, blocks: &[u8]) -> Vec<f32> {
    assert_eq!(blocks.len() % f.block_bytes(), 0, "not whole blocks");
    let mut out = Vec::with_capacity(blocks.len() / f.block_bytes() * QK);
    for b in blocks.chunks_exact(f.block_bytes()) {
        push_block(f, &b[..2], &b[2..], &mut out);
    }
    out
}

/// The weights of `n` split blocks: their values (`n · quant_bytes`) and their f16 scales (`2n`).
pub fn dequantize_split(f: BlockFormat, values: &[u8], scales: &[u8]) -> Vec<f32> {
    let n = scales.len() / 2;
    let mut out = Vec::with_capacity(n * QK);
    for (i, s) in scales.chunks_exact(2).enumerate() {
        push_block(
            f,
            s,
            &values[i * f.quant_bytes()..][..f.quant_bytes()],
            &mut out,
        );
    }
    out
}

/// `x` (a whole number of blocks) quantized and split as a device keeps it: every block's values
/// (`quant_bytes` each, in block order), then every block's f16 scale, little-endian.
///
/// # Panics
/// If `x.len()` is not a multiple of [`QK`].
pub fn split(f: BlockFormat, x: &[f32]) -> Vec<u8> {
    let blocks = quantize(f, x);
    let n = x.len() / QK;
    let mut out = vec![0u8; n * f.block_bytes()];
    let (values, scales) = out.split_at_mut(n * f.quant_bytes());
    for (i, b) in blocks.chunks_exact(f.block_bytes()).enumerate() {
        values[i * f.quant_bytes()..][..f.quant_bytes()].copy_from_slice(&b[2..]);
        scales[2 * i..2 * i + 2].copy_from_slice(&b[..2]);
    }
    out
}

/// Fills `out` with weights (a whole number of blocks) that `f` holds exactly, of magnitude up to
/// about `2^-bits · qmax` (127 for Q8_0, 8 for Q4_0): each block is `2^-bits · q_i` with `q_i`
/// uniform over the format's values and one of them, at a random place, the extreme llama.cpp's
/// quantizer scales by (`±127`, `-8`).
///
/// # Panics
/// If `out` is not a whole number of blocks.
pub(crate) fn fill_exact(f: BlockFormat, bits: i32, out: &mut [f32], rng: &mut Pcg64) {
    assert_eq!(
        out.len() % QK,
        0,
        "{} weights are not whole blocks",
        out.len()
    );
    let d = 2f32.powi(-bits);
    crate::draw::draw_units(out, QK, DRAWS_PER_BLOCK, rng, |part, rng| {
        for block in part.chunks_exact_mut(QK) {
            for (v, q) in block.iter_mut().zip(draw_block(f, rng)) {
                *v = f32::from(q) * d;
            }
        }
    });
}

/// The weights [`fill_exact`] draws, straight into their split form ([`split`] of them, without
/// the f32 values): `values` (`quant_bytes` a block) and `scales` (2 bytes a block, every one
/// `2^-bits`), with `rng` advanced as [`fill_exact`] advances it.
///
/// # Panics
/// If `values` and `scales` do not hold the same whole number of blocks.
pub(crate) fn fill_exact_split(
    f: BlockFormat,
    bits: i32,
    values: &mut [u8],
    scales: &mut [u8],
    rng: &mut Pcg64,
) {
    let qb = f.quant_bytes();
    assert!(
        values.len().is_multiple_of(qb) && scales.len() == 2 * (values.len() / qb),
        "{} value bytes and {} scale bytes are not the same whole blocks",
        values.len(),
        scales.len()
    );
    crate::draw::draw_units(values, qb, DRAWS_PER_BLOCK, rng, |part, rng| {
        for block in part.chunks_exact_mut(qb) {
            pack_values(f, &draw_block(f, rng), block);
        }
    });
    let d = half::f16::from_f32(2f32.powi(-bits))
        .to_bits()
        .to_le_bytes();
    for s in scales.chunks_exact_mut(2) {
        s.copy_from_slice(&d);
    }
}

/// Draws of the stream one seeded block takes: one a value, one for the extreme's place.
const DRAWS_PER_BLOCK: u128 = QK as u128 + 1;

/// The values `q_i` of one seeded block ([`fill_exact`]).
fn draw_block(f: BlockFormat, rng: &mut Pcg64) -> [i8; QK] {
    let mut q = [0i8; QK];
    for v in q.iter_mut() {
        let r = rng.next_u32();
        *v = match f {
            BlockFormat::Q8_0 => ((r % 255) as i32 - 127) as i8,
            BlockFormat::Q4_0 => ((r % 16) as i32 - 8) as i8,
        };
    }
    let r = rng.next_u32();
    q[(r as usize >> 1) % QK] = match f {
        BlockFormat::Q8_0 if r & 1 == 0 => -127,
        BlockFormat::Q8_0 => 127,
        BlockFormat::Q4_0 => -8,
    };
    q
}

/// The scale exponent of [`fill_exact`] for weights bounded by about `bound`: `2^-bits · qmax`
/// nearest `bound` on a log scale.
pub(crate) fn scale_bits(f: BlockFormat, bound: f64) -> i32 {
    let qmax = match f {
        BlockFormat::Q8_0 => 127.0,
        BlockFormat::Q4_0 => 8.0,
    };
    (qmax / bound).log2().round() as i32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::rng_for;

    fn f16(v: f32) -> [u8; 2] {
        half::f16::from_f32(v).to_bits().to_le_bytes()
    }

    #[test]
    fn hand_packed_q8_0_block_decodes_to_its_values() {
        // Scale 0.5, values 0, 1, -1, 2, -2, ... (q_i = (i+1)/2 with alternating sign), byte by byte.
        let mut block = f16(0.5).to_vec();
        let q: Vec<i8> = (0..32)
            .map(|i: i8| if i % 2 == 1 { (i + 1) / 2 } else { -(i / 2) })
            .collect();
        block.extend(q.iter().map(|v| *v as u8));
        let want: Vec<f32> = vec![
            0.0, 0.5, -0.5, 1.0, -1.0, 1.5, -1.5, 2.0, -2.0, 2.5, -2.5, 3.0, -3.0, 3.5, -3.5, 4.0,
            -4.0, 4.5, -4.5, 5.0, -5.0, 5.5, -5.5, 6.0, -6.0, 6.5, -6.5, 7.0, -7.0, 7.5, -7.5, 8.0,
        ];
        assert_eq!(dequantize(BlockFormat::Q8_0, &block), want);
        assert_eq!(block.len(), BlockFormat::Q8_0.block_bytes());
    }

    #[test]
    fn hand_packed_q4_0_block_decodes_in_llama_cpp_nibble_order() {
        // Scale 0.25. Byte j = low nibble j (weight j), high nibble 15 - j (weight j + 16):
        // weight j = (j - 8) / 4, weight 16 + j = (7 - j) / 4.
        let mut block = f16(0.25).to_vec();
        block.extend((0u8..16).map(|j| j | ((15 - j) << 4)));
        let want: Vec<f32> = vec![
            -2.0, -1.75, -1.5, -1.25, -1.0, -0.75, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0, 1.25,
            1.5, 1.75, 1.75, 1.5, 1.25, 1.0, 0.75, 0.5, 0.25, 0.0, -0.25, -0.5, -0.75, -1.0, -1.25,
            -1.5, -1.75, -2.0,
        ];
        assert_eq!(dequantize(BlockFormat::Q4_0, &block), want);
        assert_eq!(block.len(), BlockFormat::Q4_0.block_bytes());
        // The quantizer writes the same bytes back: -2.0 (weight 0, the first of the largest) sets
        // the scale to -2 / -8.
        assert_eq!(quantize(BlockFormat::Q4_0, &want), block);
    }

    #[test]
    fn quantizer_follows_llama_cpp_on_arbitrary_values() {
        // Q8_0: d = amax / 127, q = round(x / d); Q4_0: d = max / -8, q = min(15, ⌊x/d + 8.5⌋).
        let x: Vec<f32> = (0..32).map(|i| (i as f32 - 10.3) * 0.37).collect();
        let b8 = quantize(BlockFormat::Q8_0, &x);
        let d8 = half::f16::from_f32(x[31] / 127.0).to_f32();
        assert_eq!(&b8[..2], &f16(d8));
        let back = dequantize(BlockFormat::Q8_0, &b8);
        for (a, b) in x.iter().zip(&back) {
            // Half a step, and the scale's own f16 rounding times up to 127.
            assert!((a - b).abs() <= 0.6 * d8, "{a} vs {b}");
        }
        let b4 = quantize(BlockFormat::Q4_0, &x);
        let d4 = half::f16::from_f32(x[31] / -8.0).to_f32();
        assert_eq!(&b4[..2], &f16(d4));
        let back = dequantize(BlockFormat::Q4_0, &b4);
        // The largest value maps to q = -8 (nibble 0) under a negative scale, the most negative
        // to q = 4 (⌊3.98 + 8.5⌋ - 8).
        assert_eq!(back[31], -8.0 * d4);
        assert_eq!(b4[2] & 15, 12, "weight 0 is the low nibble of byte 0");
        assert_eq!(
            b4[2 + 15] >> 4,
            0,
            "weight 31 is the high nibble of byte 15"
        );
    }

    #[test]
    fn seeded_weights_survive_quantization_exactly() {
        for f in [BlockFormat::Q8_0, BlockFormat::Q4_0] {
            let mut x = vec![0f32; 32 * 64];
            fill_exact(f, 9, &mut x, &mut rng_for(3, 1));
            assert_eq!(dequantize(f, &quantize(f, &x)), x, "{f:?}");
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            let qmax = if f == BlockFormat::Q8_0 { 127.0 } else { 8.0 };
            assert_eq!(amax, qmax / 512.0);
            let distinct: std::collections::BTreeSet<i32> =
                x.iter().map(|v| (v * 512.0) as i32).collect();
            assert_eq!(
                distinct.len(),
                if f == BlockFormat::Q8_0 { 255 } else { 16 }
            );
        }
    }

    #[test]
    fn split_keeps_the_values_then_the_scales() {
        let f = BlockFormat::Q4_0;
        let mut x = vec![0f32; 96];
        fill_exact(f, 4, &mut x, &mut rng_for(5, 1));
        let blocks = quantize(f, &x);
        let s = split(f, &x);
        assert_eq!(s.len(), blocks.len());
        for i in 0..3 {
            let b = &blocks[i * 18..(i + 1) * 18];
            assert_eq!(&s[i * 16..(i + 1) * 16], &b[2..]);
            assert_eq!(&s[48 + 2 * i..50 + 2 * i], &b[..2]);
        }
        assert_eq!(scale_bits(BlockFormat::Q8_0, 1.0), 7);
        assert_eq!(scale_bits(BlockFormat::Q4_0, 1.0 / 64.0), 9);
    }

    #[test]
    fn weights_drawn_split_are_the_split_of_the_weights_drawn() {
        // Past the threads' threshold too (2^22 bytes), where each thread jumps its stream.
        for (f, blocks) in [(BlockFormat::Q8_0, 5), (BlockFormat::Q4_0, (1 << 18) + 3)] {
            let (mut a, mut b) = (rng_for(9, 1), rng_for(9, 1));
            let mut x = vec![0f32; blocks * QK];
            fill_exact(f, 11, &mut x, &mut a);
            let mut got = vec![0u8; blocks * f.block_bytes()];
            let (values, scales) = got.split_at_mut(blocks * f.quant_bytes());
            fill_exact_split(f, 11, values, scales, &mut b);
            assert!(got == split(f, &x), "{f:?}: the bytes differ");
            assert_eq!(a.next_u64(), b.next_u64(), "{f:?}: the streams end apart");
        }
    }
}
