//! The one mapping from [`AgentError`] to gRPC status codes:
//! `InvalidArgument` for bad input, `ResourceExhausted` for a full queue,
//! `AlreadyExists` for a run id in use.

use crate::error::AgentError;

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
    use crate::env::EnvError;

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
