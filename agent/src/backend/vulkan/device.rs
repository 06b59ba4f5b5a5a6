//! Vulkan discovery: every physical device with its PCI bus id, driver,
//! subgroup size, 16-bit features, timestamp support and memory heaps.

use super::ffi::{Vk, fail};
use super::plan::{QuantDot, VkCaps};
use crate::backend::{BackendError, DeviceInfo, cpu, lookup, peaks};
use ash::vk;
use gpufleet_kernels::BackendKind;
use std::ffi::CStr;

/// A device found by enumeration, with what the worker needs to use it.
pub struct Found {
    pub info: DeviceInfo,
    pub physical: vk::PhysicalDevice,
    pub caps: VkCaps,
    /// A compute queue family, preferring one with timestamps.
    pub queue_family: u32,
    /// Nanoseconds per timestamp tick, and the valid bits (0: no timestamps).
    pub timestamp_period: f32,
    pub timestamp_bits: u32,
    pub api_version: u32,
    /// Largest storage buffer a descriptor may cover.
    pub max_storage_buffer_range: u32,
    /// maxMemoryAllocationSize: the largest buffer made (a larger input is split, see
    /// `kernel/segments.rs`). RADV says 4 GiB, AMDVLK 2 GiB.
    pub max_allocation: u64,
    /// Vendor, device, driver and pipeline cache UUID, for cache keys.
    pub fingerprint: String,
    /// `VK_KHR_pipeline_executable_properties` with its feature: the driver can say what it
    /// compiled (a debug switch, `kernel/stats.rs`).
    pub executable_stats: bool,
}

impl crate::backend::lookup::Enumerated for Found {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
}

pub(super) fn cstr(bytes: &[std::ffi::c_char]) -> String {
    // SAFETY: Vulkan guarantees these fixed arrays are NUL-terminated.
    unsafe { CStr::from_ptr(bytes.as_ptr()) }
        .to_string_lossy()
        .trim()
        .to_string()
}

fn version(v: u32) -> String {
    format!(
        "{}.{}.{}",
        vk::api_version_major(v),
        vk::api_version_minor(v),
        vk::api_version_patch(v)
    )
}

/// `gfx…` from RADV's `AMD Radeon RX 580 Series (RADV POLARIS10)` is not
/// reported; the LLVM/ACO family name is, so map the well-known ones.
fn arch(vendor_id: u32, name: &str) -> String {
    const RADV: &[(&str, &str)] = &[
        ("POLARIS10", "gfx803"),
        ("POLARIS11", "gfx803"),
        ("POLARIS12", "gfx803"),
        ("VEGA10", "gfx900"),
        ("VEGA20", "gfx906"),
        ("NAVI10", "gfx1010"),
        ("NAVI21", "gfx1030"),
        ("NAVI31", "gfx1100"),
        ("PHOENIX", "gfx1103"),
        ("GFX942", "gfx942"),
    ];
    if let Some((_, g)) = RADV
        .iter()
        .find(|(k, _)| name.to_ascii_uppercase().contains(k))
    {
        return g.to_string();
    }
    match vendor_id {
        0x10de => {
            let n = name.to_ascii_uppercase();
            let sm = if n.contains("H100") || n.contains("H200") || n.contains("GH200") {
                "sm_90"
            } else if n.contains("A100") || n.contains("A30") {
                "sm_80"
            } else if n.contains("RTX 40") || n.contains("L40") || n.contains("L4") {
                "sm_89"
            } else if n.contains("RTX 30") || n.contains("A40") || n.contains("A10") {
                "sm_86"
            } else {
                "nvidia"
            };
            sm.to_string()
        }
        _ => String::new(),
    }
}

