//! The coordinator as a service (`gpufleet serve`): cron schedules, crash-safe campaign
//! execution, regression checks after every scheduled campaign, and resuming what a stopped or
//! killed coordinator left.
//!
//! Time is injected ([`Service::tick`] takes "now"), so tests fire schedules without waiting.
//!
//! # Slots
//! For each schedule, the latest cron slot at or before now is *due* when it is later than the
//! schedule's `last_slot`. A due slot within `grace_s` of now fires; an older one (the
//! coordinator was down) fires once at start when catch-up is on, else it is passed over. Only the
//! latest missed slot is considered, so a week of downtime runs one campaign, not seven. Firing and
//! moving `last_slot` are one transaction with a unique index on (schedule, slot): never twice.
//!
//! # Resuming
//! A campaign's owner (`pid@host`) writes a heartbeat while it executes. At start, and on every
//! tick, a `running` campaign whose owner is gone (its pid no longer exists on this host, or no
//! heartbeat for `stale_after_s`) or an `interrupted` one (a graceful stop) is claimed by compare
//! and swap and resumed: finished jobs keep their results, interrupted jobs run again with a new
//! run id (at most `max_attempts` in all), and results are idempotent by run id, so nothing is
//! stored twice.

use crate::campaign::{
    CampaignRequest, Executor, RetryPolicy, execute_campaign, finish_campaign, owner_is_dead,
    plan_into, request_from_json, request_json,
};
use crate::cron::Cron;
use crate::db::Db;
use crate::plan::{EnvSet, Selection};
use crate::progress::Reporter;
use crate::regress::DetectConfig;
use crate::regressions;
use crate::store::{CampaignState, ScheduleRow, StoreError};
use gpufleet_kernels::Suite;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// What a schedule runs; stored as the schedule's `spec_json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScheduleSpec {
    /// Suite name or path (resolved when the slot fires).
    pub suite: String,
    /// Agents by name; ignored when `all_agents`.
    pub agents: Vec<String>,
    /// Every agent registered when the slot fires.
    pub all_agents: bool,
    pub backends: Vec<String>,
    pub kernels: Vec<String>,
    /// Overrides for every run.
    pub env: BTreeMap<String, String>,
    /// Environment matrix: each set its own comparison row and regression series.
    pub env_sets: Vec<EnvSet>,
    pub timeout_s: Option<f64>,
}

/// Knobs of the service.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServiceConfig {
    /// Run a slot missed while the coordinator was down, once, at start.
    pub catch_up: bool,
    /// How late a slot may be noticed and still count as on time, seconds.
    pub grace_s: f64,
    /// A running campaign with no heartbeat for this long is an orphan.
    pub stale_after_s: f64,
    /// Unfinished campaigns older than this are not resumed automatically.
    pub resume_max_age_s: f64,
    pub detect: DetectConfig,
    pub retry: RetryPolicy,
    pub max_attempts: u32,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            catch_up: true,
            grace_s: 120.0,
            stale_after_s: 60.0,
            resume_max_age_s: 7.0 * 86_400.0,
            detect: DetectConfig::default(),
            retry: RetryPolicy::default(),
            max_attempts: 3,
        }
    }
}

/// What to do with a schedule now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Due {
    Nothing,
    /// Run the campaign of this slot.
    Fire(f64),
    /// Mark this slot handled without running it.
    Pass(f64),
}

/// The decision for one schedule at `now` (see the module docs).
pub fn due(row: &ScheduleRow, cron: &Cron, now: f64, cfg: &ServiceConfig) -> Due {
    let Some(slot) = cron.latest_at_or_before(now.floor() as i64) else {
        return Due::Nothing;
    };
    let slot = slot as f64;
    if row.last_slot.is_some_and(|last| slot <= last) {
        return Due::Nothing;
    }
    if now - slot <= cfg.grace_s || (cfg.catch_up && row.catch_up) {
        Due::Fire(slot)
    } else {
        Due::Pass(slot)
    }
}

/// One finished (or failed to start) scheduled campaign.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CampaignReport {
    pub campaign_id: i64,
    pub schedule: Option<String>,
    pub results: usize,
    pub error: Option<String>,
    pub assess: regressions::AssessSummary,
    pub resolve: regressions::ResolveSummary,
}

/// The coordinator service. Cheap to clone.
#[derive(Clone)]
pub struct Service {
    db: Db,
    ex: Executor,
    cfg: ServiceConfig,
    running: Arc<Mutex<tokio::task::JoinSet<CampaignReport>>>,
}

