//! The dot-product kernels, `gemm` and `conv2d`: their catalog entries, conv2d's geometry and
//! window rule, FLOP and byte counts, and their f64 references.
//!
//! Both references accumulate `Σ a·b` in f64 alongside `Σ|a|·|b|`, the scale of the rounding error
//! an fp32 accumulation can make, so the tolerance follows each element's own magnitude. Sampling
//! picks a grid of rows × columns (gemm) or whole output rows (conv2d), always including the first
//! and last ones, where edge-tile bugs show.

use super::{
    EVERY_BACKEND, F32_ONLY, Family, KernelDef, KernelId, ParamDef, Problem, Visit, join, nchw, p,
    stride,
};
use crate::check::harness::{EPS16, EPS32, Plan, SAMPLE_OPS, pick};
use crate::types::{Dtype, MetricKind};

/// The two dot-product kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dense {
    /// [`KernelId::Gemm`].
    Gemm,
    /// [`KernelId::Conv2d`].
    Conv2d,
}

const GEMM_PARAMS: &[ParamDef] = &[
    p("m", 256, 1, 65536, "rows of A and C"),
    p("n", 256, 1, 65536, "columns of B and C"),
    p("k", 256, 1, 65536, "columns of A, rows of B"),
];
const CONV_PARAMS: &[ParamDef] = &join::<4, 4, 8>(
    nchw(
        4096,
        (16, "input channels (C)"),
        (64, 16384),
        ["input height (H)", "input width (W)"],
    ),
    [
        p("filters", 32, 1, 4096, "output channels (K)"),
        p("ksize", 3, 3, 5, "square filter size, 3 or 5"),
        stride(1),
        p("pad", 1, 0, 3, "zero padding on each side"),
    ],
);

/// `gemm`'s catalog entry.
pub(super) const GEMM: KernelDef = KernelDef {
    id: KernelId::Gemm,
    name: "gemm",
    description: "dense matrix multiply C = A·B (row-major, m×k times k×n)",
    variants: &["naive", "tiled", "blocked"],
    default_variant: "blocked",
    params: GEMM_PARAMS,
    dtypes: &[Dtype::F32, Dtype::F16],
    metric: MetricKind::Gflops,
    host_only: false,
    debug: false,
    backends: EVERY_BACKEND,
};

/// `conv2d`'s catalog entry.
pub(super) const CONV2D: KernelDef = KernelDef {
    id: KernelId::Conv2d,
    name: "conv2d",
    description: "2-D convolution, NCHW input, KCRS weights, zero padding",
    variants: &["direct", "im2col"],
    default_variant: "im2col",
    params: CONV_PARAMS,
    dtypes: F32_ONLY,
    metric: MetricKind::Gflops,
    host_only: false,
    debug: false,
    backends: EVERY_BACKEND,
};

/// Output geometry of a conv2d problem, shared by sizes, inputs, the reference and the backends'
/// launch arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvShape {
    /// Images in the batch.
    pub batch: usize,
    /// Input channels.
    pub channels: usize,
    /// Input height.
    pub height: usize,
    /// Input width.
    pub width: usize,
    /// Output channels (filters).
    pub filters: usize,
    /// Filter side.
    pub ksize: usize,
    /// Stride in both directions.
    pub stride: usize,
    /// Zero padding on every side.
    pub pad: usize,
    /// Output height.
    pub out_h: usize,
    /// Output width.
    pub out_w: usize,
}

impl ConvShape {
    /// Elements of the input tensor (NCHW).
    pub fn input_len(&self) -> usize {
        self.batch * self.channels * self.height * self.width
    }
    /// Elements of the filter tensor.
    pub fn weights_len(&self) -> usize {
        self.filters * self.channels * self.ksize * self.ksize
    }
    /// Elements of the output tensor.
    pub fn output_len(&self) -> usize {
        self.batch * self.filters * self.out_h * self.out_w
    }
}

impl Problem {
    /// The geometry of a conv2d problem (meaningless for other kernels).
    pub fn conv_shape(&self) -> ConvShape {
        let (h, w, r, s, pad) = (
            self.uparam("height"),
            self.uparam("width"),
            self.uparam("ksize"),
            self.uparam("stride"),
            self.uparam("pad"),
        );
        ConvShape {
            batch: self.uparam("batch"),
            channels: self.uparam("channels"),
            height: h,
            width: w,
            filters: self.uparam("filters"),
            ksize: r,
            stride: s,
            pad,
            out_h: (h + 2 * pad).saturating_sub(r) / s + 1,
            out_w: (w + 2 * pad).saturating_sub(r) / s + 1,
        }
    }
}

impl Family for Dense {
    fn check_params(&self, p: &Problem) -> Result<(), String> {
        match self {
            Dense::Gemm => Ok(()),
            Dense::Conv2d => {
                let r = p.param("ksize");
                if r != 3 && r != 5 {
                    return Err(format!("ksize={r} must be 3 or 5"));
                }
                p.window_fits()
            }
        }
    }

