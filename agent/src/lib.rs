//! gpufleet-agent: runs catalog kernels on this host's compute backends (cpu, OpenCL, Vulkan and,
//! in a `--features hip` build, HIP), each run isolated in a worker process, measures the power of
//! the device while it runs, and serves all of it over gRPC to a gpufleet coordinator.
//!
//! It exists so that a crashing, hanging or lying driver on a legacy or consumer GPU becomes a
//! result with a status, never a dead agent, and so that every number it reports was validated
//! against the catalog's reference in the same run, with the environment it was measured in.
//!
//! # Layout
//! From the bottom up: each module uses only the modules listed before it.
//! - `init.rs`: as its container's PID 1, the binary forks a minimal init that reaps the orphans
//!   PID 1 inherits and passes signals on to the agent.
//! - `host/`: facts about the host (CPU, memory, OS, container hints) read from /proc and /sys
//!   (`mod.rs`), the driver-stack facts of `host.platform` (`probe.rs`), what a new worker may take
//!   of its memory now and the refusal of a run that does not fit (`memory.rs`), and the PCI
//!   address normalisation that joins backends' devices to power sensors (`pci.rs`).
//! - `env.rs`: the allowlist of environment overrides a run may set for its worker.
//! - `cache.rs`: the cache directory (compiled programs, tuned parameters) and its key hash.
//! - `stats.rs`: pure statistics over the timed iterations and the stop rule.
//! - `error.rs`: [`error::AgentError`], why a request is refused, naming the field.
//! - `backend/`: the [`backend::Backend`] trait and one folder per backend (`cpu/`, `opencl/`,
//!   `vulkan/`, `hip/`), reached through one registry (`registry.rs`, a backend per
//!   `BackendKind`), with the shared device lookup (`lookup.rs`), peaks (`peaks.rs`),
//!   planning pieces (`planning.rs`, `planning/`), storage formats (`storage.rs`) and autotuner
//!   (`tuning.rs`).
//! - `isolation/`: worker processes: the JSON-lines protocol (`protocol.rs`), the child entry point
//!   (`child.rs`), the parent's supervisor with its watchdog (`parent.rs`), how a worker is
//!   started and its process group ended (`spawn.rs`: parent-death signal, own working directory),
//!   the worker's memory limit and how an out-of-memory end is recognised (`memory_limit.rs`), the
//!   clocks.
//! - `inventory/`: the host's facts and per-backend discovery, run in workers with a deadline.
//! - `power/`: the [`power::PowerSource`] trait (`mod.rs`) and the sources behind it, one each in
//!   `power/sources/` (amdgpu hwmon, NVML, RAPL, rocm-smi/amd-smi, ipmitool, with the sysfs
//!   readers and the tool runner they share) registered in [`power::sources::ALL`]; the sampler
//!   (`sampler.rs`), energy integration (`energy.rs`), the agent's [`power::state::PowerState`], a
//!   run's energy accounting (`run_energy.rs`), samples in their wire form (`wire.rs`) and the
//!   `gpufleet-agent power` report (`report.rs`).
//! - `run/`: the run core, whichever way a request arrives: [`AgentConfig`], [`AgentCore`], run
//!   planning (`plan.rs`), the host-memory model and admission (`host_peak.rs`), the per-device
//!   queues (`queue.rs`), a run's lifecycle (`lifecycle.rs`), its RunResult (`result.rs`) and the
//!   runs counted by status (`counters.rs`). Speaks protobuf messages, knows nothing of tonic.
//! - `service/`: the `gpufleet.v1.Agent` gRPC service over the run core (plus health and
//!   reflection): [`serve`], who may listen where (`auth.rs`), conversions to the wire, Describe,
//!   StreamPower's filter, the one mapping of [`error::AgentError`] to status codes.
//! - `dial/`: dialing in to a coordinator (`--connect`): the reconnect loop, the on-disk outbox of
//!   finished runs kept until acknowledged, TLS verification by CA or pinned SHA-256, and
//!   [`dial::RunCore`], what a link needs from the agent behind it.
//! - `simulate/`: `gpufleet-agent simulate`, the load generator of the fleet's scale tests: N
//!   simulated agents in one process, each a [`dial::RunCore`] behind the real [`dial`] code,
//!   answering runs with seeded draws and describing a device that says it is simulated.
//! - `metrics.rs`: the Prometheus exporter (`--metrics-listen`): the sampler's latest figures, the
//!   run core's counts and the queue depths.
//! - `main.rs` (the binary, with its clap types in `cli.rs`): parses the command line and the
//!   configuration and calls [`serve`], [`dial`], [`power::report`], [`simulate`] or the worker's
//!   entry point.
//!
//! # Lifecycle of a run
//! 1. At start [`AgentCore::start`] discovers the inventory (one discovery worker per backend) and
//!    probes the power sources into a sampler.
//! 2. A request arrives (through [`serve`]'s Run, or down the dial-in stream of [`dial`]) and
//!    goes to [`AgentCore::submit`].
//! 3. [`run::plan::plan`] checks the spec (kernel, params, dtype, mode, device, env, device
//!    memory, timeout, iterations, power window) into a plan, and admits the worker's estimated
//!    host-memory peak ([`run::host_peak`]) against `MemAvailable` and the agent's cgroup, or
//!    refuses naming the field.
//! 4. The device's queue ([`run::queue::DeviceQueues`]) admits it, or refuses with
//!    RESOURCE_EXHAUSTED or a duplicate run id; the caller gets the receiver of its events.
//! 5. When the device is free the host's memory is checked again (a run that no longer fits ends
//!    `out_of_memory`) and a worker process is started with the env overrides under a memory
//!    limit (RLIMIT_DATA, [`isolation::memory_limit`]); it generates
//!    seeded inputs, prepares the kernel, warms up, measures (sending the kernel-window markers on
//!    CLOCK_MONOTONIC), repeats past the timed part when the power sensor needs a longer window,
//!    and validates against the f64 reference.
//! 6. The parent turns the worker's outcome or death (an allocation failure under the limit is
//!    `out_of_memory`) into one RunResult ([`run::result`]) with
//!    statistics, metric, % of peak and fingerprint; [`power::run_energy`] cuts the device's power
//!    trace to the kernel window and adds the energy figures.
//! 7. Progress, the power samples and exactly one RunResult are sent to the receiver; a receiver
//!    that goes away cancels the run.
#![warn(unsafe_op_in_unsafe_fn)]

pub mod backend;
pub mod cache;
pub mod config;
pub mod dial;
pub mod env;
pub mod error;
pub mod host;
pub mod init;
pub mod inventory;
pub mod isolation;
pub mod metrics;
pub mod power;
pub mod run;
pub mod service;
pub mod simulate;
pub mod stats;

pub use run::{AgentConfig, AgentCore};
pub use service::{serve, serve_with};
