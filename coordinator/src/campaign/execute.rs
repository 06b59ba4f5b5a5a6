//! Executing a campaign's stored jobs: agents and devices in parallel, one job at a time per
//! device, each attempt over an [`AgentLink`], each result stored in its own transaction as it
//! arrives. This file decides which jobs this process claims, and when; `job.rs` what happens to
//! each (its attempts, its result, a [`JobFailure`] when the agent sent none).

use super::job::{Devices, Job, JobFailure, JobOutcome, StoredJob, fail_job, run_job, stored_job};
use super::owner::{CLAIM_POLL, HEARTBEAT, LEASE, owner_id, owner_is_dead};
use super::plan::PlannedJob;
use super::progress::Reporter;
use super::request::RetryPolicy;
use crate::db::Db;
use crate::fleet::attachment::{ATTACHED_FRESH_S, held_elsewhere, holder, named_elsewhere};
use crate::fleet::link::direct_links;
use crate::link::{AgentLink, Connect};
use crate::store::{AgentKind, AgentRow, CampaignState, JobRow, JobState, Store, StoreError};
use futures::FutureExt;
use gpufleet_proto::v1 as pb;
use std::collections::{BTreeMap, BTreeSet};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

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

/// Runs the campaign's jobs as their owner, then returns the outcomes of this execution, in no
/// particular order. Each job is claimed with a lease before it runs ([`Store::claim_job`]): one at
/// a time per device, agents and devices in parallel, each result stored as it arrives. The owner
/// runs the jobs of direct agents, of dial-in agents this process holds, and of dial-in agents no
/// live serve holds (they get the grace period to attach here); a dial-in agent another live serve
/// holds is that serve's to run ([`assist_campaign`]). An interrupted job gets a new run id, or an
/// error result once it has had `max_attempts`; a job whose claimer died is interrupted (see
/// [`Store::expire_leases`]). Returns when no job is queued, running or interrupted.
///
/// # Errors
/// [`StoreError`] when the jobs cannot be read; a failure to store one result is reported as a note.
pub async fn execute_campaign(
    db: &Db,
    campaign_id: i64,
    ex: &Executor,
) -> Result<Vec<JobOutcome>, StoreError> {
    run_jobs(db, campaign_id, ex, Role::Owner).await
}

/// Runs the jobs of campaign `campaign_id`, which another serve owns, that only this serve can
/// run: those of the dial-in agents whose streams it holds. Returns when none is queued for them.
///
/// # Errors
/// As [`execute_campaign`].
pub async fn assist_campaign(
    db: &Db,
    campaign_id: i64,
    ex: &Executor,
) -> Result<Vec<JobOutcome>, StoreError> {
    run_jobs(db, campaign_id, ex, Role::Assistant).await
}

/// Which of a campaign's jobs a process claims, and what else it does for the campaign.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// It owns the campaign: it also requeues or fails interrupted jobs and waits for the jobs
    /// other serves run.
    Owner,
    /// Another serve owns it: it runs the jobs of the dial-in agents it holds, nothing else.
    Assistant,
}

impl Role {
    /// Whether this process may claim `agent`'s jobs now. `settling`: the database came back
    /// from an outage less than [`ATTACHED_FRESH_S`] ago, so a `last_seen` nobody could write
    /// meanwhile does not make an agent that another live serve holds look detached.
    fn may_claim(self, agent: &AgentRow, me: &str, now: f64, settling: bool) -> bool {
        match (agent.kind, self) {
            (AgentKind::Direct, role) => role == Role::Owner,
            (AgentKind::DialIn, Role::Owner) => {
                let elsewhere = held_elsewhere(agent, me, now);
                !(elsewhere || (settling && named_elsewhere(agent, me)))
            }
            (AgentKind::DialIn, Role::Assistant) => {
                holder(agent, now) == Some(me)
                    || (settling && agent.attached_to.as_deref() == Some(me))
            }
        }
    }
}

/// Whether the store came back from an outage less than [`ATTACHED_FRESH_S`] ago.
fn settling(s: &Store, now: f64) -> bool {
    s.health().recent_outage(now, ATTACHED_FRESH_S).is_some()
}

/// One device's jobs in a campaign: (agent row id, device row id). One task claims them in turn.
type Queue = (i64, Option<i64>);

/// What one look at the campaign's jobs found.
struct Survey {
    /// Jobs that can no longer run, failed now (owner only).
    failed: Vec<JobOutcome>,
    /// Queues with queued jobs this process may claim, with their agent.
    queues: Vec<(Queue, AgentRow)>,
    devices: Arc<Devices>,
    /// Jobs queued, running or interrupted.
    open: usize,
}