impl Service {
    pub fn new(db: Db, cfg: ServiceConfig, reporter: Arc<dyn Reporter>) -> Service {
        let mut ex = Executor::new(cfg.retry, reporter);
        ex.max_attempts = cfg.max_attempts;
        Service {
            db,
            ex,
            cfg,
            running: Arc::new(Mutex::new(tokio::task::JoinSet::new())),
        }
    }

    /// This process's owner id.
    pub fn owner(&self) -> &str {
        &self.ex.owner
    }

    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Fires every due schedule (in the background) and resumes orphaned campaigns. Returns
    /// the campaigns started or resumed.
    ///
    /// # Errors
    /// [`StoreError`] when the schedules cannot be read.
    pub async fn tick(&self, now: f64) -> Result<Vec<i64>, StoreError> {
        let mut started = self.resume_orphans(now).await?;
        let schedules = self.db.call(|s| s.schedules()).await?;
        for row in schedules {
            let cron: Cron = match row.cron.parse() {
                Ok(c) => c,
                Err(e) => {
                    self.ex
                        .reporter
                        .note(&format!("schedule {}: bad cron: {e}", row.name));
                    continue;
                }
            };
            match due(&row, &cron, now, &self.cfg) {
                Due::Nothing => {}
                Due::Pass(slot) => {
                    let name = row.name.clone();
                    self.db.call(move |s| s.pass_slot(&name, slot)).await?;
                    self.ex.reporter.note(&format!(
                        "schedule {}: slot {} passed over (catch-up off)",
                        row.name,
                        fmt_time(slot)
                    ));
                }
                Due::Fire(slot) => {
                    if let Some(id) = self.start(&row, Some(slot)).await? {
                        started.push(id);
                    }
                }
            }
        }
        Ok(started)
    }

    /// Starts the campaign of `row` for `slot` (`None`: a manual run) in the background; `None`
    /// when the slot was already handled.
    ///
    /// # Errors
    /// [`StoreError`] when the campaign cannot be stored.
    pub async fn start(
        &self,
        row: &ScheduleRow,
        slot: Option<f64>,
    ) -> Result<Option<i64>, StoreError> {
        let (id, req) = match self.create(row, slot).await? {
            Some(x) => x,
            None => return Ok(None),
        };
        self.execute_in_background(id, Some(row.name.clone()), req, true);
        Ok(Some(id))
    }

    /// [`Service::execute`] as a background task that [`Service::wait_idle`] and
    /// [`Service::reap`] collect.
    fn execute_in_background(
        &self,
        id: i64,
        schedule: Option<String>,
        req: Result<CampaignRequest, String>,
        check: bool,
    ) {
        let this = self.clone();
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .spawn(async move { this.execute(id, schedule, req, check).await });
    }

    /// Runs `row` now in this task and waits for it (the `schedule run-now` command).
    ///
    /// # Errors
    /// [`StoreError`] when the campaign cannot be stored.
    pub async fn run_now(&self, row: &ScheduleRow) -> Result<CampaignReport, StoreError> {
        let (id, req) = self
            .create(row, None)
            .await?
            .expect("a manual run always gets a campaign");
        Ok(self.execute(id, Some(row.name.clone()), req, true).await)
    }

    async fn create(
        &self,
        row: &ScheduleRow,
        slot: Option<f64>,
    ) -> Result<Option<(i64, Result<CampaignRequest, String>)>, StoreError> {
        let spec: ScheduleSpec = serde_json::from_value(row.spec.clone()).unwrap_or_default();
        let agents = self.db.call(|s| s.agents()).await?;
        let req = request_of(&row.name, &spec, &agents);
        let description = match slot {
            Some(slot) => format!("schedule {} slot {}", row.name, fmt_time(slot)),
            None => format!("schedule {} run now", row.name),
        };
        let (suite, spec_json) = match &req {
            Ok(r) => (r.suite.clone(), request_json(r)),
            Err(_) => (spec.suite.clone(), "{}".to_string()),
        };
        let (name, owner) = (row.name.clone(), self.ex.owner.clone());
        let id = self
            .db
            .call(move |s| {
                s.start_scheduled_campaign(
                    &name,
                    slot,
                    if suite.is_empty() { "?" } else { &suite },
                    &description,
                    &spec_json,
                    &owner,
                )
            })
            .await?;
        Ok(id.map(|id| (id, req)))
    }

