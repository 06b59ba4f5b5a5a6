//! Row-wise functions of a `rows×cols` matrix: `softmax`, `log_softmax`, `layernorm`, `rmsnorm` and
//! the fused layernorm→rmsnorm.
//!
//! Each row is independent (a reduction followed by a map), so rows are the unit of parallelism; tasks
//! take several rows when rows are short, so each task has at least `ROW_TASK_ELEMS` elements. A row
//! is read a few times (reduce, then map) while it sits in L1/L2, which costs far less than one extra
//! trip to memory.
//!
//! Sums use `blocked_sum`: 32 f32 lanes over blocks of 256 elements, block totals added in f64. The
//! lanes let LLVM vectorize, the blocks bound the f32 error to a handful of additions, and the f64
//! carry keeps long rows (10^6 columns) accurate. `layernorm` is two-pass (mean, then the squared
//! deviations); its mean is summed in f64 lanes and subtracted as a two-float value, so rows with a
//! large offset (mean 1000, spread 1) are normalised as accurately as centred ones.

use gpufleet_kernels::{NORM_EPS, RowKernel};
use rayon::prelude::*;

use super::elementwise::exp_approx;
use super::memory::sum_f64_serial;
use super::{check_len, checked_len, has_avx2_fma};

/// Fewest elements per rayon task; smaller matrices run on the calling thread.
const ROW_TASK_ELEMS: usize = 16 * 1024;
/// f32 lanes of [`blocked_sum`].
const LANES: usize = 32;
/// Elements per block of [`blocked_sum`] before its lanes are added into the f64 total.
const BLOCK: usize = 256;

/// Runs row kernel `kernel` on its inputs `x` (the rows, then its per-column vectors, in the
/// catalog's order) into `y`, with the catalog's epsilon.
pub fn run(kernel: RowKernel, x: &[&[f32]], y: &mut [f32], rows: usize, cols: usize) {
    let eps = NORM_EPS as f32;
    match kernel {
        RowKernel::Softmax => softmax(x[0], y, rows, cols),
        RowKernel::LogSoftmax => log_softmax(x[0], y, rows, cols),
        RowKernel::LayerNorm => layernorm(x[0], x[1], x[2], y, rows, cols, eps),
        RowKernel::RmsNorm => rmsnorm(x[0], x[1], y, rows, cols, eps),
        RowKernel::LayerNormRmsNormFused => {
            layernorm_rmsnorm_fused(x[0], x[1], x[2], x[3], y, rows, cols, eps)
        }
    }
}

/// Row-wise softmax, `y[r][j] = exp(x[r][j] - max_r) / Σ_j exp(x[r][j] - max_r)`.
///
/// A row holding NaN or +inf comes out all NaN, as in the exact formula.
///
/// # Panics
///
/// Panics if `x.len()` or `y.len()` is not `rows*cols`.
pub fn softmax(x: &[f32], y: &mut [f32], rows: usize, cols: usize) {
    check_rows("x", "y", x, y, rows, cols);
    let fma = has_avx2_fma();
    for_each_row(x, y, cols, |x, y| softmax_row(x, y, fma));
}

fma_dispatch! {
    /// One row of [`softmax`], dispatched on `fma`.
    fn softmax_row(x: &[f32], y: &mut [f32]) => softmax_row_impl::<FMA>
}

#[inline(always)]
fn softmax_row_impl<const FMA: bool>(x: &[f32], y: &mut [f32]) {
    let (_, sum) = exp_shifted::<FMA>(x, y);
    let inv = (1.0 / sum) as f32;
    for y in y.iter_mut() {
        *y *= inv;
    }
}

