//! Power samples in their wire form, shared by a run's trace and StreamPower.

use super::sampler::{Sample, Sampler};
use gpufleet_proto::v1 as pb;

/// One sample in its wire form.
pub fn sample_pb(sampler: &Sampler, s: &Sample) -> pb::PowerSample {
    let c = &sampler.channels()[s.channel];
    let r = &s.reading;
    pb::PowerSample {
        source: c.source.to_string(),
        scope: c.channel.scope.name().to_string(),
        pci_bus_id: c.channel.pci_bus_id.clone(),
        monotonic_ns: s.monotonic_ns,
        wall_unix_s: s.wall_unix_s,
        watts: r.watts.unwrap_or(0.0),
        energy_j: r.energy_j.unwrap_or(0.0),
        temperature_c: r.temperature_c.unwrap_or(0.0),
        sclk_mhz: r.sclk_mhz.unwrap_or(0),
        mclk_mhz: r.mclk_mhz.unwrap_or(0),
        utilization_pct: r.utilization_pct.unwrap_or(0.0),
        label: c.channel.label.clone(),
        has_watts: r.watts.is_some(),
        has_energy: r.energy_j.is_some(),
    }
}
