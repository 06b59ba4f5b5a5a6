//! The HTTP API of `gpufleet serve --listen`: health, a read-only JSON API for scripts, and the
//! dashboard's pages ([`crate::web`]). Every handler reads the store on the blocking pool; errors are JSON
//! `{"error": "..."}` with a 4xx/5xx status.
//!
//! Paged routes answer at most `limit` rows (default 500, at most 10,000) and a `next` cursor
//! (`null` on the last page); pass it back as `after` for the next page. Rows stored meanwhile
//! never shift a page. A bad `limit` or `after` is a 400 naming it.
//!
//! | path | answer |
//! | --- | --- |
//! | `GET /metrics` | Prometheus text: agents, campaigns, results, open alerts, request latencies |
//! | `GET /healthz` | 200 `{"status":"ok","version","schema_version","owner"/"replica","database":{"engine","name"},"schedules":[{"name","last_slot","fired_by","fired_here"}],"busy","problems":[]}`; 503 `"status":"unhealthy"` with `problems` `[{"what","since","message"}]` (store unreachable, a stalled campaign, schedules that cannot fire; see `health.rs`) |
//! | `GET /api/agents?limit=&after=` | agents with their devices, by name: at most `limit` (default 1,000); `after=NAME` (the last name of a page) gives the next |
//! | `GET /api/agents/{name}/power?device=&source=&rate_hz=` | the agent's live power samples, as server-sent events ([`power`]) |
//! | `GET /api/agents/{name}/power/latest` | `{"agent","connected","samples"}`: the latest sample of each channel |
//! | `GET /api/campaigns` | campaigns with job and result counts |
//! | `GET /api/campaigns/{id}?limit=&after=` | one campaign with its jobs by id: at most `limit` (default 1,000); `job_list_next` is the `after` of the next page |
//! | `GET /api/results?campaign=&kernel=&agent=&status=&since=&limit=&after=` | `{"results": [...], "next"}`: a page of results, newest first |
//! | `GET /api/schedules` | schedules with their next slot |
//! | `GET /api/alerts?since=&limit=&before=` | confirmed regressions and improvements, newest first: at most `limit` (default 1,000); `before=ID` (the last id of a page) gives the next |
//! | `GET /api/checks?since=&limit=&after=` | `{"checks": [...], "next"}`: a page of verdicts, newest first |
//!
//! Access: with a read or admin token configured ([`ApiAuth`]; `gpufleet serve` requires both
//! beyond loopback) every path but `/healthz` and `/static/` needs a token, as
//! `Authorization: Bearer <token>` or (browsers) HTTP Basic with the token as password: the read or
//! the admin token for `GET`, the admin token for anything else. Writes from another site are
//! refused (`Sec-Fetch-Site`/`Origin`). A bad query string is a JSON
//! error like any other.

mod health;
mod metrics;
mod power;

use crate::db::Db;
use crate::regression::check::parse_since;
use crate::schedule::{Daemon, next_slot};
use crate::store::{Cursor, Direction, ResultFilter, StoreError, check_limit};
use crate::time::now;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

/// An error as JSON.
struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({ "error": self.1 }))).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
    }
}

/// A row that cannot be turned into JSON is an error of the answer, never an empty value in it.
impl From<serde_json::Error> for ApiError {
    fn from(e: serde_json::Error) -> Self {
        ApiError(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding JSON: {e}"),
        )
    }
}

type ApiResult = Result<Json<Value>, ApiError>;

/// Who may use the API: `None` for both means open (loopback only; serve checks that).
#[derive(Debug, Clone, Default)]
pub struct ApiAuth {
    /// Reads (`GET`).
    pub read: Option<String>,
    /// Everything (reads, and writes such as enrolment and campaigns).
    pub admin: Option<String>,
}

impl ApiAuth {
    fn open(&self) -> bool {
        self.read.is_none() && self.admin.is_none()
    }