/// The logical device of `found` with one queue of its compute family and the features and
/// extensions its [`VkCaps`] say it has (16-bit storage, half and double arithmetic, integer dot
/// products, cooperative matrices): what was found is what is enabled.
///
/// With `stats` (where `found.executable_stats`) also `VK_KHR_pipeline_executable_properties`.
///
/// # Errors
/// `Driver` when vkCreateDevice fails.
pub fn create_device(vk: &Vk, found: &Found, stats: bool) -> Result<ash::Device, BackendError> {
    let priorities = [1.0f32];
    let queues = [vk::DeviceQueueCreateInfo::default()
        .queue_family_index(found.queue_family)
        .queue_priorities(&priorities)];
    let mut f11 = vk::PhysicalDeviceVulkan11Features::default()
        .storage_buffer16_bit_access(found.caps.storage_buffer_16bit);
    let mut f12 =
        vk::PhysicalDeviceVulkan12Features::default().shader_float16(found.caps.shader_float16);
    let core = vk::PhysicalDeviceFeatures::default().shader_float64(found.caps.shader_float64);
    let mut dot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default()
        .shader_integer_dot_product(true);
    let mut coopmat =
        vk::PhysicalDeviceCooperativeMatrixFeaturesNV::default().cooperative_matrix(true);
    let mut executable = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default()
        .pipeline_executable_info(true);
    let mut exts = Vec::new();
    let mut info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queues)
        .enabled_features(&core);
    if found.api_version >= vk::API_VERSION_1_2 && vk.api >= vk::API_VERSION_1_2 {
        info = info.push_next(&mut f11).push_next(&mut f12);
    }
    // `integer_dot_product` holds only where the device lists the extension.
    if found.caps.integer_dot_product {
        exts.push(vk::KHR_SHADER_INTEGER_DOT_PRODUCT_NAME.as_ptr());
        info = info.push_next(&mut dot);
    }
    // `coopmat_f16` holds only where the device lists the extension and the feature.
    if found.caps.coopmat_f16 {
        exts.push(vk::NV_COOPERATIVE_MATRIX_NAME.as_ptr());
        info = info.push_next(&mut coopmat);
    }
    if stats && found.executable_stats {
        exts.push(vk::KHR_PIPELINE_EXECUTABLE_PROPERTIES_NAME.as_ptr());
        info = info.push_next(&mut executable);
    }
    info = info.enabled_extension_names(&exts);
    // SAFETY: the physical device and queue family came from this instance.
    unsafe { vk.instance.create_device(found.physical, &info, None) }
        .map_err(|e| fail("vkCreateDevice", e))
}

/// Whether `VK_NV_cooperative_matrix` offers `pd` the shape `llm_linear_f16_coopmat` uses:
/// 16×16×16, half inputs, f32 sums, a subgroup's matrices (false where the query fails).
fn coopmat_16x16x16_f16(vk: &Vk, pd: vk::PhysicalDevice) -> bool {
    let name = c"vkGetPhysicalDeviceCooperativeMatrixPropertiesNV";
    // SAFETY: a NUL-terminated name and a live instance.
    let Some(f) = (unsafe {
        vk.entry
            .get_instance_proc_addr(vk.instance.handle(), name.as_ptr())
    }) else {
        return false;
    };
    // SAFETY: the loader returned this entry point under its name, whose type this is.
    let f: vk::PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV =
        unsafe { std::mem::transmute(f) };
    let mut n = 0u32;
    // SAFETY: a count query on a device of this instance.
    if unsafe { f(pd, &mut n, std::ptr::null_mut()) } != vk::Result::SUCCESS {
        return false;
    }
    let mut shapes = vec![vk::CooperativeMatrixPropertiesNV::default(); n as usize];
    // SAFETY: `shapes` holds `n` initialized structs (their sType set).
    let r = unsafe { f(pd, &mut n, shapes.as_mut_ptr()) };
    if r != vk::Result::SUCCESS && r != vk::Result::INCOMPLETE {
        return false;
    }
    shapes.truncate(n as usize);
    let (half, single) = (vk::ComponentTypeNV::FLOAT16, vk::ComponentTypeNV::FLOAT32);
    shapes.iter().any(|s| {
        (s.m_size, s.n_size, s.k_size) == (16, 16, 16)
            && (s.a_type, s.b_type, s.c_type, s.d_type) == (half, half, single, single)
            && s.scope == vk::ScopeNV::SUBGROUP
    })
}

