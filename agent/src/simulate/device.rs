//! What a simulated agent says about itself: one host, one device, the kernels it answers.
//!
//! The coordinator plans a campaign from the description alone (a device's backend must be one
//! it lists as available, with the kernel, variant and dtype in its support list), so the device
//! is a device of the `cpu` backend: `gpufleet run --backend cpu` and the fleet scale benchmark
//! select it like a real one, and the coordinator's `--backend` takes only real backend names.
//! Everything else says it is simulated, so it never passes for real hardware in a description,
//! a result or a sibling group: the device's name, vendor, architecture and driver, its feature
//! flag [`FEATURE`], the host's OS and the platform key `simulated`.

use crate::backend::{DeviceInfo, KernelSupport, Peaks};
use crate::host::HostFacts;
use crate::inventory::BackendState;
use crate::service::convert;
use gpufleet_proto::v1 as pb;
use std::collections::BTreeMap;

/// The one device's index in its id (`<backend>:simulated`): it says what it is.
pub const DEVICE_INDEX: &str = "simulated";
/// Its backend (see the module's notes for why a real one).
pub const BACKEND: &str = "cpu";
/// Its model name: a sibling group of simulated devices is named by it.
pub const NAME: &str = "Simulated device (gpufleet-agent simulate)";
pub const VENDOR: &str = "gpufleet-simulate";
/// The feature flag that marks a simulated device.
pub const FEATURE: &str = "simulated";
/// The driver in the description and the fingerprint (a sibling group's driver).
pub const DRIVER: &str = "simulated";
/// Its PCI address: the key of the `pcie_link:` entries of the platform.
pub const PCI_BUS_ID: &str = "0000:5a:00.0";
/// The device's maximum PCIe link, and the link it runs on unless `--pcie` narrows it.
pub const MAX_LINK: &str = "gen3 x16";
/// The kernels a simulated agent answers, each with its default variant in f32.
pub const KERNELS: [&str; 4] = ["noop", "copy", "vec_add", "gemm"];
/// Device memory: the bound of a run's footprint, as on a real device.
pub const MEMORY_BYTES: u64 = 16 << 30;
/// The simulated peaks, which the draw runs at a fixed fraction of.
pub const FP32_FLOPS: f64 = 10e12;
pub const MEMORY_BYTES_PER_S: f64 = 500e9;
/// Runs allowed to wait on the device before new ones are refused (as the agent's default).
pub const QUEUE_CAPACITY: usize = 16;

/// What the simulated device is as a sibling group sees it (model, backend, driver, memory): the
/// simulated model by default; with `--like`, a real device's, so that the simulated agents are
/// that device's siblings. Vendor, architecture, feature flag and host still say simulated.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub name: String,
    pub backend: String,
    pub driver: String,
    pub memory_bytes: u64,
}

impl Default for Model {
    fn default() -> Model {
        Model {
            name: NAME.into(),
            backend: BACKEND.into(),
            driver: DRIVER.into(),
            memory_bytes: MEMORY_BYTES,
        }
    }
}

