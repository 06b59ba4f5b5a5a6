//! AMD's command line tools: `rocm-smi` and `amd-smi`, for hosts where the
//! ROCm tools are installed (and where they see more than hwmon does, e.g.
//! inside containers without the host's sysfs).
//!
//! Both print JSON whose shape changed between releases, so the parsers are
//! lenient and pure (text in, figures out) and tested on captured outputs:
//! - `rocm-smi --showpower --showbus --json`: an object keyed `card0`,
//!   `card1`… whose values are strings (numbers in some builds). The power
//!   key is `Average Graphics Package Power (W)` on discrete cards and
//!   `Current Socket Graphics Package Power (W)` on MI300 and APUs; `N/A`
//!   (or `N/A (Secondary die)` on MI250's second die) means no figure.
//! - `amd-smi metric --power --json`: a bare list (amd-smi < 26) or an
//!   object with a `gpu_data` list (amd-smi ≥ 26, ROCm 7), entries with a
//!   `gpu` index and a `power` object whose `socket_power` (older builds:
//!   `average_socket_power` / `current_socket_power`) is a number, a string,
//!   `N/A` or `{"value": …, "unit": "W"}`.
//! - `amd-smi list --json`: `gpu` index → `bdf` (PCI id), once at probe.
//!
//! Tools may print warnings ahead of the JSON; parsing starts at the first
//! line that opens a JSON value. Each poll starts a process (hundreds of ms
//! for the Python tools), so these sources are [`PowerSource::slow`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::command;
use crate::host::pci::normalize_pci;
use crate::power::{
    Channel, ChannelReading, PollError, PowerConfig, PowerSource, Probed, Reading, Scope,
    SourceKind,
};

/// The rocm-smi source's name in Describe and on the wire.
pub const ROCM_SMI: &str = "rocm-smi";
/// The amd-smi source's name in Describe and on the wire.
pub const AMD_SMI: &str = "amd-smi";

/// rocm-smi in [`super::ALL`]: probed unless the configuration turns it off.
pub const ROCM_SMI_KIND: SourceKind = SourceKind {
    name: ROCM_SMI,
    probe: |c: &PowerConfig| c.probe_tool(&c.rocm_smi, probe_rocm_smi),
};

/// amd-smi in [`super::ALL`]: probed unless the configuration turns it off.
pub const AMD_SMI_KIND: SourceKind = SourceKind {
    name: AMD_SMI,
    probe: |c: &PowerConfig| c.probe_tool(&c.amd_smi, probe_amd_smi),
};

/// Arguments of every `rocm-smi` call.
pub const ROCM_SMI_ARGS: &[&str] = &["--showpower", "--showbus", "--json"];
/// Arguments of every `amd-smi` power call.
pub const AMD_SMI_METRIC_ARGS: &[&str] = &["metric", "--power", "--json"];
/// Arguments of the `amd-smi` call that maps indices to PCI ids (at probe).
pub const AMD_SMI_LIST_ARGS: &[&str] = &["list", "--json"];

const AVERAGE_KEY: &str = "Average Graphics Package Power (W)";
const SOCKET_KEY: &str = "Current Socket Graphics Package Power (W)";
/// amd-smi's power keys, most specific first: `socket_power` is what current
/// releases print (the current value where the GPU has one, else the
/// average); older ones printed one of the other two.
const AMD_SMI_POWER_KEYS: &[&str] = &[
    "socket_power",
    "current_socket_power",
    "average_socket_power",
];

/// Both tools read the SMU's power figures, which the firmware refreshes
/// about once a second.
const NOMINAL_PERIOD: Duration = Duration::from_secs(1);
/// Figures beyond this are sensor garbage (0xffff sentinels), not physics.
const MAX_PLAUSIBLE_WATTS: f64 = 10_000.0;

/// Why a tool's output could not be understood.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParseError {
    /// No line of the output starts a JSON value that parses.
    #[error("{tool} printed no JSON ({detail})")]
    NoJson { tool: &'static str, detail: String },
    /// JSON, but not the shape the tool documents.
    #[error("{tool} JSON is not {expected}")]
    Shape {
        tool: &'static str,
        expected: &'static str,
    },
}

/// Which power key rocm-smi printed for a card.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RocmPowerKey {
    /// `Average Graphics Package Power (W)`: the ASIC's PPT average on
    /// discrete cards.
    Average,
    /// `Current Socket Graphics Package Power (W)`: MI300's package, or an
    /// APU's whole socket.
    CurrentSocket,
}

