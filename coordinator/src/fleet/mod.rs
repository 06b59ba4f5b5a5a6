//! Agents that dial in: `gpufleet serve --fleet-listen` serves the `Fleet` service, each agent holds
//! one `Attach` stream, and the campaign executor reaches it through [`link::DialInLink`], the
//! second implementation of [`crate::link::AgentLink`].
//!
//! # Layout
//! - this file: the [`Hub`], which knows the attached agents' streams and the runs waiting for
//!   events, stores finished runs and acknowledges them.
//! - [`service`]: the tonic `Fleet` service: authentication, the Hello, the reader loop.
//! - [`link`]: the [`crate::link::AgentLink`] of a dial-in agent.
//! - [`attachment`]: whether an agent is attached, and to which serve, as the database says.
//!
//! # Nothing lost, stored once
//! A finished run arrives as a `RunDone`. The hub stores it (idempotent by run id: a resent result
//! changes nothing), then sends the `Ack` that lets the agent delete it from its outbox, then hands
//! the events to the executor waiting for the run, if one is. An agent that restarts or reconnects
//! resends everything not yet acknowledged, so a result survives any cut of the link and a crash of
//! either side after the agent wrote it to its outbox.
//!
//! # Live power
//! The hub connects each attached agent to [`LivePower`] and follows what it wants on the stream
//! (a `PowerRequest` with a rate, or `stop_power`); the samples the agent sends go to
//! [`LivePower::publish`], which never waits, so they cannot hold up a result behind them. A
//! detached agent is disconnected there, ending its watchers with the reason.
//!
//! A run waiting for an agent that went away waits for it to come back for a grace period
//! ([`DEFAULT_GRACE`]); when the agent comes back and does not list the run as running or finished
//! (it restarted and lost it), or the grace period ends, the attempt fails as unreachable and the
//! campaign's retry rule applies.

pub mod attachment;
pub mod link;
pub mod service;

use crate::db::Db;
use crate::link::LinkError;
use crate::live::{LivePower, Want};
use crate::store::AgentRow;
use gpufleet_proto::v1 as pb;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// How long a run waits for its vanished agent before the retry rule applies.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(600);
/// How often a serve refreshes `last_seen` of the agents it holds (and drops revoked ones).
pub const SEEN_EVERY: Duration = Duration::from_secs(15);
/// HTTP/2 keepalive ping interval on the fleet listener (NAT tables and proxies drop idle flows).
pub const KEEPALIVE: Duration = Duration::from_secs(20);

/// Messages to one attached agent.
pub type ToAgent = mpsc::Sender<Result<pb::CoordinatorMessage, tonic::Status>>;

/// One attached agent.
struct Session {
    id: u64,
    agent_id: i64,
    tx: ToAgent,
    info: pb::AgentInfo,
}

/// A run whose events someone waits for.
struct Waiter {
    agent: String,
    tx: mpsc::Sender<Result<pb::RunEvent, LinkError>>,
}

#[derive(Default)]
struct State {
    sessions: HashMap<String, Session>,
    waiters: HashMap<String, Waiter>,
    /// When each agent's last stream ended (absent while attached).
    offline_since: HashMap<String, Instant>,
    next_session: u64,
}

impl State {
    /// Ends, with an unreachable error saying `why(run)`, the waits on `agent` whose run `lost`.
    fn fail_waiters(
        &mut self,
        agent: &str,
        lost: impl Fn(&str) -> bool,
        why: impl Fn(&str) -> String,
    ) {
        for (run, w) in self
            .waiters
            .extract_if(|run, w| w.agent == agent && lost(run))
        {
            let _ = w.tx.try_send(Err(LinkError::Unreachable(why(&run))));
        }
    }
}

/// The attached agents of one serve and the runs waiting on them. Cheap to share (`Arc`).
pub struct Hub {
    db: Db,
    /// This serve's owner id, sent in every Welcome.
    owner: String,
    grace: Duration,
    state: Mutex<State>,
    /// Bumped on every attach and detach, so waiters can wait for an agent to come back.
    changes: watch::Sender<u64>,
    live: Arc<LivePower>,
    /// The base URL of this serve's HTTP API, recorded with each attached agent.
    api_url: OnceLock<String>,
}

impl Hub {
    pub fn new(db: Db, owner: String, grace: Duration, live: Arc<LivePower>) -> Arc<Hub> {
        Arc::new(Hub {
            db,
            owner,
            grace,
            state: Mutex::new(State::default()),
            changes: watch::channel(0).0,
            live,
            api_url: OnceLock::new(),
        })
    }

    /// Records where this serve's HTTP API is (set once, when it is bound).
    pub fn set_api_url(&self, url: String) {
        let _ = self.api_url.set(url);
    }

