//! The `Fleet` gRPC service: an agent attaches with its enrolment token and a Hello, then the
//! stream carries runs one way and progress and finished runs the other (see the
//! [module docs](super)).

use super::{Hub, KEEPALIVE, ToAgent};
use crate::convert::{Origin, to_record};
use crate::store::{AgentRow, StoreError};
use gpufleet_kernels::quote;
use gpufleet_proto::v1 as pb;
use pb::agent_message::Message as FromAgent;
use pb::coordinator_message::Message as ToAgentMsg;
use pb::fleet_server::{Fleet, FleetServer};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// How long an attaching agent has to send its Hello.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest message an agent may send (a RunDone with a long power trace fits easily).
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// The tonic service around a [`Hub`].
#[derive(Clone)]
pub struct FleetService {
    hub: Arc<Hub>,
}

impl FleetService {
    pub fn new(hub: Arc<Hub>) -> FleetService {
        FleetService { hub }
    }
}

fn bearer(req: &Request<Streaming<pb::AgentMessage>>) -> Result<String, Status> {
    req.metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string)
        .ok_or_else(|| {
            Status::unauthenticated(
                "attach needs `authorization: Bearer <enrolment token>` (gpufleet-agent --token)",
            )
        })
}

fn internal(e: StoreError) -> Status {
    tracing::error!("fleet store error: {e}");
    Status::internal("the coordinator's store failed; try again")
}

#[tonic::async_trait]
impl Fleet for FleetService {
    type AttachStream = ReceiverStream<Result<pb::CoordinatorMessage, Status>>;

    async fn attach(
        &self,
        req: Request<Streaming<pb::AgentMessage>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let remote = req.remote_addr().map(|a| a.to_string()).unwrap_or_default();
        let token = bearer(&req)?;
        let mut inbound = req.into_inner();
        let first = tokio::time::timeout(HELLO_TIMEOUT, inbound.message())
            .await
            .map_err(|_| {
                Status::deadline_exceeded(format!(
                    "no Hello within {} s of attaching",
                    HELLO_TIMEOUT.as_secs()
                ))
            })??;
        let Some(pb::AgentMessage {
            message: Some(FromAgent::Hello(hello)),
        }) = first
        else {
            return Err(Status::invalid_argument(
                "hello: the first message of an attach must be a Hello",
            ));
        };
        let name = hello.name.clone();
        let row = self
            .hub
            .db
            .call(move |s| s.check_attach(&name, &token))
            .await
            .map_err(internal)?
            .map_err(|refusal| {
                tracing::warn!(%remote, "attach refused: {refusal}");
                Status::unauthenticated(refusal.to_string())
            })?;
        // An attach without the agent's inventory would store an empty description: refused.
        let Some(info) = hello.info.as_ref() else {
            return Err(Status::invalid_argument(
                "hello.info: missing (the agent's inventory: host, backends, devices)",
            ));
        };
        let info_json =
            serde_json::to_string(info).expect("an AgentInfo message serialises to JSON");
        let (id, replica, version, addr, api) = (
            row.id,
            self.hub.owner.clone(),
            gpufleet_kernels::prefix(&hello.agent_version, 64).to_string(),
            remote.clone(),
            self.hub.api_url().map(str::to_string),
        );
        self.hub
            .db
            .call(move |s| {
                s.agent_attached(id, &replica, &addr, &version, &info_json, api.as_deref())
            })
            .await
            .map_err(internal)?;
        let (tx, rx) = mpsc::channel(64);
        let welcome = pb::CoordinatorMessage {
            message: Some(ToAgentMsg::Welcome(pb::Welcome {
                coordinator_version: env!("CARGO_PKG_VERSION").to_string(),
                coordinator: self.hub.owner.clone(),
            })),
        };
        let _ = tx.send(Ok(welcome)).await;
        let session = self.hub.attach(&row, tx.clone(), &hello);
        tracing::info!(agent = %row.name, %remote, running = hello.running.len(), unacknowledged = hello.unacknowledged.len(), "agent attached");
        tokio::spawn(read_agent(self.hub.clone(), row, session, inbound, tx));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// The agent's side of the stream until it ends; then the agent is detached.
async fn read_agent(
    hub: Arc<Hub>,
    row: AgentRow,
    session: u64,
    mut inbound: Streaming<pb::AgentMessage>,
    tx: ToAgent,
) {
    let why = loop {
        let msg = match inbound.message().await {
            Ok(Some(m)) => m,
            Ok(None) => break format!("dial-in agent {} closed its link", row.name),
            Err(status) => {
                tracing::info!(agent = %row.name, "stream ended: {}", status.message());
                break format!(
                    "dial-in agent {}'s link ended: {}",
                    row.name,
                    quote(status.message())
                );
            }
        };
        match msg.message {
            Some(FromAgent::Update(u)) => hub.progress(&row.name, u),
            Some(FromAgent::Done(done)) => {
                if let Some(run_id) = store_done(&hub, &row, &done, &tx).await {
                    let ack = pb::CoordinatorMessage {
                        message: Some(ToAgentMsg::Ack(pb::Ack { run_id })),
                    };
                    if tx.send(Ok(ack)).await.is_err() {
                        break format!("dial-in agent {}'s link closed", row.name);
                    }
                    hub.deliver(&row.name, done).await;
                }
            }
            Some(FromAgent::Refused(r)) => hub.refused(&row.name, r),
            Some(FromAgent::CancelReply(c)) => {
                tracing::info!(agent = %row.name, found = c.found, "{}", quote(&c.message));
            }
            Some(FromAgent::Hello(_)) => {
                tracing::warn!(agent = %row.name, "a second Hello on one stream is ignored");
            }
            Some(FromAgent::Power(sample)) => hub.live.publish(&row.name, sample),
            None => {}
        }
    };
    hub.detach(&row.name, session, &why);
    if hub.info(&row.name).is_none() {
        let (id, replica) = (row.id, hub.owner.clone());
        let _ = hub.db.call(move |s| s.agent_detached(id, &replica)).await;
    }
    tracing::info!(agent = %row.name, "agent detached");
}

/// Stores a finished run against its job. Returns the run id to acknowledge: the result is
/// stored now or was already, or it can never be stored (no such job, another agent's job, a
/// malformed result) and keeping it in the agent's outbox would only resend it forever. A store
/// that lost its database is tried again while the link (`tx`) is open. `None` when the store
/// failed: the agent resends it after its next attach.
async fn store_done(hub: &Hub, row: &AgentRow, done: &pb::RunDone, tx: &ToAgent) -> Option<String> {
    let run_id = done.run_id.clone();
    let Some(result) = done.result.clone() else {
        tracing::warn!(agent = %row.name, run_id = %quote(&run_id), "RunDone without a result dropped");
        return Some(run_id);
    };
    if result.run_id != run_id {
        tracing::warn!(agent = %row.name, run_id = %quote(&run_id), "RunDone whose result names another run dropped");
        return Some(run_id);
    }
    let (agent_id, power, id) = (row.id, done.power.clone(), run_id.clone());
    let (result, power) = (Arc::new(result), Arc::new(power));
    // While the link is open the result is kept here until the store takes it, so the agent's
    // outbox drains without the link dropping; when the link ends, the agent resends it.
    let stored = hub
        .db
        .call_until_reached(
            move |s| -> Result<Option<bool>, StoreError> {
                let Some(job) = s.job_by_run_id(&id)? else {
                    return Ok(None);
                };
                if job.agent_id != agent_id {
                    return Ok(None);
                }
                let record = to_record(&result, &power, &job.spec_key, Origin::of_job(&job));
                s.insert_result(&record).map(Some)
            },
            || !tx.is_closed(),
        )
        .await;
    match stored {
        Ok(Some(new)) => {
            tracing::info!(agent = %row.name, %run_id, new, "result stored");
            Some(run_id)
        }
        Ok(None) => {
            tracing::warn!(agent = %row.name, run_id = %quote(&run_id), "result for no job of this agent dropped");
            Some(run_id)
        }
        Err(e) => {
            tracing::error!(agent = %row.name, %run_id, "storing a result failed (the agent will resend it): {e}");
            None
        }
    }
}

/// Serves the `Fleet` service on `listener` until `shutdown`, with HTTP/2 keepalive pings every
/// [`KEEPALIVE`] so NAT tables and proxies keep idle streams.
///
/// # Errors
/// Transport errors from tonic.
pub async fn serve_fleet(
    listener: tokio::net::TcpListener,
    tls: Option<tonic::transport::ServerTlsConfig>,
    hub: Arc<Hub>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let service =
        FleetServer::new(FleetService::new(hub)).max_decoding_message_size(MAX_MESSAGE_BYTES);
    let mut builder = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(KEEPALIVE))
        .http2_keepalive_timeout(Some(KEEPALIVE));
    if let Some(tls) = tls {
        builder = builder.tls_config(tls)?;
    }
    builder
        .add_service(service)
        // TCP_NODELAY, as the agent's server does (small frames must not wait for delayed ACKs).
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown,
        )
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Db;
    use crate::store::token_hash;
    use pb::fleet_client::FleetClient;

