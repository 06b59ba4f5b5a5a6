//! Schedules, the campaigns they start, and which process owns a running campaign.
//!
//! "Never twice" rests on two things done in one transaction: a campaign started for a slot carries
//! `(schedule_name, slot)` under a unique index, and the schedule's `last_slot` moves to that slot.
//! A coordinator that crashes before the commit started nothing; one that crashes after it finds
//! the campaign (running, its owner dead) and resumes it instead of starting another.

use super::engine::{DbResult, OptionalExtension, Row, named_params, params};
use serde::Serialize;

use super::error::StoreError;
use super::error::sql;
use super::open::Store;
use super::values::{json_column, parse_json, require_non_empty};

/// A stored schedule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScheduleRow {
    /// Row id.
    pub id: i64,
    /// Unique name.
    pub name: String,
    /// Cron expression (5 fields, UTC).
    pub cron: String,
    /// What to run (suite, agents, backends, env sets), as given.
    pub spec: serde_json::Value,
    /// Whether a slot missed while the coordinator was down runs once at start.
    pub catch_up: bool,
    /// Unix seconds.
    pub created_at: f64,
    /// The latest slot handled (fired or passed over), unix seconds.
    pub last_slot: Option<f64>,
}

/// Who fired a schedule's latest slot: with several serves on one database, any of them may
/// fire a slot (each slot once), and this says which did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScheduleFiring {
    /// The schedule.
    pub name: String,
    /// The latest slot handled, unix seconds.
    pub last_slot: Option<f64>,
    /// The owner (`pid@host`) of the campaign that slot started, when one did (a slot passed over
    /// without catch-up started none).
    pub fired_by: Option<String>,
}

/// A campaign that is `running` or `interrupted`, with its owner, for resuming.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OwnedCampaign {
    pub id: i64,
    pub state: String,
    /// `pid@host` of the process executing it, if any.
    pub owner: Option<String>,
    /// Last sign of life of that process, unix seconds.
    pub heartbeat_at: Option<f64>,
    pub created_at: f64,
    pub schedule_name: Option<String>,
}

const SCHEDULE_COLUMNS: &str = "id, name, cron, spec_json, catch_up, created_at, last_slot";

fn schedule_from_row(r: &Row<'_>) -> DbResult<ScheduleRow> {
    Ok(ScheduleRow {
        id: r.get("id")?,
        name: r.get("name")?,
        cron: r.get("cron")?,
        spec: json_column(r, "spec_json")?,
        catch_up: r.get::<_, i64>("catch_up")? != 0,
        created_at: r.get("created_at")?,
        last_slot: r.get("last_slot")?,
    })
}

/// Schedule names follow the agent-name rule (`agents::is_valid_name`).
fn validate_name(name: &str) -> Result<(), StoreError> {
    if !super::agents::is_valid_name(name) {
        return Err(StoreError::invalid(
            "name",
            format!("schedule name {name:?} must be 1-64 characters of [A-Za-z0-9_.-]"),
        ));
    }
    Ok(())
}

impl Store {
    /// Adds a schedule. `cron` must already be validated by the caller; `last_slot` starts at
    /// `now`, so a new schedule never fires for slots before it existed.
    ///
    /// # Errors
    /// [`StoreError::InvalidInput`] for a bad name (`name`), an empty cron (`cron`), a spec that is
    /// not JSON (`spec_json`) or a name that is taken (`name`).
    pub fn add_schedule(
        &mut self,
        name: &str,
        cron: &str,
        spec_json: &str,
        catch_up: bool,
    ) -> Result<ScheduleRow, StoreError> {
        validate_name(name)?;
        require_non_empty("cron", cron)?;
        parse_json("spec_json", spec_json)?;
        let now = self.now();
        self.conn
            .execute(
                "INSERT INTO schedules (name, cron, spec_json, catch_up, created_at, last_slot)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
                params![name, cron, spec_json, i64::from(catch_up), now],
            )
            .map_err(|e| {
                if e.is_unique_violation() {
                    StoreError::invalid("name", format!("a schedule named {name:?} already exists"))
                } else {
                    sql("adding a schedule")(e)
                }
            })?;
        Ok(self.schedule(name)?.expect("just inserted"))
    }

