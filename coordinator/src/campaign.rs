//! Running a campaign: describe the agents, plan jobs, store them, run them
//! (agents and devices in parallel, one job at a time per device), store
//! each result in its own transaction as it arrives.
//!
//! Failure handling: a job whose agent cannot be reached is retried a
//! bounded number of times with a growing pause; after that the job gets an
//! `error` result ("agent unreachable: ...") and the agent is marked lost,
//! so its remaining jobs fail fast while other agents' jobs carry on.

use crate::client::{AgentAddr, ClientError};
use crate::db::Db;
use crate::plan::{JobPlan, PlannedJob, Selection, Target, plan_jobs};
use crate::progress::Reporter;
use crate::record::{Origin, error_result, to_record};
use crate::store::{AgentRow, CampaignState, DeviceRecord, JobState, NewJob, StoreError};
use gpufleet_kernels::SuiteRun;
use gpufleet_proto::v1 as pb;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio_stream::StreamExt;

/// Tuning of failure handling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Extra attempts after the first when the agent is unreachable.
    pub retries: u32,
    /// Pause before the first retry; doubled each time.
    pub backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            retries: 2,
            backoff: Duration::from_millis(500),
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

/// Errors that stop a campaign before any job runs.
#[derive(Debug, thiserror::Error)]
pub enum CampaignError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no agent could be reached: {0}")]
    NoAgent(String),
    #[error("nothing to run: {0}")]
    NothingToRun(String),
}

/// The outcome of a campaign.
#[derive(Debug, Clone)]
pub struct CampaignOutcome {
    pub campaign_id: i64,
    pub results: Vec<pb::RunResult>,
    pub plan_notes: Vec<String>,
    pub skipped: usize,
    pub unreachable: Vec<String>,
}

struct Job {
    id: i64,
    run_id: String,
    agent_id: i64,
    device_row_id: Option<i64>,
    addr: AgentAddr,
    planned: PlannedJob,
}

/// Who executes campaigns in this process, and how.
#[derive(Clone)]
pub struct Executor {
    /// `pid@host`, written as the owner of the campaigns this process runs.
    pub owner: String,
    pub retry: RetryPolicy,
    /// Attempts a job may have before an interruption makes it an error result.
    pub max_attempts: u32,
    pub reporter: Arc<dyn Reporter>,
}

impl Executor {
    /// An executor owned by this process.
    pub fn new(retry: RetryPolicy, reporter: Arc<dyn Reporter>) -> Executor {
        Executor {
            owner: owner_id(),
            retry,
            max_attempts: 3,
            reporter,
        }
    }
}

/// This process as a campaign owner: `pid@hostname`.
pub fn owner_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    format!("{}@{host}", std::process::id())
}

