//! OpenCL discovery: every platform's every device, with its PCI bus id
//! from whichever vendor extension the driver offers.

use super::ffi::{self, cl_err};
use super::plan::DeviceCaps;
use crate::backend::{BackendError, DeviceInfo, Peaks, cpu, lookup, peaks};
use gpufleet_kernels::BackendKind;
use opencl3::device::{CL_DEVICE_TYPE_ALL, CL_DEVICE_TYPE_CPU, CL_DEVICE_TYPE_GPU, Device};
use opencl3::platform::get_platforms;
use opencl3::types::cl_device_id;

/// A device found by enumeration, with the handle the worker needs.
pub struct Found {
    pub info: DeviceInfo,
    pub id: cl_device_id,
    pub caps: DeviceCaps,
    /// Platform and device names and versions, for cache keys.
    pub fingerprint: String,
}

impl crate::backend::lookup::Enumerated for Found {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
}

/// Whether the device has `cl_khr_integer_dot_product` with the packed input (four bytes in a
/// `uint`, `dot_4x8packed_ss_int`), compute_peak's int8.
fn int8_dot(d: &Device, extensions: &str) -> bool {
    /// `CL_DEVICE_INTEGER_DOT_PRODUCT_INPUT_4x8BIT_PACKED_KHR`.
    const PACKED: u64 = 1 << 0;
    extensions.contains("cl_khr_integer_dot_product")
        && d.integer_dot_product_capabilities_khr()
            .is_ok_and(|caps| caps & PACKED != 0)
}

fn unavailable(reason: String) -> BackendError {
    BackendError::Unavailable {
        backend: "opencl".into(),
        reason,
    }
}

/// PCI bus id as `dddd:bb:dd.f`, from cl_khr_pci_bus_info, then
/// CL_DEVICE_TOPOLOGY_AMD, then cl_nv_device_attribute_query.
fn pci_bus_id(d: &Device, extensions: &str) -> String {
    if extensions.contains("cl_khr_pci_bus_info")
        && let Ok(p) = d.pcibusinfokhr_intel()
    {
        return format!(
            "{:04x}:{:02x}:{:02x}.{:x}",
            p.pci_domain, p.pci_bus, p.pci_device, p.pci_function
        );
    }
    if extensions.contains("cl_amd_device_attribute_query")
        && let Ok(t) = d.topology_amd()
    {
        return format!("0000:{:02x}:{:02x}.{:x}", t.bus, t.device, t.function);
    }
    if extensions.contains("cl_nv_device_attribute_query")
        && let (Ok(bus), Ok(slot)) = (d.pci_bus_id_nv(), d.pci_slot_id_nv())
    {
        // NVIDIA packs device and function into the slot id.
        return format!("0000:{:02x}:{:02x}.{:x}", bus, slot >> 3, slot & 7);
    }
    String::new()
}

/// `gfx906` from ROCm's `gfx906:sramecc+:xnack-`, `sm_90` from NVIDIA's
/// compute capability, else the OpenCL C version.
fn arch(d: &Device, name: &str, extensions: &str) -> String {
    if name.starts_with("gfx") {
        return name.split(':').next().unwrap_or(name).to_string();
    }
    if extensions.contains("cl_nv_device_attribute_query")
        && let (Ok(a), Ok(b)) = (
            d.compute_capability_major_nv(),
            d.compute_capability_minor_nv(),
        )
    {
        return format!("sm_{a}{b}");
    }
    if let Some(g) = name.split(['(', ',', ' ']).find(|w| w.starts_with("gfx")) {
        return g.to_string();
    }
    d.opencl_c_version().unwrap_or_default().trim().to_string()
}

fn parse_c_version(s: &str) -> (u32, u32) {
    // "OpenCL C 1.2 PoCL" → (1, 2)
    s.split_whitespace()
        .find_map(|w| {
            let (a, b) = w.split_once('.')?;
            Some((
                a.parse().ok()?,
                b.chars()
                    .take_while(char::is_ascii_digit)
                    .collect::<String>()
                    .parse()
                    .ok()?,
            ))
        })
        .unwrap_or((1, 1))
}

