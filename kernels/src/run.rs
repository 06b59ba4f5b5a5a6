//! How a spec is measured, as opposed to what it computes: the timing [`Mode`] and the one set of
//! [`RunDefaults`] that suite files, the coordinator's CLI and the agent all read.
//!
//! These live in the kernels crate because every layer needs the same answer: a suite file that
//! leaves `timeout_s` out, a `gpufleet run` without `--timeout-s` and a RunSpec with `timeout_s = 0`
//! must all mean the same number, written once here.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What a run's timed window contains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Mode {
    /// Inputs already on the device; only the kernel is timed.
    #[default]
    ComputeOnly,
    /// Upload, kernel and readback are timed together.
    WithTransfers,
}

impl Mode {
    /// Every mode, in display order.
    pub const ALL: [Mode; 2] = [Mode::ComputeOnly, Mode::WithTransfers];

    /// Canonical name (`"compute_only"`, `"with_transfers"`), as used in spec keys, suites and the CLI.
    pub fn name(self) -> &'static str {
        match self {
            Mode::ComputeOnly => "compute_only",
            Mode::WithTransfers => "with_transfers",
        }
    }

    /// Parses a canonical name; `None` for anything else (callers name the field in their error).
    pub fn parse(s: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == s.trim())
    }

    /// The known names, for error messages (`"compute_only, with_transfers"`).
    pub fn known() -> String {
        Mode::ALL.map(Mode::name).join(", ")
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        Mode::parse(s).ok_or_else(|| format!("unknown mode `{s}` (known: {})", Mode::known()))
    }
}

impl Serialize for Mode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Mode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Measurement settings used wherever a run leaves one out: a suite file without the field, the CLI
/// without the flag, a RunSpec with the field at 0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunDefaults {
    /// Untimed iterations before measuring (caches, clocks, JIT).
    pub warmup: u32,
    /// Iterations measured at least, however long they take.
    pub min_iterations: u32,
    /// Seconds measured at least, so short kernels get enough samples.
    pub min_seconds: f64,
    /// Iterations measured at most, so tiny kernels stop.
    pub max_iterations: u32,
    /// Wall-clock limit of the whole run, after which the worker is killed.
    pub timeout_s: f64,
}

impl RunDefaults {
    /// The defaults every layer applies.
    pub const STANDARD: RunDefaults = RunDefaults {
        warmup: 3,
        min_iterations: 10,
        min_seconds: 0.5,
        max_iterations: 10_000,
        timeout_s: 120.0,
    };

    /// Longest deadline a run may ask for.
    pub const MAX_TIMEOUT_S: f64 = 24.0 * 3600.0;

    /// Most timed iterations a run may ask for.
    pub const MAX_ITERATIONS: u32 = 100_000;
}

impl Default for RunDefaults {
    fn default() -> Self {
        RunDefaults::STANDARD
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_names_round_trip_and_unknown_is_refused() {
        for m in Mode::ALL {
            assert_eq!(Mode::parse(m.name()), Some(m));
            assert_eq!(m.name().parse::<Mode>(), Ok(m));
        }
        assert_eq!(Mode::parse("fast"), None);
        let err = "fast".parse::<Mode>().unwrap_err();
        assert!(
            err.contains("`fast`") && err.contains("with_transfers"),
            "{err}"
        );
        assert_eq!(Mode::default(), Mode::ComputeOnly);
    }

    #[test]
    fn mode_serde_uses_the_canonical_name() {
        let json = serde_json::to_string(&Mode::WithTransfers).unwrap();
        assert_eq!(json, "\"with_transfers\"");
        assert_eq!(
            serde_json::from_str::<Mode>(&json).unwrap(),
            Mode::WithTransfers
        );
        assert!(serde_json::from_str::<Mode>("\"x\"").is_err());
    }

    #[test]
    fn defaults_are_within_the_bounds() {
        let d = RunDefaults::default();
        assert!(d.timeout_s > 0.0 && d.timeout_s <= RunDefaults::MAX_TIMEOUT_S);
        assert!(d.min_iterations <= d.max_iterations);
        assert!(d.max_iterations <= RunDefaults::MAX_ITERATIONS);
    }
}