/// Whether the owner `pid@host` of a campaign is certainly gone: on this host, no process has that
/// pid any more. An owner on another host is judged by its heartbeat instead.
pub fn owner_is_dead(owner: &str) -> bool {
    let Some((pid, host)) = owner.split_once('@') else {
        return true;
    };
    let Ok(pid) = pid.parse::<i32>() else {
        return true;
    };
    let here = owner_id();
    let this_host = here.split_once('@').map(|(_, h)| h).unwrap_or_default();
    if host != this_host {
        return false;
    }
    if pid == std::process::id() as i32 {
        return false;
    }
    // Signal 0 checks existence; ESRCH means no such process.
    // SAFETY: kill with signal 0 sends nothing; it only checks the pid.
    let rc = unsafe { libc::kill(pid, 0) };
    rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Describes every agent (in parallel), plans, stores and runs the jobs.
///
/// # Errors
/// [`CampaignError`] when nothing can run; individual job failures are
/// results, not errors.
pub async fn run_campaign(
    db: &Db,
    req: CampaignRequest,
    reporter: Arc<dyn Reporter>,
) -> Result<CampaignOutcome, CampaignError> {
    let ex = Executor::new(req.retry, reporter);
    let spec_json = request_json(&req);
    let (suite, description, owner) =
        (req.suite.clone(), req.description.clone(), ex.owner.clone());
    let campaign_id = db
        .call(move |s| -> Result<i64, StoreError> {
            let id = s.create_campaign(&suite, &description, &spec_json)?;
            s.set_campaign_owner(id, &owner)?;
            Ok(id)
        })
        .await?;
    let planned = match plan_into(db, campaign_id, &req, ex.reporter.as_ref()).await {
        Ok(p) => p,
        Err(e) => {
            let _ = db
                .call(move |s| s.set_campaign_state(campaign_id, CampaignState::Failed))
                .await;
            return Err(e);
        }
    };
    let results = execute_campaign(db, campaign_id, &ex).await?;
    finish_campaign(db, campaign_id, &results).await?;
    Ok(CampaignOutcome {
        campaign_id,
        results,
        plan_notes: planned.notes,
        skipped: planned.skipped,
        unreachable: planned.unreachable,
    })
}

/// The campaign's spec as stored in `campaigns.spec_json`: enough to plan it again on resume.
pub fn request_json(req: &CampaignRequest) -> String {
    serde_json::json!({
        "runs": req.runs, "agents": req.agents.iter().map(|a| &a.name).collect::<Vec<_>>(),
        "backends": req.selection.backends, "devices": req.selection.devices,
        "kernels": req.selection.kernels, "env": req.selection.env,
        "env_sets": req.selection.env_sets, "timeout_s": req.selection.timeout_s,
        "power_window_s": req.selection.power_window_s,
    })
    .to_string()
}

/// Rebuilds a request from a stored spec (see [`request_json`]) with the agents as they are now.
///
/// # Errors
/// A message naming the field that does not parse.
pub fn request_from_json(
    suite: &str,
    description: &str,
    spec: &serde_json::Value,
    agents: &[AgentRow],
) -> Result<CampaignRequest, String> {
    fn field<T: serde::de::DeserializeOwned + Default>(
        spec: &serde_json::Value,
        name: &str,
    ) -> Result<T, String> {
        match spec.get(name) {
            None | Some(serde_json::Value::Null) => Ok(T::default()),
            Some(v) => serde_json::from_value(v.clone())
                .map_err(|e| format!("stored campaign spec: field `{name}`: {e}")),
        }
    }
    let names: Vec<String> = field(spec, "agents")?;
    let chosen: Vec<AgentRow> = agents
        .iter()
        .filter(|a| names.contains(&a.name))
        .cloned()
        .collect();
    Ok(CampaignRequest {
        suite: suite.to_string(),
        description: description.to_string(),
        runs: field(spec, "runs")?,
        agents: chosen,
        selection: Selection {
            backends: field(spec, "backends")?,
            devices: field(spec, "devices")?,
            kernels: field(spec, "kernels")?,
            env: field(spec, "env")?,
            env_sets: field(spec, "env_sets")?,
            timeout_s: field(spec, "timeout_s")?,
            power_window_s: field(spec, "power_window_s")?,
        },
        retry: RetryPolicy::default(),
    })
}

/// What planning found.
#[derive(Debug, Clone, Default)]
pub struct Planned {
    pub jobs: usize,
    pub notes: Vec<String>,
    pub skipped: usize,
    pub unreachable: Vec<String>,
}

/// Describes the agents of `req`, plans its jobs and stores them (with the devices) in campaign
/// `campaign_id`, in one transaction.
///
/// # Errors
/// [`CampaignError::NoAgent`] / [`CampaignError::NothingToRun`] when nothing can run.
pub async fn plan_into(
    db: &Db,
    campaign_id: i64,
    req: &CampaignRequest,
    reporter: &dyn Reporter,
) -> Result<Planned, CampaignError> {
    let addrs: Vec<AgentAddr> = req.agents.iter().map(addr).collect();
    let infos = futures::future::join_all(addrs.iter().map(|a| a.describe())).await;
    let mut targets = Vec::new();
    let mut unreachable = Vec::new();
    for (a, info) in req.agents.iter().zip(infos) {
        match info {
            Ok(info) => targets.push((
                a.clone(),
                Target {
                    agent: a.name.clone(),
                    info,
                },
            )),
            Err(e) => {
                reporter.note(&e.to_string());
                unreachable.push(e.to_string());
            }
        }
    }
    if targets.is_empty() {
        return Err(CampaignError::NoAgent(if unreachable.is_empty() {
            "no agents selected".into()
        } else {
            unreachable.join("; ")
        }));
    }
    let plain: Vec<Target> = targets.iter().map(|(_, t)| t.clone()).collect();
    let JobPlan {
        jobs,
        skipped,
        notes,
    } = plan_jobs(&req.runs, &plain, &req.selection);
    for n in &notes {
        reporter.note(n);
    }
    if jobs.is_empty() {
        return Err(CampaignError::NothingToRun(if notes.is_empty() {
            format!(
                "no device implements the selected kernels ({} combinations skipped)",
                skipped.len()
            )
        } else {
            notes.join("; ")
        }));
    }
    let agent_ids: BTreeMap<String, i64> = targets
        .iter()
        .map(|(a, _)| (a.name.clone(), a.id))
        .collect();
    let devices: Vec<(i64, DeviceRecord)> = targets
        .iter()
        .flat_map(|(a, t)| t.info.devices.iter().map(move |d| (a.id, device_record(d))))
        .collect();
    let count = jobs.len();
    db.call(move |s| -> Result<(), StoreError> {
        let mut rows = BTreeMap::new();
        for (agent_id, d) in &devices {
            rows.insert(
                (*agent_id, d.device_id.clone()),
                s.upsert_device(*agent_id, d)?,
            );
        }
        let new_jobs: Vec<NewJob> = jobs
            .into_iter()
            .map(|planned| {
                let agent_id = agent_ids[&planned.agent];
                NewJob {
                    campaign_id,
                    agent_id,
                    device_row_id: Some(rows[&(agent_id, planned.device.id.clone())]),
                    spec_key: planned.spec_key.clone(),
                    spec_json: serde_json::to_string(&planned.spec).unwrap_or_default(),
                    run_id: uuid::Uuid::new_v4().to_string(),
                }
            })
            .collect();
        s.add_jobs(&new_jobs)?;
        Ok(())
    })
    .await?;
    reporter.planned(campaign_id, count);
    Ok(Planned {
        jobs: count,
        notes,
        skipped: skipped.len(),
        unreachable,
    })
}

/// Runs every job of the campaign that is `queued` or `interrupted` (agents and devices in
/// parallel, one job at a time per device) and stores each result as it arrives. An interrupted
/// job gets a new run id, or an error result once it has had `max_attempts`. Returns the results
/// of this execution, in no particular order.
///
/// # Errors
/// [`StoreError`] when the jobs cannot be read; a failure to store one result is reported as a note.
pub async fn execute_campaign(
    db: &Db,
    campaign_id: i64,
    ex: &Executor,
) -> Result<Vec<pb::RunResult>, StoreError> {
    let max_attempts = ex.max_attempts;
    let (jobs, exhausted) = db
        .call(
            move |s| -> Result<(Vec<Job>, Vec<pb::RunResult>), StoreError> {
                let agents: BTreeMap<i64, AgentRow> =
                    s.agents()?.into_iter().map(|a| (a.id, a)).collect();
                let devices: BTreeMap<i64, pb::Device> = s
                    .devices()?
                    .into_iter()
                    .map(|d| {
                        let dev = serde_json::from_value(d.info.clone()).unwrap_or(pb::Device {
                            id: d.device_id.clone(),
                            backend: d.backend.clone(),
                            name: d.name.clone(),
                            ..Default::default()
                        });
                        (d.id, dev)
                    })
                    .collect();
                let mut jobs = Vec::new();
                let mut exhausted = Vec::new();
                for row in s.jobs(campaign_id)? {
                    if !matches!(row.state, JobState::Queued | JobState::Interrupted) {
                        continue;
                    }
                    let spec: pb::RunSpec =
                        serde_json::from_value(row.spec.clone()).unwrap_or_default();
                    let device = row
                        .device_row_id
                        .and_then(|id| devices.get(&id).cloned())
                        .unwrap_or_else(|| pb::Device {
                            id: spec.device_id.clone(),
                            backend: spec.device_id.split(':').next().unwrap_or("").to_string(),
                            ..Default::default()
                        });
                    let mut run_id = row.run_id.clone();
                    let failure =
                        if row.state == JobState::Interrupted && row.attempts >= max_attempts {
                            Some(format!(
                                "interrupted {} times (last: {}); not retried again",
                                row.attempts,
                                row.error.as_deref().unwrap_or("unknown")
                            ))
                        } else if !agents.contains_key(&row.agent_id) {
                            Some(format!(
                                "agent unreachable: agent {} was removed",
                                row.agent
                            ))
                        } else {
                            None
                        };
                    if let Some(message) = failure {
                        let result = error_result(&run_id, &spec, &device.backend, message);
                        let record = to_record(
                            &result,
                            &[],
                            &row.spec_key,
                            Origin {
                                agent_id: row.agent_id,
                                device_row_id: row.device_row_id,
                                campaign_id: Some(campaign_id),
                                job_id: Some(row.id),
                            },
                        );
                        s.insert_result(&record)?;
                        s.set_job_state(row.id, JobState::Failed, Some(&record.message))?;
                        exhausted.push(result);
                        continue;
                    }
                    if row.state == JobState::Interrupted {
                        run_id = uuid::Uuid::new_v4().to_string();
                        s.requeue_job(row.id, &run_id)?;
                    }
                    jobs.push(Job {
                        id: row.id,
                        run_id,
                        agent_id: row.agent_id,
                        device_row_id: row.device_row_id,
                        addr: addr(&agents[&row.agent_id]),
                        planned: PlannedJob {
                            agent: row.agent.clone(),
                            device,
                            spec: pb::RunSpec {
                                device_id: spec.device_id.clone(),
                                ..spec
                            },
                            spec_key: row.spec_key.clone(),
                        },
                    });
                }
                Ok((jobs, exhausted))
            },
        )
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
            let mut results = Vec::new();
            for job in jobs {
                results.push(run_job(&db, campaign_id, job, retry, &lost, reporter.as_ref()).await);
            }
            results
        });
    }
    let mut results = exhausted;
    while let Some(r) = tasks.join_next().await {
        results.extend(r.unwrap_or_default());
    }
    heartbeat.abort();
    Ok(results)
}

