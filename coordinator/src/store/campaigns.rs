//! Campaigns and their jobs.
//!
//! A job is one (spec, device) of a campaign; it owns the run id its result will carry, so the
//! result can find its job and a retried job cannot store a second result under the same id.

use std::collections::{BTreeMap, HashMap};

use super::engine::{DbError, DbResult, OptionalExtension, Row, named_params, params};

use super::error::StoreError;
use super::error::sql;
use super::open::Store;
use super::rows::{CampaignRow, CampaignState, JobCounts, JobRow, JobState, NewJob};
use super::values::{json_column, parse_json, require_non_empty};

impl Store {
    /// Creates a campaign in state `running`; returns its id.
    ///
    /// # Errors
    /// [`StoreError::InvalidInput`] for an empty `suite` or a `spec_json` that is not JSON.
    pub fn create_campaign(
        &mut self,
        suite: &str,
        description: &str,
        spec_json: &str,
    ) -> Result<i64, StoreError> {
        require_non_empty("suite", suite)?;
        parse_json("spec_json", spec_json)?;
        let now = self.now();
        self.conn
            .query_row(
                "INSERT INTO campaigns (suite, description, state, created_at, spec_json)
                 VALUES (?1, ?2, 'running', ?3, ?4) RETURNING id",
                params![suite, description, now, spec_json],
                |r| r.get(0),
            )
            .map_err(sql("creating a campaign"))
    }

    /// Moves a campaign to `state`; a terminal state stamps `finished_at`, `running` clears it.
    ///
    /// # Errors
    /// [`StoreError::UnknownCampaign`] if no campaign has `id`.
    pub fn set_campaign_state(&mut self, id: i64, state: CampaignState) -> Result<(), StoreError> {
        let finished_at = state.is_terminal().then(|| self.now());
        let changed = self
            .conn
            .execute(
                "UPDATE campaigns SET state = ?2, finished_at = ?3 WHERE id = ?1",
                params![id, state.name(), finished_at],
            )
            .map_err(sql("setting a campaign's state"))?;
        if changed == 0 {
            return Err(StoreError::UnknownCampaign { id });
        }
        Ok(())
    }

    /// Every campaign, newest first, with job counts per state and result counts per status.
    ///
    /// # Errors
    /// [`StoreError::Db`] if a query fails or a stored value is malformed.
    pub fn campaigns(&self) -> Result<Vec<CampaignRow>, StoreError> {
        self.campaigns_where(None)
    }

    /// One campaign with its counts, if it exists.
    ///
    /// # Errors
    /// [`StoreError::Db`] if a query fails or a stored value is malformed.
    pub fn campaign(&self, id: i64) -> Result<Option<CampaignRow>, StoreError> {
        Ok(self.campaigns_where(Some(id))?.into_iter().next())
    }

    fn campaigns_where(&self, id: Option<i64>) -> Result<Vec<CampaignRow>, StoreError> {
        let context = "listing campaigns";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT id, suite, description, state, created_at, finished_at, spec_json
                 FROM campaigns WHERE CAST(?1 AS bigint) IS NULL OR id = ?1
                 ORDER BY created_at DESC, id DESC",
            )
            .map_err(sql(context))?;
        let mut rows: Vec<CampaignRow> = stmt
            .query_map([id], |r| {
                Ok(CampaignRow {
                    id: r.get("id")?,
                    suite: r.get("suite")?,
                    description: r.get("description")?,
                    state: state_column(r, "state", CampaignState::parse)?,
                    created_at: r.get("created_at")?,
                    finished_at: r.get("finished_at")?,
                    spec: json_column(r, "spec_json")?,
                    jobs: JobCounts::default(),
                    results: BTreeMap::new(),
                })
            })
            .map_err(sql(context))?
            .collect::<Result<_, _>>()
            .map_err(sql(context))?;
        let index: HashMap<i64, usize> = rows.iter().enumerate().map(|(i, c)| (c.id, i)).collect();

