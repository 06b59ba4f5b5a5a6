//! Direct agents' live power: the serve follows every registered direct agent, describes it, and
//! holds its `StreamPower` open at the rate [`LivePower`] wants (none while nobody watches and the
//! gauges are off). An agent that cannot be reached or ends its stream is disconnected (its
//! watchers end with the reason, its gauges go) and tried again with a growing pause.

use super::{LivePower, Want};
use crate::db::Db;
use crate::fleet::SEEN_EVERY;
use crate::link::grpc::AgentAddr;
use crate::store::AgentKind;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Pause after a failure, doubled up to [`RETRY_MAX`] while the agent keeps failing.
pub const RETRY_MIN: Duration = Duration::from_secs(2);
pub const RETRY_MAX: Duration = Duration::from_secs(60);
/// How often an agent nobody streams from is described again, to notice that it went.
pub const RECHECK: Duration = Duration::from_secs(60);

/// Follows the direct agents registered in `db` until the task is aborted: one task per agent,
/// started when it is added, stopped when it is removed or its address changes.
pub async fn follow_direct_agents(live: Arc<LivePower>, db: Db, connect_timeout: Duration) {
    let mut following: HashMap<String, (String, tokio::task::JoinHandle<()>)> = HashMap::new();
    loop {
        if let Ok(agents) = db.call(|s| s.agents()).await {
            let direct: Vec<AgentAddr> = agents
                .iter()
                .filter(|a| a.kind == AgentKind::Direct)
                .map(|a| AgentAddr::of(a, connect_timeout))
                .collect();
            following.retain(|name, (url, task)| {
                let keep = direct.iter().any(|a| &a.name == name && &a.url == url);
                if !keep {
                    task.abort();
                    live.forget(name);
                }
                keep
            });
            for a in direct {
                if let std::collections::hash_map::Entry::Vacant(slot) =
                    following.entry(a.name.clone())
                {
                    let url = a.url.clone();
                    slot.insert((url, tokio::spawn(follow(live.clone(), a))));
                }
            }
        }
        tokio::time::sleep(SEEN_EVERY).await;
    }
}

/// One direct agent, forever: stream while wanted, and after a failure pause and try again.
async fn follow(live: Arc<LivePower>, addr: AgentAddr) {
    let mut pause = RETRY_MIN;
    loop {
        let started = tokio::time::Instant::now();
        let why = follow_once(&live, &addr).await;
        live.disconnect(&addr.name, &why);
        tracing::debug!(agent = %addr.name, "live power: {why}");
        if started.elapsed() > RETRY_MAX {
            pause = RETRY_MIN;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RETRY_MAX);
    }
}

/// Describes the agent, connects it and streams what is wanted until something fails; returns
/// why it stopped.
async fn follow_once(live: &LivePower, addr: &AgentAddr) -> String {
    let info = match addr.describe().await {
        Ok(info) => info,
        Err(e) => return e.to_string(),
    };
    let has_channels = super::channels(&info).next().is_some();
    let mut want = live.connect(&addr.name, info);
    loop {
        let w = *want.borrow_and_update();
        let request = match w.request() {
            Some(r) if has_channels => r,
            _ => {
                // Nothing to stream: check now and then that the agent is still there.
                tokio::select! {
                    changed = want.changed() => {
                        if changed.is_err() {
                            return format!("agent {} was connected again", addr.name);
                        }
                    }
                    _ = tokio::time::sleep(RECHECK) => {
                        if let Err(e) = addr.describe().await {
                            return e.to_string();
                        }
                    }
                }
                continue;
            }
        };
        if let Some(why) = stream(live, addr, request, &mut want).await {
            return why;
        }
    }
}

/// Streams samples into `live` until the wanted rate changes (`None`) or the stream fails
/// (`Some(why)`).
async fn stream(
    live: &LivePower,
    addr: &AgentAddr,
    request: gpufleet_proto::v1::PowerRequest,
    want: &mut watch::Receiver<Want>,
) -> Option<String> {
    let mut client = match addr.connect().await {
        Ok(c) => c,
        Err(e) => return Some(e.to_string()),
    };
    let mut samples = match client.stream_power(request).await {
        Ok(r) => r.into_inner(),
        Err(status) => return Some(addr.refused(status).to_string()),
    };
    loop {
        tokio::select! {
            item = samples.message() => match item {
                Ok(Some(s)) => live.publish(&addr.name, s),
                Ok(None) => return Some(format!("agent {} ended its power stream", addr.name)),
                Err(status) => return Some(addr.refused(status).to_string()),
            },
            changed = want.changed() => {
                return changed.is_err().then(|| format!("agent {} was connected again", addr.name));
            }
        }
    }
}
