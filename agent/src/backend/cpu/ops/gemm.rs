//! Single-precision GEMM, `C(m×n) = A(m×k)·B(k×n)`, all row-major, in three strengths.
//!
//! The three versions exist so a benchmark can show what each optimisation buys on a CPU, the same way
//! the GPU kernels come in naive, tiled and vendor-library flavours:
//!
//! - [`gemm_naive`]: one task per row of C, the i-k-j loop. The inner loop is a contiguous
//!   `c_row += a_ip * b_row`, which vectorizes, but every row streams all of B from memory.
//! - [`gemm_tiled`]: our own cache blocking. A 64-row block of A and a 256-deep panel of k are packed
//!   into a contiguous buffer that stays in L2, a 256×16 strip of B is packed so it stays in L1, and a
//!   4×16 tile of C lives in vector registers (eight AVX registers) while the k loop runs. One task per
//!   row block.
//! - [`gemm_blocked`]: the `gemm` crate's driver (BLIS-style packing) and hand-written microkernels
//!   for AVX-512 (a 64×4 register tile), AVX2+FMA (16×6) or portable code, picked by [`Isa::active`]: the
//!   number to compare with OpenBLAS/MKL.
//!
//! `gemm_naive` and `gemm_tiled` run an AVX2+FMA copy of their loops when the CPU has them (see
//! `has_avx2_fma` in `mod.rs`), so the gap between them measures blocking, not instruction sets.

use rayon::prelude::*;

use super::{Isa, check_len, checked_len, fmadd, has_avx2_fma};

#[cfg(target_arch = "x86_64")]
mod avx2;

/// Rows of the register tile of [`gemm_tiled`].
const MR: usize = 4;
/// Columns of the register tile of [`gemm_tiled`] (two 8-wide AVX vectors).
const NR: usize = 16;
/// Depth of one k panel: a 256×16 packed B strip is 16 KiB and stays in L1.
const KC: usize = 256;
/// Most rows in one task of [`gemm_tiled`]: a 64×256 packed A panel is 64 KiB and stays in L2.
const MB_MAX: usize = 64;
/// Below this many multiply-adds (`m·n·k`) the work runs on the calling thread: a pool round trip
/// would cost more than it saves.
const SERIAL_LIMIT: usize = 64 * 64 * 64;

/// Checks the three slice lengths against `m`, `n`, `k`.
#[track_caller]
fn check_dims(a: &[f32], b: &[f32], c: &[f32], m: usize, n: usize, k: usize) {
    check_len("a (m×k)", a.len(), checked_len("gemm a", m, k));
    check_len("b (k×n)", b.len(), checked_len("gemm b", k, n));
    check_len("c (m×n)", c.len(), checked_len("gemm c", m, n));
}

/// Whether `m·n·k` multiply-adds are too few to be worth spreading over the pool.
fn is_small(m: usize, n: usize, k: usize) -> bool {
    m.saturating_mul(n).saturating_mul(k) < SERIAL_LIMIT
}

/// Checks the dimensions and does the products with nothing to multiply: true when C is empty or
/// (k = 0) all zeros, so nothing is left to compute.
///
/// # Panics
///
/// Panics if `a.len() != m*k`, `b.len() != k*n` or `c.len() != m*n`.
#[track_caller]
fn is_trivial(a: &[f32], b: &[f32], c: &mut [f32], m: usize, n: usize, k: usize) -> bool {
    check_dims(a, b, c, m, n, k);
    if k == 0 {
        c.fill(0.0);
    }
    m == 0 || n == 0 || k == 0
}

