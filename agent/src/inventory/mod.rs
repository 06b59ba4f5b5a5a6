//! What this agent has: the host, and for each backend its devices or the
//! reason it is unavailable. Built once at start by running one discovery
//! worker per backend in parallel, each with a deadline.

use crate::backend::{self, DeviceInfo, KernelSupport};
use crate::host::HostFacts;
use crate::isolation::{WorkerCommand, parent};
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
}
