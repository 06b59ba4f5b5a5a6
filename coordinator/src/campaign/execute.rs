//! Executing a campaign's stored jobs: agents and devices in parallel, one job at a time per
//! device, each attempt over an [`AgentLink`], each result stored in its own transaction as it
//! arrives.
//!
//! Why a job ended without a result of the agent's is a [`JobFailure`], carried with the result in
//! a [`JobOutcome`]: it, not the message, decides whether the job is `failed` and whether the
//! campaign is.

use super::owner::{HEARTBEAT, owner_id};
use super::plan::PlannedJob;
use super::progress::Reporter;
use super::request::RetryPolicy;
use crate::convert::{Origin, error_result, status_result, to_record};
use crate::db::Db;
use crate::fleet::link::direct_links;
use crate::link::{AgentLink, Connect, LinkError};
use crate::store::{AgentRow, CampaignState, JobRow, JobState, Store, StoreError};
use futures::StreamExt;
use gpufleet_proto::v1 as pb;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Who executes campaigns in this process, and how.
#[derive(Clone)]
pub struct Executor {
    /// `pid@host`, written as the owner of the campaigns this process runs.
    pub owner: String,
    pub retry: RetryPolicy,
    /// Attempts a job may have before an interruption makes it an error result.
    pub max_attempts: u32,
    pub reporter: Arc<dyn Reporter>,
    /// How agents are reached.
    pub connect: Connect,
}

impl Executor {
    /// An executor owned by this process, reaching direct agents over gRPC (a serve adds its
    /// dial-in agents with `Daemon::with_connect`).
    pub fn new(retry: RetryPolicy, reporter: Arc<dyn Reporter>) -> Executor {
        Executor {
            owner: owner_id(),
            retry,
            max_attempts: 3,
            reporter,
            connect: direct_links(retry.connect_timeout),
        }
    }
}

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

