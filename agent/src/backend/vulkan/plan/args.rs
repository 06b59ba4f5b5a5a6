//! What the Vulkan planners hand a dispatch: the shader module, the local-size specialization
//! constants, sizes as `uint` push constants, and group counts within the device's limits.

use super::types::{Binding, Dispatch, SpecValue, Unsupported, VkCaps};
use crate::backend::planning;
use gpufleet_kernels::Problem;
use gpufleet_kernels::sources::vulkan as spv;

/// Specialization constant of the local size x (every shader) and y (the GEMMs).
pub(super) const SPEC_LOCAL_X: u32 = 0;
pub(super) const SPEC_LOCAL_Y: u32 = 1;
/// Specialization constants of the split-row shaders: groups per row, and softmax's partials
/// (1) or layernorm's (0) in `split_stats` (kernels/vulkan/include/split*.glsl).
pub(super) const SPEC_SPLIT: u32 = 3;
pub(super) const SPEC_SPLIT_SOFTMAX: u32 = 4;
/// Invocations per group of the one-dimensional shaders, capped by the device.
const FLAT_GROUP: u32 = 256;
/// Groups of a grid-stride or row dispatch: the smallest maxComputeWorkGroupCount[0] Vulkan
/// allows, and plenty to fill any GPU.
pub(super) const GRID_GROUPS_MAX: u32 = 65535;

/// Largest power of two at most `n` (1 for 0).
pub(super) fn pow2_floor(n: u32) -> u32 {
    planning::pow2_floor(n as usize) as u32
}

/// `value` as a `uint` push constant.
pub(super) fn word(problem: &Problem, what: &str, value: usize) -> Result<u32, Unsupported> {
    planning::bounded(problem, what, value, u32::MAX, "uint push constant")
}

/// Named sizes as `uint` push constants.
pub(super) fn words(problem: &Problem, named: &[(&str, usize)]) -> Result<Vec<u32>, Unsupported> {
    named
        .iter()
        .map(|&(what, v)| word(problem, what, v))
        .collect()
}

/// The SPIR-V of `shader`; every name the planners use is in `sources::vulkan::ALL` (a test
/// checks), so a miss is reported rather than panicking.
pub(super) fn module(shader: &str) -> Result<&'static [u8], Unsupported> {
    spv::spirv(shader).ok_or_else(|| {
        Unsupported(format!(
            "shader {shader} is not embedded in gpufleet-kernels"
        ))
    })
}

/// One dispatch of `shader`.
pub(super) fn dispatch(
    shader: &str,
    spec: Vec<(u32, SpecValue)>,
    push: Vec<u32>,
    bindings: Vec<Binding>,
    groups: [u32; 3],
) -> Result<Dispatch, Unsupported> {
    Ok(Dispatch {
        shader: shader.to_string(),
        label: shader.to_string(),
        spirv: module(shader)?,
        spec,
        push,
        bindings,
        groups,
    })
}

/// Invocations per group of the one-dimensional shaders.
pub(super) fn flat_group(caps: &VkCaps) -> u32 {
    FLAT_GROUP.min(pow2_floor(
        caps.max_workgroup_invocations
            .min(caps.max_workgroup_size[0]),
    ))
}

/// Groups of a grid-stride dispatch over `items` with `group` invocations each.
pub(super) fn grid_groups(caps: &VkCaps, items: usize, group: u32) -> u32 {
    let needed = u32::try_from(items.div_ceil(group as usize)).unwrap_or(u32::MAX);
    needed
        .min(GRID_GROUPS_MAX)
        .min(caps.max_compute_workgroup_count[0])
        .max(1)
}

/// Refuses `groups` beyond the device's maxComputeWorkGroupCount.
pub(super) fn check_groups(
    problem: &Problem,
    caps: &VkCaps,
    groups: [u64; 3],
) -> Result<[u32; 3], Unsupported> {
    let mut out = [1u32; 3];
    for (axis, (&g, &limit)) in groups
        .iter()
        .zip(&caps.max_compute_workgroup_count)
        .enumerate()
    {
        if g > u64::from(limit) {
            return Err(Unsupported(format!(
                "{} needs {g} workgroups along {} above maxComputeWorkGroupCount {limit}",
                problem.kernel.name,
                ["x", "y", "z"][axis]
            )));
        }
        out[axis] = g.max(1) as u32;
    }
    Ok(out)
}
