//! The row kernels: softmax, log_softmax, layernorm, rmsnorm and their fusion, each a reduction then
//! a map over every row of a `rows×cols` matrix. One table entry per kernel holds its catalog entry,
//! device entry-point stem, inputs (the rows, then per-column vectors) and their value sets, FLOPs
//! per element, epsilon and how its wide rows split; `visit_row` is the f64 reference of each.
//!
//! Every row is independent, so a sample is a set of whole rows (first, last and random ones) and each
//! sampled row is checked completely. Reductions over `cols` elements in fp32 drift by about
//! `sqrt(cols)·eps` (more with fast exp/rsqrt on GPUs), hence the `(8 + sqrt(cols))·2^-24` scale.

use super::{Family, KernelDef, KernelId, ParamDef, Problem, Visit, default_variant_def, p};
use crate::check::harness::{EPS32, Plan, SAMPLE_OPS, pick};
use crate::inputs::{GAMMA, UNIT, ValueSet, WIDE, seeded};
use crate::types::{Buffer, MetricKind};

/// Epsilon of the layer/RMS normalisations.
pub const NORM_EPS: f64 = 1e-5;

/// The row kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RowKernel {
    /// `softmax`: row-wise softmax.
    Softmax,
    /// `log_softmax`: row-wise log-softmax, x − max − log Σ exp(x − max).
    LogSoftmax,
    /// `layernorm`: row-wise layer normalisation with gamma and beta.
    LayerNorm,
    /// `rmsnorm`: row-wise RMS normalisation with gamma.
    RmsNorm,
    /// `layernorm_rmsnorm_fused`: rmsnorm(layernorm(x)·g1 + b1)·g2.
    LayerNormRmsNormFused,
}

/// The two partials per chunk a split row's statistics launch writes, which the apply launch
/// merges (see `split_stats` in the device sources).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitStats {
    /// softmax and log_softmax: the chunk's maximum and Σ exp(x − max).
    MaxSumExp,
    /// layernorm: the chunk's mean and Σ (x − mean)².
    MeanSquares,
}

/// One row kernel's definition.
pub(super) struct Entry {
    kernel: RowKernel,
    /// Its catalog entry.
    pub(super) def: KernelDef,
    /// Device entry-point stem: `<stem>_rows` in OpenCL C and HIP, the shader `<stem>` in Vulkan.
    stem: &'static str,
    /// Values of each input: the rows, then the per-column vectors (gamma, beta, …).
    values: &'static [ValueSet],
    /// FLOPs per element.
    flops: f64,
    /// Reference operations per element, for the full-or-sample decision.
    cost: f64,
    /// Whether it normalises (takes [`NORM_EPS`]).
    eps: bool,
    /// How a few wide rows split over several groups: `None` for kernels whose one-group
    /// version is as fast (rmsnorm reads a row twice either way and measured no faster split; the
    /// fused kernel has three dependent reductions).
    split: Option<SplitStats>,
}

const ROW_PARAMS: &[ParamDef] = &[
    p("rows", 256, 1, 1 << 24, "independent rows"),
    p(
        "cols",
        1024,
        1,
        1 << 20,
        "elements per row (the reduced dimension)",
    ),
];

const fn row(kernel: RowKernel, name: &'static str, description: &'static str) -> KernelDef {
    default_variant_def(
        KernelId::Rows(kernel),
        name,
        description,
        ROW_PARAMS,
        MetricKind::Gbps,
    )
}

