//! The Rust step of migration 7 (see `0007_settings.sql`): stored measurement settings rewritten
//! from "0 means the agent's default" to explicit values.
//!
//! A job's spec (`jobs.spec_json`, a RunSpec) gets the resolved values the agent would have used,
//! through the one [`PartialSettings::resolve`] every layer uses: a 0 read as "not given", a
//! negative `target_ci_pct` as "no target" (now an explicit 0), a 0 `power_window_s` as the
//! automatic window (now null). A campaign's stored request (`campaigns.spec_json`) keeps its runs
//! as given, so there a 0 becomes null ("not given"), except `target_ci_pct`, whose 0 always
//! meant "no target" in a suite. A spec that is not a JSON object, or whose settings are not all
//! numbers, stays as it is: reading it fails, naming the field.

use gpufleet_kernels::PartialSettings;
use rusqlite::{Transaction, params};
use serde_json::{Map, Value};

/// The settings where a stored 0 meant "the default" in a suite run or an override.
const ZERO_WAS_DEFAULT: [&str; 6] = [
    "warmup",
    "min_iterations",
    "min_seconds",
    "max_iterations",
    "timeout_s",
    "max_seconds",
];

/// Rewrites every job's spec and every campaign's request.
///
/// # Errors
/// A failing statement (the migration then leaves the database at version 6).
pub(in crate::store) fn rewrite(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    rewrite_column(tx, "jobs", job_spec)?;
    rewrite_column(tx, "campaigns", campaign_spec)
}

/// Applies `rewrite` to each row's `spec_json` that parses as JSON, storing the ones it changed.
fn rewrite_column(
    tx: &Transaction<'_>,
    table: &str,
    rewrite: fn(&mut Map<String, Value>) -> bool,
) -> rusqlite::Result<()> {
    let rows: Vec<(i64, String)> = tx
        .prepare(&format!("SELECT id, spec_json FROM {table}"))?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let mut update = tx.prepare(&format!("UPDATE {table} SET spec_json = ?1 WHERE id = ?2"))?;
    for (id, text) in rows {
        let Ok(Value::Object(mut spec)) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        if rewrite(&mut spec) {
            update.execute(params![Value::Object(spec).to_string(), id])?;
        }
    }
    Ok(())
}

/// A number, `None` for a missing or null field; `Err` for anything else (left alone).
fn number(spec: &Map<String, Value>, key: &str) -> Result<Option<f64>, ()> {
    match spec.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or(()),
    }
}

/// A job's RunSpec, read in its old meaning and written back resolved.
fn job_spec(spec: &mut Map<String, Value>) -> bool {
    let read = || -> Result<(PartialSettings, Option<f64>), ()> {
        // 0 was "not given"; every other value stays as it was given.
        let given = |key| Ok(number(spec, key)?.filter(|v| *v != 0.0));
        let count = |key| -> Result<Option<u32>, ()> {
            given(key)?
                .map(|v| u32::try_from(v as i64).map_err(|_| ()))
                .transpose()
        };
        let settings = PartialSettings {
            warmup: count("warmup")?,
            min_iterations: count("min_iterations")?,
            min_seconds: given("min_seconds")?,
            max_iterations: count("max_iterations")?,
            timeout_s: given("timeout_s")?,
            target_ci_pct: given("target_ci_pct")?.map(|t| t.max(0.0)),
            max_seconds: given("max_seconds")?,
        };
        Ok((settings, given("power_window_s")?))
    };
    let Ok((given, power_window_s)) = read() else {
        return false;
    };
    // Settings the agent refused stay refused: written as given, the bad one names itself again.
    let settings = given.resolve().map_or(given, |s| s.explicit());
    let fields = [
        ("warmup", settings.warmup.map(f64::from)),
        ("min_iterations", settings.min_iterations.map(f64::from)),
        ("min_seconds", settings.min_seconds),
        ("max_iterations", settings.max_iterations.map(f64::from)),
        ("timeout_s", settings.timeout_s),
        ("target_ci_pct", settings.target_ci_pct),
        ("max_seconds", settings.max_seconds),
        ("power_window_s", power_window_s),
    ];
    for (key, value) in fields {
        spec.insert(key.to_string(), json_number(key, value));
    }
    true
}

