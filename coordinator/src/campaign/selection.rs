//! What a campaign narrows and overrides beyond its runs: [`Selection`] for one campaign, and the
//! [`CampaignOptions`] part of it a schedule keeps (`ScheduleSpec` in `schedule/spec.rs`) for every
//! campaign it fires. Below `plan.rs`, `request.rs` and the schedule, which all read it.
//!
//! Both are stored as JSON (a campaign's `spec_json`, a schedule's `spec_json`) with the options'
//! fields at the top level, so their field names are part of the stored format.

use gpufleet_kernels::PartialSettings;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Restrictions and overrides from the command line; empty means no restriction.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Selection {
    /// Only these device ids.
    pub devices: Vec<String>,
    /// What a schedule would keep too: backends, kernels, environment, setting overrides.
    #[serde(flatten, deserialize_with = "gpufleet_kernels::flattened")]
    pub options: CampaignOptions,
    /// Minimum kernel window for energy figures (see RunSpec.power_window_s); `None`: the agent
    /// decides (its automatic window, from the device's power sensor).
    pub power_window_s: Option<f64>,
}

/// What every run of a campaign gets, whether the command line or a schedule asked: filters,
/// environment overrides and setting overrides.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CampaignOptions {
    /// Only devices of these backends.
    pub backends: Vec<String>,
    /// Only these kernels.
    pub kernels: Vec<String>,
    /// Overrides added to every run's environment.
    pub env: BTreeMap<String, String>,
    /// An environment matrix: every run is planned once per set, with the set's overrides on top
    /// of `env`, and each set's results are their own comparison rows and regression series
    /// (the spec key ends in `@NAME`). Empty: one run with `env` alone.
    pub env_sets: Vec<EnvSet>,
    /// Replaces every run's timeout when set.
    pub timeout_s: Option<f64>,
    /// Replaces every run's interval target (percent; 0: none) when set.
    pub target_ci_pct: Option<f64>,
    /// Replaces every run's measuring budget (seconds) when set.
    pub max_seconds: Option<f64>,
}

impl CampaignOptions {
    /// The settings these options replace in every run, the others not given.
    pub fn overrides(&self) -> PartialSettings {
        PartialSettings {
            timeout_s: self.timeout_s,
            target_ci_pct: self.target_ci_pct,
            max_seconds: self.max_seconds,
            ..PartialSettings::default()
        }
    }
}

/// A named set of environment overrides (one row of an environment matrix).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EnvSet {
    /// `[A-Za-z0-9_.-]+`; appended to the spec key as `@NAME`.
    pub name: String,
    pub env: BTreeMap<String, String>,
}

impl EnvSet {
    /// Parses `NAME` or `NAME:KEY=VALUE,KEY=VALUE` (`NAME:` alone is the set without overrides).
    ///
    /// # Errors
    /// A message naming what is wrong (`env set name`, `env set entry`).
    pub fn parse(text: &str) -> Result<EnvSet, String> {
        let (name, rest) = text.split_once(':').unwrap_or((text, ""));
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-')
        {
            return Err(format!(
                "env set name {name:?} must be non-empty [A-Za-z0-9_.-] (form: NAME:KEY=VALUE,KEY=VALUE)"
            ));
        }
        let mut env = BTreeMap::new();
        for entry in rest.split(',').filter(|e| !e.is_empty()) {
            let Some((k, v)) = entry.split_once('=') else {
                return Err(format!("env set {name}: entry {entry:?} is not KEY=VALUE"));
            };
            if k.is_empty() {
                return Err(format!("env set {name}: entry {entry:?} has an empty key"));
            }
            env.insert(k.to_string(), v.to_string());
        }
        Ok(EnvSet {
            name: name.to_string(),
            env,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stored_form_keeps_its_field_names_at_the_top_level() {
        let sel = Selection {
            devices: vec!["cpu:0".into()],
            options: CampaignOptions {
                backends: vec!["cpu".into()],
                timeout_s: Some(5.0),
                ..Default::default()
            },
            power_window_s: None,
        };
        let v = serde_json::to_value(&sel).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "backends",
                "devices",
                "env",
                "env_sets",
                "kernels",
                "max_seconds",
                "power_window_s",
                "target_ci_pct",
                "timeout_s"
            ]
        );
        assert_eq!(serde_json::from_value::<Selection>(v).unwrap(), sel);
        let overrides = sel.options.overrides();
        assert_eq!((overrides.timeout_s, overrides.warmup), (Some(5.0), None));
    }
}