impl RocmPowerKey {
    /// What the figure covers. `Average…` is the GPU chip (discrete cards
    /// report it; on MI200 it is the ASIC too). `Current Socket…` is printed
    /// for MI300 (package power) and for APUs (the socket, CPU included);
    /// rocm-smi's output does not say which, and hwmon (which can tell by
    /// device id) is the better source on APUs, so it is taken as
    /// [`Scope::Package`].
    pub fn scope(self) -> Scope {
        match self {
            RocmPowerKey::Average => Scope::Asic,
            RocmPowerKey::CurrentSocket => Scope::Package,
        }
    }
}

/// One card of `rocm-smi --showpower --showbus --json`.
#[derive(Debug, Clone, PartialEq)]
pub struct RocmSmiCard {
    /// N of `cardN`.
    pub card: u32,
    /// Normalised `PCI Bus`, when present and valid.
    pub pci_bus_id: Option<String>,
    /// The power key present (its value may still be `N/A`).
    pub key: Option<RocmPowerKey>,
    pub watts: Option<f64>,
}

/// One GPU of `amd-smi metric --power --json`.
#[derive(Debug, Clone, PartialEq)]
pub struct AmdSmiPower {
    /// amd-smi's GPU index.
    pub gpu: u32,
    pub watts: Option<f64>,
}

/// One GPU of `amd-smi list --json`.
#[derive(Debug, Clone, PartialEq)]
pub struct AmdSmiGpu {
    pub gpu: u32,
    /// Normalised `bdf`, when present and valid.
    pub pci_bus_id: Option<String>,
}

/// Parses `rocm-smi --showpower --showbus --json`; cards sorted by number.
/// Keys other than `cardN` (e.g. `system`) are ignored.
///
/// # Errors
/// [`ParseError`] when there is no JSON object in the output.
pub fn parse_rocm_smi(text: &str) -> Result<Vec<RocmSmiCard>, ParseError> {
    let value = first_json_value(ROCM_SMI, text)?;
    let Value::Object(map) = value else {
        return Err(ParseError::Shape {
            tool: ROCM_SMI,
            expected: "an object keyed by card",
        });
    };
    let mut cards: Vec<RocmSmiCard> = map
        .iter()
        .filter_map(|(k, v)| {
            let card = k.strip_prefix("card")?.parse().ok()?;
            let fields = v.as_object()?;
            let (key, watts) = if let Some(v) = fields.get(SOCKET_KEY) {
                (Some(RocmPowerKey::CurrentSocket), watts_of(v))
            } else if let Some(v) = fields.get(AVERAGE_KEY) {
                (Some(RocmPowerKey::Average), watts_of(v))
            } else {
                (None, None)
            };
            let pci_bus_id = fields
                .get("PCI Bus")
                .and_then(Value::as_str)
                .and_then(normalize_pci);
            Some(RocmSmiCard {
                card,
                pci_bus_id,
                key,
                watts,
            })
        })
        .collect();
    cards.sort_by_key(|c| c.card);
    Ok(cards)
}

/// Parses `amd-smi metric --power --json` (bare list or `gpu_data`);
/// entries without a `gpu` index or a `power` object are skipped.
///
/// # Errors
/// [`ParseError`] when there is no JSON list of GPUs in the output.
pub fn parse_amd_smi_power(text: &str) -> Result<Vec<AmdSmiPower>, ParseError> {
    let value = first_json_value(AMD_SMI, text)?;
    let mut gpus: Vec<AmdSmiPower> = gpu_entries(&value)?
        .iter()
        .filter_map(|entry| {
            let gpu = index_of(entry.get("gpu")?)?;
            let power = entry.get("power")?.as_object()?;
            let watts = AMD_SMI_POWER_KEYS
                .iter()
                .find_map(|k| power.get(*k).and_then(watts_of));
            Some(AmdSmiPower { gpu, watts })
        })
        .collect();
    gpus.sort_by_key(|g| g.gpu);
    Ok(gpus)
}

