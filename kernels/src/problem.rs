//! A validated kernel spec and everything derived from it: sizes, FLOP and byte counts, the metric.
//!
//! A [`Problem`] is the only way to get inputs or a validation, so every number the agent reports comes
//! from a spec that passed the catalog's bounds. Sizes are computed in `u128`/`f64` so absurd parameter
//! combinations are refused with [`SpecError::TooLarge`] instead of overflowing.

use std::collections::BTreeMap;

use crate::catalog::{KernelDef, KernelId, ModelKernel as MK, catalog, find_kernel};
use crate::error::SpecError;
use crate::model::{Act, Conv, Graph, Net, Op, Shape};
use crate::run::Mode;
use crate::types::{BufferKind, Dtype, MetricKind, MetricValue};

/// Absolute sanity limit on a problem's footprint (1 TiB), whatever the device.
pub const MAX_FOOTPRINT_BYTES: u64 = 1 << 40;

/// Epsilon of the layer/RMS normalisations.
pub const NORM_EPS: f64 = 1e-5;

/// Scalar of the STREAM triad `a = b + SCALAR·c`.
pub const TRIAD_SCALAR: f32 = 3.0;

/// A kernel with a resolved variant, every parameter and a dtype, all validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// The catalog entry.
    pub kernel: &'static KernelDef,
    /// Resolved variant (never empty).
    pub variant: String,
    /// Every parameter of the kernel, defaults filled in.
    pub params: BTreeMap<String, i64>,
    /// Resolved dtype.
    pub dtype: Dtype,
}

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
    /// Validates and resolves a spec: empty variant -> default variant; empty dtype -> f32; missing
    /// params -> defaults.
    ///
    /// # Errors
    /// [`SpecError`] naming the field at fault: an unknown kernel, variant, parameter or dtype; a
    /// `debug_*` kernel without `allow_debug` ([`SpecError::DebugKernelDisabled`]); a parameter outside
    /// its bounds; parameters that do not fit together; a footprint above [`MAX_FOOTPRINT_BYTES`].
    pub fn new(
        kernel: &str,
        variant: &str,
        params: &BTreeMap<String, i64>,
        dtype: &str,
        allow_debug: bool,
    ) -> Result<Problem, SpecError> {
        let def = find_kernel(kernel).ok_or_else(|| SpecError::UnknownKernel {
            name: kernel.to_string(),
            known: catalog()
                .iter()
                .filter(|k| allow_debug || !k.debug)
                .map(|k| k.name.to_string())
                .collect(),
        })?;
        if def.debug && !allow_debug {
            return Err(SpecError::DebugKernelDisabled {
                kernel: def.name.to_string(),
            });
        }
        let variant = if variant.is_empty() {
            def.default_variant
        } else {
            def.variants
                .iter()
                .copied()
                .find(|v| *v == variant)
                .ok_or_else(|| SpecError::UnknownVariant {
                    kernel: def.name.to_string(),
                    variant: variant.to_string(),
                    known: def.variants.iter().map(|v| v.to_string()).collect(),
                })?
        };
        if let Some(unknown) = params.keys().find(|name| def.param(name).is_none()) {
            return Err(SpecError::UnknownParam {
                kernel: def.name.to_string(),
                param: unknown.clone(),
                known: def.params.iter().map(|p| p.name.to_string()).collect(),
            });
        }
        let mut resolved = BTreeMap::new();
        for pd in def.params {
            let value = params.get(pd.name).copied().unwrap_or(pd.default);
            if value < pd.min || value > pd.max {
                return Err(SpecError::ParamOutOfRange {
                    kernel: def.name.to_string(),
                    param: pd.name.to_string(),
                    value,
                    min: pd.min,
                    max: pd.max,
                });
            }
            resolved.insert(pd.name.to_string(), value);
        }
        let dtype = if dtype.trim().is_empty() {
            Dtype::F32
        } else {
            Dtype::parse(dtype)
                .filter(|d| def.dtypes.contains(d))
                .ok_or_else(|| SpecError::UnsupportedDtype {
                    kernel: def.name.to_string(),
                    dtype: dtype.to_string(),
                    supported: def.dtypes.iter().map(|d| d.name().to_string()).collect(),
                })?
        };
        let problem = Problem {
            kernel: def,
            variant: variant.to_string(),
            params: resolved,
            dtype,
        };
        problem.check_cross_params()?;
        let bytes = problem.footprint_u128();
        if bytes > u128::from(MAX_FOOTPRINT_BYTES) {
            return Err(SpecError::TooLarge {
                kernel: def.name.to_string(),
                bytes: u64::try_from(bytes).unwrap_or(u64::MAX),
                limit: MAX_FOOTPRINT_BYTES,
            });
        }
        Ok(problem)
    }

    /// Rules that involve several parameters.
    fn check_cross_params(&self) -> Result<(), SpecError> {
        let invalid = |message: String| SpecError::InvalidParams {
            kernel: self.kernel.name.to_string(),
            message,
        };
        // A ksize window with `pad` on each side must fit the input at least once.
        let window_fits = || {
            let (k, pad) = (self.param("ksize"), self.param("pad"));
            for dim in ["height", "width"] {
                let size = self.param(dim);
                if size + 2 * pad < k {
                    return Err(invalid(format!(
                        "output {dim} would be below 1: {dim}={size} + 2·pad={pad} is smaller than ksize={k}"
                    )));
                }
            }
            Ok(())
        };
        match self.id() {
            KernelId::Model(MK::CnnConv) if self.variant == "depthwise" => {
                let (c, f) = (self.param("channels"), self.param("filters"));
                if c != f {
                    return Err(invalid(format!(
                        "the depthwise variant needs filters = channels (one filter per channel): filters={f}, channels={c}"
                    )));
                }
                Ok(())
            }
            KernelId::Model(MK::CnnMaxPool) => {
                let (k, pad) = (self.param("ksize"), self.param("pad"));
                if pad >= k {
                    return Err(invalid(format!(
                        "pad={pad} must be below ksize={k} (a window of padding alone has no maximum)"
                    )));
                }
                window_fits()
            }
            KernelId::Conv2d => {
                let r = self.param("ksize");
                if r != 3 && r != 5 {
                    return Err(invalid(format!("ksize={r} must be 3 or 5")));
                }
                window_fits()
            }
            _ => Ok(()),
        }
    }

    /// The kernel's identity.
    pub fn id(&self) -> KernelId {
        self.kernel.id
    }

    /// The network a model kernel runs (`simple_cnn`, `resnet18`, `mobilenet_v2`, or the one layer
    /// of a `cnn_*` operator kernel), else `None`.
    pub fn net(&self) -> Option<Net> {
        let u = |name: &str| self.uparam(name);
        let act = || Act::from_code(self.param("act")).unwrap_or(Act::None);
        let plane = || Shape {
            c: u("channels"),
            h: u("height"),
            w: u("width"),
        };
        let layer = |image: Shape, op: Op| Some(Net::Layer { image, op });
        match self.id() {
            KernelId::Model(MK::SimpleCnn) => Some(Net::SimpleCnn),
            KernelId::Model(MK::Resnet18) => Some(Net::Resnet18),
            KernelId::Model(MK::MobilenetV2) => Some(Net::MobilenetV2),
            KernelId::Model(MK::CnnConv) => {
                let k = u("ksize");
                let conv = Conv {
                    cout: u("filters"),
                    k,
                    stride: u("stride"),
                    pad: k / 2,
                    groups: if self.variant == "depthwise" {
                        u("channels")
                    } else {
                        1
                    },
                    act: act(),
                };
                layer(plane(), Op::Conv(conv))
            }
            KernelId::Model(MK::CnnMaxPool) => layer(
                plane(),
                Op::MaxPool {
                    k: u("ksize"),
                    stride: u("stride"),
                    pad: u("pad"),
                },
            ),
            KernelId::Model(MK::CnnAvgPool) => layer(plane(), Op::GlobalAvgPool),
            KernelId::Model(MK::CnnLinear) => layer(
                Shape {
                    c: u("inputs"),
                    h: 1,
                    w: 1,
                },
                Op::Linear {
                    cout: u("outputs"),
                    act: act(),
                },
            ),
            _ => None,
        }
    }

    /// The layer graph of a model kernel at its batch size (see [`crate::model`]).
    ///
    /// # Panics
    /// Only if the kernel is not a model, which is a programming error.
    pub fn graph(&self) -> Graph {
        match self.net() {
            Some(net) => Graph::new(net, self.uparam("batch")),
            None => panic!("kernel {} is not a model", self.kernel.name),
        }
    }

    /// Value of parameter `name`.
    ///
    /// # Panics
    /// Only if `name` is not a parameter of the kernel, which is a programming error.
    pub fn param(&self, name: &str) -> i64 {
        match self.params.get(name) {
            Some(v) => *v,
            None => panic!("kernel {} has no param `{name}`", self.kernel.name),
        }
    }

    /// A parameter as `usize`; parameters are validated non-negative.
    pub(crate) fn uparam(&self, name: &str) -> usize {
        usize::try_from(self.param(name)).unwrap_or(0)
    }

    fn fparam(&self, name: &str) -> f64 {
        self.param(name) as f64
    }

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

    /// Floating-point operations per iteration (0 for copy, noop and the latency kernels).
    pub fn flops(&self) -> f64 {
        match self.id() {
            KernelId::Gemm => 2.0 * self.fparam("m") * self.fparam("n") * self.fparam("k"),
            KernelId::VecAdd | KernelId::DebugWrong | KernelId::Relu | KernelId::MembwCpu => {
                self.fparam("n")
            }
            KernelId::Triad => 2.0 * self.fparam("n"),
            KernelId::Sigmoid => 4.0 * self.fparam("n"),
            KernelId::Tanh => 6.0 * self.fparam("n"),
            KernelId::Softmax => 5.0 * self.fparam("rows") * self.fparam("cols"),
            KernelId::LayerNorm => 8.0 * self.fparam("rows") * self.fparam("cols"),
            KernelId::RmsNorm => 4.0 * self.fparam("rows") * self.fparam("cols"),
            KernelId::LayerNormRmsNormFused => 12.0 * self.fparam("rows") * self.fparam("cols"),
            KernelId::Conv2d => {
                let c = self.conv_shape();
                2.0 * (c.batch * c.filters * c.out_h * c.out_w) as f64
                    * (c.channels * c.ksize * c.ksize) as f64
            }
            KernelId::Model(_) => self.graph().flops(),
            KernelId::Copy
            | KernelId::Noop
            | KernelId::MemlatCpu
            | KernelId::DebugCrash
            | KernelId::DebugHang
            | KernelId::DebugAlloc => 0.0,
        }
    }

    /// Bytes moved per iteration, the numerator of GB/s. `memlat_cpu` counts one 64-byte line per hop.
    pub fn bytes(&self) -> f64 {
        match self.id() {
            KernelId::Gemm => {
                let (m, n, k) = (self.fparam("m"), self.fparam("n"), self.fparam("k"));
                self.dtype.size_bytes() as f64 * (m * k + k * n + m * n)
            }
            KernelId::VecAdd | KernelId::Triad | KernelId::DebugWrong => 12.0 * self.fparam("n"),
            KernelId::Copy | KernelId::Relu | KernelId::Sigmoid | KernelId::Tanh => {
                8.0 * self.fparam("n")
            }
            KernelId::MembwCpu => 4.0 * self.fparam("n"),
            KernelId::Softmax => 8.0 * self.fparam("rows") * self.fparam("cols"),
            KernelId::LayerNorm | KernelId::RmsNorm | KernelId::LayerNormRmsNormFused => {
                let (r, c) = (self.fparam("rows"), self.fparam("cols"));
                let vectors = match self.id() {
                    KernelId::LayerNorm => 2.0,
                    KernelId::RmsNorm => 1.0,
                    _ => 3.0,
                };
                4.0 * (2.0 * r * c + vectors * c)
            }
            KernelId::Conv2d => {
                let c = self.conv_shape();
                4.0 * (c.input_len() + c.weights_len() + c.output_len()) as f64
            }
            KernelId::MemlatCpu => 64.0 * self.fparam("hops"),
            // Images, weights and logits (a layer kernel: its input, weights and output); the
            // activations in between are the backend's business.
            KernelId::Model(_) => {
                let g = self.graph();
                4.0 * (g.batch * (g.image.len() + g.classes()) + g.weights_len) as f64
            }
            KernelId::Noop | KernelId::DebugCrash | KernelId::DebugHang | KernelId::DebugAlloc => {
                0.0
            }
        }
    }

    /// Input lengths in elements, in [`Problem::inputs`] order, computed without overflow.
    fn input_lens_u128(&self) -> Vec<u128> {
        let p = |name: &str| u128::try_from(self.param(name)).unwrap_or(0);
        match self.id() {
            KernelId::Gemm => vec![p("m") * p("k"), p("k") * p("n")],
            KernelId::VecAdd | KernelId::Triad | KernelId::DebugWrong => vec![p("n"), p("n")],
            KernelId::Copy
            | KernelId::Relu
            | KernelId::Sigmoid
            | KernelId::Tanh
            | KernelId::MembwCpu => vec![p("n")],
            // debug_alloc's `gib` is deliberately not part of its footprint (see the catalog).
            KernelId::Noop | KernelId::DebugCrash | KernelId::DebugHang | KernelId::DebugAlloc => {
                vec![1]
            }
            KernelId::Softmax => vec![p("rows") * p("cols")],
            KernelId::LayerNorm => vec![p("rows") * p("cols"), p("cols"), p("cols")],
            KernelId::RmsNorm => vec![p("rows") * p("cols"), p("cols")],
            KernelId::LayerNormRmsNormFused => {
                vec![p("rows") * p("cols"), p("cols"), p("cols"), p("cols")]
            }
            KernelId::Conv2d => vec![
                p("batch") * p("channels") * p("height") * p("width"),
                p("filters") * p("channels") * p("ksize") * p("ksize"),
            ],
            KernelId::MemlatCpu => vec![p("size_kib") * 1024 / 4],
            KernelId::Model(_) => {
                let g = self.graph();
                vec![(g.batch * g.image.len()) as u128, g.weights_len as u128]
            }
        }
    }

    fn output_len_u128(&self) -> u128 {
        let p = |name: &str| u128::try_from(self.param(name)).unwrap_or(0);
        match self.id() {
            KernelId::Gemm => p("m") * p("n"),
            KernelId::VecAdd
            | KernelId::Triad
            | KernelId::DebugWrong
            | KernelId::Copy
            | KernelId::Relu
            | KernelId::Sigmoid
            | KernelId::Tanh => p("n"),
            KernelId::Noop
            | KernelId::DebugCrash
            | KernelId::DebugHang
            | KernelId::DebugAlloc
            | KernelId::MembwCpu
            | KernelId::MemlatCpu => 1,
            KernelId::Softmax
            | KernelId::LayerNorm
            | KernelId::RmsNorm
            | KernelId::LayerNormRmsNormFused => p("rows") * p("cols"),
            KernelId::Conv2d => {
                let c = self.conv_shape();
                (c.batch as u128) * (c.filters as u128) * (c.out_h as u128) * (c.out_w as u128)
            }
            // Every layer's output (the arena), so each layer can be validated.
            KernelId::Model(_) => self.graph().arena_len as u128,
        }
    }

    fn footprint_u128(&self) -> u128 {
        let elem = match self.id() {
            KernelId::MemlatCpu => 4,
            _ => self.dtype.size_bytes() as u128,
        };
        let inputs: u128 = self.input_lens_u128().iter().sum();
        let output = self.output_len_u128();
        // memlat's output is one u32 whatever the dtype.
        inputs * elem + output * elem
    }

    /// Size of all input and output buffers in the dtype's storage size, for device memory checks.
    pub fn footprint_bytes(&self) -> u64 {
        u64::try_from(self.footprint_u128()).unwrap_or(u64::MAX)
    }

    /// Element kinds of the inputs, in [`Problem::inputs`] order.
    pub fn input_kinds(&self) -> Vec<BufferKind> {
        let kind = match self.id() {
            KernelId::MemlatCpu => BufferKind::U32,
            _ => BufferKind::F32,
        };
        vec![kind; self.input_lens_u128().len()]
    }

    /// Element kind of the output.
    pub fn output_kind(&self) -> BufferKind {
        match self.id() {
            KernelId::MemlatCpu => BufferKind::U32,
            _ => BufferKind::F32,
        }
    }

    /// Number of output elements.
    pub fn output_len(&self) -> usize {
        usize::try_from(self.output_len_u128()).unwrap_or(usize::MAX)
    }

    /// Input lengths in elements, in [`Problem::inputs`] order.
    pub fn input_lens(&self) -> Vec<usize> {
        self.input_lens_u128()
            .into_iter()
            .map(|l| usize::try_from(l).unwrap_or(usize::MAX))
            .collect()
    }

    /// The headline number for a median iteration time in seconds. A non-positive or non-finite time
    /// gives 0 (a throughput cannot be derived from it).
    pub fn metric(&self, median_s: f64) -> MetricValue {
        let kind = self.kernel.metric;
        let value = if !(median_s.is_finite() && median_s > 0.0) {
            0.0
        } else {
            match kind {
                MetricKind::Gflops => self.flops() / median_s / 1e9,
                MetricKind::Gbps => self.bytes() / median_s / 1e9,
                MetricKind::Micros => median_s * 1e6,
                MetricKind::NsPerHop => median_s * 1e9 / self.fparam("hops"),
                MetricKind::ImagesPerS => self.fparam("batch") / median_s,
            }
        };
        MetricValue { kind, value }
    }

    /// Canonical comparable key `kernel/variant/params/dtype/mode`, e.g.
    /// `"gemm/blocked/k=1024,m=1024,n=1024/f32/compute_only"`; params sorted by name, `-` when the
    /// kernel has none.
    pub fn spec_key(&self, mode: Mode) -> String {
        self.spec_key_prefix() + mode.name()
    }

    /// The spec key up to and including the `/` before the mode: the same for both modes, which is
    /// what seeds a sampled validation (so it does not depend on how the run is timed).
    pub(crate) fn spec_key_prefix(&self) -> String {
        let params = self.params_string();
        let params = if params.is_empty() { "-" } else { &params };
        format!(
            "{}/{}/{}/{}/",
            self.kernel.name,
            self.variant,
            params,
            self.dtype.name()
        )
    }

    /// Every parameter as `name=value`, sorted by name, comma-separated (`"k=1024,m=1024,n=1024"`).
    pub fn params_string(&self) -> String {
        self.params
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests;
