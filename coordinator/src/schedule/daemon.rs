//! The schedule daemon: fires due slots, executes their campaigns crash-safely, checks every
//! result for regressions (with confirmation reruns) and resumes what a stopped or killed
//! coordinator left. See the [module docs](super) for slots and resuming.

mod confirm;

use super::cron::Cron;
use super::slots::{DaemonConfig, Due, due};
use super::spec::{ScheduleSpec, request_of};
use crate::campaign::execute::{Executor, assist_campaign, execute_campaign, finish_campaign};
use crate::campaign::handoff::{check_attached, follow, needs_handoff};
use crate::campaign::owner::owner_is_dead;
use crate::campaign::prepare::resolve_and_plan_into;
use crate::campaign::progress::Reporter;
use crate::campaign::request::{CampaignRequest, StoredRequest};
use crate::db::Db;
use crate::regression::check::{AssessSummary, ResolveSummary};
use crate::store::{CampaignState, ResultFilter, ScheduleRow, StoreError};
use crate::time::fmt_time;
use serde::Serialize;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Mutex};

/// One finished (or failed to start) scheduled campaign.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CampaignReport {
    pub campaign_id: i64,
    pub schedule: Option<String>,
    pub results: usize,
    /// Results of the campaign that are not `ok` (failed runs, agents unreachable).
    pub not_ok: usize,
    pub error: Option<String>,
    pub assess: AssessSummary,
    pub resolve: ResolveSummary,
}

impl fmt::Display for CampaignReport {
    /// One line for the log: counts of results, checks and confirmations.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self;
        write!(
            f,
            "campaign {}{}: {} results ({} not ok), {} checked ({} stable, {} no verdict, {} suspect), {} confirmed, {} not confirmed{}",
            r.campaign_id,
            r.schedule
                .as_deref()
                .map(|s| format!(" (schedule {s})"))
                .unwrap_or_default(),
            r.results,
            r.not_ok,
            r.assess.checked,
            r.assess.stable,
            r.assess.no_verdict,
            r.assess.suspects,
            r.resolve.confirmed,
            r.resolve.not_confirmed,
            r.error
                .as_deref()
                .map(|e| format!("; error: {e}"))
                .unwrap_or_default()
        )
    }
}

/// The campaigns of other serves a serve runs jobs of, and the tasks doing it.
#[derive(Default)]
struct Assisting {
    campaigns: BTreeSet<i64>,
    tasks: tokio::task::JoinSet<i64>,
}

/// The schedule daemon of `gpufleet serve`. Cheap to clone.
#[derive(Clone)]
pub struct Daemon {
    db: Db,
    ex: Executor,
    cfg: DaemonConfig,
    running: Arc<Mutex<tokio::task::JoinSet<CampaignReport>>>,
    /// The campaigns `running` executes: one of this process's campaigns that is `running` in
    /// the store but not here (its execution ended on an error) is resumed.
    executing: Arc<Mutex<BTreeSet<i64>>>,
    /// Other serves' campaigns this one runs jobs of (for the dial-in agents it holds).
    assisting: Arc<Mutex<Assisting>>,
    /// The last tick's failure (when, why) while ticks fail: schedules cannot fire.
    tick_failure: Arc<Mutex<Option<(f64, String)>>>,
    /// The connected agents' live power (empty unless the serve follows agents).
    live: Arc<crate::live::LivePower>,
}

impl Daemon {
    /// A daemon over `db` that reaches agents over gRPC and reports campaign events to
    /// `reporter`; it owns the campaigns it starts or claims as this process (`pid@host`).
    pub fn new(db: Db, cfg: DaemonConfig, reporter: Arc<dyn Reporter>) -> Daemon {
        let mut ex = Executor::new(cfg.retry, reporter);
        ex.max_attempts = cfg.max_attempts;
        Daemon {
            db,
            ex,
            cfg,
            running: Arc::new(Mutex::new(tokio::task::JoinSet::new())),
            executing: Arc::default(),
            tick_failure: Arc::default(),
            assisting: Arc::default(),
            live: crate::live::LivePower::new(0.0),
        }
    }

    /// Serves `live` to the HTTP API (the agent page, `/metrics`, the power stream).
    pub fn with_live(mut self, live: Arc<crate::live::LivePower>) -> Daemon {
        self.live = live;
        self
    }

    /// The connected agents' live power.
    pub fn live(&self) -> &Arc<crate::live::LivePower> {
        &self.live
    }

