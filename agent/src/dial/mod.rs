//! Dialing in: the agent opens one long-lived `Fleet.Attach` stream to its coordinator
//! (`gpufleet-agent --connect URL`) and takes its runs from it, for hosts that accept no inbound
//! connection (Runpod pods, home rigs behind NAT).
//!
//! # Guarantees
//! - A run goes through the same core as a direct request ([`RunCore::submit`]: the agent's
//!   [`AgentCore`](crate::run::AgentCore), or a simulated agent of `gpufleet-agent simulate`).
//!   Its events are followed by a task of its own, not by the stream, so a run in flight when the
//!   link drops keeps running.
//! - A finished run is written to the [`outbox::Outbox`] in the state directory before it is
//!   sent, and deleted only when the coordinator acknowledges it (after storing it). After every
//!   (re)connect, and after a restart of the agent, everything in the outbox is sent again; the
//!   coordinator stores by run id, so a result is stored exactly once.
//! - The link is kept with HTTP/2 keepalive pings every [`KEEPALIVE`]; a lost link is redialed
//!   with capped exponential backoff and jitter ([`Backoff`]). Given several coordinators (serves
//!   of one fleet on one PostgreSQL), a failed link or dial moves to the next in turn, so the
//!   agent re-attaches to a live serve and its outbox goes to that one.
//! - A token is never sent in plaintext beyond loopback ([`check_url`]).
//!
//! # Layout
//! - this file: [`DialConfig`], the reconnect loop and one session's message handling.
//! - [`run_core`]: [`RunCore`], what a link needs from the agent behind it.
//! - [`outbox`]: the on-disk outbox.
//! - `gpufleet_proto::tls`: verifying the coordinator by CA or pinned SHA-256.

pub mod outbox;
pub mod run_core;

pub use run_core::RunCore;

use crate::error::AgentError;
use futures::StreamExt;
use gpufleet_proto::tls::{self, Target};
use gpufleet_proto::v1 as pb;
use outbox::Outbox;
use pb::agent_message::Message as Up;
use pb::coordinator_message::Message as Down;
use pb::fleet_client::FleetClient;
use std::collections::HashSet;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// HTTP/2 keepalive ping interval: NAT tables and proxies forget idle flows after a minute or more.
pub const KEEPALIVE: Duration = Duration::from_secs(20);
/// How long the coordinator has to answer an attach with its Welcome.
const WELCOME_TIMEOUT: Duration = Duration::from_secs(15);
/// Largest message accepted from the coordinator.
const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// Where and how to dial.
#[derive(Debug, Clone)]
pub struct DialConfig {
    /// The coordinators' fleet addresses, `https://host:port` (or `http://` on loopback), tried
    /// in turn; at least one.
    pub urls: Vec<String>,
    /// The enrolled name.
    pub name: String,
    /// The enrolment token.
    pub token: String,
    /// Holds the outbox.
    pub state_dir: PathBuf,
    /// How an `https://` coordinator is verified; `None` only for `http://` on loopback.
    pub trust: Option<tls::Trust>,
    /// Backoff bounds for redialing.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
}

/// Checks `--connect` and the trust options together: `https://` needs `--ca-cert` or
/// `--pin-sha256`; `http://` is allowed only to a loopback address, because the token would
/// cross the network in plaintext.
///
/// # Errors
/// A message naming the option and the reason.
pub fn check_url(url: &str, trust: Option<&tls::Trust>) -> Result<Target, String> {
    let target = Target::parse(url)
        .map_err(|e| format!("--connect {}: {e}", gpufleet_kernels::quote(url)))?;
    if target.plaintext_beyond_loopback() {
        return Err(format!(
            "--connect {url}: refusing to send the agent's token in plaintext to {}, which is not a loopback address; use https:// with --ca-cert or --pin-sha256",
            target.host
        ));
    }
    if target.tls && trust.is_none() {
        return Err(format!(
            "--connect {url}: https needs --ca-cert FILE or --pin-sha256 HEX to verify the coordinator"
        ));
    }
    Ok(target)
}

/// Capped exponential backoff with jitter: each delay is drawn from [d/2, d], d doubling from the
/// minimum to the maximum; a successful attach starts again at the minimum.
#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Backoff {
        Backoff {
            min,
            max: max.max(min),
            next: min,
        }
    }

    /// The delay before the next attempt.
    pub fn delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d.mul_f64(rand::random_range(0.5..=1.0))
    }

    pub fn reset(&mut self) {
        self.next = self.min;
    }
}