    /// Plans (unless the campaign already has jobs), executes, checks and finishes a campaign
    /// this process owns.
    async fn execute(
        &self,
        id: i64,
        schedule: Option<String>,
        req: Result<CampaignRequest, String>,
        check: bool,
    ) -> CampaignReport {
        let mut report = CampaignReport {
            campaign_id: id,
            schedule,
            results: 0,
            error: None,
            assess: Default::default(),
            resolve: Default::default(),
        };
        let has_jobs = self
            .db
            .call(move |s| s.jobs(id).map(|j| !j.is_empty()))
            .await
            .unwrap_or(false);
        if !has_jobs {
            let planned = match &req {
                Ok(req) => plan_into(&self.db, id, req, self.ex.reporter.as_ref())
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.clone()),
            };
            if let Err(e) = planned {
                self.ex.reporter.note(&format!("campaign {id}: {e}"));
                let _ = self
                    .db
                    .call(move |s| s.set_campaign_state(id, CampaignState::Failed))
                    .await;
                report.error = Some(e);
                return report;
            }
        }
        let mut results = match execute_campaign(&self.db, id, &self.ex).await {
            Ok(r) => r,
            Err(e) => {
                report.error = Some(e.to_string());
                return report;
            }
        };
        if check {
            let cfg = self.cfg.detect;
            match self
                .db
                .call(move |s| {
                    regressions::assess_new(s, Some(id), &cfg, &mut || {
                        uuid::Uuid::new_v4().to_string()
                    })
                })
                .await
            {
                Ok(a) => report.assess = a,
                Err(e) => report.error = Some(format!("regression check: {e}")),
            }
            // Confirmation reruns (and anything a crash left queued).
            match execute_campaign(&self.db, id, &self.ex).await {
                Ok(r) => results.extend(r),
                Err(e) => report.error = Some(e.to_string()),
            }
            match self
                .db
                .call(move |s| regressions::resolve(s, Some(id), &cfg))
                .await
            {
                Ok(r) => report.resolve = r,
                Err(e) => report.error = Some(format!("regression check: {e}")),
            }
        }
        report.results = results.len();
        if let Err(e) = finish_campaign(&self.db, id, &results).await {
            report.error = Some(e.to_string());
        }
        report
    }

    /// Claims and resumes (in the background) every orphaned or interrupted campaign younger
    /// than `resume_max_age_s`. Returns their ids.
    ///
    /// # Errors
    /// [`StoreError`] when the campaigns cannot be read.
    pub async fn resume_orphans(&self, now: f64) -> Result<Vec<i64>, StoreError> {
        let unfinished = self.db.call(|s| s.unfinished_campaigns()).await?;
        let mut resumed = Vec::new();
        for c in unfinished {
            if now - c.created_at > self.cfg.resume_max_age_s {
                continue;
            }
            let orphan = match (&c.owner, c.state.as_str()) {
                (Some(o), _) if o == &self.ex.owner => false,
                (None, _) => true,
                (_, "interrupted") => true,
                (Some(o), _) => {
                    owner_is_dead(o)
                        || c.heartbeat_at
                            .is_none_or(|h| now - h > self.cfg.stale_after_s)
                }
            };
            if !orphan {
                continue;
            }
            let (id, expected, owner) = (c.id, c.owner.clone(), self.ex.owner.clone());
            let won = self
                .db
                .call(move |s| s.claim_campaign(id, expected.as_deref(), &owner))
                .await?;
            if !won {
                continue;
            }
            self.ex.reporter.note(&format!(
                "resuming campaign {id}{}",
                c.schedule_name
                    .as_deref()
                    .map(|n| format!(" (schedule {n})"))
                    .unwrap_or_default()
            ));
            let row = self.db.call(move |s| s.campaign(id)).await?;
            let agents = self.db.call(|s| s.agents()).await?;
            let req = match &row {
                Some(r) => request_from_json(&r.suite, &r.description, &r.spec, &agents),
                None => Err(format!("campaign {id} vanished")),
            };
            let check = c.schedule_name.is_some();
            self.execute_in_background(id, c.schedule_name.clone(), req, check);
            resumed.push(id);
        }
        Ok(resumed)
    }

    /// Waits for every campaign started in the background so far.
    pub async fn wait_idle(&self) -> Vec<CampaignReport> {
        let mut set = std::mem::take(&mut *self.running.lock().unwrap_or_else(|p| p.into_inner()));
        let mut out = Vec::new();
        while let Some(r) = set.join_next().await {
            if let Ok(r) = r {
                out.push(r);
            }
        }
        out
    }

    /// Whether campaigns are executing in the background.
    pub fn busy(&self) -> bool {
        !self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// Reaps finished background campaigns; returns their reports.
    pub fn reap(&self) -> Vec<CampaignReport> {
        let mut set = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        while let Some(r) = set.try_join_next() {
            if let Ok(r) = r {
                out.push(r);
            }
        }
        out
    }

    /// Graceful stop: aborts the campaigns this process runs and marks them `interrupted`, so
    /// the next coordinator resumes them. Returns their ids.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be updated.
    pub async fn stop(&self) -> Result<Vec<i64>, StoreError> {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .abort_all();
        let owner = self.ex.owner.clone();
        self.db.call(move |s| s.release_campaigns(&owner)).await
    }
}

