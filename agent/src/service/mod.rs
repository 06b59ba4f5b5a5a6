//! The gRPC service (`gpufleet.v1.Agent`) plus health and reflection.
//!
//! A Run request is checked ([`run::plan`]), admitted to its device's queue
//! ([`queue::Scheduler`]), then a task waits for the device, runs the worker
//! and streams progress and exactly one RunResult. If the client goes away
//! mid-run the run is cancelled: nobody would receive its result.

pub mod convert;
pub mod power;
pub mod queue;
pub mod run;

use crate::error::AgentError;
use crate::inventory::Inventory;
use crate::isolation::{WorkerCommand, monotonic_ns, parent};
use crate::power::sampler::{Sampler, SamplerConfig};
use crate::power::{PowerConfig, Unavailable};
use gpufleet_kernels::RunDefaults;
use gpufleet_proto::v1 as pb;
use pb::agent_server::{Agent, AgentServer};
use queue::Scheduler;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status};

/// Everything the agent is started with.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// How to start worker processes.
    pub worker: WorkerCommand,
    /// Serve `debug_crash`, `debug_hang`, `debug_wrong`.
    pub enable_debug_kernels: bool,
    /// Runs allowed to wait per device (past it: RESOURCE_EXHAUSTED).
    pub queue_capacity: usize,
    /// Bearer token required from clients, if any.
    pub token: Option<String>,
    /// Deadline for each backend's discovery worker.
    pub discovery_timeout: Duration,
    pub defaults: RunDefaults,
    /// Where to look for power sensors and how often to read them.
    pub power: PowerConfig,
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
            defaults: RunDefaults::default(),
            power: PowerConfig::default(),
        }
    }
}

/// The queue a device's runs wait in: its PCI bus id where it has one, `host-cpu`
/// for every device that runs on the host's CPU, else its id.
pub fn queue_key(d: &crate::backend::DeviceInfo) -> String {
    if d.device_type == "cpu" || d.backend == "cpu" {
        "host-cpu".into()
    } else if !d.pci_bus_id.is_empty() {
        format!("pci:{}", d.pci_bus_id.to_ascii_lowercase())
    } else {
        d.id.clone()
    }
}

/// The power sampler and the sources that could not be used.
pub struct PowerState {
    pub sampler: Sampler,
    pub unavailable: Vec<Unavailable>,
    /// Per power channel: until when a run kept the device busy, and the last
    /// idle baseline measured while it was really idle.
    pub idle: std::sync::Mutex<std::collections::HashMap<usize, power::IdleMemo>>,
}

impl PowerState {
    /// Notes that a run on `channel` just ended.
    pub fn mark_busy(&self, channel: usize) {
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(channel)
            .or_default()
            .busy_until_ns = monotonic_ns();
    }
}

impl PowerState {
    /// Probes every source (tool calls included, so off the async threads)
    /// and starts the sampler.
    pub async fn start(config: &PowerConfig) -> PowerState {
        let cfg = config.clone();
        let probe = tokio::task::spawn_blocking(move || crate::power::probe(&cfg))
            .await
            .unwrap_or_default();
        for u in &probe.unavailable {
            tracing::debug!(source = u.name, reason = %u.reason, "power source unavailable");
        }
        PowerState {
            idle: Default::default(),
            sampler: Sampler::start(
                probe.sources,
                SamplerConfig {
                    rate_hz: config.rate_hz,
                    slow_interval: config.command_interval,
                    ..SamplerConfig::default()
                },
            ),
            unavailable: probe.unavailable,
        }
    }
}

/// The agent's state: configuration, inventory, queues, power sampler.
pub struct AgentCore {
    pub config: AgentConfig,
    pub inventory: Inventory,
    pub scheduler: Arc<Scheduler>,
    pub power: PowerState,
}

