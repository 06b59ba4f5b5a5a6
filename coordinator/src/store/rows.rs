//! What goes into the store and what comes out: one struct per table row, plus the inputs and
//! filters of the calls that write or list them.
//!
//! Rows derive `Serialize` so the CLI and the dashboard print them as JSON directly; JSON columns come
//! back as `serde_json::Value` (objects, not strings), and the agent token is never serialised.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An agent the coordinator talks to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentRow {
    /// Row id; results and devices point at it.
    pub id: i64,
    /// Unique short name the user picked (`[A-Za-z0-9_.-]{1,64}`).
    pub name: String,
    /// How the coordinator reaches it.
    pub kind: AgentKind,
    /// gRPC endpoint, `http://` or `https://`; empty for a dial-in agent. `agents add` refuses
    /// credentials in it; one stored by an older gpufleet is shown without them.
    #[serde(serialize_with = "url_without_credentials")]
    pub url: String,
    /// Bearer token for agents listening beyond loopback; kept out of JSON output.
    #[serde(skip_serializing)]
    pub token: Option<String>,
    /// When it was added (or last revived after a removal), unix seconds.
    pub added_at: f64,
    /// Dial-in: since when a serve holds its stream; `None` while it is not connected.
    pub connected_since: Option<f64>,
    /// Dial-in: when a serve last saw its stream alive.
    pub last_seen: Option<f64>,
    /// Dial-in: the address its stream came from.
    pub remote_addr: Option<String>,
    /// Dial-in: the version its Hello gave.
    pub agent_version: Option<String>,
    /// Direct over https: the SHA-256 its certificate must have.
    pub tls_pin: Option<String>,
    /// Direct over https: the CA (PEM) its certificate must chain to; not in JSON output.
    #[serde(skip_serializing)]
    pub tls_ca: Option<String>,
    /// Dial-in: the HTTP API of the serve that holds its stream (`gpufleet power` reads its
    /// live samples there); `None` while it is not connected.
    pub api_url: Option<String>,
    /// Dial-in: the serve (`pid@host`) that holds its stream, the one that runs its jobs; `None`
    /// while it is not connected.
    pub attached_to: Option<String>,
}

/// Serialises a URL with any `user:password@` removed, so credentials never reach JSON output.
fn url_without_credentials<S: serde::Serializer>(url: &str, s: S) -> Result<S::Ok, S::Error> {
    let shown = match url.split_once("://") {
        Some((scheme, rest)) => {
            let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            match rest[..end].rfind('@') {
                Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
                None => url.to_string(),
            }
        }
        None => url.to_string(),
    };
    s.serialize_str(&shown)
}

/// How the coordinator reaches an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum AgentKind {
    /// The coordinator dials the agent's `--listen` address.
    #[serde(rename = "direct")]
    Direct,
    /// The agent dials `gpufleet serve --fleet-listen` and holds a stream.
    #[serde(rename = "dial-in")]
    DialIn,
}

impl AgentKind {
    /// The name stored and shown (`direct`, `dial-in`).
    pub fn name(self) -> &'static str {
        match self {
            AgentKind::Direct => "direct",
            AgentKind::DialIn => "dial-in",
        }
    }
}

/// A device as an agent describes it; the input of [`Store::upsert_device`](super::open::Store::upsert_device).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceRecord {
    /// The agent's stable id for it (`backend:pci-bus-id` or a UUID); unique per agent.
    pub device_id: String,
    /// Backend that exposes it (`cpu`, `opencl`, `vulkan`, `hip`).
    pub backend: String,
    /// Vendor name as reported.
    pub vendor: String,
    /// Marketing or driver name (`Radeon RX 580`).
    pub name: String,
    /// ISA / architecture (`gfx803`, `sm_90`, `x86_64`).
    pub arch: String,
    /// PCI bus id, the join key with power sensors; empty when there is none.
    pub pci_bus_id: String,
    /// The agent's full description of the device (clocks, memory, peaks…), as JSON text.
    pub info_json: String,
}

