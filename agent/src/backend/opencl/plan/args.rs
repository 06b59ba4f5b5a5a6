//! What the OpenCL planners pass to a launch: the program's build options (`-D` parameters),
//! sizes as `int` kernel arguments, and the local size of the one-dimensional kernels.

use super::types::{Arg, DeviceCaps, Unsupported};
use crate::backend::planning::{self, pow2_floor};
use gpufleet_kernels::Problem;

/// Local size of the one-dimensional kernels (element-wise, conv2d), capped by the device.
const FLAT_GROUP: usize = 256;

/// A debug switch: compiler options appended to every program's (`-cl-mad-enable`,
/// `-cl-nv-maxrregcount=255`...), to measure what a driver's compiler makes of them. They are part
/// of the options, so of the binary cache's key and of the result's `build_options`.
pub const EXTRA_OPTIONS_ENV: &str = "GPUFLEET_DEBUG_OPENCL_OPTIONS";

/// Build options: the language version (1.1 where that is all the device speaks, else 1.2, never
/// higher since nothing newer is used), the fp16 flag, `defines`, and the options of
/// [`EXTRA_OPTIONS_ENV`] when it is set.
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
    if let Ok(extra) = std::env::var(EXTRA_OPTIONS_ENV)
        && !extra.trim().is_empty()
    {
        out.push(' ');
        out.push_str(extra.trim());
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
