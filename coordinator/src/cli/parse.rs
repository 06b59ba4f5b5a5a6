//! Command-line values that are lists of `NAME=VALUE` or environment sets.

use super::args::RunOverrides;
use crate::campaign::selection::{CampaignOptions, EnvSet};
use anyhow::bail;
use std::collections::BTreeMap;

/// Parses `NAME=VALUE` items of the option `--{what}`.
///
/// # Errors
/// The first item that is not `NAME=VALUE`, naming the option.
pub fn parse_kv(items: &[String], what: &str) -> anyhow::Result<BTreeMap<String, String>> {
    items
        .iter()
        .map(|s| match s.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => bail!("--{what} `{s}` must be NAME=VALUE"),
        })
        .collect()
}

/// Parses `--env-set` values; names must be unique.
///
/// # Errors
/// The first bad value, naming `--env-set`.
pub fn parse_env_sets(values: &[String]) -> anyhow::Result<Vec<EnvSet>> {
    let mut sets: Vec<EnvSet> = Vec::new();
    for v in values {
        let set = EnvSet::parse(v).map_err(|e| anyhow::anyhow!("--env-set: {e}"))?;
        if sets.iter().any(|s| s.name == set.name) {
            anyhow::bail!("--env-set: the name {:?} is used twice", set.name);
        }
        sets.push(set);
    }
    Ok(sets)
}

/// What `run` and `schedule add` apply to every run: `backends` and `kernels`, and the overrides
/// of `o` parsed.
///
/// # Errors
/// The first bad `--env` or `--env-set` value, naming its option.
pub fn campaign_options(
    o: &RunOverrides,
    backends: &[String],
    kernels: &[String],
) -> anyhow::Result<CampaignOptions> {
    let (env, env_sets) = env_overrides(o)?;
    Ok(CampaignOptions {
        backends: backends.to_vec(),
        kernels: kernels.to_vec(),
        env,
        env_sets,
        timeout_s: o.timeout_s,
        target_ci_pct: o.target_ci_pct,
        max_seconds: o.max_seconds,
    })
}

/// The `--env` and `--env-set` values of `o`, parsed.
///
/// # Errors
/// The first bad value, naming its option.
fn env_overrides(o: &RunOverrides) -> anyhow::Result<(BTreeMap<String, String>, Vec<EnvSet>)> {
    let env = parse_kv(&o.env, "env")?;
    let sets = parse_env_sets(&o.env_sets)?;
    // Refused here, before a campaign is made, by the allowlist every agent applies.
    for (option, map) in
        std::iter::once(("--env", &env)).chain(sets.iter().map(|s| ("--env-set", &s.env)))
    {
        for (key, value) in map {
            gpufleet_kernels::env::check_override(key, value)
                .map_err(|e| anyhow::anyhow!("{option}: {e}"))?;
        }
    }
    Ok((env, sets))
}