/// Enumerates every physical device.
///
/// # Errors
/// `Unavailable` when no device exists; `Driver` when enumeration fails.
pub fn enumerate(vk: &Vk) -> Result<Vec<Found>, BackendError> {
    let inst = &vk.instance;
    // SAFETY: queries on a valid instance.
    let devices = unsafe { inst.enumerate_physical_devices() }
        .map_err(|e| fail("vkEnumeratePhysicalDevices", e))?;
    let mut out = Vec::new();
    for (index, &pd) in devices.iter().enumerate() {
        // SAFETY: `pd` came from this instance.
        let props = unsafe { inst.get_physical_device_properties(pd) };
        // SAFETY: `pd` was enumerated from `inst`, which outlives this loop; the list is copied
        // out.
        let exts = unsafe { inst.enumerate_device_extension_properties(pd) }.unwrap_or_default();
        let has_ext = |n: &CStr| exts.iter().any(|e| e.extension_name_as_c_str() == Ok(n));
        let v12 = props.api_version >= vk::API_VERSION_1_2 && vk.api >= vk::API_VERSION_1_2;

        let mut pci = vk::PhysicalDevicePCIBusInfoPropertiesEXT::default();
        let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
        let mut driver = vk::PhysicalDeviceDriverProperties::default();
        let mut m3 = vk::PhysicalDeviceMaintenance3Properties::default();
        let has_pci = has_ext(c"VK_EXT_pci_bus_info");
        // Compute units, where a vendor extension says (the core API does not): NVIDIA's SM
        // count, AMD's engines × arrays × CUs per array.
        let mut sm = vk::PhysicalDeviceShaderSMBuiltinsPropertiesNV::default();
        let mut amd = vk::PhysicalDeviceShaderCorePropertiesAMD::default();
        let (has_sm, has_amd) = (
            has_ext(c"VK_NV_shader_sm_builtins"),
            has_ext(c"VK_AMD_shader_core_properties"),
        );
        // Which dot products of packed bytes the device accelerates (the KHR extension's
        // properties; a driver may offer them emulated, as lavapipe does).
        let has_dot = has_ext(vk::KHR_SHADER_INTEGER_DOT_PRODUCT_NAME);
        let mut dot_props = vk::PhysicalDeviceShaderIntegerDotProductProperties::default();
        {
            let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut subgroup);
            if has_dot && v12 {
                p2 = p2.push_next(&mut dot_props);
            }
            if has_pci {
                p2 = p2.push_next(&mut pci);
            }
            if has_sm {
                p2 = p2.push_next(&mut sm);
            }
            if has_amd {
                p2 = p2.push_next(&mut amd);
            }
            if v12 {
                p2 = p2.push_next(&mut driver).push_next(&mut m3);
            }
            // SAFETY: every struct in the chain is supported (checked above)
            // and outlives the call.
            unsafe { inst.get_physical_device_properties2(pd, &mut p2) };
        }
        let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
        // Dot products of packed bytes (compute_peak's int8): the KHR extension, which a Vulkan
        // 1.3 driver still lists (the instance asks for 1.2).
        let mut dot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default();
        let mut coopmat = vk::PhysicalDeviceCooperativeMatrixFeaturesNV::default();
        let has_coopmat = has_ext(vk::NV_COOPERATIVE_MATRIX_NAME);
        let mut executable = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default();
        let has_executable = has_ext(vk::KHR_PIPELINE_EXECUTABLE_PROPERTIES_NAME);
        if v12 {
            let mut f2 = vk::PhysicalDeviceFeatures2::default()
                .push_next(&mut f11)
                .push_next(&mut f12);
            if has_dot {
                f2 = f2.push_next(&mut dot);
            }
            if has_coopmat {
                f2 = f2.push_next(&mut coopmat);
            }
            if has_executable {
                f2 = f2.push_next(&mut executable);
            }
            // SAFETY: Vulkan 1.2 device: both structs are core; the dot product, cooperative
            // matrix and executable properties ones are chained only where the device lists
            // their extensions.
            unsafe { inst.get_physical_device_features2(pd, &mut f2) };
        }
        // SAFETY: a physical device of this instance.
        let core = unsafe { inst.get_physical_device_features(pd) };
        // SAFETY: `pd` was enumerated from `inst`, which outlives this loop; the families are
        // copied out.
        let families = unsafe { inst.get_physical_device_queue_family_properties(pd) };
        let compute: Vec<(u32, &vk::QueueFamilyProperties)> = families
            .iter()
            .enumerate()
            .filter(|(_, f)| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
            .map(|(i, f)| (i as u32, f))
            .collect();
        let Some(&(queue_family, qf)) = compute
            .iter()
            .find(|(_, f)| f.timestamp_valid_bits > 0)
            .or(compute.first())
        else {
            continue;
        };
        // SAFETY: `pd` was enumerated from `inst`, which outlives this loop; the call fills a
        // plain-data struct.
        let mem = unsafe { inst.get_physical_device_memory_properties(pd) };
        let heaps = &mem.memory_heaps[..mem.memory_heap_count as usize];
        let device_local: u64 = heaps
            .iter()
            .filter(|h| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
            .map(|h| h.size)
            .max()
            .unwrap_or(0);
        let name = cstr(&props.device_name);
        let device_type = match props.device_type {
            vk::PhysicalDeviceType::DISCRETE_GPU => "discrete_gpu",
            vk::PhysicalDeviceType::INTEGRATED_GPU => "integrated_gpu",
            vk::PhysicalDeviceType::VIRTUAL_GPU => "virtual_gpu",
            vk::PhysicalDeviceType::CPU => "cpu",
            _ => "other",
        };
        let pci_id = if has_pci {
            format!(
                "{:04x}:{:02x}:{:02x}.{:x}",
                pci.pci_domain, pci.pci_bus, pci.pci_device, pci.pci_function
            )
        } else {
            String::new()
        };
        let (driver_name, driver_info) = if v12 {
            (cstr(&driver.driver_name), cstr(&driver.driver_info))
        } else {
            (String::new(), String::new())
        };
        let l = &props.limits;
        let integer_dot_product = v12 && has_dot && dot.shader_integer_dot_product == vk::TRUE;
        let dot_accelerated = [
            dot_props.integer_dot_product4x8_bit_packed_unsigned_accelerated,
            dot_props.integer_dot_product4x8_bit_packed_signed_accelerated,
            dot_props.integer_dot_product4x8_bit_packed_mixed_signedness_accelerated,
        ]
        .iter()
        .all(|&a| a == vk::TRUE);
        let caps = VkCaps {
            subgroup_size: subgroup.subgroup_size,
            subgroup_arithmetic: subgroup
                .supported_operations
                .contains(vk::SubgroupFeatureFlags::ARITHMETIC)
                && subgroup
                    .supported_stages
                    .contains(vk::ShaderStageFlags::COMPUTE),
            max_workgroup_invocations: l.max_compute_work_group_invocations,
            max_workgroup_size: l.max_compute_work_group_size,
            max_shared_memory_bytes: l.max_compute_shared_memory_size,
            shader_float16: f12.shader_float16 == vk::TRUE,
            shader_float64: core.shader_float64 == vk::TRUE,
            integer_dot_product,
            quant_dot: if integer_dot_product && dot_accelerated {
                QuantDot::Q8
            } else {
                QuantDot::Off
            },
            storage_buffer_16bit: f11.storage_buffer16_bit_access == vk::TRUE,
            max_compute_workgroup_count: l.max_compute_work_group_count,
            vendor_id: props.vendor_id,
            scalar_attention: false,
            no_tile_attention: false,
            coopmat_f16: v12
                && coopmat.cooperative_matrix == vk::TRUE
                && subgroup.subgroup_size == 32
                && f12.shader_float16 == vk::TRUE
                && f11.storage_buffer16_bit_access == vk::TRUE
                && coopmat_16x16x16_f16(vk, pd),
            quant_blocks: 0,
            compute_units: if has_sm {
                sm.shader_sm_count
            } else if has_amd {
                amd.shader_engine_count
                    * amd.shader_arrays_per_engine_count
                    * amd.compute_units_per_shader_array
            } else {
                0
            },
        };
        let mut features = vec![format!("subgroup:{}", caps.subgroup_size)];
        if caps.subgroup_arithmetic {
            features.push("subgroup_arithmetic".into());
        }
        if caps.shader_float16 {
            features.push("fp16".into());
        }
        if caps.shader_float64 {
            features.push("fp64".into());
        }
        if f12.shader_int8 == vk::TRUE {
            features.push("int8".into());
        }
        if caps.integer_dot_product {
            features.push(gpufleet_kernels::INT8_DOT.into());
        }
        if caps.quant_dot != QuantDot::Off {
            features.push("int8_dot_accelerated".into());
        }
        if caps.storage_buffer_16bit {
            features.push("storage_16bit".into());
        }
        if caps.coopmat_f16 {
            features.push("coopmat_nv_f16".into());
        }
        if has_ext(c"VK_EXT_subgroup_size_control") {
            features.push("subgroup_size_control".into());
        }
        features.push(format!("timestamp_period_ns:{}", l.timestamp_period));
        features.push(format!("timestamp_valid_bits:{}", qf.timestamp_valid_bits));
        for (i, h) in heaps.iter().enumerate() {
            let local = if h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL) {
                "device_local"
            } else {
                "host"
            };
            features.push(format!("heap{i}:{}MiB:{local}", h.size >> 20));
        }
        let arch = arch(props.vendor_id, &name);
        let peaks = if device_type == "cpu" {
            cpu::device::discover().peaks
        } else {
            peaks::gpu_peaks(&name, &arch, 0, 0)
        };
        let info = DeviceInfo {
            id: lookup::device_id(BackendKind::Vulkan, &pci_id, index),
            backend: BackendKind::Vulkan.name().into(),
            vendor: format!("0x{:04x}", props.vendor_id),
            name: name.clone(),
            arch: if arch.is_empty() {
                device_type.to_string()
            } else {
                arch
            },
            pci_bus_id: pci_id,
            compute_units: 0,
            clock_mhz: 0,
            memory_bytes: device_local,
            driver_version: if driver_info.is_empty() {
                format!("{driver_name} {}", props.driver_version)
            } else {
                format!("{driver_name} {driver_info}")
            },
            api_version: format!("Vulkan {}", version(props.api_version)),
            features,
            peaks,
            device_type: device_type.into(),
        };
        let fingerprint = format!(
            "{:04x}|{:04x}|{}|{:02x?}|{}",
            props.vendor_id,
            props.device_id,
            props.driver_version,
            props.pipeline_cache_uuid,
            info.id
        );
        out.push(Found {
            info,
            physical: pd,
            caps,
            queue_family,
            timestamp_period: l.timestamp_period,
            timestamp_bits: qf.timestamp_valid_bits,
            executable_stats: v12
                && has_executable
                && executable.pipeline_executable_info == vk::TRUE,
            api_version: props.api_version,
            max_storage_buffer_range: l.max_storage_buffer_range,
            // Before Vulkan 1.1 no limit is reported; 2 GiB is what the strictest drivers allow.
            max_allocation: if v12 {
                m3.max_memory_allocation_size
            } else {
                1 << 31
            },
            fingerprint,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_from_radv_and_nvidia_names() {
        assert_eq!(
            arch(0x1002, "AMD Radeon RX 580 Series (RADV POLARIS10)"),
            "gfx803"
        );
        assert_eq!(
            arch(0x1002, "AMD Radeon RX 5600 XT (RADV NAVI10)"),
            "gfx1010"
        );
        assert_eq!(arch(0x10de, "NVIDIA H100 80GB HBM3"), "sm_90");
        assert_eq!(arch(0x10005, "llvmpipe (LLVM 15.0.6, 256 bits)"), "");
    }
}
