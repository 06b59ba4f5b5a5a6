//! The service's errors and their one mapping to gRPC status codes.

use crate::env::EnvError;
use gpufleet_kernels::SpecError;

/// Why the agent refused a request. Runs that start and then fail are not
/// errors: they are results with a status.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("field {field}: {message}")]
    InvalidArgument {
        field: &'static str,
        message: String,
    },
    #[error("field {field}: {source}", field = .source.field())]
    Spec {
        #[from]
        source: SpecError,
    },
    #[error("field env: {0}")]
    Env(#[from] EnvError),
    #[error("device {device} has {capacity} runs waiting already (the queue limit); retry later")]
    QueueFull { device: String, capacity: usize },
    #[error("run id {run_id} is already queued or running")]
    DuplicateRun { run_id: String },
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<AgentError> for tonic::Status {
    fn from(e: AgentError) -> tonic::Status {
        let msg = e.to_string();
        match e {
            AgentError::InvalidArgument { .. } | AgentError::Spec { .. } | AgentError::Env(_) => {
                tonic::Status::invalid_argument(msg)
            }
            AgentError::QueueFull { .. } => tonic::Status::resource_exhausted(msg),
            AgentError::DuplicateRun { .. } => tonic::Status::already_exists(msg),
            AgentError::Internal(_) => tonic::Status::internal(msg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        let s: tonic::Status = AgentError::QueueFull {
            device: "cpu:0".into(),
            capacity: 2,
        }
        .into();
        assert_eq!(s.code(), tonic::Code::ResourceExhausted);
        let s: tonic::Status = AgentError::InvalidArgument {
            field: "device_id",
            message: "x".into(),
        }
        .into();
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
        assert!(s.message().contains("device_id"));
        let s: tonic::Status = AgentError::Env(EnvError::NotAllowed { key: "PATH".into() }).into();
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
        assert!(s.message().contains("PATH"));
    }
}
