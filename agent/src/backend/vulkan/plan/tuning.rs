//! The blocked GEMM's search space on a device: the autotuner's candidates, the default tuning
//! and the rules a tuning must pass (what `gemm_blocked.glsl` assumes plus the device limits).

use super::types::{GemmTuning, VkCaps};
use crate::backend::planning;

/// Candidate register-blocked configurations for the autotuner, valid for this device
/// (invocation, workgroup-size and shared-memory limits), best guesses first; 4..20 of them.
///
/// GPUs (a subgroup of 32 or more) get the large tiles that reach their FMA peak first (the
/// OpenCL shader of the same design ran 128×128×8 with 8×8 per invocation at 83% of cuBLAS on an
/// H100); CPUs such as lavapipe and unknown devices get fewer invocations with much work each.
pub fn gemm_candidates(caps: &VkCaps) -> Vec<GemmTuning> {
    let gpu = planning::GPU_TILES.map(GemmTuning::new);
    let small = planning::SMALL_TILES.map(GemmTuning::new);
    planning::candidates(&gpu, &small, caps.subgroup_size >= 32, 20, |c| {
        tuning_error(c, caps).is_none()
    })
}

/// A safe default when nothing is tuned: the first candidate, or a one-invocation 4×4 tile that
/// any device with 384 bytes of shared memory runs.
pub fn default_gemm_tuning(caps: &VkCaps) -> GemmTuning {
    let fallback = GemmTuning::new([4, 4, 4, 4, 4]);
    gemm_candidates(caps).first().copied().unwrap_or(fallback)
}

/// Why `t` cannot run on `caps`, or `None` when it can. The rules mirror what
/// `gemm_blocked.glsl` assumes (vec4 shared tiles, whole vec4 loads along k) plus the device
/// limits.
pub(super) fn tuning_error(t: &GemmTuning, caps: &VkCaps) -> Option<String> {
    let vec4 = || {
        (!(t.tile_m.is_multiple_of(4) && t.tile_n.is_multiple_of(4) && t.tile_k.is_multiple_of(4)))
            .then(|| {
                format!(
                    "tile {}×{}×{} must be multiples of 4 (vec4 shared tiles)",
                    t.tile_m, t.tile_n, t.tile_k
                )
            })
    };
    if let Some(why) = planning::tile_error(t, &[], vec4, "invocation") {
        return Some(why);
    }
    let (x, y) = blocked_local(t);
    if x > caps.max_workgroup_size[0] || y > caps.max_workgroup_size[1] {
        return Some(format!(
            "local size {x}×{y} exceeds maxComputeWorkGroupSize {}×{}",
            caps.max_workgroup_size[0], caps.max_workgroup_size[1]
        ));
    }
    if x * y > caps.max_workgroup_invocations {
        return Some(format!(
            "{} invocations per group exceed maxComputeWorkGroupInvocations {}",
            x * y,
            caps.max_workgroup_invocations
        ));
    }
    let shared = blocked_shared_bytes(t);
    if shared > u64::from(caps.max_shared_memory_bytes) {
        return Some(format!(
            "{shared} bytes of shared memory exceed maxComputeSharedMemorySize {}",
            caps.max_shared_memory_bytes
        ));
    }
    None
}

/// Local size (x, y) of `gemm_blocked`: (tile_n / work_n, tile_m / work_m).
pub(super) fn blocked_local(t: &GemmTuning) -> (u32, u32) {
    (t.tile_n / t.work_n, t.tile_m / t.work_m)
}

/// Shared memory of `gemm_blocked`: two buffers of the transposed A slice (rows padded by one
/// vec4) and of the B slice.
pub(super) fn blocked_shared_bytes(t: &GemmTuning) -> u64 {
    4 * 2 * u64::from(t.tile_k) * u64::from(t.tile_m + 4 + t.tile_n)
}
