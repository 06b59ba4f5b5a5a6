//! How a spec is measured, as opposed to what it computes: the timing [`Mode`] and the measurement
//! settings ([`PartialSettings`] as given, [`RunSettings`] as decided). How far the result can be
//! trusted is `noise.rs`'s.
//!
//! The settings live in the kernels crate because every layer needs the same answer: a suite file
//! that leaves `timeout_s` out, a `gpufleet run` without `--timeout-s` and a request without the
//! field must all mean the same number. So the defaults are written once ([`RunSettings::DEFAULT`]),
//! applied once ([`PartialSettings::resolve`]: the coordinator when it plans a campaign, the agent
//! for a field a request leaves out) and bounded by one check ([`PartialSettings::check`]). "Not
//! given" is `None` in every layer, never a number that means "the default" in one of them.
//!
//! [`PartialSettings`] is also the wire's `gpufleet.v1.RunSettings` message (its prost attributes
//! carry the tags of `agent.proto`; the proto crate maps the message to this type), so one struct
//! travels whole from a suite file or the command line through the stored request, the stored
//! job and the gRPC request to the agent, which resolves it into the [`RunSettings`] its worker
//! job carries. Its field list is written here only.

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

/// The measurement settings of one run, every one decided: what the coordinator stores with a job,
/// what the wire carries, what the worker measures by. Decided by [`PartialSettings::resolve`],
/// the one place the defaults and the derived budget are applied.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RunSettings {
    /// Untimed iterations before measuring at least (caches, clocks, JIT). The agent warms up
    /// for a minimum time too, and on while the iteration times still fall.
    pub warmup: u32,
    /// Iterations measured at least, however long they take.
    pub min_iterations: u32,
    /// Seconds measured at least, so short kernels get enough samples.
    pub min_seconds: f64,
    /// Iterations measured at most, so tiny kernels stop.
    pub max_iterations: u32,
    /// Wall-clock limit of the whole run, after which the worker is killed.
    pub timeout_s: f64,
    /// Half-width of the 95% confidence interval of the median, in percent of the median, that
    /// ends measuring early (after the minimums); `None`: no target, the minimums decide.
    pub target_ci_pct: Option<f64>,
    /// Seconds of measuring after which the adaptive loop stops without reaching the target.
    pub max_seconds: f64,
}

/// Where the default `min_seconds` is written (also read by the default budget).
const DEFAULT_MIN_SECONDS: f64 = 0.5;

impl RunSettings {
    /// The settings of a run that names none: every default, written here only.
    pub const DEFAULT: RunSettings = RunSettings {
        warmup: 3,
        min_iterations: 10,
        min_seconds: DEFAULT_MIN_SECONDS,
        max_iterations: 10_000,
        timeout_s: 120.0,
        target_ci_pct: Some(1.0),
        max_seconds: DEFAULT_MIN_SECONDS * RunSettings::BUDGET_FACTOR,
    };

    /// The measuring budget where a run names none is this many times its `min_seconds`, so a
    /// suite that measures briefly (smoke) stays brief and one that measures long gets room to
    /// narrow its interval.
    pub const BUDGET_FACTOR: f64 = 5.0;

    /// Longest deadline (and measuring budget) a run may ask for.
    pub const MAX_TIMEOUT_S: f64 = 24.0 * 3600.0;

    /// Longest minimum measuring time a run may ask for.
    pub const MAX_MIN_SECONDS: f64 = 3600.0;

    /// Most timed iterations a run may ask for: every timed iteration travels back as a raw
    /// sample, and results stay well under gRPC's default 4 MiB message size.
    pub const MAX_ITERATIONS: u32 = 100_000;

    /// These settings with every field given: the form stored with a job and sent on the wire,
    /// which resolves back to the same settings (no target is an explicit 0).
    pub fn explicit(&self) -> PartialSettings {
        PartialSettings {
            warmup: Some(self.warmup),
            min_iterations: Some(self.min_iterations),
            min_seconds: Some(self.min_seconds),
            max_iterations: Some(self.max_iterations),
            timeout_s: Some(self.timeout_s),
            target_ci_pct: Some(self.target_ci_pct.unwrap_or(0.0)),
            max_seconds: Some(self.max_seconds),
        }
    }
}

