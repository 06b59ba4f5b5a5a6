//! Job leases (migration 11): several `gpufleet serve` on one database run a campaign's jobs, each
//! job by the one process that claimed it.
//!
//! A claim moves the oldest `queued` job of one (campaign, agent, device) to `running` with
//! `claimed_by` (the process, `pid@host`) and `lease_until`; one job of a device runs at a time,
//! so a device that has a `running` job gets no second claim. The claimer renews its leases with
//! its heartbeat ([`Store::renew_leases`]); the campaign's owner interrupts running jobs whose
//! lease ran out, or whose claimer is known to be dead ([`Store::expire_leases`]), and requeues
//! them with a new run id, so a result the lost attempt still delivers is not stored for the job
//! as well as the new attempt's ([`Store::insert_result`] checks the run id). A claimer whose
//! worker for a queue failed gives that queue's job back itself ([`Store::interrupt_claimed`]).
//!
//! On PostgreSQL the claim takes a transaction-scoped advisory lock on (campaign, device) and picks
//! the job `FOR UPDATE SKIP LOCKED`: two serves claiming for one device at once get one job between
//! them, and claims for other devices never wait on it. SQLite has a single writer, so its claim
//! needs neither.

use super::campaigns::{JOB_SELECT, job_from_row};
use super::engine::{Engine, OptionalExtension, params};
use super::error::{StoreError, sql};
use super::open::Store;
use super::rows::JobRow;

/// How long after an outage of the database leases that ran out during it are not taken for
/// silence: their claimers renew them within a heartbeat (5 s) of the database's return; this is
/// a whole lease (30 s, `campaign::owner::LEASE`).
pub const LEASE_AFTER_OUTAGE_S: f64 = 30.0;

impl Store {
    /// Running campaigns with a `running` job whose lease ran out before `before` (nobody
    /// renews it, and nobody has taken it back): each campaign's id and how many such jobs it has.
    /// `/healthz` reports them as stalled.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub fn stalled_campaigns(&self, before: f64) -> Result<Vec<(i64, i64)>, StoreError> {
        let context = "listing stalled campaigns";
        let mut stmt = self
            .conn
            .prepare_cached(
                // From the running campaigns along `jobs_by_campaign`: a join let SQLite read
                // every job ever stored (36 ms a /healthz at 900k jobs).
                "SELECT j.campaign_id, COUNT(*) FROM jobs j
                  WHERE j.campaign_id IN (SELECT id FROM campaigns WHERE state = 'running')
                    AND j.state = 'running' AND j.lease_until < ?1
                  GROUP BY j.campaign_id ORDER BY j.campaign_id",
            )
            .map_err(sql(context))?;
        stmt.query_map([before], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(sql(context))?
            .collect::<Result<_, _>>()
            .map_err(sql(context))
    }