    /// A fleet listener on loopback with one enrolled agent `rig` (token `TOKEN`); its address.
    async fn fleet() -> (String, tokio::sync::oneshot::Sender<()>) {
        let db = Db::in_memory().unwrap();
        db.with(|s| s.enrol_agent("rig", &token_hash(TOKEN)))
            .unwrap();
        let hub = Hub::new(
            db,
            "test@host".into(),
            Duration::from_secs(1),
            crate::live::LivePower::new(0.0),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve_fleet(listener, None, hub, async {
            let _ = stopped.await;
        }));
        (addr, stop)
    }

    const TOKEN: &str = "an-enrolment-token-of-some-length";

    /// Attaches with `first` as the first message; the status the serve answers.
    async fn attach_with(addr: &str, first: pb::AgentMessage) -> Status {
        let mut client = FleetClient::connect(addr.to_string()).await.unwrap();
        let (tx, rx) = mpsc::channel(4);
        tx.send(first).await.unwrap();
        let mut req = Request::new(ReceiverStream::new(rx));
        req.metadata_mut()
            .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
        let status = client.attach(req).await.expect_err("the attach is refused");
        drop(tx);
        status
    }

    #[tokio::test]
    async fn a_hello_without_the_agents_inventory_is_refused_naming_the_field() {
        let (addr, _stop) = fleet().await;
        let hello = pb::AgentMessage {
            message: Some(FromAgent::Hello(pb::Hello {
                name: "rig".into(),
                agent_version: "0.1.0".into(),
                info: None,
                ..Default::default()
            })),
        };
        let status = attach_with(&addr, hello).await;
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(
            status.message().starts_with("hello.info: missing"),
            "{status:?}"
        );
    }
}