/// `C = A·B` with a plain i-k-j loop, parallel over rows of C, no blocking.
///
/// # Panics
///
/// Panics if `a.len() != m*k`, `b.len() != k*n` or `c.len() != m*n`.
pub fn gemm_naive(a: &[f32], b: &[f32], c: &mut [f32], m: usize, n: usize, k: usize) {
    if is_trivial(a, b, c, m, n, k) {
        return;
    }
    let fma = has_avx2_fma();
    let row = |(c_row, a_row): (&mut [f32], &[f32])| naive_row(a_row, b, c_row, fma);
    if is_small(m, n, k) {
        c.chunks_mut(n).zip(a.chunks(k)).for_each(row);
    } else {
        // Keep each task at SERIAL_LIMIT multiply-adds or more so thin matrices do not drown in tasks.
        let min_rows = (SERIAL_LIMIT / n.saturating_mul(k)).max(1);
        c.par_chunks_mut(n)
            .zip(a.par_chunks(k))
            .with_min_len(min_rows)
            .for_each(row);
    }
}

fma_dispatch! {
    /// One row of C for [`gemm_naive`], dispatched to the AVX2+FMA copy when `fma` is set.
    fn naive_row(a_row: &[f32], b: &[f32], c_row: &mut [f32]) => naive_row_impl::<FMA>
}

#[inline(always)]
fn naive_row_impl<const FMA: bool>(a_row: &[f32], b: &[f32], c_row: &mut [f32]) {
    let n = c_row.len();
    c_row.fill(0.0);
    for (&a_ip, b_row) in a_row.iter().zip(b.chunks_exact(n)) {
        for (c_ij, &b_pj) in c_row.iter_mut().zip(b_row) {
            *c_ij = fmadd::<FMA>(a_ip, b_pj, *c_ij);
        }
    }
}

/// `C = A·B` with our own cache blocking and a 4×16 register tile, parallel over blocks of up to 64
/// rows of C.
///
/// The block height shrinks (to a multiple of 4) when `m` is too small to give every thread a block.
///
/// # Panics
///
/// Panics if `a.len() != m*k`, `b.len() != k*n` or `c.len() != m*n`.
pub fn gemm_tiled(a: &[f32], b: &[f32], c: &mut [f32], m: usize, n: usize, k: usize) {
    if is_trivial(a, b, c, m, n, k) {
        return;
    }
    let threads = rayon::current_num_threads().max(1);
    let mb = m.div_ceil(threads).next_multiple_of(MR).clamp(MR, MB_MAX);
    let fma = has_avx2_fma();
    let block = |(index, c_block): (usize, &mut [f32])| {
        let row0 = index * mb;
        let rows = c_block.len() / n;
        tiled_block(&a[row0 * k..(row0 + rows) * k], b, c_block, n, k, fma);
    };
    if is_small(m, n, k) {
        c.chunks_mut(mb * n).enumerate().for_each(block);
    } else {
        c.par_chunks_mut(mb * n).enumerate().for_each(block);
    }
}

fma_dispatch! {
    /// One row block of [`gemm_tiled`] (`a_block` holds its rows of A), dispatched on `fma`.
    fn tiled_block(a_block: &[f32], b: &[f32], c_block: &mut [f32], n: usize, k: usize) => tiled_block_impl::<FMA>
}

#[inline(always)]
fn tiled_block_impl<const FMA: bool>(
    a_block: &[f32],
    b: &[f32],
    c_block: &mut [f32],
    n: usize,
    k: usize,
) {
    let rows = c_block.len() / n;
    let panels = rows.div_ceil(MR);
    let kc_max = KC.min(k);
    // Packed A: for each MR-row panel, kc groups of MR values (rows past the end are zero).
    let mut a_pack = vec![0.0f32; panels * MR * kc_max];
    // Packed B strip: kc rows of NR values (columns past the end are zero).
    let mut b_pack = vec![0.0f32; kc_max * NR];
    c_block.fill(0.0);
    for p0 in (0..k).step_by(KC) {
        let kc = KC.min(k - p0);
        let a_pack = &mut a_pack[..panels * MR * kc];
        pack_a(a_block, k, p0, kc, a_pack);
        for j0 in (0..n).step_by(NR) {
            let nr = NR.min(n - j0);
            let b_pack = &mut b_pack[..kc * NR];
            pack_b(b, n, p0, kc, j0, nr, b_pack);
            for (panel, a_panel) in a_pack.chunks_exact(MR * kc).enumerate() {
                let acc = micro_tile::<FMA>(a_panel, b_pack);
                let r0 = panel * MR;
                for (r, acc_row) in acc.iter().enumerate().take(rows - r0) {
                    let c_row = &mut c_block[(r0 + r) * n + j0..][..nr];
                    for (c_ij, &add) in c_row.iter_mut().zip(acc_row) {
                        *c_ij += add;
                    }
                }
            }
        }
    }
}

