//! Conversions from the wire to the store: a `RunResult` (and its power samples) to the store's
//! record, and the error result the coordinator writes itself when an agent gave none.

use crate::store::{JobRow, PowerPoint, ResultRecord};
use gpufleet_proto::v1 as pb;
use serde_json::{Value, json};

/// Who ran a result, for the store's foreign keys.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Origin {
    pub agent_id: i64,
    pub device_row_id: Option<i64>,
    pub campaign_id: Option<i64>,
    pub job_id: Option<i64>,
}

impl Origin {
    /// The origin of a stored job's result.
    pub fn of_job(job: &JobRow) -> Origin {
        Origin {
            agent_id: job.agent_id,
            device_row_id: job.device_row_id,
            campaign_id: Some(job.campaign_id),
            job_id: Some(job.id),
        }
    }
}

fn map_value<V: serde::Serialize>(m: &std::collections::HashMap<String, V>) -> Value {
    let sorted: std::collections::BTreeMap<_, _> = m.iter().collect();
    serde_json::to_value(sorted).expect("a string-keyed map serialises to JSON")
}

/// Flattens `r` and the power samples of its stream into a store record.
pub fn to_record(
    r: &pb::RunResult,
    power: &[pb::PowerSample],
    spec_key: &str,
    origin: Origin,
) -> ResultRecord {
    let spec = r.spec.clone().unwrap_or_default();
    let stats = r.stats;
    // Agents before the robust figures send zeros: none then (a quiet run's robust CV can be 0,
    // but not its quartiles).
    let robust = stats.filter(|s| s.p75_s > 0.0);
    let metric = r.metric.as_ref();
    let energy = r.energy.as_ref();
    ResultRecord {
        run_id: r.run_id.clone(),
        campaign_id: origin.campaign_id,
        job_id: origin.job_id,
        agent_id: origin.agent_id,
        device_row_id: origin.device_row_id,
        device_id: r.device_id.clone(),
        backend: r.backend.clone(),
        spec_key: spec_key.to_string(),
        kernel: spec.kernel.clone(),
        variant: r.variant.clone(),
        params: r.params.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        dtype: r.dtype.clone(),
        mode: spec.mode().name().to_string(),
        status: r.status().name().to_string(),
        message: r.message.clone(),
        metric_kind: metric.map(|m| m.kind.clone()),
        metric_unit: metric.map(|m| m.unit.clone()),
        metric_value: metric.map(|m| m.value),
        higher_is_better: metric.map(|m| m.higher_is_better),
        pct_of_peak: metric.and(r.pct_of_peak),
        peak_source: r.peak_source.clone(),
        median_s: stats.map(|s| s.median_s),
        p10_s: stats.map(|s| s.p10_s),
        p90_s: stats.map(|s| s.p90_s),
        min_s: stats.map(|s| s.min_s),
        max_s: stats.map(|s| s.max_s),
        mean_s: stats.map(|s| s.mean_s),
        stddev_s: stats.map(|s| s.stddev_s),
        cv: stats.map(|s| s.cv),
        // Agents before the interval send zeros: no interval then.
        ci_low_s: stats.and_then(|s| (s.median_ci_high_s > 0.0).then_some(s.median_ci_low_s)),
        ci_high_s: stats.and_then(|s| (s.median_ci_high_s > 0.0).then_some(s.median_ci_high_s)),
        target_ci_pct: stats.map(|s| s.target_ci_pct),
        noisy: false,
        robust_cv: robust.map(|s| s.robust_cv),
        p25_s: robust.map(|s| s.p25_s),
        p75_s: robust.map(|s| s.p75_s),
        upper_fence_s: robust.map(|s| s.upper_fence_s),
        outliers_high: robust.map(|s| s.outliers_high),
        iterations: stats.map(|s| s.count as u64).unwrap_or(0),
        validation: r
            .validation
            .as_ref()
            .map(|v| json!(v))
            .unwrap_or(Value::Null),
        config: map_value(&r.config),
        fingerprint: r
            .fingerprint
            .as_ref()
            .map(|f| {
                let mut v = json!(f);
                v["env"] = map_value(&f.env);
                v
            })
            .unwrap_or(Value::Null),
        stderr_tail: r.stderr_tail.clone(),
        signal: (r.signal != 0).then_some(r.signal),
        started_at: r.started_unix_s,
        wall_s: r.wall_s,
        created_at: None,
        times: r.times_s.clone(),
        // With the kernel window on the agent's monotonic clock, so the power trace can show it.
        energy: r
            .energy
            .as_ref()
            .map(|e| {
                let mut v = json!(e);
                v["window_begin_ns"] = json!(r.window_begin_ns);
                v["window_end_ns"] = json!(r.window_end_ns);
                v
            })
            .unwrap_or(Value::Null),
        energy_j: energy.map(|e| e.joules).filter(|j| *j > 0.0),
        avg_watts: energy.map(|e| e.avg_watts).filter(|w| *w > 0.0),
        metric_per_watt: energy.map(|e| e.metric_per_watt).filter(|v| *v > 0.0),
        joules_per_unit: energy.map(|e| e.joules_per_unit).filter(|v| *v > 0.0),
        power: power.iter().map(PowerPoint::from).collect(),
        samples_compacted_at: None,
        power_compacted_at: None,
    }
}

/// A result the coordinator writes itself when the agent could not give
/// one (agent unreachable, refused the spec).
pub fn error_result(
    run_id: &str,
    spec: &pb::RunSpec,
    backend: &str,
    message: String,
) -> pb::RunResult {
    status_result(run_id, spec, backend, pb::RunStatus::Error, message)
}

/// A result the coordinator makes for a run that produced none: `status` with `message`.
pub fn status_result(
    run_id: &str,
    spec: &pb::RunSpec,
    backend: &str,
    status: pb::RunStatus,
    message: String,
) -> pb::RunResult {
    pb::RunResult {
        run_id: run_id.to_string(),
        spec: Some(spec.clone()),
        status: status as i32,
        message,
        device_id: spec.device_id.clone(),
        backend: backend.to_string(),
        variant: spec.variant.clone(),
        params: spec.params.clone(),
        dtype: spec.dtype.clone(),
        started_unix_s: crate::time::now(),
        ..Default::default()
    }
}