/// A stored value: counts as integers, seconds and percentages as reals, null for none.
fn json_number(key: &str, value: Option<f64>) -> Value {
    match value {
        None => Value::Null,
        Some(v) if matches!(key, "warmup" | "min_iterations" | "max_iterations") => {
            Value::from(v as u64)
        }
        Some(v) => Value::from(v),
    }
}

/// A campaign's stored request: a 0 in a run's settings or in the timeout override becomes "not
/// given".
fn campaign_spec(spec: &mut Map<String, Value>) -> bool {
    let mut changed = zero_to_null(spec, &["timeout_s"]);
    if let Some(Value::Array(runs)) = spec.get_mut("runs") {
        for run in runs.iter_mut().filter_map(Value::as_object_mut) {
            changed |= zero_to_null(run, &ZERO_WAS_DEFAULT);
        }
    }
    changed
}

fn zero_to_null(object: &mut Map<String, Value>, keys: &[&str]) -> bool {
    let mut changed = false;
    for key in keys {
        if let Some(v) = object.get_mut(*key)
            && v.as_f64() == Some(0.0)
        {
            *v = Value::Null;
            changed = true;
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::super::{LATEST_VERSION, migrate, migrate_to};
    use gpufleet_kernels::RunSettings;
    use gpufleet_proto::v1 as pb;
    use rusqlite::Connection;
    use serde_json::{Value, json};
    use std::path::Path;

    /// A version 6 database holding a campaign, a schedule and jobs as gpufleet stored them then.
    fn version_6(jobs: &[Value], campaign: &Value, schedule: &Value) -> Connection {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate_to(&mut conn, Path::new(":memory:"), 6).unwrap();
        conn.execute_batch(
            "INSERT INTO agents (id, name, url, added_at) VALUES (1, 'rig', 'http://x', 0);",
        )
        .unwrap();
        conn.execute(
            "INSERT INTO campaigns (id, suite, description, state, created_at, spec_json)
             VALUES (1, 'smoke', '', 'running', 0, ?1)",
            [campaign.to_string()],
        )
        .unwrap();
        for (i, spec) in jobs.iter().enumerate() {
            conn.execute(
                "INSERT INTO jobs (campaign_id, agent_id, spec_key, spec_json, run_id, state, updated_at)
                 VALUES (1, 1, 'k', ?1, ?2, 'queued', 0)",
                [spec.to_string(), format!("run-{i}")],
            )
            .unwrap();
        }
        conn.execute(
            "INSERT INTO schedules (name, cron, spec_json, created_at) VALUES ('nightly', '0 3 * * *', ?1, 0)",
            [schedule.to_string()],
        )
        .unwrap();
        conn
    }

    fn column(conn: &Connection, sql: &str) -> Vec<Value> {
        conn.prepare(sql)
            .unwrap()
            .query_map([], |r| r.get::<_, String>(0))
            .unwrap()
            .map(|t| serde_json::from_str(&t.unwrap()).unwrap())
            .collect()
    }

    /// What an agent makes of a stored job spec now: the same resolve, absent fields defaulted.
    fn as_the_agent_reads_it(spec: &Value) -> RunSettings {
        let s: pb::RunSpec = gpufleet_kernels::from_json_value(spec).unwrap();
        s.given_settings().resolve().unwrap()
    }

    #[test]
    fn old_rows_keep_their_meaning() {
        // 0 meant "the agent's default" on every setting, -1 "no target", power 0 "automatic".
        let defaults_then = json!({
            "kernel": "gemm", "device_id": "cpu:0", "warmup": 0, "min_iterations": 3,
            "min_seconds": 0.0, "max_iterations": 0, "timeout_s": 30.0, "power_window_s": 0.0,
            "target_ci_pct": -1.0, "max_seconds": 0.0, "seed": 42
        });
        // A spec from before the interval target existed: the fields are missing.
        let older = json!({"kernel": "copy", "device_id": "cpu:0", "min_seconds": 2.0,
                           "target_ci_pct": 0.0, "power_window_s": -1.0});
        let unreadable = json!({"kernel": "copy", "warmup": "three"});
        let campaign = json!({
            "runs": [{"kernel": "copy", "variants": null, "params": {}, "dtype": "f32",
                      "mode": "compute_only", "warmup": 0, "min_iterations": 10,
                      "min_seconds": 0.0, "max_iterations": 10000, "timeout_s": 120.0,
                      "target_ci_pct": 0.0, "max_seconds": 0.0, "env": {}}],
            "agents": ["rig"], "backends": [], "devices": [], "kernels": [], "env": {},
            "env_sets": [], "timeout_s": 0.0, "target_ci_pct": null, "max_seconds": null,
            "power_window_s": null
        });
        let schedule = json!({"suite": "smoke", "timeout_s": 0.0, "target_ci_pct": 0.0});
        let mut conn = version_6(
            &[defaults_then, older, unreadable.clone()],
            &campaign,
            &schedule,
        );
        assert_eq!(
            migrate(&mut conn, Path::new(":memory:")).unwrap(),
            (LATEST_VERSION - 6) as usize
        );
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, LATEST_VERSION);

        let jobs = column(&conn, "SELECT spec_json FROM jobs ORDER BY id");
        // Resolved, as the agent resolved them when the job ran.
        let d = RunSettings::DEFAULT;
        let first = &jobs[0];
        assert_eq!(first["warmup"], json!(d.warmup));
        assert_eq!(first["min_iterations"], json!(3));
        assert_eq!(first["min_seconds"], json!(d.min_seconds));
        assert_eq!(first["max_iterations"], json!(d.max_iterations));
        assert_eq!(first["timeout_s"], json!(30.0));
        assert_eq!(first["target_ci_pct"], json!(0.0), "no target, explicitly");
        assert_eq!(first["max_seconds"], json!(5.0 * d.min_seconds));
        assert_eq!(first["power_window_s"], Value::Null, "the automatic window");
        assert_eq!(
            (first["kernel"].clone(), first["seed"].clone()),
            (json!("gemm"), json!(42))
        );
        let read = as_the_agent_reads_it(first);
        assert_eq!((read.warmup, read.target_ci_pct), (d.warmup, None));
        let second = as_the_agent_reads_it(&jobs[1]);
        assert_eq!(
            (second.min_seconds, second.max_seconds, second.target_ci_pct),
            (2.0, 10.0, d.target_ci_pct)
        );
        assert_eq!(jobs[1]["power_window_s"], json!(-1.0), "no power run stays");
        // Not numbers: left for the reader to refuse, naming the field.
        assert_eq!(jobs[2], unreadable);

        let campaign = &column(&conn, "SELECT spec_json FROM campaigns")[0];
        let run = &campaign["runs"][0];
        for key in ["warmup", "min_seconds", "max_seconds"] {
            assert_eq!(run[key], Value::Null, "{key}: a 0 meant the default");
        }
        assert_eq!(run["min_iterations"], json!(10));
        assert_eq!(
            run["target_ci_pct"],
            json!(0.0),
            "a suite's 0 always meant no target"
        );
        assert_eq!(campaign["timeout_s"], Value::Null);
        let run: gpufleet_kernels::SuiteRun = serde_json::from_value(run.clone()).unwrap();
        let resolved = run.settings.resolve().unwrap();
        assert_eq!(
            (resolved.warmup, resolved.min_seconds, resolved.max_seconds),
            (d.warmup, d.min_seconds, d.max_seconds)
        );
        assert_eq!(resolved.target_ci_pct, None);

        let schedule = &column(&conn, "SELECT spec_json FROM schedules")[0];
        assert_eq!(schedule["timeout_s"], Value::Null);
        assert_eq!(schedule["target_ci_pct"], json!(0.0));
    }
}