        // The counts the triggers of migration 8 keep: a few rows per campaign (on PostgreSQL a
        // few shards of each, added up here), never a pass over jobs or results.
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT campaign_id, kind, state, CAST(sum(n) AS bigint) AS n FROM campaign_counts
                 WHERE CAST(?1 AS bigint) IS NULL OR campaign_id = ?1
                 GROUP BY campaign_id, kind, state HAVING sum(n) > 0",
            )
            .map_err(sql(context))?;
        let counts = stmt
            .query_map([id], |r| {
                let kind: String = r.get("kind")?;
                let state = if kind == "job" {
                    Counted::Job(state_column(r, "state", JobState::parse)?)
                } else {
                    Counted::Result(r.get("state")?)
                };
                Ok((
                    r.get::<_, i64>("campaign_id")?,
                    state,
                    r.get::<_, i64>("n")?,
                ))
            })
            .map_err(sql(context))?;
        for item in counts {
            let (campaign, state, n) = item.map_err(sql(context))?;
            let Some(&i) = index.get(&campaign) else {
                continue;
            };
            match state {
                Counted::Job(job_state) => rows[i].jobs.add(job_state, n),
                Counted::Result(status) => {
                    rows[i].results.insert(status, n);
                }
            }
        }
        Ok(rows)
    }

    /// Adds a `queued` job to a campaign; returns its id.
    ///
    /// # Errors
    /// [`StoreError::InvalidInput`] for an empty `spec_key` or `run_id`, a `spec_json` that is not
    /// JSON, or a `run_id` another job already has; [`StoreError::UnknownCampaign`] /
    /// [`StoreError::UnknownAgent`] (named `#<id>`) for missing references; [`StoreError::Db`]
    /// for a `device_row_id` that does not exist (foreign key).
    pub fn add_job(&mut self, job: &NewJob) -> Result<i64, StoreError> {
        Ok(self.add_jobs(std::slice::from_ref(job))?[0])
    }

    /// Adds several `queued` jobs in one transaction (all or none); returns their ids.
    ///
    /// # Errors
    /// As [`Store::add_job`] for the first job that fails; then none is added.
    pub fn add_jobs(&mut self, jobs: &[NewJob]) -> Result<Vec<i64>, StoreError> {
        for job in jobs {
            require_non_empty("spec_key", &job.spec_key)?;
            require_non_empty("run_id", &job.run_id)?;
            parse_json("spec_json", &job.spec_json)?;
        }
        let now = self.now();
        let context = "adding a job";
        let tx = self.write_tx().map_err(sql(context))?;
        let mut ids = Vec::with_capacity(jobs.len());
        for job in jobs {
            let exists = |table: &str, id: i64| -> Result<bool, StoreError> {
                tx.query_row(
                    &format!("SELECT 1 FROM {table} WHERE id = ?1"),
                    [id],
                    |_| Ok(()),
                )
                .optional()
                .map(|found| found.is_some())
                .map_err(sql(context))
            };
            if !exists("campaigns", job.campaign_id)? {
                return Err(StoreError::UnknownCampaign {
                    id: job.campaign_id,
                });
            }
            if !exists("agents", job.agent_id)? {
                return Err(StoreError::UnknownAgent {
                    name: format!("#{}", job.agent_id),
                });
            }
            let id = tx.query_row(
                "INSERT INTO jobs (campaign_id, agent_id, device_row_id, spec_key, spec_json, run_id,
                                   state, attempts, updated_at)
                 VALUES (:campaign_id, :agent_id, :device_row_id, :spec_key, :spec_json, :run_id,
                         'queued', 0, :now)
                 RETURNING id",
                named_params! {
                    ":campaign_id": job.campaign_id,
                    ":agent_id": job.agent_id,
                    ":device_row_id": job.device_row_id,
                    ":spec_key": job.spec_key,
                    ":spec_json": job.spec_json,
                    ":run_id": job.run_id,
                    ":now": now,
                },
                |r| r.get(0),
            )
            .map_err(|e| {
                if e.is_unique_violation() {
                    StoreError::invalid(
                        "run_id",
                        format!("run id {:?} is already used by another job", job.run_id),
                    )
                } else {
                    sql(context)(e)
                }
            })?;
            ids.push(id);
        }
        tx.commit().map_err(sql(context))?;
        Ok(ids)
    }

    /// Moves a job to `state` with `error` as its reason (`None` clears it). Entering `running`
    /// counts one more attempt.
    ///
    /// # Errors
    /// [`StoreError::UnknownJob`] if no job has `job_id`.
    pub fn set_job_state(
        &mut self,
        job_id: i64,
        state: JobState,
        error: Option<&str>,
    ) -> Result<(), StoreError> {
        let now = self.now();
        let changed = self
            .conn
            .execute(
                "UPDATE jobs SET state = ?2, error = ?3, updated_at = ?4,
                    attempts = attempts + CASE WHEN ?2 = 'running' THEN 1 ELSE 0 END
                 WHERE id = ?1",
                params![job_id, state.name(), error, now],
            )
            .map_err(sql("setting a job's state"))?;
        if changed == 0 {
            return Err(StoreError::UnknownJob { id: job_id });
        }
        Ok(())
    }

    /// The jobs of a campaign, in the order they were added.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails or a stored value is malformed.
    pub fn jobs(&self, campaign_id: i64) -> Result<Vec<JobRow>, StoreError> {
        let context = "listing jobs";
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "{JOB_SELECT} WHERE j.campaign_id = ?1 ORDER BY j.id"
            ))
            .map_err(sql(context))?;
        stmt.query_map([campaign_id], job_from_row)
            .map_err(sql(context))?
            .collect::<Result<_, _>>()
            .map_err(sql(context))
    }

    /// At most `limit` jobs of a campaign by id, those after job id `after` (a cursor) and then
    /// `skip` more (a page number): a page of a campaign of thousands of jobs reads that page only.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails.
    pub fn jobs_page(
        &self,
        campaign_id: i64,
        after: Option<i64>,
        skip: usize,
        limit: usize,
    ) -> Result<Vec<JobRow>, StoreError> {
        let context = "listing a page of jobs";
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "{JOB_SELECT} WHERE j.campaign_id = ?1 AND j.id > ?2 ORDER BY j.id LIMIT ?3 OFFSET ?4"
            ))
            .map_err(sql(context))?;
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        stmt.query_map(
            params![
                campaign_id,
                after.unwrap_or(i64::MIN),
                count(limit),
                count(skip)
            ],
            job_from_row,
        )
        .map_err(sql(context))?
        .collect::<Result<_, _>>()
        .map_err(sql(context))
    }

    /// The stored result of each of `run_ids` that has one: run id → (result id, status).
    ///
    /// # Errors
    /// [`StoreError::Db`] if a query fails.
    pub fn results_of_runs(
        &self,
        run_ids: &[String],
    ) -> Result<HashMap<String, (i64, String)>, StoreError> {
        let rows = self.rows_for_ids(
            "reading the results of runs",
            run_ids,
            |marks| format!("SELECT run_id, id, status FROM results WHERE run_id IN ({marks})"),
            |r| Ok((r.get::<_, String>(0)?, (r.get(1)?, r.get(2)?))),
        )?;
        Ok(rows.into_iter().collect())
    }

    /// The jobs `agent_id` is running now (of running campaigns), oldest first.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails.
    pub fn running_jobs(&self, agent_id: i64) -> Result<Vec<JobRow>, StoreError> {
        let context = "listing an agent's running jobs";
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "{JOB_SELECT} WHERE j.agent_id = ?1 AND j.state = 'running'
                   AND j.campaign_id IN (SELECT id FROM campaigns WHERE state = 'running')
                 ORDER BY j.updated_at"
            ))
            .map_err(sql(context))?;
        stmt.query_map([agent_id], job_from_row)
            .map_err(sql(context))?
            .collect::<Result<_, _>>()
            .map_err(sql(context))
    }

    /// The job whose current run id is `run_id`, if any.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails.
    pub fn job_by_run_id(&self, run_id: &str) -> Result<Option<JobRow>, StoreError> {
        self.conn
            .query_row(
                &format!("{JOB_SELECT} WHERE j.run_id = ?1"),
                [run_id],
                job_from_row,
            )
            .optional()
            .map_err(sql("looking up a job by run id"))
    }
}