    /// Whether `token` may make a request of `method`.
    fn allows(&self, method: &axum::http::Method, token: Option<&str>) -> bool {
        let Some(token) = token else { return false };
        let is = |want: &Option<String>| {
            want.as_deref()
                .is_some_and(|w| gpufleet_kernels::secrets_equal(w, token))
        };
        is(&self.admin) || (method == axum::http::Method::GET && is(&self.read))
    }
}

/// The token a request carries: `Authorization: Bearer <token>` (scripts), or HTTP Basic with the
/// token as the password and any user name (browsers on the dashboard, which prompt for it).
fn request_token(headers: &axum::http::HeaderMap) -> Option<String> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    if let Some(t) = value.strip_prefix("Bearer ") {
        return Some(t.to_string());
    }
    let encoded = value.strip_prefix("Basic ")?;
    use base64::Engine as _;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    text.split_once(':')
        .map(|(_, password)| password.to_string())
}

/// A browser's write from another site (a form on a page elsewhere posting here with the
/// credentials the browser remembers): refused whatever the token.
fn cross_site(req: &axum::extract::Request) -> bool {
    let h = req.headers();
    if let Some(site) = h.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        return site == "cross-site";
    }
    match (
        h.get(axum::http::header::ORIGIN)
            .and_then(|v| v.to_str().ok()),
        h.get(axum::http::header::HOST)
            .and_then(|v| v.to_str().ok()),
    ) {
        (Some(origin), Some(host)) => origin
            .split_once("://")
            .is_none_or(|(_, rest)| rest.trim_end_matches('/') != host),
        _ => false,
    }
}

async fn check_token(
    State(auth): State<std::sync::Arc<ApiAuth>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let path = req.uri().path();
    if req.method() != axum::http::Method::GET && cross_site(&req) {
        return ApiError(StatusCode::FORBIDDEN, "cross-site request refused".into())
            .into_response();
    }
    if auth.open() || path == "/healthz" || path.starts_with("/static/") {
        return next.run(req).await;
    }
    let token = request_token(req.headers());
    if auth.allows(req.method(), token.as_deref()) {
        return next.run(req).await;
    }
    let why = if token.is_none() {
        "this endpoint needs `Authorization: Bearer <token>` (the serve's read or admin token)"
    } else if req.method() == axum::http::Method::GET {
        "the token is neither the read nor the admin token"
    } else {
        "this request needs the admin token"
    };
    let mut res = ApiError(StatusCode::UNAUTHORIZED, why.into()).into_response();
    if !path.starts_with("/api/") && path != "/metrics" {
        // Dashboard pages: the browser asks for the token (as the password).
        res.headers_mut().insert(
            axum::http::header::WWW_AUTHENTICATE,
            axum::http::HeaderValue::from_static(
                "Basic realm=\"gpufleet: the read token as password (the admin token to acknowledge)\", charset=\"UTF-8\"",
            ),
        );
    }
    res
}

/// `Query` whose rejection is a JSON error naming the parameter, like every other error.
struct JsonQuery<T>(T);

impl<T, S> axum::extract::FromRequestParts<S> for JsonQuery<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(q)| JsonQuery(q))
            .map_err(|e| ApiError(StatusCode::BAD_REQUEST, e.body_text()))
    }
}

/// The open router over `daemon` (tests and loopback).
pub fn router(daemon: Daemon) -> Router {
    router_with_auth(daemon, ApiAuth::default())
}