/// Packs columns `p0..p0+kc` of the rows of `a_block` into MR-row panels, p-major inside a panel.
#[inline(always)]
fn pack_a(a_block: &[f32], k: usize, p0: usize, kc: usize, a_pack: &mut [f32]) {
    let rows = a_block.len() / k;
    for (panel, dst) in a_pack.chunks_exact_mut(MR * kc).enumerate() {
        for r in 0..MR {
            let row = panel * MR + r;
            if row < rows {
                let src = &a_block[row * k + p0..][..kc];
                for (p, &v) in src.iter().enumerate() {
                    dst[p * MR + r] = v;
                }
            } else {
                for p in 0..kc {
                    dst[p * MR + r] = 0.0;
                }
            }
        }
    }
}

/// Packs rows `p0..p0+kc`, columns `j0..j0+nr` of B into `kc` contiguous groups of NR values.
#[inline(always)]
fn pack_b(b: &[f32], n: usize, p0: usize, kc: usize, j0: usize, nr: usize, b_pack: &mut [f32]) {
    for (p, dst) in b_pack.chunks_exact_mut(NR).enumerate().take(kc) {
        let src = &b[(p0 + p) * n + j0..][..nr];
        dst[..nr].copy_from_slice(src);
        dst[nr..].fill(0.0);
    }
}

/// The register tile: `acc(MR×NR) = A_panel(MR×kc) · B_strip(kc×NR)`. The accumulator array is small
/// enough for LLVM to keep in registers; the two inner loops unroll completely.
#[inline(always)]
fn micro_tile<const FMA: bool>(a_panel: &[f32], b_strip: &[f32]) -> [[f32; NR]; MR] {
    let mut acc = [[0.0f32; NR]; MR];
    for (a_col, b_row) in a_panel.chunks_exact(MR).zip(b_strip.chunks_exact(NR)) {
        let a_col: &[f32; MR] = a_col.try_into().expect("chunks_exact yields MR values");
        let b_row: &[f32; NR] = b_row.try_into().expect("chunks_exact yields NR values");
        for (acc_row, &a_rp) in acc.iter_mut().zip(a_col) {
            for (acc_rj, &b_pj) in acc_row.iter_mut().zip(b_row) {
                *acc_rj = fmadd::<FMA>(a_rp, b_pj, *acc_rj);
            }
        }
    }
    acc
}

/// `C = A·B` through the `gemm` crate's microkernels for [`Isa::active`], on the current rayon pool
/// (or the calling thread when `m·n·k < 64³`).
///
/// # Panics
///
/// Panics if `a.len() != m*k`, `b.len() != k*n` or `c.len() != m*n`.
pub fn gemm_blocked(a: &[f32], b: &[f32], c: &mut [f32], m: usize, n: usize, k: usize) {
    gemm_blocked_with(Isa::active(), a, b, c, m, n, k);
}

/// [`gemm_blocked`] with the microkernels of `isa`, which must not exceed [`Isa::detected`] (it is
/// clamped to it, so a wider set than the CPU has never runs).
///
/// # Panics
///
/// Panics if `a.len() != m*k`, `b.len() != k*n` or `c.len() != m*n`.
pub fn gemm_blocked_with(
    isa: Isa,
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    m: usize,
    n: usize,
    k: usize,
) {
    if is_trivial(a, b, c, m, n, k) {
        return;
    }
    let parallelism = if is_small(m, n, k) {
        gemm_common::Parallelism::None
    } else {
        gemm_common::Parallelism::Rayon(rayon::current_num_threads())
    };
    blocked_product(isa, a, k, b, n, c, n, m, n, k, parallelism);
}

