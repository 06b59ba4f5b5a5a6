//! A validated kernel spec and everything derived from it: sizes, FLOP and byte counts, the metric.
//!
//! A [`Problem`] is the only way to get inputs or a validation, so every number the agent reports comes
//! from a spec that passed the catalog's bounds. Sizes are computed in `u128`/`f64` so absurd parameter
//! combinations are refused with [`SpecError::TooLarge`] instead of overflowing.

use std::collections::BTreeMap;

use crate::catalog::{KernelDef, KernelId, catalog, find_kernel};
use crate::check::Validation;
use crate::error::SpecError;
use crate::run::Mode;
use crate::types::{Buffer, BufferKind, Dtype, MetricKind, MetricValue};

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
        if self.id() != KernelId::Conv2d {
            return Ok(());
        }
        let invalid = |message: String| SpecError::InvalidParams {
            kernel: self.kernel.name.to_string(),
            message,
        };
        let r = self.param("ksize");
        if r != 3 && r != 5 {
            return Err(invalid(format!("ksize={r} must be 3 or 5")));
        }
        let pad = self.param("pad");
        for dim in ["height", "width"] {
            let size = self.param(dim);
            if size + 2 * pad < r {
                return Err(invalid(format!(
                    "output {dim} would be below 1: {dim}={size} + 2·pad={pad} is smaller than ksize={r}"
                )));
            }
        }
        Ok(())
    }

    /// The kernel's identity.
    pub fn id(&self) -> KernelId {
        self.kernel.id
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
            KernelId::Copy
            | KernelId::Noop
            | KernelId::MemlatCpu
            | KernelId::DebugCrash
            | KernelId::DebugHang => 0.0,
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
            KernelId::Noop | KernelId::DebugCrash | KernelId::DebugHang => 0.0,
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
            KernelId::Noop | KernelId::DebugCrash | KernelId::DebugHang => vec![1],
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

    /// Seeded inputs, deterministic for `(problem, seed)`; see the `inputs` module for the value sets.
    pub fn inputs(&self, seed: u64) -> Vec<Buffer> {
        crate::inputs::generate(self, seed)
    }

    /// Compares `output` with the f64 reference computed from `inputs`; see the `check` module.
    pub fn check(&self, inputs: &[Buffer], output: &Buffer) -> Validation {
        crate::check::check(self, inputs, output)
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
mod tests {
    use super::*;

    fn params(list: &[(&str, i64)]) -> BTreeMap<String, i64> {
        list.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    fn new(kernel: &str, list: &[(&str, i64)]) -> Result<Problem, SpecError> {
        Problem::new(kernel, "", &params(list), "", false)
    }

    #[test]
    fn empty_fields_resolve_to_defaults() {
        let p = new("gemm", &[("m", 1024)]).unwrap();
        assert_eq!(p.variant, "blocked");
        assert_eq!(p.dtype, Dtype::F32);
        assert_eq!(p.params, params(&[("m", 1024), ("n", 256), ("k", 256)]));
        assert_eq!(p.param("m"), 1024);
        assert_eq!(p.id(), KernelId::Gemm);
        let p = Problem::new("gemm", "naive", &params(&[]), "F16", false).unwrap();
        assert_eq!((p.variant.as_str(), p.dtype), ("naive", Dtype::F16));
        assert_eq!(new("vec_add", &[]).unwrap().variant, "default");
    }

    #[test]
    fn spec_key_and_params_string_are_canonical() {
        let p = new("gemm", &[("n", 1024), ("m", 1024), ("k", 1024)]).unwrap();
        assert_eq!(p.params_string(), "k=1024,m=1024,n=1024");
        assert_eq!(
            p.spec_key(Mode::ComputeOnly),
            "gemm/blocked/k=1024,m=1024,n=1024/f32/compute_only"
        );
        // Explicit defaults and omitted ones give the same key.
        assert_eq!(
            new("gemm", &[]).unwrap().spec_key(Mode::WithTransfers),
            new("gemm", &[("m", 256)])
                .unwrap()
                .spec_key(Mode::WithTransfers)
        );
        assert_eq!(
            new("noop", &[]).unwrap().spec_key(Mode::WithTransfers),
            "noop/default/-/f32/with_transfers"
        );
    }

    #[test]
    fn unknown_names_list_what_is_known() {
        let e = new("gemmm", &[]).unwrap_err();
        assert_eq!(e.field(), "kernel");
        let msg = e.to_string();
        assert!(
            msg.starts_with("unknown kernel `gemmm` (known: gemm, vec_add, copy"),
            "{msg}"
        );
        assert!(
            !msg.contains("debug_"),
            "debug kernels hidden when disabled: {msg}"
        );
        let e = Problem::new("gemmm", "", &params(&[]), "", true).unwrap_err();
        assert!(e.to_string().contains("debug_wrong"));

        let e = Problem::new("gemm", "fast", &params(&[]), "", false).unwrap_err();
        assert_eq!(e.field(), "variant");
        assert_eq!(
            e.to_string(),
            "unknown variant `fast` for gemm (known: naive, tiled, blocked)"
        );
        let e = new("gemm", &[("q", 1)]).unwrap_err();
        assert_eq!(e.field(), "params");
        assert_eq!(e.to_string(), "unknown param `q` for gemm (known: m, n, k)");
    }

    #[test]
    fn bounds_are_enforced_with_the_bound_in_the_message() {
        let e = new("gemm", &[("n", 1_000_000_000)]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "param n=1000000000 exceeds the maximum 65536 for gemm"
        );
        let e = new("gemm", &[("m", 0)]).unwrap_err();
        assert_eq!(e.to_string(), "param m=0 is below the minimum 1 for gemm");
        assert!(new("gemm", &[("m", 65536)]).is_ok());
        let e = new("memlat_cpu", &[("size_kib", 2)]).unwrap_err();
        assert!(matches!(e, SpecError::ParamOutOfRange { min: 4, .. }));
    }

    #[test]
    fn conv2d_cross_rules() {
        let e = new("conv2d", &[("ksize", 4)]).unwrap_err();
        assert_eq!(e.field(), "params");
        assert_eq!(
            e.to_string(),
            "invalid params for conv2d: ksize=4 must be 3 or 5"
        );
        let e = new("conv2d", &[("height", 2), ("pad", 0), ("ksize", 5)]).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("output height") && msg.contains("height=2") && msg.contains("ksize=5"),
            "{msg}"
        );
        // Exactly one output row is fine, also with a stride that would round a negative size to 0.
        let p = new(
            "conv2d",
            &[("height", 1), ("width", 1), ("pad", 1), ("stride", 4)],
        )
        .unwrap();
        assert_eq!((p.conv_shape().out_h, p.conv_shape().out_w), (1, 1));
        let e = new("conv2d", &[("width", 1), ("pad", 0), ("stride", 2)]).unwrap_err();
        assert!(e.to_string().contains("output width"), "{e}");
    }

    #[test]
    fn dtypes_and_debug_kernels() {
        let e = Problem::new("vec_add", "", &params(&[]), "f16", false).unwrap_err();
        assert_eq!(e.field(), "dtype");
        assert_eq!(
            e.to_string(),
            "dtype `f16` is not supported by vec_add (supported: f32)"
        );
        let e = Problem::new("gemm", "", &params(&[]), "f64", false).unwrap_err();
        assert!(e.to_string().contains("supported: f32, f16"), "{e}");

        let e = new("debug_crash", &[]).unwrap_err();
        assert_eq!(e.field(), "kernel");
        assert!(e.to_string().contains("--enable-debug-kernels"));
        let p = Problem::new("debug_crash", "", &params(&[("mode", 1)]), "", true).unwrap();
        assert_eq!(p.param("mode"), 1);
    }

    #[test]
    fn absurd_sizes_are_refused_without_overflow() {
        let e = new("softmax", &[("rows", 1 << 24), ("cols", 1 << 20)]).unwrap_err();
        assert_eq!(e.field(), "params");
        assert!(
            matches!(e, SpecError::TooLarge { bytes, limit, .. } if bytes == 1 << 47 && limit == 1 << 40)
        );
        assert!(e.to_string().contains("128.0 TiB"), "{e}");
        let e = new(
            "conv2d",
            &[
                ("batch", 4096),
                ("channels", 4096),
                ("height", 16384),
                ("width", 16384),
                ("filters", 4096),
            ],
        )
        .unwrap_err();
        assert!(matches!(e, SpecError::TooLarge { bytes, .. } if bytes > 1 << 54));
    }

    #[test]
    fn flops_bytes_and_footprint() {
        let p = new("gemm", &[("m", 2), ("n", 3), ("k", 4)]).unwrap();
        assert_eq!(p.flops(), 48.0);
        assert_eq!(p.bytes(), 4.0 * (8.0 + 12.0 + 6.0));
        assert_eq!(p.footprint_bytes(), 4 * 26);
        let h = Problem::new(
            "gemm",
            "",
            &params(&[("m", 2), ("n", 3), ("k", 4)]),
            "f16",
            false,
        )
        .unwrap();
        assert_eq!((h.bytes(), h.footprint_bytes()), (52.0, 52));

        let t = new("triad", &[("n", 10)]).unwrap();
        assert_eq!(
            (t.flops(), t.bytes(), t.footprint_bytes()),
            (20.0, 120.0, 120)
        );
        let s = new("softmax", &[("rows", 2), ("cols", 8)]).unwrap();
        assert_eq!((s.flops(), s.bytes()), (80.0, 128.0));
        let l = new("layernorm_rmsnorm_fused", &[("rows", 2), ("cols", 8)]).unwrap();
        assert_eq!((l.flops(), l.bytes()), (192.0, 4.0 * (32.0 + 24.0)));
        assert_eq!(l.input_lens(), vec![16, 8, 8, 8]);

        let c = new("conv2d", &[]).unwrap();
        let s = c.conv_shape();
        assert_eq!((s.out_h, s.out_w), (64, 64));
        assert_eq!(c.flops(), 2.0 * 32.0 * 64.0 * 64.0 * 16.0 * 9.0);
        assert_eq!(c.output_len(), 32 * 64 * 64);
        let c = new("conv2d", &[("stride", 2), ("pad", 0), ("ksize", 5)]).unwrap();
        assert_eq!(c.conv_shape().out_h, (64 - 5) / 2 + 1);

        let m = new("memlat_cpu", &[("size_kib", 4)]).unwrap();
        assert_eq!(m.input_kinds(), vec![BufferKind::U32]);
        assert_eq!((m.output_kind(), m.output_len()), (BufferKind::U32, 1));
        assert_eq!(m.footprint_bytes(), 4096 + 4);
        let n = new("noop", &[]).unwrap();
        assert_eq!((n.flops(), n.bytes(), n.output_len()), (0.0, 0.0, 1));
    }

    #[test]
    fn metrics_follow_the_kind() {
        let g = new("gemm", &[("m", 1000), ("n", 1000), ("k", 500)]).unwrap();
        let v = g.metric(0.5);
        assert_eq!(v.kind, MetricKind::Gflops);
        assert!((v.value - 2.0).abs() < 1e-12);
        let c = new("copy", &[("n", 1 << 20)]).unwrap();
        assert!((c.metric(1e-3).value - 8.0 * 1048576.0 / 1e-3 / 1e9).abs() < 1e-9);
        let n = new("noop", &[]).unwrap();
        assert_eq!(
            n.metric(5e-6),
            MetricValue {
                kind: MetricKind::Micros,
                value: 5e-6 * 1e6
            }
        );
        let m = new("memlat_cpu", &[("hops", 1000)]).unwrap();
        let v = m.metric(1e-4);
        assert_eq!(v.kind, MetricKind::NsPerHop);
        assert!((v.value - 100.0).abs() < 1e-9);
        assert_eq!(g.metric(0.0).value, 0.0);
        assert_eq!(g.metric(f64::NAN).value, 0.0);
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(json["kind"], "ns_per_hop");
        assert_eq!(json["value"].as_f64(), Some(v.value));
    }
}
