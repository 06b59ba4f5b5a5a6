//! A debug switch: what the driver says of each pipeline it compiled for a kernel
//! (`VK_KHR_pipeline_executable_properties`: NVIDIA names the registers a thread and the shared
//! memory, Mesa's drivers their instructions and spills), in the result's configuration, so that a
//! shader change can be judged by the code the device runs and not only by its time.

use crate::backend::vulkan::device::{Found, cstr};
use crate::backend::vulkan::ffi::fail;
use crate::backend::{BackendError, debug_switch};
use ash::vk;
use std::collections::BTreeMap;

/// The configuration's key.
const KEY: &str = "pipeline_stats";

/// A debug switch: `1` compiles every pipeline with its statistics captured and records them in
/// the result's configuration (`pipeline_stats`: `shader: name=value, …; …`, the driver's own
/// names), where the device offers `VK_KHR_pipeline_executable_properties`; elsewhere the
/// configuration says `pipeline_stats: not offered by the driver`.
pub const PIPELINE_STATS_ENV: &str = "GPUFLEET_DEBUG_VULKAN_PIPELINE_STATS";

/// Whether this process asks for the statistics.
pub(super) fn wanted() -> bool {
    debug_switch(PIPELINE_STATS_ENV)
}

/// The creation flags of a pipeline whose statistics are (`capture`) or are not asked for.
pub(super) fn flags(capture: bool) -> vk::PipelineCreateFlags {
    if capture {
        vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR
    } else {
        vk::PipelineCreateFlags::empty()
    }
}

/// Appends `shader`'s pipeline's statistics to the configuration's `pipeline_stats`.
///
/// # Errors
/// `Driver` when a query fails.
pub(super) fn note(
    ext: &ash::khr::pipeline_executable_properties::Device,
    config: &mut BTreeMap<String, String>,
    shader: &str,
    pipeline: vk::Pipeline,
) -> Result<(), BackendError> {
    let text = format!("{shader}: {}", describe(ext, pipeline)?);
    let all = config.entry(KEY.into()).or_default();
    if !all.is_empty() {
        all.push_str("; ");
    }
    all.push_str(&text);
    Ok(())
}

/// The extension's functions on `device` where the statistics are asked for and `found` offers
/// them; where they are asked for and not offered, `config` says so.
pub(super) fn open(
    instance: &ash::Instance,
    found: &Found,
    device: &ash::Device,
    config: &mut BTreeMap<String, String>,
) -> Option<ash::khr::pipeline_executable_properties::Device> {
    if !wanted() {
        return None;
    }
    if !found.executable_stats {
        config.insert(KEY.into(), "not offered by the driver".into());
        return None;
    }
    Some(ash::khr::pipeline_executable_properties::Device::new(
        instance, device,
    ))
}

/// The statistics of `pipeline`'s executables: `name=value` pairs joined by commas, an
/// executable's name first where a pipeline has more than one.
///
/// # Errors
/// `Driver` when a query fails.
fn describe(
    ext: &ash::khr::pipeline_executable_properties::Device,
    pipeline: vk::Pipeline,
) -> Result<String, BackendError> {
    let info = vk::PipelineInfoKHR::default().pipeline(pipeline);
    // SAFETY: `pipeline` was created on `ext`'s device with CAPTURE_STATISTICS; the returned
    // structs are plain data copied out.
    let executables = unsafe { ext.get_pipeline_executable_properties(&info) }
        .map_err(|e| fail("vkGetPipelineExecutablePropertiesKHR", e))?;
    let mut parts = Vec::new();
    for (i, exe) in executables.iter().enumerate() {
        let at = vk::PipelineExecutableInfoKHR::default()
            .pipeline(pipeline)
            .executable_index(i as u32);
        // SAFETY: as above; `i` is below the count the driver returned.
        let stats = unsafe { ext.get_pipeline_executable_statistics(&at) }
            .map_err(|e| fail("vkGetPipelineExecutableStatisticsKHR", e))?;
        let values: Vec<String> = stats.iter().map(statistic).collect();
        let text = values.join(", ");
        parts.push(if executables.len() > 1 {
            format!("[{}] {text}", cstr(&exe.name))
        } else {
            text
        });
    }
    Ok(parts.join(" "))
}

/// One statistic as `name=value`.
fn statistic(s: &vk::PipelineExecutableStatisticKHR) -> String {
    // SAFETY: `format` says which member of the union the driver wrote.
    let value = unsafe {
        match s.format {
            vk::PipelineExecutableStatisticFormatKHR::BOOL32 => (s.value.b32 != 0).to_string(),
            vk::PipelineExecutableStatisticFormatKHR::INT64 => s.value.i64.to_string(),
            vk::PipelineExecutableStatisticFormatKHR::UINT64 => s.value.u64.to_string(),
            vk::PipelineExecutableStatisticFormatKHR::FLOAT64 => format!("{:.3}", s.value.f64),
            _ => "?".into(),
        }
    };
    format!("{}={value}", cstr(&s.name))
}
