//! The element-wise kernels: one output element per input element (STREAM-style add, copy and
//! triad, the activations) and noop, which copies one element to measure launch latency. One
//! table entry per kernel holds its whole definition: catalog entry, device entry-point stem,
//! inputs and their value set, FLOP and byte counts per element, and its f64 reference with the
//! tolerance.
//!
//! The arithmetic ones are exact on our inputs (sums of multiples of 1/256), so they get a few ulps;
//! sigmoid, tanh and gelu get `1e-5` absolute plus relative, which admits GPUs' fast transcendental
//! functions.
//! Large vectors are sampled in contiguous blocks so the sample stays cache-friendly.

use super::{Family, KernelDef, KernelId, ParamDef, Problem, Visit, default_variant_def, p};
use crate::check::harness::{EPS32, Plan, SAMPLE_OPS, pick};
use crate::inputs::{UNIT, ValueSet, WIDE, seeded};
use crate::types::{Buffer, MetricKind};

/// Scalar of the STREAM triad `a = b + SCALAR·c`.
pub const TRIAD_SCALAR: f32 = 3.0;

/// The element-wise kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElementwiseKernel {
    /// `vec_add`: c = a + b.
    VecAdd,
    /// `copy`: b = a.
    Copy,
    /// `triad`: a = b + 3·c (STREAM triad).
    Triad,
    /// `noop`: `out[0] = in[0]`; measures launch latency.
    Noop,
    /// `relu`: max(x, 0).
    Relu,
    /// `sigmoid`: 1 / (1 + e^-x).
    Sigmoid,
    /// `tanh`: tanh(x).
    Tanh,
    /// `gelu`: GELU with PyTorch's `approximate="tanh"`, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
    Gelu,
}

/// One element-wise kernel's definition.
pub(super) struct Entry {
    kernel: ElementwiseKernel,
    /// Its catalog entry.
    pub(super) def: KernelDef,
    /// Input buffers read.
    inputs: usize,
    /// Values of every input.
    values: ValueSet,
    /// FLOPs per element.
    flops: f64,
    /// Bytes moved per element.
    bytes: f64,
    /// A scalar argument of the device code (triad's).
    scalar: Option<f32>,
    /// Reference operations per element, for the full-or-sample decision.
    cost: f64,
    /// The reference value of element `j` from the inputs, and its tolerance.
    reference: fn(&[&[f32]], usize) -> (f64, f64),
}

const N_PARAMS: &[ParamDef] = &[p("n", 1 << 20, 1, 1 << 30, "elements per vector")];

/// An entry over `n` elements measured in GB/s.
#[allow(clippy::too_many_arguments)]
const fn make(
    kernel: ElementwiseKernel,
    name: &'static str,
    description: &'static str,
    inputs: usize,
    values: ValueSet,
    (flops, bytes, cost): (f64, f64, f64),
    scalar: Option<f32>,
    reference: fn(&[&[f32]], usize) -> (f64, f64),
) -> Entry {
    Entry {
        kernel,
        def: default_variant_def(
            KernelId::Elementwise(kernel),
            name,
            description,
            N_PARAMS,
            MetricKind::Gbps,
        ),
        inputs,
        values,
        flops,
        bytes,
        scalar,
        cost,
        reference,
    }
}

use ElementwiseKernel as E;

/// The STREAM-style kernels and noop, in display order.
pub(super) static MEMORY: [Entry; 4] = [
    make(
        E::VecAdd,
        "vec_add",
        "c = a + b",
        2,
        UNIT,
        (1.0, 12.0, 1.0),
        None,
        sum,
    ),
    make(
        E::Copy,
        "copy",
        "b = a (STREAM copy)",
        1,
        UNIT,
        (0.0, 8.0, 1.0),
        None,
        same,
    ),
    make(
        E::Triad,
        "triad",
        "a = b + 3·c (STREAM triad)",
        2,
        UNIT,
        (2.0, 12.0, 1.0),
        Some(TRIAD_SCALAR),
        triad,
    ),
    // One element, no `n`: FLOPs and bytes are 0, and the metric is the launch's time.
    Entry {
        def: default_variant_def(
            KernelId::Elementwise(E::Noop),
            "noop",
            "out[0] = in[0]; measures launch latency",
            &[],
            MetricKind::Micros,
        ),
        ..make(E::Noop, "noop", "", 1, UNIT, (0.0, 0.0, 1.0), None, same)
    },
];

