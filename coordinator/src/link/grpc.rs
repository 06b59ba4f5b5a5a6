//! The gRPC [`AgentLink`]: the coordinator dials the agent's `Agent` service over a channel with
//! the agent's bearer token, connect and request deadlines, and errors that say which agent failed.

use super::{AgentLink, LinkError, RunEvents};
use crate::store::AgentRow;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use gpufleet_kernels::error_chain;
use gpufleet_proto::tls::{
    Target, Trust, client_config, connect as tls_connect, is_certificate_error,
};
use gpufleet_proto::v1 as pb;
use pb::agent_client::AgentClient;
use std::time::Duration;
use tonic::metadata::MetadataValue;
use tonic::service::Interceptor;
use tonic::transport::Channel;

/// Default time to reach an agent: the TCP connection, the HTTP/2 handshake and its Describe
/// answer. A peer that accepts TCP but never speaks costs this much, not a request deadline.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why talking to an agent failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("agent {agent}: invalid url `{url}`: {message}")]
    BadUrl {
        agent: String,
        url: String,
        message: String,
    },
    #[error("agent {agent}: its token has characters not allowed in an HTTP header")]
    BadToken { agent: String },
    #[error("cannot reach agent {agent} at {url}: {message}")]
    Unreachable {
        agent: String,
        url: String,
        message: String,
    },
    #[error("agent {agent} refused: {status}")]
    Refused {
        agent: String,
        status: Box<tonic::Status>,
    },
}

impl ClientError {
    /// True when the agent could not be reached (as opposed to answering
    /// with an error): worth a retry.
    pub fn is_unreachable(&self) -> bool {
        match self {
            ClientError::Unreachable { .. } => true,
            ClientError::Refused { status, .. } => {
                matches!(
                    status.code(),
                    tonic::Code::Unavailable | tonic::Code::Unknown
                )
            }
            ClientError::BadUrl { .. } | ClientError::BadToken { .. } => false,
        }
    }
}

/// Adds `authorization: Bearer <token>` when the agent has a token.
#[derive(Clone)]
pub struct Token(Option<MetadataValue<tonic::metadata::Ascii>>);

impl Interceptor for Token {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

pub type Client = AgentClient<tonic::service::interceptor::InterceptedService<Channel, Token>>;

/// Whether the command line names an agent by URL (`http://`, `https://`) rather than by its
/// registered name.
pub fn is_url(agent: &str) -> bool {
    agent.starts_with("http://") || agent.starts_with("https://")
}

/// A named agent and how to reach it.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentAddr {
    pub name: String,
    pub url: String,
    pub token: Option<String>,
    /// How an `https://` agent is verified (its pinned certificate or a CA).
    pub trust: Option<Trust>,
    /// How long reaching it may take: the TCP connection, the handshakes and its Describe answer
    /// (`gpufleet --connect-timeout-s`).
    pub connect_timeout: Duration,
}

impl AgentAddr {
    /// How to reach the registered agent `a`, waiting at most `connect_timeout` for it.
    pub fn of(a: &AgentRow, connect_timeout: Duration) -> AgentAddr {
        let trust = match (&a.tls_pin, &a.tls_ca) {
            (Some(pin), _) => Some(Trust::Pin(pin.clone())),
            (None, Some(pem)) => Some(Trust::CaPem(pem.clone())),
            (None, None) => None,
        };
        AgentAddr {
            name: a.name.clone(),
            url: a.url.clone(),
            token: a.token.clone(),
            trust,
            connect_timeout,
        }
    }

    /// An agent the command line names by its URL (`http://host:port`): no token, no pinned
    /// certificate or CA; `None` for anything else (a registered name).
    pub fn of_url(agent: &str, connect_timeout: Duration) -> Option<AgentAddr> {
        is_url(agent).then(|| AgentAddr {
            name: agent.to_string(),
            url: agent.to_string(),
            token: None,
            trust: None,
            connect_timeout,
        })
    }

