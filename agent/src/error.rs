//! Why the agent refuses a request (bad input, full queue, duplicate run).
//! Free of transport types: the gRPC service maps them to status codes in
//! one place (`service/status.rs`).

use crate::env::EnvError;
use crate::host::memory::HostMemoryShortage;
use gpufleet_kernels::SpecError;

/// Why the agent refused a request. Runs that start and then fail are not
/// errors: they are results with a status.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("field {field}: {message}")]
    InvalidArgument {
        field: &'static str,
        message: String,
    },
    #[error("field {field}: {source}", field = .source.field())]
    Spec {
        #[from]
        source: SpecError,
    },
    #[error("field env: {0}")]
    Env(#[from] EnvError),
    /// The run's estimated host-memory peak does not fit what the host can give a worker now.
    #[error("field params: {0}")]
    HostMemory(#[from] HostMemoryShortage),
    #[error("device {device} has {capacity} runs waiting already (the queue limit); retry later")]
    QueueFull { device: String, capacity: usize },
    #[error("run id {run_id} is already queued or running")]
    DuplicateRun { run_id: String },
    /// Power was asked of an agent whose host has no power channel.
    #[error("this agent has no power sources (see Describe for why each is unavailable)")]
    NoPowerSources,
    #[error("internal error: {0}")]
    Internal(String),
}