/// Parses `amd-smi list --json` (bare list or `gpu_data`).
///
/// # Errors
/// [`ParseError`] when there is no JSON list of GPUs in the output.
pub fn parse_amd_smi_list(text: &str) -> Result<Vec<AmdSmiGpu>, ParseError> {
    let value = first_json_value(AMD_SMI, text)?;
    Ok(gpu_entries(&value)?
        .iter()
        .filter_map(|entry| {
            Some(AmdSmiGpu {
                gpu: index_of(entry.get("gpu")?)?,
                pci_bus_id: entry
                    .get("bdf")
                    .and_then(Value::as_str)
                    .and_then(normalize_pci),
            })
        })
        .collect())
}

/// Watts from any of the forms the tools print: `222.0`, `"222.0"`,
/// `"128 W"`, `{"value": 142, "unit": "W"}` (or `mW`). `N/A`, `null`,
/// unknown units, negative or implausible values → `None`.
pub fn watts_of(v: &Value) -> Option<f64> {
    let w = match v {
        Value::Number(n) => n.as_f64()?,
        Value::String(s) => parse_watts_str(s)?,
        Value::Object(o) => {
            let scale = match o.get("unit").and_then(Value::as_str).map(str::trim) {
                None | Some("W") => 1.0,
                Some("mW") => 1e-3,
                Some(_) => return None,
            };
            let value = match o.get("value")? {
                Value::Number(n) => n.as_f64()?,
                Value::String(s) => parse_watts_str(s)?,
                _ => return None,
            };
            value * scale
        }
        _ => return None,
    };
    (w.is_finite() && (0.0..=MAX_PLAUSIBLE_WATTS).contains(&w)).then_some(w)
}

/// `"222.0"`, `"128 W"`, `"139500 mW"`; anything else (`N/A`, `N/A
/// (Secondary die)`) → `None`.
fn parse_watts_str(s: &str) -> Option<f64> {
    let s = s.trim();
    if let Some(mw) = s.strip_suffix("mW") {
        return mw.trim().parse::<f64>().ok().map(|v| v * 1e-3);
    }
    s.strip_suffix('W').unwrap_or(s).trim().parse().ok()
}

