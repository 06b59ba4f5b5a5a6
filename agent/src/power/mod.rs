//! Power and energy: every sensor the host has, behind one small trait.
//!
//! Sensors differ per GPU, per driver and per kernel version: some give an
//! average over a window (amdgpu `power1_average`, NVML's power usage on
//! Hopper), some an instantaneous value, some an energy counter that wraps
//! (RAPL), some only through a command line tool (`rocm-smi`, `amd-smi`,
//! `ipmitool`). Each source in [`sources`] turns one kind into [`Reading`]s
//! of its [`Channel`]s, which say what they measure (the [`Scope`]) and for
//! which device (the PCI bus id, the join key with the backends' devices).
//!
//! # Layout
//! - this file: the [`PowerSource`] trait every source implements, what it
//!   reports ([`Channel`], [`ChannelReading`], [`PollError`]), how a kind of
//!   source is registered ([`SourceKind`]) and where to look ([`PowerConfig`]).
//! - [`sources`]: the sources, one file or folder each (amdgpu hwmon, NVML,
//!   RAPL, rocm-smi/amd-smi, ipmitool, and the tool runner the command line
//!   ones share), and [`sources::ALL`], the one list of them that probing
//!   reads.
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
//! A reading's figures are [`gpufleet_proto::power::Reading`], the one type
//! the wire and the coordinator's store use for a power sample too.
//!
//! # Lifecycle
//! At start the agent [`sources::probe`]s every kind in [`sources::ALL`] with
//! a [`PowerConfig`] into a [`state::PowerState`]; sources that answer become
//! channels of the [`sampler::Sampler`], the others are listed in Describe as
//! unavailable with their reason. A run's plan picks its device's channel
//! ([`run_energy::plan_power`]); when the worker ends the run core waits for
//! a sample past the window, cuts the trace to the worker's kernel window
//! and calls [`run_energy::energy`] (idle baseline, [`energy::integrate`],
//! per-iteration and per-unit figures).

pub mod energy;
pub mod report;
pub mod run_energy;
pub mod sampler;
pub mod sources;
pub mod state;
pub mod wire;

pub use gpufleet_proto::power::Reading;
use std::path::{Path, PathBuf};
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

/// One read of one channel of a source. Every figure of the [`Reading`] is
/// optional: a sensor that is missing, unreadable or reports garbage leaves
/// its field `None`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChannelReading {
    /// Which channel of the source (index into [`PowerSource::channels`]).
    pub channel: usize,
    pub reading: Reading,
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
    /// True when the readings' `energy_j` is a hardware counter.
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
    fn poll(&mut self) -> Result<Vec<ChannelReading>, PollError>;
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

/// A boxed source as probing returns it, or why it cannot be used (shown in
/// Describe).
pub type Probed = Result<Box<dyn PowerSource>, String>;

/// A source found by a probe, boxed as [`Probed`].
pub fn boxed<S: PowerSource + 'static>(source: Result<S, String>) -> Probed {
    source.map(|s| Box::new(s) as Box<dyn PowerSource>)
}

/// One kind of source in [`sources::ALL`]: its name and how it is probed.
/// Adding a source is a file in [`sources`] with one of these and an entry
/// in that list (and a [`PowerConfig`] field if it needs a setting).
#[derive(Debug, Clone, Copy)]
pub struct SourceKind {
    /// `amdgpu-hwmon`, `nvml`, `rapl`, `rocm-smi`, `amd-smi`, `ipmitool`.
    pub name: &'static str,
    /// Probes it with the agent's configuration: `None` when the
    /// configuration turns it off, else the source or why it cannot be used.
    /// May block (tool calls): probing runs off the async threads.
    pub probe: fn(&PowerConfig) -> Option<Probed>,
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

    /// Probes the command line tool `cmd` (one of this configuration's tool
    /// fields) with the configured deadline: `None` when the configuration
    /// turns the tool off. What the tool sources' [`SourceKind`]s share.
    pub fn probe_tool(
        &self,
        cmd: &Option<PathBuf>,
        probe: fn(&Path, Duration) -> Probed,
    ) -> Option<Probed> {
        cmd.as_deref().map(|cmd| probe(cmd, self.command_timeout))
    }
}
