//! A whole campaign in one call (`gpufleet run`, `gpufleet demo`): store it, plan it, execute it,
//! mark it finished.

use super::error::CampaignError;
use super::execute::{Executor, execute_campaign, finish_campaign};
use super::plan::resolve_runs;
use super::prepare::{Planned, plan_into};
use super::progress::Reporter;
use super::request::{CampaignRequest, StoredRequest};
use crate::db::Db;
use crate::store::{CampaignState, StoreError};
use gpufleet_proto::v1 as pb;
use std::sync::Arc;

/// The outcome of a campaign.
#[derive(Debug, Clone)]
pub struct CampaignOutcome {
    pub campaign_id: i64,
    pub results: Vec<pb::RunResult>,
    /// What planning found: jobs, notes, skipped combinations, unreachable agents.
    pub planned: Planned,
}

/// Validates the runs, then describes every agent (in parallel), plans, stores and runs the jobs
/// over gRPC.
///
/// # Errors
/// [`CampaignError::Spec`] for an invalid run, before any agent is contacted or anything is
/// stored; [`CampaignError`] when nothing can run; individual job failures are
/// results, not errors.
pub async fn run_campaign(
    db: &Db,
    req: CampaignRequest,
    reporter: Arc<dyn Reporter>,
) -> Result<CampaignOutcome, CampaignError> {
    let ex = Executor::new(req.retry, reporter);
    run_campaign_with(db, req, &ex).await
}

/// [`run_campaign`] with a given executor (its links, retries and reporter; the request's retry
/// policy is not used).
///
/// # Errors
/// As [`run_campaign`].
pub async fn run_campaign_with(
    db: &Db,
    req: CampaignRequest,
    ex: &Executor,
) -> Result<CampaignOutcome, CampaignError> {
    let runs = resolve_runs(&req.runs, &req.selection)?;
    let spec_json = StoredRequest::of(&req).to_json();
    let (suite, description, owner) =
        (req.suite.clone(), req.description.clone(), ex.owner.clone());
    let campaign_id = db
        .call(move |s| -> Result<i64, StoreError> {
            let id = s.create_campaign(&suite, &description, &spec_json)?;
            s.set_campaign_owner(id, &owner)?;
            Ok(id)
        })
        .await?;
    let planned = match plan_into(db, campaign_id, &req, &runs, ex).await {
        Ok(p) => p,
        Err(e) => {
            let _ = db
                .call(move |s| s.set_campaign_state(campaign_id, CampaignState::Failed))
                .await;
            return Err(e);
        }
    };
    let outcomes = execute_campaign(db, campaign_id, ex).await?;
    finish_campaign(db, campaign_id, &outcomes).await?;
    Ok(CampaignOutcome {
        campaign_id,
        results: outcomes.into_iter().map(|o| o.result).collect(),
        planned,
    })
}
