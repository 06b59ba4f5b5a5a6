//! Preparing a campaign: describe its agents (in parallel), plan the jobs, store the devices and
//! the queued jobs in one transaction.

use super::error::CampaignError;
use super::execute::Executor;
use super::plan::{JobPlan, ResolvedRun, Target, plan_jobs, resolve_runs};
use super::request::CampaignRequest;
use super::selection::Selection;
use crate::convert::{Origin, status_result, to_record};
use crate::db::Db;
use crate::link::AgentLink;
use crate::store::{AgentRow, DeviceRecord, NewJob, Store, StoreError};
use gpufleet_proto::v1 as pb;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What planning found.
#[derive(Debug, Clone, Default)]
pub struct Planned {
    pub jobs: usize,
    pub notes: Vec<String>,
    pub skipped: usize,
    pub unreachable: Vec<String>,
}

/// Validates the runs of `req` and resolves their settings ([`resolve_runs`]); then [`plan_into`].
/// The daemon's way in, where the request was built from a schedule or a stored campaign.
///
/// # Errors
/// [`CampaignError::Spec`] or [`CampaignError::Settings`] for an invalid run, else as
/// [`plan_into`].
pub async fn resolve_and_plan_into(
    db: &Db,
    campaign_id: i64,
    req: &CampaignRequest,
    ex: &Executor,
) -> Result<Planned, CampaignError> {
    let runs = resolve_runs(&req.runs, &req.selection)?;
    plan_into(db, campaign_id, req, &runs, ex).await
}

/// Describes the agents of `req`, plans `runs` (its runs, resolved) and stores the jobs (with the
/// devices) in campaign `campaign_id`, in one transaction.
///
/// # Errors
/// [`CampaignError::NoAgent`] / [`CampaignError::NothingToRun`] when nothing can run.
pub async fn plan_into(
    db: &Db,
    campaign_id: i64,
    req: &CampaignRequest,
    runs: &[ResolvedRun],
    ex: &Executor,
) -> Result<Planned, CampaignError> {
    let reporter = ex.reporter.as_ref();
    let links: Vec<Arc<dyn AgentLink>> = req.agents.iter().map(|a| (ex.connect)(a)).collect();
    let infos = futures::future::join_all(links.iter().map(|l| l.describe())).await;
    let mut targets = Vec::new();
    let mut unreachable = Vec::new();
    let mut down = Vec::new();
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
                down.push((a.clone(), e.to_string()));
            }
        }
    }
    if !down.is_empty() {
        let (runs, sel) = (runs.to_vec(), req.selection.clone());
        db.call(move |s| store_unreachable(s, campaign_id, &runs, &sel, &down))
            .await?;
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
    } = plan_jobs(runs, &plain, &req.selection);
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
    // What each agent said about itself, for the fleet page.
    let infos: Vec<(i64, String)> = targets
        .iter()
        .map(|(a, t)| (a.id, to_json(&t.info)))
        .collect();
    let count = jobs.len();
    db.call(move |s| -> Result<(), StoreError> {
        for (agent_id, info) in &infos {
            s.set_agent_info(*agent_id, info)?;
        }
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
                    spec_json: to_json(&planned.spec),
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

/// Stores an `unreachable` result for every run an agent that could not be reached at planning
/// would have had: planned from the description it gave last time, or, for an agent that never
/// described itself, one row that names it. So the campaign's results say what is missing.
fn store_unreachable(
    s: &mut Store,
    campaign_id: i64,
    runs: &[ResolvedRun],
    sel: &Selection,
    down: &[(AgentRow, String)],
) -> Result<(), StoreError> {
    for (agent, error) in down {
        let message = format!("agent unreachable when the campaign was planned: {error}");
        // What it said last time; a description that does not parse is named, not taken for none.
        let (info, unknown) = match s.agent_info(agent.id)? {
            None => (
                pb::AgentInfo::default(),
                "it has never described its devices".to_string(),
            ),
            Some(text) => match gpufleet_kernels::from_json_str::<pb::AgentInfo>(&text) {
                Ok(info) => (info, "it has never described its devices".to_string()),
                Err(e) => (
                    pb::AgentInfo::default(),
                    format!("its stored description does not parse: {e}"),
                ),
            },
        };
        let target = Target {
            agent: agent.name.clone(),
            info,
        };
        let jobs = plan_jobs(runs, std::slice::from_ref(&target), sel).jobs;
        let mut records = Vec::new();
        for job in &jobs {
            let device_row_id = Some(s.upsert_device(agent.id, &device_record(&job.device))?);
            let result = status_result(
                &uuid::Uuid::new_v4().to_string(),
                &job.spec,
                &job.device.backend,
                pb::RunStatus::Unreachable,
                message.clone(),
            );
            records.push(to_record(
                &result,
                &[],
                &job.spec_key,
                Origin {
                    agent_id: agent.id,
                    device_row_id,
                    campaign_id: Some(campaign_id),
                    job_id: None,
                },
            ));
        }
        if records.is_empty() {
            // Nothing known about its devices: one row for the agent.
            let spec = pb::RunSpec {
                kernel: "*".into(),
                device_id: "*".into(),
                ..Default::default()
            };
            let result = status_result(
                &uuid::Uuid::new_v4().to_string(),
                &spec,
                "*",
                pb::RunStatus::Unreachable,
                format!("{message} ({unknown}, so its runs are unknown)"),
            );
            records.push(to_record(
                &result,
                &[],
                "*",
                Origin {
                    agent_id: agent.id,
                    device_row_id: None,
                    campaign_id: Some(campaign_id),
                    job_id: None,
                },
            ));
        }
        for r in &records {
            s.insert_result(r)?;
        }
    }
    Ok(())
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
        info_json: to_json(d),
    }
}

/// A wire message as JSON text for the store. prost messages have string map keys and no
/// fallible fields, so this cannot fail.
fn to_json<T: serde::Serialize>(message: &T) -> String {
    serde_json::to_string(message).expect("a wire message serialises to JSON")
}