/// How often an executing process writes its heartbeat.
pub const HEARTBEAT: Duration = Duration::from_secs(5);

/// Marks the campaign `done`, or `failed` when an agent was unreachable.
///
/// # Errors
/// [`StoreError::UnknownCampaign`].
pub async fn finish_campaign(
    db: &Db,
    campaign_id: i64,
    results: &[pb::RunResult],
) -> Result<(), StoreError> {
    let state = if results
        .iter()
        .all(|r| r.status() != pb::RunStatus::Error || !r.message.starts_with("agent unreachable"))
    {
        CampaignState::Done
    } else {
        CampaignState::Failed
    };
    db.call(move |s| s.set_campaign_state(campaign_id, state))
        .await
}

fn addr(a: &AgentRow) -> AgentAddr {
    AgentAddr {
        name: a.name.clone(),
        url: a.url.clone(),
        token: a.token.clone(),
    }
}

/// The store's view of a device.
pub fn device_record(d: &pb::Device) -> DeviceRecord {
    DeviceRecord {
        device_id: d.id.clone(),
        backend: d.backend.clone(),
        vendor: d.vendor.clone(),
        name: d.name.clone(),
        arch: d.arch.clone(),
        pci_bus_id: d.pci_bus_id.clone(),
        info_json: serde_json::to_string(d).unwrap_or_default(),
    }
}

