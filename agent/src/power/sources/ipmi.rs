//! Whole-node power from the BMC: `ipmitool dcmi power reading`.
//!
//! The BMC measures at the power supplies, so this is the only source that
//! sees everything (fans, disks, PSU losses). It updates about once a second
//! and each call is a round trip to the BMC that can hang when the BMC is
//! busy or rebooting, hence a slow source with a deadline per call.
//!
//! ipmitool prints (lib/ipmi_dcmi.c):
//! ```text
//!     Instantaneous power reading:                   220 Watts
//!     …
//!     Power reading state is:                   activated
//! ```
//! BMCs without power metering answer `deactivated` (often with a stale or
//! zero figure), and some answer 0 while metering warms up: both are
//! missing, never 0 W.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::command;
use crate::power::{
    Channel, ChannelReading, PollError, PowerConfig, PowerSource, Probed, Reading, Scope,
    SourceKind,
};

/// The source's name in Describe and on the wire.
pub const NAME: &str = "ipmitool";

/// ipmitool in [`super::ALL`]: probed unless the configuration turns it off.
pub const KIND: SourceKind = SourceKind {
    name: NAME,
    probe: |c: &PowerConfig| c.probe_tool(&c.ipmitool, probe),
};

/// Arguments of every call.
pub const ARGS: &[&str] = &["dcmi", "power", "reading"];

/// DCMI readings refresh about once a second.
const NOMINAL_PERIOD: Duration = Duration::from_secs(1);

const READING_LINE: &str = "Instantaneous power reading:";
const STATE_LINE: &str = "Power reading state is:";

/// What one `ipmitool dcmi power reading` printed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DcmiPowerReading {
    /// The `Instantaneous power reading` figure, when the line is there and
    /// holds a number.
    pub instantaneous_w: Option<f64>,
    /// `Some(true)` for `activated`, `Some(false)` for `deactivated`, `None`
    /// when the line is missing.
    pub activated: Option<bool>,
}

impl DcmiPowerReading {
    /// The usable figure: `None` when metering is deactivated or reads 0.
    pub fn watts(&self) -> Option<f64> {
        if self.activated == Some(false) {
            return None;
        }
        self.instantaneous_w.filter(|w| *w > 0.0)
    }
}

/// Parses `ipmitool dcmi power reading` output. Never fails: missing or
/// garbled lines leave their field `None`.
pub fn parse_dcmi_power_reading(text: &str) -> DcmiPowerReading {
    let mut reading = DcmiPowerReading {
        instantaneous_w: None,
        activated: None,
    };
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix(READING_LINE) {
            reading.instantaneous_w = rest
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<f64>().ok())
                .filter(|w| w.is_finite() && *w >= 0.0);
        } else if let Some(rest) = line.strip_prefix(STATE_LINE) {
            reading.activated = match rest.trim() {
                "activated" => Some(true),
                "deactivated" => Some(false),
                _ => None,
            };
        }
    }
    reading
}

/// The ipmitool source: one whole-node channel.
#[derive(Debug)]
pub struct IpmiSource {
    cmd: PathBuf,
    timeout: Duration,
    channels: Vec<Channel>,
}

/// Runs `ipmitool dcmi power reading` once.
///
/// # Errors
/// The reason shown in Describe: ipmitool is missing, hangs or fails (no
/// `/dev/ipmi0`, not root, no BMC), prints no reading, or the BMC's power
/// metering is deactivated.
pub fn probe(cmd: &Path, timeout: Duration) -> Probed {
    let out = command::run(cmd, ARGS, timeout).map_err(|e| e.to_string())?;
    let reading = parse_dcmi_power_reading(&out);
    if reading.instantaneous_w.is_none() {
        return Err(format!(
            "{} dcmi power reading printed no '{READING_LINE}' figure",
            cmd.display()
        ));
    }
    if reading.activated == Some(false) {
        return Err("the BMC's DCMI power reading is deactivated".to_string());
    }
    Ok(Box::new(IpmiSource {
        cmd: cmd.to_path_buf(),
        timeout,
        channels: vec![Channel {
            pci_bus_id: String::new(),
            scope: Scope::Node,
            label: "dcmi power reading".to_string(),
            energy_counter: false,
            power_cap_w: None,
            nominal_period: NOMINAL_PERIOD,
        }],
    }))
}