impl Model {
    /// The model of device `id` in `describe_json` (what `gpufleet-agent describe --json`
    /// prints), or of its only device when `id` is `None`.
    ///
    /// # Errors
    /// Not that JSON, no such device (naming the ones there are), several devices and no `id`,
    /// or a device of a backend a simulated agent cannot describe.
    pub fn like(describe_json: &str, id: Option<&str>) -> Result<Model, String> {
        let info: pb::AgentInfo = serde_json::from_str(describe_json)
            .map_err(|e| format!("not the output of `gpufleet-agent describe --json`: {e}"))?;
        let ids = || {
            info.devices
                .iter()
                .map(|d| d.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let d = match (id, &info.devices[..]) {
            (None, [only]) => only,
            (None, []) => return Err("it describes no device".into()),
            (None, _) => {
                return Err(format!(
                    "it describes several devices ({}): choose one with --like-device",
                    ids()
                ));
            }
            (Some(id), devices) => devices.iter().find(|d| d.id == id).ok_or_else(|| {
                format!(
                    "no device {} in it (devices: {})",
                    gpufleet_kernels::quote(id),
                    ids()
                )
            })?,
        };
        if gpufleet_kernels::BackendKind::parse(&d.backend).is_none() {
            return Err(format!(
                "device {} has backend {}, which a simulated agent cannot describe",
                d.id,
                gpufleet_kernels::quote(&d.backend)
            ));
        }
        Ok(Model {
            name: d.name.clone(),
            backend: d.backend.clone(),
            driver: d.driver_version.clone(),
            memory_bytes: d.memory_bytes,
        })
    }
}

/// The simulated device of `model`.
pub fn device(model: &Model) -> DeviceInfo {
    let source = "simulated (gpufleet-agent simulate)".to_string();
    DeviceInfo {
        id: format!("{}:{DEVICE_INDEX}", model.backend),
        backend: model.backend.clone(),
        vendor: VENDOR.into(),
        name: model.name.clone(),
        arch: "simulated".into(),
        pci_bus_id: PCI_BUS_ID.into(),
        compute_units: 64,
        clock_mhz: 1500,
        memory_bytes: model.memory_bytes,
        driver_version: model.driver.clone(),
        api_version: String::new(),
        features: vec![FEATURE.into()],
        peaks: Peaks {
            fp32_flops: FP32_FLOPS,
            fp16_flops: 0.0,
            memory_bytes_per_s: MEMORY_BYTES_PER_S,
            fp32_source: source.clone(),
            fp16_source: "none: a simulated device answers f32 only".into(),
            memory_source: source,
        },
        device_type: "other".into(),
    }
}

/// [`KERNELS`], each with the catalog's default variant, in f32.
pub fn support() -> Vec<KernelSupport> {
    KERNELS
        .iter()
        .filter_map(|k| gpufleet_kernels::find_kernel(k))
        .map(|k| KernelSupport {
            kernel: k.name.to_string(),
            variants: vec![k.default_variant.to_string()],
            dtypes: vec!["f32".into()],
        })
        .collect()
}

/// The host's platform facts: the `simulated` mark and the device's PCIe link (`link`, e.g.
/// `gen3 x4`) and its maximum, under the keys the agent's probe writes.
pub fn platform(link: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("simulated".into(), "gpufleet-agent simulate".into()),
        (format!("pcie_link:{PCI_BUS_ID}"), link.to_string()),
        (format!("pcie_link_max:{PCI_BUS_ID}"), MAX_LINK.to_string()),
    ])
}

fn host(name: &str, link: &str) -> HostFacts {
    HostFacts {
        hostname: name.to_string(),
        os: "simulated (gpufleet-agent simulate)".into(),
        kernel_version: String::new(),
        cpu_model: "simulated".into(),
        logical_cores: 1,
        physical_cores: 1,
        memory_bytes: MEMORY_BYTES,
        container_hints: vec!["simulated".into()],
        arch: std::env::consts::ARCH.into(),
        platform: platform(link),
    }
}

