//! What this agent has: the host, and for each backend its devices or the
//! reason it is unavailable. Built once at start by running one discovery
//! worker per backend in parallel, each with a deadline.

use crate::backend::{self, DeviceInfo, KernelSupport};
use crate::host::HostFacts;
use crate::isolation::{WorkerCommand, parent};
use std::collections::BTreeMap;
use std::time::Duration;

/// One backend as the agent sees it after discovery.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendState {
    pub name: String,
    pub available: bool,
    /// Why it is unavailable; empty when available.
    pub reason: String,
    pub kernels: Vec<KernelSupport>,
    pub devices: Vec<DeviceInfo>,
}

/// The host and its backends.
#[derive(Debug, Clone, PartialEq)]
pub struct Inventory {
    pub host: HostFacts,
    pub backends: Vec<BackendState>,
}

impl Inventory {
    /// Discovers every compiled-in backend through discovery workers.
    pub async fn discover(worker: &WorkerCommand, timeout: Duration) -> Inventory {
        let names: Vec<(String, Vec<KernelSupport>)> = backend::registry::all()
            .iter()
            .map(|b| (b.name().to_string(), b.kernels()))
            .collect();
        let found = futures::future::join_all(
            names
                .iter()
                .map(|(name, _)| parent::discover(worker, name, timeout)),
        )
        .await;
        let backends = names
            .into_iter()
            .zip(found)
            .map(|((name, kernels), result)| match result {
                Ok(devices) if devices.is_empty() => BackendState {
                    name,
                    available: false,
                    reason: "no devices found".into(),
                    kernels,
                    devices,
                },
                Ok(devices) => BackendState {
                    name,
                    available: true,
                    reason: String::new(),
                    kernels,
                    devices,
                },
                Err(e) => BackendState {
                    name,
                    available: false,
                    reason: match e {
                        backend::BackendError::Unavailable { reason, .. } => reason,
                        other => other.to_string(),
                    },
                    kernels,
                    devices: Vec::new(),
                },
            })
            .collect();
        Inventory {
            host: HostFacts::read(),
            backends,
        }
    }

    /// Every device of every available backend.
    pub fn devices(&self) -> impl Iterator<Item = (&BackendState, &DeviceInfo)> {
        self.backends
            .iter()
            .flat_map(|b| b.devices.iter().map(move |d| (b, d)))
    }

    /// The device with `id` and its backend.
    pub fn device(&self, id: &str) -> Option<(&BackendState, &DeviceInfo)> {
        self.devices().find(|(_, d)| d.id == id)
    }

    /// Gives each device named in `given` (device id → normalised PCI address) that address, when
    /// its driver reports none: the key of its PCIe link in the platform facts and of its power
    /// sensors. Returns a line for each entry not applied: an id no backend found (perhaps a driver
    /// that failed to load) or a device whose driver reports another address (the driver's stays).
    pub fn assign_pci(&mut self, given: &BTreeMap<String, String>) -> Vec<String> {
        let mut skipped = Vec::new();
        for (id, pci) in given {
            let found = self
                .backends
                .iter_mut()
                .flat_map(|b| b.devices.iter_mut())
                .find(|d| &d.id == id);
            match found {
                None => {
                    let known: Vec<&str> = self.devices().map(|(_, d)| d.id.as_str()).collect();
                    skipped.push(format!(
                        "--device-pci {id}={pci}: no device {id} (devices: {})",
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    ));
                }
                Some(d) if d.pci_bus_id.is_empty() => d.pci_bus_id = pci.clone(),
                Some(d) => {
                    if crate::host::pci::normalize_pci(&d.pci_bus_id).as_deref() != Some(pci) {
                        skipped.push(format!(
                            "--device-pci {id}={pci}: its driver reports {}, which stays",
                            d.pci_bus_id
                        ));
                    }
                }
            }
        }
        skipped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(id: &str, pci: &str) -> DeviceInfo {
        DeviceInfo {
            id: id.into(),
            pci_bus_id: pci.into(),
            ..DeviceInfo::default()
        }
    }

    #[test]
    fn a_pci_address_is_given_only_to_a_device_without_one() {
        let mut inv = Inventory {
            host: HostFacts::read(),
            backends: vec![BackendState {
                name: "opencl".into(),
                available: true,
                reason: String::new(),
                kernels: Vec::new(),
                devices: vec![device("opencl:0", ""), device("opencl:1", "0000:03:00.0")],
            }],
        };
        let given = BTreeMap::from([
            ("opencl:0".to_string(), "0000:0a:00.0".to_string()),
            ("opencl:1".to_string(), "0000:0b:00.0".to_string()),
            ("vulkan:9".to_string(), "0000:0c:00.0".to_string()),
        ]);
        let skipped = inv.assign_pci(&given);
        assert_eq!(inv.device("opencl:0").unwrap().1.pci_bus_id, "0000:0a:00.0");
        assert_eq!(inv.device("opencl:1").unwrap().1.pci_bus_id, "0000:03:00.0");
        assert_eq!(skipped.len(), 2, "{skipped:?}");
        assert!(skipped[0].contains("reports 0000:03:00.0"), "{skipped:?}");
        assert!(
            skipped[1].contains("no device vulkan:9") && skipped[1].contains("opencl:0, opencl:1"),
            "{skipped:?}"
        );
        // The same address again is no conflict.
        let same = BTreeMap::from([("opencl:1".to_string(), "0000:03:00.0".to_string())]);
        assert!(inv.assign_pci(&same).is_empty());
    }
}
