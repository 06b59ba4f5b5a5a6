//! Which planner a catalog kernel needs on a GPU: the one place the GPU planners learn what a
//! kernel is. Each backend's `plan` matches on [`Route`] (exhaustively) and maps each route onto
//! its API; it never matches on the catalog's kernel ids, so a new kernel of an existing family
//! needs no planner change, and a new family is named here first.

use super::Unsupported;
use super::ceilings::transfer_has_no_plan;
use super::elementwise::{Elementwise, elementwise};
use gpufleet_kernels::llm::LlmGraph;
use gpufleet_kernels::{CeilingKernel, KernelId, Problem, RowKernel};

/// The conv2d variant that lowers to im2col and a GEMM.
const IM2COL: &str = "im2col";

/// What a GPU planner builds for a problem.
#[derive(Debug, Clone)]
pub enum Route {
    /// The GEMM (its variants are the planner's).
    Gemm,
    /// conv2d: `im2col` (lowered to a GEMM) or direct.
    Conv {
        /// The `im2col` variant.
        im2col: bool,
    },
    /// A row kernel.
    Rows(RowKernel),
    /// A network or one of its layers, its graph from the problem.
    Model,
    /// A transformer or one of its layers, as its graph of steps.
    Llm(LlmGraph),
    /// `compute_peak`: chains of fused multiply-adds in the variant's type.
    Peak,
    /// `roofline`: one point of the intensity sweep.
    Roofline,
    /// One launch over elements: an element-wise kernel, or a debug kernel run as one.
    Elementwise(Elementwise),
}

/// The route of `problem` on a GPU.
///
/// # Errors
/// [`Unsupported`] for a kernel no GPU planner builds: a transfer (each backend copies without a
/// plan), a host kernel, a debug kernel that does not run as an element-wise one, a transformer
/// kernel without a graph.
pub fn route(problem: &Problem) -> Result<Route, Unsupported> {
    let name = problem.kernel.name;
    let not_planned = || Unsupported(format!("kernel {name} has no GPU plan"));
    Ok(match problem.id() {
        KernelId::Gemm => Route::Gemm,
        KernelId::Conv2d => Route::Conv {
            im2col: problem.variant == IM2COL,
        },
        KernelId::Rows(k) => Route::Rows(k),
        KernelId::Model(_) => Route::Model,
        KernelId::Llm(_) => Route::Llm(
            problem
                .llm_graph()
                .ok_or_else(|| Unsupported(format!("{name} has no graph")))?,
        ),
        KernelId::Ceiling(CeilingKernel::Transfer) => return Err(transfer_has_no_plan()),
        KernelId::Ceiling(CeilingKernel::ComputePeak) => Route::Peak,
        KernelId::Ceiling(CeilingKernel::Roofline) => Route::Roofline,
        KernelId::Elementwise(k) => Route::Elementwise(elementwise(problem, k, false)),
        KernelId::Debug(d) => Route::Elementwise(elementwise(
            problem,
            d.on_device().ok_or_else(not_planned)?,
            true,
        )),
        KernelId::Host(_) => return Err(not_planned()),
    })
}