impl Default for RunSettings {
    fn default() -> Self {
        RunSettings::DEFAULT
    }
}

/// Measurement settings as a suite file, the command line or a request gives them: `None` is "not
/// given", never a number standing for the default. [`PartialSettings::resolve`] turns them into
/// [`RunSettings`]. Stored (with a campaign's runs, and whole in a job's spec) with null for the
/// fields not given; on the wire it is `gpufleet.v1.RunSettings` (`RunSpec.settings`), whose tags
/// the `#[prost]` attributes give (prost also writes its `Default`, every field not given).
#[derive(Clone, Copy, PartialEq, Serialize, Deserialize, prost::Message)]
#[serde(default)]
pub struct PartialSettings {
    /// See [`RunSettings::warmup`].
    #[prost(uint32, optional, tag = "1")]
    pub warmup: Option<u32>,
    /// See [`RunSettings::min_iterations`].
    #[prost(uint32, optional, tag = "2")]
    pub min_iterations: Option<u32>,
    /// See [`RunSettings::min_seconds`].
    #[prost(double, optional, tag = "3")]
    pub min_seconds: Option<f64>,
    /// See [`RunSettings::max_iterations`]; raised to `min_iterations` when below it.
    #[prost(uint32, optional, tag = "4")]
    pub max_iterations: Option<u32>,
    /// See [`RunSettings::timeout_s`].
    #[prost(double, optional, tag = "5")]
    pub timeout_s: Option<f64>,
    /// See [`RunSettings::target_ci_pct`]; 0: no target.
    #[prost(double, optional, tag = "6")]
    pub target_ci_pct: Option<f64>,
    /// See [`RunSettings::max_seconds`]; not given: [`RunSettings::BUDGET_FACTOR`] ×
    /// `min_seconds`; raised to `min_seconds` when below it.
    #[prost(double, optional, tag = "7")]
    pub max_seconds: Option<f64>,
}

impl PartialSettings {
    /// Each setting given here, else the one of `under` (overrides on top of a suite's run).
    pub fn or(self, under: PartialSettings) -> PartialSettings {
        PartialSettings {
            warmup: self.warmup.or(under.warmup),
            min_iterations: self.min_iterations.or(under.min_iterations),
            min_seconds: self.min_seconds.or(under.min_seconds),
            max_iterations: self.max_iterations.or(under.max_iterations),
            timeout_s: self.timeout_s.or(under.timeout_s),
            target_ci_pct: self.target_ci_pct.or(under.target_ci_pct),
            max_seconds: self.max_seconds.or(under.max_seconds),
        }
    }

    /// The settings, with [`RunSettings::DEFAULT`] for what is not given, the budget derived from
    /// `min_seconds` where not given, and each maximum raised to its minimum: the one place any
    /// of that happens.
    ///
    /// # Errors
    /// [`SettingError`] naming the first given field outside its bounds ([`PartialSettings::check`]).
    pub fn resolve(&self) -> Result<RunSettings, SettingError> {
        self.check()?;
        let d = RunSettings::DEFAULT;
        let min_iterations = self.min_iterations.unwrap_or(d.min_iterations);
        let min_seconds = self.min_seconds.unwrap_or(d.min_seconds);
        let budget = self
            .max_seconds
            .unwrap_or(min_seconds * RunSettings::BUDGET_FACTOR);
        Ok(RunSettings {
            warmup: self.warmup.unwrap_or(d.warmup),
            min_iterations,
            min_seconds,
            max_iterations: self
                .max_iterations
                .unwrap_or(d.max_iterations)
                .max(min_iterations),
            timeout_s: self.timeout_s.unwrap_or(d.timeout_s),
            target_ci_pct: match self.target_ci_pct {
                None => d.target_ci_pct,
                Some(t) if t > 0.0 => Some(t),
                Some(_) => None,
            },
            max_seconds: budget.max(min_seconds),
        })
    }