async fn run_jobs(
    db: &Db,
    campaign_id: i64,
    ex: &Executor,
    role: Role,
) -> Result<Vec<JobOutcome>, StoreError> {
    // The owner's sign of life while the jobs run, so another coordinator does not take over, and
    // the leases of the jobs this process runs.
    let heartbeat = {
        let (db, owner) = (db.clone(), ex.owner.clone());
        tokio::spawn(async move {
            loop {
                let owner = owner.clone();
                let _ = db
                    .call(move |s| {
                        if role == Role::Owner {
                            s.heartbeat(campaign_id, &owner)?;
                        }
                        s.renew_leases(&owner, LEASE.as_secs_f64())
                    })
                    .await;
                tokio::time::sleep(HEARTBEAT).await;
            }
        })
    };
    let mut outcomes = Vec::new();
    let mut workers = tokio::task::JoinSet::new();
    let mut active = BTreeSet::new();
    let mut lost: BTreeMap<i64, Arc<AtomicBool>> = BTreeMap::new();
    let ended = loop {
        let (me, max_attempts) = (ex.owner.clone(), ex.max_attempts);
        let survey = match db
            .call(move |s| survey(s, campaign_id, &me, max_attempts, role))
            .await
        {
            Ok(survey) => survey,
            Err(e) => break Err(e),
        };
        outcomes.extend(survey.failed);
        for (queue, agent) in survey.queues {
            if !active.insert(queue) {
                continue;
            }
            let worker = Worker {
                db: db.clone(),
                campaign_id,
                queue,
                role,
                link: (ex.connect)(&agent),
                devices: survey.devices.clone(),
                ex: ex.clone(),
                lost: lost.entry(agent.id).or_default().clone(),
            };
            // A worker that panics (a bug) must not leave its job `running` for ever: this
            // process lives on and keeps renewing the job's lease.
            workers
                .spawn(async move { (queue, AssertUnwindSafe(worker.run()).catch_unwind().await) });
        }
        if workers.is_empty() && (role == Role::Assistant || survey.open == 0) {
            break Ok(());
        }
        // Until every worker is done, or a poll interval passes since this survey (jobs other
        // serves run finish meanwhile), collecting the workers that end. A survey reads every job
        // of the campaign, so one per ended worker would make a campaign of thousands of agents
        // quadratic.
        let next_survey = tokio::time::Instant::now() + CLAIM_POLL;
        loop {
            tokio::select! {
                Some(done) = workers.join_next(), if !workers.is_empty() => {
                    if let Ok((queue, done)) = done {
                        active.remove(&queue);
                        match done {
                            Ok(done) => outcomes.extend(done),
                            Err(panic) => worker_failed(db, campaign_id, ex, queue, panic).await,
                        }
                    }
                    if workers.is_empty() {
                        break;
                    }
                }
                () = tokio::time::sleep_until(next_survey) => break,
            }
        }
    };
    heartbeat.abort();
    ended.map(|()| outcomes)
}

/// After a worker panicked: says so, and interrupts the job it was running, so the owner's next
/// survey requeues it (or fails it once its attempts are used up) and a new worker takes the queue.
async fn worker_failed(
    db: &Db,
    campaign_id: i64,
    ex: &Executor,
    queue: Queue,
    panic: Box<dyn std::any::Any + Send>,
) {
    let why = format!(
        "the coordinator's worker for this device failed: {}",
        gpufleet_kernels::panic_message(&*panic)
    );
    ex.reporter.note(&format!("campaign {campaign_id}: {why}"));
    let me = ex.owner.clone();
    let interrupted = db
        .call(move |s| s.interrupt_claimed(campaign_id, queue, &me, &why))
        .await;
    if let Err(e) = interrupted {
        ex.reporter.note(&format!(
            "campaign {campaign_id}: interrupting the failed worker's job: {e}"
        ));
    }
}

