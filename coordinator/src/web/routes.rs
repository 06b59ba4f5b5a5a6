//! The dashboard's routes on `gpufleet serve`: each page is rendered on the blocking pool from the
//! store; a page error is an HTML page with the right status.

use super::links::{CompareQuery, HistoryQuery, Links, Scope};
use super::page::{CSS, JS, Page, WebError, clip};
use super::pages;
use crate::db::Db;
use crate::schedule::Daemon;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};

impl IntoResponse for WebError {
    fn into_response(self) -> Response {
        let status = match &self {
            WebError::NotFound(_) => StatusCode::NOT_FOUND,
            WebError::BadRequest(_) => StatusCode::BAD_REQUEST,
            WebError::Store(_) | WebError::Render(..) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let message = self.to_string();
        // The error page itself needs no store: render it over an empty in-memory one only if the
        // template works, else plain text.
        let html = crate::store::Store::open_in_memory()
            .ok()
            .and_then(|s| pages::error_page(&Links::default(), &s, &message).ok())
            .and_then(|p| p.render().ok());
        match html {
            Some(h) => (
                status,
                [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                h,
            )
                .into_response(),
            None => (status, message).into_response(),
        }
    }
}

type PageResult = Result<Response, WebError>;

/// Renders a page built from the store on the blocking pool.
async fn render_page(
    db: Db,
    build: impl FnOnce(&crate::store::Store, &Links) -> Result<Page, WebError> + Send + 'static,
) -> PageResult {
    let html = db
        .call(move |s| build(s, &Links::default()).and_then(|p| p.render()))
        .await?;
    Ok(([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response())
}

/// A query string parsed into `T`, the error naming the parameter.
fn parse_query<T: serde::de::DeserializeOwned + Default>(
    q: Result<Query<T>, axum::extract::rejection::QueryRejection>,
) -> Result<T, WebError> {
    q.map(|Query(v)| v).map_err(|e| {
        WebError::BadRequest(
            clip(&e.body_text()).replace("Failed to deserialize query string: ", ""),
        )
    })
}

fn db(s: &Daemon) -> Db {
    s.db().clone()
}

/// `?page=N` of a paged page (`/`, `/campaigns/{id}`): which page (from 1).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PageQuery {
    page: Option<usize>,
}

async fn get_fleet(
    State(s): State<Daemon>,
    q: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> PageResult {
    let q = parse_query(q)?;
    render_page(db(&s), move |st, l| pages::fleet::fleet(st, l, q.page)).await
}

async fn get_compare(
    State(s): State<Daemon>,
    q: Result<Query<CompareQuery>, axum::extract::rejection::QueryRejection>,
) -> PageResult {
    let q = parse_query(q)?;
    render_page(db(&s), move |st, l| {
        pages::compare::compare_page(st, l, &q, &Scope::default())
    })
    .await
}

async fn get_compare_csv(
    State(s): State<Daemon>,
    q: Result<Query<CompareQuery>, axum::extract::rejection::QueryRejection>,
) -> PageResult {
    download_compare(s, parse_query(q)?, false).await
}

async fn get_compare_json(
    State(s): State<Daemon>,
    q: Result<Query<CompareQuery>, axum::extract::rejection::QueryRejection>,
) -> PageResult {
    download_compare(s, parse_query(q)?, true).await
}

/// Exactly the cells `/compare` shows with the same filters, as CSV or JSON.
async fn download_compare(s: Daemon, q: CompareQuery, json: bool) -> PageResult {
    let body = db(&s)
        .call(move |st| -> Result<String, WebError> {
            let m = pages::compare::matrix(st, &q, &Scope::default())?;
            Ok(if json {
                serde_json::to_string_pretty(&m.cells())
                    .expect("comparison cells serialise to JSON")
            } else {
                pages::compare::matrix_csv(&m)
            })
        })
        .await?;
    let (kind, name) = if json {
        ("application/json", "compare.json")
    } else {
        ("text/csv; charset=utf-8", "compare.csv")
    };
    Ok((
        [
            (header::CONTENT_TYPE, kind.to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        body,
    )
        .into_response())
}

async fn get_history(
    State(s): State<Daemon>,
    q: Result<Query<HistoryQuery>, axum::extract::rejection::QueryRejection>,
) -> PageResult {
    let q = parse_query(q)?;
    render_page(db(&s), move |st, l| pages::history::history(st, l, &q)).await
}

async fn get_history_csv(
    State(s): State<Daemon>,
    q: Result<Query<HistoryQuery>, axum::extract::rejection::QueryRejection>,
) -> PageResult {
    let q = parse_query(q)?;
    let body = db(&s)
        .call(move |st| pages::history::history_csv(st, &q))
        .await?;
    Ok((
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8"),
            (
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"history.csv\"",
            ),
        ],
        body,
    )
        .into_response())
}

fn parse_id(what: &str, id: &str) -> Result<i64, WebError> {
    id.parse()
        .map_err(|_| WebError::BadRequest(format!("{what} id {:?} is not an integer", clip(id))))
}

/// `/runs/ID`: a result by its row id, or by its run id or the first characters of it (the CLI
/// prints `42d28599`), when they name one result.
async fn get_run(State(s): State<Daemon>, Path(id): Path<String>) -> PageResult {
    render_page(db(&s), move |st, l| pages::run::run_by_ref(st, l, &id)).await
}

async fn get_device(
    State(s): State<Daemon>,
    Path((agent, device)): Path<(String, String)>,
) -> PageResult {
    render_page(db(&s), move |st, l| {
        pages::device::device(st, l, &agent, &device)
    })
    .await
}

async fn get_agent(State(s): State<Daemon>, Path(agent): Path<String>) -> PageResult {
    let live = pages::agent::LiveView::of(s.live(), &agent);
    render_page(db(&s), move |st, l| {
        pages::agent::agent(st, l, &agent, &live)
    })
    .await
}

async fn get_campaigns(State(s): State<Daemon>) -> PageResult {
    render_page(db(&s), |st, l| {
        pages::campaigns::campaigns(st, l, &Scope::default())
    })
    .await
}

async fn get_campaign(
    State(s): State<Daemon>,
    Path(id): Path<String>,
    q: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> PageResult {
    let id = parse_id("campaign", &id)?;
    let q = parse_query(q)?;
    render_page(db(&s), move |st, l| {
        pages::campaigns::campaign(st, l, id, q.page)
    })
    .await
}

/// `/groups?campaign=N` (default: the latest campaign with results).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupsQuery {
    campaign: Option<i64>,
}

async fn get_groups(
    State(s): State<Daemon>,
    q: Result<Query<GroupsQuery>, axum::extract::rejection::QueryRejection>,
) -> PageResult {
    let q = parse_query(q)?;
    let scope = Scope {
        campaign: q.campaign,
        ..Scope::default()
    };
    render_page(db(&s), move |st, l| pages::groups::groups(st, l, &scope)).await
}

async fn get_alerts(State(s): State<Daemon>) -> PageResult {
    render_page(db(&s), |st, l| {
        pages::alerts::alerts(st, l, &Scope::default())
    })
    .await
}

/// `POST /alerts/{id}/ack` (the admin token; checked by the API's token layer): marks the alert
/// acknowledged and goes back to /alerts.
async fn post_acknowledge(State(s): State<Daemon>, Path(id): Path<String>) -> PageResult {
    let id = parse_id("alert", &id)?;
    let found = db(&s).call(move |st| st.acknowledge_alert(id)).await?;
    if !found {
        return Err(WebError::NotFound(format!("no alert {id}")));
    }
    Ok(Redirect::to("/alerts").into_response())
}

async fn get_static_file(Path(name): Path<String>) -> Response {
    let (body, kind) = match name.as_str() {
        "gpufleet.css" => (CSS, "text/css; charset=utf-8"),
        "gpufleet.js" => (JS, "text/javascript; charset=utf-8"),
        _ => return WebError::NotFound(format!("no static file {}", clip(&name))).into_response(),
    };
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        body,
    )
        .into_response()
}

/// The dashboard's pages (the API's router adds them, behind the same tokens).
pub fn pages_router() -> Router<Daemon> {
    Router::new()
        .route("/", get(get_fleet))
        .route("/compare", get(get_compare))
        .route("/compare.csv", get(get_compare_csv))
        .route("/compare.json", get(get_compare_json))
        .route("/history", get(get_history))
        .route("/history.csv", get(get_history_csv))
        .route("/runs/{id}", get(get_run))
        .route("/devices/{agent}/{device}", get(get_device))
        .route("/agents/{name}", get(get_agent))
        .route("/campaigns", get(get_campaigns))
        .route("/campaigns/{id}", get(get_campaign))
        .route("/alerts", get(get_alerts))
        .route("/groups", get(get_groups))
        .route("/alerts/{id}/ack", post(post_acknowledge))
        .route("/static/{name}", get(get_static_file))
}
