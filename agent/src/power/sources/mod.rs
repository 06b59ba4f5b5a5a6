//! The power sources, one file (or folder, with its tests and fixtures) each, behind the one
//! [`PowerSource`] trait, and [`ALL`], the one list of them: probing reads it, and through the
//! probe so do Describe's list of sources, the `gpufleet-agent power` report and the sampler.
//!
//! # Layout
//! - [`hwmon`]: amdgpu hwmon under a configurable sysfs root.
//! - [`nvml`]: NVIDIA through NVML, loaded at run time.
//! - [`rapl`]: Intel/AMD RAPL powercap energy counters.
//! - [`smi`]: `rocm-smi --showpower --json` and `amd-smi metric --power --json`.
//! - [`ipmi`]: `ipmitool dcmi power reading` (whole node).
//! - [`sysfs`]: reading sysfs files and numbered directories (shared by hwmon and RAPL).
//! - [`command`]: running a tool with a timeout (shared by smi and ipmi).
//!
//! Each source file declares its `NAME` and a [`SourceKind`] (`KIND`) that probes it from the
//! [`PowerConfig`]; the kinds' order here is the probe order, which is also the order of the
//! sampler's channels and of Describe's list.

pub mod command;
pub mod hwmon;
pub mod ipmi;
pub mod nvml;
pub mod rapl;
pub mod smi;
pub mod sysfs;

use super::{PowerConfig, PowerSource, SourceKind, Unavailable};

/// Every kind of source, in probe order.
pub const ALL: &[SourceKind] = &[
    hwmon::KIND,
    nvml::KIND,
    rapl::KIND,
    smi::ROCM_SMI_KIND,
    smi::AMD_SMI_KIND,
    ipmi::KIND,
];

/// What probing found.
#[derive(Default)]
pub struct Probe {
    pub sources: Vec<Box<dyn PowerSource>>,
    pub unavailable: Vec<Unavailable>,
}

/// Probes every kind of [`ALL`] that `config` does not turn off. Never fails: a source that
/// cannot be used is listed in [`Probe::unavailable`] with the reason. Blocks on tool calls.
pub fn probe(config: &PowerConfig) -> Probe {
    let mut p = Probe::default();
    for kind in ALL {
        match (kind.probe)(config) {
            None => {}
            Some(Ok(source)) => p.sources.push(source),
            Some(Err(reason)) => p.unavailable.push(Unavailable {
                name: kind.name,
                reason,
            }),
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probing_nothing_lists_every_source_with_a_reason() {
        let p = probe(&PowerConfig::none());
        assert!(p.sources.is_empty());
        let names: Vec<_> = p.unavailable.iter().map(|u| u.name).collect();
        assert!(names.contains(&hwmon::NAME) && names.contains(&rapl::NAME));
        assert!(p.unavailable.iter().all(|u| !u.reason.is_empty()));
    }

    #[test]
    fn every_kind_is_listed_once_under_its_own_name() {
        let names: Vec<_> = ALL.iter().map(|k| k.name).collect();
        assert_eq!(
            names,
            [
                hwmon::NAME,
                nvml::NAME,
                rapl::NAME,
                smi::ROCM_SMI,
                smi::AMD_SMI,
                ipmi::NAME
            ]
        );
    }
}
