//! What a schedule runs, stored as the schedule's `spec_json`, and the campaign request it stands
//! for when a slot fires.

use crate::campaign::plan::{EnvSet, Selection};
use crate::campaign::request::{CampaignRequest, RetryPolicy};
use crate::store::AgentRow;
use gpufleet_kernels::Suite;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a schedule runs; stored as the schedule's `spec_json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScheduleSpec {
    /// Suite name, or the absolute path of the suite file it was added from (for people).
    pub suite: String,
    /// The suite file's text as it was when the schedule was added: slots run this, so editing,
    /// moving or deleting the file later changes nothing (re-add the schedule to take a new
    /// version). `None` for a builtin suite, and for schedules stored before this field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suite_toml: Option<String>,
    /// SHA-256 of `suite_toml`, so `schedule list --json` can tell versions apart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suite_sha256: Option<String>,
    /// Agents by name; ignored when `all_agents`.
    pub agents: Vec<String>,
    /// Every agent registered when the slot fires.
    pub all_agents: bool,
    pub backends: Vec<String>,
    pub kernels: Vec<String>,
    /// Overrides for every run.
    pub env: BTreeMap<String, String>,
    /// Environment matrix: each set its own comparison row and regression series.
    pub env_sets: Vec<EnvSet>,
    pub timeout_s: Option<f64>,
    pub target_ci_pct: Option<f64>,
    pub max_seconds: Option<f64>,
}

/// The campaign request a schedule stands for, with the agents registered now.
///
/// # Errors
/// A message naming the schedule and what is wrong (unknown suite, unknown agent, no agents).
pub fn request_of(
    name: &str,
    spec: &ScheduleSpec,
    agents: &[AgentRow],
) -> Result<CampaignRequest, String> {
    let suite = match &spec.suite_toml {
        Some(text) => Suite::parse(text, &spec.suite),
        None => Suite::resolve(&spec.suite),
    }
    .map_err(|e| format!("schedule {name}: {e}"))?;
    let chosen: Vec<_> = if spec.all_agents {
        agents.to_vec()
    } else {
        let mut out = Vec::new();
        for a in &spec.agents {
            match agents.iter().find(|x| &x.name == a) {
                Some(x) => out.push(x.clone()),
                None => return Err(format!("schedule {name}: no agent named {a:?}")),
            }
        }
        out
    };
    if chosen.is_empty() {
        return Err(format!("schedule {name}: no agents to run on"));
    }
    Ok(CampaignRequest {
        suite: suite.name.clone(),
        description: format!("schedule {name}"),
        runs: suite.runs,
        agents: chosen,
        selection: Selection {
            backends: spec.backends.clone(),
            devices: Vec::new(),
            kernels: spec.kernels.clone(),
            env: spec.env.clone(),
            env_sets: spec.env_sets.clone(),
            timeout_s: spec.timeout_s,
            target_ci_pct: spec.target_ci_pct,
            max_seconds: spec.max_seconds,
            power_window_s: None,
        },
        retry: RetryPolicy::default(),
    })
}
