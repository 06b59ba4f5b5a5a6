//! Live power at the coordinator: the latest sample of every connected agent's channels (for
//! `/metrics` and the agent page) and the watchers of live streams (the HTTP API's
//! `/api/agents/{name}/power`, which `gpufleet power` and the agent page read), fed by a dial-in
//! link ([`crate::fleet::Hub`]) or a direct agent's `StreamPower` ([`direct`]).
//!
//! # One subscription per agent, fanned out
//! An agent gets one subscription whatever the number of watchers ([`Want`]): at the rate of the
//! fastest watcher (every sample when one asks for all), else at `--power-metrics-hz` for the
//! gauges when nobody watches, else none. Each watcher has its own filter, its own [`Pace`] and a
//! bounded buffer ([`WATCH_BUFFER`]): a sample that finds the buffer full is dropped and counted,
//! never waited for, so a watcher that stops reading holds at most its buffer and never slows
//! the link (where a campaign's results travel), the other watchers or the agent. When the agent
//! goes (its link ends, its direct stream fails) each watcher ends with the reason and the
//! agent's gauges disappear instead of freezing at their last value.

pub mod direct;

use gpufleet_kernels::quote;
use gpufleet_proto::power::{Pace, check_rate_hz};
use gpufleet_proto::v1 as pb;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// Samples a watcher may have waiting before new ones are dropped (about 13 s of one channel at
/// the agent's default 20 Hz).
pub const WATCH_BUFFER: usize = 256;
/// A channel not heard from for this long is left out of the gauges.
pub const STALE: Duration = Duration::from_secs(30);
/// Channels kept per agent (an agent sends what its sampler has, a few; this bounds a broken one).
pub const MAX_CHANNELS: usize = 256;
/// Watchers per agent; one more is refused.
pub const MAX_WATCHERS: usize = 64;
/// The watts kept per channel for the agent page's charts: one a second, five minutes.
pub const HISTORY_POINTS: usize = 300;
const HISTORY_STEP_NS: u64 = 1_000_000_000;

/// A channel of an agent: its source, PCI bus id and label.
pub type Key = (String, String, String);

/// The channel `s` belongs to.
pub fn key(s: &pb::PowerSample) -> Key {
    (s.source.clone(), s.pci_bus_id.clone(), s.label.clone())
}

/// What the coordinator asks of one agent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Want {
    /// No samples.
    Off,
    /// Samples at this rate per channel; 0: every sample the agent takes.
    Rate(f64),
}

impl Want {
    /// The request that asks for this (`None`: stop).
    pub fn request(self) -> Option<pb::PowerRequest> {
        match self {
            Want::Off => None,
            Want::Rate(rate_hz) => Some(pb::PowerRequest {
                rate_hz,
                ..Default::default()
            }),
        }
    }
}

/// Why a watch was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WatchError {
    /// The agent is not connected to this serve (with why, when known).
    #[error("{0}")]
    NotConnected(String),
    /// A bad filter or rate, naming the field.
    #[error("{field}: {message}")]
    BadRequest {
        field: &'static str,
        message: String,
    },
    /// The agent has no power channel at all.
    #[error("{0}")]
    NoSources(String),
    /// Too many watchers on one agent.
    #[error("{0}")]
    Busy(String),
}

/// One watcher of an agent's stream.
struct Watcher {
    id: u64,
    source: Option<String>,
    /// The PCI bus ids (empty: the host) it wants; `None`: all.
    pci: Option<Vec<String>>,
    rate_hz: f64,
    pace: Pace<Key>,
    tx: mpsc::Sender<pb::PowerSample>,
    ended: Arc<OnceLock<String>>,
}

impl Watcher {
    fn wants(&self, s: &pb::PowerSample) -> bool {
        self.source.as_ref().is_none_or(|w| *w == s.source)
            && self.pci.as_ref().is_none_or(|p| p.contains(&s.pci_bus_id))
    }
}

/// What the serve knows of one connected agent.
struct Feed {
    want: watch::Sender<Want>,
    info: pb::AgentInfo,
    latest: BTreeMap<Key, (Instant, pb::PowerSample)>,
    /// Each channel's watts over the last minutes, (monotonic ns, watts), a point a second.
    history: BTreeMap<Key, VecDeque<(u64, f64)>>,
    watchers: Vec<Watcher>,
}

