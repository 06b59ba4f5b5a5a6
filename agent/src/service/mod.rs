//! The gRPC service (`gpufleet.v1.Agent`) plus health and reflection: it
//! only translates between tonic and the run core ([`crate::run`]). A Run
//! request goes to [`AgentCore::submit`], whose events become the response
//! stream; Cancel goes to [`AgentCore::cancel`]; Describe and StreamPower are
//! answered from the agent's inventory and power sampler.
//!
//! # Layout
//! - [`auth`]: who may listen where (a real token beyond loopback).
//! - [`convert`]: agent domain types to their wire form.
//! - [`describe`]: the Describe answer.
//! - [`power`]: Describe's power-source list and StreamPower's filter.
//! - [`status`]: request errors to gRPC status codes.

pub mod auth;
pub mod convert;
pub mod describe;
pub mod power;
pub mod status;

use crate::power::wire::sample_pb;
use crate::run::AgentCore;
use gpufleet_kernels::quote;
use gpufleet_proto::v1 as pb;
use pb::agent_server::{Agent, AgentServer};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

/// The tonic service around an [`AgentCore`].
#[derive(Clone)]
pub struct AgentService {
    core: Arc<AgentCore>,
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::RunEvent, Status>> + Send>>;
type PowerStream = Pin<Box<dyn Stream<Item = Result<pb::PowerSample, Status>> + Send>>;

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
        let events = self.core.submit(req.into_inner())?;
        Ok(Response::new(Box::pin(
            ReceiverStream::new(events).map(Ok::<_, Status>),
        )))
    }

    async fn cancel(
        &self,
        req: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::CancelReply>, Status> {
        let id = req.into_inner().run_id;
        let found = self.core.cancel(&id);
        let message = if found {
            format!("cancelling run {}", quote(&id))
        } else {
            format!("no queued or running run with id {}", quote(&id))
        };
        Ok(Response::new(pb::CancelReply { found, message }))
    }

    type StreamPowerStream = PowerStream;

    async fn stream_power(
        &self,
        req: Request<pb::PowerRequest>,
    ) -> Result<Response<PowerStream>, Status> {
        let req = req.into_inner();
        let mut wanted = power::Subscription::new(&self.core, &req)?;
        let mut feed = self.core.power.sampler.subscribe();
        let (tx, rx) = mpsc::channel::<Result<pb::PowerSample, Status>>(256);
        let core = self.core.clone();
        tokio::spawn(async move {
            loop {
                match feed.recv().await {
                    Ok(s) if wanted.pass(&s) => {
                        let wire = sample_pb(&core.power.sampler, &s);
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
            Some(t) if gpufleet_kernels::secrets_equal(expected, t) => Ok(req),
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
    serve_with(listener, None, shutdown, core).await
}

/// [`serve`] over TLS when `tls` is given (`gpufleet-agent --tls-cert/--tls-key`).
///
/// # Errors
/// Transport errors from tonic, a certificate tonic does not accept.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    tls: Option<tonic::transport::ServerTlsConfig>,
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
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        builder = builder.tls_config(tls)?;
    }
    builder
        .add_service(health_service)
        .add_service(reflection)
        .add_service(agent)
        // TCP_NODELAY on every accepted connection: without it the small frames of a run's event
        // stream wait for the client's delayed ACK (40 ms on Linux) behind Nagle's algorithm.
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown,
        )
        .await
}
