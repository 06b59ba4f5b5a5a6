//! How the coordinator reaches an agent: one small object-safe [`AgentLink`] trait that campaign
//! planning and execution use, whatever the transport.
//!
//! Two implementations: [`grpc::AgentAddr`] dials a direct agent's gRPC service;
//! `crate::fleet::link::DialInLink` reaches an agent that dialed in to `gpufleet serve` through the
//! serve's hub (`crate::fleet::link::links` picks one by the agent's kind). Tests stand in an
//! in-memory link.
//!
//! A link's failures are typed ([`LinkError`]): whether a job is retried, failed or its agent
//! marked lost follows from the variant, never from the message text.

pub mod grpc;
pub mod serve_api;

use crate::store::AgentRow;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use gpufleet_proto::v1 as pb;
use std::sync::Arc;

/// Why a link could not do what was asked. The variant says what to do; the message explains.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LinkError {
    /// The agent could not be reached, or the connection broke: worth a retry.
    #[error("{0}")]
    Unreachable(String),
    /// The agent answered that it is busy (queue full): worth a retry later.
    #[error("{0}")]
    Busy(String),
    /// The agent answered with an error (bad spec, bad token, bad URL): final.
    #[error("{0}")]
    Refused(String),
}

/// The events of one run as they arrive: progress and power samples, then exactly one result. A
/// stream that ends before the result, or yields an error, lost its agent.
pub type RunEvents = BoxStream<'static, Result<pb::RunEvent, LinkError>>;

/// Makes the link to a registered agent (the executor's only knowledge of the transport).
pub type Connect = Arc<dyn Fn(&AgentRow) -> Arc<dyn AgentLink> + Send + Sync>;

/// One agent as the campaign executor sees it.
pub trait AgentLink: Send + Sync {
    /// The agent's registered name, for messages.
    fn name(&self) -> &str;

    /// The agent's description (host, devices, backends and their kernels).
    fn describe(&self) -> BoxFuture<'_, Result<pb::AgentInfo, LinkError>>;

    /// Starts a run; the events follow on the returned stream.
    fn run(&self, request: pb::RunRequest) -> BoxFuture<'_, Result<RunEvents, LinkError>>;
}
