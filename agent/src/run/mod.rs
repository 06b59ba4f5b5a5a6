//! The run core: what the agent does with a run request, whichever way it
//! arrived (the gRPC service today; agents dialing a coordinator later). It
//! speaks protobuf messages (`RunRequest` in, `RunEvent`s out) and knows
//! nothing of tonic.
//!
//! # Layout
//! - [`plan`]: a RunSpec checked against the inventory, the catalog, the
//!   allowlist and the power sensors into a [`plan::Plan`] (or an error
//!   naming the field).
//! - [`queue`]: [`queue::DeviceQueues`], one run at a time per physical
//!   device with a bounded number waiting, and cancellation handles.
//! - [`lifecycle`]: a run from admission to its one RunResult: wait for the
//!   device, run the worker, forward progress, account the energy.
//! - [`result`]: a worker's end turned into the RunResult.
//! - [`counters`]: finished runs by status and worker crashes, over the process's life (read by
//!   the metrics exporter).
//! - [`host_peak`]: the model of a worker's host-memory peak, the admission
//!   against what the host can give now, and the worker's limit.
//!
//! # Lifecycle
//! [`AgentCore::start`] discovers the inventory (in workers) and probes the
//! power sources. For each request [`AgentCore::submit`] plans the run,
//! admits it to its device's queue and returns the receiver of its events;
//! [`AgentCore::cancel`] signals a queued or running run. `AgentCore::describe`
//! (the inventory as an `AgentInfo`) is implemented in `service/describe.rs`
//! next to the wire conversions it uses, so this module never imports the
//! service.

pub mod counters;
pub mod host_peak;
pub mod lifecycle;
pub mod plan;
pub mod queue;
pub mod result;

use crate::inventory::Inventory;
use crate::isolation::WorkerCommand;
use crate::isolation::parent::WorkerPool;
use crate::power::PowerConfig;
use crate::power::state::PowerState;
use queue::DeviceQueues;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Everything the agent is started with.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// How to start worker processes.
    pub worker: WorkerCommand,
    /// Serve `debug_crash`, `debug_hang`, `debug_wrong`, `debug_alloc`.
    pub enable_debug_kernels: bool,
    /// Runs allowed to wait per device (past it: RESOURCE_EXHAUSTED).
    pub queue_capacity: usize,
    /// Bearer token required from clients, if any.
    pub token: Option<String>,
    /// Deadline for each backend's discovery worker.
    pub discovery_timeout: Duration,
    /// Where to look for power sensors and how often to read them.
    pub power: PowerConfig,
    /// Where /proc and /sys are read for the host's memory (`/`; tests give a fixture root).
    pub host_root: PathBuf,
    /// Run each worker under a memory limit (RLIMIT_DATA) of its admitted size; off only for a
    /// driver that maps large private writable regions it never touches.
    pub limit_worker_memory: bool,
    /// Keep a worker process after an `ok` run for the next run with the same backend, device,
    /// environment and memory limit (see [`WorkerPool`]); off: a fresh process for every run.
    pub reuse_workers: bool,
    /// Which values a run may give the loader variables (`[loader] allow` of the config file).
    pub loader: crate::env::LoaderPolicy,
    /// PCI addresses for devices whose driver reports none (`--device-pci`, `[device_pci]`):
    /// device id → normalised address.
    pub device_pci: std::collections::BTreeMap<String, String>,
}

impl AgentConfig {
    /// Defaults with the given worker command.
    pub fn new(worker: WorkerCommand) -> Self {
        AgentConfig {
            worker,
            enable_debug_kernels: false,
            queue_capacity: 16,
            token: None,
            discovery_timeout: Duration::from_secs(30),
            power: PowerConfig::default(),
            host_root: PathBuf::from("/"),
            limit_worker_memory: true,
            reuse_workers: true,
            loader: crate::env::LoaderPolicy::default(),
            device_pci: std::collections::BTreeMap::new(),
        }
    }
}

/// The agent's state: configuration, inventory, queues, power sampler.
pub struct AgentCore {
    pub config: AgentConfig,
    pub inventory: Inventory,
    pub queues: Arc<DeviceQueues>,
    pub power: PowerState,
    /// Worker processes kept between runs.
    pub workers: Arc<WorkerPool>,
}

impl AgentCore {
    /// Discovers the inventory (in workers), probes the power sources and
    /// builds the agent.
    pub async fn start(config: AgentConfig) -> Arc<AgentCore> {
        let (mut inventory, power) = tokio::join!(
            Inventory::discover(&config.worker, config.discovery_timeout),
            PowerState::start(&config.power)
        );
        // The driver stack's facts, read under the same root as the power sensors.
        inventory
            .host
            .platform
            .extend(crate::host::probe::probe(&config.power.sysfs_root));
        for skipped in inventory.assign_pci(&config.device_pci) {
            tracing::warn!("{skipped}");
        }
        Self::with_parts(config, inventory, power)
    }

    /// Builds the agent around an inventory and power state made elsewhere.
    pub fn with_parts(
        config: AgentConfig,
        inventory: Inventory,
        power: PowerState,
    ) -> Arc<AgentCore> {
        let queues = DeviceQueues::new(config.queue_capacity);
        let workers = WorkerPool::new(config.reuse_workers);
        Arc::new(AgentCore {
            config,
            inventory,
            queues,
            power,
            workers,
        })
    }
}