    /// Claims for `claimer` the oldest `queued` job of campaign `campaign_id` on agent `agent_id`'s
    /// device `device_row_id`, leased for `lease_s` seconds: it becomes `running` (one attempt
    /// more). `None` when the campaign is not `running`, no such job is queued, or the device
    /// already has a running job in this campaign.
    ///
    /// # Errors
    /// [`StoreError::Db`]; then nothing changed.
    pub fn claim_job(
        &mut self,
        campaign_id: i64,
        agent_id: i64,
        device_row_id: Option<i64>,
        claimer: &str,
        lease_s: f64,
    ) -> Result<Option<JobRow>, StoreError> {
        let now = self.now();
        let postgres = self.engine() == Engine::Postgres;
        let context = "claiming a job";
        let tx = self.write_tx().map_err(sql(context))?;
        if postgres {
            // Claims for one device of one campaign take turns; the keys only need to spread.
            let device_key = agent_id
                .wrapping_mul(1_000_003)
                .wrapping_add(device_row_id.unwrap_or(-1));
            tx.execute(
                "SELECT pg_advisory_xact_lock(CAST(?1 AS integer), CAST(?2 AS integer))",
                params![i64::from(campaign_id as i32), i64::from(device_key as i32)],
            )
            .map_err(sql(context))?;
        }
        let running: bool = tx
            .query_row(
                "SELECT state = 'running' FROM campaigns WHERE id = ?1",
                [campaign_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql(context))?
            .unwrap_or(false);
        let busy = tx
            .query_row(
                "SELECT id FROM jobs WHERE campaign_id = ?1 AND agent_id = ?2
                   AND device_row_id IS NOT DISTINCT FROM ?3 AND state = 'running' LIMIT 1",
                params![campaign_id, agent_id, device_row_id],
                |r| r.get::<_, i64>(0),
            )
            .optional()
            .map_err(sql(context))?
            .is_some();
        if !running || busy {
            return Ok(None);
        }
        let pick = if postgres {
            " FOR UPDATE SKIP LOCKED"
        } else {
            ""
        };
        let job: Option<i64> = tx
            .query_row(
                &format!(
                    "SELECT id FROM jobs WHERE campaign_id = ?1 AND agent_id = ?2
                       AND device_row_id IS NOT DISTINCT FROM ?3 AND state = 'queued'
                     ORDER BY id LIMIT 1{pick}"
                ),
                params![campaign_id, agent_id, device_row_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql(context))?;
        let Some(job) = job else {
            return Ok(None);
        };
        tx.execute(
            "UPDATE jobs SET state = 'running', claimed_by = ?2, lease_until = ?3, updated_at = ?4,
                attempts = attempts + 1, error = NULL
             WHERE id = ?1",
            params![job, claimer, now + lease_s, now],
        )
        .map_err(sql(context))?;
        let row = tx
            .query_row(
                &format!("{JOB_SELECT} WHERE j.id = ?1"),
                [job],
                job_from_row,
            )
            .map_err(sql(context))?;
        tx.commit().map_err(sql(context))?;
        Ok(Some(row))
    }

    /// Extends by `lease_s` seconds the lease of every job `claimer` is running. Returns how many.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub fn renew_leases(&mut self, claimer: &str, lease_s: f64) -> Result<usize, StoreError> {
        let now = self.now();
        self.conn
            .execute(
                "UPDATE jobs SET lease_until = ?2 WHERE claimed_by = ?1 AND state = 'running'",
                params![claimer, now + lease_s],
            )
            .map_err(sql("renewing job leases"))
    }

    /// The processes holding running jobs of campaign `campaign_id`, each once.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub fn job_claimers(&self, campaign_id: i64) -> Result<Vec<String>, StoreError> {
        let context = "listing job claimers";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT DISTINCT claimed_by FROM jobs
                 WHERE campaign_id = ?1 AND state = 'running' AND claimed_by IS NOT NULL
                 ORDER BY claimed_by",
            )
            .map_err(sql(context))?;
        stmt.query_map([campaign_id], |r| r.get(0))
            .map_err(sql(context))?
            .collect::<Result<_, _>>()
            .map_err(sql(context))
    }

    /// Interrupts the running jobs of campaign `campaign_id` that `claimer` holds on agent
    /// `agent_id`'s device `device_row_id` (one queue), with `why` as their error: the process
    /// running them lost them (its worker failed) while it lives on and renews its leases, so
    /// neither a lease running out nor a dead claimer would ever free them. The campaign's owner
    /// requeues them, or fails them once their attempts are used up. Returns how many.
    ///
    /// # Errors
    /// [`StoreError::Db`]; then nothing changed.
    pub fn interrupt_claimed(
        &mut self,
        campaign_id: i64,
        (agent_id, device_row_id): (i64, Option<i64>),
        claimer: &str,
        why: &str,
    ) -> Result<usize, StoreError> {
        let now = self.now();
        self.conn
            .execute(
                "UPDATE jobs SET state = 'interrupted', updated_at = ?5, error = ?6
                 WHERE campaign_id = ?1 AND agent_id = ?2
                   AND device_row_id IS NOT DISTINCT FROM ?3 AND claimed_by = ?4
                   AND state = 'running'",
                params![campaign_id, agent_id, device_row_id, claimer, now, why],
            )
            .map_err(sql("interrupting a worker's jobs"))
    }

    /// Interrupts campaign `campaign_id`'s running jobs whose lease ran out, and those of direct
    /// agents whose claimer is one of `dead`: their attempt is lost, and the campaign's owner
    /// requeues them. Returns how many. A dial-in agent's job keeps its lease when its claimer
    /// dies: the agent keeps the result in its outbox and delivers it to the serve it attaches
    /// to next, which stores it against the job.
    ///
    /// # Errors
    /// [`StoreError::Db`]; then nothing changed.
    pub fn expire_leases(
        &mut self,
        campaign_id: i64,
        dead: &[String],
    ) -> Result<usize, StoreError> {
        // A lease that ran out while the database could not be reached was not renewable: only
        // those that ran out before the outage count until a lease's time has passed since.
        let now = self.now();
        let cutoff = self
            .health()
            .recent_outage(now, LEASE_AFTER_OUTAGE_S)
            .map_or(now, |(began, _)| began);
        let context = "expiring job leases";
        let tx = self.write_tx().map_err(sql(context))?;
        let mut n = tx
            .execute(
                "UPDATE jobs SET state = 'interrupted', updated_at = ?2,
                    error = 'its lease ran out: the coordinator running it stopped renewing it'
                 WHERE campaign_id = ?1 AND state = 'running' AND lease_until < ?3",
                params![campaign_id, now, cutoff],
            )
            .map_err(sql(context))?;
        for claimer in dead {
            n += tx
                .execute(
                    "UPDATE jobs SET state = 'interrupted', updated_at = ?3,
                        error = 'the coordinator running it stopped'
                     WHERE campaign_id = ?1 AND state = 'running' AND claimed_by = ?2
                       AND agent_id IN (SELECT id FROM agents WHERE kind = 'direct')",
                    params![campaign_id, claimer, now],
                )
                .map_err(sql(context))?;
        }
        tx.commit().map_err(sql(context))?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::temp_store;
    use super::*;
    use crate::store::{JobState, NewJob};

    /// A running campaign with `n` queued jobs on one device of agent `rig`; its id and the
    /// agent's.
    fn campaign_with_jobs(store: &mut Store, n: usize) -> (i64, i64) {
        let agent = store
            .add_agent("rig", "http://127.0.0.1:50051", None)
            .unwrap();
        let campaign = store.create_campaign("smoke", "", "{}").unwrap();
        let jobs: Vec<NewJob> = (0..n)
            .map(|i| NewJob {
                campaign_id: campaign,
                agent_id: agent.id,
                device_row_id: None,
                spec_key: format!("k{i}"),
                spec_json: "{}".into(),
                run_id: format!("run-{i}"),
            })
            .collect();
        store.add_jobs(&jobs).unwrap();
        (campaign, agent.id)
    }

    #[test]
    fn a_device_gets_one_claim_at_a_time_and_leases_run_out() {
        let (_db, mut store) = temp_store();
        let (c, agent) = campaign_with_jobs(&mut store, 3);
        let first = store
            .claim_job(c, agent, None, "1@a", 30.0)
            .unwrap()
            .unwrap();
        assert_eq!(
            (first.run_id.as_str(), first.state, first.attempts),
            ("run-0", JobState::Running, 1)
        );
        // The device is busy: no second claim, by this process or another.
        assert!(
            store
                .claim_job(c, agent, None, "2@b", 30.0)
                .unwrap()
                .is_none()
        );
        assert_eq!(store.job_claimers(c).unwrap(), ["1@a"]);
        // A live claimer's lease holds; a dead one's job is interrupted.
        assert_eq!(store.renew_leases("1@a", 30.0).unwrap(), 1);
        assert_eq!(store.expire_leases(c, &[]).unwrap(), 0);
        assert_eq!(store.expire_leases(c, &["1@a".to_string()]).unwrap(), 1);
        let row = store.job_by_run_id("run-0").unwrap().unwrap();
        assert_eq!(row.state, JobState::Interrupted);
        // The device is free again; a lease that runs out interrupts its job too.
        let second = store
            .claim_job(c, agent, None, "2@b", -1.0)
            .unwrap()
            .unwrap();
        assert_eq!(second.run_id, "run-1");
        assert_eq!(store.expire_leases(c, &[]).unwrap(), 1);
        // A campaign that is not running gets no claims.
        store
            .set_campaign_state(c, crate::store::CampaignState::Done)
            .unwrap();
        assert!(
            store
                .claim_job(c, agent, None, "2@b", 30.0)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_failed_worker_gives_back_only_its_own_queue_s_job() {
        let (_db, mut store) = temp_store();
        let (c, agent) = campaign_with_jobs(&mut store, 2);
        let job = store
            .claim_job(c, agent, None, "1@a", 30.0)
            .unwrap()
            .unwrap();
        let why = "the coordinator's worker for this device failed: boom";
        // Another claimer's, another agent's or another device's queue: nothing.
        assert_eq!(
            store
                .interrupt_claimed(c, (agent, None), "2@b", why)
                .unwrap(),
            0
        );
        assert_eq!(
            store
                .interrupt_claimed(c, (agent + 1, None), "1@a", why)
                .unwrap(),
            0
        );
        assert_eq!(
            store
                .interrupt_claimed(c, (agent, Some(1)), "1@a", why)
                .unwrap(),
            0
        );
        assert_eq!(
            store
                .interrupt_claimed(c, (agent, None), "1@a", why)
                .unwrap(),
            1
        );
        let row = store.job_by_run_id(&job.run_id).unwrap().unwrap();
        assert_eq!(row.state, JobState::Interrupted);
        assert_eq!(row.error.as_deref(), Some(why));
        let queued = store.job_by_run_id("run-1").unwrap().unwrap();
        assert_eq!(
            queued.state,
            JobState::Queued,
            "a queued job is not touched"
        );
    }

    /// Two processes (two connections) claim from one queue at once, over and over: every job is
    /// claimed by exactly one of them, and never two at a time for the one device.
    #[test]
    fn two_coordinators_claiming_at_once_take_each_job_once() {
        let (_db, mut store) = temp_store();
        let (c, agent) = campaign_with_jobs(&mut store, 40);
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        let claim = |mut s: Store, me: &'static str| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                for _ in 0..40 {
                    barrier.wait();
                    if let Some(job) = s.claim_job(c, agent, None, me, 30.0).unwrap() {
                        // Finish it, as a result would, so the device is free for the next.
                        s.set_job_state(job.id, JobState::Done, None).unwrap();
                        mine.push(job.id);
                    }
                    barrier.wait();
                }
                mine
            })
        };
        let a = claim(store.open_another().unwrap(), "1@a");
        let b = claim(store.open_another().unwrap(), "2@b");
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        let mut all: Vec<i64> = a.iter().chain(&b).copied().collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 40, "every job claimed: a {a:?} b {b:?}");
        assert_eq!(a.len() + b.len(), 40, "none twice: a {a:?} b {b:?}");
    }
}
