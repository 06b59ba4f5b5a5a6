//! The kernels: one module per family, each holding its kernels' whole definition — names,
//! variants, parameters and bounds, dtypes, metric, the backends that implement them (a table
//! entry per kernel), and what they compute (an implementation of [`Family`]: cross-parameter
//! rules, FLOP and byte counts, buffer sizes, input value sets, the f64 reference and its
//! tolerance).
//!
//! | family | [`KernelId`] | module |
//! | --- | --- | --- |
//! | dot products | `Gemm`, `Conv2d` | `dense.rs` |
//! | one output per input element | `Elementwise(ElementwiseKernel)` | `elementwise.rs` |
//! | a reduction then a map per row | `Rows(RowKernel)` | `rows.rs` |
//! | the CNNs and their layers | `Model(ModelKernel)` | `model.rs` (graphs in [`crate::model`]) |
//! | the transformer and its layers | `Llm(LlmKernel)` | `llm.rs` (graphs in [`crate::llm`]) |
//! | host memory | `Host(HostKernel)` | `host.rs` |
//! | a device's ceilings | `Ceiling(CeilingKernel)` | `ceilings.rs` |
//! | misbehaving on purpose | `Debug(DebugKernel)` | `debug.rs` |
//!
//! The tables are data, so the agent can advertise them in `Describe`, the coordinator can
//! validate a suite before any agent sees it, and a backend can tell which entries it implements.
//! [`Problem`] (a kernel with every parameter resolved) is defined here because the families
//! compute on it; validating a spec into one and the numbers derived from it are `problem.rs`.

mod ceilings;
mod debug;
mod dense;
mod elementwise;
mod group;
mod host;
mod llm;
mod model;
mod rows;

pub use ceilings::{
    CHAINS, CeilingKernel, CeilingSource, DEVICE_CEILINGS, DeviceCeiling, INT8_DOT, PEAK_CONSTANTS,
    PEAK_VARIANTS, RoofPart, TRANSFER_VARIANTS, peak_item_value, variant_arithmetic,
    variant_feature, variant_unit,
};
pub use debug::{DebugKernel, debug_noise_factor};
pub use dense::ConvShape;
pub use elementwise::{ElementwiseKernel, TRIAD_SCALAR};
pub use group::{ACHIEVED_GBPS, KernelGroup};
pub use host::HostKernel;
pub use llm::LlmKernel;
pub use model::ModelKernel;
pub use rows::{NORM_EPS, RowKernel, SplitStats};

use std::collections::BTreeMap;
use std::sync::LazyLock;

use crate::backend::BackendKind;
use crate::check::harness::Validation;
use crate::inputs::{UNIT, seeded};
use crate::model::Net;
use crate::types::{Buffer, BufferKind, Dtype, MetricKind};

/// Which kernel a [`KernelDef`] describes, by family; matched on by backends to pick an
/// implementation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelId {
    /// `gemm`: C = A·B.
    Gemm,
    /// `conv2d`: NCHW direct convolution with zero padding.
    Conv2d,
    /// One output element per input element (see [`ElementwiseKernel`]).
    Elementwise(ElementwiseKernel),
    /// A reduction then a map per row (see [`RowKernel`]).
    Rows(RowKernel),
    /// A CNN or one of its layers, run as a graph of layers (see [`ModelKernel`] and `model`).
    Model(ModelKernel),
    /// A transformer or one of its layers, run as a graph of steps (see [`LlmKernel`] and `llm`).
    Llm(LlmKernel),
    /// Host memory bandwidth and latency, only on the cpu backend (see [`HostKernel`]).
    Host(HostKernel),
    /// A device's ceilings: peak arithmetic per type (see [`CeilingKernel`]).
    Ceiling(CeilingKernel),
    /// Misbehaves on purpose to exercise isolation and validation (see [`DebugKernel`]).
    Debug(DebugKernel),
}