/// Row-wise log-softmax, `y[r][j] = x[r][j] - max_r - log Σ_j exp(x[r][j] - max_r)`.
///
/// A -inf element comes out -inf (the log of its zero share); a row holding NaN or +inf comes out
/// all NaN, as in the exact formula.
///
/// # Panics
///
/// Panics if `x.len()` or `y.len()` is not `rows*cols`.
pub fn log_softmax(x: &[f32], y: &mut [f32], rows: usize, cols: usize) {
    check_rows("x", "y", x, y, rows, cols);
    let fma = has_avx2_fma();
    for_each_row(x, y, cols, |x, y| log_softmax_row(x, y, fma));
}

fma_dispatch! {
    /// One row of [`log_softmax`], dispatched on `fma`.
    fn log_softmax_row(x: &[f32], y: &mut [f32]) => log_softmax_row_impl::<FMA>
}

#[inline(always)]
fn log_softmax_row_impl<const FMA: bool>(x: &[f32], y: &mut [f32]) {
    let (max, sum) = exp_shifted::<FMA>(x, y);
    let log_sum = sum.ln() as f32;
    for (y, &x) in y.iter_mut().zip(x) {
        *y = (x - max) - log_sum;
    }
}

/// Writes `exp(x - max)` into `y` and returns the row's maximum and the sum of what it wrote: the
/// reduction softmax and log_softmax share.
#[inline(always)]
fn exp_shifted<const FMA: bool>(x: &[f32], y: &mut [f32]) -> (f32, f64) {
    let max = row_max(x);
    for (y, &x) in y.iter_mut().zip(x) {
        *y = exp_approx::<FMA>(x - max);
    }
    (max, blocked_sum(y, |v| v))
}

/// Row-wise layer normalisation with biased variance:
/// `y = (x - mean) / sqrt(var + eps) * gamma + beta`, `gamma` and `beta` of length `cols`.
///
/// # Panics
///
/// Panics if `x.len()` or `y.len()` is not `rows*cols`, or `gamma`/`beta` is not `cols` long.
#[allow(clippy::too_many_arguments)]
pub fn layernorm(
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    y: &mut [f32],
    rows: usize,
    cols: usize,
    eps: f32,
) {
    normalize(Norm::Layer { gamma, beta }, x, y, (rows, cols), eps);
}

/// Row-wise RMS normalisation, `y = x / sqrt(mean(x²) + eps) * gamma`.
///
/// # Panics
///
/// Panics if `x.len()` or `y.len()` is not `rows*cols`, or `gamma` is not `cols` long.
pub fn rmsnorm(x: &[f32], gamma: &[f32], y: &mut [f32], rows: usize, cols: usize, eps: f32) {
    normalize(Norm::Rms { gamma }, x, y, (rows, cols), eps);
}

/// `y = rmsnorm(layernorm(x)·gamma1 + beta1)·gamma2`, both with the same `eps`, one task per row group
/// and the intermediate kept in the output row (no second trip through memory).
///
/// # Panics
///
/// Panics if `x.len()` or `y.len()` is not `rows*cols`, or `gamma1`, `beta1`, `gamma2` is not `cols`
/// long.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_rmsnorm_fused(
    x: &[f32],
    gamma1: &[f32],
    beta1: &[f32],
    gamma2: &[f32],
    y: &mut [f32],
    rows: usize,
    cols: usize,
    eps: f32,
) {
    let norm = Norm::LayerThenRms {
        gamma1,
        beta1,
        gamma2,
    };
    normalize(norm, x, y, (rows, cols), eps);
}

/// Checks the shapes (`x`, `y` and each of `norm`'s parameters) and normalises every row.
#[track_caller]
fn normalize(norm: Norm<'_>, x: &[f32], y: &mut [f32], (rows, cols): (usize, usize), eps: f32) {
    check_rows("x", "y", x, y, rows, cols);
    for (name, param) in norm.params() {
        check_len(name, param.len(), cols);
    }
    let fma = has_avx2_fma();
    for_each_row(x, y, cols, |x, y| norm_row(norm, x, y, eps, fma));
}