/// The activations, in display order; their inputs span the wider range where they bend.
pub(super) static ACTIVATIONS: [Entry; 4] = [
    make(
        E::Relu,
        "relu",
        "y = max(x, 0)",
        1,
        WIDE,
        (1.0, 8.0, 1.0),
        None,
        relu,
    ),
    make(
        E::Sigmoid,
        "sigmoid",
        "y = 1 / (1 + e^-x)",
        1,
        WIDE,
        (4.0, 8.0, 10.0),
        None,
        sigmoid,
    ),
    make(
        E::Tanh,
        "tanh",
        "y = tanh(x)",
        1,
        WIDE,
        (6.0, 8.0, 10.0),
        None,
        tanh,
    ),
    // The cubic and its scaling (5 FLOPs), tanh as above (6), then 1 +, ·x and ·0.5.
    make(
        E::Gelu,
        "gelu",
        "y = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (PyTorch's approximate=\"tanh\")",
        1,
        WIDE,
        (14.0, 8.0, 15.0),
        None,
        gelu,
    ),
];

fn at(x: &[&[f32]], i: usize, j: usize) -> f64 {
    f64::from(x[i][j])
}

/// Four ulps of `v` in f32, with a floor so an exact zero still has a non-zero tolerance.
pub(super) fn ulps(v: f64) -> f64 {
    8.0 * EPS32 * v.abs() + f64::from(f32::MIN_POSITIVE)
}

fn transcendental(v: f64) -> f64 {
    1e-5 + 1e-5 * v.abs()
}

fn sum(x: &[&[f32]], j: usize) -> (f64, f64) {
    let v = at(x, 0, j) + at(x, 1, j);
    (v, ulps(v))
}

pub(super) fn same(x: &[&[f32]], j: usize) -> (f64, f64) {
    (at(x, 0, j), ulps(at(x, 0, j)))
}

fn triad(x: &[&[f32]], j: usize) -> (f64, f64) {
    let v = at(x, 0, j) + f64::from(TRIAD_SCALAR) * at(x, 1, j);
    (v, ulps(v))
}

fn relu(x: &[&[f32]], j: usize) -> (f64, f64) {
    let v = at(x, 0, j).max(0.0);
    (v, ulps(v))
}

fn sigmoid(x: &[&[f32]], j: usize) -> (f64, f64) {
    let v = 1.0 / (1.0 + (-at(x, 0, j)).exp());
    (v, transcendental(v))
}

fn tanh(x: &[&[f32]], j: usize) -> (f64, f64) {
    let v = at(x, 0, j).tanh();
    (v, transcendental(v))
}

/// √(2/π), the scale inside gelu's tanh.
const GELU_SCALE: f64 = 0.797_884_560_802_865_4;
/// The cubic term's coefficient of gelu's tanh approximation.
const GELU_CUBIC: f64 = 0.044_715;

/// PyTorch's formula as written, with tanh's tolerance: the tanh (or the exponential in
/// 0.5·(1 + tanh(u)) = 1 / (1 + e^-2u), the devices' form) is what the backends approximate. In f64
/// `1 + tanh(u)` cancels as x goes negative, but at the inputs' -4 it still holds 11 digits.
fn gelu(x: &[&[f32]], j: usize) -> (f64, f64) {
    let v = at(x, 0, j);
    let y = 0.5 * v * (1.0 + (GELU_SCALE * (v + GELU_CUBIC * v * v * v)).tanh());
    (y, transcendental(y))
}

impl ElementwiseKernel {
    /// Every element-wise kernel.
    pub const ALL: [ElementwiseKernel; 8] = [
        E::VecAdd,
        E::Copy,
        E::Triad,
        E::Noop,
        E::Relu,
        E::Sigmoid,
        E::Tanh,
        E::Gelu,
    ];

    fn entry(self) -> &'static Entry {
        match MEMORY.iter().chain(&ACTIVATIONS).find(|e| e.kernel == self) {
            Some(e) => e,
            None => unreachable!("every element-wise kernel has an entry (tested)"),
        }
    }

    /// Device entry-point stem, the kernel's name (`vec_add`): `<stem>_f32` in OpenCL C and HIP,
    /// the shader `<stem>` in Vulkan.
    pub fn stem(self) -> &'static str {
        self.entry().def.name
    }

    /// Input buffers read, before the output.
    pub fn inputs(self) -> usize {
        self.entry().inputs
    }

    /// The scalar argument its device code takes after the buffers (triad's), if any.
    pub fn scalar(self) -> Option<f32> {
        self.entry().scalar
    }

    /// Elements it runs over in `problem` (its parameter `n`); `None` for noop, which copies one
    /// element with one work-item.
    pub fn elements(self, problem: &Problem) -> Option<usize> {
        self.sized().then(|| problem.uparam("n"))
    }

    fn sized(self) -> bool {
        self.entry().def.param("n").is_some()
    }

    fn len(self, p: &Problem) -> u128 {
        if self.sized() { p.wparam("n") } else { 1 }
    }
}

