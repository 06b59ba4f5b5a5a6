//! The agent's live power state: the sampler over every source that
//! answered the probe, the sources that did not (with why), and per channel
//! the idle memo that a run's energy accounting reads and updates.

use super::run_energy::IdleMemo;
use super::sampler::{Sampler, SamplerConfig};
use super::sources;
use super::{PowerConfig, Unavailable};
use crate::isolation::monotonic_ns;
use std::collections::HashMap;
use std::sync::Mutex;

/// The power sampler and the sources that could not be used.
pub struct PowerState {
    pub sampler: Sampler,
    pub unavailable: Vec<Unavailable>,
    /// Per power channel: until when a run kept the device busy, and the last
    /// idle baseline measured while it was really idle.
    pub idle: Mutex<HashMap<usize, IdleMemo>>,
}

impl PowerState {
    /// Probes every source (tool calls included, so off the async threads)
    /// and starts the sampler.
    pub async fn start(config: &PowerConfig) -> PowerState {
        let cfg = config.clone();
        let probe = tokio::task::spawn_blocking(move || sources::probe(&cfg))
            .await
            .unwrap_or_default();
        for u in &probe.unavailable {
            tracing::debug!(source = u.name, reason = %u.reason, "power source unavailable");
        }
        PowerState {
            idle: Default::default(),
            sampler: Sampler::start(
                probe.sources,
                SamplerConfig {
                    rate_hz: config.rate_hz,
                    slow_interval: config.command_interval,
                    ..SamplerConfig::default()
                },
            ),
            unavailable: probe.unavailable,
        }
    }

    /// Notes that a run on `channel` just ended.
    pub fn mark_busy(&self, channel: usize) {
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(channel)
            .or_default()
            .busy_until_ns = monotonic_ns();
    }
}