struct Job {
    id: i64,
    run_id: String,
    agent_id: i64,
    device_row_id: Option<i64>,
    link: Arc<dyn AgentLink>,
    planned: PlannedJob,
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

/// Runs every job of the campaign that is `queued` or `interrupted` (agents and devices in
/// parallel, one job at a time per device) and stores each result as it arrives. An interrupted
/// job gets a new run id, or an error result once it has had `max_attempts`. Returns the outcomes
/// of this execution, in no particular order.
///
/// # Errors
/// [`StoreError`] when the jobs cannot be read; a failure to store one result is reported as a note.
pub async fn execute_campaign(
    db: &Db,
    campaign_id: i64,
    ex: &Executor,
) -> Result<Vec<JobOutcome>, StoreError> {
    let (max_attempts, connect) = (ex.max_attempts, ex.connect.clone());
    let (jobs, exhausted) = db
        .call(move |s| load_jobs(s, campaign_id, max_attempts, &connect))
        .await?;

    // One task per (agent, device); jobs of a device run in order.
    let mut groups: BTreeMap<(String, String), Vec<Job>> = BTreeMap::new();
    for j in jobs {
        groups
            .entry((j.planned.agent.clone(), j.planned.device.id.clone()))
            .or_default()
            .push(j);
    }
    let lost: BTreeMap<String, Arc<AtomicBool>> = groups
        .keys()
        .map(|(agent, _)| (agent.clone(), Arc::new(AtomicBool::new(false))))
        .collect();
    // The owner's sign of life while the jobs run, so another coordinator does not take over.
    let heartbeat = {
        let (db, owner) = (db.clone(), ex.owner.clone());
        tokio::spawn(async move {
            loop {
                let owner = owner.clone();
                let _ = db.call(move |s| s.heartbeat(campaign_id, &owner)).await;
                tokio::time::sleep(HEARTBEAT).await;
            }
        })
    };
    let mut tasks = tokio::task::JoinSet::new();
    for ((agent, _device), jobs) in groups {
        let (db, reporter, lost) = (db.clone(), ex.reporter.clone(), lost[&agent].clone());
        let retry = ex.retry;
        tasks.spawn(async move {
            let mut outcomes = Vec::new();
            for job in jobs {
                outcomes
                    .push(run_job(&db, campaign_id, job, retry, &lost, reporter.as_ref()).await);
            }
            outcomes
        });
    }
    let mut outcomes = exhausted;
    while let Some(r) = tasks.join_next().await {
        outcomes.extend(r.unwrap_or_default());
    }
    heartbeat.abort();
    Ok(outcomes)
}

/// Reads the campaign's runnable jobs. A job that can no longer run (interrupted too often, its
/// agent removed, or its stored spec or device not readable) gets its error result and the
/// `failed` state here; an interrupted one that may run again is requeued with a new run id.
fn load_jobs(
    s: &mut Store,
    campaign_id: i64,
    max_attempts: u32,
    connect: &Connect,
) -> Result<(Vec<Job>, Vec<JobOutcome>), StoreError> {
    let agents: BTreeMap<i64, AgentRow> = s.agents()?.into_iter().map(|a| (a.id, a)).collect();
    // A device whose stored description does not parse keeps the reason: its jobs fail with it.
    let devices: BTreeMap<i64, (pb::Device, Option<String>)> = s
        .devices()?
        .into_iter()
        .map(|d| {
            let read = match gpufleet_kernels::from_json_value::<pb::Device>(&d.info) {
                Ok(dev) => (dev, None),
                Err(e) => (
                    pb::Device {
                        id: d.device_id.clone(),
                        backend: d.backend.clone(),
                        name: d.name.clone(),
                        ..Default::default()
                    },
                    Some(format!(
                        "the stored description of device {} does not parse: {e}",
                        d.device_id
                    )),
                ),
            };
            (d.id, read)
        })
        .collect();
    let mut jobs = Vec::new();
    let mut exhausted = Vec::new();
    for row in s.jobs(campaign_id)? {
        if !matches!(row.state, JobState::Queued | JobState::Interrupted) {
            continue;
        }
        let StoredJob {
            spec,
            device,
            unreadable,
        } = stored_job(&row, &devices);
        let failure = if let Some(message) = unreadable {
            Some((JobFailure::Unreadable, message))
        } else if row.state == JobState::Interrupted && row.attempts >= max_attempts {
            Some((
                JobFailure::AttemptsExhausted,
                format!(
                    "interrupted {} times (last: {}); not retried again",
                    row.attempts,
                    row.error.as_deref().unwrap_or("unknown")
                ),
            ))
        } else if !agents.contains_key(&row.agent_id) {
            Some((
                JobFailure::AgentUnreachable,
                format!("agent unreachable: agent {} was removed", row.agent),
            ))
        } else {
            None
        };
        if let Some((failure, message)) = failure {
            exhausted.push(fail_job(s, &row, &spec, &device, failure, message)?);
            continue;
        }
        let mut run_id = row.run_id.clone();
        if row.state == JobState::Interrupted {
            run_id = uuid::Uuid::new_v4().to_string();
            s.requeue_job(row.id, &run_id)?;
        }
        jobs.push(Job {
            id: row.id,
            run_id,
            agent_id: row.agent_id,
            device_row_id: row.device_row_id,
            link: connect(&agents[&row.agent_id]),
            planned: PlannedJob {
                agent: row.agent.clone(),
                device,
                spec,
                spec_key: row.spec_key.clone(),
            },
        });
    }
    Ok((jobs, exhausted))
}

/// A job as stored: its spec and device, and why it cannot run when either does not parse.
struct StoredJob {
    /// The stored spec, or (when it does not parse) one naming the job's kernel and device, for
    /// the error result.
    spec: pb::RunSpec,
    device: pb::Device,
    /// The job, and the field that does not parse: such a job fails, it never runs as an empty
    /// spec.
    unreadable: Option<String>,
}

fn stored_job(row: &JobRow, devices: &BTreeMap<i64, (pb::Device, Option<String>)>) -> StoredJob {
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
fn fail_job(
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
    s.insert_result(&record)?;
    s.set_job_state(row.id, JobState::Failed, Some(&record.message))?;
    Ok(JobOutcome {
        result,
        failure: Some(failure),
    })
}

/// Marks the campaign `done`, or `failed` when an agent was unreachable.
///
/// # Errors
/// [`StoreError::UnknownCampaign`].
pub async fn finish_campaign(
    db: &Db,
    campaign_id: i64,
    outcomes: &[JobOutcome],
) -> Result<(), StoreError> {
    let state = if outcomes
        .iter()
        .any(|o| o.failure == Some(JobFailure::AgentUnreachable))
    {
        CampaignState::Failed
    } else {
        CampaignState::Done
    };
    db.call(move |s| s.set_campaign_state(campaign_id, state))
        .await
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

async fn run_job(
    db: &Db,
    campaign_id: i64,
    job: Job,
    retry: RetryPolicy,
    lost: &AtomicBool,
    reporter: &dyn Reporter,
) -> JobOutcome {
    reporter.started(&job.planned);
    let job_id = job.id;
    let _ = db
        .call(move |s| s.set_job_state(job_id, JobState::Running, None))
        .await;
    let (result, power, failure) = attempts(&job, retry, lost, reporter).await;
    let record = to_record(
        &result,
        &power,
        &job.planned.spec_key,
        job.origin(campaign_id),
    );
    let failed = failure == Some(JobFailure::AgentUnreachable);
    let stored = db
        .call(move |s| -> Result<(), StoreError> {
            s.insert_result(&record)?;
            if failed {
                s.set_job_state(job_id, JobState::Failed, Some(&record.message))?;
            }
            Ok(())
        })
        .await;
    if let Err(e) = stored {
        reporter.note(&format!("storing result {} failed: {e}", job.run_id));
    }
    reporter.finished(&job.planned, &result);
    JobOutcome { result, failure }
}