impl Family for ElementwiseKernel {
    fn flops(&self, p: &Problem) -> f64 {
        self.entry().flops * self.len(p) as f64
    }

    fn bytes(&self, p: &Problem) -> f64 {
        self.entry().bytes * self.len(p) as f64
    }

    fn input_lens(&self, p: &Problem) -> Vec<u128> {
        vec![self.len(p); self.inputs()]
    }

    fn output_len(&self, p: &Problem) -> u128 {
        self.len(p)
    }

    fn make_inputs(&self, p: &Problem, seed: u64) -> Vec<Buffer> {
        let lens = super::lens(&self.input_lens(p));
        seeded(&vec![self.entry().values; lens.len()], &lens, seed)
    }

    fn visit(&self, p: &Problem, x: &[&[f32]], f: Visit<'_>) -> Result<bool, String> {
        let e = self.entry();
        let n = super::lens(&[self.len(p)])[0];
        Ok(each(p, n, e.cost, f, |j| (e.reference)(x, j)))
    }
}

/// Elements per sampled block.
const BLOCK: usize = 1024;

/// Feeds `reference(j)` for each of the `n` elements, or for sampled blocks when `ops` per element
/// times `n` is too expensive; returns whether it sampled.
pub(super) fn each(
    problem: &Problem,
    n: usize,
    ops: f64,
    f: Visit<'_>,
    reference: impl Fn(usize) -> (f64, f64),
) -> bool {
    match Plan::for_cost(&problem.spec_key_prefix(), ops * n as f64) {
        Plan::Full => {
            for j in 0..n {
                let (v, tol) = reference(j);
                f(j, v, tol);
            }
            false
        }
        Plan::Sampled(mut rng) => {
            let blocks = n.div_ceil(BLOCK);
            let count = ((SAMPLE_OPS / (ops * BLOCK as f64)) as usize).max(2);
            for block in pick(&mut rng, blocks, count, &[0, blocks - 1]) {
                for j in block * BLOCK..((block + 1) * BLOCK).min(n) {
                    let (v, tol) = reference(j);
                    f(j, v, tol);
                }
            }
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{problem, reference};
    use super::*;

    #[test]
    fn elementwise_definitions() {
        let a = vec![-1.0, 0.5, 2.0];
        let b = vec![0.25, 0.25, -4.0];
        let n = [("n", 3)];
        assert_eq!(
            reference(&problem("vec_add", &n), &[a.clone(), b.clone()]),
            [-0.75, 0.75, -2.0]
        );
        assert_eq!(
            reference(&problem("triad", &n), &[a.clone(), b]),
            [-0.25, 1.25, -10.0]
        );
        assert_eq!(
            reference(&problem("copy", &n), std::slice::from_ref(&a)),
            [-1.0, 0.5, 2.0]
        );
        assert_eq!(
            reference(&problem("relu", &n), std::slice::from_ref(&a)),
            [0.0, 0.5, 2.0]
        );
        let s = reference(&problem("sigmoid", &n), std::slice::from_ref(&a));
        assert!((s[0] - 0.268_941_421_369_995_1).abs() < 1e-12);
        let t = reference(&problem("tanh", &n), std::slice::from_ref(&a));
        assert!((t[2] - 0.964_027_580_075_817).abs() < 1e-12);
        // gelu(-1) = -0.5·(1 - tanh(0.833562)), gelu(0.5) = 0.25·(1 + tanh(0.403402)),
        // gelu(2) = 1 + tanh(1.881188) (√(2/π)·(x + 0.044715·x³) for each).
        let g = reference(&problem("gelu", &n), &[a]);
        assert!((g[0] + 0.158_808_009_391_723).abs() < 1e-12, "{g:?}");
        assert!((g[1] - 0.345_714_009_825_144).abs() < 1e-12, "{g:?}");
        assert!((g[2] - 1.954_597_694_087_775).abs() < 1e-12, "{g:?}");
        assert_eq!(reference(&problem("noop", &[]), &[vec![0.75]]), [0.75]);
        assert_eq!(
            reference(
                &problem("membw_cpu", &[("n", 5)]),
                &[vec![1.0, 0.5, -0.25, 3.0, 0.0]]
            ),
            [4.25]
        );
    }

    #[test]
    fn every_kernel_has_one_entry_with_its_id() {
        for k in ElementwiseKernel::ALL {
            let e = k.entry();
            assert_eq!(e.def.id, KernelId::Elementwise(k));
        }
        assert_eq!(
            MEMORY.len() + ACTIVATIONS.len(),
            ElementwiseKernel::ALL.len()
        );
    }
}