    /// Reaches agents through `connect` instead of gRPC only (a serve with dial-in agents).
    pub fn with_connect(mut self, connect: crate::link::Connect) -> Daemon {
        self.ex.connect = connect;
        self
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

    /// [`Daemon::execute`] as a background task that [`Daemon::wait_idle`] and
    /// [`Daemon::reap`] collect.
    fn execute_in_background(
        &self,
        id: i64,
        schedule: Option<String>,
        req: Result<CampaignRequest, String>,
        check: bool,
    ) {
        let this = self.clone();
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        self.executing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id);
        running.spawn(async move {
            let report = this.execute(id, schedule, req, check).await;
            this.executing
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            report
        });
    }

    /// Records how a tick went: a failure (`Some`) until a tick succeeds again.
    pub fn note_tick(&self, failure: Option<&StoreError>) {
        let mut last = self.tick_failure.lock().unwrap_or_else(|p| p.into_inner());
        match failure {
            Some(e) => {
                let since = last.as_ref().map_or_else(crate::time::now, |f| f.0);
                *last = Some((since, e.to_string()));
            }
            None => *last = None,
        }
    }

    /// Since when ticks fail and why (schedules cannot fire), while they do.
    pub fn tick_failure(&self) -> Option<(f64, String)> {
        self.tick_failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether this process executes campaign `id` now.
    fn executing(&self, id: i64) -> bool {
        self.executing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&id)
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
        if let Ok(r) = &req
            && needs_handoff(r)
        {
            return self.hand_over(id, row, r).await;
        }
        Ok(self.execute(id, Some(row.name.clone()), req, true).await)
    }

    /// `run_now` of a schedule with dial-in agents, which only the serve holding their streams
    /// reaches: the campaign is released to that serve (which also checks it for regressions) and
    /// followed to its end.
    async fn hand_over(
        &self,
        id: i64,
        row: &ScheduleRow,
        req: &CampaignRequest,
    ) -> Result<CampaignReport, StoreError> {
        let mut report = CampaignReport {
            campaign_id: id,
            schedule: Some(row.name.clone()),
            results: 0,
            not_ok: 0,
            error: None,
            assess: Default::default(),
            resolve: Default::default(),
        };
        if let Err(e) = check_attached(req) {
            self.db
                .call(move |s| s.set_campaign_state(id, CampaignState::Failed))
                .await?;
            report.error = Some(e.to_string());
            return Ok(report);
        }
        let owner = self.ex.owner.clone();
        self.db.call(move |s| s.release_campaigns(&owner)).await?;
        match follow(&self.db, id, self.ex.reporter.as_ref()).await {
            Ok(c) => {
                report.results = c.results.values().sum::<i64>() as usize;
                report.not_ok = self.not_ok(id).await;
                if c.state == CampaignState::Failed {
                    report.error = Some("the campaign failed (see `gpufleet campaigns`)".into());
                }
            }
            Err(e) => report.error = Some(e.to_string()),
        }
        Ok(report)
    }

