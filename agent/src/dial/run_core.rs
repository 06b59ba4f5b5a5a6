//! What a dial-in link needs from the agent behind it: [`RunCore`], implemented by the real
//! [`AgentCore`] and by the simulated agents of `gpufleet-agent simulate`
//! ([`crate::simulate`]), so both go through the same [`super::dial_in`] (outbox, backoff,
//! several coordinators, acknowledgements) and never through a second protocol client.

use crate::error::AgentError;
use crate::power::wire::sample_pb;
use crate::run::AgentCore;
use crate::service::power::Subscription;
use futures::stream::BoxStream;
use gpufleet_proto::v1 as pb;
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

/// Power samples in their wire form, as they are taken.
pub type PowerFeed = BoxStream<'static, pb::PowerSample>;

/// The agent behind a dial-in link: it describes itself, runs what the coordinator sends, cancels
/// on request and, when it has sensors, streams its power.
pub trait RunCore: Send + Sync + 'static {
    /// The inventory as the Hello (and Describe) carries it.
    fn describe(&self) -> pb::AgentInfo;

    /// Admits a run; the receiver gets its progress, its power samples and exactly one
    /// RunResult. Dropping the receiver cancels it.
    ///
    /// # Errors
    /// A refused request, naming the field ([`AgentError`]).
    fn submit(
        self: Arc<Self>,
        req: pb::RunRequest,
    ) -> Result<mpsc::Receiver<pb::RunEvent>, AgentError>;

    /// Signals cancellation of `run_id`; false if no such run is queued or running.
    fn cancel(&self, run_id: &str) -> bool;

    /// The samples a coordinator's power request selects.
    ///
    /// # Errors
    /// [`AgentError::NoPowerSources`] on a host without sensors; a filter that selects nothing.
    fn power_feed(self: Arc<Self>, req: &pb::PowerRequest) -> Result<PowerFeed, AgentError>;
}

// The inherent methods are named by path: a method call on `Arc<AgentCore>` would find the trait's
// by-value `submit` first and call itself.
impl RunCore for AgentCore {
    fn describe(&self) -> pb::AgentInfo {
        AgentCore::describe(self)
    }

    fn submit(
        self: Arc<Self>,
        req: pb::RunRequest,
    ) -> Result<mpsc::Receiver<pb::RunEvent>, AgentError> {
        AgentCore::submit(&self, req)
    }

    fn cancel(&self, run_id: &str) -> bool {
        AgentCore::cancel(self, run_id)
    }

    fn power_feed(self: Arc<Self>, req: &pb::PowerRequest) -> Result<PowerFeed, AgentError> {
        let wanted = Subscription::new(&self, req)?;
        let feed = self.power.sampler.subscribe();
        let samples = futures::stream::unfold(
            (self, feed, wanted),
            |(core, mut feed, mut wanted)| async move {
                loop {
                    match feed.recv().await {
                        Ok(s) if wanted.pass(&s) => {
                            let wire = sample_pb(&core.power.sampler, &s);
                            return Some((wire, (core, feed, wanted)));
                        }
                        // A slow link misses samples rather than stalling the sampler.
                        Ok(_) | Err(RecvError::Lagged(_)) => {}
                        Err(RecvError::Closed) => return None,
                    }
                }
            },
        );
        Ok(Box::pin(samples))
    }
}