/// A stored device, with the agent it belongs to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceRow {
    /// Row id; results and jobs point at it.
    pub id: i64,
    /// Row id of the agent.
    pub agent_id: i64,
    /// Name of the agent.
    pub agent: String,
    /// See [`DeviceRecord::device_id`].
    pub device_id: String,
    /// See [`DeviceRecord::backend`].
    pub backend: String,
    /// See [`DeviceRecord::vendor`].
    pub vendor: String,
    /// See [`DeviceRecord::name`].
    pub name: String,
    /// See [`DeviceRecord::arch`].
    pub arch: String,
    /// See [`DeviceRecord::pci_bus_id`].
    pub pci_bus_id: String,
    /// The latest description the agent gave.
    pub info: Value,
    /// When the coordinator first saw it, unix seconds.
    pub first_seen: f64,
    /// When the agent last reported it, unix seconds.
    pub last_seen: f64,
}

/// Where a campaign is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CampaignState {
    /// Jobs are queued or running.
    Running,
    /// Every job finished (whatever its results' statuses).
    Done,
    /// The campaign could not go on (e.g. every agent unreachable).
    Failed,
    /// The coordinator stopped (cancelled or crashed) before it finished.
    Interrupted,
}

impl CampaignState {
    /// Every state, in life order.
    pub const ALL: [CampaignState; 4] = [
        CampaignState::Running,
        CampaignState::Done,
        CampaignState::Failed,
        CampaignState::Interrupted,
    ];

    /// The name stored in the database and printed by the CLI.
    pub fn name(self) -> &'static str {
        match self {
            CampaignState::Running => "running",
            CampaignState::Done => "done",
            CampaignState::Failed => "failed",
            CampaignState::Interrupted => "interrupted",
        }
    }

    /// The state called `name`, or `None` for anything else.
    pub fn parse(name: &str) -> Option<CampaignState> {
        CampaignState::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Whether the campaign is over (it gets a `finished_at`).
    pub fn is_terminal(self) -> bool {
        self != CampaignState::Running
    }
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting for its device.
    Queued,
    /// Sent to the agent; each entry into this state counts one attempt.
    Running,
    /// Its result is stored (whatever the result's status).
    Done,
    /// Gave up: no result after the allowed attempts, or the agent refused the spec.
    Failed,
    /// The agent or the coordinator went away mid-run; may be retried.
    Interrupted,
}

impl JobState {
    /// Every state, in life order.
    pub const ALL: [JobState; 5] = [
        JobState::Queued,
        JobState::Running,
        JobState::Done,
        JobState::Failed,
        JobState::Interrupted,
    ];

    /// The name stored in the database and printed by the CLI.
    pub fn name(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Failed => "failed",
            JobState::Interrupted => "interrupted",
        }
    }

    /// The state called `name`, or `None` for anything else.
    pub fn parse(name: &str) -> Option<JobState> {
        JobState::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// How many jobs of a campaign are in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct JobCounts {
    /// Jobs waiting for their device.
    pub queued: i64,
    /// Jobs sent to an agent.
    pub running: i64,
    /// Jobs with a stored result.
    pub done: i64,
    /// Jobs given up on.
    pub failed: i64,
    /// Jobs cut short by a failure, not yet retried.
    pub interrupted: i64,
}

impl JobCounts {
    /// All jobs of the campaign.
    pub fn total(&self) -> i64 {
        self.queued + self.running + self.done + self.failed + self.interrupted
    }

    /// Jobs no longer waiting or running (done, failed or interrupted).
    pub fn finished(&self) -> i64 {
        self.total() - self.queued - self.running
    }

    /// The counter for `state`.
    pub fn get(&self, state: JobState) -> i64 {
        match state {
            JobState::Queued => self.queued,
            JobState::Running => self.running,
            JobState::Done => self.done,
            JobState::Failed => self.failed,
            JobState::Interrupted => self.interrupted,
        }
    }

    pub(super) fn add(&mut self, state: JobState, n: i64) {
        let slot = match state {
            JobState::Queued => &mut self.queued,
            JobState::Running => &mut self.running,
            JobState::Done => &mut self.done,
            JobState::Failed => &mut self.failed,
            JobState::Interrupted => &mut self.interrupted,
        };
        *slot += n;
    }
}

/// A campaign with its progress.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CampaignRow {
    /// Row id.
    pub id: i64,
    /// Name of the suite it runs.
    pub suite: String,
    /// Free text the user gave.
    pub description: String,
    /// Where it is in its life.
    pub state: CampaignState,
    /// Unix seconds.
    pub created_at: f64,
    /// Set when the state became terminal.
    pub finished_at: Option<f64>,
    /// The campaign's full specification (suite, agents, devices, options) as given.
    pub spec: Value,
    /// Jobs per state.
    pub jobs: JobCounts,
    /// Stored results per status (`ok`, `invalid`, `crashed`…); statuses with none are absent.
    pub results: BTreeMap<String, i64>,
}