impl PowerSource for IpmiSource {
    fn name(&self) -> &'static str {
        NAME
    }

    fn channels(&self) -> &[Channel] {
        &self.channels
    }

    /// A failed or hung call, or output without a reading, is
    /// [`PollError::Retry`]: BMCs drop requests under load.
    fn poll(&mut self) -> Result<Vec<ChannelReading>, PollError> {
        let out = command::run(&self.cmd, ARGS, self.timeout)
            .map_err(|e| PollError::Retry(e.to_string()))?;
        let reading = parse_dcmi_power_reading(&out);
        if reading.instantaneous_w.is_none() && reading.activated.is_none() {
            return Err(PollError::Retry(format!(
                "{} printed no power reading",
                self.cmd.display()
            )));
        }
        Ok(vec![ChannelReading {
            channel: 0,
            reading: Reading {
                watts: reading.watts(),
                ..Reading::default()
            },
        }])
    }

    fn slow(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::command::tests::fake_tool;
    use super::*;
    use std::fs;
    use std::time::Instant;

    // ipmitool's own layout (lib/ipmi_dcmi.c, ipmi_dcmi_pwr_rd); the
    // activated figures are from a public capture of a Dell server, the
    // deactivated block from OpenBMC's test suite comments, the zero one
    // is the activated capture with 0 W (metering warming up).
    const ACTIVATED: &str = include_str!("ipmi/fixtures/ipmitool_dcmi_activated.txt");
    const DEACTIVATED: &str = include_str!("ipmi/fixtures/ipmitool_dcmi_deactivated.txt");
    const ZERO: &str = include_str!("ipmi/fixtures/ipmitool_dcmi_zero.txt");

    #[test]
    fn activated_reading() {
        let r = parse_dcmi_power_reading(ACTIVATED);
        assert_eq!(r.instantaneous_w, Some(332.0));
        assert_eq!(r.activated, Some(true));
        assert_eq!(r.watts(), Some(332.0));
    }

    #[test]
    fn deactivated_is_missing_even_with_a_figure() {
        let r = parse_dcmi_power_reading(DEACTIVATED);
        assert_eq!(r.instantaneous_w, Some(235.0));
        assert_eq!(r.activated, Some(false));
        assert_eq!(r.watts(), None);
    }

    #[test]
    fn zero_is_missing() {
        let r = parse_dcmi_power_reading(ZERO);
        assert_eq!((r.instantaneous_w, r.activated), (Some(0.0), Some(true)));
        assert_eq!(r.watts(), None);
    }

    #[test]
    fn garbage_and_partial_output() {
        let r = parse_dcmi_power_reading("Instantaneous power reading: lots Watts\n");
        assert_eq!((r.instantaneous_w, r.activated), (None, None));
        let r = parse_dcmi_power_reading(
            "Instantaneous power reading: -3 Watts\nPower reading state is: maybe\n",
        );
        assert_eq!((r.instantaneous_w, r.activated), (None, None));
        let r = parse_dcmi_power_reading("");
        assert_eq!(r.watts(), None);
        // No state line: trust the figure.
        let r = parse_dcmi_power_reading("Instantaneous power reading:   99 Watts");
        assert_eq!(r.watts(), Some(99.0));
    }

    fn fake_ipmitool(dir: &Path, output: &str) -> PathBuf {
        fs::write(dir.join("out.txt"), output).unwrap();
        let body = format!(
            "[ \"$*\" = \"dcmi power reading\" ] || exit 9\ncat '{}'",
            dir.join("out.txt").display()
        );
        fake_tool(dir, "ipmitool", &body)
    }

    #[test]
    fn end_to_end_through_a_fake_tool() {
        let dir = tempfile::tempdir().unwrap();
        let tool = fake_ipmitool(dir.path(), ACTIVATED);
        let mut src = probe(&tool, Duration::from_secs(5)).unwrap();
        assert_eq!(src.name(), NAME);
        assert!(src.slow());
        let ch = &src.channels()[0];
        assert_eq!((ch.scope, ch.pci_bus_id.as_str()), (Scope::Node, ""));
        assert_eq!(ch.nominal_period, Duration::from_secs(1));
        assert_eq!(src.poll().unwrap()[0].reading.watts, Some(332.0));

        fs::write(dir.path().join("out.txt"), DEACTIVATED).unwrap();
        let r = src.poll().unwrap();
        assert_eq!((r[0].channel, r[0].reading.watts), (0, None));
        fs::write(
            dir.path().join("out.txt"),
            "Error: Unable to establish IPMI v2 session\n",
        )
        .unwrap();
        assert!(matches!(src.poll(), Err(PollError::Retry(_))));
    }

    #[test]
    fn deactivated_at_probe_is_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let tool = fake_ipmitool(dir.path(), DEACTIVATED);
        let err = probe(&tool, Duration::from_secs(5))
            .err()
            .expect("the probe fails");
        assert_eq!(err, "the BMC's DCMI power reading is deactivated");
        let tool = fake_ipmitool(
            dir.path(),
            "DCMI request failed because: Invalid command (c1)\n",
        );
        let err = probe(&tool, Duration::from_secs(5))
            .err()
            .expect("the probe fails");
        assert!(
            err.ends_with("printed no 'Instantaneous power reading:' figure"),
            "{err}"
        );
    }

    #[test]
    fn failing_hanging_and_missing_tools() {
        let dir = tempfile::tempdir().unwrap();
        let tool = fake_tool(
            dir.path(),
            "ipmitool",
            "echo 'Could not open device at /dev/ipmi0 or /dev/ipmi/0 or /dev/ipmidev/0: No such file or directory' >&2; exit 1",
        );
        let err = probe(&tool, Duration::from_secs(5))
            .err()
            .expect("the probe fails");
        assert!(err.contains("Could not open device at /dev/ipmi0"), "{err}");

        let tool = fake_tool(dir.path(), "ipmitool-hang", "sleep 30");
        let start = Instant::now();
        let err = probe(&tool, Duration::from_millis(300))
            .err()
            .expect("the probe fails");
        assert!(err.ends_with("timed out after 0.3 s"), "{err}");
        assert!(start.elapsed() < Duration::from_secs(3));

        let err = probe(Path::new("gpufleet-no-ipmitool"), Duration::from_secs(1))
            .err()
            .expect("the probe fails");
        assert_eq!(err, "gpufleet-no-ipmitool not found in PATH");
    }
}