/// The router over `daemon`, checking `auth` on every request.
pub fn router_with_auth(daemon: Daemon, auth: ApiAuth) -> Router {
    Router::new()
        .merge(crate::web::pages_router())
        .route("/healthz", get(health::healthz))
        .route("/metrics", get(metrics::metrics))
        .route("/api/agents", get(agents))
        .route("/api/agents/{name}/power", get(power::stream))
        .route("/api/agents/{name}/power/latest", get(power::latest))
        .route("/api/campaigns", get(campaigns))
        .route("/api/campaigns/{id}", get(campaign))
        .route("/api/results", get(results))
        .route("/api/schedules", get(schedules))
        .route("/api/alerts", get(alerts))
        .route("/api/checks", get(checks))
        .fallback(|| async {
            ApiError(
                StatusCode::NOT_FOUND,
                "no such endpoint; see / (the dashboard), /healthz and /api/{agents,campaigns,results,schedules,alerts,checks}".into(),
            )
        })
        .with_state(daemon)
        .route_layer(axum::middleware::from_fn(metrics::track))
        .layer(axum::middleware::from_fn_with_state(
            std::sync::Arc::new(auth),
            check_token,
        ))
        // gzip when the client accepts it (browsers, Prometheus, curl --compressed): a page of
        // HTML or a listing shrinks 5-15×. Event streams (the power feed), images and tiny
        // answers are left alone (the layer's default predicate).
        .layer(tower_http::compression::CompressionLayer::new())
}

fn db(s: &Daemon) -> Db {
    s.db().clone()
}

/// `/api/agents?limit=&after=`: agents by name, at most `limit` (default [`AGENTS_PAGE`]),
/// those after the name `after` (the last name of the page before).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentsQuery {
    limit: Option<usize>,
    after: Option<String>,
}

/// Agents per `/api/agents` answer when `limit` is not given.
const AGENTS_PAGE: usize = 1_000;

async fn agents(State(s): State<Daemon>, JsonQuery(q): JsonQuery<AgentsQuery>) -> ApiResult {
    let limit = check_limit(q.limit.unwrap_or(AGENTS_PAGE)).map_err(|e| bad_request("limit", e))?;
    let (agents, devices) = db(&s)
        .call(|st| -> Result<_, StoreError> { Ok((st.agents()?, st.devices()?)) })
        .await?;
    let mut by_agent: std::collections::HashMap<i64, Vec<&crate::store::DeviceRow>> =
        std::collections::HashMap::new();
    for d in &devices {
        by_agent.entry(d.agent_id).or_default().push(d);
    }
    let out = agents
        .iter()
        .filter(|a| {
            q.after
                .as_deref()
                .is_none_or(|after| a.name.as_str() > after)
        })
        .take(limit)
        .map(|a| {
            let mut v = serde_json::to_value(a)?;
            v["devices"] = by_agent
                .get(&a.id)
                .into_iter()
                .flatten()
                .map(|d| {
                    json!({"id": d.device_id, "backend": d.backend, "name": d.name,
                           "arch": d.arch, "pci_bus_id": d.pci_bus_id, "last_seen": d.last_seen})
                })
                .collect();
            Ok(v)
        })
        .collect::<serde_json::Result<Vec<Value>>>()?;
    Ok(Json(Value::from(out)))
}

async fn campaigns(State(s): State<Daemon>) -> ApiResult {
    let rows = db(&s).call(|st| st.campaigns()).await?;
    Ok(Json(serde_json::to_value(rows)?))
}

/// `/api/campaigns/{id}?limit=&after=`: the campaign with at most `limit` of its jobs (default
/// [`JOBS_PAGE`]) after job id `after`; `job_list_next` is the `after` of the next page.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CampaignQuery {
    limit: Option<usize>,
    after: Option<i64>,
}

/// Jobs per `/api/campaigns/{id}` answer when `limit` is not given.
const JOBS_PAGE: usize = 1_000;

async fn campaign(
    State(s): State<Daemon>,
    Path(id): Path<String>,
    JsonQuery(q): JsonQuery<CampaignQuery>,
) -> ApiResult {
    let id: i64 = id.parse().map_err(|_| {
        ApiError(
            StatusCode::BAD_REQUEST,
            format!("campaign id {id:?} is not an integer"),
        )
    })?;
    let limit = check_limit(q.limit.unwrap_or(JOBS_PAGE)).map_err(|e| bad_request("limit", e))?;
    let (row, mut page) = db(&s)
        .call(move |st| -> Result<_, StoreError> {
            Ok((st.campaign(id)?, st.jobs_page(id, q.after, 0, limit + 1)?))
        })
        .await?;
    let Some(row) = row else {
        return Err(ApiError(StatusCode::NOT_FOUND, format!("no campaign {id}")));
    };
    let more = page.len() > limit;
    page.truncate(limit);
    let mut v = serde_json::to_value(row)?;
    v["job_list_next"] = json!(if more {
        page.last().map(|j| j.id)
    } else {
        None
    });
    v["job_list"] = serde_json::to_value(page)?;
    Ok(Json(v))
}

