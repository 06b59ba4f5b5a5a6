//! References for the row kernels: softmax, layernorm, rmsnorm and their fusion.
//!
//! Every row is independent, so a sample is a set of whole rows (first, last and random ones) and each
//! sampled row is checked completely. Reductions over `cols` elements in fp32 drift by about
//! `sqrt(cols)·eps` (more with fast exp/rsqrt on GPUs), hence the `(8 + sqrt(cols))·2^-24` scale.

use super::{EPS32, Plan, SAMPLE_OPS, pick};
use crate::catalog::KernelId;
use crate::problem::{NORM_EPS, Problem};

/// Relative tolerance of a reduction over `cols` elements.
fn row_rel_tol(cols: usize) -> f64 {
    2.0 * (8.0 + (cols as f64).sqrt()) * EPS32
}

/// Reference operations per element, for the full-or-sample decision.
fn ops_per_element(id: KernelId) -> f64 {
    match id {
        KernelId::Softmax => 8.0,
        KernelId::LayerNormRmsNormFused => 10.0,
        _ => 5.0,
    }
}

/// Mean and `1/sqrt(var + eps)` (biased variance, two passes in f64).
fn mean_rstd(row: impl Iterator<Item = f64> + Clone, cols: usize) -> (f64, f64) {
    let n = cols as f64;
    let mean = row.clone().sum::<f64>() / n;
    let var = row.map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    (mean, 1.0 / (var + NORM_EPS).sqrt())
}

/// Visits the reference of row `r`: `f(col, expected, tol)`.
fn visit_row(problem: &Problem, x: &[&[f32]], r: usize, f: &mut impl FnMut(usize, f64, f64)) {
    let cols = problem.uparam("cols");
    let row = &x[0][r * cols..(r + 1) * cols];
    let xs = row.iter().map(|&v| f64::from(v));
    let rel = row_rel_tol(cols);
    let vec = |i: usize, c: usize| f64::from(x[i][c]);
    match problem.id() {
        KernelId::Softmax => {
            let max = xs.clone().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = xs.clone().map(|v| (v - max).exp()).sum();
            for (c, v) in xs.enumerate() {
                let y = (v - max).exp() / sum;
                f(c, y, rel * y + f64::from(f32::MIN_POSITIVE));
            }
        }
        KernelId::LayerNorm => {
            let (mean, rstd) = mean_rstd(xs.clone(), cols);
            for (c, v) in xs.enumerate() {
                let xhat = (v - mean) * rstd;
                let (g, b) = (vec(1, c), vec(2, c));
                let y = xhat * g + b;
                // `+1`: the mean's own rounding, amplified by rstd, shifts every element alike.
                f(c, y, rel * (g.abs() * (xhat.abs() + 1.0) + b.abs()));
            }
        }
        KernelId::RmsNorm => {
            let ms = xs.clone().map(|v| v * v).sum::<f64>() / cols as f64;
            let rstd = 1.0 / (ms + NORM_EPS).sqrt();
            for (c, v) in xs.enumerate() {
                let y = v * rstd * vec(1, c);
                f(c, y, rel * y.abs() + f64::from(f32::MIN_POSITIVE));
            }
        }
        KernelId::LayerNormRmsNormFused => {
            let (mean, rstd) = mean_rstd(xs.clone(), cols);
            let mut z = Vec::with_capacity(cols);
            let mut z_err = Vec::with_capacity(cols);
            for (c, v) in xs.enumerate() {
                let xhat = (v - mean) * rstd;
                let (g1, b1) = (vec(1, c), vec(2, c));
                z.push(xhat * g1 + b1);
                z_err.push(g1.abs() * (xhat.abs() + 1.0) + b1.abs());
            }
            let ms = z.iter().map(|v| v * v).sum::<f64>() / cols as f64;
            let rstd2 = 1.0 / (ms + NORM_EPS).sqrt();
            for c in 0..cols {
                let g2 = vec(3, c);
                let y = z[c] * rstd2 * g2;
                let scale = y.abs() + g2.abs() * rstd2 * z_err[c];
                f(c, y, 2.0 * rel * scale + f64::from(f32::MIN_POSITIVE));
            }
        }
        _ => unreachable!("rows::visit_row called for {}", problem.kernel.name),
    }
}

