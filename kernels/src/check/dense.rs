//! References for the dot-product kernels, `gemm` and `conv2d`.
//!
//! Both accumulate `Σ a·b` in f64 alongside `Σ|a|·|b|`, the scale of the rounding error an fp32
//! accumulation can make, so the tolerance follows each element's own magnitude. Sampling picks a grid
//! of rows × columns (gemm) or whole output rows (conv2d), always including the first and last ones,
//! where edge-tile bugs show.

use super::{EPS16, EPS32, Plan, SAMPLE_OPS, pick};
use crate::problem::{ConvShape, Problem};
use crate::types::Dtype;

/// Tolerance of a length-`k` dot product with error scale `scale` stored in `dtype`.
fn dot_tol(dtype: Dtype, k: usize, scale: f64, reference: f64) -> f64 {
    let c = (4.0 * (k as f64).sqrt()).max(16.0);
    let (out_eps, floor) = match dtype {
        Dtype::F32 => (EPS32, 0.0),
        // fp16 output: relative rounding plus half the subnormal spacing (2^-25) near zero.
        Dtype::F16 => (EPS16, 1.0 / 33_554_432.0),
    };
    c * EPS32 * scale + out_eps * reference.abs() + floor
}

/// Visits gemm's reference; returns whether it sampled.
pub(super) fn gemm(problem: &Problem, x: &[&[f32]], f: &mut impl FnMut(usize, f64, f64)) -> bool {
    let (m, n, k) = (
        problem.uparam("m"),
        problem.uparam("n"),
        problem.uparam("k"),
    );
    let mut rng = match Plan::for_cost(problem, (m * n) as f64 * k as f64) {
        Plan::Full => {
            gemm_full(problem, x, f);
            return false;
        }
        Plan::Sampled(rng) => rng,
    };
    let (a, b) = (x[0], x[1]);
    let side = (SAMPLE_OPS / k as f64).sqrt().clamp(8.0, 128.0) as usize;
    let rows = pick(&mut rng, m, side, &[0, m - 1]);
    let cols = pick(&mut rng, n, side, &[0, n - 1]);
    // Gather the sampled columns of B once so the dot products read contiguous memory.
    let gathered: Vec<Vec<f64>> = cols
        .iter()
        .map(|&j| (0..k).map(|p| f64::from(b[p * n + j])).collect())
        .collect();
    for &i in &rows {
        let a_row = &a[i * k..(i + 1) * k];
        for (&j, col) in cols.iter().zip(&gathered) {
            let (mut acc, mut scale) = (0.0f64, 0.0f64);
            for (&av, &bv) in a_row.iter().zip(col) {
                let av = f64::from(av);
                acc += av * bv;
                scale += (av * bv).abs();
            }
            f(i * n + j, acc, dot_tol(problem.dtype, k, scale, acc));
        }
    }
    true
}

/// Every element of gemm's reference, row by row (i-p-j order so the inner loop vectorises).
pub(super) fn gemm_full(problem: &Problem, x: &[&[f32]], f: &mut impl FnMut(usize, f64, f64)) {
    let (m, n, k) = (
        problem.uparam("m"),
        problem.uparam("n"),
        problem.uparam("k"),
    );
    let (a, b) = (x[0], x[1]);
    let mut acc = vec![0.0f64; n];
    let mut scale = vec![0.0f64; n];
    for i in 0..m {
        acc.fill(0.0);
        scale.fill(0.0);
        for p in 0..k {
            let av = f64::from(a[i * k + p]);
            if av == 0.0 {
                continue;
            }
            let b_row = &b[p * n..(p + 1) * n];
            for ((c, s), &bv) in acc.iter_mut().zip(scale.iter_mut()).zip(b_row) {
                let prod = av * f64::from(bv);
                *c += prod;
                *s += prod.abs();
            }
        }
        for j in 0..n {
            f(
                i * n + j,
                acc[j],
                dot_tol(problem.dtype, k, scale[j], acc[j]),
            );
        }
    }
}

/// Accumulates output row `oy` of image `b`, filter `fi` into `acc` and `scale` (length `out_w`).
fn conv_row(
    s: &ConvShape,
    input: &[f32],
    weights: &[f32],
    (b, fi, oy): (usize, usize, usize),
    acc: &mut [f64],
    scale: &mut [f64],
) {
    acc.fill(0.0);
    scale.fill(0.0);
    let (h, w, r, stride, pad) = (
        s.height as i64,
        s.width as i64,
        s.ksize,
        s.stride as i64,
        s.pad as i64,
    );
    for c in 0..s.channels {
        let plane = &input[(b * s.channels + c) * s.height * s.width..][..s.height * s.width];
        for ky in 0..r {
            let iy = oy as i64 * stride + ky as i64 - pad;
            if iy < 0 || iy >= h {
                continue;
            }
            let in_row = &plane[iy as usize * s.width..][..s.width];
            for kx in 0..r {
                let wv = f64::from(weights[((fi * s.channels + c) * r + ky) * r + kx]);
                // Output columns whose input column ox·stride + kx - pad lies inside 0..w.
                let off = kx as i64 - pad;
                let first = if off >= 0 {
                    0
                } else {
                    (-off + stride - 1) / stride
                };
                let end = ((w - off + stride - 1) / stride).clamp(0, s.out_w as i64);
                for ox in first..end {
                    let prod = wv * f64::from(in_row[(ox * stride + off) as usize]);
                    acc[ox as usize] += prod;
                    scale[ox as usize] += prod.abs();
                }
            }
        }
    }
}