/// Every row kernel, in display order.
pub(super) static TABLE: [Entry; 5] = [
    Entry {
        kernel: RowKernel::Softmax,
        def: row(RowKernel::Softmax, "softmax", "row-wise softmax"),
        stem: "softmax",
        values: &[WIDE],
        flops: 5.0,
        cost: 8.0,
        eps: false,
        split: Some(SplitStats::MaxSumExp),
    },
    Entry {
        kernel: RowKernel::LogSoftmax,
        def: row(
            RowKernel::LogSoftmax,
            "log_softmax",
            "row-wise log-softmax y = x - max - log(Σ exp(x - max))",
        ),
        stem: "log_softmax",
        values: &[WIDE],
        flops: 5.0,
        cost: 8.0,
        eps: false,
        split: Some(SplitStats::MaxSumExp),
    },
    Entry {
        kernel: RowKernel::LayerNorm,
        def: row(
            RowKernel::LayerNorm,
            "layernorm",
            "row-wise layer normalisation y = (x-mean)/sqrt(var+1e-5)·gamma + beta",
        ),
        stem: "layernorm",
        values: &[UNIT, GAMMA, UNIT],
        flops: 8.0,
        cost: 5.0,
        eps: true,
        split: Some(SplitStats::MeanSquares),
    },
    Entry {
        kernel: RowKernel::RmsNorm,
        def: row(
            RowKernel::RmsNorm,
            "rmsnorm",
            "row-wise RMS normalisation y = x/sqrt(mean(x²)+1e-5)·gamma",
        ),
        stem: "rmsnorm",
        values: &[UNIT, GAMMA],
        flops: 4.0,
        cost: 5.0,
        eps: true,
        split: None,
    },
    Entry {
        kernel: RowKernel::LayerNormRmsNormFused,
        def: row(
            RowKernel::LayerNormRmsNormFused,
            "layernorm_rmsnorm_fused",
            "y = rmsnorm(layernorm(x)·gamma1 + beta1)·gamma2 in one pass over x",
        ),
        stem: "layernorm_rmsnorm",
        values: &[UNIT, GAMMA, UNIT, GAMMA],
        flops: 12.0,
        cost: 10.0,
        eps: true,
        split: None,
    },
];

impl RowKernel {
    /// Every row kernel.
    pub const ALL: [RowKernel; 5] = [
        RowKernel::Softmax,
        RowKernel::LogSoftmax,
        RowKernel::LayerNorm,
        RowKernel::RmsNorm,
        RowKernel::LayerNormRmsNormFused,
    ];

    fn entry(self) -> &'static Entry {
        match TABLE.iter().find(|e| e.kernel == self) {
            Some(e) => e,
            None => unreachable!("every row kernel has an entry (tested)"),
        }
    }

    /// Device entry-point stem: `<stem>_rows` in OpenCL C, `<stem>_rows_<block>` in HIP, the
    /// shader `<stem>` (and `<stem>_subgroup`) in Vulkan.
    pub fn stem(self) -> &'static str {
        self.entry().stem
    }

    /// Input buffers read: the rows, then gamma/beta as the kernel needs.
    pub fn inputs(self) -> usize {
        self.entry().values.len()
    }

    /// The normalisations' epsilon as the device code takes it; softmax has none.
    pub fn eps(self) -> Option<f32> {
        self.entry().eps.then_some(NORM_EPS as f32)
    }

    /// The partials a split of its rows computes, or `None` when its rows are never split.
    pub fn split(self) -> Option<SplitStats> {
        self.entry().split
    }
}

/// Relative tolerance of a reduction over `cols` elements.
fn row_rel_tol(cols: usize) -> f64 {
    2.0 * (8.0 + (cols as f64).sqrt()) * EPS32
}

/// Mean and `1/sqrt(var + eps)` (biased variance, two passes in f64).
fn mean_rstd(row: impl Iterator<Item = f64> + Clone, cols: usize) -> (f64, f64) {
    let n = cols as f64;
    let mean = row.clone().sum::<f64>() / n;
    let var = row.map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    (mean, 1.0 / (var + NORM_EPS).sqrt())
}

/// The row's maximum and Σ exp(x − max), what softmax and log_softmax reduce it to.
fn max_sum_exp(row: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
    let max = row.clone().fold(f64::NEG_INFINITY, f64::max);
    (max, row.map(|v| (v - max).exp()).sum())
}