    fn flops(&self, p: &Problem) -> f64 {
        match self {
            Dense::Gemm => 2.0 * p.fparam("m") * p.fparam("n") * p.fparam("k"),
            Dense::Conv2d => {
                let c = p.conv_shape();
                2.0 * (c.batch * c.filters * c.out_h * c.out_w) as f64
                    * (c.channels * c.ksize * c.ksize) as f64
            }
        }
    }

    fn bytes(&self, p: &Problem) -> f64 {
        match self {
            Dense::Gemm => {
                let (m, n, k) = (p.fparam("m"), p.fparam("n"), p.fparam("k"));
                p.dtype.bytes_per_element() * (m * k + k * n + m * n)
            }
            Dense::Conv2d => {
                let c = p.conv_shape();
                4.0 * (c.input_len() + c.weights_len() + c.output_len()) as f64
            }
        }
    }

    fn input_lens(&self, p: &Problem) -> Vec<u128> {
        let w = |name| p.wparam(name);
        match self {
            Dense::Gemm => vec![w("m") * w("k"), w("k") * w("n")],
            Dense::Conv2d => vec![
                w("batch") * w("channels") * w("height") * w("width"),
                w("filters") * w("channels") * w("ksize") * w("ksize"),
            ],
        }
    }

    fn output_len(&self, p: &Problem) -> u128 {
        match self {
            Dense::Gemm => p.wparam("m") * p.wparam("n"),
            Dense::Conv2d => {
                let c = p.conv_shape();
                (c.batch as u128) * (c.filters as u128) * (c.out_h as u128) * (c.out_w as u128)
            }
        }
    }

    fn output_dims(&self, p: &Problem) -> Vec<usize> {
        match self {
            Dense::Gemm => vec![p.uparam("m"), p.uparam("n")],
            Dense::Conv2d => {
                let c = p.conv_shape();
                vec![c.batch, c.filters, c.out_h, c.out_w]
            }
        }
    }

    fn visit(&self, p: &Problem, x: &[&[f32]], f: Visit<'_>) -> Result<bool, String> {
        Ok(match self {
            Dense::Gemm => gemm(p, x, f),
            Dense::Conv2d => conv2d(p, x, f),
        })
    }

    #[cfg(test)]
    fn reference(&self, p: &Problem, inputs: &[crate::types::Buffer]) -> crate::types::Buffer {
        let x: Vec<&[f32]> = inputs
            .iter()
            .filter_map(crate::types::Buffer::as_f32)
            .collect();
        let mut out = vec![f32::NAN; p.output_len()];
        let mut store = |i: usize, e: f64, _t: f64| out[i] = e as f32;
        match self {
            Dense::Gemm => gemm_full(p, &x, &mut store),
            Dense::Conv2d => conv2d_full(p, &x, &mut store),
        }
        crate::types::Buffer::F32(out)
    }
}

/// Tolerance of a length-`k` dot product with error scale `scale` stored in `dtype`.
fn dot_tol(dtype: Dtype, k: usize, scale: f64, reference: f64) -> f64 {
    let c = (4.0 * (k as f64).sqrt()).max(16.0);
    let (out_eps, floor) = match dtype {
        // Quantized weights keep f32 results.
        Dtype::F32 | Dtype::Q8_0 | Dtype::Q4_0 => (EPS32, 0.0),
        // fp16 output: relative rounding plus half the subnormal spacing (2^-25) near zero.
        Dtype::F16 => (EPS16, 1.0 / 33_554_432.0),
    };
    c * EPS32 * scale + out_eps * reference.abs() + floor
}

/// Visits gemm's reference; returns whether it sampled.
fn gemm(problem: &Problem, x: &[&[f32]], f: Visit<'_>) -> bool {
    let (m, n, k) = (
        problem.uparam("m"),
        problem.uparam("n"),
        problem.uparam("k"),
    );
    let mut rng = match Plan::for_cost(&problem.spec_key_prefix(), (m * n) as f64 * k as f64) {
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
fn gemm_full(problem: &Problem, x: &[&[f32]], f: Visit<'_>) {
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
    f: Visit<'_>,
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
fn conv2d(problem: &Problem, x: &[&[f32]], f: Visit<'_>) -> bool {
    let s = problem.conv_shape();
    let row_ops = (s.out_w * s.channels * s.ksize * s.ksize) as f64;
    let total_rows = s.batch * s.filters * s.out_h;
    let mut rng = match Plan::for_cost(&problem.spec_key_prefix(), row_ops * total_rows as f64) {
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
fn conv2d_full(problem: &Problem, x: &[&[f32]], f: Visit<'_>) {
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
        if problem.id() == KernelId::Gemm {
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