/// Visits the reference of a row kernel; returns whether it sampled.
pub(super) fn check_rows(
    problem: &Problem,
    x: &[&[f32]],
    f: &mut impl FnMut(usize, f64, f64),
) -> bool {
    let (rows, cols) = (problem.uparam("rows"), problem.uparam("cols"));
    let row_ops = cols as f64 * ops_per_element(problem.id());
    let plan = Plan::for_cost(problem, row_ops * rows as f64);
    let sampled = plan.is_sampled();
    let chosen: Vec<usize> = match plan {
        Plan::Full => (0..rows).collect(),
        Plan::Sampled(mut rng) => {
            let count = ((SAMPLE_OPS / row_ops) as usize).max(2);
            pick(&mut rng, rows, count, &[0, rows - 1])
        }
    };
    for r in chosen {
        visit_row(problem, x, r, &mut |c, e, t| f(r * cols + c, e, t));
    }
    sampled
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn problem(kernel: &str, rows: i64, cols: i64) -> Problem {
        let params = BTreeMap::from([("rows".to_string(), rows), ("cols".to_string(), cols)]);
        Problem::new(kernel, "", &params, "f32", false).unwrap()
    }

    fn reference(p: &Problem, inputs: &[Vec<f32>]) -> Vec<f64> {
        let x: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();
        let mut out = vec![f64::NAN; p.output_len()];
        check_rows(p, &x, &mut |i, e, _| out[i] = e);
        out
    }

    #[test]
    fn softmax_rows_sum_to_one_and_order_is_kept() {
        let p = problem("softmax", 2, 3);
        let y = reference(&p, &[vec![0.0, 1.0, 2.0, 5.0, 5.0, 5.0]]);
        assert!((y[0] + y[1] + y[2] - 1.0).abs() < 1e-12);
        assert!(y[0] < y[1] && y[1] < y[2]);
        assert!(y[3..].iter().all(|v| (v - 1.0 / 3.0).abs() < 1e-12));
        let e = std::f64::consts::E;
        assert!((y[1] - e / (1.0 + e + e * e)).abs() < 1e-12);
    }

    #[test]
    fn layernorm_normalises_then_applies_gamma_and_beta() {
        let p = problem("layernorm", 1, 4);
        let y = reference(&p, &[vec![1.0, 2.0, 3.0, 4.0], vec![1.0; 4], vec![0.5; 4]]);
        // mean 2.5, variance 1.25.
        let rstd = 1.0 / (1.25f64 + 1e-5).sqrt();
        for (c, v) in [1.0, 2.0, 3.0, 4.0].iter().enumerate() {
            assert!((y[c] - ((v - 2.5) * rstd + 0.5)).abs() < 1e-12);
        }
    }

    #[test]
    fn rmsnorm_and_fused_agree_with_their_definitions() {
        let x = vec![3.0, -4.0];
        let p = problem("rmsnorm", 1, 2);
        let y = reference(&p, &[x.clone(), vec![2.0, 1.0]]);
        let rstd = 1.0 / (12.5f64 + 1e-5).sqrt();
        assert!((y[0] - 6.0 * rstd).abs() < 1e-12 && (y[1] + 4.0 * rstd).abs() < 1e-12);
        // Fused with gamma1 = 1, beta1 = 0 is rmsnorm of layernorm(x).
        let p = problem("layernorm_rmsnorm_fused", 1, 2);
        let y = reference(&p, &[x, vec![1.0; 2], vec![0.0; 2], vec![1.0; 2]]);
        let z = 3.5 / (12.25f64 + 1e-5).sqrt(); // |x - mean| / std for both elements
        let expected = z / (z * z + 1e-5).sqrt();
        assert!((y[0] - expected).abs() < 1e-12 && (y[1] + expected).abs() < 1e-12);
    }

    #[test]
    fn tolerance_grows_with_cols() {
        assert!(row_rel_tol(1 << 20) > 50.0 * row_rel_tol(1));
    }
}