/// Why one attempt at a job produced no result.
enum AttemptError {
    /// The agent could not be reached or the connection broke: retry.
    Lost(String),
    /// The agent is busy (queue full): retry later.
    Busy(String),
    /// The agent refused the spec: final.
    Refused(String),
}

async fn attempt(
    addr: &AgentAddr,
    job: &Job,
    reporter: &dyn Reporter,
) -> Result<(pb::RunResult, Vec<pb::PowerSample>), AttemptError> {
    let label = &job.planned;
    let mut client = addr
        .connect()
        .await
        .map_err(|e| AttemptError::Lost(e.to_string()))?;
    let req = pb::RunRequest {
        run_id: job.run_id.clone(),
        spec: Some(job.planned.spec.clone()),
    };
    let mut stream = match client.run(req).await {
        Ok(s) => s.into_inner(),
        Err(status) => {
            let e = addr.refused(status);
            return Err(match &e {
                ClientError::Refused { status, .. }
                    if status.code() == tonic::Code::ResourceExhausted =>
                {
                    AttemptError::Busy(e.to_string())
                }
                _ if e.is_unreachable() => AttemptError::Lost(e.to_string()),
                _ => AttemptError::Refused(e.to_string()),
            });
        }
    };
    let mut power = Vec::new();
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(pb::RunEvent {
                event: Some(pb::run_event::Event::Power(p)),
            }) => power.push(p),
            Ok(pb::RunEvent {
                event: Some(pb::run_event::Event::Progress(p)),
            }) => {
                reporter.progress(label, &p.phase, &p.message);
            }
            Ok(pb::RunEvent {
                event: Some(pb::run_event::Event::Result(r)),
            }) => return Ok((r, power)),
            Ok(_) => {}
            Err(status) => {
                return Err(AttemptError::Lost(format!(
                    "connection to agent {} broke mid-run: {}",
                    addr.name,
                    status.message()
                )));
            }
        }
    }
    Err(AttemptError::Lost(format!(
        "agent {} ended the run stream without a result",
        addr.name
    )))
}

