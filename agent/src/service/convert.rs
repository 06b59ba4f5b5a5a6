//! Agent domain types to their wire form.

use crate::backend::{DeviceInfo, KernelSupport};
use crate::host::HostFacts;
use crate::inventory::BackendState;
use gpufleet_kernels::KernelDef;
use gpufleet_proto::v1 as pb;

pub fn host(h: &HostFacts) -> pb::HostInfo {
    pb::HostInfo {
        hostname: h.hostname.clone(),
        os: h.os.clone(),
        kernel_version: h.kernel_version.clone(),
        cpu_model: h.cpu_model.clone(),
        logical_cores: h.logical_cores,
        physical_cores: h.physical_cores,
        memory_bytes: h.memory_bytes,
        container_hints: h.container_hints.clone(),
        arch: h.arch.clone(),
        platform: h.platform.clone().into_iter().collect(),
    }
}

pub fn device(d: &DeviceInfo) -> pb::Device {
    pb::Device {
        id: d.id.clone(),
        backend: d.backend.clone(),
        vendor: d.vendor.clone(),
        name: d.name.clone(),
        arch: d.arch.clone(),
        pci_bus_id: d.pci_bus_id.clone(),
        compute_units: d.compute_units,
        clock_mhz: d.clock_mhz,
        memory_bytes: d.memory_bytes,
        driver_version: d.driver_version.clone(),
        api_version: d.api_version.clone(),
        features: d.features.clone(),
        peaks: Some(pb::Peaks {
            fp32_flops: d.peaks.fp32_flops,
            fp16_flops: d.peaks.fp16_flops,
            memory_bytes_per_s: d.peaks.memory_bytes_per_s,
            fp32_source: d.peaks.fp32_source.clone(),
            fp16_source: d.peaks.fp16_source.clone(),
            memory_source: d.peaks.memory_source.clone(),
        }),
        device_type: d.device_type.clone(),
    }
}

fn support(s: &KernelSupport) -> pb::KernelSupport {
    pb::KernelSupport {
        kernel: s.kernel.clone(),
        variants: s.variants.clone(),
        dtypes: s.dtypes.clone(),
    }
}

/// A backend's status; debug kernels are listed only when enabled.
pub fn backend(b: &BackendState, debug: bool) -> pb::BackendStatus {
    pb::BackendStatus {
        name: b.name.clone(),
        available: b.available,
        reason: b.reason.clone(),
        kernels: b
            .kernels
            .iter()
            .filter(|k| debug || !k.kernel.starts_with("debug_"))
            .map(support)
            .collect(),
    }
}

pub fn kernel(k: &KernelDef) -> pb::KernelInfo {
    pb::KernelInfo {
        name: k.name.to_string(),
        description: k.description.to_string(),
        variants: k.variants.iter().map(|v| v.to_string()).collect(),
        default_variant: k.default_variant.to_string(),
        params: k
            .params
            .iter()
            .map(|p| pb::ParamInfo {
                name: p.name.to_string(),
                default_value: p.default,
                min: p.min,
                max: p.max,
                description: p.doc.to_string(),
            })
            .collect(),
        dtypes: k.dtypes.iter().map(|d| d.name().to_string()).collect(),
        metric: k.metric.name().to_string(),
        host_only: k.host_only,
        debug: k.debug,
    }
}