#[derive(Debug, Deserialize)]
struct ResultsQuery {
    campaign: Option<i64>,
    kernel: Option<String>,
    agent: Option<String>,
    status: Option<String>,
    since: Option<String>,
    limit: Option<usize>,
    after: Option<String>,
}

/// Rows per page when `limit` is not given.
const DEFAULT_LIMIT: usize = 500;

fn bad_request(field: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, format!("{field}: {e}"))
}

/// `limit` and `after` of a paged route: 1 to [`MAX_PAGE`](crate::store::MAX_PAGE) rows, after a cursor from `next`.
fn page_args(
    limit: Option<usize>,
    after: Option<&str>,
) -> Result<(usize, Option<Cursor>), ApiError> {
    let limit = check_limit(limit.unwrap_or(DEFAULT_LIMIT)).map_err(|e| bad_request("limit", e))?;
    let after = after
        .map(str::parse::<Cursor>)
        .transpose()
        .map_err(|e| bad_request("after", e))?;
    Ok((limit, after))
}

async fn results(State(s): State<Daemon>, JsonQuery(q): JsonQuery<ResultsQuery>) -> ApiResult {
    let status = q
        .status
        .map(|st| gpufleet_proto::v1::RunStatus::parse(&st).map(|v| v.name().to_string()))
        .transpose()
        .map_err(|e| bad_request("status", e))?;
    let since = q
        .since
        .as_deref()
        .map(|t| parse_since(t, now()))
        .transpose()
        .map_err(|e| bad_request("since", e))?;
    let (limit, after) = page_args(q.limit, q.after.as_deref())?;
    let filter = ResultFilter {
        campaign_id: q.campaign,
        kernel: q.kernel,
        agent: q.agent,
        status,
        since,
        ..Default::default()
    };
    let page = db(&s)
        .call(move |st| st.results_page(&filter, limit, after, Direction::NewestFirst))
        .await?;
    let out = page
        .rows
        .iter()
        .map(|r| {
            let mut v = serde_json::to_value(&r.record)?;
            if let Some(o) = v.as_object_mut() {
                o.remove("times");
                o.remove("power");
                o.insert("id".into(), json!(r.id));
            }
            Ok(v)
        })
        .collect::<serde_json::Result<Vec<Value>>>()?;
    Ok(Json(json!({
        "results": out,
        "next": page.next.map(|c| c.to_string()),
    })))
}

async fn schedules(State(s): State<Daemon>) -> ApiResult {
    let rows = db(&s).call(|st| st.schedules()).await?;
    let t = now();
    let out = rows
        .iter()
        .map(|r| {
            let mut v = serde_json::to_value(r)?;
            v["next_slot"] = json!(next_slot(r, t));
            Ok(v)
        })
        .collect::<serde_json::Result<Vec<Value>>>()?;
    Ok(Json(Value::from(out)))
}

#[derive(Debug, Deserialize)]
struct SinceQuery {
    since: Option<String>,
}

fn since(q: &SinceQuery) -> Result<f64, ApiError> {
    match &q.since {
        None => Ok(0.0),
        Some(t) => parse_since(t, now()).map_err(|e| ApiError(StatusCode::BAD_REQUEST, e)),
    }
}

/// `/api/alerts`' page when the request names none: a fleet after a driver change on many hosts
/// has thousands of alerts, and an answer must stay small.
const ALERTS_PAGE: usize = 1_000;

#[derive(Debug, Deserialize)]
struct AlertsQuery {
    since: Option<String>,
    /// At most this many (1 to `MAX_PAGE`; default [`ALERTS_PAGE`]), newest first.
    limit: Option<usize>,
    /// Only alerts with a smaller id: the last id of the page before, for the next page.
    before: Option<i64>,
}