/// The campaign request a schedule stands for, with the agents registered now.
///
/// # Errors
/// A message naming the schedule and what is wrong (unknown suite, unknown agent, no agents).
pub fn request_of(
    name: &str,
    spec: &ScheduleSpec,
    agents: &[crate::store::AgentRow],
) -> Result<CampaignRequest, String> {
    let suite = Suite::resolve(&spec.suite).map_err(|e| format!("schedule {name}: {e}"))?;
    let chosen: Vec<_> = if spec.all_agents {
        agents.to_vec()
    } else {
        let mut out = Vec::new();
        for a in &spec.agents {
            match agents.iter().find(|x| &x.name == a) {
                Some(x) => out.push(x.clone()),
                None => return Err(format!("schedule {name}: no agent named {a:?}")),
            }
        }
        out
    };
    if chosen.is_empty() {
        return Err(format!("schedule {name}: no agents to run on"));
    }
    Ok(CampaignRequest {
        suite: suite.name.clone(),
        description: format!("schedule {name}"),
        runs: suite.runs,
        agents: chosen,
        selection: Selection {
            backends: spec.backends.clone(),
            devices: Vec::new(),
            kernels: spec.kernels.clone(),
            env: spec.env.clone(),
            env_sets: spec.env_sets.clone(),
            timeout_s: spec.timeout_s,
            power_window_s: None,
        },
        retry: RetryPolicy::default(),
    })
}

/// The next slot of `row` strictly after `now` (unix seconds), if its cron has one.
pub fn next_slot(row: &ScheduleRow, now: f64) -> Option<i64> {
    row.cron
        .parse::<Cron>()
        .ok()
        .and_then(|c| c.next_after(now.floor() as i64))
}

/// `YYYY-MM-DD HH:MM UTC` of unix seconds.
pub fn fmt_time(t: f64) -> String {
    let secs = t.floor() as i64;
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = crate::cron::civil_from_days(secs.div_euclid(86_400));
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60
    )
}

/// Wall clock, unix seconds (the store's clock).
pub fn now() -> f64 {
    crate::store::system_now()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(last: Option<f64>, catch_up: bool) -> ScheduleRow {
        ScheduleRow {
            id: 1,
            name: "nightly".into(),
            cron: "0 3 * * *".into(),
            spec: serde_json::json!({}),
            catch_up,
            created_at: 0.0,
            last_slot: last,
        }
    }

    #[test]
    fn due_fires_on_time_once_and_catches_up_once() {
        let cron: Cron = "0 3 * * *".parse().unwrap();
        let cfg = ServiceConfig::default();
        let day = 86_400.0;
        let slot1 = 3.0 * 3600.0 + 10.0 * day; // day 10, 03:00
        // Before the slot: nothing.
        assert_eq!(
            due(&row(Some(slot1 - day), true), &cron, slot1 - 60.0, &cfg),
            Due::Nothing
        );
        // At the slot and shortly after: fire.
        assert_eq!(
            due(&row(Some(slot1 - day), true), &cron, slot1 + 5.0, &cfg),
            Due::Fire(slot1)
        );
        // Once fired, not again.
        assert_eq!(
            due(&row(Some(slot1), true), &cron, slot1 + 30.0, &cfg),
            Due::Nothing
        );
        // Down for three days: the latest missed slot fires once, with catch-up.
        let later = slot1 + 3.0 * day + 7.0 * 3600.0;
        assert_eq!(
            due(&row(Some(slot1), true), &cron, later, &cfg),
            Due::Fire(slot1 + 3.0 * day)
        );
        // Without catch-up it is passed over.
        assert_eq!(
            due(&row(Some(slot1), false), &cron, later, &cfg),
            Due::Pass(slot1 + 3.0 * day)
        );
        let off = ServiceConfig {
            catch_up: false,
            ..cfg
        };
        assert_eq!(
            due(&row(Some(slot1), true), &cron, later, &off),
            Due::Pass(slot1 + 3.0 * day)
        );
    }

    #[test]
    fn times_print_in_utc() {
        assert_eq!(fmt_time(0.0), "1970-01-01 00:00 UTC");
        assert_eq!(fmt_time(1_795_000_000.0), "2026-11-18 11:06 UTC");
    }
}