/// Input of [`Store::add_job`](super::open::Store::add_job); the job starts `queued` with no attempts.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    /// Campaign it belongs to.
    pub campaign_id: i64,
    /// Agent that will run it.
    pub agent_id: i64,
    /// Device row, when the device is in the inventory.
    pub device_row_id: Option<i64>,
    /// Comparability key of the work (kernel, variant, parameters, dtype, mode).
    pub spec_key: String,
    /// The run spec to send, as JSON text.
    pub spec_json: String,
    /// Run id the agent's result will carry; unique over all jobs.
    pub run_id: String,
}

/// A job of a campaign.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobRow {
    /// Row id.
    pub id: i64,
    /// Campaign it belongs to.
    pub campaign_id: i64,
    /// Agent that runs it.
    pub agent_id: i64,
    /// Name of that agent.
    pub agent: String,
    /// Device row, when known.
    pub device_row_id: Option<i64>,
    /// Comparability key of the work.
    pub spec_key: String,
    /// The run spec.
    pub spec: Value,
    /// Run id of its result.
    pub run_id: String,
    /// Where it is in its life.
    pub state: JobState,
    /// How many times it entered `running`.
    pub attempts: u32,
    /// Why the last attempt failed or was interrupted.
    pub error: Option<String>,
    /// Last state change, unix seconds.
    pub updated_at: f64,
    /// For a confirmation rerun: the suspect result it reruns.
    pub confirms_result_id: Option<i64>,
}