/// Enumerates every OpenCL device.
///
/// # Errors
/// `Unavailable` when libOpenCL cannot be loaded or reports no platform.
pub fn enumerate() -> Result<Vec<Found>, BackendError> {
    let platforms = get_platforms().map_err(|e| {
        unavailable(match e.0 {
            -1001 => "no OpenCL platform: the ICD loader found no driver (CL_PLATFORM_NOT_FOUND_KHR)".into(),
            code if code <= -2000 => format!(
                "cannot load libOpenCL.so.1 ({}); install an ICD loader (ocl-icd-libopencl1) and a driver",
                cl_err(code)
            ),
            code => format!("clGetPlatformIDs: {}", cl_err(code)),
        })
    })?;
    let mut found = Vec::new();
    for (pi, platform) in platforms.iter().enumerate() {
        let pname = platform.name().unwrap_or_default();
        let pversion = platform.version().unwrap_or_default();
        let Ok(ids) = platform.get_devices(CL_DEVICE_TYPE_ALL) else {
            continue;
        };
        for (di, &id) in ids.iter().enumerate() {
            let d = Device::new(id);
            let name = d.name().unwrap_or_default().trim().to_string();
            let extensions = d.extensions().unwrap_or_default();
            let pci = pci_bus_id(&d, &extensions);
            let dev_type = d.dev_type().unwrap_or(0);
            let units = d.max_compute_units().unwrap_or(0);
            let clock = d.max_clock_frequency().unwrap_or(0);
            let arch = arch(&d, &name, &extensions);
            let c_version = d.opencl_c_version().unwrap_or_default();
            let fp16 = extensions.contains("cl_khr_fp16");
            let int8_dot = int8_dot(&d, &extensions);
            let vendor = d.vendor().unwrap_or_default().trim().to_string();
            let driver = d.driver_version().unwrap_or_default().trim().to_string();
            let device_type = if dev_type & CL_DEVICE_TYPE_CPU != 0 {
                "cpu"
            } else if dev_type & CL_DEVICE_TYPE_GPU != 0 {
                if d.host_unified_memory().unwrap_or(false) {
                    "integrated_gpu"
                } else {
                    "discrete_gpu"
                }
            } else {
                "other"
            };
            let peaks = if device_type == "cpu" {
                cpu::device::discover().peaks
            } else {
                peaks::gpu_peaks(&name, &arch, units, clock)
            };
            let mut features = vec![c_version.trim().to_string()];
            if fp16 {
                features.push("fp16".into());
            }
            if extensions.contains("cl_khr_fp64") {
                features.push("fp64".into());
            }
            if int8_dot {
                features.push(gpufleet_kernels::INT8_DOT.into());
            }
            for ext in [
                "cl_khr_fp64",
                "cl_khr_subgroups",
                "cl_intel_subgroups",
                "cl_khr_int64_base_atomics",
            ] {
                if extensions.contains(ext) {
                    features.push(ext.into());
                }
            }
            features.push(format!(
                "max_work_group_size:{}",
                d.max_work_group_size().unwrap_or(0)
            ));
            features.push(format!(
                "local_mem_bytes:{}",
                d.local_mem_size().unwrap_or(0)
            ));
            let preferred = ffi::preferred_multiple(id);
            if preferred > 1 {
                features.push(format!("subgroup:{preferred}"));
            }
            let info = DeviceInfo {
                id: lookup::device_id(BackendKind::OpenCl, &pci, format_args!("{pi}.{di}")),
                backend: BackendKind::OpenCl.name().into(),
                vendor: vendor.clone(),
                name: name.clone(),
                arch,
                pci_bus_id: pci,
                compute_units: units,
                clock_mhz: clock,
                memory_bytes: d.global_mem_size().unwrap_or(0),
                driver_version: driver.clone(),
                api_version: format!("{} ({pname})", d.version().unwrap_or_default().trim()),
                features,
                peaks: Peaks { ..peaks },
                device_type: device_type.into(),
            };
            let caps = DeviceCaps {
                max_work_group_size: d.max_work_group_size().unwrap_or(64),
                local_mem_bytes: d.local_mem_size().unwrap_or(16 * 1024),
                fp16,
                fp64: extensions.contains("cl_khr_fp64"),
                int8_dot,
                opencl_c: parse_c_version(&c_version),
                vendor,
                compute_units: units,
                preferred_multiple: preferred.max(1),
                cpu: device_type == "cpu",
                unfused_rope: false,
                wide_quant_teams: false,
            };
            let fingerprint = format!("{pname}|{pversion}|{name}|{driver}|{}", info.id);
            found.push(Found {
                info,
                id,
                caps,
                fingerprint,
            });
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_versions() {
        assert_eq!(parse_c_version("OpenCL C 1.2 PoCL"), (1, 2));
        assert_eq!(parse_c_version("OpenCL C 1.1 "), (1, 1));
        assert_eq!(parse_c_version("OpenCL C 3.0 "), (3, 0));
        assert_eq!(parse_c_version("garbage"), (1, 1));
    }
}
