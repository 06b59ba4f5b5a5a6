//! Power and energy: every sensor the host has, behind one small trait.
//!
//! Sensors differ per GPU, per driver and per kernel version: some give an
//! average over a window (amdgpu `power1_average`, NVML's power usage on
//! Hopper), some an instantaneous value, some an energy counter that wraps
//! (RAPL), some only through a command line tool (`rocm-smi`, `amd-smi`,
//! `ipmitool`). Each module below turns one kind into [`Reading`]s that say
//! what they measure (the [`Scope`]) and for which device (the PCI bus id,
//! the join key with the backends' devices).
//!
//! # Layout
//! - [`hwmon`]: amdgpu hwmon under a configurable sysfs root.
//! - [`nvml`]: NVIDIA through NVML, loaded at run time.
//! - [`rapl`]: Intel/AMD RAPL powercap energy counters.
//! - [`smi`]: `rocm-smi --showpower --json` and `amd-smi metric --power --json`.
//! - [`ipmi`]: `ipmitool dcmi power reading` (whole node).
//! - [`command`]: running a tool with a timeout (shared by smi and ipmi).
//! - [`sampler`]: the thread that polls every source at a fixed rate into a
//!   ring buffer and a broadcast channel, and learns each sensor's real
//!   update period.
//! - [`energy`]: pure integration of a trace over a kernel window.
//! - [`state`]: [`state::PowerState`], the agent's sampler, unavailable
//!   sources and per-channel idle memo.
//! - [`run_energy`]: a run's energy accounting: the channel and kernel
//!   window chosen at plan time, the idle baseline, the figures.
//! - [`wire`]: samples in their protobuf form.
//! - [`report`]: `gpufleet-agent power`, sampling without serving.
//!
//! # Lifecycle
//! At start the agent [`probe`]s every source with a [`PowerConfig`] into a
//! [`state::PowerState`]; sources that answer become channels of the
//! [`sampler::Sampler`], the others are listed in Describe as unavailable
//! with their reason. A run's plan picks its device's channel
//! ([`run_energy::plan_power`]); when the worker ends the run core waits for
//! a sample past the window, cuts the trace to the worker's kernel window
//! and calls [`run_energy::energy`] (idle baseline, [`energy::integrate`],
//! per-iteration and per-unit figures).

pub mod command;
pub mod energy;
pub mod hwmon;
pub mod ipmi;
pub mod nvml;
pub mod rapl;
pub mod report;
pub mod run_energy;
pub mod sampler;
pub mod smi;
pub mod state;
pub mod wire;

use std::path::PathBuf;
use std::time::Duration;

/// What a sensor's watts cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// The GPU chip only (amdgpu on discrete cards).
    Asic,
    /// A whole APU socket, CPU cores included.
    Socket,
    /// The whole board (NVML power usage: GPU, memory, VRM, fans).
    Board,
    /// A processor package (RAPL `package-N`, MI300X's package power).
    Package,
    /// The whole machine (ipmitool DCMI).
    Node,
}

impl Scope {
    /// The wire name: `asic`, `socket`, `board`, `package`, `node`.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Asic => "asic",
            Scope::Socket => "socket",
            Scope::Board => "board",
            Scope::Package => "package",
            Scope::Node => "node",
        }
    }
}

/// One read of one channel. Every figure is optional: a sensor that is
/// missing, unreadable or reports garbage leaves its field `None`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reading {
    /// Which channel of the source (index into [`PowerSource::channels`]).
    pub channel: usize,
    pub watts: Option<f64>,
    /// Energy counter in joules, monotonic since the source was probed
    /// (wraparound already unfolded by the source).
    pub energy_j: Option<f64>,
    pub temperature_c: Option<f64>,
    pub sclk_mhz: Option<u32>,
    pub mclk_mhz: Option<u32>,
    pub utilization_pct: Option<f64>,
}