async fn alerts(State(s): State<Daemon>, JsonQuery(q): JsonQuery<AlertsQuery>) -> ApiResult {
    let since = since(&SinceQuery { since: q.since })?;
    let limit = check_limit(q.limit.unwrap_or(ALERTS_PAGE)).map_err(|e| bad_request("limit", e))?;
    let filter = crate::store::AlertFilter {
        since,
        before_id: q.before,
        limit,
        ..Default::default()
    };
    let rows = db(&s).call(move |st| st.alerts_where(&filter)).await?;
    Ok(Json(serde_json::to_value(rows)?))
}

#[derive(Debug, Deserialize)]
struct ChecksQuery {
    since: Option<String>,
    limit: Option<usize>,
    after: Option<String>,
}

async fn checks(State(s): State<Daemon>, JsonQuery(q): JsonQuery<ChecksQuery>) -> ApiResult {
    let since = since(&SinceQuery { since: q.since })?;
    let (limit, after) = page_args(q.limit, q.after.as_deref())?;
    let (rows, next) = db(&s)
        .call(move |st| st.checks_page(since, limit, after))
        .await?;
    Ok(Json(json!({
        "checks": serde_json::to_value(rows)?,
        "next": next.map(|c| c.to_string()),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::campaign::progress::LogReporter;
    use crate::schedule::DaemonConfig;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    const READ: &str = "read-token-0123456789";
    const ADMIN: &str = "admin-token-0123456789";

    /// A daemon over an empty in-memory store.
    fn daemon() -> Daemon {
        Daemon::new(
            Db::in_memory().unwrap(),
            DaemonConfig::default(),
            std::sync::Arc::new(LogReporter),
        )
    }

    /// Both tokens set, as serve beyond loopback has them.
    fn tokens() -> ApiAuth {
        ApiAuth {
            read: Some(READ.into()),
            admin: Some(ADMIN.into()),
        }
    }

    async fn call(app: &Router, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
        let mut req = Request::builder().method(method).uri(path);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let res = app
            .clone()
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = res.status().as_u16();
        let body = axum::body::to_bytes(res.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).to_string())
    }

    #[tokio::test]
    async fn tokens_guard_every_path_but_health_and_query_errors_are_json() {
        let (read, admin) = (READ, ADMIN);
        let app = router_with_auth(daemon(), tokens());
        let (status, health) = call(&app, "GET", "/healthz", None).await;
        assert_eq!(status, 200);
        let health: serde_json::Value = serde_json::from_str(&health).unwrap();
        assert_eq!(health["database"]["engine"], "sqlite", "{health}");
        assert_eq!(health["replica"], health["owner"], "{health}");
        assert!(health["schedules"].is_array(), "{health}");
        let (status, body) = call(&app, "GET", "/api/agents", None).await;
        assert_eq!(status, 401, "{body}");
        assert!(body.contains("\"error\""), "{body}");
        assert_eq!(call(&app, "GET", "/api/agents", Some("wrong")).await.0, 401);
        assert_eq!(call(&app, "GET", "/api/agents", Some(read)).await.0, 200);
        assert_eq!(call(&app, "GET", "/api/agents", Some(admin)).await.0, 200);
        // Writes need the admin token: the read token is refused before routing.
        assert_eq!(call(&app, "POST", "/api/agents", Some(read)).await.0, 401);
        assert_ne!(call(&app, "POST", "/api/agents", Some(admin)).await.0, 401);
        let (status, body) = call(&app, "GET", "/api/results?limit=-1", Some(read)).await;
        assert_eq!(status, 400);
        let v: Value = serde_json::from_str(&body).unwrap();
        assert!(v["error"].as_str().unwrap().contains("limit"), "{body}");
    }

    /// `/healthz` answers 503 naming the problem while a campaign has a running job whose lease
    /// ran out (nobody renews or takes it back) and while the daemon's ticks fail, 200 after.
    #[tokio::test]
    async fn healthz_is_503_with_the_problem_while_a_campaign_stalls_or_ticks_fail() {
        use crate::store::NewJob;
        let d = daemon();
        let app = router_with_auth(d.clone(), ApiAuth::default());
        let ok: Value = serde_json::from_str(&call(&app, "GET", "/healthz", None).await.1).unwrap();
        assert_eq!(
            (
                ok["status"].as_str(),
                ok["problems"].as_array().map(Vec::len)
            ),
            (Some("ok"), Some(0))
        );
        let job = d
            .db()
            .call(|s| {
                let agent = s.add_agent("rig", "http://127.0.0.1:9", None).unwrap();
                let c = s.create_campaign("smoke", "", "{}").unwrap();
                s.add_jobs(&[NewJob {
                    campaign_id: c,
                    agent_id: agent.id,
                    device_row_id: None,
                    spec_key: "k".into(),
                    spec_json: "{}".into(),
                    run_id: "run-1".into(),
                }])
                .unwrap();
                // Claimed with a lease that ran out a minute ago, by a serve that is gone.
                s.claim_job(c, agent.id, None, "1@elsewhere", -60.0)
                    .unwrap()
                    .unwrap()
            })
            .await;
        let (status, body) = call(&app, "GET", "/healthz", None).await;
        assert_eq!(status, 503, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], "unhealthy");
        assert_eq!(v["problems"][0]["what"], "campaign", "{body}");
        let message = v["problems"][0]["message"].as_str().unwrap();
        assert!(
            message.contains("campaign 1 has stalled: 1 running job"),
            "{message}"
        );
        d.db()
            .call(move |s| s.set_job_state(job.id, crate::store::JobState::Done, None))
            .await
            .unwrap();
        assert_eq!(call(&app, "GET", "/healthz", None).await.0, 200);

        let failure = StoreError::InvalidInput {
            field: "schedule",
            message: "unreadable".into(),
        };
        d.note_tick(Some(&failure));
        let (status, body) = call(&app, "GET", "/healthz", None).await;
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("schedules cannot fire"), "{body}");
        d.note_tick(None);
        assert_eq!(call(&app, "GET", "/healthz", None).await.0, 200);
    }

    #[tokio::test]
    async fn browsers_log_in_with_basic_auth_and_cross_site_writes_are_refused() {
        use base64::Engine as _;
        let (read, admin) = (READ, ADMIN);
        let app = router_with_auth(daemon(), tokens());
        let send = |method: &str, path: &str, headers: &[(&str, String)]| {
            let mut req = Request::builder().method(method).uri(path);
            for (k, v) in headers {
                req = req.header(*k, v);
            }
            let app = app.clone();
            let req = req.body(Body::empty()).unwrap();
            async move { app.oneshot(req).await.unwrap() }
        };
        let basic = |t: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("me:{t}"))
            )
        };
        // A page without credentials: 401 with a Basic challenge, so the browser asks.
        let res = send("GET", "/compare", &[]).await;
        assert_eq!(res.status(), 401);
        let challenge = res.headers()["www-authenticate"].to_str().unwrap();
        assert!(challenge.starts_with("Basic realm="), "{challenge}");
        // The API keeps answering JSON errors without a challenge.
        let res = send("GET", "/api/agents", &[]).await;
        assert_eq!(res.status(), 401);
        assert!(res.headers().get("www-authenticate").is_none());
        // The read token as the password opens the pages; a wrong one does not.
        let ok = send("GET", "/", &[("authorization", basic(read))]).await;
        assert_eq!(ok.status(), 200);
        let bad = send("GET", "/", &[("authorization", basic("nope-nope-nope"))]).await;
        assert_eq!(bad.status(), 401);
        // The stylesheet needs no token (the login prompt page uses it).
        assert_eq!(send("GET", "/static/gpufleet.css", &[]).await.status(), 200);
        // Acknowledging needs the admin token, and not from another site.
        let read_ack = send("POST", "/alerts/1/ack", &[("authorization", basic(read))]).await;
        assert_eq!(read_ack.status(), 401);
        let cross = send(
            "POST",
            "/alerts/1/ack",
            &[
                ("authorization", basic(admin)),
                ("sec-fetch-site", "cross-site".into()),
            ],
        )
        .await;
        assert_eq!(cross.status(), 403);
        let origin = send(
            "POST",
            "/alerts/1/ack",
            &[
                ("authorization", basic(admin)),
                ("origin", "https://evil.example".into()),
                ("host", "127.0.0.1:8787".into()),
            ],
        )
        .await;
        assert_eq!(origin.status(), 403);
        // Same site, admin token: reaches the handler (no alert 1 here: 404).
        let same = send(
            "POST",
            "/alerts/1/ack",
            &[
                ("authorization", basic(admin)),
                ("sec-fetch-site", "same-origin".into()),
            ],
        )
        .await;
        assert_eq!(same.status(), 404);
        // Metrics need the read token too.
        assert_eq!(send("GET", "/metrics", &[]).await.status(), 401);
        let m = send(
            "GET",
            "/metrics",
            &[("authorization", format!("Bearer {read}"))],
        )
        .await;
        assert_eq!(m.status(), 200);
        let body = axum::body::to_bytes(m.into_body(), 1 << 20).await.unwrap();
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains("gpufleet_alerts_open 0"), "{text}");
        assert!(
            text.contains("gpufleet_http_request_duration_seconds"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn results_come_in_pages_with_a_cursor_and_bad_parameters_are_named() {
        let d = daemon();
        d.db().with(|st| {
            let agent = st.add_agent("a", "http://h:1", None).unwrap().id;
            for i in 0..5 {
                let r = crate::store::ResultRecord {
                    run_id: format!("run-{i}"),
                    agent_id: agent,
                    device_id: "cpu:0".into(),
                    backend: "cpu".into(),
                    spec_key: "k".into(),
                    kernel: if i == 2 { "saxpy" } else { "gemm" }.into(),
                    status: "ok".into(),
                    created_at: Some(100.0 + f64::from(i)),
                    ..Default::default()
                };
                st.insert_result(&r).unwrap();
            }
        });
        let app = router(d);
        let get = |path: &str| {
            let app = app.clone();
            let path = path.to_string();
            async move {
                let (status, body) = call(&app, "GET", &path, None).await;
                (status, serde_json::from_str::<Value>(&body).unwrap())
            }
        };
        let runs = |v: &Value| -> Vec<String> {
            v["results"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["run_id"].as_str().unwrap().to_string())
                .collect()
        };
        let (status, first) = get("/api/results?limit=2&kernel=gemm").await;
        assert_eq!(status, 200, "{first}");
        assert_eq!(runs(&first), ["run-4", "run-3"], "newest first");
        let next = first["next"].as_str().unwrap().to_string();
        let (_, second) = get(&format!("/api/results?limit=2&kernel=gemm&after={next}")).await;
        assert_eq!(runs(&second), ["run-1", "run-0"]);
        assert_eq!(second["next"], Value::Null, "the last page");
        let (_, recent) = get("/api/results?since=102.5").await;
        assert_eq!(runs(&recent), ["run-4", "run-3"]);
        for (query, field) in [
            ("limit=0", "limit"),
            ("limit=10001", "limit"),
            ("limit=ten", "limit"),
            ("after=yesterday", "after"),
            ("after=12:0", "after"),
            ("since=soon", "since"),
            ("status=fine", "status"),
        ] {
            let (status, v) = get(&format!("/api/results?{query}")).await;
            assert_eq!(status, 400, "{query}: {v}");
            let e = v["error"].as_str().unwrap();
            assert!(e.contains(field), "{query}: {e}");
            assert!(e.len() < 300, "{query}: {e}");
        }
        let (status, checks) = get("/api/checks?limit=1").await;
        assert_eq!(status, 200, "{checks}");
        assert_eq!(checks["checks"], json!([]));
        assert_eq!(get("/api/checks?after=x").await.0, 400);
    }

    #[tokio::test]
    async fn agents_and_a_campaigns_jobs_come_in_pages() {
        let d = daemon();
        let campaign = d.db().with(|st| {
            let campaign = st.create_campaign("s", "", "{}").unwrap();
            for name in ["c", "a", "d", "b", "e"] {
                let a = st.add_agent(name, "http://h:1", None).unwrap().id;
                let dev = crate::store::DeviceRecord {
                    device_id: "cpu:0".into(),
                    backend: "cpu".into(),
                    name: format!("cpu of {name}"),
                    info_json: "{}".into(),
                    ..Default::default()
                };
                st.upsert_device(a, &dev).unwrap();
                if name < "d" {
                    st.add_job(&crate::store::NewJob {
                        campaign_id: campaign,
                        agent_id: a,
                        device_row_id: None,
                        spec_key: "k".into(),
                        spec_json: "{}".into(),
                        run_id: format!("run-{name}"),
                    })
                    .unwrap();
                }
            }
            campaign
        });
        let app = router(d);
        let get_owned = |path: String| {
            let app = app.clone();
            async move {
                let (status, body) = call(&app, "GET", &path, None).await;
                (status, serde_json::from_str::<Value>(&body).unwrap())
            }
        };
        let get = |path: &'static str| get_owned(path.to_string());
        let names = |v: &Value| -> Vec<String> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|a| a["name"].as_str().unwrap().to_string())
                .collect()
        };
        let (status, all) = get("/api/agents").await;
        assert_eq!(status, 200, "{all}");
        assert_eq!(names(&all), ["a", "b", "c", "d", "e"]);
        assert_eq!(
            all[2]["devices"][0]["name"], "cpu of c",
            "each with its own devices"
        );
        assert_eq!(names(&get("/api/agents?limit=2").await.1), ["a", "b"]);
        assert_eq!(
            names(&get("/api/agents?limit=2&after=b").await.1),
            ["c", "d"]
        );
        assert_eq!(
            names(&get("/api/agents?after=e").await.1),
            Vec::<String>::new()
        );
        let (status, c) = get_owned(format!("/api/campaigns/{campaign}?limit=2")).await;
        assert_eq!(status, 200, "{c}");
        assert_eq!(c["job_list"].as_array().unwrap().len(), 2);
        let next = c["job_list_next"].as_i64().expect("a next page");
        let (_, rest) = get_owned(format!("/api/campaigns/{campaign}?after={next}")).await;
        assert_eq!(rest["job_list"].as_array().unwrap().len(), 1);
        assert_eq!(rest["job_list_next"], Value::Null);
        let (status, _) = get_owned(format!("/api/campaigns/{campaign}?limit=0")).await;
        assert_eq!(status, 400);
        for (path, field) in [
            ("/api/agents?limit=0", "limit"),
            ("/api/agents?page=2", "page"),
        ] {
            let (status, v) = get(path).await;
            assert_eq!(status, 400, "{path}: {v}");
            assert!(v["error"].as_str().unwrap().contains(field), "{path}: {v}");
        }
    }

    #[tokio::test]
    async fn page_errors_are_pages_with_the_status_and_a_short_quote() {
        let app = router(daemon());
        let long = "x".repeat(5000);
        for (path, status) in [
            (format!("/runs/{long}"), 400),
            ("/runs/12".to_string(), 404),
            ("/campaigns/-1".to_string(), 404),
            (format!("/compare?baseline={long}"), 400),
            ("/compare?bogus=1".to_string(), 400),
            ("/history?spec=a".to_string(), 400),
            (format!("/history?spec={long}&agent=a&device=d"), 404),
        ] {
            let (code, body) = call(&app, "GET", &path, None).await;
            assert_eq!(code, status, "{path}: {body}");
            assert!(body.contains("<html"), "{path}: an HTML page");
            assert!(
                body.len() < 4000,
                "{path}: the input is not echoed whole ({} bytes)",
                body.len()
            );
        }
    }
}