/// One integer parameter of a kernel, with its default and inclusive bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamDef {
    /// Name as written in specs and suites (`"n"`, `"rows"`).
    pub name: &'static str,
    /// Value used when a spec omits the parameter.
    pub default: i64,
    /// Smallest accepted value.
    pub min: i64,
    /// Largest accepted value (a sanity bound; the agent checks device memory separately).
    pub max: i64,
    /// One-line meaning, shown by `Describe` and the CLI.
    pub doc: &'static str,
    /// Names of the values `0..names.len()` for a parameter that picks one of a list (`model`:
    /// `tiny`, `small`, `1b`, `8b`); empty for a number. Specs may give the name or the index;
    /// spec keys show the name.
    pub names: &'static [&'static str],
    /// Other names accepted for some of those values (`llama-3.2-1b` for `1b`), never shown.
    pub aliases: &'static [(&'static str, i64)],
    /// Other names of the parameter itself (`shape` for `model`): accepted in specs and suites,
    /// stored and shown under [`ParamDef::name`].
    pub also: &'static [&'static str],
    /// Left out of a problem's parameters while at its default (so of its spec key and its stored
    /// results too): a parameter added to a kernel without changing the keys of its earlier specs
    /// (`llm`'s `dim`, `layers`: 0, the model's).
    pub optional: bool,
}

impl ParamDef {
    /// This parameter, [optional](ParamDef::optional).
    pub(crate) const fn optional(self) -> ParamDef {
        ParamDef {
            optional: true,
            ..self
        }
    }

    /// `text` as this parameter's value: an integer, or one of its [`ParamDef::names`].
    ///
    /// # Errors
    /// Neither, naming the parameter and its names.
    pub fn parse_value(&self, text: &str) -> Result<i64, String> {
        if let Ok(v) = text.trim().parse::<i64>() {
            return Ok(v);
        }
        if let Some(i) = self.names.iter().position(|n| *n == text.trim()) {
            return Ok(i as i64);
        }
        if let Some((_, v)) = self.aliases.iter().find(|(n, _)| *n == text.trim()) {
            return Ok(*v);
        }
        if self.names.is_empty() {
            Err(format!(
                "{}={}: the value must be an integer",
                self.name,
                crate::error::quote(text)
            ))
        } else {
            Err(format!(
                "{}={}: the value must be one of {} (or its index)",
                self.name,
                crate::error::quote(text),
                self.names.join(", ")
            ))
        }
    }

    /// Value `v` as written in spec keys: its name when the parameter has names.
    pub fn show(&self, v: i64) -> String {
        usize::try_from(v)
            .ok()
            .and_then(|i| self.names.get(i))
            .map_or_else(|| v.to_string(), |n| (*n).to_string())
    }
}

/// Everything static about one kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelDef {
    /// Identity for matching in code.
    pub id: KernelId,
    /// Name in specs, suites and spec keys.
    pub name: &'static str,
    /// One-line description for `Describe` and reports.
    pub description: &'static str,
    /// Implementation strategies a backend may offer; all compute the same result.
    pub variants: &'static [&'static str],
    /// Variant used when a spec leaves it empty.
    pub default_variant: &'static str,
    /// Integer parameters, in display order.
    pub params: &'static [ParamDef],
    /// Dtypes the kernel is defined for.
    pub dtypes: &'static [Dtype],
    /// Headline number derived from the median time.
    pub metric: MetricKind,
    /// Only meaningful on the host (`membw_cpu`, `memlat_cpu`): only the cpu backend runs it.
    pub host_only: bool,
    /// Misbehaves on purpose (`debug_*`): only available when the agent enables debug kernels.
    pub debug: bool,
    /// The backends that implement it (each lists it in its support list; a backend may still
    /// lack a dtype or variant of it on a given device).
    pub backends: &'static [BackendKind],
}

impl KernelDef {
    /// The parameter called `name` or, as another name of it ([`ParamDef::also`]), answering to it.
    pub fn param(&self, name: &str) -> Option<&'static ParamDef> {
        self.params
            .iter()
            .find(|p| p.name == name || p.also.contains(&name))
    }
}

/// Every backend: the device kernels.
pub(crate) const EVERY_BACKEND: &[BackendKind] = &BackendKind::ALL;
/// The host kernels and those that crash or exhaust their worker.
pub(crate) const CPU_ONLY: &[BackendKind] = &[BackendKind::Cpu];
pub(crate) const F32_ONLY: &[Dtype] = &[Dtype::F32];
/// f32, or f16 storage with f32 arithmetic.
pub(crate) const F32_F16: &[Dtype] = &[Dtype::F32, Dtype::F16];
/// f32, f16 and the quantized weights (`gemv`, `llm`).
pub(crate) const F32_F16_QUANT: &[Dtype] = &Dtype::ALL;
const DEFAULT_VARIANT: &[&str] = &["default"];

/// A parameter definition.
pub(crate) const fn p(
    name: &'static str,
    default: i64,
    min: i64,
    max: i64,
    doc: &'static str,
) -> ParamDef {
    ParamDef {
        name,
        default,
        min,
        max,
        doc,
        names: &[],
        aliases: &[],
        also: &[],
        optional: false,
    }
}

