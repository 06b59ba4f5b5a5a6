//! Handing a campaign to the running serve: `gpufleet run` on a database that a
//! `gpufleet serve --fleet-listen` holds, for agents that dial in (only that serve holds their
//! streams).
//!
//! How the two find each other: through the database. The run stores the campaign without an
//! owner; the serve, which looks for ownerless campaigns every [`crate::schedule::HANDOFF_POLL`],
//! claims, plans and executes it; the run follows the campaign's rows until it is finished.
//! Whether a dial-in agent is attached to a live serve: [`attached`].

use super::error::CampaignError;
use super::plan::resolve_runs;
use super::prepare::Planned;
use super::progress::Reporter;
use super::request::{CampaignRequest, StoredRequest};
use super::run::CampaignOutcome;
use crate::db::Db;
use crate::fleet::attachment::attached;
use crate::store::{AgentKind, CampaignRow, CampaignState};
use std::time::Duration;

/// How long a handed campaign may wait to be claimed by a serve.
pub const CLAIM_TIMEOUT: Duration = Duration::from_secs(15);

/// Whether `req` must be handed to the serve: it names a dial-in agent.
pub fn needs_handoff(req: &CampaignRequest) -> bool {
    req.agents.iter().any(|a| a.kind == AgentKind::DialIn)
}

/// Refuses a request whose dial-in agents are not attached to a live serve.
///
/// # Errors
/// [`CampaignError::NoAgent`] naming each such agent and when it was last seen.
pub fn check_attached(req: &CampaignRequest) -> Result<(), CampaignError> {
    let now = crate::time::now();
    let detached: Vec<String> = req
        .agents
        .iter()
        .filter(|a| a.kind == AgentKind::DialIn && !attached(a, now))
        .map(|a| match a.last_seen {
            Some(t) => format!("{} (last seen {:.0} s ago)", a.name, now - t),
            None => format!("{} (never attached)", a.name),
        })
        .collect();
    if detached.is_empty() {
        return Ok(());
    }
    Err(CampaignError::NoAgent(format!(
        "dial-in agents are reached only through the `gpufleet serve --fleet-listen` they attach to, and these are not attached to a running serve on this database: {}",
        detached.join(", ")
    )))
}

/// Stores the campaign for the serve to run and follows it to its end.
///
/// # Errors
/// [`CampaignError::Spec`] for an invalid run and [`CampaignError::NoAgent`] when a dial-in agent
/// is not attached, both before anything is stored; [`CampaignError::NoAgent`] when no serve
/// claims the campaign in time (it is then marked `failed`).
pub async fn hand_off(
    db: &Db,
    req: CampaignRequest,
    reporter: &dyn Reporter,
) -> Result<CampaignOutcome, CampaignError> {
    resolve_runs(&req.runs, &req.selection)?;
    check_attached(&req)?;
    let spec_json = StoredRequest::of(&req).to_json();
    let (suite, description) = (req.suite.clone(), req.description.clone());
    let id = db
        .call(move |s| s.create_campaign(&suite, &description, &spec_json))
        .await?;
    let row = follow(db, id, reporter).await?;
    // print_outcome reads the results from the store.
    Ok(CampaignOutcome {
        campaign_id: row.id,
        results: Vec::new(),
        planned: Planned {
            jobs: row.jobs.total() as usize,
            ..Default::default()
        },
    })
}

/// Follows ownerless campaign `id` while a serve claims and runs it, reporting progress, until it
/// is finished.
///
/// # Errors
/// [`CampaignError::NoAgent`] when no serve claims it within [`CLAIM_TIMEOUT`] (it is then marked
/// `failed`); [`CampaignError::Store`].
pub async fn follow(
    db: &Db,
    id: i64,
    reporter: &dyn Reporter,
) -> Result<CampaignRow, CampaignError> {
    reporter.note(&format!(
        "campaign {id} handed to the serve holding the dial-in agents; following it"
    ));
    let started = tokio::time::Instant::now();
    let mut last = -1;
    loop {
        let row = db
            .call(move |s| s.campaign(id))
            .await?
            .ok_or(crate::store::StoreError::UnknownCampaign { id })?;
        let done: i64 = row.results.values().sum();
        let planned = row.jobs.total();
        if planned > 0 && done != last {
            reporter.note(&format!("campaign {id}: {done}/{planned} jobs finished"));
            last = done;
        }
        // `interrupted` is not the end here: the campaign waits for a serve to claim it.
        if matches!(row.state, CampaignState::Done | CampaignState::Failed) {
            return Ok(row);
        }
        // Planning stores the jobs at once; none after the timeout means no serve took it.
        if planned == 0 && started.elapsed() > CLAIM_TIMEOUT {
            db.call(move |s| s.set_campaign_state(id, CampaignState::Failed))
                .await?;
            return Err(CampaignError::NoAgent(format!(
                "no serve took campaign {id} within {} s: is `gpufleet serve --fleet-listen` running on this database?",
                CLAIM_TIMEOUT.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
