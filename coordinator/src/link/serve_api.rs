//! A client of a running serve's HTTP API, for what only that serve has: the live power of a
//! dial-in agent whose link it holds (`GET /api/agents/{name}/power`, server-sent events; see
//! `crate::http` for the stream's form). The serve records its API's address with each agent
//! it holds (`agents.api_url`), so `gpufleet power` beside the database finds it.
//!
//! Plain HTTP only: a serve binds a plaintext API on loopback alone, which is where a CLI sharing
//! its database runs; the read token (`GPUFLEET_READ_TOKEN`), when set, goes as a bearer token.

use futures::StreamExt;
use futures::stream::BoxStream;
use gpufleet_proto::power::LiveSample;
use gpufleet_proto::v1 as pb;
use http_body_util::{BodyExt, BodyStream};
use hyper_util::rt::TokioIo;
use std::time::Duration;

/// The longest event (or error body) read; a line beyond it ends the stream as malformed.
const MAX_EVENT_BYTES: usize = 1 << 20;

/// A live power stream: samples, then at most one error saying why it ended.
pub type PowerEvents = BoxStream<'static, Result<pb::PowerSample, String>>;

/// Opens `agent`'s live power on the serve whose API is at `api` (`http://host:port`), filtered
/// and paced by `req`.
///
/// # Errors
/// The API cannot be reached within `timeout`, answers with an error (its message), or is not
/// plain HTTP.
pub async fn power_events(
    api: &str,
    agent: &str,
    req: &pb::PowerRequest,
    token: Option<&str>,
    timeout: Duration,
) -> Result<PowerEvents, String> {
    let Some(authority) = api.strip_prefix("http://") else {
        return Err(format!(
            "the serve's API is at {api}, which this command reaches only over plain HTTP on loopback; watch the agent's page on the dashboard instead"
        ));
    };
    let authority = authority.trim_end_matches('/').to_string();
    let query = serde_urlencoded::to_string([
        ("device", req.device_id.as_str()),
        ("source", req.source.as_str()),
        ("rate_hz", &req.rate_hz.to_string()),
    ])
    .map_err(|e| e.to_string())?;
    let path = format!("/api/agents/{agent}/power?{query}");
    let connecting = async {
        let tcp = tokio::net::TcpStream::connect(&authority)
            .await
            .map_err(|e| format!("cannot reach the serve's API at {api}: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| format!("the serve's API at {api}: {e}"))?;
        tokio::spawn(conn);
        let mut request = hyper::Request::get(path.as_str())
            .header(hyper::header::HOST, authority.as_str())
            .header(hyper::header::ACCEPT, "text/event-stream");
        if let Some(t) = token {
            request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let request = request
            .body(http_body_util::Empty::<hyper::body::Bytes>::new())
            .map_err(|e| format!("agent name {}: {e}", gpufleet_kernels::quote(agent)))?;
        sender
            .send_request(request)
            .await
            .map_err(|e| format!("the serve's API at {api}: {e}"))
    };
    let response = tokio::time::timeout(timeout, connecting)
        .await
        .map_err(|_| format!("the serve's API at {api} did not answer within {timeout:?}"))??;
    let status = response.status();
    if !status.is_success() {
        let body = response
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&body[..body.len().min(MAX_EVENT_BYTES)]).to_string();
        let message = error_field(&text).unwrap_or_else(|| gpufleet_kernels::quote(&text));
        return Err(format!("serve at {api} ({status}): {message}"));
    }
    let body = BodyStream::new(response.into_body());
    let api = api.to_string();
    let events = futures::stream::unfold(Some((body, Vec::<u8>::new())), move |state| {
        let api = api.clone();
        async move {
            let (mut body, mut buf) = state?;
            loop {
                if let Some(end) = find_event_end(&buf) {
                    let event: Vec<u8> = buf.drain(..end).collect();
                    match parse_event(&event) {
                        Parsed::Sample(s) => return Some((Ok(s), Some((body, buf)))),
                        Parsed::End(why) => return Some((Err(why), None)),
                        Parsed::Nothing => continue,
                    }
                }
                if buf.len() > MAX_EVENT_BYTES {
                    return Some((
                        Err(format!("serve at {api} sent an event over 1 MiB")),
                        None,
                    ));
                }
                match body.next().await {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            buf.extend_from_slice(&data);
                        }
                    }
                    Some(Err(e)) => {
                        return Some((
                            Err(format!("the serve at {api} broke the stream: {e}")),
                            None,
                        ));
                    }
                    None => {
                        return Some((Err(format!("the serve at {api} closed the stream")), None));
                    }
                }
            }
        }
    });
    Ok(events.boxed())
}

/// Where the first complete event of `buf` ends (past its blank line).
fn find_event_end(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2)
}

enum Parsed {
    Sample(pb::PowerSample),
    End(String),
    /// A comment (keep-alive) or an event of another kind.
    Nothing,
}

/// One event: its `event:` name and its `data:` lines.
fn parse_event(event: &[u8]) -> Parsed {
    let text = String::from_utf8_lossy(event);
    let mut kind = "";
    let mut data = String::new();
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("event:") {
            kind = v.trim();
        } else if let Some(v) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    match kind {
        "end" => Parsed::End(
            error_field(&data).unwrap_or_else(|| "the serve ended the stream".to_string()),
        ),
        "" | "message" if !data.is_empty() => match serde_json::from_str::<LiveSample>(&data) {
            Ok(s) => Parsed::Sample(s.to_wire()),
            Err(e) => Parsed::End(format!(
                "the serve sent a sample that does not parse ({e}): {}",
                gpufleet_kernels::quote(&data)
            )),
        },
        _ => Parsed::Nothing,
    }
}

/// The `error` of a JSON object such as `{"error": "..."}` (the API's error bodies and the stream's
/// `end` event), if `text` is one.
fn error_field(text: &str) -> Option<String> {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_cut_at_blank_lines_and_read_by_kind() {
        let sample = r#"{"source":"amdgpu-hwmon","scope":"asic","pci_bus_id":"0000:03:00.0","monotonic_ns":5,"wall_unix_s":1.5,"watts":8.0,"energy_j":null,"temperature_c":null,"sclk_mhz":300,"mclk_mhz":null,"utilization_pct":null,"label":"amdgpu power1_input"}"#;
        let mut buf = format!(": keep-alive\n\ndata: {sample}\n\nevent: end\ndata: {{\"error\":\"agent rig's link ended\"}}\n\n")
            .into_bytes();
        let mut got = Vec::new();
        while let Some(end) = find_event_end(&buf) {
            let event: Vec<u8> = buf.drain(..end).collect();
            got.push(parse_event(&event));
        }
        assert!(buf.is_empty());
        assert!(matches!(got[0], Parsed::Nothing));
        let Parsed::Sample(s) = &got[1] else {
            panic!("a sample")
        };
        assert_eq!((s.watts, s.has_watts, s.sclk_mhz), (8.0, true, 300));
        assert_eq!(s.label, "amdgpu power1_input");
        let Parsed::End(why) = &got[2] else {
            panic!("the end")
        };
        assert_eq!(why, "agent rig's link ended");
        assert!(
            matches!(parse_event(b"data: {oops\n\n"), Parsed::End(w) if w.contains("does not parse"))
        );
    }
}