/// A job row with its agent's name; [`job_from_row`] reads it.
pub(super) const JOB_SELECT: &str =
    "SELECT j.id, j.campaign_id, j.agent_id, a.name AS agent, j.device_row_id,
        j.spec_key, j.spec_json, j.run_id, j.state, j.attempts, j.error, j.updated_at,
        j.confirms_result_id
 FROM jobs j JOIN agents a ON a.id = j.agent_id";

pub(super) fn job_from_row(r: &Row<'_>) -> DbResult<JobRow> {
    Ok(JobRow {
        id: r.get("id")?,
        campaign_id: r.get("campaign_id")?,
        agent_id: r.get("agent_id")?,
        agent: r.get("agent")?,
        device_row_id: r.get("device_row_id")?,
        spec_key: r.get("spec_key")?,
        spec: json_column(r, "spec_json")?,
        run_id: r.get("run_id")?,
        state: state_column(r, "state", JobState::parse)?,
        attempts: r.get("attempts")?,
        error: r.get("error")?,
        updated_at: r.get("updated_at")?,
        confirms_result_id: r.get("confirms_result_id")?,
    })
}

/// Reads a state name column through `parse`, failing on a name this binary does not know.
/// What a `campaign_counts` row counts: jobs in a state, or results with a status.
enum Counted {
    Job(JobState),
    Result(String),
}