/// One run's result as the coordinator stores it: every column of `results`, plus the raw samples.
///
/// `Deserialize` lets results be imported from JSON exports. This is the one shape of a result on
/// the coordinator's side: listings, the comparison, the exports and the dashboard are views over it
/// (a [`ResultRow`] adds only who ran it), never copies of its fields.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResultRecord {
    /// The run's unique id; storing the same run id twice stores it once.
    pub run_id: String,
    /// Campaign that asked for it; `None` for an ad-hoc `gpufleet run`.
    pub campaign_id: Option<i64>,
    /// Job it fulfils; that job becomes `done` in the same transaction.
    pub job_id: Option<i64>,
    /// Agent that ran it.
    pub agent_id: i64,
    /// Device row, when the device is in the inventory.
    pub device_row_id: Option<i64>,
    /// The agent's device id, kept even without a device row.
    pub device_id: String,
    /// Backend that ran it.
    pub backend: String,
    /// Comparability key (kernel, variant, parameters, dtype, mode).
    pub spec_key: String,
    /// Kernel name.
    pub kernel: String,
    /// Kernel variant.
    pub variant: String,
    /// Kernel parameters (`n`, `m`, `k`…).
    pub params: BTreeMap<String, i64>,
    /// Element type (`f32`, `f16`).
    pub dtype: String,
    /// `compute` or with host transfers.
    pub mode: String,
    /// `ok`, `invalid`, `compile_error`, `unsupported`, `crashed`, `timed_out`, `cancelled`, `error`,
    /// `out_of_memory`.
    pub status: String,
    /// Human explanation of the status; empty for `ok`.
    pub message: String,
    /// What the metric measures (`flops`, `bandwidth`, `latency`).
    pub metric_kind: Option<String>,
    /// Its unit (`GFLOP/s`, `GB/s`, `us`).
    pub metric_unit: Option<String>,
    /// Its value.
    pub metric_value: Option<f64>,
    /// Whether a larger value is better (throughput) or worse (latency).
    pub higher_is_better: Option<bool>,
    /// Metric as a percentage of the device's theoretical peak.
    pub pct_of_peak: Option<f64>,
    /// Where that peak came from (`spec table`, `cpu table: …`); empty when unknown.
    #[serde(default)]
    pub peak_source: String,
    /// Median per-iteration device time, seconds.
    pub median_s: Option<f64>,
    /// 10th percentile, seconds.
    pub p10_s: Option<f64>,
    /// 90th percentile, seconds.
    pub p90_s: Option<f64>,
    /// Fastest iteration, seconds.
    pub min_s: Option<f64>,
    /// Slowest iteration, seconds.
    pub max_s: Option<f64>,
    /// Mean, seconds.
    pub mean_s: Option<f64>,
    /// Standard deviation, seconds.
    pub stddev_s: Option<f64>,
    /// Coefficient of variation (stddev / mean).
    pub cv: Option<f64>,
    /// 95% confidence interval of the median, seconds: low end.
    #[serde(default)]
    pub ci_low_s: Option<f64>,
    /// 95% confidence interval of the median, seconds: high end.
    #[serde(default)]
    pub ci_high_s: Option<f64>,
    /// The interval target the run measured to, percent of the median; 0: none.
    #[serde(default)]
    pub target_ci_pct: Option<f64>,
    /// The robust spread above 12.5% or the interval wider than its target
    /// ([`gpufleet_kernels::NoiseFigures`]); set by the store on insert from the figures here,
    /// whatever the caller says.
    #[serde(default)]
    pub noisy: bool,
    /// 1.4826 × MAD / median of the iteration times; `None` from older agents.
    #[serde(default)]
    pub robust_cv: Option<f64>,
    /// First quartile of the iteration times, seconds.
    #[serde(default)]
    pub p25_s: Option<f64>,
    /// Third quartile of the iteration times, seconds.
    #[serde(default)]
    pub p75_s: Option<f64>,
    /// Tukey's upper fence, Q3 + 1.5 × IQR, seconds: iterations above it are high outliers.
    #[serde(default)]
    pub upper_fence_s: Option<f64>,
    /// Iterations above the upper fence.
    #[serde(default)]
    pub outliers_high: Option<u32>,
    /// Timed iterations.
    pub iterations: u64,
    /// Validation outcome (max error, tolerance…); `null` when not validated.
    pub validation: Value,
    /// Tuned configuration used (work-group size, tile…).
    pub config: Value,
    /// Environment fingerprint (agent, driver, API versions, env overrides, clocks).
    pub fingerprint: Value,
    /// Last lines of the worker's stderr, for crashes.
    pub stderr_tail: String,
    /// Signal that killed the worker, if one did.
    pub signal: Option<i32>,
    /// When the run started on the agent, unix seconds.
    pub started_at: f64,
    /// Wall time of the whole run on the agent, seconds.
    pub wall_s: f64,
    /// When the coordinator stored it, unix seconds; `None` on insert means the store's clock.
    pub created_at: Option<f64>,
    /// Raw per-iteration device times, seconds. Empty in listings unless samples were asked for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub times: Vec<f64>,
    /// The agent's Energy figures as JSON (`null` when the device had no power sensor).
    pub energy: Value,
    /// Energy over the kernel window, joules.
    pub energy_j: Option<f64>,
    /// Average power over the kernel window, watts.
    pub avg_watts: Option<f64>,
    /// The metric per watt (GFLOP/s/W or GB/s/W).
    pub metric_per_watt: Option<f64>,
    /// Joules per GFLOP or per GB.
    pub joules_per_unit: Option<f64>,
    /// The run's power trace. Empty in listings unless samples were asked for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub power: Vec<PowerPoint>,
    /// When `gpufleet db compact` dropped the raw iteration times (the summary stays).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples_compacted_at: Option<f64>,
    /// When `gpufleet db compact` dropped the power trace (the energy figures stay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_compacted_at: Option<f64>,
}

impl ResultRecord {
    /// Half-width of the median's interval in percent of the median, where both are known.
    pub fn ci_pct(&self) -> Option<f64> {
        gpufleet_kernels::ci_pct(self.ci_low_s?, self.ci_high_s?, self.median_s?)
    }

    /// The figures the noise rule judges this result by.
    pub fn noise(&self) -> gpufleet_kernels::NoiseFigures {
        gpufleet_kernels::NoiseFigures::of(
            self.robust_cv,
            self.p25_s.zip(self.p75_s),
            self.median_s,
            self.ci_pct(),
            self.target_ci_pct,
        )
    }

    /// ` (noisy: why)` after a figure of a noisy result, the rule's reason where its figures
    /// give one; empty for a quiet result.
    pub fn noisy_note(&self) -> String {
        match (self.noisy, self.noise().reason()) {
            (true, Some(why)) => format!(" (noisy: {why})"),
            (true, None) => " (noisy)".into(),
            (false, _) => String::new(),
        }
    }

