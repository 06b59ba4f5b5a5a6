//! One power sample, the same type from the sensor to the store: the agent's sampler reads a
//! [`Reading`] per channel, the wire carries it as a `pb::PowerSample`, and the coordinator
//! stores a run's trace as [`PowerPoint`]s. Declared once here, below both, so a figure added
//! to a sample is added in one place and the rule for a figure the sensor did not report is
//! written once.
//!
//! # "Not reported" on the wire
//! Proto3 scalars cannot be absent, so a figure the sensor did not report travels as 0. Watts
//! and energy carry a flag (`has_watts`, `has_energy`) because 0 W and 0 J are real readings;
//! the other figures have none, so a 0 temperature, clock or utilisation reads back as not
//! reported. A figure that is not a finite number reads back as not reported too.

use crate::v1 as pb;
use serde::{Deserialize, Serialize};

/// The figures of one read of one sensor channel. Every figure is optional: a sensor that is
/// missing, unreadable or reports garbage leaves its field `None`.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Reading {
    pub watts: Option<f64>,
    /// Energy counter in joules, monotonic since the source was probed (wraparound already
    /// unfolded by the source).
    pub energy_j: Option<f64>,
    pub temperature_c: Option<f64>,
    pub sclk_mhz: Option<u32>,
    pub mclk_mhz: Option<u32>,
    pub utilization_pct: Option<f64>,
}

impl Reading {
    /// Puts the figures into `sample`, each one not reported as 0 (with `has_watts` and
    /// `has_energy` saying which of those two were).
    pub fn write_to(&self, sample: &mut pb::PowerSample) {
        sample.watts = self.watts.unwrap_or(0.0);
        sample.energy_j = self.energy_j.unwrap_or(0.0);
        sample.temperature_c = self.temperature_c.unwrap_or(0.0);
        sample.sclk_mhz = self.sclk_mhz.unwrap_or(0);
        sample.mclk_mhz = self.mclk_mhz.unwrap_or(0);
        sample.utilization_pct = self.utilization_pct.unwrap_or(0.0);
        sample.has_watts = self.watts.is_some();
        sample.has_energy = self.energy_j.is_some();
    }

    /// The figures for people, `-` for one not reported: watts (`8.1 W`), temperature
    /// (`41.0 °C`), shader and memory clocks (`1340 MHz`), busy (`37 %`). The agent page's script
    /// writes the same forms.
    pub fn text_cells(&self) -> [String; 5] {
        fn figure(v: Option<f64>, unit: &str, decimals: usize) -> String {
            v.map_or_else(|| "-".into(), |v| format!("{v:.decimals$} {unit}"))
        }
        [
            figure(self.watts, "W", 1),
            figure(self.temperature_c, "°C", 1),
            figure(self.sclk_mhz.map(f64::from), "MHz", 0),
            figure(self.mclk_mhz.map(f64::from), "MHz", 0),
            figure(self.utilization_pct, "%", 0),
        ]
    }

    /// The figures of a wire sample, with those it did not report (see the module docs) as
    /// `None`.
    pub fn from_wire(sample: &pb::PowerSample) -> Reading {
        let finite = |v: f64| v.is_finite().then_some(v);
        // Temperature and utilisation have no "reported" flag on the wire; a
        // source that lacks them sends 0.
        let some_if = |v: f64| (v != 0.0).then_some(v).and_then(finite);
        Reading {
            watts: if sample.has_watts {
                finite(sample.watts)
            } else {
                None
            },
            energy_j: if sample.has_energy {
                finite(sample.energy_j)
            } else {
                None
            },
            temperature_c: some_if(sample.temperature_c),
            sclk_mhz: (sample.sclk_mhz != 0).then_some(sample.sclk_mhz),
            mclk_mhz: (sample.mclk_mhz != 0).then_some(sample.mclk_mhz),
            utilization_pct: some_if(sample.utilization_pct),
        }
    }
}

/// One power sample of a run's trace: which sensor channel, when, and its [`Reading`]. The
/// coordinator stores these; their serde form is flat (the reading's figures beside the
/// channel's fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PowerPoint {
    /// Power source (`nvml`, `amdgpu-hwmon`, ...).
    pub source: String,
    /// What the watts cover (`asic`, `board`, `package`, ...).
    pub scope: String,
    /// Device the sensor belongs to; empty for host-level sensors.
    pub pci_bus_id: String,
    /// The agent host's CLOCK_MONOTONIC, nanoseconds.
    pub monotonic_ns: u64,
    /// The agent host's wall clock, unix seconds.
    pub wall_unix_s: f64,
    #[serde(flatten)]
    pub reading: Reading,
}

impl From<&pb::PowerSample> for PowerPoint {
    /// A power sample from the wire, with the figures the sensor did not report as `None`, a
    /// wall time that is not finite as 0 and the monotonic time kept within `i64` (what the
    /// store and JSON readers hold).
    fn from(sample: &pb::PowerSample) -> PowerPoint {
        PowerPoint {
            source: sample.source.clone(),
            scope: sample.scope.clone(),
            pci_bus_id: sample.pci_bus_id.clone(),
            monotonic_ns: sample.monotonic_ns.min(i64::MAX as u64),
            wall_unix_s: if sample.wall_unix_s.is_finite() {
                sample.wall_unix_s
            } else {
                0.0
            },
            reading: Reading::from_wire(sample),
        }
    }
}