/// `C = A·B` on the calling thread over row-major operands with leading dimensions (`a[i·lda + p]`,
/// `b[p·ldb + j]`, `c[i·ldc + j]`): a product inside a task that is already one of many (the
/// transformer's attention tiles).
///
/// # Panics
///
/// Panics if an operand is too short for its shape and leading dimension.
#[allow(clippy::too_many_arguments)]
pub fn gemm_strided_serial(
    a: &[f32],
    lda: usize,
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
    m: usize,
    n: usize,
    k: usize,
) {
    let serial = gemm_common::Parallelism::None;
    blocked_product(Isa::active(), a, lda, b, ldb, c, ldc, m, n, k, serial);
}

/// Fewest rows of C in one task of [`gemm_blocked_tiles`]: a multiple of every microkernel's
/// row count, and enough rows that packing B once per task stays cheap.
const ROW_BLOCK_MIN: usize = 32;
/// Fewest columns of C in one task of [`gemm_blocked_tiles`] when columns are split too.
const COL_BLOCK_MIN: usize = 64;

/// [`gemm_blocked`] for the products of a CNN's layers, whose shapes the `gemm` crate's own
/// threading splits into too few or too small pieces to keep a 16-thread pool busy: few filters
/// over many pixels (`m = 64, n = 3136, k = 576` in ResNet-18's first stage) and many filters over
/// few pixels (`m = 512, n = 49, k = 4608` in its last). C is cut into tiles, about two per pool
/// thread (rows first, in blocks of at least 32; then columns, in blocks of at least 64), and each
/// tile is a single-threaded product on the rayon pool, so a batch of images also runs its
/// products side by side. A tile narrower than C is computed into its own buffer and copied into
/// place.
///
/// # Panics
///
/// Panics if `a.len() != m*k`, `b.len() != k*n` or `c.len() != m*n`.
pub fn gemm_blocked_tiles(a: &[f32], b: &[f32], c: &mut [f32], m: usize, n: usize, k: usize) {
    if is_trivial(a, b, c, m, n, k) {
        return;
    }
    let isa = Isa::active();
    let serial = gemm_common::Parallelism::None;
    let tasks = 2 * rayon::current_num_threads();
    let row_blocks = m.div_ceil(ROW_BLOCK_MIN).clamp(1, tasks);
    let rows = m
        .div_ceil(row_blocks)
        .next_multiple_of(ROW_BLOCK_MIN)
        .min(m);
    let row_blocks = m.div_ceil(rows);
    let col_blocks = tasks
        .div_ceil(row_blocks)
        .min(n.div_ceil(COL_BLOCK_MIN))
        .max(1);
    let cols = n.div_ceil(col_blocks);
    if is_small(m, n, k) || (row_blocks == 1 && col_blocks == 1) {
        blocked_product(isa, a, k, b, n, c, n, m, n, k, serial);
        return;
    }
    c.par_chunks_mut(rows * n)
        .zip(a.par_chunks(rows * k))
        .for_each(|(c_rows, a_rows)| {
            let m_rows = c_rows.len() / n;
            if col_blocks == 1 {
                blocked_product(isa, a_rows, k, b, n, c_rows, n, m_rows, n, k, serial);
                return;
            }
            let tiles: Vec<(usize, Vec<f32>)> = (0..n.div_ceil(cols))
                .into_par_iter()
                .map(|cb| {
                    let j0 = cb * cols;
                    let width = cols.min(n - j0);
                    let mut tile = vec![0f32; m_rows * width];
                    let b_cols = &b[j0..];
                    blocked_product(
                        isa, a_rows, k, b_cols, n, &mut tile, width, m_rows, width, k, serial,
                    );
                    (j0, tile)
                })
                .collect();
            for (j0, tile) in tiles {
                let width = tile.len() / m_rows;
                for (dst, src) in c_rows.chunks_exact_mut(n).zip(tile.chunks_exact(width)) {
                    dst[j0..j0 + width].copy_from_slice(src);
                }
            }
        });
}