/// A parameter that picks one of `names` (its values are their indices, `aliases` other names
/// for some), `default` the index of the default; `also` other names of the parameter.
pub(crate) const fn named(
    name: &'static str,
    also: &'static [&'static str],
    default: i64,
    names: &'static [&'static str],
    aliases: &'static [(&'static str, i64)],
    doc: &'static str,
) -> ParamDef {
    ParamDef {
        name,
        default,
        min: 0,
        max: names.len() as i64 - 1,
        doc,
        names,
        aliases,
        also,
        optional: false,
    }
}

/// The parameters of a kernel over NCHW images, in display order: `batch` (1 to `batch_max`),
/// `channels` (its default and doc), then the plane's `height` and `width` (default `side`, at
/// most `side_max`, with their docs).
pub(crate) const fn nchw(
    batch_max: i64,
    (channels, channels_doc): (i64, &'static str),
    (side, side_max): (i64, i64),
    [height_doc, width_doc]: [&'static str; 2],
) -> [ParamDef; 4] {
    [
        p("batch", 1, 1, batch_max, "images (N)"),
        p("channels", channels, 1, 4096, channels_doc),
        p("height", side, 1, side_max, height_doc),
        p("width", side, 1, side_max, width_doc),
    ]
}

/// `stride` in both directions, 1 to 4.
pub(crate) const fn stride(default: i64) -> ParamDef {
    p("stride", default, 1, 4, "stride in both directions")
}

/// `first` then `rest`: a kernel's parameter list from shared pieces (`N` is their total).
pub(crate) const fn join<const A: usize, const B: usize, const N: usize>(
    first: [ParamDef; A],
    rest: [ParamDef; B],
) -> [ParamDef; N] {
    assert!(A > 0 && A + B == N, "N must be the length of both parts");
    let mut out = [first[0]; N];
    let mut i = 0;
    while i < N {
        out[i] = if i < A { first[i] } else { rest[i - A] };
        i += 1;
    }
    out
}

/// An f32 device kernel with one variant, `default`, on every backend (debug and host-only
/// entries override the flags and the backends).
pub(crate) const fn default_variant_def(
    id: KernelId,
    name: &'static str,
    description: &'static str,
    params: &'static [ParamDef],
    metric: MetricKind,
) -> KernelDef {
    KernelDef {
        id,
        name,
        description,
        variants: DEFAULT_VARIANT,
        default_variant: "default",
        params,
        dtypes: F32_ONLY,
        metric,
        host_only: false,
        debug: false,
        backends: EVERY_BACKEND,
    }
}

/// A kernel with a resolved variant, every parameter and a dtype, all validated
/// ([`Problem::new`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// The catalog entry.
    pub kernel: &'static KernelDef,
    /// Resolved variant (never empty).
    pub variant: String,
    /// Every parameter of the kernel, defaults filled in (an [optional](ParamDef::optional) one only
    /// when it is not at its default).
    pub params: BTreeMap<String, i64>,
    /// Resolved dtype.
    pub dtype: Dtype,
}

impl Problem {
    /// The kernel's identity.
    pub fn id(&self) -> KernelId {
        self.kernel.id
    }

    /// Value of parameter `name` (an [optional](ParamDef::optional) one left out: its default).
    ///
    /// # Panics
    /// Only if `name` is not a parameter of the kernel, which is a programming error.
    pub fn param(&self, name: &str) -> i64 {
        match (self.params.get(name), self.kernel.param(name)) {
            (Some(v), _) => *v,
            (None, Some(d)) if d.optional => d.default,
            _ => panic!("kernel {} has no param `{name}`", self.kernel.name),
        }
    }

    /// A parameter as `usize`; parameters are validated non-negative.
    pub(crate) fn uparam(&self, name: &str) -> usize {
        usize::try_from(self.param(name)).unwrap_or(0)
    }

    /// A parameter as `u128`, for sizes computed without overflow.
    pub(crate) fn wparam(&self, name: &str) -> u128 {
        u128::try_from(self.param(name)).unwrap_or(0)
    }

    /// A parameter as `f64`, for FLOP and byte counts.
    pub(crate) fn fparam(&self, name: &str) -> f64 {
        self.param(name) as f64
    }

    /// Every parameter as `name=value`, sorted by name, comma-separated (`"k=1024,m=1024,n=1024"`).
    pub fn params_string(&self) -> String {
        self.params
            .iter()
            .map(|(k, v)| match self.kernel.param(k) {
                Some(d) => format!("{k}={}", d.show(*v)),
                None => format!("{k}={v}"),
            })
            .collect::<Vec<_>>()
            .join(",")
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

    /// A parameter's output size must be at least one: a `ksize` window with `pad` on each side
    /// must fit the input at least once (conv2d, cnn_maxpool).
    pub(crate) fn window_fits(&self) -> Result<(), String> {
        let (k, pad) = (self.param("ksize"), self.param("pad"));
        for dim in ["height", "width"] {
            let size = self.param(dim);
            if size + 2 * pad < k {
                return Err(format!(
                    "output {dim} would be below 1: {dim}={size} + 2·pad={pad} is smaller than ksize={k}"
                ));
            }
        }
        Ok(())
    }
}

/// Where a reference visitor sends each element: `f(index, expected, tolerance)`.
pub(crate) type Visit<'a> = &'a mut dyn FnMut(usize, f64, f64);

/// What a family of kernels computes: everything a [`Problem`], its inputs and its validation
/// ask of a kernel, implemented once per family (with a `match` over the family's kernels where
/// they differ). [`KernelId::family`] is the one place that dispatches to it.
pub(crate) trait Family: Sync {
    /// Rules that involve several parameters: why the problem is refused, naming them.
    fn check_params(&self, _p: &Problem) -> Result<(), String> {
        Ok(())
    }

    /// Floating-point operations per iteration (0 for copies, noop and the latency kernels).
    fn flops(&self, p: &Problem) -> f64;

    /// Bytes moved per iteration, the numerator of GB/s.
    fn bytes(&self, p: &Problem) -> f64;

    /// Input lengths in elements, in input order, computed without overflow.
    fn input_lens(&self, p: &Problem) -> Vec<u128>;

    /// Output length in elements, computed without overflow.
    fn output_len(&self, p: &Problem) -> u128;

    /// Element kind of every input and of the output (u32 only for the pointer chase), but the
    /// [`Family::packed_input`] and the [`Family::half_input`].
    fn elem(&self) -> BufferKind {
        BufferKind::F32
    }

    /// The input held packed ([`Buffer::Packed`]: a quantized transformer's weights), if any:
    /// its index and its bytes.
    fn packed_input(&self, _p: &Problem) -> Option<(usize, u128)> {
        None
    }

    /// The input held as half words ([`Buffer::Half`]: an f16 transformer's weights), if any.
    fn half_input(&self, _p: &Problem) -> Option<usize> {
        None
    }

    /// Output shape for messages (`[m, n]` for gemm, `[rows, cols]`, NCHW for conv2d).
    fn output_dims(&self, p: &Problem) -> Vec<usize> {
        vec![usize::try_from(self.output_len(p)).unwrap_or(usize::MAX)]
    }

    /// The network a model kernel runs; `None` for every other family.
    fn net(&self, _p: &Problem) -> Option<Net> {
        None
    }

    /// The graph of steps a transformer kernel runs; `None` for every other family.
    fn llm(&self, _p: &Problem) -> Option<crate::llm::LlmGraph> {
        None
    }

    /// Tokens one iteration processes (the `tokens_per_s` metric); 0 for other families.
    fn tokens(&self, _p: &Problem) -> f64 {
        0.0
    }

    /// Bytes of every buffer on the device, when they are not all of the dtype's size.
    fn footprint(&self, _p: &Problem) -> Option<u128> {
        None
    }

    /// Bytes of a model's weights as stored in the dtype, for kernels with weights to show.
    fn weight_bytes(&self, _p: &Problem) -> Option<u128> {
        None
    }

    /// Seeded inputs (see `inputs.rs`); every input from [`UNIT`] unless the family says
    /// otherwise.
    fn make_inputs(&self, p: &Problem, seed: u64) -> Vec<Buffer> {
        let lens = lens(&self.input_lens(p));
        seeded(&vec![UNIT; lens.len()], &lens, seed)
    }

    /// A validation of its own for an output whose kind and length are right and that has no
    /// NaN/Inf (the networks, layer by layer; the pointer chase, exactly); `None`: compare the
    /// output with [`Family::visit`]'s reference.
    fn validate(&self, _p: &Problem, _inputs: &[Buffer], _output: &Buffer) -> Option<Validation> {
        None
    }

    /// Whether the device's output buffer must start zeroed because some of it is written by no
    /// launch (a transformer's arena: a cache's unused positions), for validation's NaN scan.
    fn zeroed_output(&self) -> bool {
        false
    }

    /// The arithmetic whose peak a result's FLOP/s are measured against: the dtype, except where
    /// f16 is storage only (see [`KernelId::f16_is_storage`]) or the variant picks the type;
    /// `None` where the device tables hold no peak for it.
    fn arithmetic(&self, p: &Problem) -> Option<Dtype> {
        Some(if p.id().f16_is_storage() {
            Dtype::F32
        } else {
            p.dtype
        })
    }

    /// Whether the device's theoretical peaks bound this kernel (not a host transfer's: the link
    /// or the copy engine does, and the peak tables do not hold it).
    fn has_device_peak(&self) -> bool {
        true
    }

    /// Whether a result also records the memory bandwidth it achieved in its configuration
    /// ([`ACHIEVED_GBPS`]: a roofline point is both a rate of arithmetic and of memory traffic).
    fn records_bandwidth(&self) -> bool {
        false
    }

    /// Visits the f64 reference of `x` (the f32 inputs): `f(index, expected, tolerance)` for
    /// every element, or for a sample when the full reference costs too much; returns whether it
    /// sampled, or why the reference cannot be computed.
    ///
    /// # Errors
    /// A message when the inputs cannot have a reference (a u32 output).
    fn visit(&self, p: &Problem, x: &[&[f32]], f: Visit<'_>) -> Result<bool, String>;

    /// The whole reference output rounded to the output's kind: what a perfect backend returns
    /// (tests only).
    #[cfg(test)]
    fn reference(&self, p: &Problem, inputs: &[Buffer]) -> Buffer {
        let f32s: Vec<&[f32]> = inputs.iter().filter_map(Buffer::as_f32).collect();
        let mut out = vec![f32::NAN; lens(&[self.output_len(p)])[0]];
        let sampled = self
            .visit(p, &f32s, &mut |i, e, _| out[i] = e as f32)
            .expect("a reference");
        assert!(!sampled, "{}: the test problem is too large", p.kernel.name);
        Buffer::F32(out)
    }
}

/// Sizes computed without overflow as `usize` (saturating: such a problem is refused for its
/// footprint before anything is allocated).
pub(crate) fn lens(sizes: &[u128]) -> Vec<usize> {
    sizes
        .iter()
        .map(|&l| usize::try_from(l).unwrap_or(usize::MAX))
        .collect()
}

impl KernelId {
    /// The family that computes this kernel.
    pub(crate) fn family(&self) -> &dyn Family {
        match self {
            KernelId::Gemm => &dense::Dense::Gemm,
            KernelId::Conv2d => &dense::Dense::Conv2d,
            KernelId::Elementwise(k) => k,
            KernelId::Rows(k) => k,
            KernelId::Model(k) => k,
            KernelId::Llm(k) => k,
            KernelId::Host(k) => k,
            KernelId::Ceiling(k) => k,
            KernelId::Debug(k) => k,
        }
    }
}

/// Every family's table in display order: the GEMM, the STREAM kernels and noop, the row kernels,
/// conv2d, the activations, the networks and their layers, the host kernels, the debug kernels.
static CATALOG: LazyLock<Vec<KernelDef>> = LazyLock::new(|| {
    let mut out = vec![dense::GEMM];
    out.extend(elementwise::MEMORY.iter().map(|e| e.def.clone()));
    out.extend(rows::TABLE.iter().map(|e| e.def.clone()));
    out.push(dense::CONV2D);
    out.extend(elementwise::ACTIVATIONS.iter().map(|e| e.def.clone()));
    out.extend(model::TABLE.iter().cloned());
    out.extend(llm::TABLE.iter().cloned());
    out.extend(ceilings::TABLE.iter().cloned());
    out.extend(host::TABLE.iter().cloned());
    out.extend(debug::TABLE.iter().cloned());
    out
});

/// Value `v` of the parameter called `name` as people write it: its name for a parameter that has
/// names (`model`: `1b`), else the number. Parameter names with names are the same list in every
/// kernel that has them, so the kernel need not be known (stored specs, compare tables).
pub fn show_param(name: &str, v: i64) -> String {
    NAMED_PARAMS
        .iter()
        .find(|p| p.name == name)
        .map_or_else(|| v.to_string(), |p| p.show(v))
}

/// The parameters that have names, once: [`show_param`] runs for every parameter of every row a
/// listing prints.
static NAMED_PARAMS: LazyLock<Vec<&'static ParamDef>> = LazyLock::new(|| {
    CATALOG
        .iter()
        .flat_map(|k| k.params)
        .filter(|p| !p.names.is_empty())
        .collect()
});

/// Every kernel, debug ones included, in display order.
pub fn catalog() -> &'static [KernelDef] {
    &CATALOG
}

