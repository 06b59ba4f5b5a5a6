//! `gpufleet-agent simulate`: a load generator for the fleet's own scale tests and benchmarks. One
//! process opens N real `Fleet.Attach` streams, one per simulated dial-in agent, and answers the
//! runs the coordinator sends with results drawn from a seeded distribution. For tests and
//! benchmarks only: nothing here measures anything.
//!
//! # Why it goes through the real dial-in code
//! Each simulated agent is a [`RunCore`](crate::dial::RunCore) handed to the agent's own
//! [`dial_in`]: the same TLS verification (`--ca-cert`, `--pin-sha256`), enrolment token, Hello,
//! Welcome, Run, RunDone and Ack, the same on-disk outbox (under `STATE_DIR/NAME`, so what was not
//! acknowledged is sent again after a reconnect or a restart), the same backoff and the same list
//! of coordinators. A scale test then measures the serve against the protocol real agents speak.
//!
//! # Never a real device
//! A simulated agent describes one device of the `cpu` backend (so campaigns plan on it as on a
//! real one) whose name, vendor, driver and feature flag say it is simulated ([`device`]). With
//! `--like` it takes a real device's model name, backend, driver and memory instead, so that a real
//! agent's device and the simulated ones form one sibling group; vendor, architecture, feature
//! flag and host still say simulated. Its
//! results carry the catalog's metric, FLOPs and bytes, several iteration times with their
//! statistics, and a validation that says nothing was compared.
//!
//! # Layout
//! - this file: [`SimConfig`] and [`simulate`], which starts the agents and ends them together.
//! - [`options`]: names, tokens file, `--slow` and `--pcie`, checked (pure).
//! - [`device`]: the simulated description.
//! - [`draw`]: the seeded distribution (pure).
//! - [`answer`]: a run's RunResult.
//! - [`agent`]: one simulated agent, the `RunCore` behind its link.
//!
//! # Lifecycle
//! [`simulate`] checks every input before dialing (a missing token names the agent), then starts
//! one task per agent: [`dial_in`] with a [`agent::SimAgent`]. The agents run until `shutdown`,
//! or until one is refused by a coordinator (unknown name, wrong token, wrong pin), which ends them
//! all with that agent's error.

pub mod agent;
pub mod answer;
pub mod device;
pub mod draw;
pub mod options;

use crate::dial::{DialConfig, check_url, dial_in};
use agent::SimAgent;
use anyhow::Context;
use draw::Profile;
use gpufleet_proto::tls::Trust;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// What to simulate and where to dial.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// How many agents: `name_prefix-0000` ..
    pub agents: usize,
    pub name_prefix: String,
    /// The tokens file: a `NAME TOKEN` line per agent.
    pub tokens: PathBuf,
    /// The coordinators' fleet addresses, tried in turn (as the agent's `--connect`).
    pub urls: Vec<String>,
    /// How an `https://` coordinator is verified.
    pub trust: Option<Trust>,
    /// Each agent's state (its outbox) goes in `state_dir/NAME`.
    pub state_dir: PathBuf,
    /// Seeds every draw: the devices' factors and each run's noise.
    pub seed: u64,
    /// Device-to-device spread, a fraction.
    pub spread: f64,
    /// Agents planted slower, by this fraction of their time.
    pub slow: Vec<(String, f64)>,
    /// Agents whose device reports a PCIe link below its maximum (`gen3 x4`).
    pub pcie: Vec<(String, String)>,
    /// The device's model, backend, driver and memory (`--like`; default: the simulated model).
    pub model: device::Model,
    /// An average device's `copy` rate, bytes/s (`--copy-gbps`; default: [`draw::COPY_BYTES_PER_S`]).
    pub copy_bytes_per_s: f64,
    /// How long each run takes once its device is free.
    pub run_s: Duration,
    /// Longest wait between redials.
    pub backoff_max: Duration,
}

/// Shortest wait between redials (as the agent's).
const BACKOFF_MIN: Duration = Duration::from_millis(500);

/// Runs the simulated agents until `shutdown`.
///
/// # Errors
/// A bad option, an unreadable tokens file or one without a simulated agent's token (naming
/// it), a bad URL or trust option, or an agent refused by the coordinator (naming it).
pub async fn simulate(cfg: SimConfig, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    options::check_agents(&cfg.name_prefix, cfg.agents).map_err(anyhow::Error::msg)?;
    options::check_spread(cfg.spread).map_err(anyhow::Error::msg)?;
    if cfg.urls.is_empty() {
        anyhow::bail!("--connect: no coordinator URL given");
    }
    for url in &cfg.urls {
        check_url(url, cfg.trust.as_ref()).map_err(anyhow::Error::msg)?;
    }
    let names = options::names(&cfg.name_prefix, cfg.agents);
    let text = std::fs::read_to_string(&cfg.tokens)
        .with_context(|| format!("--tokens {}", cfg.tokens.display()))?;
    let tokens = options::tokens_for(&text, &names)
        .map_err(|e| anyhow::anyhow!("--tokens {}: {e}", cfg.tokens.display()))?;
    let slow = options::per_agent("--slow", &cfg.slow, &names).map_err(anyhow::Error::msg)?;
    let pcie = options::per_agent("--pcie", &cfg.pcie, &names).map_err(anyhow::Error::msg)?;

    if !(cfg.copy_bytes_per_s.is_finite() && cfg.copy_bytes_per_s > 0.0) {
        anyhow::bail!("--copy-gbps must be a positive number of GB/s");
    }
    let dev = Arc::new(device::device(&cfg.model));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    for (i, (name, token)) in names.iter().zip(tokens).enumerate() {
        let profile = Profile::new(
            cfg.seed,
            i as u64,
            cfg.spread,
            slow.get(name).copied().unwrap_or(0.0),
        )
        .at_copy_rate(cfg.copy_bytes_per_s);
        let link = pcie
            .get(name)
            .cloned()
            .unwrap_or_else(|| device::MAX_LINK.to_string());
        let agent = Arc::new(SimAgent::new(
            name.clone(),
            dev.clone(),
            profile,
            link,
            cfg.run_s,
        ));
        let dial = DialConfig {
            urls: cfg.urls.clone(),
            name: name.clone(),
            token,
            state_dir: cfg.state_dir.join(name),
            trust: cfg.trust.clone(),
            backoff_min: BACKOFF_MIN,
            backoff_max: cfg.backoff_max.max(BACKOFF_MIN),
        };
        let mut stopped = stopped.clone();
        let until = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        let span = tracing::info_span!("simulated", agent = %name);
        let name = name.clone();
        tasks.spawn(async move { (name, dial_in(agent, dial, until).await) }.instrument(span));
    }
    tracing::info!(
        agents = cfg.agents,
        seed = cfg.seed,
        planted = slow.len(),
        "simulating {} .. {}, dialing {}",
        names[0],
        names[names.len() - 1],
        cfg.urls.join(", then ")
    );
    tokio::pin!(shutdown);
    let ended = loop {
        tokio::select! {
            _ = &mut shutdown => break Ok(()),
            done = tasks.join_next() => match done {
                None => break Ok(()),
                Some(Ok((_, Ok(())))) => {}
                Some(Ok((name, Err(e)))) => break Err(e.context(format!("simulated agent {name}"))),
                Some(Err(e)) => break Err(anyhow::anyhow!("a simulated agent's task failed: {e}")),
            },
        }
    };
    let _ = stop.send(true);
    while tasks.join_next().await.is_some() {}
    tracing::info!("simulated agents stopped");
    ended
}