/// One channel of a source: a device (or the node, or a CPU package) it
/// reports on.
#[derive(Debug, Clone, PartialEq)]
pub struct Channel {
    /// `0000:03:00.0` (lower case, 4-digit domain); empty for host-level
    /// channels (RAPL packages, the node).
    pub pci_bus_id: String,
    pub scope: Scope,
    /// Human detail: the sysfs path, the tool's card index, `package-0`.
    pub label: String,
    /// True when [`Reading::energy_j`] is a hardware counter.
    pub energy_counter: bool,
    /// Configured power cap in watts, where the sensor reports one.
    pub power_cap_w: Option<f64>,
    /// The update period the vendor documents, used until the sampler has
    /// measured the real one.
    pub nominal_period: Duration,
}

/// Whether a failed poll is worth retrying.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PollError {
    /// Transient (a tool timed out, a file was briefly unreadable): the
    /// sampler keeps polling.
    #[error("{0}")]
    Retry(String),
    /// The source is gone (device removed, library unloaded): the sampler
    /// stops polling it and Describe shows the reason.
    #[error("{0}")]
    Fatal(String),
}

/// A power sensor source. Object safe; implementations never panic on bad
/// sensor data, they leave the field `None`.
pub trait PowerSource: Send {
    /// `amdgpu-hwmon`, `nvml`, `rapl`, `rocm-smi`, `amd-smi`, `ipmitool`.
    fn name(&self) -> &'static str;
    /// The channels found at probe time; fixed for the source's life.
    fn channels(&self) -> &[Channel];
    /// Reads every channel once. Readings for channels that could not be
    /// read are simply absent.
    ///
    /// # Errors
    /// [`PollError::Retry`] or [`PollError::Fatal`] for the whole source.
    fn poll(&mut self) -> Result<Vec<Reading>, PollError>;
    /// True for sources that start a process per poll (`rocm-smi`,
    /// `ipmitool`): the sampler gives them their own thread and interval so
    /// they never slow the fast sources.
    fn slow(&self) -> bool {
        false
    }
    /// Asks that the next poll read the energy counter, for sources that read
    /// it less often than the watts because it is costly (NVML). A run asks
    /// at its start and end so its window is bracketed by fresh readings.
    fn want_counter(&mut self) {}
}

/// A source that could not be used, and why (shown in Describe).
#[derive(Debug, Clone, PartialEq)]
pub struct Unavailable {
    pub name: &'static str,
    pub reason: String,
}

/// Where to look for sensors.
#[derive(Debug, Clone, PartialEq)]
pub struct PowerConfig {
    /// Sysfs root for amdgpu hwmon and RAPL (`/` normally; tests use
    /// fixture trees).
    pub sysfs_root: PathBuf,
    /// Fast-source sampling rate in Hz (default 20, at most 1000).
    pub rate_hz: f64,
    /// `rocm-smi` command; `None` disables it.
    pub rocm_smi: Option<PathBuf>,
    /// `amd-smi` command; `None` disables it.
    pub amd_smi: Option<PathBuf>,
    /// `ipmitool` command; `None` disables it.
    pub ipmitool: Option<PathBuf>,
    /// Deadline for one tool call.
    pub command_timeout: Duration,
    /// Interval between tool calls (slow sources).
    pub command_interval: Duration,
    /// Try NVML.
    pub nvml: bool,
}

impl Default for PowerConfig {
    fn default() -> Self {
        PowerConfig {
            sysfs_root: PathBuf::from("/"),
            rate_hz: 20.0,
            rocm_smi: Some(PathBuf::from("rocm-smi")),
            amd_smi: Some(PathBuf::from("amd-smi")),
            ipmitool: Some(PathBuf::from("ipmitool")),
            command_timeout: Duration::from_secs(5),
            command_interval: Duration::from_secs(1),
            nvml: true,
        }
    }
}

