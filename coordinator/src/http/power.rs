//! Live power over HTTP: `GET /api/agents/{name}/power` streams an agent's samples as server-sent
//! events (what `gpufleet power` reads for a dial-in agent, and the agent page's script), and
//! `GET /api/agents/{name}/power/latest` answers the latest sample of each channel as JSON.
//!
//! The stream: every sample is an event `data: {LiveSample JSON}`; when the agent goes away the
//! last event is `event: end` with `data: {"error": "why"}`, and the response ends. A comment
//! line every 15 s keeps proxies from closing a quiet stream. Refusals come before the stream,
//! as JSON errors: 404 for an agent not connected to this serve (with why, when known), 400 for a
//! bad `device`, `source` or `rate_hz`, 409 for an agent without power channels, 429 when it has
//! too many watchers.

use super::{ApiError, JsonQuery};
use crate::live::WatchError;
use crate::schedule::Daemon;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use gpufleet_proto::power::LiveSample;
use gpufleet_proto::v1 as pb;
use serde::Deserialize;
use serde_json::json;
use std::time::Duration;

/// The stream's query: the same filter as the agent's StreamPower, and a rate.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerQuery {
    /// A device id of the agent, or a PCI bus id.
    #[serde(default)]
    device: String,
    /// A power source name (`nvml`, `amdgpu-hwmon`, ...).
    #[serde(default)]
    source: String,
    /// Samples a second per channel; 0 or absent: every sample the agent takes.
    #[serde(default)]
    rate_hz: f64,
}

impl From<WatchError> for ApiError {
    fn from(e: WatchError) -> ApiError {
        let status = match &e {
            WatchError::NotConnected(_) => StatusCode::NOT_FOUND,
            WatchError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            WatchError::NoSources(_) => StatusCode::CONFLICT,
            WatchError::Busy(_) => StatusCode::TOO_MANY_REQUESTS,
        };
        ApiError(status, e.to_string())
    }
}

/// `GET /api/agents/{name}/power`.
pub async fn stream(
    State(s): State<Daemon>,
    Path(agent): Path<String>,
    JsonQuery(q): JsonQuery<PowerQuery>,
) -> Result<Response, ApiError> {
    let request = pb::PowerRequest {
        device_id: q.device,
        source: q.source,
        rate_hz: q.rate_hz,
    };
    let watch = s.live().watch(&agent, &request)?;
    let events = futures::stream::unfold(Some(watch), |watch| async move {
        let mut watch = watch?;
        let event = match watch.next().await {
            Ok(sample) => {
                let data = serde_json::to_string(&LiveSample::from(&sample))
                    .expect("a live sample serialises to JSON");
                Some((Event::default().data(data), Some(watch)))
            }
            Err(why) => {
                let data = json!({ "error": why }).to_string();
                Some((Event::default().event("end").data(data), None))
            }
        };
        event.map(|(e, w)| (Ok::<_, std::convert::Infallible>(e), w))
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

/// `GET /api/agents/{name}/power/latest`: `{"agent", "connected", "samples": [LiveSample]}`.
pub async fn latest(State(s): State<Daemon>, Path(agent): Path<String>) -> Response {
    let live = s.live();
    let samples: Vec<LiveSample> = live.latest(&agent).iter().map(LiveSample::from).collect();
    Json(json!({
        "agent": agent,
        "connected": live.connected(&agent),
        "samples": samples,
    }))
    .into_response()
}