    /// Connects within its connect timeout.
    ///
    /// # Errors
    /// `BadUrl` or `Unreachable`, naming the agent.
    pub async fn connect(&self) -> Result<Client, ClientError> {
        let bad = |message: String| ClientError::BadUrl {
            agent: self.name.clone(),
            url: self.url.clone(),
            message,
        };
        let target = Target::parse(&self.url).map_err(bad)?;
        if self.token.is_some() && target.plaintext_beyond_loopback() {
            return Err(bad(format!(
                "refusing to send the agent's token in plaintext to {}, which is not a loopback address; serve the agent with --tls-cert/--tls-key and add it as https:// with --pin-sha256 or --ca-cert (or let it dial in)",
                target.host
            )));
        }
        let endpoint = target
            .endpoint()
            .map_err(|e| bad(e.to_string()))?
            .connect_timeout(self.connect_timeout)
            .tcp_nodelay(true);
        let token = match &self.token {
            Some(t) => Some(
                format!("Bearer {t}")
                    .parse()
                    .map_err(|_| ClientError::BadToken {
                        agent: self.name.clone(),
                    })?,
            ),
            None => None,
        };
        let unreachable = |message: String| ClientError::Unreachable {
            agent: self.name.clone(),
            url: self.url.clone(),
            message,
        };
        let connecting = async {
            let config = match (&self.trust, target.tls) {
                (_, false) => None,
                (Some(trust), true) => {
                    Some(std::sync::Arc::new(client_config(trust).map_err(bad)?))
                }
                (None, true) => {
                    return Err(bad(
                        "an https agent needs --pin-sha256 or --ca-cert (gpufleet agents add)"
                            .into(),
                    ));
                }
            };
            tls_connect(endpoint, &target, config).await.map_err(|e| {
                if is_certificate_error(&e) {
                    bad(format!("TLS: {}", error_chain(&e)))
                } else {
                    unreachable(error_chain(&e))
                }
            })
        };
        let channel = tokio::time::timeout(self.connect_timeout, connecting)
            .await
            .map_err(|_| {
                unreachable(format!(
                    "no connection within the connect timeout ({:?})",
                    self.connect_timeout
                ))
            })??;
        Ok(AgentClient::with_interceptor(channel, Token(token)))
    }

    /// Connects and asks for the agent's description.
    ///
    /// # Errors
    /// As [`AgentAddr::connect`], or `Refused` with the agent's status.
    pub async fn describe(&self) -> Result<pb::AgentInfo, ClientError> {
        let mut c = self.connect().await?;
        let mut req = tonic::Request::new(pb::DescribeRequest {});
        // Describe is answered from memory: a peer silent for the connect timeout is not an agent.
        req.set_timeout(self.connect_timeout);
        c.describe(req).await.map(|r| r.into_inner()).map_err(|s| {
            if matches!(
                s.code(),
                tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
            ) {
                ClientError::Unreachable {
                    agent: self.name.clone(),
                    url: self.url.clone(),
                    message: format!(
                        "no answer to Describe within the connect timeout ({:?})",
                        self.connect_timeout
                    ),
                }
            } else {
                self.refused(s)
            }
        })
    }

    /// Wraps a status from this agent.
    pub fn refused(&self, status: tonic::Status) -> ClientError {
        if matches!(status.code(), tonic::Code::Unavailable) {
            return ClientError::Unreachable {
                agent: self.name.clone(),
                url: self.url.clone(),
                message: status.message().to_string(),
            };
        }
        ClientError::Refused {
            agent: self.name.clone(),
            status: Box::new(status),
        }
    }
}

impl ClientError {
    /// The link's view of this error: what to do about it, with this error's text.
    fn into_link_error(self) -> LinkError {
        match &self {
            ClientError::Refused { status, .. }
                if status.code() == tonic::Code::ResourceExhausted =>
            {
                LinkError::Busy(self.to_string())
            }
            _ if self.is_unreachable() => LinkError::Unreachable(self.to_string()),
            _ => LinkError::Refused(self.to_string()),
        }
    }
}

impl AgentLink for AgentAddr {
    fn name(&self) -> &str {
        &self.name
    }

    fn describe(&self) -> BoxFuture<'_, Result<pb::AgentInfo, LinkError>> {
        async move {
            AgentAddr::describe(self)
                .await
                .map_err(ClientError::into_link_error)
        }
        .boxed()
    }

    fn run(&self, request: pb::RunRequest) -> BoxFuture<'_, Result<RunEvents, LinkError>> {
        async move {
            // Unreachable is worth a retry; a refusal to connect (plaintext token beyond
            // loopback, a certificate that does not verify) is final.
            let mut client = self.connect().await.map_err(ClientError::into_link_error)?;
            let stream = client
                .run(request)
                .await
                .map_err(|status| self.refused(status).into_link_error())?
                .into_inner();
            let name = self.name.clone();
            let events = stream.map(move |ev| {
                ev.map_err(|status| {
                    LinkError::Unreachable(format!(
                        "connection to agent {name} broke mid-run: {}",
                        status.message()
                    ))
                })
            });
            Ok(events.boxed())
        }
        .boxed()
    }
}
