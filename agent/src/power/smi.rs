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
use super::{Channel, PollError, PowerSource, Reading, Scope, normalize_pci};

/// The rocm-smi source's name in Describe and on the wire.
pub const ROCM_SMI: &str = "rocm-smi";
/// The amd-smi source's name in Describe and on the wire.
pub const AMD_SMI: &str = "amd-smi";

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
pub fn probe_rocm_smi(cmd: &Path, timeout: Duration) -> Result<Box<dyn PowerSource>, String> {
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
pub fn probe_amd_smi(cmd: &Path, timeout: Duration) -> Result<Box<dyn PowerSource>, String> {
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
    fn boxed(
        tool: Tool,
        cmd: &Path,
        timeout: Duration,
        found: Vec<(u32, Channel)>,
    ) -> Result<Box<dyn PowerSource>, String> {
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
    fn poll(&mut self) -> Result<Vec<Reading>, PollError> {
        let figures = self.read().map_err(PollError::Retry)?;
        Ok(self
            .indices
            .iter()
            .enumerate()
            .filter_map(|(channel, index)| {
                let (_, watts) = figures.iter().find(|(i, _)| i == index)?;
                Some(Reading {
                    channel,
                    watts: *watts,
                    ..Reading::default()
                })
            })
            .collect())
    }

    fn slow(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::command::tests::fake_tool;
    use super::*;
    use serde_json::json;
    use std::fs;
    use std::time::Instant;

    // Where each fixture's shape comes from (values are illustrative):
    // - rocm_smi_discrete.json: the `{"card0": {"Average Graphics Package
    //   Power (W)": "222.0", …}}` shape users posted from `rocm-smi -P --json`
    //   (RainbowMiner/RainbowMiner#749) and from an RX 7900 XTX
    //   (henrygd/beszel#414); `PCI Bus` is the key `--showbus` adds, as read
    //   by public rocm-smi parsers.
    // - rocm_smi_mi300x.json: the `Current Socket Graphics Package Power (W)`
    //   key that MI300 and APUs print (henrygd/beszel#414, public exporters);
    //   watts from a public MI300X `rocm-smi` screen; card2's `N/A` added.
    // - rocm_smi_mi250.json: `N/A (Secondary die)` is what rocm-smi prints
    //   for MI250's second die (ROCm/rocm_smi_lib#160); card2's bare number
    //   is how newer builds print values; the warning line ahead of the JSON
    //   is modelled on the banners public parsers strip before parsing.
    // - amd_smi_list.json: `amd-smi list --json` entries (gpu, bdf, uuid,
    //   kfd_id, node_id, partition_id) as in public test fixtures; BDFs and
    //   UUIDs from an MI300X `amd-smi` help screen (ROCm/amdsmi#132).
    // - amd_smi_metric_power_list.json: the bare list with `{value, unit}`
    //   of amd-smi < 26; the all-`N/A` entry as in ROCm/rocm-systems#2720.
    // - amd_smi_metric_power_gpu_data.json: the `{"gpu_data": […]}` wrapper
    //   of amd-smi ≥ 26 (ROCm/rocm-systems#223); gpu 1's mW unit is
    //   synthesised to exercise unit conversion.
    // - amd_smi_metric_power_legacy.json: `average_socket_power` as a bare
    //   number (older amd-smi, key names of amdsmi_get_power_info); gpu 1's
    //   `"128 W"` string is synthesised to exercise the string form.
    const ROCM_DISCRETE: &str = include_str!("fixtures/rocm_smi_discrete.json");
    const ROCM_MI300X: &str = include_str!("fixtures/rocm_smi_mi300x.json");
    const ROCM_MI250: &str = include_str!("fixtures/rocm_smi_mi250.json");
    const AMD_LIST: &str = include_str!("fixtures/amd_smi_list.json");
    const AMD_POWER_LIST: &str = include_str!("fixtures/amd_smi_metric_power_list.json");
    const AMD_POWER_GPU_DATA: &str = include_str!("fixtures/amd_smi_metric_power_gpu_data.json");
    const AMD_POWER_LEGACY: &str = include_str!("fixtures/amd_smi_metric_power_legacy.json");

    fn card(card: u32, pci: &str, key: RocmPowerKey, watts: Option<f64>) -> RocmSmiCard {
        RocmSmiCard {
            card,
            pci_bus_id: Some(pci.to_string()),
            key: Some(key),
            watts,
        }
    }

    #[test]
    fn rocm_smi_discrete_average_power() {
        let cards = parse_rocm_smi(ROCM_DISCRETE).unwrap();
        assert_eq!(
            cards,
            [
                card(0, "0000:03:00.0", RocmPowerKey::Average, Some(222.0)),
                card(1, "0000:0c:00.0", RocmPowerKey::Average, Some(19.0)),
            ]
        );
    }

    #[test]
    fn rocm_smi_mi300x_socket_power_with_na() {
        let cards = parse_rocm_smi(ROCM_MI300X).unwrap();
        let got: Vec<_> = cards.iter().map(|c| (c.card, c.watts)).collect();
        let expected = [
            (0, Some(133.0)),
            (1, Some(131.0)),
            (2, None),
            (3, Some(137.0)),
        ];
        assert_eq!(got, expected);
        let socket = Some(RocmPowerKey::CurrentSocket);
        assert!(cards.iter().all(|c| c.key == socket));
        assert_eq!(cards[3].pci_bus_id.as_deref(), Some("0000:65:00.0"));
    }

    #[test]
    fn rocm_smi_mi250_secondary_die_and_leading_warning() {
        let cards = parse_rocm_smi(ROCM_MI250).unwrap();
        assert_eq!(
            cards,
            [
                card(0, "0000:29:00.0", RocmPowerKey::Average, Some(237.0)),
                card(1, "0000:2c:00.0", RocmPowerKey::Average, None),
                card(2, "0000:2f:00.0", RocmPowerKey::Average, Some(230.5)),
            ]
        );
    }

    #[test]
    fn rocm_smi_garbage_values_and_odd_keys() {
        let text = r#"{"system": {"Driver version": "6.8.0"},
            "card10": {"Average Graphics Package Power (W)": "-5", "PCI Bus": "bogus"},
            "card2": {"Average Graphics Package Power (W)": "abc"},
            "card3": {"Average Graphics Package Power (W)": "65535000"},
            "card4": {"GPU use (%)": "12"},
            "cardX": {"Average Graphics Package Power (W)": "10"},
            "card5": "not an object"}"#;
        let cards = parse_rocm_smi(text).unwrap();
        let got: Vec<_> = cards
            .iter()
            .map(|c| (c.card, c.key, c.watts, c.pci_bus_id.clone()))
            .collect();
        assert_eq!(
            got,
            [
                (2, Some(RocmPowerKey::Average), None, None),
                (3, Some(RocmPowerKey::Average), None, None),
                (4, None, None, None),
                (10, Some(RocmPowerKey::Average), None, None),
            ]
        );
    }

    #[test]
    fn rocm_smi_without_json_is_an_error() {
        let err = parse_rocm_smi("").unwrap_err();
        assert_eq!(err.to_string(), "rocm-smi printed no JSON (empty output)");
        let err = parse_rocm_smi("ERROR: GPU[0] : Unable to read power\n").unwrap_err();
        assert!(err.to_string().contains("Unable to read power"), "{err}");
        let err = parse_rocm_smi("{\"card0\": {\"Average").unwrap_err();
        assert!(matches!(err, ParseError::NoJson { .. }), "{err:?}");
        let err = parse_rocm_smi("[1, 2]").unwrap_err();
        assert_eq!(
            err.to_string(),
            "rocm-smi JSON is not an object keyed by card"
        );
    }

    #[test]
    fn amd_smi_list_maps_indices_to_pci() {
        let pairs = |text: &str| -> Vec<(u32, Option<String>)> {
            let gpus = parse_amd_smi_list(text).unwrap();
            gpus.into_iter().map(|g| (g.gpu, g.pci_bus_id)).collect()
        };
        let expected = [
            (0, Some("0000:05:00.0".into())),
            (1, Some("0000:26:00.0".into())),
        ];
        assert_eq!(pairs(AMD_LIST), expected);
        assert_eq!(pairs(&format!("{{\"gpu_data\": {AMD_LIST}}}")), expected);
        let odd = r#"[{"gpu": "3", "bdf": "N/A"}, {"bdf": "0000:05:00.0"}]"#;
        assert_eq!(pairs(odd), [(3, None)]);
    }

    fn powers(text: &str) -> Vec<(u32, Option<f64>)> {
        let gpus = parse_amd_smi_power(text).unwrap();
        gpus.iter().map(|g| (g.gpu, g.watts)).collect()
    }

    #[test]
    fn amd_smi_power_bare_list_with_value_unit_and_na() {
        assert_eq!(powers(AMD_POWER_LIST), [(0, Some(142.0)), (1, None)]);
    }

    #[test]
    fn amd_smi_power_gpu_data_wrapper_and_milliwatts() {
        assert_eq!(
            powers(AMD_POWER_GPU_DATA),
            [(0, Some(741.0)), (1, Some(139.5))]
        );
    }

    #[test]
    fn amd_smi_power_legacy_keys_numbers_and_strings() {
        // gpu 1: current_socket_power "128 W" wins over average "N/A".
        assert_eq!(
            powers(AMD_POWER_LEGACY),
            [(0, Some(133.0)), (1, Some(128.0))]
        );
    }

    #[test]
    fn amd_smi_power_garbage() {
        let text = r#"WARNING: amd_smi not in render group
        [
          {"gpu": 0, "power": {"socket_power": {"value": "x", "unit": "W"}}},
          {"gpu": 1, "power": {"socket_power": {"value": 5, "unit": "kW"}}},
          {"gpu": 2, "power": {"socket_power": 65535}},
          {"gpu": 3, "power": {"socket_power": null}},
          {"gpu": 4, "power": "N/A"},
          {"gpu": -1, "power": {"socket_power": 10}},
          {"power": {"socket_power": 10}},
          {"gpu": 5, "power": {"socket_power": {"value": 90}}}
        ]"#;
        let expected = [(0, None), (1, None), (2, None), (3, None), (5, Some(90.0))];
        assert_eq!(powers(text), expected);
        assert!(parse_amd_smi_power("{\"gpus\": []}").is_err());
        assert!(parse_amd_smi_power("42").is_err());
        assert!(parse_amd_smi_power("Traceback (most recent call last):").is_err());
    }

    #[test]
    fn watts_forms() {
        assert_eq!(watts_of(&json!(12.5)), Some(12.5));
        assert_eq!(watts_of(&json!("222.0")), Some(222.0));
        assert_eq!(watts_of(&json!(" 128 W ")), Some(128.0));
        assert_eq!(watts_of(&json!("1500 mW")), Some(1.5));
        assert_eq!(watts_of(&json!({"value": "7", "unit": "W"})), Some(7.0));
        assert_eq!(watts_of(&json!("N/A")), None);
        assert_eq!(watts_of(&json!("N/A (Secondary die)")), None);
        assert_eq!(watts_of(&json!(-1)), None);
        assert_eq!(watts_of(&json!("NaN")), None);
        assert_eq!(watts_of(&json!(true)), None);
        assert_eq!(watts_of(&json!([1])), None);
    }

    /// Fake tools that print fixture files: `rocm-smi` cats `out.json`;
    /// `amd-smi` cats `list.json` or `metric.json` by its arguments. Both
    /// fail on any other arguments, so the tests also check what we run.
    fn fake_rocm_smi(dir: &Path, output: &str) -> PathBuf {
        fs::write(dir.join("out.json"), output).unwrap();
        let body = format!(
            "[ \"$*\" = \"--showpower --showbus --json\" ] || exit 9\ncat '{}'",
            dir.join("out.json").display()
        );
        fake_tool(dir, "rocm-smi", &body)
    }

    fn fake_amd_smi(dir: &Path, list: &str, metric: &str) -> PathBuf {
        fs::write(dir.join("list.json"), list).unwrap();
        fs::write(dir.join("metric.json"), metric).unwrap();
        let body = format!(
            "case \"$*\" in\n'list --json') cat '{0}/list.json';;\n\
             'metric --power --json') cat '{0}/metric.json';;\n\
             *) echo \"bad args: $*\" >&2; exit 2;;\nesac",
            dir.display()
        );
        fake_tool(dir, "amd-smi", &body)
    }

    fn polled(src: &mut dyn PowerSource) -> Vec<(usize, Option<f64>)> {
        let readings = src.poll().unwrap();
        readings.iter().map(|r| (r.channel, r.watts)).collect()
    }

    fn probe_error(result: Result<Box<dyn PowerSource>, String>) -> String {
        result.err().expect("the probe fails")
    }

    #[test]
    fn rocm_smi_end_to_end_through_a_fake_tool() {
        let dir = tempfile::tempdir().unwrap();
        let tool = fake_rocm_smi(dir.path(), ROCM_MI300X);
        let mut src = probe_rocm_smi(&tool, Duration::from_secs(5)).unwrap();
        assert_eq!((src.name(), src.slow()), (ROCM_SMI, true));
        let ch = src.channels();
        assert_eq!(ch.len(), 4);
        assert_eq!(ch[1].pci_bus_id, "0000:26:00.0");
        assert_eq!(
            (ch[1].label.as_str(), ch[1].scope),
            ("card1", Scope::Package)
        );
        assert_eq!(ch[1].nominal_period, Duration::from_secs(1));
        assert!(!ch[1].energy_counter);
        let expected = [
            (0, Some(133.0)),
            (1, Some(131.0)),
            (2, None),
            (3, Some(137.0)),
        ];
        assert_eq!(polled(src.as_mut()), expected);

        // Each poll runs the tool again.
        let hotter = ROCM_MI300X.replace("\"133.0\"", "\"700.0\"");
        fs::write(dir.path().join("out.json"), hotter).unwrap();
        assert_eq!(polled(src.as_mut())[0], (0, Some(700.0)));
        // A tool that starts failing is a retry, not the end of the source.
        fs::write(dir.path().join("out.json"), "garbage").unwrap();
        assert!(matches!(src.poll(), Err(PollError::Retry(m)) if m.contains("printed no JSON")));
    }

    #[test]
    fn rocm_smi_discrete_cards_are_asic_and_cards_need_a_power_key() {
        let dir = tempfile::tempdir().unwrap();
        let tool = fake_rocm_smi(dir.path(), ROCM_DISCRETE);
        let src = probe_rocm_smi(&tool, Duration::from_secs(5)).unwrap();
        assert!(src.channels().iter().all(|c| c.scope == Scope::Asic));

        let tool = fake_rocm_smi(dir.path(), r#"{"card0": {"PCI Bus": "0000:03:00.0"}}"#);
        let err = probe_error(probe_rocm_smi(&tool, Duration::from_secs(5)));
        assert!(
            err.ends_with("reported no GPU with a power figure"),
            "{err}"
        );
    }

    #[test]
    fn amd_smi_end_to_end_through_a_fake_tool() {
        let dir = tempfile::tempdir().unwrap();
        let tool = fake_amd_smi(dir.path(), AMD_LIST, AMD_POWER_GPU_DATA);
        let mut src = probe_amd_smi(&tool, Duration::from_secs(5)).unwrap();
        assert_eq!((src.name(), src.slow()), (AMD_SMI, true));
        let ids: Vec<_> = src
            .channels()
            .iter()
            .map(|c| (c.pci_bus_id.as_str(), c.label.as_str(), c.scope))
            .collect();
        let expected = [
            ("0000:05:00.0", "gpu 0", Scope::Package),
            ("0000:26:00.0", "gpu 1", Scope::Package),
        ];
        assert_eq!(ids, expected);
        assert_eq!(polled(src.as_mut()), [(0, Some(741.0)), (1, Some(139.5))]);

        // A GPU missing from one poll's output just has no reading.
        let renumbered = AMD_POWER_LEGACY.replace("\"gpu\": 0", "\"gpu\": 7");
        fs::write(dir.path().join("metric.json"), renumbered).unwrap();
        assert_eq!(polled(src.as_mut()), [(1, Some(128.0))]);
    }

    #[test]
    fn amd_smi_list_failure_is_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let tool = fake_amd_smi(dir.path(), "no json here", AMD_POWER_LIST);
        let err = probe_error(probe_amd_smi(&tool, Duration::from_secs(5)));
        assert!(
            err.starts_with("amd-smi list: amd-smi printed no JSON"),
            "{err}"
        );
    }

    #[test]
    fn a_hanging_tool_times_out_at_probe() {
        let dir = tempfile::tempdir().unwrap();
        let tool = fake_tool(dir.path(), "rocm-smi", "sleep 30");
        let timeout = Duration::from_millis(300);
        let start = Instant::now();
        let err = probe_error(probe_rocm_smi(&tool, timeout));
        assert!(err.ends_with("rocm-smi timed out after 0.3 s"), "{err}");
        assert!(start.elapsed() < Duration::from_secs(3));
        let start = Instant::now();
        let err = probe_error(probe_amd_smi(&tool, timeout));
        assert!(err.contains("timed out after 0.3 s"), "{err}");
        assert!(start.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn a_missing_tool_is_not_found() {
        let second = Duration::from_secs(1);
        let err = probe_error(probe_rocm_smi(Path::new("gpufleet-no-rocm-smi"), second));
        assert_eq!(err, "gpufleet-no-rocm-smi not found in PATH");
        let err = probe_error(probe_amd_smi(Path::new("/nonexistent/amd-smi"), second));
        assert_eq!(err, "amd-smi list: /nonexistent/amd-smi not found");
    }
}