/// Which normalisation a row gets, with its parameters (each `cols` long).
#[derive(Clone, Copy)]
enum Norm<'a> {
    Layer {
        gamma: &'a [f32],
        beta: &'a [f32],
    },
    Rms {
        gamma: &'a [f32],
    },
    LayerThenRms {
        gamma1: &'a [f32],
        beta1: &'a [f32],
        gamma2: &'a [f32],
    },
}

impl Norm<'_> {
    /// The per-column parameters with their names, in argument order.
    fn params(&self) -> Vec<(&'static str, &[f32])> {
        match *self {
            Norm::Layer { gamma, beta } => vec![("gamma", gamma), ("beta", beta)],
            Norm::Rms { gamma } => vec![("gamma", gamma)],
            Norm::LayerThenRms {
                gamma1,
                beta1,
                gamma2,
            } => vec![("gamma1", gamma1), ("beta1", beta1), ("gamma2", gamma2)],
        }
    }
}

fma_dispatch! {
    /// One row of a normalisation, dispatched to the AVX2 copy when `fma` is set (the reductions
    /// and maps are short in-cache loops, where 8 lanes instead of 4 show).
    fn norm_row(norm: Norm<'_>, x: &[f32], y: &mut [f32], eps: f32) => norm_row_impl
}

#[inline(always)]
fn norm_row_impl(norm: Norm<'_>, x: &[f32], y: &mut [f32], eps: f32) {
    match norm {
        Norm::Layer { gamma, beta } => layernorm_row(x, gamma, beta, y, eps),
        Norm::Rms { gamma } => rmsnorm_row(x, gamma, y, eps),
        Norm::LayerThenRms {
            gamma1,
            beta1,
            gamma2,
        } => {
            layernorm_row(x, gamma1, beta1, y, eps);
            rms_scale_in_place(y, gamma2, eps);
        }
    }
}

#[inline(always)]
fn layernorm_row(x: &[f32], gamma: &[f32], beta: &[f32], y: &mut [f32], eps: f32) {
    let n = x.len() as f64;
    // The mean in f64 lanes: with f32 lanes a large common offset (values near 1000) would cost
    // several ulp of the offset, which is most of the deviations' precision.
    let mean = sum_f64_serial(x) / n;
    // mean = mean_hi + mean_lo exactly enough: x - mean_hi is exact for x near the mean (Sterbenz), so
    // a large common offset does not eat the low bits of the deviations.
    let mean_hi = mean as f32;
    let mean_lo = (mean - f64::from(mean_hi)) as f32;
    let var = blocked_sum(x, |v| {
        let d = (v - mean_hi) - mean_lo;
        d * d
    }) / n;
    let rstd = (1.0 / (var + f64::from(eps)).sqrt()) as f32;
    for (((y, &x), &g), &b) in y.iter_mut().zip(x).zip(gamma).zip(beta) {
        *y = ((x - mean_hi) - mean_lo) * rstd * g + b;
    }
}

#[inline(always)]
fn rmsnorm_row(x: &[f32], gamma: &[f32], y: &mut [f32], eps: f32) {
    let scale = rms_inverse(x, eps);
    for ((y, &x), &g) in y.iter_mut().zip(x).zip(gamma) {
        *y = x * scale * g;
    }
}

#[inline(always)]
fn rms_scale_in_place(y: &mut [f32], gamma: &[f32], eps: f32) {
    let scale = rms_inverse(y, eps);
    for (y, &g) in y.iter_mut().zip(gamma) {
        *y = *y * scale * g;
    }
}

/// `1 / sqrt(mean(x²) + eps)`.
#[inline(always)]
fn rms_inverse(x: &[f32], eps: f32) -> f32 {
    let mean_square = blocked_sum(x, |v| v * v) / x.len() as f64;
    (1.0 / (mean_square + f64::from(eps)).sqrt()) as f32
}

/// Largest element of `x` (NaN elements are skipped; -inf for an empty slice).
#[inline(always)]
pub(super) fn row_max(x: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (m, &v) in lanes.iter_mut().zip(chunk) {
            *m = if v > *m { v } else { *m };
        }
    }
    lanes
        .iter()
        .chain(chunks.remainder())
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m })
}

