//! `GET /healthz`: whether this serve does its work, with the status code monitoring expects —
//! 200 `"status":"ok"` when it does, 503 `"status":"unhealthy"` with a `problems` list when the
//! store cannot be reached or does not answer, a campaign has stalled (a running job whose lease
//! ran out and nobody took back), or schedules cannot fire (the daemon's ticks fail).
//!
//! It never waits on a store that lost its database: the store's [`StoreHealth`] is read first,
//! and the store itself gets [`STORE_WAIT`] to answer.
//!
//! [`StoreHealth`]: crate::store::StoreHealth

use super::db;
use crate::campaign::owner::LEASE;
use crate::schedule::Daemon;
use crate::store::{Engine, StoreError};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::time::Duration;

/// How long `/healthz` waits for the store.
pub const STORE_WAIT: Duration = Duration::from_secs(5);

/// A running job whose lease ran out this long ago, and that nobody renewed or took back, makes
/// its campaign stalled: a third of a lease after it ran out (an owner takes a job back within a
/// survey, half a second).
pub const STALLED_AFTER_S: f64 = LEASE.as_secs_f64() / 3.0;

/// One problem: what (`store`, `campaign`, `schedules`), since when where known, and in words.
fn problem(what: &str, since: Option<f64>, message: String) -> Value {
    json!({"what": what, "since": since, "message": message})
}

pub(super) async fn healthz(State(s): State<Daemon>) -> Response {
    let owner = s.owner().to_string();
    let mut problems = Vec::new();
    let mut body = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "owner": owner,
        "replica": owner,
        "busy": s.busy(),
    });
    let db = db(&s);
    if let Some(o) = db.health().outage() {
        problems.push(problem(
            "store",
            Some(o.since),
            format!(
                "the database cannot be reached (for {:.0} s): {}",
                crate::time::now() - o.since,
                o.error
            ),
        ));
    } else {
        let stalled_before = crate::time::now() - STALLED_AFTER_S;
        let read = db.call(move |st| -> Result<_, StoreError> {
            Ok((
                st.schema_version()?,
                st.engine(),
                st.path().display().to_string(),
                st.schedule_firings()?,
                st.stalled_campaigns(stalled_before)?,
            ))
        });
        match tokio::time::timeout(STORE_WAIT, read).await {
            Err(_) => problems.push(problem(
                "store",
                None,
                format!("the store did not answer within {} s", STORE_WAIT.as_secs()),
            )),
            Ok(Err(e)) => problems.push(problem("store", None, e.to_string())),
            Ok(Ok((version, engine, database, firings, stalled))) => {
                body["schema_version"] = json!(version);
                body["database"] = json!({
                    "engine": match engine {
                        Engine::Sqlite => "sqlite",
                        Engine::Postgres => "postgres",
                    },
                    "name": database,
                });
                // Several serves may share one PostgreSQL: `owner` names this one, and each
                // schedule says which serve fired its latest slot.
                body["schedules"] = firings
                    .iter()
                    .map(|f| {
                        json!({
                            "name": f.name,
                            "last_slot": f.last_slot,
                            "fired_by": f.fired_by,
                            "fired_here": f.fired_by.as_deref() == Some(owner.as_str()),
                        })
                    })
                    .collect();
                for (campaign, jobs) in stalled {
                    problems.push(problem(
                        "campaign",
                        None,
                        format!(
                            "campaign {campaign} has stalled: {jobs} running job(s) whose lease ran \
                             out more than {STALLED_AFTER_S:.0} s ago, renewed or taken back by no serve"
                        ),
                    ));
                }
            }
        }
    }
    if let Some((since, why)) = s.tick_failure() {
        problems.push(problem(
            "schedules",
            Some(since),
            format!("schedules cannot fire: the daemon's checks fail: {why}"),
        ));
    }
    let healthy = problems.is_empty();
    body["status"] = json!(if healthy { "ok" } else { "unhealthy" });
    body["problems"] = Value::from(problems);
    let code = if healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(body)).into_response()
}