    /// The bounds of every given setting: the one check that suites, the command line, the
    /// coordinator and the agent apply. Not given is always within bounds.
    ///
    /// # Errors
    /// [`SettingError`] naming the first field outside its bounds, and the bounds.
    pub fn check(&self) -> Result<(), SettingError> {
        let iterations = |field, n: Option<u32>| match n {
            Some(n) if !(1..=RunSettings::MAX_ITERATIONS).contains(&n) => Err(
                SettingError::outside(field, n, format!("1..={}", RunSettings::MAX_ITERATIONS)),
            ),
            _ => Ok(()),
        };
        // Written as `!(inside)` so a NaN is outside every bound.
        let seconds = |field, s: Option<f64>, zero: bool, max: f64| match s {
            Some(s) if !((s > 0.0 || (zero && s == 0.0)) && s <= max) => {
                let open = if zero { '[' } else { '(' };
                Err(SettingError::outside(
                    field,
                    s,
                    format!("{open}0, {max}] seconds"),
                ))
            }
            _ => Ok(()),
        };
        iterations("min_iterations", self.min_iterations)?;
        iterations("max_iterations", self.max_iterations)?;
        seconds(
            "min_seconds",
            self.min_seconds,
            true,
            RunSettings::MAX_MIN_SECONDS,
        )?;
        seconds(
            "max_seconds",
            self.max_seconds,
            true,
            RunSettings::MAX_TIMEOUT_S,
        )?;
        seconds(
            "timeout_s",
            self.timeout_s,
            false,
            RunSettings::MAX_TIMEOUT_S,
        )?;
        match self.target_ci_pct {
            Some(t) if !(0.0..=100.0).contains(&t) => Err(SettingError::outside(
                "target_ci_pct",
                t,
                "[0, 100] percent (0: no target)",
            )),
            _ => Ok(()),
        }
    }

    /// Refuses a maximum (given or default) below its minimum (given or default), for settings that come from
    /// one author who should not contradict themselves (a suite file); [`PartialSettings::resolve`]
    /// raises such a maximum instead, as the wire documents.
    ///
    /// # Errors
    /// [`SettingError`] naming the maximum and the minimum it is below.
    pub fn check_order(&self) -> Result<(), SettingError> {
        let d = RunSettings::DEFAULT;
        let min_iterations = self.min_iterations.unwrap_or(d.min_iterations);
        let min_seconds = self.min_seconds.unwrap_or(d.min_seconds);
        let max_iterations = self.max_iterations.unwrap_or(d.max_iterations);
        if max_iterations < min_iterations {
            return Err(SettingError::below(
                "max_iterations",
                max_iterations,
                "min_iterations",
                min_iterations,
            ));
        }
        if let Some(max) = self.max_seconds.filter(|m| *m < min_seconds) {
            return Err(SettingError::below(
                "max_seconds",
                max,
                "min_seconds",
                min_seconds,
            ));
        }
        Ok(())
    }
}

/// A measurement setting outside its bounds.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SettingError {
    /// The setting, as suites, flags and the wire name it (`min_iterations`, `timeout_s`).
    pub field: &'static str,
    /// The value given and the bounds it misses.
    pub message: String,
}

impl SettingError {
    fn outside(
        field: &'static str,
        value: impl std::fmt::Display,
        bound: impl std::fmt::Display,
    ) -> Self {
        SettingError {
            field,
            message: format!("{value} is outside {bound}"),
        }
    }

    fn below(
        field: &'static str,
        value: impl std::fmt::Display,
        min_field: &str,
        min: impl std::fmt::Display,
    ) -> Self {
        SettingError {
            field,
            message: format!("{value} is below {min_field} {min}"),
        }
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
        let d = RunSettings::default();
        assert!(d.timeout_s > 0.0 && d.timeout_s <= RunSettings::MAX_TIMEOUT_S);
        assert!(d.min_iterations <= d.max_iterations);
        assert!(d.max_iterations <= RunSettings::MAX_ITERATIONS);
        assert!(d.max_seconds < d.timeout_s);
        assert!(d.target_ci_pct.is_some_and(|t| t > 0.0));
        assert_eq!(d.explicit().check(), Ok(()));
    }