    /// Whether this result is noisy by its figures ([`gpufleet_kernels::NoiseFigures`]); what
    /// the store writes into `noisy`.
    pub fn computed_noisy(&self) -> bool {
        self.noise().is_noisy()
    }

    /// Whether the run ended `ok` (only then does its metric count).
    pub fn is_ok(&self) -> bool {
        self.status == "ok"
    }

    /// The metric, when the run ended `ok`.
    pub fn ok_metric(&self) -> Option<f64> {
        self.metric_value.filter(|_| self.is_ok())
    }

    /// The metric's unit (empty when none); GOP/s for compute_peak's integer variants.
    pub fn unit(&self) -> &str {
        let unit = self.metric_unit.as_deref().unwrap_or("");
        gpufleet_kernels::variant_unit(&self.kernel, &self.variant, unit)
    }

    /// Whether a larger metric is better; throughput (true) when the run gave no metric.
    pub fn higher_is_better(&self) -> bool {
        self.higher_is_better.unwrap_or(true)
    }

    /// True when `% of peak` is above 100: the peak is wrong (a base clock, a missing boost
    /// table entry), so the figure must not be shown as a plain number.
    pub fn peak_suspect(&self) -> bool {
        self.pct_of_peak.is_some_and(|p| p > 100.0)
    }

    /// The environment set of the spec key (`…@NAME` of an env-matrix campaign); empty when none.
    pub fn env_set(&self) -> &str {
        self.spec_key.rsplit_once('@').map_or("", |(_, n)| n)
    }
}

/// One power sample of a run's trace: the type the agent's sampler and the wire share.
pub use gpufleet_proto::power::PowerPoint;

/// A stored result as listings return it: the record plus who and what ran it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ResultRow {
    /// Row id.
    pub id: i64,
    /// Every stored column; `created_at` is always `Some` here.
    #[serde(flatten)]
    pub record: ResultRecord,
    /// Name of the agent.
    pub agent: String,
    /// Device name, when the device row is known.
    pub device_name: Option<String>,
    /// Device vendor, when known.
    pub device_vendor: Option<String>,
    /// Device architecture, when known.
    pub device_arch: Option<String>,
    /// Suite of the campaign, when the result belongs to one.
    pub suite: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_names_round_trip() {
        for s in CampaignState::ALL {
            assert_eq!(CampaignState::parse(s.name()), Some(s));
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                Value::from(s.name()),
                "serde and name() agree"
            );
        }
        for s in JobState::ALL {
            assert_eq!(JobState::parse(s.name()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), Value::from(s.name()));
        }
        assert_eq!(CampaignState::parse("Running"), None);
        assert_eq!(JobState::parse(""), None);
        assert!(!CampaignState::Running.is_terminal());
        assert!(CampaignState::Interrupted.is_terminal());
    }

    #[test]
    fn job_counts_add_up() {
        let mut c = JobCounts::default();
        c.add(JobState::Done, 3);
        c.add(JobState::Failed, 1);
        c.add(JobState::Done, 2);
        assert_eq!(c.get(JobState::Done), 5);
        assert_eq!(c.get(JobState::Queued), 0);
        assert_eq!(c.total(), 6);
    }

    #[test]
    fn agent_json_has_no_token() {
        let a = AgentRow {
            id: 1,
            name: "rx580".into(),
            url: "http://10.0.0.2:50051".into(),
            token: Some("s3cret".into()),
            added_at: 1.5,
            kind: AgentKind::Direct,
            connected_since: None,
            last_seen: None,
            remote_addr: None,
            agent_version: None,
            tls_pin: None,
            tls_ca: None,
            api_url: None,
            attached_to: None,
        };
        let text = serde_json::to_string(&a).unwrap();
        assert!(!text.contains("s3cret"), "{text}");
        let old = AgentRow {
            url: "http://user:pw@10.0.0.2:50051/x".into(),
            ..a.clone()
        };
        let text = serde_json::to_string(&old).unwrap();
        assert!(text.contains("\"http://10.0.0.2:50051/x\""), "{text}");
        assert!(!text.contains("pw"), "{text}");
        assert!(!text.contains("token"), "{text}");
        assert!(text.contains("rx580"), "{text}");
    }
}