/// The live power of every agent connected to one serve. Cheap to share (`Arc`).
pub struct LivePower {
    metrics_hz: f64,
    feeds: Mutex<HashMap<String, Feed>>,
    /// Why each agent that was connected is not any more (for the next watcher's error).
    gone: Mutex<HashMap<String, String>>,
    next_watcher: AtomicU64,
    delivered: AtomicU64,
    dropped: AtomicU64,
}

/// A live stream of one agent's samples, as one watcher filtered and paced them. Dropping it
/// ends the watch (and the agent's subscription with the last one).
pub struct Watch {
    live: Arc<LivePower>,
    agent: String,
    id: u64,
    rx: mpsc::Receiver<pb::PowerSample>,
    ended: Arc<OnceLock<String>>,
}

impl Watch {
    /// The next sample, or why the stream ended (the agent went away).
    pub async fn next(&mut self) -> Result<pb::PowerSample, String> {
        match self.rx.recv().await {
            Some(s) => Ok(s),
            None => Err(self
                .ended
                .get()
                .cloned()
                .unwrap_or_else(|| format!("agent {}'s power feed ended", self.agent))),
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.live.unwatch(&self.agent, self.id);
    }
}

/// Counters of the fan-out since the serve started.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct Counts {
    pub agents: usize,
    pub watchers: usize,
    pub delivered: u64,
    pub dropped: u64,
}

/// The latest sample of each channel of `feed` heard from within [`STALE`].
fn fresh(feed: &Feed) -> Vec<pb::PowerSample> {
    feed.latest
        .values()
        .filter(|(at, _)| at.elapsed() < STALE)
        .map(|(_, s)| s.clone())
        .collect()
}

/// The power channels an agent described (not the sources it reported unavailable).
fn channels(info: &pb::AgentInfo) -> impl Iterator<Item = &pb::PowerSourceInfo> {
    info.power_sources.iter().filter(|p| !p.scope.is_empty())
}

