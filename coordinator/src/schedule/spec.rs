//! What a schedule runs, stored as the schedule's `spec_json`, and the campaign request it stands
//! for when a slot fires.

use crate::campaign::request::{CampaignRequest, RetryPolicy};
use crate::campaign::selection::{CampaignOptions, Selection};
use crate::store::AgentRow;
use gpufleet_kernels::Suite;
use serde::{Deserialize, Serialize};

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
    /// Backends, kernels, environment and setting overrides of every campaign it fires (stored at
    /// the top level, as `campaigns.spec_json` stores them).
    #[serde(flatten, deserialize_with = "gpufleet_kernels::flattened")]
    pub options: CampaignOptions,
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
            options: spec.options.clone(),
            ..Selection::default()
        },
        retry: RetryPolicy::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stored_form_keeps_its_fields_at_the_top_level() {
        // As `schedule add` stored it before the options were shared with a campaign's selection.
        let stored = serde_json::json!({
            "suite": "smoke", "agents": ["rig"], "all_agents": false, "backends": ["cpu"],
            "kernels": [], "env": {"POCL_X": "1"}, "env_sets": [], "timeout_s": 30.0,
            "target_ci_pct": null, "max_seconds": null
        });
        let spec: ScheduleSpec = serde_json::from_value(stored.clone()).unwrap();
        assert_eq!(spec.options.backends, ["cpu"]);
        assert_eq!(spec.options.timeout_s, Some(30.0));
        assert_eq!(serde_json::to_value(&spec).unwrap(), stored);
        let e = gpufleet_kernels::from_json_value::<ScheduleSpec>(&serde_json::json!({
            "suite": "smoke", "timeout_s": "soon"
        }))
        .unwrap_err();
        assert!(e.to_string().contains("timeout_s"), "{e}");
    }
}