/// `Σ f(x[i])` with f32 lanes inside blocks of [`BLOCK`] and an f64 total across blocks.
#[inline(always)]
pub(super) fn blocked_sum(x: &[f32], f: impl Fn(f32) -> f32) -> f64 {
    let mut total = 0.0f64;
    for block in x.chunks(BLOCK) {
        let mut lanes = [0.0f32; LANES];
        let mut chunks = block.chunks_exact(LANES);
        for chunk in &mut chunks {
            for (acc, &v) in lanes.iter_mut().zip(chunk) {
                *acc += f(v);
            }
        }
        let tail: f32 = chunks.remainder().iter().map(|&v| f(v)).sum();
        total += lanes.iter().map(|&v| f64::from(v)).sum::<f64>() + f64::from(tail);
    }
    total
}

#[track_caller]
fn check_rows(x_name: &str, y_name: &str, x: &[f32], y: &[f32], rows: usize, cols: usize) {
    let len = checked_len("rows×cols", rows, cols);
    check_len(x_name, x.len(), len);
    check_len(y_name, y.len(), len);
}

/// Runs `body(x_row, y_row)` for every row, in parallel groups of rows unless the matrix is small.
fn for_each_row(x: &[f32], y: &mut [f32], cols: usize, body: impl Fn(&[f32], &mut [f32]) + Sync) {
    if cols == 0 || y.is_empty() {
        return;
    }
    if y.len() <= ROW_TASK_ELEMS {
        y.chunks_mut(cols)
            .zip(x.chunks(cols))
            .for_each(|(y, x)| body(x, y));
    } else {
        y.par_chunks_mut(cols)
            .zip(x.par_chunks(cols))
            .with_min_len((ROW_TASK_ELEMS / cols).max(1))
            .for_each(|(y, x)| body(x, y));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shapes: the awkward one, single row/column, zero rows, and a parallel one with ragged blocks.
    const SHAPES: [(usize, usize); 7] = [
        (3, 1000),
        (1, 1),
        (5, 1),
        (0, 10),
        (1, 257),
        (67, 513),
        (2, 100_003),
    ];

    use crate::backend::cpu::ops::test_values as data;

    fn mean_var(row: &[f32]) -> (f64, f64) {
        let n = row.len() as f64;
        let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let var = row
            .iter()
            .map(|&v| (f64::from(v) - mean).powi(2))
            .sum::<f64>()
            / n;
        (mean, var)
    }

    fn layernorm_ref(row: &[f32], gamma: &[f32], beta: &[f32], eps: f32) -> Vec<f64> {
        let (mean, var) = mean_var(row);
        let rstd = 1.0 / (var + f64::from(eps)).sqrt();
        row.iter()
            .zip(gamma.iter().zip(beta))
            .map(|(&v, (&g, &b))| (f64::from(v) - mean) * rstd * f64::from(g) + f64::from(b))
            .collect()
    }

    fn rmsnorm_ref(row: &[f64], gamma: &[f32], eps: f32) -> Vec<f64> {
        let ms = row.iter().map(|v| v * v).sum::<f64>() / row.len() as f64;
        let scale = 1.0 / (ms + f64::from(eps)).sqrt();
        row.iter()
            .zip(gamma)
            .map(|(v, &g)| v * scale * f64::from(g))
            .collect()
    }

    /// |got - exact| <= tol · scale for every element, with a message naming the element.
    fn assert_close(what: &str, got: &[f32], exact: &[f64], tol: f64, scale: &[f64]) {
        assert_eq!(got.len(), exact.len(), "{what}: length");
        for (i, ((&g, &e), &s)) in got.iter().zip(exact).zip(scale).enumerate() {
            assert!(
                (f64::from(g) - e).abs() <= tol * s,
                "{what}: element {i} = {g}, expected {e} (tol {})",
                tol * s
            );
        }
    }

    fn check_softmax(what: &str, x: &[f32], y: &[f32], rows: usize, cols: usize) {
        for r in 0..rows {
            let row = &x[r * cols..(r + 1) * cols];
            let max = row
                .iter()
                .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
            let e: Vec<f64> = row.iter().map(|&v| (f64::from(v) - max).exp()).collect();
            let sum: f64 = e.iter().sum();
            let exact: Vec<f64> = e.iter().map(|v| v / sum).collect();
            // Relative, plus the rounding of the f32 difference x - max (half an ulp of |x - max|
            // moves exp by that much relative), with an absolute floor where exp underflowed.
            let scale: Vec<f64> = row
                .iter()
                .zip(&exact)
                .map(|(&v, &e)| {
                    let shift_ulps = (max - f64::from(v)) * f64::from(f32::EPSILON) / 2e-6;
                    (e * (1.0 + shift_ulps)).max(1e-37)
                })
                .collect();
            let got = &y[r * cols..(r + 1) * cols];
            let what = format!("{what} {rows}x{cols} row {r}");
            assert_close(&what, got, &exact, 2e-6, &scale);
        }
    }

    #[test]
    fn softmax_matches_reference() {
        for (rows, cols) in SHAPES {
            let x = data(rows * cols, 1, 0.0, 30.0);
            let mut y = vec![f32::NAN; rows * cols];
            softmax(&x, &mut y, rows, cols);
            check_softmax("softmax", &x, &y, rows, cols);
            // The copy without FMA, which the dispatch skips on AVX2 machines.
            let mut y = vec![f32::NAN; rows * cols];
            if cols > 0 {
                for (y, x) in y.chunks_mut(cols).zip(x.chunks(cols)) {
                    softmax_row_impl::<false>(x, y);
                }
            }
            check_softmax("softmax baseline", &x, &y, rows, cols);
        }
    }

    #[test]
    fn softmax_edge_rows() {
        // Equal values, a huge spread, -inf entries (masking), a NaN row.
        let x = [
            5.0,
            5.0,
            5.0,
            5.0,
            1000.0,
            0.0,
            -1000.0,
            999.0,
            f32::NEG_INFINITY,
            0.0,
            f32::NEG_INFINITY,
            0.0,
            1.0,
            f32::NAN,
            2.0,
            3.0,
        ];
        let mut y = [0.0; 16];
        softmax(&x, &mut y, 4, 4);
        assert_eq!(&y[..4], &[0.25; 4]);
        let e = (-1.0f64).exp();
        assert!((f64::from(y[4]) - 1.0 / (1.0 + e)).abs() < 1e-6, "{y:?}");
        assert!((f64::from(y[7]) - e / (1.0 + e)).abs() < 1e-6, "{y:?}");
        assert!(y[5] == 0.0 && y[6] == 0.0, "{y:?}");
        assert_eq!(&y[8..12], &[0.0, 0.5, 0.0, 0.5]);
        assert!(y[12..].iter().all(|v| v.is_nan()), "{y:?}");
    }

    fn check_log_softmax(what: &str, x: &[f32], y: &[f32], rows: usize, cols: usize) {
        for r in 0..rows {
            let row = &x[r * cols..(r + 1) * cols];
            let max = row
                .iter()
                .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
            let sum: f64 = row.iter().map(|&v| (f64::from(v) - max).exp()).sum();
            let exact: Vec<f64> = row
                .iter()
                .map(|&v| (f64::from(v) - max) - sum.ln())
                .collect();
            // The sum's relative error, absolute after the log, and two f32 roundings of |y|.
            let scale: Vec<f64> = exact.iter().map(|v| v.abs() + 1.0).collect();
            let got = &y[r * cols..(r + 1) * cols];
            let what = format!("{what} {rows}x{cols} row {r}");
            assert_close(&what, got, &exact, 1e-6, &scale);
        }
    }

    #[test]
    fn log_softmax_matches_reference() {
        for (rows, cols) in SHAPES {
            let x = data(rows * cols, 1, 0.0, 30.0);
            let mut y = vec![f32::NAN; rows * cols];
            log_softmax(&x, &mut y, rows, cols);
            check_log_softmax("log_softmax", &x, &y, rows, cols);
            // The copy without FMA, which the dispatch skips on AVX2 machines.
            let mut y = vec![f32::NAN; rows * cols];
            if cols > 0 {
                for (y, x) in y.chunks_mut(cols).zip(x.chunks(cols)) {
                    log_softmax_row_impl::<false>(x, y);
                }
            }
            check_log_softmax("log_softmax baseline", &x, &y, rows, cols);
        }
    }

    #[test]
    fn log_softmax_edge_rows() {
        // Equal values, -inf entries (masking), a NaN row.
        let inf = f32::INFINITY;
        let x = [5.0, 5.0, -inf, 0.0, -inf, 0.0, 1.0, f32::NAN, 2.0];
        let mut y = [0.0; 9];
        log_softmax(&x, &mut y, 3, 3);
        let ln2 = std::f32::consts::LN_2;
        assert_eq!(&y[..6], &[-ln2, -ln2, -inf, -ln2, -inf, -ln2], "{y:?}");
        assert!(y[6..].iter().all(|v| v.is_nan()), "{y:?}");
    }

    #[test]
    fn layernorm_matches_reference_even_with_a_large_offset() {
        for offset in [0.0, 1000.0] {
            for (rows, cols) in SHAPES {
                let x = data(rows * cols, 2, offset, 1.0);
                let gamma = data(cols, 3, 1.0, 0.5);
                let beta = data(cols, 4, 0.0, 0.5);
                let mut y = vec![f32::NAN; rows * cols];
                layernorm(&x, &gamma, &beta, &mut y, rows, cols, 1e-5);
                for r in 0..rows {
                    let row = &x[r * cols..(r + 1) * cols];
                    let exact = layernorm_ref(row, &gamma, &beta, 1e-5);
                    let (mean, var) = mean_var(row);
                    let rstd = 1.0 / (var + 1e-5).sqrt();
                    let scale: Vec<f64> = row
                        .iter()
                        .zip(gamma.iter().zip(&beta))
                        .map(|(&v, (&g, &b))| {
                            ((f64::from(v) - mean).abs() * rstd + 1.0) * f64::from(g).abs()
                                + f64::from(b).abs()
                        })
                        .collect();
                    let got = &y[r * cols..(r + 1) * cols];
                    let what = format!("layernorm offset={offset} {rows}x{cols} row {r}");
                    assert_close(&what, got, &exact, 2e-6, &scale);
                }
            }
        }
    }

    #[test]
    fn layernorm_of_a_constant_row_is_beta() {
        let mut y = [f32::NAN; 3];
        layernorm(&[7.0; 3], &[2.0; 3], &[0.5, -1.0, 3.0], &mut y, 1, 3, 1e-5);
        assert_eq!(y, [0.5, -1.0, 3.0]);
    }

    #[test]
    fn rmsnorm_matches_reference() {
        for (rows, cols) in SHAPES {
            let x = data(rows * cols, 5, 0.5, 2.0);
            let gamma = data(cols, 6, 1.0, 0.5);
            let mut y = vec![f32::NAN; rows * cols];
            rmsnorm(&x, &gamma, &mut y, rows, cols, 1e-6);
            for r in 0..rows {
                let row: Vec<f64> = x[r * cols..(r + 1) * cols]
                    .iter()
                    .map(|&v| f64::from(v))
                    .collect();
                let exact = rmsnorm_ref(&row, &gamma, 1e-6);
                let scale: Vec<f64> = exact.iter().map(|v| v.abs().max(1e-30)).collect();
                let got = &y[r * cols..(r + 1) * cols];
                assert_close(
                    &format!("rmsnorm {rows}x{cols} row {r}"),
                    got,
                    &exact,
                    1e-6,
                    &scale,
                );
            }
        }
    }

    #[test]
    fn fused_matches_the_two_references_composed() {
        for (rows, cols) in SHAPES {
            let x = data(rows * cols, 7, 3.0, 2.0);
            let gamma1 = data(cols, 8, 1.0, 0.5);
            let beta1 = data(cols, 9, 0.0, 0.5);
            let gamma2 = data(cols, 10, 1.0, 0.5);
            let mut y = vec![f32::NAN; rows * cols];
            layernorm_rmsnorm_fused(&x, &gamma1, &beta1, &gamma2, &mut y, rows, cols, 1e-5);
            for r in 0..rows {
                let row = &x[r * cols..(r + 1) * cols];
                let mid = layernorm_ref(row, &gamma1, &beta1, 1e-5);
                let exact = rmsnorm_ref(&mid, &gamma2, 1e-5);
                // The intermediate is rounded to f32 once, so errors scale with |mid| as well.
                let ms = (mid.iter().map(|v| v * v).sum::<f64>() / cols as f64 + 1e-5).sqrt();
                let scale: Vec<f64> = gamma2
                    .iter()
                    .map(|&g| f64::from(g).abs() * (1.0 + 4.0 / ms))
                    .collect();
                let got = &y[r * cols..(r + 1) * cols];
                assert_close(
                    &format!("fused {rows}x{cols} row {r}"),
                    got,
                    &exact,
                    2e-6,
                    &scale,
                );
            }
        }
    }

    #[test]
    fn baseline_norm_copy_is_bit_identical_to_the_dispatched_one() {
        // No fused multiply-add in the norms, and f32 addition order is fixed by the source, so the
        // copy compiled without AVX2 must give exactly the same bits.
        let (rows, cols) = (5, 1000);
        let x = data(rows * cols, 11, 2.0, 3.0);
        let (g1, b1, g2) = (
            data(cols, 12, 1.0, 0.5),
            data(cols, 13, 0.0, 0.5),
            data(cols, 14, 1.0, 0.5),
        );
        let norms = [
            Norm::Layer {
                gamma: &g1,
                beta: &b1,
            },
            Norm::Rms { gamma: &g2 },
            Norm::LayerThenRms {
                gamma1: &g1,
                beta1: &b1,
                gamma2: &g2,
            },
        ];
        for (i, norm) in norms.into_iter().enumerate() {
            let mut dispatched = vec![f32::NAN; rows * cols];
            let mut baseline = vec![f32::NAN; rows * cols];
            for_each_row(&x, &mut dispatched, cols, |x, y| {
                norm_row(norm, x, y, 1e-5, has_avx2_fma())
            });
            for_each_row(&x, &mut baseline, cols, |x, y| {
                norm_row(norm, x, y, 1e-5, false)
            });
            assert!(dispatched.iter().all(|v| v.is_finite()), "norm {i}");
            let same = dispatched
                .iter()
                .zip(&baseline)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "norm {i}: baseline and dispatched copies differ");
        }
    }

    #[test]
    fn blocked_sum_stays_accurate_on_a_long_row() {
        // 4M copies of 0.1f32: a plain f32 running sum drifts by percent here.
        let x = vec![0.1f32; 1 << 22];
        let exact = f64::from(0.1f32) * (1u64 << 22) as f64;
        let got = blocked_sum(&x, |v| v);
        assert!((got - exact).abs() <= 1e-7 * exact, "{got} vs {exact}");
    }

    #[test]
    #[should_panic(expected = "slice beta has length 4, expected 5")]
    fn wrong_length_panics_with_the_slice_name() {
        layernorm(&[0.0; 10], &[1.0; 5], &[0.0; 4], &mut [0.0; 10], 2, 5, 1e-5);
    }
}
