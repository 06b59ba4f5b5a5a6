//! The AVX2+FMA microkernel of `gemm/blocked`'s full 16×6 tile, in place of the `gemm` crate's.
//!
//! The crate's kernel is written for any strides: each of the six broadcasts of B advances one
//! pointer by a stride held in a register, a chain of six dependent adds per step of k. That chain is
//! as long as the step's twelve fused multiply-adds take on two FMA pipes, so on Zen 3 any other
//! delay shows (0.71–0.76 of OpenBLAS, 89% of the time in that kernel). Here, when B is packed
//! (consecutive in k-steps of six) the broadcasts take fixed offsets from one pointer, and the
//! step's only pointer updates are two independent adds. Any other layout or a partial tile goes to
//! the crate's kernel unchanged.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use gemm_common::microkernel::MicroKernelFn;
use gemm_f32::microkernel::fma::f32 as crate_kernels;

/// Rows of the tile (two 8-lane vectors).
const MR: usize = 16;
/// Columns of the tile.
const NR: usize = 6;

/// B is packed for this kernel once the driver's row count (our `n`) passes this many tiles. The
/// crate packs a contiguous B only past 128 tiles (2048 columns), so at n = 1024 its kernel read B
/// in place, six rows 4 KiB apart; packing costs one pass over B and lets the fast path run (Zen 3,
/// n = 1024: 97–118 GFLOP/s unpacked with either kernel, 138–147 packed with this one).
pub const RHS_PACKING_THRESHOLD: usize = 2;

/// The crate's AVX2+FMA microkernels with the full-tile entry replaced by [`tile_16x6`].
pub const UKR: [[MicroKernelFn<f32>; NR]; MR / 8] = {
    let mut ukr = crate_kernels::UKR;
    ukr[MR / 8 - 1][NR - 1] = tile_16x6;
    ukr
};