impl AgentCore {
    /// Discovers the inventory (in workers), probes the power sources and
    /// builds the agent.
    pub async fn start(config: AgentConfig) -> Arc<AgentCore> {
        let (inventory, power) = tokio::join!(
            Inventory::discover(&config.worker, config.discovery_timeout),
            PowerState::start(&config.power)
        );
        Self::with_parts(config, inventory, power)
    }

    /// Builds the agent around an inventory and power state made elsewhere.
    pub fn with_parts(
        config: AgentConfig,
        inventory: Inventory,
        power: PowerState,
    ) -> Arc<AgentCore> {
        let scheduler = Scheduler::new(config.queue_capacity);
        Arc::new(AgentCore {
            config,
            inventory,
            scheduler,
            power,
        })
    }

    /// The Describe answer.
    pub fn describe(&self) -> pb::AgentInfo {
        let debug = self.config.enable_debug_kernels;
        pb::AgentInfo {
            agent_version: env!("CARGO_PKG_VERSION").to_string(),
            host: Some(convert::host(&self.inventory.host)),
            devices: self
                .inventory
                .devices()
                .map(|(_, d)| convert::device(d))
                .collect(),
            backends: self
                .inventory
                .backends
                .iter()
                .map(|b| convert::backend(b, debug))
                .collect(),
            kernels: gpufleet_kernels::catalog()
                .iter()
                .filter(|k| debug || !k.debug)
                .map(convert::kernel)
                .collect(),
            power_sources: power::describe(self),
            debug_kernels: debug,
            queue_capacity: self.config.queue_capacity as u32,
        }
    }
}

/// The tonic service around an [`AgentCore`].
#[derive(Clone)]
pub struct AgentService {
    core: Arc<AgentCore>,
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::RunEvent, Status>> + Send>>;
type PowerStream = Pin<Box<dyn Stream<Item = Result<pb::PowerSample, Status>> + Send>>;

fn progress_event(phase: &str, message: String, iterations: u32) -> pb::RunEvent {
    pb::RunEvent {
        event: Some(pb::run_event::Event::Progress(pb::Progress {
            phase: phase.to_string(),
            message,
            iterations_done: iterations,
        })),
    }
}

fn result_event(r: pb::RunResult) -> pb::RunEvent {
    pb::RunEvent {
        event: Some(pb::run_event::Event::Result(r)),
    }
}

#[tonic::async_trait]
impl Agent for AgentService {
    async fn describe(
        &self,
        _req: Request<pb::DescribeRequest>,
    ) -> Result<Response<pb::AgentInfo>, Status> {
        Ok(Response::new(self.core.describe()))
    }

    type RunStream = EventStream;