/// Looks at the campaign's jobs: as the owner, interrupts those whose claimer is gone, requeues
/// the interrupted ones (or fails them, and the jobs that can no longer run); then lists the
/// queues this process may claim from.
fn survey(
    s: &mut Store,
    campaign_id: i64,
    me: &str,
    max_attempts: u32,
    role: Role,
) -> Result<Survey, StoreError> {
    let now = crate::time::now();
    let mut failed = Vec::new();
    if role == Role::Owner {
        let dead: Vec<String> = s
            .job_claimers(campaign_id)?
            .into_iter()
            .filter(|c| c != me && owner_is_dead(c))
            .collect();
        s.expire_leases(campaign_id, &dead)?;
    }
    let agents: BTreeMap<i64, AgentRow> = s.agents()?.into_iter().map(|a| (a.id, a)).collect();
    let settling = settling(s, now);
    let devices = Arc::new(stored_devices(s)?);
    let mut queues = BTreeMap::new();
    let mut open = 0;
    for row in s.jobs(campaign_id)? {
        let mut state = row.state;
        if role == Role::Owner && matches!(state, JobState::Queued | JobState::Interrupted) {
            let failure = if state == JobState::Interrupted && row.attempts >= max_attempts {
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
                let StoredJob { spec, device, .. } = stored_job(&row, &devices);
                failed.push(fail_job(s, &row, &spec, &device, failure, message)?);
                continue;
            }
            if state == JobState::Interrupted
                && s.requeue_job(row.id, &uuid::Uuid::new_v4().to_string())?
            {
                state = JobState::Queued;
            }
        }
        if matches!(
            state,
            JobState::Queued | JobState::Running | JobState::Interrupted
        ) {
            open += 1;
        }
        if state != JobState::Queued {
            continue;
        }
        if let Some(agent) = agents.get(&row.agent_id)
            && role.may_claim(agent, me, now, settling)
        {
            queues
                .entry((row.agent_id, row.device_row_id))
                .or_insert_with(|| agent.clone());
        }
    }
    Ok(Survey {
        failed,
        queues: queues.into_iter().collect(),
        devices,
        open,
    })
}

/// Every stored device, read for the jobs that name it.
fn stored_devices(s: &Store) -> Result<Devices, StoreError> {
    Ok(s.devices()?
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
        .collect())
}

/// Claims one queue's jobs in turn and runs each, while this process may still claim them.
struct Worker {
    db: Db,
    campaign_id: i64,
    queue: Queue,
    role: Role,
    link: Arc<dyn AgentLink>,
    devices: Arc<Devices>,
    ex: Executor,
    /// Set once the agent was unreachable through every retry: its remaining jobs fail at once.
    lost: Arc<AtomicBool>,
}

impl Worker {
    async fn run(self) -> Vec<JobOutcome> {
        let mut outcomes = Vec::new();
        loop {
            let (campaign_id, (agent_id, device_row_id)) = (self.campaign_id, self.queue);
            let (me, role, devices) = (self.ex.owner.clone(), self.role, self.devices.clone());
            let claimed = self
                .db
                .call(
                    move |s| -> Result<Option<(JobRow, StoredJob)>, StoreError> {
                        // The agent may have moved to another serve since the survey.
                        let now = crate::time::now();
                        let agent = s.agents()?.into_iter().find(|a| a.id == agent_id);
                        let settling = settling(s, now);
                        if !agent.is_some_and(|a| role.may_claim(&a, &me, now, settling)) {
                            return Ok(None);
                        }
                        let lease = LEASE.as_secs_f64();
                        Ok(
                            s.claim_job(campaign_id, agent_id, device_row_id, &me, lease)?
                                .map(|row| {
                                    let stored = stored_job(&row, &devices);
                                    (row, stored)
                                }),
                        )
                    },
                )
                .await;
            let (row, stored) = match claimed {
                Ok(Some(claimed)) => claimed,
                Ok(None) => break,
                Err(e) => {
                    self.ex.reporter.note(&format!(
                        "campaign {campaign_id}: claiming a job of agent {} failed: {e}",
                        self.link.name()
                    ));
                    break;
                }
            };
            let StoredJob {
                spec,
                device,
                unreadable,
            } = stored;
            if let Some(message) = unreadable {
                let failure = JobFailure::Unreadable;
                match self
                    .db
                    .call(move |s| fail_job(s, &row, &spec, &device, failure, message))
                    .await
                {
                    Ok(outcome) => outcomes.push(outcome),
                    Err(e) => self.ex.reporter.note(&format!(
                        "campaign {campaign_id}: failing an unreadable job: {e}"
                    )),
                }
                continue;
            }
            let job = Job {
                id: row.id,
                run_id: row.run_id.clone(),
                agent_id: row.agent_id,
                device_row_id: row.device_row_id,
                link: self.link.clone(),
                planned: PlannedJob {
                    agent: row.agent.clone(),
                    device,
                    spec,
                    spec_key: row.spec_key.clone(),
                },
            };
            let reporter = self.ex.reporter.as_ref();
            outcomes.push(
                run_job(
                    &self.db,
                    campaign_id,
                    job,
                    self.ex.retry,
                    &self.lost,
                    reporter,
                )
                .await,
            );
        }
        outcomes
    }
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