fn emit_conv_row(
    s: &ConvShape,
    (b, fi, oy): (usize, usize, usize),
    acc: &[f64],
    scale: &[f64],
    f: &mut impl FnMut(usize, f64, f64),
) {
    let k = s.channels * s.ksize * s.ksize;
    let base = ((b * s.filters + fi) * s.out_h + oy) * s.out_w;
    for ox in 0..s.out_w {
        f(
            base + ox,
            acc[ox],
            dot_tol(Dtype::F32, k, scale[ox], acc[ox]),
        );
    }
}

/// Visits conv2d's reference; returns whether it sampled.
pub(super) fn conv2d(problem: &Problem, x: &[&[f32]], f: &mut impl FnMut(usize, f64, f64)) -> bool {
    let s = problem.conv_shape();
    let row_ops = (s.out_w * s.channels * s.ksize * s.ksize) as f64;
    let total_rows = s.batch * s.filters * s.out_h;
    let mut rng = match Plan::for_cost(problem, row_ops * total_rows as f64) {
        Plan::Full => {
            conv2d_full(problem, x, f);
            return false;
        }
        Plan::Sampled(rng) => rng,
    };
    let count = ((SAMPLE_OPS / row_ops) as usize).max(4);
    // First and last output row of the first and last (image, filter): top and bottom padding.
    let must = [0, s.out_h - 1, total_rows - s.out_h, total_rows - 1];
    let mut acc = vec![0.0; s.out_w];
    let mut scale = vec![0.0; s.out_w];
    for t in pick(&mut rng, total_rows, count, &must) {
        let at = (
            t / (s.filters * s.out_h),
            (t / s.out_h) % s.filters,
            t % s.out_h,
        );
        conv_row(&s, x[0], x[1], at, &mut acc, &mut scale);
        emit_conv_row(&s, at, &acc, &scale, f);
    }
    true
}

/// Every element of conv2d's reference.
pub(super) fn conv2d_full(problem: &Problem, x: &[&[f32]], f: &mut impl FnMut(usize, f64, f64)) {
    let s = problem.conv_shape();
    let mut acc = vec![0.0; s.out_w];
    let mut scale = vec![0.0; s.out_w];
    for b in 0..s.batch {
        for fi in 0..s.filters {
            for oy in 0..s.out_h {
                conv_row(&s, x[0], x[1], (b, fi, oy), &mut acc, &mut scale);
                emit_conv_row(&s, (b, fi, oy), &acc, &scale, f);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn problem(kernel: &str, params: &[(&str, i64)], dtype: &str) -> Problem {
        let params: BTreeMap<String, i64> =
            params.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        Problem::new(kernel, "", &params, dtype, false).unwrap()
    }

    /// The full reference of a gemm or conv2d problem.
    fn collect(problem: &Problem, inputs: &[Vec<f32>]) -> Vec<f64> {
        let x: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();
        let mut out = vec![f64::NAN; problem.output_len()];
        let mut store = |i: usize, e: f64, _t: f64| out[i] = e;
        if problem.id() == crate::KernelId::Gemm {
            gemm_full(problem, &x, &mut store);
        } else {
            conv2d_full(problem, &x, &mut store);
        }
        out
    }

    #[test]
    fn gemm_reference_matches_a_hand_computed_product() {
        let p = problem("gemm", &[("m", 2), ("n", 2), ("k", 3)], "f32");
        let a = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = vec![1.0, 0.5, -1.0, 0.25, 2.0, 0.0];
        let c = collect(&p, &[a, b]);
        assert_eq!(c, vec![5.0, 1.0, 11.0, 3.25]);
    }

    #[test]
    fn conv_reference_matches_a_hand_computed_case() {
        // 1 image, 1 channel, 3×3 input, one 3×3 filter of ones, pad 1: each output is the sum of the
        // input's 3×3 neighbourhood (zeros outside).
        let p = problem(
            "conv2d",
            &[("channels", 1), ("height", 3), ("width", 3), ("filters", 1)],
            "f32",
        );
        let input: Vec<f32> = (1..=9).map(|v| v as f32).collect();
        let out = collect(&p, &[input, vec![1.0; 9]]);
        assert_eq!(out, vec![12., 21., 16., 27., 45., 33., 24., 39., 28.]);
        // Stride 2, no padding, 5×5 filter on a 5×5 input: one output, the sum of all inputs.
        let p = problem(
            "conv2d",
            &[
                ("channels", 1),
                ("height", 5),
                ("width", 6),
                ("filters", 1),
                ("ksize", 5),
                ("stride", 2),
                ("pad", 0),
            ],
            "f32",
        );
        assert_eq!((p.conv_shape().out_h, p.conv_shape().out_w), (1, 1));
        let input: Vec<f32> = (0..30).map(|v| v as f32).collect();
        let expected: f32 = (0..5)
            .flat_map(|y| (0..5).map(move |x| (y * 6 + x) as f32))
            .sum();
        let out = collect(&p, &[input, vec![1.0; 25]]);
        assert_eq!(out, vec![f64::from(expected)]);
    }

    #[test]
    fn f16_tolerance_is_looser_than_f32() {
        assert!(dot_tol(Dtype::F16, 256, 1.0, 4.0) > 100.0 * dot_tol(Dtype::F32, 256, 1.0, 4.0));
        assert!(dot_tol(Dtype::F16, 256, 0.0, 0.0) > 0.0);
        assert_eq!(dot_tol(Dtype::F32, 256, 0.0, 0.0), 0.0);
        // Grows with k beyond the floor of 16.
        assert!(dot_tol(Dtype::F32, 65536, 1.0, 0.0) > dot_tol(Dtype::F32, 16, 1.0, 0.0));
    }
}
