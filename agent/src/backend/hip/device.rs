//! HIP discovery: every device the runtime sees, with its PCI bus id, arch and whether this
//! binary has a code object for it.

use super::code_objects;
use super::ffi;
use super::plan::HipCaps;
use crate::backend::{BackendError, DeviceInfo, peaks};
use std::ffi::c_char;

/// A device found by enumeration, with what the worker needs to use it.
pub struct Found {
    pub info: DeviceInfo,
    /// The runtime's device ordinal.
    pub ordinal: i32,
    /// `gcnArchName` as reported (`gfx90a:sramecc+:xnack-`).
    pub gcn_arch_name: String,
    pub caps: HipCaps,
}

impl crate::backend::lookup::Enumerated for Found {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
}

/// A fixed-size C string field as a `String`.
fn c_field(field: &[c_char]) -> String {
    let bytes: Vec<u8> = field
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).trim().to_string()
}

/// `dddd:bb:dd.f` in lower case from what hipDeviceGetPCIBusId wrote: the same normalisation the
/// power sensors' PCI ids get, so the two join.
use crate::host::pci::normalize_pci;

/// The PCI address from the properties' domain, bus and device numbers (function 0). Pure.
pub fn pci_from_props(domain: i32, bus: i32, device: i32) -> String {
    format!(
        "{:04x}:{:02x}:{:02x}.0",
        domain.max(0),
        bus.clamp(0, 0xff),
        device.clamp(0, 0x1f)
    )
}

/// `5.2.21153` from HIP's version number `50221153` (major·10^7 + minor·10^5 + patch). Pure.
pub fn version_string(v: i32) -> String {
    let v = v.max(0);
    format!("{}.{}.{}", v / 10_000_000, (v / 100_000) % 100, v % 100_000)
}

/// Enumerates every HIP device.
///
/// # Errors
/// `Unavailable` when the runtime reports no device (`no HIP device (hipErrorNoDevice)`) or
/// cannot start; `Driver` when a device cannot be queried.
pub fn enumerate() -> Result<Vec<Found>, BackendError> {
    let count = ffi::device_count()?;
    let (driver, runtime) = ffi::versions();
    let driver = driver.map(version_string).unwrap_or_default();
    let runtime = runtime.map(version_string).unwrap_or_default();
    let available: Vec<&str> = code_objects::embedded().iter().map(|e| e.target).collect();
    let mut found = Vec::with_capacity(count);
    for i in 0..count {
        let ordinal = i as i32;
        let p = ffi::properties(ordinal)?;
        let name = c_field(&p.name);
        let gcn_arch_name = c_field(&p.gcnArchName);
        let arch = code_objects::base_arch(&gcn_arch_name);
        let pci = ffi::pci_bus_id(ordinal)
            .ok()
            .and_then(|s| normalize_pci(&s))
            .unwrap_or_else(|| pci_from_props(p.pciDomainID, p.pciBusID, p.pciDeviceID));
        let units = u32::try_from(p.multiProcessorCount).unwrap_or(0);
        let clock = u32::try_from(p.clockRate / 1000).unwrap_or(0);
        let mut features = vec![
            format!("gcn_arch:{gcn_arch_name}"),
            format!("wavefront:{}", p.warpSize),
            format!("max_threads_per_block:{}", p.maxThreadsPerBlock),
            format!("lds_bytes:{}", p.sharedMemPerBlock),
            // Every AMD GPU does half and double arithmetic (compute_peak asks for both).
            "fp16".to_string(),
            "fp64".to_string(),
        ];
        if code_objects::has_int8_dot(&arch) {
            features.push(gpufleet_kernels::INT8_DOT.to_string());
        }
        features.push(if available.contains(&arch.as_str()) {
            format!("code_object:{arch}")
        } else {
            "code_object:none".to_string()
        });
        let info = DeviceInfo {
            id: format!("hip:{pci}"),
            backend: "hip".into(),
            vendor: "AMD".into(),
            name: if name.is_empty() {
                arch.clone()
            } else {
                name.clone()
            },
            arch: arch.clone(),
            pci_bus_id: pci,
            compute_units: units,
            clock_mhz: clock,
            memory_bytes: p.totalGlobalMem as u64,
            driver_version: driver.clone(),
            api_version: format!("HIP {runtime}"),
            features,
            peaks: peaks::gpu_peaks(&name, &arch, units, clock),
            device_type: if p.integrated != 0 {
                "integrated_gpu"
            } else {
                "discrete_gpu"
            }
            .into(),
        };
        let caps = HipCaps {
            compute_units: units,
            max_threads_per_block: u32::try_from(p.maxThreadsPerBlock).unwrap_or(0),
            shared_mem_per_block: p.sharedMemPerBlock as u64,
            int8_dot: code_objects::has_int8_dot(&arch),
        };
        found.push(Found {
            info,
            ordinal,
            gcn_arch_name,
            caps,
        });
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_from_properties() {
        assert_eq!(pci_from_props(0, 0xc1, 0), "0000:c1:00.0");
        assert_eq!(pci_from_props(-1, 300, 40), "0000:ff:1f.0");
    }

    #[test]
    fn versions_decode() {
        assert_eq!(version_string(50221153), "5.2.21153");
        assert_eq!(version_string(60342134), "6.3.42134");
        assert_eq!(version_string(-5), "0.0.0");
    }

    #[test]
    fn c_fields_stop_at_nul() {
        let mut f = [0 as c_char; 8];
        for (i, b) in b"gfx90a".iter().enumerate() {
            f[i] = *b as c_char;
        }
        assert_eq!(c_field(&f), "gfx90a");
    }

    #[test]
    fn discovery_without_a_device_is_unavailable() {
        // On a host with a GPU this lists it instead; either way it must not panic.
        match enumerate() {
            Ok(found) => {
                for f in found {
                    assert!(f.info.id.starts_with("hip:"));
                }
            }
            Err(BackendError::Unavailable { reason, .. }) => {
                assert!(!reason.is_empty());
            }
            Err(e) => panic!("unexpected {e}"),
        }
    }
}