/// A live sample as the coordinator's power stream (`/api/agents/{name}/power`) and
/// `gpufleet power --format json` write it: the [`PowerPoint`]'s flat form and the channel's
/// label. One JSON form for a live sample, read back by `gpufleet power` and the agent page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveSample {
    #[serde(flatten)]
    pub point: PowerPoint,
    /// The channel's label (see `PowerSourceInfo.label`).
    pub label: String,
}

impl From<&pb::PowerSample> for LiveSample {
    fn from(sample: &pb::PowerSample) -> LiveSample {
        LiveSample {
            point: PowerPoint::from(sample),
            label: sample.label.clone(),
        }
    }
}

impl LiveSample {
    /// The sample on the wire again.
    pub fn to_wire(&self) -> pb::PowerSample {
        let p = &self.point;
        let mut s = pb::PowerSample {
            source: p.source.clone(),
            scope: p.scope.clone(),
            pci_bus_id: p.pci_bus_id.clone(),
            monotonic_ns: p.monotonic_ns,
            wall_unix_s: p.wall_unix_s,
            label: self.label.clone(),
            ..Default::default()
        };
        p.reading.write_to(&mut s);
        s
    }
}

/// Keeps one sample per `period` and channel, on the schedule first, second, ... period after the
/// channel's first sample: a sample is kept once its time reaches the next slot less a quarter
/// period (the sensor's clock jitters), and a gap longer than a period restarts the schedule.
/// The one rule for "N samples a second": the agent paces a `PowerRequest.rate_hz` with it, the
/// coordinator each watcher of a live stream, `gpufleet power` its `--rate-hz`.
#[derive(Debug)]
pub struct Pace<K> {
    period_ns: u64,
    next: std::collections::HashMap<K, u64>,
}

/// Checks a requested rate: finite, 0 (every sample) to 1000 a second.
///
/// # Errors
/// A message saying what the rate must be.
pub fn check_rate_hz(rate_hz: f64) -> Result<f64, String> {
    if rate_hz.is_finite() && (0.0..=1000.0).contains(&rate_hz) {
        Ok(rate_hz)
    } else {
        Err(format!(
            "{rate_hz} must be between 0 (every sample) and 1000 samples a second"
        ))
    }
}

impl<K: std::hash::Hash + Eq> Pace<K> {
    /// `rate_hz` samples a second per channel; 0 (or anything not positive) keeps every sample.
    pub fn new(rate_hz: f64) -> Pace<K> {
        let period_ns = if rate_hz > 0.0 && rate_hz.is_finite() {
            (1e9 / rate_hz) as u64
        } else {
            0
        };
        Pace {
            period_ns,
            next: std::collections::HashMap::new(),
        }
    }