/// The description of the simulated agent `name` whose `device` runs on PCIe `link`, in the
/// agent's own wire conversions. Built when asked (at each attach), so an agent holds none.
pub fn agent_info(name: &str, link: &str, device: &DeviceInfo) -> pb::AgentInfo {
    let backend = BackendState {
        name: device.backend.clone(),
        available: true,
        reason: String::new(),
        kernels: support(),
        devices: vec![device.clone()],
    };
    pb::AgentInfo {
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
        host: Some(convert::host(&host(name, link))),
        devices: backend.devices.iter().map(convert::device).collect(),
        backends: vec![convert::backend(&backend, false)],
        kernels: KERNELS
            .iter()
            .filter_map(|k| gpufleet_kernels::find_kernel(k))
            .map(convert::kernel)
            .collect(),
        power_sources: Vec::new(),
        debug_kernels: false,
        queue_capacity: QUEUE_CAPACITY as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_plans_like_a_cpu_device_but_says_it_is_simulated() {
        let info = agent_info("sim-0007", "gen3 x4", &device(&Model::default()));
        let [d] = &info.devices[..] else {
            panic!("one device: {:?}", info.devices)
        };
        assert_eq!(
            (d.backend.as_str(), d.id.as_str()),
            ("cpu", "cpu:simulated")
        );
        assert!(d.name.contains("Simulated") && d.vendor == VENDOR && d.driver_version == DRIVER);
        assert!(d.features.iter().any(|f| f == FEATURE));
        let [b] = &info.backends[..] else {
            panic!("one backend")
        };
        assert!(b.available && b.name == d.backend);
        for k in ["noop", "copy", "gemm"] {
            let s = b.kernels.iter().find(|s| s.kernel == k).unwrap();
            let def = gpufleet_kernels::find_kernel(k).unwrap();
            assert_eq!(s.variants, [def.default_variant]);
            assert_eq!(s.dtypes, ["f32"]);
        }
        assert_eq!(
            b.kernels.len(),
            KERNELS.len(),
            "every kernel is in the catalog"
        );
        let host = info.host.unwrap();
        assert_eq!(host.hostname, "sim-0007");
        assert_eq!(host.platform["simulated"], "gpufleet-agent simulate");
        assert_eq!(host.platform[&format!("pcie_link:{PCI_BUS_ID}")], "gen3 x4");
        assert_eq!(
            host.platform[&format!("pcie_link_max:{PCI_BUS_ID}")],
            MAX_LINK
        );
        assert!(info.power_sources.is_empty());
    }

    #[test]
    fn a_model_like_a_described_device_keeps_the_simulated_marks() {
        let real = |id: &str, name: &str| pb::Device {
            id: id.into(),
            backend: id.split(':').next().unwrap().into(),
            name: name.into(),
            driver_version: "Mesa 24.2.8".into(),
            memory_bytes: 8 << 30,
            ..Default::default()
        };
        let mut described = pb::AgentInfo {
            devices: vec![real("opencl:0", "AMD Radeon RX 580")],
            ..Default::default()
        };
        let json = serde_json::to_string(&described).unwrap();
        let m = Model::like(&json, None).unwrap();
        assert_eq!(
            m,
            Model {
                name: "AMD Radeon RX 580".into(),
                backend: "opencl".into(),
                driver: "Mesa 24.2.8".into(),
                memory_bytes: 8 << 30,
            }
        );
        let d = device(&m);
        assert_eq!(
            (d.id.as_str(), d.vendor.as_str()),
            ("opencl:simulated", VENDOR)
        );
        assert!(d.features.iter().any(|f| f == FEATURE));
        let info = agent_info("sim-0000", MAX_LINK, &d);
        assert_eq!(info.backends[0].name, "opencl");
        assert_eq!(
            info.host.unwrap().platform["simulated"],
            "gpufleet-agent simulate"
        );

        described
            .devices
            .push(real("vulkan:0", "AMD Radeon RX 580 (RADV POLARIS10)"));
        let json = serde_json::to_string(&described).unwrap();
        let e = Model::like(&json, None).unwrap_err();
        assert!(
            e.contains("--like-device") && e.contains("opencl:0, vulkan:0"),
            "{e}"
        );
        assert_eq!(
            Model::like(&json, Some("vulkan:0")).unwrap().backend,
            "vulkan"
        );
        let e = Model::like(&json, Some("hip:0")).unwrap_err();
        assert!(e.contains("no device `hip:0`"), "{e}");
        assert!(
            Model::like("{\"devices\": 3}", None)
                .unwrap_err()
                .contains("describe --json")
        );
    }
}