/// The kernel named `name` (exact match), debug ones included.
pub fn find_kernel(name: &str) -> Option<&'static KernelDef> {
    CATALOG.iter().find(|k| k.name == name)
}

/// Helpers the families' tests share.
#[cfg(test)]
pub(crate) mod testing {
    use super::Problem;

    /// `kernel` (debug kernels allowed) with `params` over its defaults, in f32.
    pub(crate) fn problem(kernel: &str, params: &[(&str, i64)]) -> Problem {
        let params = params.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        Problem::new(kernel, "", &params, "f32", true).unwrap()
    }

    /// Every reference value of `p` on `inputs` (which must not need sampling).
    pub(crate) fn reference(p: &Problem, inputs: &[Vec<f32>]) -> Vec<f64> {
        let x: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();
        let mut out = vec![f64::NAN; p.output_len()];
        let sampled = p.kernel.id.family().visit(p, &x, &mut |i, e, _| out[i] = e);
        assert!(!sampled.unwrap());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn names_and_ids_are_unique() {
        let names: HashSet<_> = catalog().iter().map(|k| k.name).collect();
        let ids: HashSet<_> = catalog().iter().map(|k| k.id).collect();
        assert_eq!(names.len(), catalog().len());
        assert_eq!(ids.len(), catalog().len());
    }

    #[test]
    fn every_kernel_of_every_family_has_one_entry() {
        let ids: Vec<KernelId> = [KernelId::Gemm, KernelId::Conv2d]
            .into_iter()
            .chain(ElementwiseKernel::ALL.map(KernelId::Elementwise))
            .chain(RowKernel::ALL.map(KernelId::Rows))
            .chain(ModelKernel::ALL.map(KernelId::Model))
            .chain(LlmKernel::ALL.map(KernelId::Llm))
            .chain(HostKernel::ALL.map(KernelId::Host))
            .chain(CeilingKernel::ALL.map(KernelId::Ceiling))
            .chain(DebugKernel::ALL.map(KernelId::Debug))
            .collect();
        assert_eq!(ids.len(), catalog().len());
        for id in ids {
            assert!(catalog().iter().any(|k| k.id == id), "{id:?} has no entry");
        }
    }

    #[test]
    fn defaults_are_within_bounds_and_variants_consistent() {
        for k in catalog() {
            assert!(
                k.variants.contains(&k.default_variant),
                "{}: default variant not listed",
                k.name
            );
            assert!(!k.dtypes.is_empty(), "{}", k.name);
            for p in k.params {
                assert!(
                    p.min <= p.default && p.default <= p.max,
                    "{}.{}: default {} outside {}..={}",
                    k.name,
                    p.name,
                    p.default,
                    p.min,
                    p.max
                );
            }
        }
    }

    #[test]
    fn find_kernel_matches_exact_names_only() {
        assert_eq!(find_kernel("gemm").map(|k| k.id), Some(KernelId::Gemm));
        assert_eq!(
            find_kernel("debug_wrong").map(|k| k.id),
            Some(KernelId::Debug(DebugKernel::Wrong))
        );
        assert!(find_kernel("GEMM").is_none());
        assert!(find_kernel("gemmm").is_none());
    }

    #[test]
    fn flags_match_the_kernel_kind() {
        let host_only: Vec<_> = catalog()
            .iter()
            .filter(|k| k.host_only)
            .map(|k| k.name)
            .collect();
        assert_eq!(host_only, ["membw_cpu", "memlat_cpu"]);
        let debug: Vec<_> = catalog()
            .iter()
            .filter(|k| k.debug)
            .map(|k| k.name)
            .collect();
        assert_eq!(
            debug,
            [
                "debug_crash",
                "debug_hang",
                "debug_wrong",
                "debug_alloc",
                "debug_noise"
            ]
        );
    }

    #[test]
    fn only_the_cpu_runs_host_and_crashing_kernels() {
        for k in catalog() {
            let cpu_only = k.host_only || (k.debug && k.name != "debug_wrong");
            // The transformer kernels: the backends that implement them so far.
            let expected = if matches!(k.id, KernelId::Llm(_)) {
                llm::LLM_BACKENDS
            } else if cpu_only {
                CPU_ONLY
            } else {
                EVERY_BACKEND
            };
            assert_eq!(k.backends, expected, "{}", k.name);
        }
    }
}
