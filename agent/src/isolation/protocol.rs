//! Messages between the agent and its worker processes (JSON, one per line).

use crate::backend::{BackendError, DeviceInfo, Mode};
use gpufleet_kernels::{JsonError, RunSettings, Validation};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One run, as the parent hands it to `worker serve` on stdin (one JSON line).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerJob {
    pub backend: String,
    pub device: DeviceInfo,
    pub kernel: String,
    pub variant: String,
    pub params: BTreeMap<String, i64>,
    pub dtype: String,
    pub mode: Mode,
    /// How to measure, every setting decided by the parent (the request's, else the defaults);
    /// the worker's loop applies them as they are. `timeout_s` also bounds its autotuning.
    #[serde(flatten)]
    pub settings: RunSettings,
    pub skip_validation: bool,
    pub seed: u64,
    /// Whether debug kernels may run (the agent's --enable-debug-kernels).
    pub allow_debug: bool,
    /// Minimum kernel window in seconds for the energy figure: when the
    /// timed iterations end sooner, the kernel keeps running (untimed)
    /// until the window is this long. 0: no power run.
    #[serde(default)]
    pub power_window_s: f64,
}

/// Run status as the worker decides it; crashes and timeouts are decided by
/// the parent, which sees the process end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerStatus {
    Ok,
    Invalid,
    CompileError,
    Unsupported,
    Error,
    /// A backend or driver allocation failed (host or device memory).
    OutOfMemory,
}

/// The worker's last message for a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerOutcome {
    pub status: WorkerStatus,
    pub message: String,
    pub times_s: Vec<f64>,
    pub warmup_done: u32,
    pub validation: Option<Validation>,
    pub config: BTreeMap<String, String>,
    /// Untimed repeats after the timed iterations, inside the kernel window
    /// (a power run); 0 when the timed part was long enough.
    #[serde(default)]
    pub power_iterations: u64,
    /// First timed iterations found still warming up and dropped from `times_s`: inside the
    /// kernel window too, so the window's energy is shared over them as well.
    #[serde(default)]
    pub trimmed_iterations: u64,
}

impl WorkerOutcome {
    /// An outcome for a failure before or during measurement.
    pub fn failed(status: WorkerStatus, message: impl Into<String>) -> Self {
        WorkerOutcome {
            status,
            message: message.into(),
            times_s: Vec::new(),
            warmup_done: 0,
            validation: None,
            config: BTreeMap::new(),
            power_iterations: 0,
            trimmed_iterations: 0,
        }
    }

    /// The outcome of a run whose worker sent a line that is not a protocol event (say, an
    /// outcome whose `times_s` is not a list): an error naming the field, with the start of the
    /// line. Never read as anything else.
    pub fn unreadable(line: &str, e: &JsonError) -> Self {
        Self::failed(
            WorkerStatus::Error,
            format!(
                "the worker sent an unreadable line ({e}): {}",
                gpufleet_kernels::prefix(line, 200)
            ),
        )
    }

    /// Maps a backend error to the status it stands for.
    pub fn from_backend_error(e: &BackendError) -> Self {
        let status = match e {
            BackendError::Unsupported { .. } => WorkerStatus::Unsupported,
            BackendError::Compile { .. } => WorkerStatus::CompileError,
            BackendError::OutOfMemory { .. } => WorkerStatus::OutOfMemory,
            BackendError::Unavailable { .. } | BackendError::Driver { .. } => WorkerStatus::Error,
        };
        Self::failed(status, e.to_string())
    }
}

/// A line the worker writes on its protocol channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WorkerEvent {
    Progress {
        phase: String,
        message: String,
        iterations: u32,
    },
    /// The first timed iteration starts (CLOCK_MONOTONIC ns).
    WindowBegin {
        monotonic_ns: u64,
    },
    /// The last timed iteration ended.
    WindowEnd {
        monotonic_ns: u64,
    },
    Outcome(WorkerOutcome),
}

impl WorkerEvent {
    /// Reads one line of the worker's protocol channel.
    ///
    /// # Errors
    /// [`JsonError`] naming the field at fault. serde cannot follow a field into an internally
    /// tagged enum, so an outcome that does not parse is read again as a [`WorkerOutcome`] to
    /// name it (`times_s`, `validation.passed`).
    pub fn decode(line: &str) -> Result<WorkerEvent, JsonError> {
        gpufleet_kernels::from_json_str(line).map_err(|e| {
            let Ok(serde_json::Value::Object(mut body)) = serde_json::from_str(line) else {
                return e;
            };
            match body.remove("event") {
                Some(tag) if tag == "outcome" => {
                    let body = serde_json::Value::Object(body);
                    gpufleet_kernels::from_json_value::<WorkerOutcome>(&body)
                        .err()
                        .unwrap_or(e)
                }
                _ => e,
            }
        })
    }
}

/// What `worker discover <backend>` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiscoveryReply {
    Devices(Vec<DeviceInfo>),
    Unavailable(BackendError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_as_single_json_lines() {
        let events = vec![
            WorkerEvent::Progress {
                phase: "warmup".into(),
                message: "x".into(),
                iterations: 2,
            },
            WorkerEvent::WindowBegin { monotonic_ns: 5 },
            WorkerEvent::Outcome(WorkerOutcome::failed(WorkerStatus::Unsupported, "no f16")),
        ];
        for e in events {
            let line = serde_json::to_string(&e).unwrap();
            assert!(!line.contains('\n'));
            assert_eq!(serde_json::from_str::<WorkerEvent>(&line).unwrap(), e);
        }
    }

    #[test]
    fn an_outcome_with_a_wrong_field_type_is_an_error_naming_the_field() {
        let good = WorkerEvent::Outcome(WorkerOutcome::failed(WorkerStatus::Ok, "fine"));
        let mut v = serde_json::to_value(&good).unwrap();
        v["times_s"] = serde_json::json!("fast");
        let line = v.to_string();
        let e = WorkerEvent::decode(&line).unwrap_err();
        assert_eq!(e.field, "times_s", "{e}");
        let o = WorkerOutcome::unreadable(&line, &e);
        assert_eq!(o.status, WorkerStatus::Error);
        assert!(
            o.message
                .starts_with("the worker sent an unreadable line (")
                && o.message.contains("times_s"),
            "{}",
            o.message
        );
        // A job with a setting of the wrong type names it too.
        let e = gpufleet_kernels::from_json_str::<WorkerJob>(r#"{"backend": 1}"#).unwrap_err();
        assert_eq!(e.field, "backend");
    }

    #[test]
    fn backend_errors_map_to_statuses() {
        let e = BackendError::Compile {
            backend: "b".into(),
            kernel: "k".into(),
            log: "l".into(),
        };
        assert_eq!(
            WorkerOutcome::from_backend_error(&e).status,
            WorkerStatus::CompileError
        );
        let e = BackendError::Unsupported {
            backend: "b".into(),
            what: "x".into(),
        };
        assert_eq!(
            WorkerOutcome::from_backend_error(&e).status,
            WorkerStatus::Unsupported
        );
        let e = BackendError::OutOfMemory {
            backend: "cpu".into(),
            message: "output of 9 f32".into(),
        };
        assert_eq!(
            WorkerOutcome::from_backend_error(&e).status,
            WorkerStatus::OutOfMemory
        );
    }
}