/// `0` or `"0"`.
fn index_of(v: &Value) -> Option<u32> {
    match v {
        Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// The list of GPU entries: the value itself, or its `gpu_data`.
fn gpu_entries(value: &Value) -> Result<&Vec<Value>, ParseError> {
    let list = match value {
        Value::Object(o) => o.get("gpu_data"),
        other => Some(other),
    };
    match list {
        Some(Value::Array(list)) => Ok(list),
        _ => Err(ParseError::Shape {
            tool: AMD_SMI,
            expected: "a list of GPUs or an object with a gpu_data list",
        }),
    }
}

/// The first JSON value that starts at the beginning of a line (after
/// whitespace), skipping warnings the tools print first. Text after the
/// value is ignored.
fn first_json_value(tool: &'static str, text: &str) -> Result<Value, ParseError> {
    let mut last_error = String::from("empty output");
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if trimmed.starts_with('{') || trimmed.starts_with('[') {
            let start = offset + (line.len() - trimmed.len());
            let mut stream =
                serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
            match stream.next() {
                Some(Ok(v)) => return Ok(v),
                Some(Err(e)) => last_error = e.to_string(),
                None => {}
            }
        } else if !trimmed.is_empty() {
            last_error = format!("first line: {:?}", truncate(trimmed.trim_end(), 80));
        }
        offset += line.len();
    }
    Err(ParseError::NoJson {
        tool,
        detail: last_error,
    })
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Which tool a [`SmiSource`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    RocmSmi,
    AmdSmi,
}

/// A source that runs `rocm-smi` or `amd-smi` once per poll.
#[derive(Debug)]
pub struct SmiSource {
    tool: Tool,
    cmd: PathBuf,
    timeout: Duration,
    /// The tool's index (card N or amd-smi gpu N) of each channel.
    indices: Vec<u32>,
    channels: Vec<Channel>,
}

/// Probes `rocm-smi`: one run, one channel per card that prints a power
/// key.
///
/// # Errors
/// The reason shown in Describe: the tool is missing, hangs, fails, prints
/// no JSON, or reports no card with a power key.
pub fn probe_rocm_smi(cmd: &Path, timeout: Duration) -> Probed {
    let out = command::run(cmd, ROCM_SMI_ARGS, timeout).map_err(|e| e.to_string())?;
    let cards = parse_rocm_smi(&out).map_err(|e| e.to_string())?;
    let found = cards
        .into_iter()
        .filter_map(|c| {
            let label = format!("card{}", c.card);
            Some((c.card, tool_channel(c.pci_bus_id, c.key?.scope(), label)))
        })
        .collect();
    SmiSource::boxed(Tool::RocmSmi, cmd, timeout, found)
}

/// Probes `amd-smi`: `list` for the PCI ids, then one `metric --power`; one
/// channel per GPU with a `power` object. amd-smi calls every figure socket
/// power; it is the package on MI300 (and the ASIC's PPT on Radeon cards,
/// which we would need another call to tell apart), so the scope is
/// [`Scope::Package`].
///
/// # Errors
/// The reason shown in Describe: the tool is missing, hangs, fails, prints
/// no JSON, or reports no GPU with power metrics.
pub fn probe_amd_smi(cmd: &Path, timeout: Duration) -> Probed {
    let list = command::run(cmd, AMD_SMI_LIST_ARGS, timeout)
        .map_err(|e| e.to_string())
        .and_then(|out| parse_amd_smi_list(&out).map_err(|e| e.to_string()))
        .map_err(|e| format!("amd-smi list: {e}"))?;
    let out = command::run(cmd, AMD_SMI_METRIC_ARGS, timeout).map_err(|e| e.to_string())?;
    let gpus = parse_amd_smi_power(&out).map_err(|e| e.to_string())?;
    let found = gpus
        .into_iter()
        .map(|g| {
            let pci = list.iter().find(|l| l.gpu == g.gpu);
            let pci = pci.and_then(|l| l.pci_bus_id.clone());
            let label = format!("gpu {}", g.gpu);
            (g.gpu, tool_channel(pci, Scope::Package, label))
        })
        .collect();
    SmiSource::boxed(Tool::AmdSmi, cmd, timeout, found)
}

/// A channel of either tool: no energy counter, no cap, 1 s nominal.
fn tool_channel(pci_bus_id: Option<String>, scope: Scope, label: String) -> Channel {
    Channel {
        pci_bus_id: pci_bus_id.unwrap_or_default(),
        scope,
        label,
        energy_counter: false,
        power_cap_w: None,
        nominal_period: NOMINAL_PERIOD,
    }
}

impl SmiSource {
    /// The source over the (tool index, channel) pairs found at probe.
    fn boxed(tool: Tool, cmd: &Path, timeout: Duration, found: Vec<(u32, Channel)>) -> Probed {
        if found.is_empty() {
            return Err(format!(
                "{} reported no GPU with a power figure",
                cmd.display()
            ));
        }
        let (indices, channels) = found.into_iter().unzip();
        Ok(Box::new(SmiSource {
            tool,
            cmd: cmd.to_path_buf(),
            timeout,
            indices,
            channels,
        }))
    }

    /// Runs the tool once: (index, watts) per GPU it printed.
    fn read(&self) -> Result<Vec<(u32, Option<f64>)>, String> {
        let args = match self.tool {
            Tool::RocmSmi => ROCM_SMI_ARGS,
            Tool::AmdSmi => AMD_SMI_METRIC_ARGS,
        };
        let out = command::run(&self.cmd, args, self.timeout).map_err(|e| e.to_string())?;
        let figures = match self.tool {
            Tool::RocmSmi => parse_rocm_smi(&out)
                .map(|cards| cards.into_iter().map(|c| (c.card, c.watts)).collect()),
            Tool::AmdSmi => parse_amd_smi_power(&out)
                .map(|gpus| gpus.into_iter().map(|g| (g.gpu, g.watts)).collect()),
        };
        figures.map_err(|e| e.to_string())
    }
}

impl PowerSource for SmiSource {
    fn name(&self) -> &'static str {
        match self.tool {
            Tool::RocmSmi => ROCM_SMI,
            Tool::AmdSmi => AMD_SMI,
        }
    }

    fn channels(&self) -> &[Channel] {
        &self.channels
    }

    /// A tool that fails, hangs or prints garbage is [`PollError::Retry`]:
    /// a busy driver or a slow BMC recovers on its own.
    fn poll(&mut self) -> Result<Vec<ChannelReading>, PollError> {
        let figures = self.read().map_err(PollError::Retry)?;
        Ok(self
            .indices
            .iter()
            .enumerate()
            .filter_map(|(channel, index)| {
                let (_, watts) = figures.iter().find(|(i, _)| i == index)?;
                Some(ChannelReading {
                    channel,
                    reading: Reading {
                        watts: *watts,
                        ..Reading::default()
                    },
                })
            })
            .collect())
    }

    fn slow(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests;