fn state_column<T>(r: &Row<'_>, column: &str, parse: fn(&str) -> Option<T>) -> DbResult<T> {
    let name: String = r.get(column)?;
    parse(&name).ok_or_else(|| DbError::conversion(column, format!("unknown state {name:?}")))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{assert_invalid, sample_result, temp_store};
    use super::*;

    fn new_job(campaign_id: i64, agent_id: i64, run_id: &str) -> NewJob {
        NewJob {
            campaign_id,
            agent_id,
            device_row_id: None,
            spec_key: "gemm/naive/n=64".into(),
            spec_json: r#"{"kernel":"gemm"}"#.into(),
            run_id: run_id.into(),
        }
    }

    #[test]
    fn campaign_lifecycle_stamps_finished_at() {
        let (_dir, store) = temp_store();
        let mut store = store.with_clock(|| 7.0);
        let id = store
            .create_campaign("smoke", "first try", r#"{"agents":["a"]}"#)
            .unwrap();
        let c = store.campaign(id).unwrap().unwrap();
        assert_eq!(c.state, CampaignState::Running);
        assert_eq!(c.finished_at, None);
        assert_eq!(c.spec, serde_json::json!({"agents": ["a"]}));
        store.set_campaign_state(id, CampaignState::Done).unwrap();
        let c = store.campaign(id).unwrap().unwrap();
        assert_eq!((c.state, c.finished_at), (CampaignState::Done, Some(7.0)));
        store
            .set_campaign_state(id, CampaignState::Running)
            .unwrap();
        assert_eq!(store.campaign(id).unwrap().unwrap().finished_at, None);
        let err = store
            .set_campaign_state(id + 1, CampaignState::Failed)
            .unwrap_err();
        assert!(matches!(err, StoreError::UnknownCampaign { .. }), "{err}");
        assert_eq!(store.campaign(id + 1).unwrap(), None);
    }

    #[test]
    fn campaign_input_is_validated() {
        let (_dir, mut store) = temp_store();
        let err = store.create_campaign("", "d", "{}").unwrap_err();
        assert_invalid(&err, "suite");
        let err = store.create_campaign("s", "d", "{oops").unwrap_err();
        assert_invalid(&err, "spec_json");
        assert!(store.campaigns().unwrap().is_empty());
    }

    #[test]
    fn campaigns_count_jobs_by_state_and_results_by_status() {
        let (_dir, mut store) = temp_store();
        let agent = store.add_agent("a", "http://h:1", None).unwrap().id;
        let c1 = store.create_campaign("smoke", "", "{}").unwrap();
        let c2 = store.create_campaign("full", "", "{}").unwrap();
        let jobs: Vec<i64> = (0..4)
            .map(|i| {
                store
                    .add_job(&new_job(c1, agent, &format!("r{i}")))
                    .unwrap()
            })
            .collect();
        store.add_job(&new_job(c2, agent, "other")).unwrap();
        store
            .set_job_state(jobs[1], JobState::Running, None)
            .unwrap();
        store
            .set_job_state(jobs[2], JobState::Failed, Some("agent refused"))
            .unwrap();
        for (i, status) in [(0, "ok"), (3, "crashed")] {
            let mut r = sample_result(&format!("r{i}"), agent);
            r.campaign_id = Some(c1);
            r.job_id = Some(jobs[i]);
            r.status = status.into();
            assert!(store.insert_result(&r).unwrap());
        }
        let c = store.campaign(c1).unwrap().unwrap();
        assert_eq!(
            c.jobs,
            JobCounts {
                queued: 0,
                running: 1,
                done: 2,
                failed: 1,
                interrupted: 0
            }
        );
        assert_eq!(
            c.results,
            BTreeMap::from([("crashed".to_owned(), 1), ("ok".to_owned(), 1)])
        );
        let all = store.campaigns().unwrap();
        assert_eq!(all.iter().map(|c| c.id).collect::<Vec<_>>(), [c2, c1]);
        assert_eq!(all[0].jobs.queued, 1);
        assert!(all[0].results.is_empty());
    }

    #[test]
    fn job_states_count_attempts_and_keep_errors() {
        let (_dir, mut store) = temp_store();
        let agent = store.add_agent("a", "http://h:1", None).unwrap().id;
        let c = store.create_campaign("smoke", "", "{}").unwrap();
        let id = store.add_job(&new_job(c, agent, "run-1")).unwrap();
        let job = &store.jobs(c).unwrap()[0];
        assert_eq!((job.state, job.attempts), (JobState::Queued, 0));
        assert_eq!(job.agent, "a");
        store.set_job_state(id, JobState::Running, None).unwrap();
        store
            .set_job_state(id, JobState::Interrupted, Some("agent went away"))
            .unwrap();
        let job = &store.jobs(c).unwrap()[0];
        assert_eq!(job.attempts, 1);
        assert_eq!(job.error.as_deref(), Some("agent went away"));
        store.set_job_state(id, JobState::Running, None).unwrap();
        let job = &store.jobs(c).unwrap()[0];
        assert_eq!(
            (job.state, job.attempts, job.error.clone()),
            (JobState::Running, 2, None)
        );
        let err = store
            .set_job_state(id + 9, JobState::Done, None)
            .unwrap_err();
        assert!(matches!(err, StoreError::UnknownJob { .. }), "{err}");
    }

    #[test]
    fn add_job_rejects_duplicates_and_missing_references() {
        let (_dir, mut store) = temp_store();
        let agent = store.add_agent("a", "http://h:1", None).unwrap().id;
        let c = store.create_campaign("smoke", "", "{}").unwrap();
        store.add_job(&new_job(c, agent, "dup")).unwrap();
        let err = store.add_job(&new_job(c, agent, "dup")).unwrap_err();
        assert_invalid(&err, "run_id");
        let err = store.add_job(&new_job(c + 5, agent, "x")).unwrap_err();
        assert!(matches!(err, StoreError::UnknownCampaign { .. }), "{err}");
        let err = store.add_job(&new_job(c, agent + 5, "y")).unwrap_err();
        assert!(matches!(err, StoreError::UnknownAgent { .. }), "{err}");
        let mut bad_device = new_job(c, agent, "z");
        bad_device.device_row_id = Some(404);
        let err = store.add_job(&bad_device).unwrap_err();
        assert!(matches!(err, StoreError::Db { .. }), "{err}");
        assert!(
            err.to_string().to_lowercase().contains("foreign key"),
            "{err}"
        );
        assert_eq!(store.jobs(c).unwrap().len(), 1);
    }

    #[test]
    fn a_released_campaign_is_interrupted_and_claimed_once() {
        let (_dir, mut store) = temp_store();
        let agent = store.add_agent("a", "http://h:1", None).unwrap().id;
        let c = store.create_campaign("smoke", "", "{}").unwrap();
        store.set_campaign_owner(c, "1@h").unwrap();
        let running = store.add_job(&new_job(c, agent, "r1")).unwrap();
        store.add_job(&new_job(c, agent, "r2")).unwrap();
        store
            .set_job_state(running, JobState::Running, None)
            .unwrap();
        assert_eq!(store.release_campaigns("1@h").unwrap(), vec![c]);
        let jobs = store.jobs(c).unwrap();
        assert_eq!(jobs[0].state, JobState::Interrupted);
        assert!(
            jobs[0]
                .error
                .as_deref()
                .unwrap()
                .contains("coordinator was stopped")
        );
        assert_eq!(jobs[1].state, JobState::Queued);
        assert_eq!(
            store.campaign(c).unwrap().unwrap().state,
            CampaignState::Interrupted
        );
        assert!(store.release_campaigns("1@h").unwrap().is_empty());
        // Ownerless now: the first claim wins, a second with the stale owner loses.
        assert!(store.claim_campaign(c, None, "2@h").unwrap());
        assert!(!store.claim_campaign(c, None, "3@h").unwrap());
        assert_eq!(
            store.campaign(c).unwrap().unwrap().state,
            CampaignState::Running
        );
    }
}