    /// Whether to keep the sample taken at `t_ns` (the agent's monotonic clock) of `channel`.
    pub fn keep(&mut self, channel: K, t_ns: u64) -> bool {
        let p = self.period_ns;
        if p == 0 {
            return true;
        }
        match self.next.get_mut(&channel) {
            None => {
                self.next.insert(channel, t_ns.saturating_add(p));
                true
            }
            Some(due) if t_ns.saturating_add(p / 4) >= *due => {
                *due = if t_ns >= due.saturating_add(p) {
                    t_ns.saturating_add(p)
                } else {
                    due.saturating_add(p)
                };
                true
            }
            Some(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ch(label: &str) -> String {
        label.to_string()
    }

    /// Samples every `step_ms` (with `jitter_ms` alternating either side) for `secs` seconds,
    /// paced to `rate_hz`: how many are kept.
    fn kept(rate_hz: f64, step_ms: u64, jitter_ms: i64, secs: u64) -> usize {
        let mut pace = Pace::new(rate_hz);
        (0..secs * 1000 / step_ms)
            .filter(|i| {
                let j = if i % 2 == 0 { jitter_ms } else { -jitter_ms };
                let t = (i * step_ms * 1_000_000) as i64 + j * 1_000_000 + 1_000_000_000;
                pace.keep(ch("a"), t as u64)
            })
            .count()
    }

    #[test]
    fn pace_keeps_the_asked_rate_from_a_faster_feed() {
        // 20 Hz feed, 3 Hz asked: 30 in 10 s (a rate that does not divide the feed's).
        let n = kept(3.0, 50, 0, 10);
        assert!((29..=31).contains(&n), "{n}");
        // Jitter of 5 ms either side does not drop a slot.
        let n = kept(5.0, 50, 5, 10);
        assert!((49..=51).contains(&n), "{n}");
        // Asked faster than the feed: every sample.
        assert_eq!(kept(50.0, 50, 0, 2), 40);
        assert_eq!(kept(0.0, 50, 0, 2), 40);
    }

    #[test]
    fn pace_counts_each_channel_on_its_own_and_restarts_after_a_gap() {
        let mut pace = Pace::new(1.0);
        assert!(pace.keep(ch("a"), 0));
        assert!(pace.keep(ch("b"), 100_000_000), "another channel's first");
        assert!(!pace.keep(ch("a"), 500_000_000));
        assert!(pace.keep(ch("a"), 1_000_000_000));
        // A 10 s gap: one sample, then the schedule from there, not a burst of catch-up.
        assert!(pace.keep(ch("a"), 11_000_000_000));
        assert!(!pace.keep(ch("a"), 11_100_000_000));
        assert!(pace.keep(ch("a"), 12_000_000_000));
    }

    #[test]
    fn a_live_sample_goes_through_json_and_back() {
        let mut wire = pb::PowerSample {
            source: "amdgpu-hwmon".into(),
            scope: "asic".into(),
            pci_bus_id: "0000:03:00.0".into(),
            monotonic_ns: 7_000_000_000,
            wall_unix_s: 1_760_000_000.5,
            label: "amdgpu power1_input, temp1_input".into(),
            ..Default::default()
        };
        full().write_to(&mut wire);
        let text = serde_json::to_string(&LiveSample::from(&wire)).unwrap();
        assert!(text.contains(r#""watts":430.5"#), "{text}");
        assert!(
            text.contains(r#""label":"amdgpu power1_input, temp1_input""#),
            "{text}"
        );
        let back: LiveSample = serde_json::from_str(&text).unwrap();
        assert_eq!(back.to_wire(), wire);
    }

    #[test]
    fn a_rate_is_checked() {
        assert_eq!(check_rate_hz(0.0), Ok(0.0));
        assert_eq!(check_rate_hz(20.0), Ok(20.0));
        for bad in [-1.0, f64::NAN, f64::INFINITY, 1000.5] {
            assert!(
                check_rate_hz(bad).unwrap_err().contains("between 0"),
                "{bad}"
            );
        }
    }

    fn full() -> Reading {
        Reading {
            watts: Some(430.5),
            energy_j: Some(12.5),
            temperature_c: Some(31.0),
            sclk_mhz: Some(1980),
            mclk_mhz: Some(2619),
            utilization_pct: Some(100.0),
        }
    }

    #[test]
    fn every_reported_figure_crosses_the_wire() {
        let mut wire = pb::PowerSample::default();
        full().write_to(&mut wire);
        assert!(wire.has_watts && wire.has_energy);
        assert_eq!(Reading::from_wire(&wire), full());
    }

    #[test]
    fn figures_not_reported_stay_not_reported() {
        let mut wire = pb::PowerSample::default();
        Reading::default().write_to(&mut wire);
        assert_eq!(
            (wire.watts, wire.has_watts, wire.has_energy),
            (0.0, false, false)
        );
        assert_eq!(Reading::from_wire(&wire), Reading::default());
        // 0 W and 0 J are readings; a 0 temperature or clock is not.
        let zero = Reading {
            watts: Some(0.0),
            energy_j: Some(0.0),
            temperature_c: Some(0.0),
            sclk_mhz: Some(0),
            ..Reading::default()
        };
        zero.write_to(&mut wire);
        let back = Reading::from_wire(&wire);
        assert_eq!((back.watts, back.energy_j), (Some(0.0), Some(0.0)));
        assert_eq!((back.temperature_c, back.sclk_mhz), (None, None));
    }

    #[test]
    fn numbers_that_cannot_be_stored_are_not_reported_or_clamped() {
        let wire = pb::PowerSample {
            monotonic_ns: u64::MAX,
            wall_unix_s: f64::NAN,
            watts: f64::INFINITY,
            has_watts: true,
            temperature_c: f64::NAN,
            ..Default::default()
        };
        let p = PowerPoint::from(&wire);
        assert_eq!(p.monotonic_ns, i64::MAX as u64);
        assert_eq!(p.wall_unix_s, 0.0);
        assert_eq!((p.reading.watts, p.reading.temperature_c), (None, None));
    }

    #[test]
    fn the_serde_form_is_flat() {
        let p = PowerPoint {
            source: "amdgpu-hwmon".into(),
            scope: "asic".into(),
            pci_bus_id: "0000:03:00.0".into(),
            monotonic_ns: 7_000_000_000,
            wall_unix_s: 1_760_000_000.5,
            reading: Reading {
                mclk_mhz: None,
                ..full()
            },
        };
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(
            text,
            r#"{"source":"amdgpu-hwmon","scope":"asic","pci_bus_id":"0000:03:00.0","monotonic_ns":7000000000,"wall_unix_s":1760000000.5,"watts":430.5,"energy_j":12.5,"temperature_c":31.0,"sclk_mhz":1980,"mclk_mhz":null,"utilization_pct":100.0}"#
        );
        assert_eq!(serde_json::from_str::<PowerPoint>(&text).unwrap(), p);
    }
}
