//! A matrix row of Q8_0 or Q4_0 blocks as the packed weights keep it (its blocks' values, then their
//! f16 scales) and what the dot products of [`super::quant`] and [`super::digit_dots`] share: the
//! scale reads and the prefetch distance.

/// How far ahead of the block it reads a dot product of several rows asks for each row's values
/// (`quant`'s `vpermps` copy): four rows are four streams, which the hardware prefetchers of the
/// Xeon this was measured on did not keep ahead of (`small` q8_0 decode 89.7 -> 120.9 tok/s with a
/// kilobyte; docs/PERFORMANCE.md). A prefetch past the row's end is a hint, never a fault.
#[cfg(target_arch = "x86_64")]
pub(super) const PREFETCH_BYTES: usize = 1024;

/// [`PREFETCH_BYTES`] for the copies that take a cache line of a row in a few instructions and so
/// need it asked for earlier: `digit_dots`' VNNI copies (four rows) and the AVX2 copies (one row:
/// `dot_q4_avx2`, `quant`'s float one). On Zen 5 a kilobyte left the VNNI copies' `small` decode
/// waiting on memory (q8_0 1.28-1.53x, q4_0 1.18-1.45x with four); the AVX2 copies, one stream the
/// hardware follows, gained less (`gemv` q4_0 in DRAM 1.6x, the decode about 1.05x); rows that fit
/// in the cache lose a few percent to it (docs/PERFORMANCE.md, "The VNNI digit copies on Zen 5").
#[cfg(target_arch = "x86_64")]
pub(super) const FAR_PREFETCH_BYTES: usize = 4096;

/// Asks for the cache lines of the `bytes` bytes from `p`, [`FAR_PREFETCH_BYTES`] ahead: one
/// prefetch a 64-byte line (the one-row AVX2 copies, a group of blocks at a time). A prefetch past
/// the row's end is a hint, never a fault, so `p` needs no bounds.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn prefetch_far(p: *const u8, bytes: usize) {
    use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
    for line in (0..bytes).step_by(64) {
        // SAFETY: a prefetch only hints; it reads nothing and faults on no address.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(FAR_PREFETCH_BYTES + line).cast());
        }
    }
}

/// One matrix row: `k / 32` blocks' values and their scales.
#[derive(Debug, Clone, Copy)]
pub struct QRow<'a> {
    /// The blocks' values, `quant_bytes` each.
    pub values: &'a [u8],
    /// The blocks' f16 scales, little-endian.
    pub scales: &'a [u8],
}

impl QRow<'_> {
    /// A row of no blocks (to fill an array before its rows are known).
    pub const EMPTY: QRow<'static> = QRow {
        values: &[],
        scales: &[],
    };
}

/// Block `b`'s scale: its f16 bits widened by bit arithmetic (exact for every finite half, and
/// inlined where the `half` crate would call out per block).
#[inline(always)]
pub(super) fn scale(scales: &[u8], b: usize) -> f32 {
    let h = u32::from(u16::from_le_bytes([scales[2 * b], scales[2 * b + 1]]));
    let magnitude = f32::from_bits((h & 0x7fff) << 13) * f32::from_bits(0x7780_0000); // 2^112
    f32::from_bits(magnitude.to_bits() | ((h & 0x8000) << 16))
}

/// The f16 scales of the `G / 2` blocks from block `b0` (`G` bytes): the row's own where it has
/// them all, else those it has copied into `spare` (whose bytes past them are not read as scales
/// of blocks that exist).
pub(super) fn scale_group<'a, const G: usize>(
    scales: &'a [u8],
    b0: usize,
    spare: &'a mut [u8; G],
) -> &'a [u8] {
    let n = (scales.len() / 2 - b0).min(G / 2);
    if n == G / 2 {
        &scales[2 * b0..2 * b0 + G]
    } else {
        spare[..2 * n].copy_from_slice(&scales[2 * b0..2 * (b0 + n)]);
        &spare[..]
    }
}
