//! Validating a kernel spec into a [`Problem`], and everything derived from it: sizes, FLOP and
//! byte counts, inputs, the metric, the spec key. What differs per kernel comes from its family
//! (`catalog/`), which this module asks.
//!
//! A [`Problem`] is the only way to get inputs or a validation, so every number the agent reports comes
//! from a spec that passed the catalog's bounds. Sizes are computed in `u128`/`f64` so absurd parameter
//! combinations are refused with [`SpecError::TooLarge`] instead of overflowing.

use std::collections::BTreeMap;

// `Problem` is defined with the families, which compute on it; it is validated here.
pub(crate) use crate::catalog::Problem;
use crate::catalog::{Family, KernelDef, catalog, find_kernel, lens};
use crate::check::harness::{Comparer, Validation, format_index};
use crate::error::SpecError;
use crate::model::{Graph, Net};
use crate::run::Mode;
use crate::types::{Buffer, BufferKind, Dtype, MetricKind, MetricValue};

/// Absolute sanity limit on a problem's footprint (1 TiB), whatever the device.
pub const MAX_FOOTPRINT_BYTES: u64 = 1 << 40;

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
        let def = lookup_kernel(kernel, allow_debug)?;
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
            // The parameter under its name or one other name (`shape` for `model`), not both.
            let mut given = std::iter::once(pd.name)
                .chain(pd.also.iter().copied())
                .filter_map(|n| params.get(n).map(|v| (n, *v)));
            let first = given.next();
            if let (Some((a, _)), Some((b, _))) = (first, given.next()) {
                return Err(SpecError::InvalidParams {
                    kernel: def.name.to_string(),
                    message: format!("{a} and {b} name the same parameter: give one"),
                });
            }
            let value = first.map_or(pd.default, |(_, v)| v);
            if value < pd.min || value > pd.max {
                return Err(SpecError::ParamOutOfRange {
                    kernel: def.name.to_string(),
                    param: pd.name.to_string(),
                    value,
                    min: pd.min,
                    max: pd.max,
                });
            }
            if !(pd.optional && value == pd.default) {
                resolved.insert(pd.name.to_string(), value);
            }
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

    /// Rules that involve several parameters (the family's).
    fn check_cross_params(&self) -> Result<(), SpecError> {
        self.family()
            .check_params(self)
            .map_err(|message| SpecError::InvalidParams {
                kernel: self.kernel.name.to_string(),
                message,
            })
    }

    /// The family that computes this problem's kernel.
    fn family(&self) -> &'static dyn Family {
        self.kernel.id.family()
    }

    /// The network a model kernel runs (`simple_cnn`, `resnet18`, `mobilenet_v2`, or the one layer
    /// of a `cnn_*` operator kernel), else `None`.
    pub fn net(&self) -> Option<Net> {
        self.family().net(self)
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

    /// The graph of steps of a transformer kernel (`llm`, `rope`, `attention`, `swiglu`, `gemv`;
    /// see [`crate::llm`]), else `None`.
    pub fn llm_graph(&self) -> Option<crate::llm::LlmGraph> {
        self.family().llm(self)
    }

    /// The arithmetic whose peak this problem's FLOP/s are measured against: its dtype, f32
    /// where f16 is storage only, `compute_peak`'s variant's type; `None` where the device tables
    /// hold no peak for it (fp64, int32, int8).
    pub fn arithmetic(&self) -> Option<crate::types::Dtype> {
        self.family().arithmetic(self)
    }

    /// Tokens one iteration processes (prefilled or generated), for `tokens_per_s`; 0 for a kernel
    /// that does not count tokens.
    pub fn tokens(&self) -> f64 {
        self.family().tokens(self)
    }

    /// Floating-point operations per iteration (0 for copy, noop and the latency kernels).
    pub fn flops(&self) -> f64 {
        self.family().flops(self)
    }

    /// Bytes moved per iteration, the numerator of GB/s. `memlat_cpu` counts one 64-byte line per hop.
    pub fn bytes(&self) -> f64 {
        self.family().bytes(self)
    }

    fn footprint_u128(&self) -> u128 {
        let family = self.family();
        if let Some(bytes) = family.footprint(self) {
            return bytes;
        }
        // The pointer chase's table and output are u32 whatever the dtype.
        let bytes = |n: u128| match family.elem() {
            BufferKind::U32 => 4 * n,
            BufferKind::F32 | BufferKind::Packed | BufferKind::Half => self.dtype.storage_bytes(n),
        };
        let inputs: u128 = family.input_lens(self).iter().sum();
        bytes(inputs) + bytes(family.output_len(self))
    }

    /// Size of all input and output buffers in the dtype's storage size, for device memory checks.
    pub fn footprint_bytes(&self) -> u64 {
        u64::try_from(self.footprint_u128()).unwrap_or(u64::MAX)
    }

    /// Bytes of the weights as stored in the dtype (`llm`'s model, `gemv`'s matrix; quantized, the
    /// blocks with their scales), `None` for kernels whose inputs are not a model's weights.
    pub fn weight_bytes(&self) -> Option<u64> {
        self.family()
            .weight_bytes(self)
            .map(|b| u64::try_from(b).unwrap_or(u64::MAX))
    }

    /// Element kinds of the inputs, in [`Problem::inputs`] order.
    pub fn input_kinds(&self) -> Vec<BufferKind> {
        let family = self.family();
        let mut kinds = vec![family.elem(); family.input_lens(self).len()];
        if let Some((i, _)) = family.packed_input(self) {
            kinds[i] = BufferKind::Packed;
        }
        if let Some(i) = self.half_input() {
            kinds[i] = BufferKind::Half;
        }
        kinds
    }

    /// The input [`Problem::inputs`] gives as half words ([`Buffer::Half`]: an f16 transformer's
    /// weights), if any: its index.
    pub fn half_input(&self) -> Option<usize> {
        self.family().half_input(self)
    }

    /// The input [`Problem::inputs`] gives packed ([`Buffer::Packed`]: a quantized transformer's
    /// weights, drawn straight into the blocks a device reads), if any: its index and its bytes.
    /// [`Problem::input_lens`] still counts its weights, as elements.
    pub fn packed_input(&self) -> Option<(usize, u64)> {
        self.family()
            .packed_input(self)
            .map(|(i, b)| (i, u64::try_from(b).unwrap_or(u64::MAX)))
    }

    /// Element kind of the output.
    pub fn output_kind(&self) -> BufferKind {
        self.family().elem()
    }

    /// Number of output elements.
    pub fn output_len(&self) -> usize {
        lens(&[self.family().output_len(self)])[0]
    }

    /// Input lengths in elements, in [`Problem::inputs`] order.
    pub fn input_lens(&self) -> Vec<usize> {
        lens(&self.family().input_lens(self))
    }

    /// Seeded inputs, deterministic for `(problem, seed)`, in the order the kernels take them
    /// (see `inputs.rs` for the value sets).
    pub fn inputs(&self, seed: u64) -> Vec<Buffer> {
        self.family().make_inputs(self, seed)
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
                MetricKind::TokensPerS => self.tokens() / median_s,
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
}

/// Checks that `inputs` have the problem's shape; a mismatch is a caller bug reported as a failure.
fn check_inputs(problem: &Problem, inputs: &[Buffer]) -> Result<(), String> {
    let kinds = problem.input_kinds();
    let mut lens = problem.input_lens();
    if let Some((i, bytes)) = problem.packed_input() {
        lens[i] = usize::try_from(bytes).unwrap_or(usize::MAX);
    }
    if inputs.len() != kinds.len() {
        return Err(format!(
            "got {} input buffers, expected {}",
            inputs.len(),
            kinds.len()
        ));
    }
    for (i, (buf, (kind, len))) in inputs.iter().zip(kinds.iter().zip(&lens)).enumerate() {
        if buf.kind() != *kind || buf.len() != *len {
            return Err(format!(
                "input {i} is {} with {} elements, expected {} with {len}",
                buf.kind().name(),
                buf.len(),
                kind.name()
            ));
        }
    }
    Ok(())
}

/// Compares `output` with the reference computed from `inputs`; never panics on bad buffers.
impl Problem {
    /// Compares `output` with the f64 reference computed from `inputs`; see this module.
    ///
    /// Defined with the problem, above the families whose references it asks for and the
    /// harness that compares.
    pub fn check(&self, inputs: &[Buffer], output: &Buffer) -> Validation {
        let total = self.output_len();
        if let Err(message) = check_inputs(self, inputs) {
            return Validation::failed(total as u64, message);
        }
        if output.kind() != self.output_kind() || output.len() != total {
            return Validation::failed(
                total as u64,
                format!(
                    "output is {} with {} elements, expected {} with {total}",
                    output.kind().name(),
                    output.len(),
                    self.output_kind().name()
                ),
            );
        }
        let family = self.kernel.id.family();
        let dims = family.output_dims(self);
        if let Buffer::F32(out) = output
            && let Some(i) = out.iter().position(|v| !v.is_finite())
        {
            return Validation::failed(
                total as u64,
                format!(
                    "element {}: got {} (non-finite output)",
                    format_index(i, &dims),
                    out[i]
                ),
            );
        }
        if let Some(whole) = family.validate(self, inputs, output) {
            return whole;
        }
        let Buffer::F32(out) = output else {
            return Validation::failed(
                total as u64,
                format!("{} output must be f32", self.kernel.name),
            );
        };
        let f32s: Vec<&[f32]> = inputs.iter().filter_map(Buffer::as_f32).collect();
        let mut cmp = Comparer::new(out, &dims);
        match family.visit(self, &f32s, &mut |i, e, t| cmp.expect(i, e, t)) {
            Ok(sampled) => cmp.finish(total, sampled),
            Err(message) => Validation::failed(total as u64, message),
        }
    }
}

impl SpecError {
    /// The error as a user who did not enable debug kernels should see it: an unknown-kernel list
    /// without the `debug_*` kernels (the suite parser and the coordinator accept them, since the
    /// agent decides, but never offer them for a misspelt name).
    pub fn without_debug_kernels(self) -> SpecError {
        match self {
            SpecError::UnknownKernel { name, known } => SpecError::UnknownKernel {
                name,
                known: known
                    .into_iter()
                    .filter(|k| find_kernel(k).is_none_or(|d| !d.debug))
                    .collect(),
            },
            e => e,
        }
    }
}

/// The kernel called `name`, or the error that lists the names accepted (the debug kernels'
/// only when `allow_debug`).
///
/// # Errors
/// [`SpecError::UnknownKernel`] for a name not in the catalog.
pub fn lookup_kernel(name: &str, allow_debug: bool) -> Result<&'static KernelDef, SpecError> {
    find_kernel(name).ok_or_else(|| SpecError::UnknownKernel {
        name: name.to_string(),
        known: catalog()
            .iter()
            .filter(|k| allow_debug || !k.debug)
            .map(|k| k.name.to_string())
            .collect(),
    })
}

#[cfg(test)]
mod tests;
