//! Power on the wire: Describe's power-source list, and the [`Subscription`] of a power request
//! (StreamPower, or the coordinator's subscription over a dial-in link).

use crate::error::AgentError;
use crate::host::pci::normalize_pci;
use crate::power::Unavailable;
use crate::power::sampler::Sample;
use crate::run::AgentCore;
use gpufleet_kernels::quote;
use gpufleet_proto::power::{Pace, check_rate_hz};
use gpufleet_proto::v1 as pb;

/// Describe's list: one entry per channel, then the unavailable sources.
pub fn describe(core: &AgentCore) -> Vec<pb::PowerSourceInfo> {
    let sampler = &core.power.sampler;
    let mut out: Vec<pb::PowerSourceInfo> = sampler
        .channels()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let st = sampler.status(i);
            let device_ids = core
                .inventory
                .devices()
                .filter(|(_, d)| {
                    if c.channel.pci_bus_id.is_empty() {
                        d.backend == "cpu" && sampler.channel_for("", true) == Some(i)
                    } else {
                        normalize_pci(&d.pci_bus_id).as_deref() == Some(&c.channel.pci_bus_id)
                    }
                })
                .map(|(_, d)| d.id.clone())
                .collect();
            pb::PowerSourceInfo {
                name: c.source.to_string(),
                available: st.stopped.is_none(),
                reason: st.stopped.or(st.last_error).unwrap_or_default(),
                scope: c.channel.scope.name().to_string(),
                pci_bus_id: c.channel.pci_bus_id.clone(),
                label: c.channel.label.clone(),
                energy_counter: c.channel.energy_counter,
                poll_hz: if c.slow {
                    1.0 / core.config.power.command_interval.as_secs_f64().max(1e-3)
                } else {
                    sampler.rate_hz()
                },
                measured_period_s: st.measured_period.map_or(0.0, |p| p.as_secs_f64()),
                nominal_period_s: c.channel.nominal_period.as_secs_f64(),
                power_cap_w: c.channel.power_cap_w.unwrap_or(0.0),
                device_ids,
            }
        })
        .collect();
    out.extend(
        core.power
            .unavailable
            .iter()
            .map(|u: &Unavailable| pb::PowerSourceInfo {
                name: u.name.to_string(),
                available: false,
                reason: u.reason.clone(),
                ..Default::default()
            }),
    );
    out
}

/// StreamPower's filter: the channels a request selects.
///
/// # Errors
/// An unknown device or source, or a filter that matches no channel.
pub fn select_channels(core: &AgentCore, req: &pb::PowerRequest) -> Result<Vec<usize>, AgentError> {
    let sampler = &core.power.sampler;
    let pci = if req.device_id.is_empty() {
        None
    } else if let Some((_, d)) = core.inventory.device(&req.device_id) {
        if d.pci_bus_id.is_empty() {
            Some(String::new())
        } else {
            normalize_pci(&d.pci_bus_id)
        }
    } else if let Some(p) = normalize_pci(&req.device_id) {
        Some(p)
    } else {
        return Err(AgentError::InvalidArgument {
            field: "device_id",
            message: format!(
                "{} is neither a device of this agent nor a PCI bus id",
                quote(&req.device_id)
            ),
        });
    };
    let chosen: Vec<usize> = sampler
        .channels()
        .iter()
        .enumerate()
        .filter(|(_, c)| req.source.is_empty() || c.source == req.source)
        .filter(|(_, c)| pci.as_ref().is_none_or(|p| &c.channel.pci_bus_id == p))
        .map(|(i, _)| i)
        .collect();
    if chosen.is_empty() {
        let have: Vec<String> = sampler
            .channels()
            .iter()
            .map(|c| format!("{} {}", c.source, c.channel.pci_bus_id))
            .collect();
        return Err(AgentError::InvalidArgument {
            field: if req.source.is_empty() {
                "device_id"
            } else {
                "source"
            },
            message: format!(
                "no power channel matches {} (channels: {})",
                [("source", &req.source), ("device", &req.device_id)]
                    .iter()
                    .filter(|(_, v)| !v.is_empty())
                    .map(|(k, v)| format!("{k} {}", quote(v)))
                    .collect::<Vec<_>>()
                    .join(" and "),
                if have.is_empty() {
                    "none".into()
                } else {
                    have.join(", ")
                }
            ),
        });
    }
    Ok(chosen)
}

/// What one power request forwards: the samples of the channels it selects, paced to its
/// `rate_hz` per channel.
pub struct Subscription {
    chosen: Vec<usize>,
    pace: Pace<usize>,
}

impl Subscription {
    /// # Errors
    /// [`AgentError::NoPowerSources`] on a host without power channels; an unknown device or
    /// source, a filter that matches no channel, or a bad `rate_hz`.
    pub fn new(core: &AgentCore, req: &pb::PowerRequest) -> Result<Subscription, AgentError> {
        if core.power.sampler.channels().is_empty() {
            return Err(AgentError::NoPowerSources);
        }
        let rate = check_rate_hz(req.rate_hz).map_err(|message| AgentError::InvalidArgument {
            field: "rate_hz",
            message,
        })?;
        Ok(Subscription {
            chosen: select_channels(core, req)?,
            pace: Pace::new(rate),
        })
    }

    /// Whether `s` goes out.
    pub fn pass(&mut self, s: &Sample) -> bool {
        self.chosen.contains(&s.channel) && self.pace.keep(s.channel, s.monotonic_ns)
    }
}