async fn run_job(
    db: &Db,
    campaign_id: i64,
    job: Job,
    retry: RetryPolicy,
    lost: &AtomicBool,
    reporter: &dyn Reporter,
) -> pb::RunResult {
    reporter.started(&job.planned);
    let job_id = job.id;
    let addr = &job.addr;
    let _ = db
        .call(move |s| s.set_job_state(job_id, JobState::Running, None))
        .await;
    let mut pause = retry.backoff;
    let mut tries = 0;
    let mut power = Vec::new();
    let result = loop {
        if lost.load(Ordering::SeqCst) {
            break error_result(
                &job.run_id,
                &job.planned.spec,
                &job.planned.device.backend,
                format!(
                    "agent unreachable: {} was lost earlier in this campaign",
                    addr.name
                ),
            );
        }
        match attempt(addr, &job, reporter).await {
            Ok((r, p)) => {
                power = p;
                break r;
            }
            Err(AttemptError::Refused(m)) => {
                break error_result(
                    &job.run_id,
                    &job.planned.spec,
                    &job.planned.device.backend,
                    m,
                );
            }
            Err(AttemptError::Lost(m) | AttemptError::Busy(m)) if tries < retry.retries => {
                tries += 1;
                reporter.note(&format!(
                    "{m}; retry {tries}/{} in {:.1} s",
                    retry.retries,
                    pause.as_secs_f64()
                ));
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            Err(AttemptError::Lost(m)) => {
                lost.store(true, Ordering::SeqCst);
                break error_result(
                    &job.run_id,
                    &job.planned.spec,
                    &job.planned.device.backend,
                    format!("agent unreachable: {m}"),
                );
            }
            Err(AttemptError::Busy(m)) => {
                break error_result(
                    &job.run_id,
                    &job.planned.spec,
                    &job.planned.device.backend,
                    m,
                );
            }
        }
    };
    let record = to_record(
        &result,
        &power,
        &job.planned.spec_key,
        Origin {
            agent_id: job.agent_id,
            device_row_id: job.device_row_id,
            campaign_id: Some(campaign_id),
            job_id: Some(job.id),
        },
    );
    let failed =
        result.status() == pb::RunStatus::Error && result.message.starts_with("agent unreachable");
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
    result
}