/// The `gemm` crate's driver with the microkernels of `isa` (clamped to [`Isa::detected`]) and
/// `parallelism`: `C(m×n) = A(m×k)·B(k×n)` where row i of A starts at `a[i·lda]`, row p of B at
/// `b[p·ldb]` and row i of C at `c[i·ldc]` (so B and C may be column blocks of wider matrices).
///
/// # Panics
///
/// Panics if a slice is too short for its rows (`(rows − 1)·ld + columns` elements), or a leading
/// dimension is shorter than its rows.
#[allow(clippy::too_many_arguments)]
fn blocked_product(
    isa: Isa,
    a: &[f32],
    lda: usize,
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
    m: usize,
    n: usize,
    k: usize,
    parallelism: gemm_common::Parallelism,
) {
    // Cheap next to the product, and what the SAFETY argument below rests on.
    let fits = |len: usize, rows: usize, ld: usize, cols: usize| {
        cols <= ld && (rows == 0 || cols == 0 || (rows - 1) * ld + cols <= len)
    };
    assert!(
        fits(a.len(), m, lda, k) && fits(b.len(), k, ldb, n) && fits(c.len(), m, ldc, n),
        "gemm operands too short: a {} (m={m}, lda={lda}, k={k}), b {} (ldb={ldb}, n={n}), c {} (ldc={ldc})",
        a.len(),
        b.len(),
        c.len()
    );
    if m == 0 || n == 0 || k == 0 {
        return;
    }
    // Slice lengths never exceed isize::MAX, so these strides fit.
    let (a_stride, b_stride, c_stride) = (lda as isize, ldb as isize, ldc as isize);
    // The driver wants a column-major destination, so it computes Cᵀ(n×m) = Bᵀ·Aᵀ: row-major C is
    // column-major Cᵀ with column stride ldc, row-major B is Bᵀ with row stride 1 and column stride
    // ldb, and A is Aᵀ with row stride 1 and column stride lda. (`gemm::gemm` does the same swap.)
    // The crate's threshold is one global: the AVX2 path packs B for its own microkernel, the
    // others keep the crate's default (measured on AVX-512 with it).
    let default_packing = || {
        gemm_common::gemm::set_rhs_packing_threshold(
            gemm_common::gemm::DEFAULT_RHS_PACKING_THRESHOLD,
        )
    };
    macro_rules! run {
        ($simd:expr, $ukr:path, $lanes:expr) => {{
            default_packing();
            run!($simd, $ukr, $lanes, {
                use $ukr as table;
                &table::UKR
            })
        }};
        ($simd:expr, $ukr:path, $lanes:expr, $table:expr) => {{
            use $ukr as ukr;
            // SAFETY: the assert above proved (m−1)·lda + k ≤ a.len(), (k−1)·ldb + n ≤ b.len() and
            // (m−1)·ldc + n ≤ c.len(), with k ≤ lda, n ≤ ldb and n ≤ ldc. With the strides above the
            // driver touches c[j + i·ldc], b[j + p·ldb] and a[p + i·lda] for j < n, i < m, p < k
            // only, all inside their slices, and no two (i, j) share a c element. `c` is borrowed
            // mutably for the whole call, so nothing aliases the destination; `read_dst` is false
            // (alpha 0), so every element is written with 1·(A·B). The simd token comes from
            // `try_new`, which checks the CPU at run time (`isa` is clamped to `Isa::detected`).
            unsafe {
                gemm_common::gemm::gemm_basic_generic::<
                    _,
                    f32,
                    { $lanes },
                    { ukr::MR_DIV_N * $lanes },
                    { ukr::NR },
                    { ukr::MR_DIV_N },
                    { ukr::H_M },
                    { ukr::H_N },
                >(
                    $simd,
                    n,
                    m,
                    k,
                    c.as_mut_ptr(),
                    c_stride,
                    1,
                    false,
                    b.as_ptr(),
                    b_stride,
                    1,
                    a.as_ptr(),
                    a_stride,
                    1,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    |x, y, z| x * y + z,
                    $table,
                    &ukr::H_UKR,
                    false,
                    parallelism,
                )
            }
        }};
    }
    #[cfg(target_arch = "x86_64")]
    {
        use gemm_common::simd::{MixedSimd, V3, V4};
        let isa = isa.min(Isa::detected());
        if isa == Isa::Avx512
            && let Some(simd) = <V4 as MixedSimd<f32, f32, f32, f32>>::try_new()
        {
            return run!(simd, gemm_f32::microkernel::avx512f::f32, 16);
        }
        if isa >= Isa::Avx2Fma
            && let Some(simd) = <V3 as MixedSimd<f32, f32, f32, f32>>::try_new()
        {
            gemm_common::gemm::set_rhs_packing_threshold(avx2::RHS_PACKING_THRESHOLD);
            return run!(simd, gemm_f32::microkernel::fma::f32, 8, &avx2::UKR);
        }
    }
    let _ = isa;
    run!(
        gemm_common::simd::Scalar,
        gemm_f32::microkernel::scalar::f32,
        1
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    type GemmFn = fn(&[f32], &[f32], &mut [f32], usize, usize, usize);
    const ALL: [(&str, GemmFn); 4] = [
        ("naive", gemm_naive),
        ("tiled", gemm_tiled),
        ("blocked", gemm_blocked),
        ("tiles", gemm_blocked_tiles),
    ];

    use crate::backend::cpu::ops::test_data as data;

    /// Checks `c` against an f64 reference, allowing f32 rounding of a k-term dot product.
    fn check(name: &str, a: &[f32], b: &[f32], c: &[f32], m: usize, n: usize, k: usize) {
        for i in 0..m {
            for j in 0..n {
                let (mut exact, mut magnitude) = (0.0f64, 0.0f64);
                for p in 0..k {
                    let t = f64::from(a[i * k + p]) * f64::from(b[p * n + j]);
                    exact += t;
                    magnitude += t.abs();
                }
                let tol = 2.0 * (k as f64) * f64::from(f32::EPSILON) * magnitude + 1e-30;
                let got = f64::from(c[i * n + j]);
                assert!(
                    (got - exact).abs() <= tol,
                    "{name} m={m} n={n} k={k}: c[{i},{j}]={got}, expected {exact} (tol {tol})"
                );
            }
        }
    }

    fn run_all(m: usize, n: usize, k: usize) {
        let a = data(m * k, 1 + m as u64);
        let b = data(k * n, 2 + n as u64);
        for (name, f) in ALL {
            let mut c = vec![f32::NAN; m * n];
            f(&a, &b, &mut c, m, n, k);
            check(name, &a, &b, &c, m, n, k);
        }
    }

    #[test]
    fn awkward_small_shape_matches_reference() {
        run_all(37, 53, 29);
    }

    #[test]
    fn shapes_crossing_block_and_panel_edges_match_reference() {
        // m > 64 (several row blocks plus a ragged one), k > 256 (two k panels), n not a multiple of 16.
        run_all(131, 67, 300);
        // Large enough to take the parallel path in every version.
        run_all(96, 200, 160);
        // Packed B on the AVX2 path (n > 32) with full 16×6 tiles, several k panels (the tile
        // accumulates into C after the first) and k not a multiple of the kernel's unroll.
        run_all(48, 96, 1027);
    }

    #[test]
    fn tiles_split_rows_and_columns_on_a_wide_pool() {
        // On 16 threads: few rows over many columns (2 row blocks × 11 column blocks, each tile
        // computed apart and copied into place), and many rows over few columns (rows only).
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(16)
            .build()
            .unwrap();
        pool.install(|| {
            for (m, n, k) in [(64, 700, 40), (70, 650, 33), (512, 49, 300)] {
                let a = data(m * k, 5);
                let b = data(k * n, 6);
                let mut c = vec![f32::NAN; m * n];
                gemm_blocked_tiles(&a, &b, &mut c, m, n, k);
                check("tiles on 16 threads", &a, &b, &c, m, n, k);
            }
        });
    }

    #[test]
    fn degenerate_shapes_match_reference() {
        run_all(1, 1, 1);
        run_all(1, 70, 33);
        run_all(70, 1, 33);
        run_all(5, 3, 1);
    }

    #[test]
    fn baseline_copies_without_fma_match_reference() {
        // The dispatched functions run the AVX2+FMA copies on most machines; check the others too.
        for (m, n, k) in [(37, 53, 29), (131, 67, 300)] {
            let a = data(m * k, 3);
            let b = data(k * n, 4);
            let mut c = vec![f32::NAN; m * n];
            for (c_row, a_row) in c.chunks_mut(n).zip(a.chunks(k)) {
                naive_row_impl::<false>(a_row, &b, c_row);
            }
            check("naive baseline", &a, &b, &c, m, n, k);
            let mut c = vec![f32::NAN; m * n];
            tiled_block_impl::<false>(&a, &b, &mut c, n, k);
            check("tiled baseline", &a, &b, &c, m, n, k);
        }
    }

    #[test]
    fn every_instruction_set_this_cpu_has_matches_reference() {
        // gemm_blocked runs only the widest set; the capped ones (GPUFLEET_CPU_ISA) must be right too,
        // on shapes that leave ragged register tiles (64×4, 16×6) and cross the parallel threshold.
        let mut ran = Vec::new();
        for isa in [Isa::Portable, Isa::Avx2Fma, Isa::Avx512] {
            if isa > Isa::detected() {
                println!("skipped {}: this CPU does not have it", isa.name());
                continue;
            }
            for (m, n, k) in [(37, 53, 29), (131, 67, 300), (1, 70, 33), (70, 1, 33)] {
                let a = data(m * k, 5);
                let b = data(k * n, 6);
                let mut c = vec![f32::NAN; m * n];
                gemm_blocked_with(isa, &a, &b, &mut c, m, n, k);
                check(isa.name(), &a, &b, &c, m, n, k);
            }
            ran.push(isa);
        }
        assert!(
            ran.contains(&Isa::Portable),
            "the portable kernels always run"
        );
    }

    #[test]
    fn the_cap_lowers_the_set_and_unknown_values_are_refused() {
        let detected = Isa::detected();
        assert_eq!(Isa::capped(None), Ok(detected));
        assert_eq!(Isa::capped(Some("auto")), Ok(detected));
        assert_eq!(Isa::capped(Some("portable")), Ok(Isa::Portable));
        assert_eq!(Isa::capped(Some("avx2")), Ok(detected.min(Isa::Avx2Fma)));
        // A cap above what the CPU has changes nothing.
        assert_eq!(Isa::capped(Some("avx512")), Ok(detected));
        let err = Isa::capped(Some("avx9000")).unwrap_err();
        assert!(
            err.contains("GPUFLEET_CPU_ISA") && err.contains("avx9000"),
            "{err}"
        );
        assert!(err.contains("avx2"), "the error lists the values: {err}");
    }

    #[test]
    fn zero_k_writes_zeros_and_empty_outputs_are_fine() {
        for (name, f) in ALL {
            let mut c = vec![f32::NAN; 12];
            f(&[], &[], &mut c, 3, 4, 0);
            assert!(c.iter().all(|&v| v == 0.0), "{name}: {c:?}");
            f(&[], &[1.0; 8], &mut [], 0, 4, 2);
            f(&[1.0; 6], &[], &mut [], 3, 0, 2);
        }
    }

    #[test]
    fn thread_counts_do_not_change_results() {
        let (m, n, k) = (75, 130, 90);
        let a = data(m * k, 7);
        let b = data(k * n, 8);
        for threads in [1, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("test pool");
            for (name, f) in ALL {
                let mut c = vec![f32::NAN; m * n];
                pool.install(|| f(&a, &b, &mut c, m, n, k));
                check(name, &a, &b, &c, m, n, k);
            }
        }
    }

    #[test]
    #[should_panic(expected = "slice b (k×n) has length 5, expected 4")]
    fn wrong_length_panics_with_the_slice_name() {
        gemm_blocked(&[0.0; 6], &[0.0; 5], &mut [0.0; 6], 3, 2, 2);
    }
}
