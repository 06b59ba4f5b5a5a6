//! gpufleet-agent: runs catalog kernels on this host's compute backends,
//! isolated in worker processes, and serves them over gRPC.
//!
//! # Layout
//! - [`backend`]: the [`backend::Backend`] trait and one folder per backend
//!   (`cpu/` today; `opencl/`, `vulkan/`, `hip/` plug in the same way).
//! - [`isolation`]: worker processes: the protocol, the child entry point and
//!   the parent's supervisor with its watchdog.
//! - [`inventory`]: host facts and per-backend discovery (in workers).
//! - [`service`]: the `gpufleet.v1.Agent` service, device queues, run
//!   planning and result building; [`service::serve`] is the entry point.
//! - [`stats`], [`env`]: pure helpers (statistics, environment allowlist).
//!
//! # Lifecycle of a run
//! Run request → [`service::run::plan`] checks the spec (kernel, params,
//! device, env, memory) → the device queue admits it (or RESOURCE_EXHAUSTED)
//! → when the device is free a worker process is started with the env
//! overrides → it generates seeded inputs, prepares the kernel, warms up,
//! measures (sending the kernel-window markers), validates against the f64
//! reference → the parent turns the worker's outcome or death into one
//! RunResult with statistics, metric and fingerprint.
#![warn(unsafe_op_in_unsafe_fn)]

pub mod backend;
pub mod cache;
pub mod env;
pub mod error;
pub mod inventory;
pub mod isolation;
pub mod power;
pub mod service;
pub mod stats;

pub use service::{AgentConfig, AgentCore, serve};