    #[test]
    fn nothing_given_resolves_to_the_defaults_and_the_budget_follows_the_minimum() {
        assert_eq!(
            PartialSettings::default().resolve(),
            Ok(RunSettings::DEFAULT)
        );
        assert_eq!(
            RunSettings::DEFAULT.max_seconds,
            5.0 * RunSettings::DEFAULT.min_seconds
        );
        let given = PartialSettings {
            min_seconds: Some(0.1),
            ..Default::default()
        };
        assert_eq!(given.resolve().unwrap().max_seconds, 0.5);
        // Zero is a value, not "the default": no warm-up, no minimum time, no budget beyond it.
        let zeros = PartialSettings {
            warmup: Some(0),
            min_seconds: Some(0.0),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(
            (zeros.warmup, zeros.min_seconds, zeros.max_seconds),
            (0, 0.0, 0.0)
        );
    }

    #[test]
    fn no_target_is_an_explicit_zero_and_round_trips() {
        let none = PartialSettings {
            target_ci_pct: Some(0.0),
            ..Default::default()
        };
        let s = none.resolve().unwrap();
        assert_eq!(s.target_ci_pct, None);
        assert_eq!(s.explicit().target_ci_pct, Some(0.0));
        for s in [s, RunSettings::DEFAULT] {
            assert_eq!(s.explicit().resolve(), Ok(s));
        }
    }

    #[test]
    fn a_maximum_below_its_minimum_is_raised_by_resolve_and_refused_by_check_order() {
        let crossed = PartialSettings {
            min_iterations: Some(20),
            max_iterations: Some(5),
            min_seconds: Some(2.0),
            max_seconds: Some(1.0),
            ..Default::default()
        };
        let s = crossed.resolve().unwrap();
        assert_eq!((s.max_iterations, s.max_seconds), (20, 2.0));
        let e = crossed.check_order().unwrap_err();
        assert_eq!(
            e.to_string(),
            "max_iterations: 5 is below min_iterations 20"
        );
        let e = PartialSettings {
            min_seconds: Some(2.0),
            max_seconds: Some(1.0),
            ..Default::default()
        }
        .check_order()
        .unwrap_err();
        assert_eq!(e.to_string(), "max_seconds: 1 is below min_seconds 2");
        // The default maximum counts too.
        let e = PartialSettings {
            min_iterations: Some(20_000),
            ..Default::default()
        }
        .check_order()
        .unwrap_err();
        assert_eq!(e.field, "max_iterations");
    }

    #[test]
    fn every_bound_names_its_field_and_the_bound() {
        let refused = |p: PartialSettings| p.resolve().unwrap_err().to_string();
        let p = PartialSettings::default;
        assert_eq!(
            refused(PartialSettings {
                min_iterations: Some(0),
                ..p()
            }),
            "min_iterations: 0 is outside 1..=100000"
        );
        assert_eq!(
            refused(PartialSettings {
                max_iterations: Some(100_001),
                ..p()
            }),
            "max_iterations: 100001 is outside 1..=100000"
        );
        assert_eq!(
            refused(PartialSettings {
                timeout_s: Some(0.0),
                ..p()
            }),
            "timeout_s: 0 is outside (0, 86400] seconds"
        );
        assert_eq!(
            refused(PartialSettings {
                min_seconds: Some(-1.0),
                ..p()
            }),
            "min_seconds: -1 is outside [0, 3600] seconds"
        );
        assert_eq!(
            refused(PartialSettings {
                max_seconds: Some(f64::NAN),
                ..p()
            }),
            "max_seconds: NaN is outside [0, 86400] seconds"
        );
        assert_eq!(
            refused(PartialSettings {
                target_ci_pct: Some(-1.0),
                ..p()
            }),
            "target_ci_pct: -1 is outside [0, 100] percent (0: no target)"
        );
    }

    #[test]
    fn given_settings_win_and_the_rest_are_stored_as_not_given() {
        let overrides = PartialSettings {
            timeout_s: Some(5.0),
            ..Default::default()
        };
        let run = PartialSettings {
            timeout_s: Some(30.0),
            warmup: Some(1),
            ..Default::default()
        };
        let both = overrides.or(run);
        assert_eq!((both.timeout_s, both.warmup), (Some(5.0), Some(1)));
        assert_eq!(
            serde_json::to_string(&both).unwrap(),
            r#"{"warmup":1,"min_iterations":null,"min_seconds":null,"max_iterations":null,"timeout_s":5.0,"target_ci_pct":null,"max_seconds":null}"#
        );
        let back: PartialSettings = serde_json::from_str(r#"{"warmup":1,"timeout_s":5}"#).unwrap();
        assert_eq!(back, both);
    }
}
