//! The debug switches that change what the planner may assume about a device: read from the
//! worker's environment when a kernel is planned, applied to a copy of the device's [`VkCaps`].

use crate::backend::debug_switch;
use crate::backend::vulkan::plan::{QuantDot, VkCaps};

/// A debug switch (`1`): `llm_attention` reads keys and values element by element, as on a head
/// width or cache offset that is not a multiple of 4, to measure the 4-vector reads and so that CI
/// runs both.
pub const SCALAR_ATTENTION_ENV: &str = "GPUFLEET_DEBUG_VULKAN_SCALAR_ATTENTION";
/// A debug switch (`1`): a prefill's attention runs `llm_attention`, a group per (row, head), where
/// it would run `llm_attention_tile`, to measure the tiles in the same call.
pub const NO_TILE_ATTENTION_ENV: &str = "GPUFLEET_DEBUG_VULKAN_NO_TILE_ATTENTION";
/// A debug switch (`1`): the cooperative matrices go unused (a prefill's projections run
/// `llm_linear` / `llm_linear_q8` / `_q4` where they would run `llm_linear_f16_coopmat` /
/// `_q8_coopmat` / `_q4_coopmat`), to measure them in the same call.
pub const NO_COOPMAT_ENV: &str = "GPUFLEET_DEBUG_VULKAN_NO_COOPMAT";
/// A debug switch: `1` runs both packed formats' team gemvs on integer dot products wherever the
/// device has them (lavapipe: CI validates them), `0` neither; unset, as [`QuantDot`] says.
pub const QUANT_DOT_ENV: &str = "GPUFLEET_DEBUG_VULKAN_QUANT_DOT";
/// A debug switch: `N` (1, 2 or 4) makes a lane of a packed team gemv take a quarter of N blocks a
/// trip instead of the planner's 2 (`QUANT_BLOCKS` in plan/llm.rs), to measure the choice on
/// another GPU; other values are ignored.
pub const QUANT_BLOCKS_ENV: &str = "GPUFLEET_DEBUG_VULKAN_QUANT_BLOCKS";

/// What the planner may assume of a device whose capabilities are `found`, with the switches set in
/// this process's environment.
pub(super) fn planning_caps(found: &VkCaps) -> VkCaps {
    let mut caps = found.clone();
    caps.scalar_attention = debug_switch(SCALAR_ATTENTION_ENV);
    caps.no_tile_attention = debug_switch(NO_TILE_ATTENTION_ENV);
    caps.coopmat_f16 &= !debug_switch(NO_COOPMAT_ENV);
    caps.quant_dot = match std::env::var(QUANT_DOT_ENV).as_deref() {
        Ok("1") if caps.integer_dot_product => QuantDot::All,
        Ok("1" | "0") => QuantDot::Off,
        _ => caps.quant_dot,
    };
    caps.quant_blocks = match std::env::var(QUANT_BLOCKS_ENV).as_deref() {
        Ok("1") => 1,
        Ok("2") => 2,
        Ok("4") => 4,
        _ => caps.quant_blocks,
    };
    caps
}