/// `req`'s filter over the channels `info` describes: the source, and the PCI bus ids of the
/// device (a device id of the agent, or a PCI bus id, full or without its domain).
fn resolve(
    agent: &str,
    info: &pb::AgentInfo,
    req: &pb::PowerRequest,
) -> Result<(Option<String>, Option<Vec<String>>), WatchError> {
    if channels(info).next().is_none() {
        let why: Vec<String> = info
            .power_sources
            .iter()
            .map(|p| format!("{}: {}", p.name, p.reason))
            .collect();
        return Err(WatchError::NoSources(format!(
            "agent {agent} has no power channel ({})",
            if why.is_empty() {
                "no source was probed".to_string()
            } else {
                why.join("; ")
            }
        )));
    }
    let have = || {
        channels(info)
            .map(|c| {
                let device = if c.pci_bus_id.is_empty() {
                    "host"
                } else {
                    &c.pci_bus_id
                };
                format!("{} {device}", c.name)
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let pci = if req.device_id.is_empty() {
        None
    } else {
        let d = req.device_id.to_ascii_lowercase();
        let mut ids: Vec<String> = channels(info)
            .filter(|c| {
                c.device_ids.iter().any(|id| id == &req.device_id)
                    || (!c.pci_bus_id.is_empty()
                        && (c.pci_bus_id == d || c.pci_bus_id.strip_prefix("0000:") == Some(&d)))
            })
            .map(|c| c.pci_bus_id.clone())
            .collect();
        ids.dedup();
        if ids.is_empty() {
            return Err(WatchError::BadRequest {
                field: "device",
                message: format!(
                    "{} is neither a device of agent {agent} with a power channel nor a channel's PCI bus id (channels: {})",
                    quote(&req.device_id),
                    have()
                ),
            });
        }
        Some(ids)
    };
    let source = if req.source.is_empty() {
        None
    } else {
        let any = channels(info).any(|c| {
            c.name == req.source && pci.as_ref().is_none_or(|p| p.contains(&c.pci_bus_id))
        });
        if !any {
            return Err(WatchError::BadRequest {
                field: "source",
                message: format!(
                    "no power channel of agent {agent} matches source {}{} (channels: {})",
                    quote(&req.source),
                    if req.device_id.is_empty() {
                        String::new()
                    } else {
                        format!(" and device {}", quote(&req.device_id))
                    },
                    have()
                ),
            });
        }
        Some(req.source.clone())
    };
    Ok((source, pci))
}

impl LivePower {
    /// Live power keeping the gauges fresh at `metrics_hz` (0: only while someone watches).
    pub fn new(metrics_hz: f64) -> Arc<LivePower> {
        Arc::new(LivePower {
            metrics_hz: if metrics_hz.is_finite() && metrics_hz > 0.0 {
                metrics_hz
            } else {
                0.0
            },
            feeds: Mutex::new(HashMap::new()),
            gone: Mutex::new(HashMap::new()),
            next_watcher: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        })
    }

    fn feeds(&self) -> std::sync::MutexGuard<'_, HashMap<String, Feed>> {
        self.feeds.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn gone(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.gone.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the watchers of `feed` and the gauges need from its agent.
    fn want_of(&self, feed: &Feed) -> Want {
        let rates = feed.watchers.iter().map(|w| w.rate_hz);
        let watched = rates.clone().next().is_some();
        if rates.clone().any(|r| r == 0.0) {
            return Want::Rate(0.0);
        }
        let fastest = rates.fold(self.metrics_hz, f64::max);
        if watched || fastest > 0.0 {
            Want::Rate(fastest)
        } else {
            Want::Off
        }
    }

    fn update_want(&self, feed: &Feed) {
        let want = self.want_of(feed);
        feed.want.send_if_modified(|w| {
            let changed = *w != want;
            *w = want;
            changed
        });
    }

    /// `agent` is connected (its link attached, or its direct agent answered) and described by
    /// `info`. Returns what to ask of it: the caller's driver follows the receiver until it
    /// closes, when the agent is connected again (a newer link) or disconnected. Watchers of an
    /// agent that reconnects keep watching.
    pub fn connect(&self, agent: &str, info: pb::AgentInfo) -> watch::Receiver<Want> {
        self.gone().remove(agent);
        let mut feeds = self.feeds();
        match feeds.get_mut(agent) {
            Some(feed) => {
                feed.info = info;
                let (tx, rx) = watch::channel(self.want_of(feed));
                feed.want = tx;
                rx
            }
            None => {
                let mut feed = Feed {
                    want: watch::channel(Want::Off).0,
                    info,
                    latest: BTreeMap::new(),
                    history: BTreeMap::new(),
                    watchers: Vec::new(),
                };
                let (tx, rx) = watch::channel(self.want_of(&feed));
                feed.want = tx;
                feeds.insert(agent.to_string(), feed);
                rx
            }
        }
    }

    /// `agent` went away because `why`: its watchers end with that reason, its gauges go.
    pub fn disconnect(&self, agent: &str, why: &str) {
        let feed = self.feeds().remove(agent);
        if let Some(feed) = feed {
            for w in &feed.watchers {
                let _ = w.ended.set(why.to_string());
            }
            let mut gone = self.gone();
            // Bounded by the agents this serve has seen; a removed agent's entry goes with it.
            gone.insert(agent.to_string(), why.to_string());
        }
    }

    /// Forgets why a removed agent went.
    pub fn forget(&self, agent: &str) {
        self.disconnect(agent, &format!("agent {agent} was removed from this fleet"));
        self.gone().remove(agent);
    }

    /// A sample from `agent`: kept as its channel's latest, handed to each watcher that wants
    /// it, never waiting (a full watcher misses it, counted).
    pub fn publish(&self, agent: &str, sample: pb::PowerSample) {
        // A channel is named by a few short strings; a sample naming one with more is not a
        // sensor's, and is not kept (a broken or hostile agent cannot fill the serve with them).
        if sample.source.len() > 64 || sample.pci_bus_id.len() > 64 || sample.label.len() > 512 {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut feeds = self.feeds();
        let Some(feed) = feeds.get_mut(agent) else {
            return;
        };
        let k = key(&sample);
        for w in &mut feed.watchers {
            if !w.wants(&sample) || !w.pace.keep(k.clone(), sample.monotonic_ns) {
                continue;
            }
            match w.tx.try_send(sample.clone()) {
                Ok(()) => self.delivered.fetch_add(1, Ordering::Relaxed),
                Err(_) => self.dropped.fetch_add(1, Ordering::Relaxed),
            };
        }
        if feed.latest.len() >= MAX_CHANNELS && !feed.latest.contains_key(&k) {
            return;
        }
        if sample.has_watts && sample.watts.is_finite() {
            let h = feed.history.entry(k.clone()).or_default();
            let due = h.back().is_none_or(|&(t, _)| {
                sample.monotonic_ns >= t.saturating_add(HISTORY_STEP_NS) || sample.monotonic_ns < t
            });
            if due {
                if h.len() == HISTORY_POINTS {
                    h.pop_front();
                }
                h.push_back((sample.monotonic_ns, sample.watts));
            }
        }
        feed.latest.insert(k, (Instant::now(), sample));
    }

    /// Starts watching `agent` with `req`'s filter and rate.
    ///
    /// # Errors
    /// The agent is not connected here, the filter or rate is bad, it has no power channel, or
    /// it has [`MAX_WATCHERS`] already.
    pub fn watch(
        self: &Arc<Self>,
        agent: &str,
        req: &pb::PowerRequest,
    ) -> Result<Watch, WatchError> {
        let rate_hz = check_rate_hz(req.rate_hz).map_err(|message| WatchError::BadRequest {
            field: "rate_hz",
            message,
        })?;
        let mut feeds = self.feeds();
        let Some(feed) = feeds.get_mut(agent) else {
            drop(feeds);
            return Err(WatchError::NotConnected(match self.gone().get(agent) {
                Some(why) => format!("agent {agent} is not connected to this serve: {why}"),
                // Any name a request gives: quoted, and cut short.
                None => format!(
                    "agent {} is not connected to this serve (a dial-in agent attaches with gpufleet-agent --connect; a direct agent is followed once it answers)",
                    quote(agent)
                ),
            }));
        };
        let (source, pci) = resolve(agent, &feed.info, req)?;
        if feed.watchers.len() >= MAX_WATCHERS {
            return Err(WatchError::Busy(format!(
                "agent {agent} has {MAX_WATCHERS} watchers already; try again when one ends"
            )));
        }
        let id = self.next_watcher.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(WATCH_BUFFER);
        let ended = Arc::new(OnceLock::new());
        feed.watchers.push(Watcher {
            id,
            source,
            pci,
            rate_hz,
            pace: Pace::new(rate_hz),
            tx,
            ended: ended.clone(),
        });
        self.update_want(feed);
        Ok(Watch {
            live: self.clone(),
            agent: agent.to_string(),
            id,
            rx,
            ended,
        })
    }

    fn unwatch(&self, agent: &str, id: u64) {
        let mut feeds = self.feeds();
        if let Some(feed) = feeds.get_mut(agent) {
            feed.watchers.retain(|w| w.id != id);
            self.update_want(feed);
        }
    }

    /// Whether `agent` is connected here.
    pub fn connected(&self, agent: &str) -> bool {
        self.feeds().contains_key(agent)
    }

    /// The latest sample of each channel of `agent` heard from within [`STALE`], by channel.
    pub fn latest(&self, agent: &str) -> Vec<pb::PowerSample> {
        self.feeds().get(agent).map_or_else(Vec::new, fresh)
    }

    /// Each channel's watts over the last minutes (see [`HISTORY_POINTS`]), by channel.
    pub fn history(&self, agent: &str) -> BTreeMap<Key, Vec<(u64, f64)>> {
        self.feeds().get(agent).map_or_else(BTreeMap::new, |f| {
            f.history
                .iter()
                .map(|(k, h)| (k.clone(), h.iter().copied().collect()))
                .collect()
        })
    }

    /// [`LivePower::latest`] of every connected agent, by agent name, read under one lock.
    pub fn all_latest(&self) -> BTreeMap<String, Vec<pb::PowerSample>> {
        self.feeds()
            .iter()
            .map(|(n, f)| (n.clone(), fresh(f)))
            .filter(|(_, l)| !l.is_empty())
            .collect()
    }

    /// The fan-out's counters.
    pub fn counts(&self) -> Counts {
        let feeds = self.feeds();
        Counts {
            agents: feeds.len(),
            watchers: feeds.values().map(|f| f.watchers.len()).sum(),
            delivered: self.delivered.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests;
