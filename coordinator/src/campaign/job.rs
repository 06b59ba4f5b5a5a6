//! One job of a campaign: its attempts over the agent's [`AgentLink`], retried while the agent is
//! unreachable or busy, and its result stored; a job as stored, and one that will not run again
//! failed with an error result. The executor (`execute.rs`) decides which jobs this process claims
//! and when; this file what happens to each.
//!
//! Why a job ended without a result of the agent's is a [`JobFailure`], carried with the result in
//! a [`JobOutcome`]: it, not the message, decides whether the job is `failed` and whether the
//! campaign is.

use super::plan::PlannedJob;
use super::progress::Reporter;
use super::request::RetryPolicy;
use crate::convert::{Origin, error_result, status_result, to_record};
use crate::db::Db;
use crate::link::{AgentLink, LinkError};
use crate::store::{JobRow, JobState, Store, StoreError};
use futures::StreamExt;
use gpufleet_proto::v1 as pb;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Why a job ended with an error result the coordinator wrote (the agent sent none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobFailure {
    /// The agent could not be reached (after the retries), was lost earlier in the campaign, or
    /// was removed. The job is `failed` and so is the campaign.
    AgentUnreachable,
    /// The agent refused the run (bad spec, bad token).
    Refused,
    /// The agent stayed busy through every retry.
    Busy,
    /// The job was interrupted `max_attempts` times; not retried again.
    AttemptsExhausted,
    /// The job's stored spec, or its device's stored description, does not parse: it fails
    /// naming the job and the field instead of running as something else.
    Unreadable,
}

/// One job's result, and why the coordinator wrote it when the agent did not.
#[derive(Debug, Clone, PartialEq)]
pub struct JobOutcome {
    pub result: pb::RunResult,
    /// `None` when the result is the agent's own (whatever its status).
    pub failure: Option<JobFailure>,
}

/// A claimed job, ready to run over its agent's link.
pub(super) struct Job {
    pub(super) id: i64,
    pub(super) run_id: String,
    pub(super) agent_id: i64,
    pub(super) device_row_id: Option<i64>,
    pub(super) link: Arc<dyn AgentLink>,
    pub(super) planned: PlannedJob,
}

impl Job {
    fn origin(&self, campaign_id: i64) -> Origin {
        Origin {
            agent_id: self.agent_id,
            device_row_id: self.device_row_id,
            campaign_id: Some(campaign_id),
            job_id: Some(self.id),
        }
    }

    fn error(&self, message: String) -> pb::RunResult {
        error_result(
            &self.run_id,
            &self.planned.spec,
            &self.planned.device.backend,
            message,
        )
    }

    fn unreachable(&self, message: String) -> pb::RunResult {
        status_result(
            &self.run_id,
            &self.planned.spec,
            &self.planned.device.backend,
            pb::RunStatus::Unreachable,
            message,
        )
    }
}

/// Stored devices by row id, each with the reason its description does not parse, if it does not.
pub(super) type Devices = BTreeMap<i64, (pb::Device, Option<String>)>;

/// A job as stored: its spec and device, and why it cannot run when either does not parse.
pub(super) struct StoredJob {
    /// The stored spec, or (when it does not parse) one naming the job's kernel and device, for
    /// the error result.
    pub(super) spec: pb::RunSpec,
    pub(super) device: pb::Device,
    /// The job, and the field that does not parse: such a job fails, it never runs as an empty
    /// spec.
    pub(super) unreadable: Option<String>,
}

/// `row` read with its device from `devices`; what does not parse is said in `unreadable`.
pub(super) fn stored_job(row: &JobRow, devices: &Devices) -> StoredJob {
    let (device, device_error) = match row.device_row_id.and_then(|id| devices.get(&id)) {
        Some((d, e)) => (Some(d.clone()), e.clone()),
        None => (None, None),
    };
    let (spec, spec_error) = match gpufleet_kernels::from_json_value::<pb::RunSpec>(&row.spec) {
        Ok(spec) => (spec, None),
        Err(e) => (
            pb::RunSpec {
                kernel: row
                    .spec_key
                    .split('/')
                    .next()
                    .unwrap_or_default()
                    .to_string(),
                device_id: device.as_ref().map(|d| d.id.clone()).unwrap_or_default(),
                ..Default::default()
            },
            Some(format!("its stored spec does not parse: {e}")),
        ),
    };
    let device = device.unwrap_or_else(|| pb::Device {
        id: spec.device_id.clone(),
        backend: spec.device_id.split(':').next().unwrap_or("").to_string(),
        ..Default::default()
    });
    let unreadable = spec_error
        .or(device_error)
        .map(|why| format!("job {} ({}): {why}", row.id, row.spec_key));
    StoredJob {
        spec,
        device,
        unreadable,
    }
}

/// Stores an error result for a job that will not run again and marks it `failed`.
pub(super) fn fail_job(
    s: &mut Store,
    row: &JobRow,
    spec: &pb::RunSpec,
    device: &pb::Device,
    failure: JobFailure,
    message: String,
) -> Result<JobOutcome, StoreError> {
    let status = match failure {
        JobFailure::AgentUnreachable => pb::RunStatus::Unreachable,
        _ => pb::RunStatus::Error,
    };
    let result = status_result(&row.run_id, spec, &device.backend, status, message);
    let record = to_record(&result, &[], &row.spec_key, Origin::of_job(row));
    if s.insert_result(&record)? {
        s.set_job_state(row.id, JobState::Failed, Some(&record.message))?;
    }
    Ok(JobOutcome {
        result,
        failure: Some(failure),
    })
}

/// One attempt at a job: the agent's result with the power samples of its window.
async fn attempt(
    job: &Job,
    reporter: &dyn Reporter,
) -> Result<(pb::RunResult, Vec<pb::PowerSample>), LinkError> {
    let req = pb::RunRequest {
        run_id: job.run_id.clone(),
        spec: Some(job.planned.spec.clone()),
    };
    let mut stream = job.link.run(req).await?;
    let mut power = Vec::new();
    while let Some(ev) = stream.next().await {
        match ev?.event {
            Some(pb::run_event::Event::Power(p)) => power.push(p),
            Some(pb::run_event::Event::Progress(p)) => {
                reporter.progress(&job.planned, &p.phase, &p.message);
            }
            Some(pb::run_event::Event::Result(r)) => return Ok((r, power)),
            None => {}
        }
    }
    Err(LinkError::Unreachable(format!(
        "agent {} ended the run stream without a result",
        job.link.name()
    )))
}

/// Attempts `job` until it has a result, retrying an unreachable or busy agent up to
/// `retry.retries` times. Returns the result, its power samples and the failure, if any.
async fn attempts(
    job: &Job,
    retry: RetryPolicy,
    lost: &AtomicBool,
    reporter: &dyn Reporter,
) -> (pb::RunResult, Vec<pb::PowerSample>, Option<JobFailure>) {
    let mut pause = retry.backoff;
    let mut tries = 0;
    loop {
        if lost.load(Ordering::SeqCst) {
            let message = format!(
                "agent unreachable: {} was lost earlier in this campaign",
                job.link.name()
            );
            return (
                job.unreachable(message),
                Vec::new(),
                Some(JobFailure::AgentUnreachable),
            );
        }
        match attempt(job, reporter).await {
            Ok((r, p)) => return (r, p, None),
            Err(LinkError::Refused(m)) => {
                return (job.error(m), Vec::new(), Some(JobFailure::Refused));
            }
            Err(LinkError::Unreachable(m) | LinkError::Busy(m)) if tries < retry.retries => {
                tries += 1;
                reporter.note(&format!(
                    "{m}; retry {tries}/{} in {:.1} s",
                    retry.retries,
                    pause.as_secs_f64()
                ));
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            Err(LinkError::Unreachable(m)) => {
                lost.store(true, Ordering::SeqCst);
                let message = format!("agent unreachable: {m}");
                return (
                    job.unreachable(message),
                    Vec::new(),
                    Some(JobFailure::AgentUnreachable),
                );
            }
            Err(LinkError::Busy(m)) => {
                return (job.error(m), Vec::new(), Some(JobFailure::Busy));
            }
        }
    }
}

/// Runs `job` (its attempts, see [`attempts`]), stores its result, and marks it `failed` when its
/// agent was unreachable.
pub(super) async fn run_job(
    db: &Db,
    campaign_id: i64,
    job: Job,
    retry: RetryPolicy,
    lost: &AtomicBool,
    reporter: &dyn Reporter,
) -> JobOutcome {
    reporter.started(&job.planned);
    let job_id = job.id;
    let (result, power, failure) = attempts(&job, retry, lost, reporter).await;
    let record = to_record(
        &result,
        &power,
        &job.planned.spec_key,
        job.origin(campaign_id),
    );
    let failed = failure == Some(JobFailure::AgentUnreachable);
    let record = std::sync::Arc::new(record);
    // Kept until the store takes it, however long PostgreSQL is away (the job's lease is renewed
    // meanwhile: this process still has its result).
    let stored = db
        .call_until_reached(
            move |s| -> Result<(), StoreError> {
                // Not new: the agent delivered this attempt's result through another serve, or
                // the job was requeued meanwhile; the job's state is theirs.
                if s.insert_result(&record)? && failed {
                    s.set_job_state(job_id, JobState::Failed, Some(&record.message))?;
                }
                Ok(())
            },
            || true,
        )
        .await;
    if let Err(e) = stored {
        reporter.note(&format!("storing result {} failed: {e}", job.run_id));
    }
    reporter.finished(&job.planned, &result);
    JobOutcome { result, failure }
}
