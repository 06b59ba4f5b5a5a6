//! The [`AgentLink`] of an agent that dials in: describe answers from its last Hello, a run goes
//! down its stream and its events come back through the [`Hub`]. [`links`] picks this link or the
//! gRPC one by the agent's kind, so the executor treats both alike.

use super::Hub;
use super::attachment::held_elsewhere;
use crate::link::grpc::AgentAddr;
use crate::link::{AgentLink, Connect, LinkError, RunEvents};
use crate::store::{AgentKind, AgentRow};
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use gpufleet_proto::v1 as pb;
use std::sync::Arc;
use std::time::Duration;
use tokio_stream::wrappers::ReceiverStream;

/// A dial-in agent as the executor sees it.
pub struct DialInLink {
    hub: Arc<Hub>,
    name: String,
    /// How long an agent that is not attached gets to attach before it is unreachable.
    connect_timeout: Duration,
}

/// Links for every agent of a serve: dial-in agents through `hub`, direct ones over gRPC; either
/// kind gets `connect_timeout` to be reached.
pub fn links(hub: Arc<Hub>, connect_timeout: Duration) -> Connect {
    Arc::new(move |a: &AgentRow| match a.kind {
        AgentKind::DialIn => Arc::new(DialInLink {
            hub: hub.clone(),
            name: a.name.clone(),
            connect_timeout,
        }) as Arc<dyn AgentLink>,
        AgentKind::Direct => Arc::new(AgentAddr::of(a, connect_timeout)) as Arc<dyn AgentLink>,
    })
}

/// Links for a process that holds no dial-in streams (a CLI command executing a campaign
/// itself): direct agents over gRPC within `connect_timeout`; a dial-in agent refuses, saying
/// where it can be reached.
pub fn direct_links(connect_timeout: Duration) -> Connect {
    Arc::new(move |a: &AgentRow| match a.kind {
        AgentKind::DialIn => Arc::new(NotHere(a.name.clone())) as Arc<dyn AgentLink>,
        AgentKind::Direct => Arc::new(AgentAddr::of(a, connect_timeout)) as Arc<dyn AgentLink>,
    })
}

/// A dial-in agent seen from a process that is not its serve.
struct NotHere(String);

impl NotHere {
    fn why(&self) -> LinkError {
        LinkError::Refused(format!(
            "dial-in agent {} is reached only through the `gpufleet serve --fleet-listen` it attaches to; `gpufleet run` hands campaigns to that serve, and the serve runs the schedules",
            self.0
        ))
    }
}

impl AgentLink for NotHere {
    fn name(&self) -> &str {
        &self.0
    }

    fn describe(&self) -> BoxFuture<'_, Result<pb::AgentInfo, LinkError>> {
        let e = self.why();
        async move { Err(e) }.boxed()
    }

    fn run(&self, _request: pb::RunRequest) -> BoxFuture<'_, Result<RunEvents, LinkError>> {
        let e = self.why();
        async move { Err(e) }.boxed()
    }
}

impl DialInLink {
    /// The stored description of the agent when another live serve holds its stream.
    async fn held_elsewhere(&self) -> Option<pb::AgentInfo> {
        let (name, me) = (self.name.clone(), self.hub.owner.clone());
        self.hub
            .db
            .call(
                move |s| -> Result<Option<String>, crate::store::StoreError> {
                    let Some(row) = s.agent(&name)? else {
                        return Ok(None);
                    };
                    if !held_elsewhere(&row, &me, crate::time::now()) {
                        return Ok(None);
                    }
                    s.agent_info(row.id)
                },
            )
            .await
            .ok()
            .flatten()
            .and_then(|json| serde_json::from_str(&json).ok())
    }
}

impl AgentLink for DialInLink {
    fn name(&self) -> &str {
        &self.name
    }

    /// The agent's last Hello; an agent not attached gets the connect timeout to attach (a serve
    /// that just started gives its agents a moment to reconnect). An agent another serve on this
    /// database holds is described by the Hello that serve stored: it runs the agent's jobs.
    fn describe(&self) -> BoxFuture<'_, Result<pb::AgentInfo, LinkError>> {
        async move {
            if self.hub.info(&self.name).is_none()
                && let Some(info) = self.held_elsewhere().await
            {
                return Ok(info);
            }
            let deadline = tokio::time::Instant::now() + self.connect_timeout;
            loop {
                if let Some(info) = self.hub.info(&self.name) {
                    return Ok(info);
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(LinkError::Unreachable(format!(
                        "dial-in agent {} is not attached to this serve",
                        self.name
                    )));
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
        .boxed()
    }

    fn run(&self, request: pb::RunRequest) -> BoxFuture<'_, Result<RunEvents, LinkError>> {
        async move {
            let events = self.hub.start_run(&self.name, request).await?;
            Ok(ReceiverStream::new(events).boxed())
        }
        .boxed()
    }
}
