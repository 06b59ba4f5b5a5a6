//! What the HIP planners pass to a launch: sizes as `int` kernel arguments and block counts
//! within HIP's grid, with the block size of the one-dimensional kernels.

use super::types::{Arg, Unsupported};
use crate::backend::planning;
use gpufleet_kernels::Problem;

/// Block size of the one-dimensional kernels (element-wise, conv2d, im2col).
pub(super) const FLAT: u32 = 256;

/// What bounds every size argument, for refusals.
pub(super) const INT_ARG: &str = "int kernel argument";

/// Named sizes as `int` kernel arguments.
pub(super) fn ints(problem: &Problem, named: &[(&str, usize)]) -> Result<Vec<Arg>, Unsupported> {
    planning::int_args(problem, named, INT_ARG, Arg::Int)
}

/// Blocks covering `items` work-items in blocks of `block`.
pub(super) fn blocks(
    problem: &Problem,
    what: &str,
    items: usize,
    block: u32,
) -> Result<u32, Unsupported> {
    u32::try_from(items.div_ceil(block as usize).max(1)).map_err(|_| {
        Unsupported(format!(
            "{what}: {items} work-items of {} exceed HIP's grid",
            problem.kernel.name
        ))
    })
}