    async fn run(&self, req: Request<pb::RunRequest>) -> Result<Response<EventStream>, Status> {
        let req = req.into_inner();
        let spec = req.spec.ok_or_else(|| {
            Status::from(AgentError::InvalidArgument {
                field: "spec",
                message: "is required".into(),
            })
        })?;
        let run_id = if req.run_id.is_empty() {
            new_run_id()
        } else {
            req.run_id
        };
        let plan = run::plan(&self.core, &run_id, &spec)?;
        // One run at a time per physical device: the OpenCL and Vulkan views of
        // one GPU (same PCI id) share a queue, and so do all CPU devices (cpu,
        // PoCL, lavapipe), so runs never disturb each other's times or power.
        let mut ticket = self
            .core
            .scheduler
            .admit(&queue_key(&plan.device), &run_id)?;
        let (tx, rx) = mpsc::channel::<Result<pb::RunEvent, Status>>(64);
        let core = self.core.clone();
        tokio::spawn(async move {
            tracing::info!(run_id = %plan.run_id, kernel = plan.problem.kernel.name, device = %plan.device.id, "run queued");
            let _ = tx
                .send(Ok(progress_event("queued", plan.device.id.clone(), 0)))
                .await;
            if !plan.supported {
                let msg = format!(
                    "backend {} does not implement {} variant {} in {}",
                    plan.device.backend,
                    plan.problem.kernel.name,
                    plan.problem.variant,
                    plan.problem.dtype.name()
                );
                let _ = tx
                    .send(Ok(result_event(run::bare_result(
                        &plan,
                        pb::RunStatus::Unsupported,
                        msg,
                    ))))
                    .await;
                return;
            }
            let Some(_permit) = ticket.start().await else {
                let r = run::bare_result(
                    &plan,
                    pb::RunStatus::Cancelled,
                    "cancelled while queued".into(),
                );
                let _ = tx.send(Ok(result_event(r))).await;
                return;
            };
            let _ = tx
                .send(Ok(progress_event("starting", String::new(), 0)))
                .await;
            let worker_start_ns = monotonic_ns();
            if plan.power.is_some() {
                // A counter reading right before the window (see want_counter).
                core.power.sampler.want_counter();
            }
            let started = crate::isolation::unix_now_s();
            let (ptx, mut prx) = mpsc::channel::<parent::ProgressEvent>(16);
            let forward_tx = tx.clone();
            let forward = tokio::spawn(async move {
                while let Some(p) = prx.recv().await {
                    let _ = forward_tx
                        .send(Ok(progress_event(&p.phase, p.message, p.iterations)))
                        .await;
                }
            });
            // Cancel the run when the client goes away.
            let watch_tx = tx.clone();
            let scheduler = core.scheduler.clone();
            let watch_id = plan.run_id.clone();
            let watcher = tokio::spawn(async move {
                watch_tx.closed().await;
                scheduler.cancel(&watch_id);
            });
            let outcome = parent::run_worker(
                &core.config.worker,
                &plan.job,
                &plan.env,
                plan.timeout,
                ticket.cancel.clone(),
                ptx,
            )
            .await;
            let _ = forward.await;
            watcher.abort();
            let power_iterations = match &outcome {
                Ok(parent::WorkerRun {
                    ending: parent::Ending::Finished(o),
                    ..
                }) => o.power_iterations,
                _ => 0,
            };
            let mut result = match outcome {
                Ok(run) => run::finish(&plan, run, started),
                Err(e) => run::bare_result(&plan, pb::RunStatus::Error, e.to_string()),
            };
            if let Some(p) = &plan.power
                && result.status() == pb::RunStatus::Ok
                && result.window_end_ns > result.window_begin_ns
            {
                let sampler = &core.power.sampler;
                // A fresh counter reading past the window (asked for now), and
                // two sensor periods.
                sampler.want_counter();
                let wait = (p.period * 2)
                    .max(Duration::from_millis(500))
                    .min(Duration::from_secs(3));
                power::wait_for_sample_after(sampler, p.channel, result.window_end_ns, wait).await;
                let window = power::Window {
                    worker_start_ns,
                    begin_ns: result.window_begin_ns,
                    end_ns: result.window_end_ns,
                    iterations: result.times_s.len() as u64 + power_iterations,
                    power_iterations,
                };
                let (samples, energy) =
                    power::energy(sampler, &core.power.idle, &plan, p, &window, &result);
                for s in samples {
                    let ev = pb::RunEvent {
                        event: Some(pb::run_event::Event::Power(s)),
                    };
                    if tx.send(Ok(ev)).await.is_err() {
                        break;
                    }
                }
                result.energy = energy;
            }
            if let Some(p) = &plan.power {
                core.power.mark_busy(p.channel);
            }
            tracing::info!(run_id = %plan.run_id, status = ?result.status(), "run finished");
            let _ = tx.send(Ok(result_event(result))).await;
            drop(ticket);
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn cancel(
        &self,
        req: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::CancelReply>, Status> {
        let id = req.into_inner().run_id;
        let found = self.core.scheduler.cancel(&id);
        let message = if found {
            format!("cancelling run {id}")
        } else {
            format!("no queued or running run with id {id}")
        };
        Ok(Response::new(pb::CancelReply { found, message }))
    }

    type StreamPowerStream = PowerStream;

    async fn stream_power(
        &self,
        req: Request<pb::PowerRequest>,
    ) -> Result<Response<PowerStream>, Status> {
        let req = req.into_inner();
        if self.core.power.sampler.channels().is_empty() {
            return Err(Status::failed_precondition(
                "this agent has no power sources (see Describe for why each is unavailable)",
            ));
        }
        let chosen = power::select_channels(&self.core, &req)?;
        let mut feed = self.core.power.sampler.subscribe();
        let (tx, rx) = mpsc::channel::<Result<pb::PowerSample, Status>>(256);
        let core = self.core.clone();
        tokio::spawn(async move {
            loop {
                match feed.recv().await {
                    Ok(s) if chosen.contains(&s.channel) => {
                        let wire = power::sample_pb(&core.power.sampler, &s);
                        if tx.send(Ok(wire)).await.is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    // A slow client misses samples rather than stalling the sampler.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        tracing::debug!("power stream skipped {n} samples");
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

fn new_run_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "agent-{}-{}-{}",
        std::process::id(),
        crate::isolation::monotonic_ns(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Checks the bearer token of every request when one is configured.
#[derive(Clone)]
pub struct TokenCheck {
    expected: Option<String>,
}

impl tonic::service::Interceptor for TokenCheck {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        let Some(expected) = &self.expected else {
            return Ok(req);
        };
        let got = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        match got.and_then(|v| v.strip_prefix("Bearer ")) {
            Some(t) if t == expected => Ok(req),
            _ => Err(Status::unauthenticated(
                "a valid `authorization: Bearer <token>` is required",
            )),
        }
    }
}

/// Serves the agent on `listener` until `shutdown` completes. Also serves
/// `grpc.health.v1.Health` and server reflection.
///
/// # Errors
/// Transport errors from tonic.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send,
    core: Arc<AgentCore>,
) -> Result<(), tonic::transport::Error> {
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<AgentServer<AgentService>>()
        .await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(gpufleet_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .expect("descriptor sets are valid");
    let check = TokenCheck {
        expected: core.config.token.clone(),
    };
    let agent = AgentServer::with_interceptor(AgentService { core }, check);
    tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(reflection)
        .add_service(agent)
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::queue_key;
    use crate::backend::DeviceInfo;

    fn dev(id: &str, backend: &str, pci: &str, kind: &str) -> DeviceInfo {
        DeviceInfo {
            id: id.into(),
            backend: backend.into(),
            pci_bus_id: pci.into(),
            device_type: kind.into(),
            ..Default::default()
        }
    }

    #[test]
    fn one_queue_per_physical_device() {
        let cl = dev(
            "opencl:0000:00:06.0",
            "opencl",
            "0000:00:06.0",
            "discrete_gpu",
        );
        let vk = dev(
            "vulkan:0000:00:06.0",
            "vulkan",
            "0000:00:06.0",
            "discrete_gpu",
        );
        assert_eq!(queue_key(&cl), queue_key(&vk));
        let other = dev(
            "vulkan:0000:03:00.0",
            "vulkan",
            "0000:03:00.0",
            "discrete_gpu",
        );
        assert_ne!(queue_key(&cl), queue_key(&other));
        let cpu = dev("cpu:0", "cpu", "", "cpu");
        let pocl = dev("opencl:0.0", "opencl", "", "cpu");
        let lvp = dev("vulkan:lavapipe", "vulkan", "", "cpu");
        assert_eq!(queue_key(&cpu), queue_key(&pocl));
        assert_eq!(queue_key(&cpu), queue_key(&lvp));
        let nopci = dev("vulkan:uuid-1", "vulkan", "", "integrated_gpu");
        assert_eq!(queue_key(&nopci), "vulkan:uuid-1");
    }
}
