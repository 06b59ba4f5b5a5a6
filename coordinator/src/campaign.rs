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
    device_row_id: i64,
    planned: PlannedJob,
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
        return Err(CampaignError::NoAgent(unreachable.join("; ")));
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

    // Store the campaign, devices and jobs before anything runs.
    let spec_json = serde_json::json!({
        "runs": req.runs, "agents": req.agents.iter().map(|a| &a.name).collect::<Vec<_>>(),
        "backends": req.selection.backends, "devices": req.selection.devices,
        "kernels": req.selection.kernels, "env": req.selection.env,
    })
    .to_string();
    let (suite, description) = (req.suite.clone(), req.description.clone());
    let agent_ids: BTreeMap<String, i64> = targets
        .iter()
        .map(|(a, _)| (a.name.clone(), a.id))
        .collect();
    let devices: Vec<(i64, DeviceRecord)> = targets
        .iter()
        .flat_map(|(a, t)| t.info.devices.iter().map(move |d| (a.id, device_record(d))))
        .collect();
    let (campaign_id, stored_jobs) = db
        .call(move |s| -> Result<(i64, Vec<Job>), StoreError> {
            let campaign_id = s.create_campaign(&suite, &description, &spec_json)?;
            let mut rows = BTreeMap::new();
            for (agent_id, d) in &devices {
                rows.insert(
                    (*agent_id, d.device_id.clone()),
                    s.upsert_device(*agent_id, d)?,
                );
            }
            let mut out = Vec::new();
            for planned in jobs {
                let agent_id = agent_ids[&planned.agent];
                let device_row_id = rows[&(agent_id, planned.device.id.clone())];
                let run_id = uuid::Uuid::new_v4().to_string();
                let id = s.add_job(&NewJob {
                    campaign_id,
                    agent_id,
                    device_row_id: Some(device_row_id),
                    spec_key: planned.spec_key.clone(),
                    spec_json: serde_json::to_string(&planned.spec).unwrap_or_default(),
                    run_id: run_id.clone(),
                })?;
                out.push(Job {
                    id,
                    run_id,
                    agent_id,
                    device_row_id,
                    planned,
                });
            }
            Ok((campaign_id, out))
        })
        .await?;
    reporter.planned(campaign_id, stored_jobs.len());

    // One task per (agent, device); jobs of a device run in order.
    let mut groups: BTreeMap<(String, String), Vec<Job>> = BTreeMap::new();
    for j in stored_jobs {
        groups
            .entry((j.planned.agent.clone(), j.planned.device.id.clone()))
            .or_default()
            .push(j);
    }
    let lost: BTreeMap<String, Arc<AtomicBool>> = targets
        .iter()
        .map(|(a, _)| (a.name.clone(), Arc::new(AtomicBool::new(false))))
        .collect();
    let mut tasks = tokio::task::JoinSet::new();
    for ((agent, _device), jobs) in groups {
        let addr = addrs
            .iter()
            .find(|a| a.name == agent)
            .cloned()
            .expect("planned agent exists");
        let (db, reporter, lost) = (db.clone(), reporter.clone(), lost[&agent].clone());
        let retry = req.retry;
        tasks.spawn(async move {
            let mut results = Vec::new();
            for job in jobs {
                results.push(
                    run_job(
                        &db,
                        &addr,
                        campaign_id,
                        job,
                        retry,
                        &lost,
                        reporter.as_ref(),
                    )
                    .await,
                );
            }
            results
        });
    }
    let mut results = Vec::new();
    while let Some(r) = tasks.join_next().await {
        results.extend(r.unwrap_or_default());
    }
    let state = if results
        .iter()
        .all(|r| r.status() != pb::RunStatus::Error || !r.message.starts_with("agent unreachable"))
    {
        CampaignState::Done
    } else {
        CampaignState::Failed
    };
    db.call(move |s| s.set_campaign_state(campaign_id, state))
        .await?;
    Ok(CampaignOutcome {
        campaign_id,
        results,
        plan_notes: notes,
        skipped: skipped.len(),
        unreachable,
    })
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
    addr: &AgentAddr,
    campaign_id: i64,
    job: Job,
    retry: RetryPolicy,
    lost: &AtomicBool,
    reporter: &dyn Reporter,
) -> pb::RunResult {
    reporter.started(&job.planned);
    let job_id = job.id;
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
            device_row_id: Some(job.device_row_id),
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