    fn api_url(&self) -> Option<&str> {
        self.api_url.get().map(String::as_str)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn bump(&self) {
        self.changes.send_modify(|n| *n += 1);
    }

    /// The attached agent's description, if it is attached.
    pub fn info(&self, agent: &str) -> Option<pb::AgentInfo> {
        self.state().sessions.get(agent).map(|s| s.info.clone())
    }

    /// Registers a new stream of `agent` (replacing an older one, whose reader then ends) and
    /// settles the runs waiting on it: one the agent neither runs nor holds finished was lost.
    /// Returns the session id.
    fn attach(&self, row: &AgentRow, tx: ToAgent, hello: &pb::Hello) -> u64 {
        let tx_for_power = tx.clone();
        let known: HashSet<&str> = hello
            .running
            .iter()
            .chain(&hello.unacknowledged)
            .map(String::as_str)
            .collect();
        let mut st = self.state();
        st.next_session += 1;
        let id = st.next_session;
        let previous = st.sessions.insert(
            row.name.clone(),
            Session {
                id,
                agent_id: row.id,
                tx,
                info: hello.info.clone().unwrap_or_default(),
            },
        );
        if let Some(old) = previous {
            // A newer stream of the same agent wins (the old one is usually a dead connection the
            // agent has given up on); close the old one so it stops being read.
            let _ = old.tx.try_send(Err(tonic::Status::aborted(
                "a newer connection of this agent replaced this one",
            )));
        }
        st.offline_since.remove(&row.name);
        st.fail_waiters(
            &row.name,
            |run| !known.contains(run),
            |run| {
                format!(
                    "agent {} came back without run {run} (it restarted before finishing it)",
                    row.name
                )
            },
        );
        drop(st);
        self.bump();
        let wants = self
            .live
            .connect(&row.name, hello.info.clone().unwrap_or_default());
        tokio::spawn(follow_wants(wants, tx_for_power));
        id
    }

    /// Forgets session `id` of `agent` (if it is still the current one), ends its live power
    /// with `why` and starts the grace period of the runs waiting on it.
    fn detach(self: &Arc<Self>, agent: &str, id: u64, why: &str) {
        let mut st = self.state();
        if st.sessions.get(agent).is_none_or(|s| s.id != id) {
            return;
        }
        self.live.disconnect(agent, why);
        st.sessions.remove(agent);
        st.offline_since.insert(agent.to_string(), Instant::now());
        let waiting = st.waiters.values().any(|w| w.agent == agent);
        drop(st);
        self.bump();
        if waiting {
            let hub = self.clone();
            let agent = agent.to_string();
            tokio::spawn(async move { hub.expire_after_grace(&agent).await });
        }
    }

    /// Fails the runs waiting on `agent` once it has been away for the whole grace period.
    async fn expire_after_grace(&self, agent: &str) {
        loop {
            let away = match self.state().offline_since.get(agent) {
                Some(since) => since.elapsed(),
                None => return,
            };
            if away < self.grace {
                tokio::time::sleep(self.grace - away).await;
                continue;
            }
            self.state().fail_waiters(agent, |_| true, |run| {
                format!(
                    "agent {agent} lost its link during run {run} and did not come back within the grace period ({} s)",
                    self.grace.as_secs()
                )
            });
            return;
        }
    }

    /// Waits until `agent` is attached, at most the grace period; returns its message sender.
    async fn session(&self, agent: &str) -> Option<ToAgent> {
        let mut changes = self.changes.subscribe();
        let wait = async {
            loop {
                if let Some(s) = self.state().sessions.get(agent) {
                    return s.tx.clone();
                }
                if changes.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::time::timeout(self.grace, wait).await.ok()
    }

    /// Sends `request` to `agent` (waiting up to the grace period for it to attach) and returns
    /// the receiver of the run's events.
    async fn start_run(
        &self,
        agent: &str,
        request: pb::RunRequest,
    ) -> Result<mpsc::Receiver<Result<pb::RunEvent, LinkError>>, LinkError> {
        loop {
            let Some(tx) = self.session(agent).await else {
                return Err(LinkError::Unreachable(format!(
                    "dial-in agent {agent} is not attached and did not attach within the grace period ({} s)",
                    self.grace.as_secs()
                )));
            };
            let (etx, erx) = mpsc::channel(256);
            self.state().waiters.insert(
                request.run_id.clone(),
                Waiter {
                    agent: agent.to_string(),
                    tx: etx,
                },
            );
            let msg = pb::CoordinatorMessage {
                message: Some(pb::coordinator_message::Message::Run(request.clone())),
            };
            if tx.send(Ok(msg)).await.is_ok() {
                return Ok(erx);
            }
            // That stream just ended: wait for the next one.
            self.state().waiters.remove(&request.run_id);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Hands a progress event to the run's waiter, if any (dropped when it is slow).
    fn progress(&self, agent: &str, update: pb::RunUpdate) {
        let st = self.state();
        if let Some(w) = st.waiters.get(&update.run_id)
            && w.agent == agent
        {
            let ev = pb::RunEvent {
                event: update.progress.map(pb::run_event::Event::Progress),
            };
            let _ = w.tx.try_send(Ok(ev));
        }
    }

    /// A refused run: its waiter gets the refusal as a link error.
    fn refused(&self, agent: &str, r: pb::RunRefused) {
        let mut st = self.state();
        if st.waiters.get(&r.run_id).is_some_and(|w| w.agent == agent)
            && let Some(w) = st.waiters.remove(&r.run_id)
        {
            let message = format!("agent {agent} refused: {}", r.message);
            let err = if r.code == tonic::Code::ResourceExhausted as i32 {
                LinkError::Busy(message)
            } else {
                LinkError::Refused(message)
            };
            let _ = w.tx.try_send(Err(err));
        }
    }

    /// Hands a stored run's power samples and result to its waiter, if any.
    async fn deliver(&self, agent: &str, done: pb::RunDone) {
        let waiter = {
            let mut st = self.state();
            match st.waiters.get(&done.run_id) {
                Some(w) if w.agent == agent => st.waiters.remove(&done.run_id),
                _ => None,
            }
        };
        let Some(w) = waiter else { return };
        for p in done.power {
            let ev = pb::RunEvent {
                event: Some(pb::run_event::Event::Power(p)),
            };
            if w.tx.send(Ok(ev)).await.is_err() {
                return;
            }
        }
        let ev = pb::RunEvent {
            event: done.result.map(pb::run_event::Event::Result),
        };
        let _ = w.tx.send(Ok(ev)).await;
    }

    /// The agent ids of the attached agents, for the `last_seen` refresh.
    fn attached_ids(&self) -> Vec<(String, u64, i64)> {
        self.state()
            .sessions
            .iter()
            .map(|(name, s)| (name.clone(), s.id, s.agent_id))
            .collect()
    }

    /// Every [`SEEN_EVERY`]: refreshes `last_seen` of the attached agents and closes the streams
    /// of agents removed since they attached (revoked).
    pub async fn keep_seen(self: Arc<Self>) {
        loop {
            tokio::time::sleep(SEEN_EVERY).await;
            let attached = self.attached_ids();
            let ids: Vec<i64> = attached.iter().map(|a| a.2).collect();
            let active = self
                .db
                .call(move |s| {
                    s.agents_seen(&ids)?;
                    s.agents()
                })
                .await;
            let Ok(active) = active else { continue };
            for (name, session, agent_id) in attached {
                if !active.iter().any(|a| a.id == agent_id) {
                    tracing::info!(agent = %name, "agent removed: closing its stream");
                    self.revoke(&name, session);
                }
            }
        }
    }

    /// On a stop of the serve: ends every attached agent's stream with `UNAVAILABLE` saying
    /// `why`, so each redials the next coordinator of its list (its outbox goes there), and
    /// forgets them. Returns how many there were.
    pub fn send_all_away(self: &Arc<Self>, why: &str) -> usize {
        let sessions: Vec<(String, u64, ToAgent)> = self
            .state()
            .sessions
            .iter()
            .map(|(name, s)| (name.clone(), s.id, s.tx.clone()))
            .collect();
        for (name, id, tx) in &sessions {
            let _ = tx.try_send(Err(tonic::Status::unavailable(why.to_string())));
            self.detach(name, *id, why);
        }
        sessions.len()
    }

    fn revoke(self: &Arc<Self>, agent: &str, session: u64) {
        let tx = self
            .state()
            .sessions
            .get(agent)
            .filter(|s| s.id == session)
            .map(|s| s.tx.clone());
        if let Some(tx) = tx {
            let _ = tx.try_send(Err(tonic::Status::unauthenticated(format!(
                "agent {agent} was removed from this fleet"
            ))));
        }
        self.detach(
            agent,
            session,
            &format!("agent {agent} was removed from this fleet"),
        );
    }
}

/// Asks the agent on `tx` for what [`LivePower`] wants of it, each time that changes, until the
/// agent is disconnected or connected again (the receiver closes) or its stream ends.
async fn follow_wants(mut wants: watch::Receiver<Want>, tx: ToAgent) {
    let mut asked = Want::Off;
    loop {
        let want = *wants.borrow_and_update();
        if want != asked {
            let message = match want.request() {
                Some(r) => pb::coordinator_message::Message::Power(r),
                None => pb::coordinator_message::Message::StopPower(true),
            };
            let msg = pb::CoordinatorMessage {
                message: Some(message),
            };
            if tx.send(Ok(msg)).await.is_err() {
                return;
            }
            asked = want;
        }
        if wants.changed().await.is_err() {
            return;
        }
    }
}