    /// Every schedule, by name.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails.
    pub fn schedules(&self) -> Result<Vec<ScheduleRow>, StoreError> {
        let context = "listing schedules";
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT {SCHEDULE_COLUMNS} FROM schedules ORDER BY name"
            ))
            .map_err(sql(context))?;
        stmt.query_map([], schedule_from_row)
            .map_err(sql(context))?
            .collect::<Result<_, _>>()
            .map_err(sql(context))
    }

    /// Every schedule with the serve that fired its latest slot, by name.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails.
    pub fn schedule_firings(&self) -> Result<Vec<ScheduleFiring>, StoreError> {
        let context = "listing who fired the schedules";
        self.conn
            .prepare(
                "SELECT s.name, s.last_slot,
                        (SELECT c.owner FROM campaigns c
                          WHERE c.schedule_name = s.name AND c.slot = s.last_slot)
                   FROM schedules s ORDER BY s.name",
            )
            .and_then(|mut st| {
                st.query_map([], |r| {
                    Ok(ScheduleFiring {
                        name: r.get(0)?,
                        last_slot: r.get(1)?,
                        fired_by: r.get(2)?,
                    })
                })
            })
            .map_err(sql(context))?
            .collect::<Result<_, _>>()
            .map_err(sql(context))
    }

    /// The schedule called `name`.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails.
    pub fn schedule(&self, name: &str) -> Result<Option<ScheduleRow>, StoreError> {
        self.conn
            .query_row(
                &format!("SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE name = ?1"),
                [name],
                schedule_from_row,
            )
            .optional()
            .map_err(sql("reading a schedule"))
    }

    /// Removes a schedule; its campaigns and results stay. Returns whether it existed.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the delete fails.
    pub fn remove_schedule(&mut self, name: &str) -> Result<bool, StoreError> {
        Ok(self
            .conn
            .execute("DELETE FROM schedules WHERE name = ?1", [name])
            .map_err(sql("removing a schedule"))?
            > 0)
    }

    /// Marks `slot` handled without running it (catch-up off, or a slot long past). Never moves
    /// `last_slot` backwards.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the update fails.
    pub fn pass_slot(&mut self, name: &str, slot: f64) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE schedules
                    SET last_slot = CASE WHEN last_slot > ?2 THEN last_slot ELSE ?2 END
                  WHERE name = ?1",
                params![name, slot],
            )
            .map_err(sql("passing a schedule slot"))?;
        Ok(())
    }

    /// Starts the campaign of `schedule`'s `slot` owned by `owner`, in one transaction with moving
    /// the schedule's `last_slot` to `slot`. `slot = None` is a manual run (`run-now`): it gets a
    /// campaign but leaves the slots alone. Returns `None`, starting nothing, when the slot was
    /// already handled (by this or another coordinator).
    ///
    /// # Errors
    /// [`StoreError::InvalidInput`] (`schedule`) when there is no such schedule; `suite` empty or
    /// `spec_json` not JSON as for [`Store::create_campaign`].
    pub fn start_scheduled_campaign(
        &mut self,
        schedule: &str,
        slot: Option<f64>,
        suite: &str,
        description: &str,
        spec_json: &str,
        owner: &str,
    ) -> Result<Option<i64>, StoreError> {
        require_non_empty("suite", suite)?;
        parse_json("spec_json", spec_json)?;
        let now = self.now();
        let context = "starting a scheduled campaign";
        let tx = self.write_tx().map_err(sql(context))?;
        let last: Option<Option<f64>> = tx
            .query_row(
                "SELECT last_slot FROM schedules WHERE name = ?1",
                [schedule],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql(context))?;
        let Some(last) = last else {
            return Err(StoreError::invalid(
                "schedule",
                format!("no schedule named {schedule:?}"),
            ));
        };
        if let (Some(slot), Some(last)) = (slot, last)
            && slot <= last
        {
            return Ok(None);
        }
        let inserted = tx.query_row(
            "INSERT INTO campaigns (suite, description, state, created_at, spec_json, schedule_name,
                                    slot, owner, heartbeat_at)
             VALUES (:suite, :description, 'running', :now, :spec_json, :schedule, :slot, :owner,
                     :now)
             RETURNING id",
            named_params! {
                ":suite": suite,
                ":description": description,
                ":now": now,
                ":spec_json": spec_json,
                ":schedule": schedule,
                ":slot": slot,
                ":owner": owner,
            },
            |r| r.get::<_, i64>(0),
        );
        let id = match inserted {
            Ok(id) => id,
            Err(e) if e.is_unique_violation() => return Ok(None),
            Err(e) => return Err(sql(context)(e)),
        };
        if let Some(slot) = slot {
            tx.execute(
                "UPDATE schedules SET last_slot = ?2 WHERE name = ?1",
                params![schedule, slot],
            )
            .map_err(sql(context))?;
        }
        tx.commit().map_err(sql(context))?;
        Ok(Some(id))
    }

    /// Records that `owner` executes campaign `id` (and is alive now).
    ///
    /// # Errors
    /// [`StoreError::UnknownCampaign`] if there is no such campaign.
    pub fn set_campaign_owner(&mut self, id: i64, owner: &str) -> Result<(), StoreError> {
        let now = self.now();
        let changed = self
            .conn
            .execute(
                "UPDATE campaigns SET owner = ?2, heartbeat_at = ?3 WHERE id = ?1",
                params![id, owner, now],
            )
            .map_err(sql("setting a campaign's owner"))?;
        if changed == 0 {
            return Err(StoreError::UnknownCampaign { id });
        }
        Ok(())
    }

    /// `owner`'s sign of life for campaign `id` while it executes it. Returns whether the
    /// campaign is still `owner`'s and running.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the update fails.
    pub fn heartbeat(&mut self, id: i64, owner: &str) -> Result<bool, StoreError> {
        let now = self.now();
        Ok(self
            .conn
            .execute(
                "UPDATE campaigns SET heartbeat_at = ?3
                 WHERE id = ?1 AND owner = ?2 AND state = 'running'",
                params![id, owner, now],
            )
            .map_err(sql("writing a heartbeat"))?
            == 1)
    }

    /// Campaigns that are `running` or `interrupted`, oldest first.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails.
    pub fn unfinished_campaigns(&self) -> Result<Vec<OwnedCampaign>, StoreError> {
        let context = "listing unfinished campaigns";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT id, state, owner, heartbeat_at, created_at, schedule_name FROM campaigns
                 WHERE state IN ('running', 'interrupted') ORDER BY id",
            )
            .map_err(sql(context))?;
        stmt.query_map([], |r| {
            Ok(OwnedCampaign {
                id: r.get(0)?,
                state: r.get(1)?,
                owner: r.get(2)?,
                heartbeat_at: r.get(3)?,
                created_at: r.get(4)?,
                schedule_name: r.get(5)?,
            })
        })
        .map_err(sql(context))?
        .collect::<Result<_, _>>()
        .map_err(sql(context))
    }

    /// Takes over campaign `id` for `owner` if its owner is still `expected` (compare and swap, so
    /// two coordinators cannot both resume it). The campaign becomes `running`; its `running` jobs
    /// that no live lease holds, and those the old owner ran on direct agents (its process is
    /// gone, and their results with it), become `interrupted`. A job another serve holds keeps
    /// running there, and a dial-in agent's job keeps its lease: the agent delivers the result to
    /// the serve it attaches to next (see [`Store::expire_leases`]). Returns whether the claim
    /// won.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the updates fail; then nothing changed.
    pub fn claim_campaign(
        &mut self,
        id: i64,
        expected: Option<&str>,
        owner: &str,
    ) -> Result<bool, StoreError> {
        let now = self.now();
        let context = "claiming a campaign";
        let tx = self.write_tx().map_err(sql(context))?;
        let won = tx
            .execute(
                "UPDATE campaigns SET owner = ?3, heartbeat_at = ?4, state = 'running',
                    finished_at = NULL
                 WHERE id = ?1 AND owner IS NOT DISTINCT FROM ?2 AND state IN ('running', 'interrupted')",
                params![id, expected, owner, now],
            )
            .map_err(sql(context))?
            == 1;
        if won {
            tx.execute(
                "UPDATE jobs SET state = 'interrupted', updated_at = ?2,
                    error = 'the coordinator running it stopped'
                 WHERE campaign_id = ?1 AND state = 'running'
                   AND (claimed_by IS NULL OR lease_until IS NULL OR lease_until < ?2
                        OR (claimed_by IS NOT DISTINCT FROM ?3
                            AND agent_id IN (SELECT id FROM agents WHERE kind = 'direct')))",
                params![id, now, expected],
            )
            .map_err(sql(context))?;
        }
        tx.commit().map_err(sql(context))?;
        Ok(won)
    }

    /// On a graceful stop: `owner`'s running campaigns become `interrupted` and ownerless, to be
    /// resumed by the next coordinator, and the jobs `owner` runs (in any campaign), or that no
    /// other process holds in its campaigns, become `interrupted`. Returns the campaigns.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the updates fail; then nothing changed.
    pub fn release_campaigns(&mut self, owner: &str) -> Result<Vec<i64>, StoreError> {
        let now = self.now();
        let context = "releasing campaigns";
        let tx = self.write_tx().map_err(sql(context))?;
        let ids: Vec<i64> = {
            let mut stmt = tx
                .prepare("SELECT id FROM campaigns WHERE owner = ?1 AND state = 'running'")
                .map_err(sql(context))?;
            stmt.query_map([owner], |r| r.get(0))
                .map_err(sql(context))?
                .collect::<Result<_, _>>()
                .map_err(sql(context))?
        };
        tx.execute(
            "UPDATE jobs SET state = 'interrupted', updated_at = ?2,
                error = 'the coordinator was stopped'
             WHERE claimed_by = ?1 AND state = 'running'",
            params![owner, now],
        )
        .map_err(sql(context))?;
        for id in &ids {
            tx.execute(
                "UPDATE jobs SET state = 'interrupted', updated_at = ?2,
                    error = 'the coordinator was stopped'
                 WHERE campaign_id = ?1 AND state = 'running' AND claimed_by IS NULL",
                params![id, now],
            )
            .map_err(sql(context))?;
            tx.execute(
                "UPDATE campaigns SET state = 'interrupted', owner = NULL, finished_at = ?2
                 WHERE id = ?1",
                params![id, now],
            )
            .map_err(sql(context))?;
        }
        tx.commit().map_err(sql(context))?;
        Ok(ids)
    }

    /// Gives an `interrupted` job a fresh run id (a result the old attempt may still deliver
    /// cannot be mistaken for the new one) and puts it back in the queue, unclaimed. Returns
    /// whether it did: `false` when the job is no longer `interrupted` (its late result was
    /// stored, or another process requeued it first).
    ///
    /// # Errors
    /// [`StoreError::InvalidInput`] for an empty run id; [`StoreError::Db`].
    pub fn requeue_job(&mut self, job_id: i64, run_id: &str) -> Result<bool, StoreError> {
        require_non_empty("run_id", run_id)?;
        let now = self.now();
        let changed = self
            .conn
            .execute(
                "UPDATE jobs SET state = 'queued', run_id = ?2, updated_at = ?3,
                    claimed_by = NULL, lease_until = NULL
                 WHERE id = ?1 AND state = 'interrupted'",
                params![job_id, run_id, now],
            )
            .map_err(sql("requeueing a job"))?;
        Ok(changed == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::temp_store;
    use super::*;

    /// Two coordinators on one database (two connections: two serves on one PostgreSQL, or on one
    /// SQLite file) reach each of 20 slots at the same instant: each slot starts one campaign,
    /// whichever wins, and the other is told it was handled.
    #[test]
    fn two_coordinators_racing_for_each_slot_start_it_once() {
        let (_db, mut first) = temp_store();
        first
            .add_schedule("nightly", "* * * * *", "{\"suite\": \"smoke\"}", true)
            .unwrap();
        let second = first.open_another().unwrap();
        // Slots after whatever the new schedule counts as handled.
        let handled = first.schedule("nightly").unwrap().unwrap().last_slot;
        let base = handled.unwrap_or(0.0).max(first.now()) + 60.0;
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        let race = |mut store: Store, owner: &'static str| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut won = Vec::new();
                for slot in 0..20 {
                    let slot = base + f64::from(slot) * 60.0;
                    barrier.wait();
                    let started = store
                        .start_scheduled_campaign("nightly", Some(slot), "smoke", "", "{}", owner)
                        .unwrap();
                    if started.is_some() {
                        won.push(slot);
                    }
                }
                won
            })
        };
        let (a, b) = (
            race(first.open_another().unwrap(), "a@h"),
            race(second, "b@h"),
        );
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        let mut all: Vec<f64> = a.iter().chain(&b).copied().collect();
        all.sort_by(f64::total_cmp);
        all.dedup();
        assert_eq!(all.len(), 20, "every slot fired: a {a:?} b {b:?}");
        assert_eq!(a.len() + b.len(), 20, "none twice: a {a:?} b {b:?}");
        let campaigns: i64 = first
            .conn
            .query_row(
                "SELECT count(*) FROM campaigns WHERE schedule_name = 'nightly'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(campaigns, 20);
        assert_eq!(
            first.schedule("nightly").unwrap().unwrap().last_slot,
            Some(base + 19.0 * 60.0)
        );
        let firing = &first.schedule_firings().unwrap()[0];
        let winner = if b.last() == Some(&(base + 19.0 * 60.0)) {
            "b@h"
        } else {
            "a@h"
        };
        assert_eq!(firing.fired_by.as_deref(), Some(winner), "{firing:?}");
    }
}