    async fn create(
        &self,
        row: &ScheduleRow,
        slot: Option<f64>,
    ) -> Result<Option<(i64, Result<CampaignRequest, String>)>, StoreError> {
        // A stored spec that does not parse fails the slot's campaign, naming the field.
        let spec = gpufleet_kernels::from_json_value::<ScheduleSpec>(&row.spec)
            .map_err(|e| format!("schedule {}: its stored spec does not parse: {e}", row.name));
        let agents = self.db.call(|s| s.agents()).await?;
        let req = spec
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|spec| request_of(&row.name, spec, &agents));
        let suite = spec.map(|s| s.suite).unwrap_or_default();
        let description = match slot {
            Some(slot) => format!("schedule {} slot {}", row.name, fmt_time(slot)),
            None => format!("schedule {} run now", row.name),
        };
        let (suite, spec_json) = match &req {
            Ok(r) => (r.suite.clone(), StoredRequest::of(r).to_json()),
            Err(_) => (suite, "{}".to_string()),
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
            not_ok: 0,
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
                Ok(req) => resolve_and_plan_into(&self.db, id, req, &self.ex)
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.clone()),
            };
            if let Err(e) = planned {
                // Agents that could not be reached have their `unreachable` rows even so.
                report.not_ok = self.not_ok(id).await;
                report.results = report.not_ok;
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
            self.check_and_confirm(id, &mut report, &mut results).await;
        }
        report.results = results.len();
        report.not_ok = self.not_ok(id).await;
        if let Err(e) = finish_campaign(&self.db, id, &results).await {
            report.error = Some(e.to_string());
        }
        report
    }

    /// How many stored results of campaign `id` are not `ok` (0 when they cannot be read).
    async fn not_ok(&self, id: i64) -> usize {
        let filter = ResultFilter {
            campaign_id: Some(id),
            ..Default::default()
        };
        self.db
            .call(move |s| s.results(&filter))
            .await
            .map(|rows| rows.iter().filter(|r| r.record.status != "ok").count())
            .unwrap_or(0)
    }

    /// Claims and resumes (in the background) every orphaned or interrupted campaign younger
    /// than `resume_max_age_s` (and this process's own `running` campaigns it no longer executes), and runs the jobs of other serves' running campaigns that are for
    /// dial-in agents this serve holds ([`assist_campaign`]). Returns the campaigns resumed.
    ///
    /// # Errors
    /// [`StoreError`] when the campaigns cannot be read.
    pub async fn resume_orphans(&self, now: f64) -> Result<Vec<i64>, StoreError> {
        let unfinished = self.db.call(|s| s.unfinished_campaigns()).await?;
        let mut resumed = Vec::new();
        // Heartbeats could not be written while the database was away: for a while after it
        // came back, an old one is not taken for a dead owner.
        let settling = self
            .db
            .health()
            .recent_outage(now, self.cfg.stale_after_s)
            .is_some();
        let fresh =
            |h: Option<f64>| settling || h.is_some_and(|h| now - h <= self.cfg.stale_after_s);
        for c in unfinished {
            if now - c.created_at > self.cfg.resume_max_age_s {
                continue;
            }
            if c.state == "running"
                && let Some(o) = &c.owner
                && o != &self.ex.owner
                && !owner_is_dead(o)
                && fresh(c.heartbeat_at)
            {
                self.assist(c.id);
                continue;
            }
            let orphan = match (&c.owner, c.state.as_str()) {
                // Ours, and running in the store, but no longer here: its execution ended on an
                // error (a store that stayed away too long) and left its jobs to expire.
                (Some(o), state) if o == &self.ex.owner => {
                    state == "running" && !self.executing(c.id)
                }
                (None, _) => true,
                (_, "interrupted") => true,
                (Some(o), _) => owner_is_dead(o) || !fresh(c.heartbeat_at),
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
                Some(r) => StoredRequest::from_json(&r.spec)
                    .map(|stored| stored.into_request(&r.suite, &r.description, &agents)),
                None => Err(format!("campaign {id} vanished")),
            };
            let check = c.schedule_name.is_some();
            self.execute_in_background(id, c.schedule_name.clone(), req, check);
            resumed.push(id);
        }
        Ok(resumed)
    }

    /// Runs the jobs of campaign `id` (another serve's) for the dial-in agents this serve holds,
    /// in the background, unless that is under way.
    fn assist(&self, id: i64) {
        let mut assisting = self.assisting.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(done) = assisting.tasks.try_join_next() {
            if let Ok(done) = done {
                assisting.campaigns.remove(&done);
            }
        }
        if !assisting.campaigns.insert(id) {
            return;
        }
        let (db, ex) = (self.db.clone(), self.ex.clone());
        assisting.tasks.spawn(async move {
            match assist_campaign(&db, id, &ex).await {
                Ok(outcomes) if !outcomes.is_empty() => ex.reporter.note(&format!(
                    "campaign {id}: ran {} jobs for the dial-in agents this serve holds",
                    outcomes.len()
                )),
                Ok(_) => {}
                Err(e) => ex.reporter.note(&format!("campaign {id}: {e}")),
            }
            id
        });
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
        self.assisting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .tasks
            .abort_all();
        let owner = self.ex.owner.clone();
        self.db.call(move |s| s.release_campaigns(&owner)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::campaign::progress::LogReporter;

    #[tokio::test]
    async fn a_stored_schedule_spec_that_does_not_parse_fails_its_campaign_naming_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("fleet.db")).unwrap();
        let spec = r#"{"suite": "smoke", "all_agents": true, "timeout_s": "soon"}"#;
        let row = db
            .with(|s| s.add_schedule("nightly", "0 3 * * *", spec, true))
            .unwrap();
        let daemon = Daemon::new(db.clone(), DaemonConfig::default(), Arc::new(LogReporter));
        let report = daemon.run_now(&row).await.unwrap();
        let error = report.error.unwrap_or_default();
        assert!(
            error.starts_with(
                "schedule nightly: its stored spec does not parse: field `timeout_s`: invalid type"
            ),
            "{error}"
        );
        let campaign = db
            .with(|s| s.campaign(report.campaign_id))
            .unwrap()
            .unwrap();
        assert_eq!(campaign.state, CampaignState::Failed);
    }
}
