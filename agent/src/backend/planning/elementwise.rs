//! Element-wise kernels as every GPU planner launches them: the entry point, buffers and scalar
//! from the family's definition in the catalog, one vector of 4 per work-item.

use super::{Arg, Unsupported, buffers, int_args};
use gpufleet_kernels::{DebugKernel, ElementwiseKernel, Problem};
use std::collections::BTreeMap;

/// An element-wise kernel as every GPU planner launches it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Elementwise {
    /// Entry-point stem, from the family's definition (`vec_add`; debug_wrong is vec_add with a
    /// deliberate error).
    pub stem: &'static str,
    /// Input buffers read.
    pub inputs: usize,
    /// Elements; `None` for noop, which copies one element with one work-item.
    pub n: Option<usize>,
    /// triad's scalar.
    pub scalar: Option<f32>,
    /// The switch of device code that a debug kernel runs wrongly (vec_add's): `Some(true)` to
    /// answer wrong on purpose, `Some(false)` to answer right; `None` for device code without it.
    pub wrong: Option<bool>,
}

impl Elementwise {
    /// The configuration its plan records: the entry point (`("kernel", …)` or `("shader", …)`),
    /// the grid (`("global", work-items)` or `("groups", workgroups)`), the group size and, under
    /// `per_item`, the elements one work-item handles: one vector of 4, or 1 for noop.
    pub fn config(
        &self,
        entry: (&str, String),
        grid: (&str, usize),
        local: usize,
        per_item: &str,
    ) -> BTreeMap<String, String> {
        let per = if self.n.is_some() { "4" } else { "1" };
        crate::backend::config(&[
            entry,
            (grid.0, grid.1.to_string()),
            ("local", local.to_string()),
            (per_item, per.into()),
        ])
    }

    /// The kernel arguments of an OpenCL or HIP launch: the buffers, the scalar, then the element
    /// count as an `int` (`largest` names its bound: "OpenCL int argument").
    ///
    /// # Errors
    /// [`Unsupported`] when the element count exceeds an `int`.
    pub fn args(&self, problem: &Problem, largest: &str) -> Result<Vec<Arg>, Unsupported> {
        let mut args = buffers(self.inputs, Arg::Input, Arg::Output);
        args.extend(self.scalar.map(Arg::Float));
        if let Some(n) = self.n {
            args.extend(int_args(problem, &[("n", n)], largest, Arg::Int)?);
        }
        Ok(args)
    }
}

/// The launch of element-wise `kernel` for `problem`: the kernel itself, or the one a debug
/// kernel runs on devices (`wrong`: debug_wrong's deliberate error; see [`super::Route`]).
pub fn elementwise(problem: &Problem, kernel: ElementwiseKernel, wrong: bool) -> Elementwise {
    let switch = DebugKernel::ALL
        .iter()
        .any(|d| d.on_device() == Some(kernel));
    Elementwise {
        stem: kernel.stem(),
        inputs: kernel.inputs(),
        n: kernel.elements(problem),
        scalar: kernel.scalar(),
        wrong: switch.then_some(wrong),
    }
}