/// Visits the reference of row `r`: `f(col, expected, tol)`.
fn visit_row(kernel: RowKernel, problem: &Problem, x: &[&[f32]], r: usize, f: Visit<'_>) {
    let cols = problem.uparam("cols");
    let row = &x[0][r * cols..(r + 1) * cols];
    let xs = row.iter().map(|&v| f64::from(v));
    let rel = row_rel_tol(cols);
    let vec = |i: usize, c: usize| f64::from(x[i][c]);
    match kernel {
        RowKernel::Softmax => {
            let (max, sum) = max_sum_exp(xs.clone());
            for (c, v) in xs.enumerate() {
                let y = (v - max).exp() / sum;
                f(c, y, rel * y + f64::from(f32::MIN_POSITIVE));
            }
        }
        RowKernel::LogSoftmax => {
            let (max, sum) = max_sum_exp(xs.clone());
            let log_sum = sum.ln();
            for (c, v) in xs.enumerate() {
                let y = (v - max) - log_sum;
                // The sum's relative error becomes an absolute one through the log (softmax's
                // `rel · y` relative); the two subtractions round relative to |y|.
                f(c, y, rel * (y.abs() + 1.0));
            }
        }
        RowKernel::LayerNorm => {
            let (mean, rstd) = mean_rstd(xs.clone(), cols);
            for (c, v) in xs.enumerate() {
                let xhat = (v - mean) * rstd;
                let (g, b) = (vec(1, c), vec(2, c));
                let y = xhat * g + b;
                // `+1`: the mean's own rounding, amplified by rstd, shifts every element alike.
                f(c, y, rel * (g.abs() * (xhat.abs() + 1.0) + b.abs()));
            }
        }
        RowKernel::RmsNorm => {
            let ms = xs.clone().map(|v| v * v).sum::<f64>() / cols as f64;
            let rstd = 1.0 / (ms + NORM_EPS).sqrt();
            for (c, v) in xs.enumerate() {
                let y = v * rstd * vec(1, c);
                f(c, y, rel * y.abs() + f64::from(f32::MIN_POSITIVE));
            }
        }
        RowKernel::LayerNormRmsNormFused => {
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
    }
}

impl Family for RowKernel {
    fn flops(&self, p: &Problem) -> f64 {
        self.entry().flops * p.fparam("rows") * p.fparam("cols")
    }

    /// The rows read and written, and each per-column vector read once.
    fn bytes(&self, p: &Problem) -> f64 {
        let (r, c) = (p.fparam("rows"), p.fparam("cols"));
        let vectors = (self.inputs() - 1) as f64;
        4.0 * (2.0 * r * c + vectors * c)
    }

    fn input_lens(&self, p: &Problem) -> Vec<u128> {
        let (rows, cols) = (p.wparam("rows"), p.wparam("cols"));
        let mut lens = vec![cols; self.inputs()];
        lens[0] = rows * cols;
        lens
    }

    fn output_len(&self, p: &Problem) -> u128 {
        p.wparam("rows") * p.wparam("cols")
    }

    fn output_dims(&self, p: &Problem) -> Vec<usize> {
        vec![p.uparam("rows"), p.uparam("cols")]
    }

    fn make_inputs(&self, p: &Problem, seed: u64) -> Vec<Buffer> {
        let lens = super::lens(&self.input_lens(p));
        seeded(self.entry().values, &lens, seed)
    }

    fn visit(&self, p: &Problem, x: &[&[f32]], f: Visit<'_>) -> Result<bool, String> {
        let (rows, cols) = (p.uparam("rows"), p.uparam("cols"));
        let row_ops = cols as f64 * self.entry().cost;
        let plan = Plan::for_cost(&p.spec_key_prefix(), row_ops * rows as f64);
        let sampled = plan.is_sampled();
        let chosen: Vec<usize> = match plan {
            Plan::Full => (0..rows).collect(),
            Plan::Sampled(mut rng) => {
                let count = ((SAMPLE_OPS / row_ops) as usize).max(2);
                pick(&mut rng, rows, count, &[0, rows - 1])
            }
        };
        for r in chosen {
            visit_row(*self, p, x, r, &mut |c, e, t| f(r * cols + c, e, t));
        }
        Ok(sampled)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{self, reference};
    use super::*;

    fn problem(kernel: &str, rows: i64, cols: i64) -> Problem {
        testing::problem(kernel, &[("rows", rows), ("cols", cols)])
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
    fn log_softmax_is_x_minus_the_log_sum_exp() {
        let p = problem("log_softmax", 2, 3);
        let y = reference(&p, &[vec![0.0, 1.0, 2.0, 5.0, 5.0, 5.0]]);
        // log(e^0 + e^1 + e^2) = 2.407605964444380
        for (c, v) in [0.0, 1.0, 2.0].iter().enumerate() {
            assert!((y[c] - (v - 2.407_605_964_444_38)).abs() < 1e-12, "{y:?}");
        }
        assert!(
            y[3..].iter().all(|v| (v + 3f64.ln()).abs() < 1e-12),
            "{y:?}"
        );
        // exp of it is softmax.
        let s = reference(
            &problem("softmax", 2, 3),
            &[vec![0.0, 1.0, 2.0, 5.0, 5.0, 5.0]],
        );
        assert!(y.iter().zip(&s).all(|(l, s)| (l.exp() - s).abs() < 1e-12));
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
    fn every_kernel_has_one_entry_with_its_id() {
        for k in RowKernel::ALL {
            assert_eq!(k.entry().def.id, KernelId::Rows(k));
        }
        assert_eq!(TABLE.len(), RowKernel::ALL.len());
    }

    #[test]
    fn tolerance_grows_with_cols() {
        assert!(row_rel_tol(1 << 20) > 50.0 * row_rel_tol(1));
    }
}