/// Why a session ended.
enum Ended {
    /// The link failed or closed: dial again.
    Retry(String),
    /// The coordinator refused this agent (unknown, revoked, wrong token): stop.
    Refused(String),
}

struct Dialer {
    core: Arc<dyn RunCore>,
    cfg: DialConfig,
    /// Each URL's target and TLS configuration, in `cfg.urls`' order.
    targets: Vec<(Target, Option<Arc<rustls::ClientConfig>>)>,
    /// The index in `targets` dialed now.
    current: std::sync::atomic::AtomicUsize,
    outbox: Outbox,
    running: Mutex<HashSet<String>>,
    /// The current session's sender, while attached.
    link: Mutex<Option<mpsc::Sender<pb::AgentMessage>>>,
    power: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// Dials the coordinator and serves it until `shutdown`, redialing after every failure.
///
/// # Errors
/// A bad URL or trust option, an unusable state directory, or the coordinator refusing this
/// agent (not enrolled, removed, wrong token).
pub async fn dial_in(
    core: Arc<dyn RunCore>,
    cfg: DialConfig,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    if cfg.urls.is_empty() {
        anyhow::bail!("--connect: no coordinator URL given");
    }
    let mut targets = Vec::with_capacity(cfg.urls.len());
    for url in &cfg.urls {
        let target = check_url(url, cfg.trust.as_ref()).map_err(anyhow::Error::msg)?;
        let tls = match (&cfg.trust, target.tls) {
            (Some(trust), true) => Some(Arc::new(
                tls::client_config(trust).map_err(anyhow::Error::msg)?,
            )),
            _ => None,
        };
        targets.push((target, tls));
    }
    let dir = cfg.state_dir.join("outbox");
    let outbox = Outbox::open(&dir)
        .map_err(|e| anyhow::anyhow!("state directory {}: {e}", dir.display()))?;
    let d = Arc::new(Dialer {
        core,
        targets,
        current: std::sync::atomic::AtomicUsize::new(0),
        outbox,
        running: Mutex::new(HashSet::new()),
        link: Mutex::new(None),
        power: Mutex::new(None),
        cfg,
    });
    let mut backoff = Backoff::new(d.cfg.backoff_min, d.cfg.backoff_max);
    tokio::pin!(shutdown);
    loop {
        let ended = tokio::select! {
            e = d.session(&mut backoff) => e,
            _ = &mut shutdown => return Ok(()),
        };
        d.detach();
        match ended {
            Ended::Refused(m) => anyhow::bail!("cannot attach to {}: {m}", d.url()),
            Ended::Retry(m) => {
                let wait = backoff.delay();
                let down = d.url().to_owned();
                d.next_coordinator();
                tracing::warn!(
                    "link to {down} down ({m}); dialing {} in {:.1} s",
                    d.url(),
                    wait.as_secs_f64()
                );
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = &mut shutdown => return Ok(()),
                }
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn up(m: Up) -> pb::AgentMessage {
    pb::AgentMessage { message: Some(m) }
}

impl Dialer {
    /// The URL dialed now.
    fn url(&self) -> &str {
        &self.cfg.urls[self.current.load(std::sync::atomic::Ordering::Relaxed)]
    }

    /// Moves to the next coordinator (the same one when there is one).
    fn next_coordinator(&self) {
        let n = self.targets.len();
        let _ = self.current.fetch_update(
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
            |i| Some((i + 1) % n),
        );
    }

    fn detach(&self) {
        *lock(&self.link) = None;
        if let Some(t) = lock(&self.power).take() {
            t.abort();
        }
    }

    fn link(&self) -> Option<mpsc::Sender<pb::AgentMessage>> {
        lock(&self.link).clone()
    }

    /// Sends when attached; a message that finds no link is dropped (finished runs stay in the
    /// outbox and go out after the next attach).
    async fn send(&self, m: Up) {
        if let Some(tx) = self.link() {
            let _ = tx.send(up(m)).await;
        }
    }

    /// Dials the coordinator. A certificate that fails verification (wrong pin, unknown CA)
    /// ends the agent: redialing cannot fix it.
    async fn channel(&self) -> Result<tonic::transport::Channel, Ended> {
        let (target, tls_config) =
            &self.targets[self.current.load(std::sync::atomic::Ordering::Relaxed)];
        let endpoint = target
            .endpoint()
            .map_err(|e| Ended::Refused(e.to_string()))?
            .connect_timeout(Duration::from_secs(10))
            .tcp_nodelay(true)
            .tcp_keepalive(Some(KEEPALIVE))
            .http2_keep_alive_interval(KEEPALIVE)
            .keep_alive_timeout(KEEPALIVE)
            .keep_alive_while_idle(true);
        let result = tls::connect(endpoint, target, tls_config.clone()).await;
        result.map_err(|e| {
            let text = gpufleet_kernels::error_chain(&e);
            if tls::is_certificate_error(&e) {
                Ended::Refused(format!("TLS: {text}"))
            } else {
                Ended::Retry(text)
            }
        })
    }

    fn hello(&self) -> pb::AgentMessage {
        let mut running: Vec<String> = lock(&self.running).iter().cloned().collect();
        running.sort();
        up(Up::Hello(pb::Hello {
            name: self.cfg.name.clone(),
            agent_version: env!("CARGO_PKG_VERSION").to_string(),
            info: Some(self.core.describe()),
            running,
            unacknowledged: self.outbox.pending(),
        }))
    }

    /// One attach, from dialing to the end of the stream.
    async fn session(self: &Arc<Self>, backoff: &mut Backoff) -> Ended {
        let channel = match self.channel().await {
            Ok(c) => c,
            Err(e) => return e,
        };
        let mut client = FleetClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES);
        let (tx, rx) = mpsc::channel(256);
        let _ = tx.send(self.hello()).await;
        let mut req = tonic::Request::new(ReceiverStream::new(rx));
        match format!("Bearer {}", self.cfg.token).parse() {
            Ok(v) => {
                req.metadata_mut().insert("authorization", v);
            }
            Err(_) => {
                return Ended::Refused(
                    "the token has characters not allowed in an HTTP header".into(),
                );
            }
        }
        let refused_or_retry = |s: tonic::Status| match s.code() {
            tonic::Code::Unauthenticated | tonic::Code::InvalidArgument => {
                Ended::Refused(s.message().to_string())
            }
            _ => Ended::Retry(format!("{}: {}", s.code(), s.message())),
        };
        let mut inbound = match client.attach(req).await {
            Ok(r) => r.into_inner(),
            Err(s) => return refused_or_retry(s),
        };
        match tokio::time::timeout(WELCOME_TIMEOUT, inbound.message()).await {
            Ok(Ok(Some(pb::CoordinatorMessage {
                message: Some(Down::Welcome(w)),
            }))) => {
                tracing::info!(coordinator = %w.coordinator, version = %w.coordinator_version, "attached to {}", self.url());
            }
            Ok(Err(s)) => return refused_or_retry(s),
            Ok(_) => return Ended::Retry("the coordinator did not welcome this agent".into()),
            Err(_) => return Ended::Retry("no Welcome from the coordinator in time".into()),
        }
        backoff.reset();
        *lock(&self.link) = Some(tx.clone());
        for id in self.outbox.pending() {
            if let Some(done) = self.outbox.get(&id) {
                let _ = tx.send(up(Up::Done(done))).await;
            }
        }
        loop {
            match inbound.message().await {
                Ok(Some(m)) => self.handle(m).await,
                Ok(None) => return Ended::Retry("the coordinator closed the stream".into()),
                Err(s) => return refused_or_retry(s),
            }
        }
    }

    async fn handle(self: &Arc<Self>, m: pb::CoordinatorMessage) {
        match m.message {
            Some(Down::Run(req)) => self.start(req).await,
            Some(Down::Cancel(c)) => {
                let found = self.core.cancel(&c.run_id);
                let message = if found {
                    "cancelling".to_string()
                } else {
                    "no queued or running run with that id".to_string()
                };
                self.send(Up::CancelReply(pb::CancelReply { found, message }))
                    .await;
            }
            Some(Down::Ack(a)) => self.outbox.remove(&a.run_id),
            Some(Down::Power(req)) => self.subscribe_power(req).await,
            Some(Down::StopPower(_)) => {
                if let Some(t) = lock(&self.power).take() {
                    t.abort();
                }
            }
            Some(Down::Welcome(_)) | None => {}
        }
    }

    /// A run from the coordinator: resend a finished one, ignore one already running, else
    /// submit it to the core and follow it in a task of its own.
    async fn start(self: &Arc<Self>, req: pb::RunRequest) {
        let id = req.run_id.clone();
        if let Some(done) = self.outbox.get(&id) {
            self.send(Up::Done(done)).await;
            return;
        }
        if lock(&self.running).contains(&id) {
            return;
        }
        match self.core.clone().submit(req) {
            Ok(events) => {
                lock(&self.running).insert(id.clone());
                tokio::spawn(self.clone().follow(id, events));
            }
            Err(e) => {
                let status = tonic::Status::from(e);
                self.send(Up::Refused(pb::RunRefused {
                    run_id: id,
                    code: status.code() as i32,
                    message: status.message().to_string(),
                }))
                .await;
            }
        }
    }

    /// Forwards a run's progress while attached, keeps its power samples, and puts the finished
    /// run in the outbox before sending it.
    async fn follow(self: Arc<Self>, run_id: String, mut events: mpsc::Receiver<pb::RunEvent>) {
        let mut power = Vec::new();
        while let Some(ev) = events.recv().await {
            match ev.event {
                Some(pb::run_event::Event::Progress(p)) => {
                    if let Some(tx) = self.link() {
                        let _ = tx.try_send(up(Up::Update(pb::RunUpdate {
                            run_id: run_id.clone(),
                            progress: Some(p),
                        })));
                    }
                }
                Some(pb::run_event::Event::Power(p)) => power.push(p),
                Some(pb::run_event::Event::Result(r)) => {
                    let done = pb::RunDone {
                        run_id: run_id.clone(),
                        result: Some(r),
                        power: std::mem::take(&mut power),
                    };
                    if let Err(e) = self.outbox.put(&done) {
                        tracing::error!(%run_id, "cannot write the outbox ({e}): the result is lost if the link drops before it is acknowledged");
                    }
                    lock(&self.running).remove(&run_id);
                    self.send(Up::Done(done)).await;
                    return;
                }
                None => {}
            }
        }
        lock(&self.running).remove(&run_id);
    }

    /// Streams the power samples the coordinator asked for while attached.
    async fn subscribe_power(self: &Arc<Self>, req: pb::PowerRequest) {
        let mut feed = match self.core.clone().power_feed(&req) {
            Ok(feed) => feed,
            // The serve asks every agent for its power (for /metrics): a host without sensors (a
            // Runpod VF, a VM) has nothing to send, which is worth a line but not a warning.
            Err(e @ AgentError::NoPowerSources) => {
                tracing::info!("the coordinator asks for power samples: {e}");
                return;
            }
            Err(e) => {
                tracing::warn!("power subscription refused: {e}");
                return;
            }
        };
        let d = self.clone();
        let task = tokio::spawn(async move {
            while let Some(wire) = feed.next().await {
                let Some(tx) = d.link() else { return };
                let _ = tx.try_send(up(Up::Power(wire)));
            }
        });
        if let Some(old) = lock(&self.power).replace(task) {
            old.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plaintext_beyond_loopback_is_refused() {
        let e = check_url("http://10.1.2.3:7000", None).unwrap_err();
        assert!(e.contains("plaintext"), "{e}");
        assert!(check_url("http://127.0.0.1:7000", None).is_ok());
        assert!(check_url("http://localhost:7000", None).is_ok());
        let e = check_url("https://fleet.example:7000", None).unwrap_err();
        assert!(e.contains("--pin-sha256"), "{e}");
        let pin = tls::Trust::Pin("ab".repeat(32));
        let t = check_url("https://fleet.example:7000", Some(&pin)).unwrap();
        assert_eq!(
            (t.tls, t.host.as_str(), t.port),
            (true, "fleet.example", 7000)
        );
        assert!(check_url("ftp://x", None).unwrap_err().contains("https://"));
    }

    #[test]
    fn backoff_doubles_to_the_cap_with_jitter_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(800));
        let bounds = [100, 200, 400, 800, 800];
        for hi in bounds {
            let d = b.delay().as_millis() as u64;
            assert!(d >= hi / 2 && d <= hi, "{d} not in [{}, {hi}]", hi / 2);
        }
        b.reset();
        assert!(b.delay() <= Duration::from_millis(100));
    }
}
