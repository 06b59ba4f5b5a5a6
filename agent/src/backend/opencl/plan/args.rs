//! What the OpenCL planners pass to a launch: the program's build options (`-D` parameters),
//! sizes as `int` kernel arguments, and the local size of the one-dimensional kernels.

use super::types::{Arg, DeviceCaps, Unsupported};
use crate::backend::planning::{self, pow2_floor};
use gpufleet_kernels::Problem;

/// Local size of the one-dimensional kernels (element-wise, conv2d), capped by the device.
const FLAT_GROUP: usize = 256;

/// Build options: the language version (1.1 where that is all the device speaks, else 1.2, never
/// higher since nothing newer is used), the fp16 flag and `defines`.
pub(super) fn options(caps: &DeviceCaps, defines: &[(&str, String)]) -> String {
    let std = if caps.opencl_c == (1, 1) {
        "CL1.1"
    } else {
        "CL1.2"
    };
    let mut out = format!("-cl-std={std}");
    if caps.fp16 {
        out.push_str(" -DGPUFLEET_HAS_FP16");
    }
    for (name, value) in defines {
        if value.is_empty() {
            out.push_str(&format!(" -D{name}"));
        } else {
            out.push_str(&format!(" -D{name}={value}"));
        }
    }
    out
}

/// What bounds every size argument, for refusals.
pub(super) const INT_ARG: &str = "OpenCL int argument";

/// Named sizes as `int` kernel arguments.
pub(super) fn ints(problem: &Problem, named: &[(&str, usize)]) -> Result<Vec<Arg>, Unsupported> {
    planning::int_args(problem, named, INT_ARG, Arg::Int)
}

/// Local size of the one-dimensional kernels.
pub(super) fn flat_group(caps: &DeviceCaps) -> usize {
    FLAT_GROUP.min(pow2_floor(caps.max_work_group_size))
}