/// `dst(16×6, column stride dst_cs) = alpha·dst + beta·(lhs · rhs)` over `k` steps, with the
/// `gemm` crate's microkernel signature and meaning (`alpha_status` 0: dst is not read, 1: alpha is
/// one, 2: any alpha).
///
/// # Safety
///
/// The caller's contract of [`MicroKernelFn`]: the packed operands hold `k` steps at their strides,
/// `dst` holds the tile at its strides, and the CPU has AVX2 and FMA.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_16x6(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    lhs: *const f32,
    rhs: *const f32,
    dst_cs: isize,
    dst_rs: isize,
    lhs_cs: isize,
    rhs_rs: isize,
    rhs_cs: isize,
    alpha: f32,
    beta: f32,
    alpha_status: u8,
    conj_dst: bool,
    conj_lhs: bool,
    conj_rhs: bool,
    next_lhs: *const f32,
) {
    if m != MR || n != NR || dst_rs != 1 || rhs_cs != 1 {
        // SAFETY: the same contract, passed on.
        return unsafe {
            crate_kernels::UKR[MR / 8 - 1][NR - 1](
                m,
                n,
                k,
                dst,
                lhs,
                rhs,
                dst_cs,
                dst_rs,
                lhs_cs,
                rhs_rs,
                rhs_cs,
                alpha,
                beta,
                alpha_status,
                conj_dst,
                conj_lhs,
                conj_rhs,
                next_lhs,
            )
        };
    }
    // SAFETY: every load is inside the `k` steps of the packed operands (16 floats of lhs at
    // `p·lhs_cs`, 6 of rhs at `p·rhs_rs`, as rhs_cs is 1) and every store inside the 16×6 tile of
    // dst (dst_rs is 1, so a column is 16 consecutive floats at `j·dst_cs`).
    unsafe {
        let mut c = [[_mm256_setzero_ps(); 2]; NR];
        let (mut a, mut b) = (lhs, rhs);
        macro_rules! step {
            ($a:expr, $b:expr) => {{
                let a0 = _mm256_loadu_ps($a);
                let a1 = _mm256_loadu_ps($a.add(8));
                macro_rules! col {
                    ($j:literal) => {{
                        let bj = _mm256_broadcast_ss(&*$b.add($j));
                        c[$j][0] = _mm256_fmadd_ps(a0, bj, c[$j][0]);
                        c[$j][1] = _mm256_fmadd_ps(a1, bj, c[$j][1]);
                    }};
                }
                col!(0);
                col!(1);
                col!(2);
                col!(3);
                col!(4);
                col!(5);
            }};
        }
        for _ in 0..k / 4 {
            step!(a, b);
            step!(a.offset(lhs_cs), b.offset(rhs_rs));
            step!(a.offset(2 * lhs_cs), b.offset(2 * rhs_rs));
            step!(a.offset(3 * lhs_cs), b.offset(3 * rhs_rs));
            a = a.offset(4 * lhs_cs);
            b = b.offset(4 * rhs_rs);
        }
        for _ in 0..k % 4 {
            step!(a, b);
            a = a.offset(lhs_cs);
            b = b.offset(rhs_rs);
        }
        let (va, vb) = (_mm256_set1_ps(alpha), _mm256_set1_ps(beta));
        for (j, col) in c.iter().enumerate() {
            for (half, acc) in col.iter().enumerate() {
                let at = dst.offset(j as isize * dst_cs).add(8 * half);
                let v = match alpha_status {
                    0 => _mm256_mul_ps(vb, *acc),
                    1 => _mm256_fmadd_ps(vb, *acc, _mm256_loadu_ps(at)),
                    _ => _mm256_fmadd_ps(vb, *acc, _mm256_mul_ps(va, _mm256_loadu_ps(at))),
                };
                _mm256_storeu_ps(at, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `[tile_16x6, the crate's kernel]` on the same operands; `rhs_cs` 1 is the packed layout.
    fn both(k: usize, rhs_cs: isize, alpha_status: u8) -> [Vec<f32>; 2] {
        let value = |i: usize, salt: usize| ((i * 7 + salt * 13) % 23) as f32 / 8.0 - 1.4;
        // lhs: k steps of 16 (column stride 16); rhs: k steps of 6 at rhs_rs, columns rhs_cs apart.
        let rhs_rs: isize = if rhs_cs == 1 { 6 } else { 1 };
        let lhs: Vec<f32> = (0..16 * k.max(1)).map(|i| value(i, 1)).collect();
        let rhs: Vec<f32> = (0..6 * k.max(1) * rhs_cs as usize)
            .map(|i| value(i, 2))
            .collect();
        let dst_cs = 19; // wider than the tile: the columns must land at their stride
        let start: Vec<f32> = (0..dst_cs * 6).map(|i| value(i, 3)).collect();
        let ukrs: [MicroKernelFn<f32>; 2] = [tile_16x6, crate_kernels::UKR[1][5]];
        ukrs.map(|ukr| {
            let mut dst = start.clone();
            // SAFETY: the operands hold k steps at the strides passed, dst six columns of 16 at
            // dst_cs; the test runs only where the CPU has AVX2 and FMA.
            unsafe {
                ukr(
                    16,
                    6,
                    k,
                    dst.as_mut_ptr(),
                    lhs.as_ptr(),
                    rhs.as_ptr(),
                    dst_cs as isize,
                    1,
                    16,
                    rhs_rs,
                    rhs_cs,
                    0.75,
                    1.25,
                    alpha_status,
                    false,
                    false,
                    false,
                    lhs.as_ptr(),
                )
            };
            dst
        })
    }

    #[test]
    fn the_tile_matches_the_crates_kernel_for_every_alpha_and_remainder() {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
            println!("skipped: this CPU has no AVX2+FMA");
            return;
        }
        for rhs_cs in [1, 6] {
            // What dst holds before the call (k = 0 with alpha one leaves it as it was).
            let start = both(0, rhs_cs, 1)[1].clone();
            for k in [0, 1, 3, 4, 5, 8, 13, 64] {
                for alpha_status in [0, 1, 2] {
                    let [ours, theirs] = both(k, rhs_cs, alpha_status);
                    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
                        assert!(
                            (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                            "k={k} rhs_cs={rhs_cs} alpha_status={alpha_status} at {i}: {a} vs {b}"
                        );
                    }
                    // Padding between columns is never written.
                    for j in 0..6 {
                        assert_eq!(
                            ours[j * 19 + 16..j * 19 + 19],
                            start[j * 19 + 16..j * 19 + 19]
                        );
                    }
                }
            }
        }
    }
}
