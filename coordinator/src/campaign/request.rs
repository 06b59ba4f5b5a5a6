//! What a campaign runs, and the form it is stored in (`campaigns.spec_json`) so a resumed
//! campaign can be planned again.

use super::selection::Selection;
use crate::link::grpc::DEFAULT_CONNECT_TIMEOUT;
use crate::store::AgentRow;
use gpufleet_kernels::SuiteRun;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Tuning of failure handling: how long reaching an agent may take, and how often it is tried.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// How long one attempt to reach an agent may take before it counts as unreachable (the
    /// connection and its Describe answer; `gpufleet --connect-timeout-s`).
    pub connect_timeout: Duration,
    /// Extra attempts after the first when the agent is unreachable.
    pub retries: u32,
    /// Pause before the first retry; doubled each time.
    pub backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            retries: 2,
            backoff: Duration::from_millis(500),
        }
    }
}

impl RetryPolicy {
    /// The default policy with `connect_timeout`.
    pub fn connecting_within(connect_timeout: Duration) -> RetryPolicy {
        RetryPolicy {
            connect_timeout,
            ..RetryPolicy::default()
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct CampaignRequest {
    /// Suite name (or `adhoc`), stored with the campaign.
    pub suite: String,
    pub description: String,
    pub runs: Vec<SuiteRun>,
    pub agents: Vec<AgentRow>,
    pub selection: Selection,
    pub retry: RetryPolicy,
}

/// A request as stored in `campaigns.spec_json`: the runs, the agents by name and the selection
/// (its fields at the top level). Enough to plan the campaign again on resume.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StoredRequest {
    pub runs: Vec<SuiteRun>,
    /// Agent names; resolved against the agents registered when the campaign is planned again.
    pub agents: Vec<String>,
    #[serde(flatten, deserialize_with = "gpufleet_kernels::flattened")]
    pub selection: Selection,
}

impl StoredRequest {
    /// The stored form of `req`.
    pub fn of(req: &CampaignRequest) -> StoredRequest {
        StoredRequest {
            runs: req.runs.clone(),
            agents: req.agents.iter().map(|a| a.name.clone()).collect(),
            selection: req.selection.clone(),
        }
    }

    /// As JSON text for `campaigns.spec_json` (plain data with string keys: cannot fail).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a stored request serialises to JSON")
    }

    /// Parses a stored spec.
    ///
    /// # Errors
    /// A message naming the field that does not parse (`runs[2].warmup`).
    pub fn from_json(spec: &serde_json::Value) -> Result<StoredRequest, String> {
        gpufleet_kernels::from_json_value(spec).map_err(|e| format!("stored campaign spec: {e}"))
    }

    /// Rebuilds the request with the agents as they are now (agents no longer registered are
    /// left out).
    pub fn into_request(
        self,
        suite: &str,
        description: &str,
        agents: &[AgentRow],
    ) -> CampaignRequest {
        CampaignRequest {
            suite: suite.to_string(),
            description: description.to_string(),
            runs: self.runs,
            agents: agents
                .iter()
                .filter(|a| self.agents.contains(&a.name))
                .cloned()
                .collect(),
            selection: self.selection,
            retry: RetryPolicy::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_request_that_does_not_parse_names_the_field() {
        let run = serde_json::json!({"kernel": "copy", "variants": null, "params": {},
            "dtype": "f32", "mode": "compute_only", "warmup": "three", "env": {}});
        let e = StoredRequest::from_json(&serde_json::json!({"runs": [run]})).unwrap_err();
        assert!(
            e.starts_with("stored campaign spec: field `runs[0].warmup`: invalid type"),
            "{e}"
        );
        let e = StoredRequest::from_json(&serde_json::json!({"timeout_s": "soon"})).unwrap_err();
        assert!(
            e.starts_with("stored campaign spec: field `timeout_s`: invalid type"),
            "{e}"
        );
    }
}