impl PowerConfig {
    /// No sources at all (sysfs root that does not exist, no tools, no NVML).
    pub fn none() -> Self {
        PowerConfig {
            sysfs_root: PathBuf::from("/nonexistent-gpufleet-sysfs"),
            rocm_smi: None,
            amd_smi: None,
            ipmitool: None,
            nvml: false,
            ..PowerConfig::default()
        }
    }
}

/// What probing found.
#[derive(Default)]
pub struct Probe {
    pub sources: Vec<Box<dyn PowerSource>>,
    pub unavailable: Vec<Unavailable>,
}

/// Probes every source kind. Never fails: a source that cannot be used is
/// listed in [`Probe::unavailable`] with the reason.
pub fn probe(config: &PowerConfig) -> Probe {
    let mut p = Probe::default();
    let mut add = |name: &'static str, r: Result<Box<dyn PowerSource>, String>| match r {
        Ok(s) => p.sources.push(s),
        Err(reason) => p.unavailable.push(Unavailable { name, reason }),
    };
    add(hwmon::NAME, hwmon::probe(&config.sysfs_root));
    if config.nvml {
        add(nvml::NAME, nvml::probe());
    }
    add(rapl::NAME, rapl::probe(&config.sysfs_root));
    if let Some(cmd) = &config.rocm_smi {
        add(
            smi::ROCM_SMI,
            smi::probe_rocm_smi(cmd, config.command_timeout),
        );
    }
    if let Some(cmd) = &config.amd_smi {
        add(
            smi::AMD_SMI,
            smi::probe_amd_smi(cmd, config.command_timeout),
        );
    }
    if let Some(cmd) = &config.ipmitool {
        add(ipmi::NAME, ipmi::probe(cmd, config.command_timeout));
    }
    p
}

/// Normalises a PCI bus id to `dddd:bb:dd.f` in lower case: NVML's
/// `00000000:06:00.0` and `rocm-smi`'s `0000:03:00.0` both become
/// `0000:06:00.0`. Returns `None` for anything that is not a PCI address.
pub fn normalize_pci(id: &str) -> Option<String> {
    let id = id.trim().to_ascii_lowercase();
    let (domain, rest) = match id.matches(':').count() {
        2 => {
            let (d, r) = id.split_once(':')?;
            (d.to_string(), r.to_string())
        }
        1 => ("0".to_string(), id.clone()),
        _ => return None,
    };
    let (bus, rest) = rest.split_once(':')?;
    let (dev, func) = rest.split_once('.')?;
    let domain = u32::from_str_radix(&domain, 16).ok()?;
    let bus = u8::from_str_radix(bus, 16).ok()?;
    let dev = u8::from_str_radix(dev, 16).ok()?;
    let func = u8::from_str_radix(func, 16).ok()?;
    if domain > 0xffff || dev > 0x1f || func > 7 {
        return None;
    }
    Some(format!("{domain:04x}:{bus:02x}:{dev:02x}.{func:x}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_ids_normalise_from_every_tool() {
        assert_eq!(
            normalize_pci("00000000:06:00.0").as_deref(),
            Some("0000:06:00.0")
        );
        assert_eq!(
            normalize_pci("0000:C3:00.0").as_deref(),
            Some("0000:c3:00.0")
        );
        assert_eq!(normalize_pci("03:00.0").as_deref(), Some("0000:03:00.0"));
        assert_eq!(normalize_pci("card0"), None);
        assert_eq!(normalize_pci("0000:03:00"), None);
        assert_eq!(normalize_pci("0000:03:40.0"), None);
    }

    #[test]
    fn probing_nothing_lists_every_source_with_a_reason() {
        let p = probe(&PowerConfig::none());
        assert!(p.sources.is_empty());
        let names: Vec<_> = p.unavailable.iter().map(|u| u.name).collect();
        assert!(names.contains(&hwmon::NAME) && names.contains(&rapl::NAME));
        assert!(p.unavailable.iter().all(|u| !u.reason.is_empty()));
    }
}
