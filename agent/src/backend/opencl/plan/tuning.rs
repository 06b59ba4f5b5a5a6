//! The blocked GEMM's search space on a device: the autotuner's candidates, the default tuning
//! and the rules a tuning must pass (`gemm.cl`'s `#error` checks plus the device limits).

use super::types::{DeviceCaps, GemmTuning};
use crate::backend::planning;

/// Candidate register-blocked configurations for the autotuner, valid for this device
/// (work-group size and local memory limits), best guesses first; 4..24 of them.
///
/// GPUs (a warp or wavefront of 32 or more) get the large tiles that reach their FMA peak first;
/// CPUs and unknown devices get few work-items with much work each first.
pub fn gemm_candidates(caps: &DeviceCaps) -> Vec<GemmTuning> {
    // Vector widths of the small tiles (the GPU tiles all load 4-vectors).
    const SMALL_VECTORS: [u32; 11] = [4, 4, 4, 4, 4, 4, 4, 4, 2, 1, 1];
    let gpu = planning::GPU_TILES.map(|t| GemmTuning::new(t, 4));
    let mut small = planning::SMALL_TILES.map(|t| GemmTuning::new(t, 4));
    for (t, v) in small.iter_mut().zip(SMALL_VECTORS) {
        t.vector = v;
    }
    planning::candidates(&gpu, &small, caps.preferred_multiple >= 32, 24, |c| {
        tuning_error(c, caps).is_none()
    })
}

/// A safe default when nothing is tuned: the first candidate, or a one-work-item 4×4 tile that
/// any device with 384 bytes of local memory runs.
pub fn default_gemm_tuning(caps: &DeviceCaps) -> GemmTuning {
    let fallback = GemmTuning::new([4, 4, 4, 4, 4], 1);
    gemm_candidates(caps).first().copied().unwrap_or(fallback)
}

/// Why `t` cannot run on `caps`, or `None` when it can. The rules mirror the `#error` checks of
/// `gemm.cl` plus the device limits.
pub(super) fn tuning_error(t: &GemmTuning, caps: &DeviceCaps) -> Option<String> {
    let vector = || {
        (![1, 2, 4].contains(&t.vector)).then(|| format!("vector={} must be 1, 2 or 4", t.vector))
    };
    if let Some(why) = planning::tile_error(t, &[t.vector], vector, "work-item") {
        return Some(why);
    }
    let threads = blocked_threads(t);
    if threads > caps.max_work_group_size {
        return Some(format!(
            "{threads} work-items per group exceed max_work_group_size {}",
            caps.max_work_group_size
        ));
    }
    if !t.tile_k.is_multiple_of(t.vector) || !t.tile_n.is_multiple_of(t.vector) {
        return Some(format!(
            "tile_k={} and tile_n={} must be multiples of vector={}",
            t.tile_k, t.tile_n, t.vector
        ));
    }
    let local = blocked_local_bytes(t);
    if local > caps.local_mem_bytes {
        return Some(format!(
            "{local} bytes of local memory exceed the device's {}",
            caps.local_mem_bytes
        ));
    }
    None
}

pub(super) fn blocked_threads(t: &GemmTuning) -> usize {
    ((t.tile_m / t.work_m) * (t.tile_n / t.work_n)) as usize
}

/// Local memory of `gemm_blocked`: two buffers of the transposed, padded A slice and the B slice.
pub(super) fn blocked_local_bytes(t: &GemmTuning) -> u64 {
    let pad = if t.work_m.is_multiple_of(4) && t.work_n.is_multiple_of(4) {
        4
    } else {
        1
    };
    4 * 2 * u64::from(t.tile_k) * u64::from(t.tile_m + pad + t.tile_n)
}
