//! Power samples in their wire form, shared by a run's trace and StreamPower. The figures and
//! the rule for those not reported are [`gpufleet_proto::power::Reading`]'s.

use super::sampler::{Sample, Sampler};
use gpufleet_proto::v1 as pb;

/// One sample in its wire form.
pub fn sample_pb(sampler: &Sampler, s: &Sample) -> pb::PowerSample {
    let c = &sampler.channels()[s.channel];
    let mut wire = pb::PowerSample {
        source: c.source.to_string(),
        scope: c.channel.scope.name().to_string(),
        pci_bus_id: c.channel.pci_bus_id.clone(),
        monotonic_ns: s.monotonic_ns,
        wall_unix_s: s.wall_unix_s,
        label: c.channel.label.clone(),
        ..Default::default()
    };
    s.reading.write_to(&mut wire);
    wire
}
