//! The one mapping from [`AgentError`] to gRPC status codes:
//! `InvalidArgument` for bad input (a run too large for the host's memory
//! included: retrying it soon would not help, unlike a full queue),
//! `ResourceExhausted` for a full queue, `AlreadyExists` for a run id in use.

use crate::error::AgentError;

/// Most bytes of a status message: far below what gRPC metadata allows, so an error is always
/// delivered as itself (inputs are quoted short at their source; this is the backstop).
pub const MAX_STATUS_MESSAGE_BYTES: usize = 2048;

impl From<AgentError> for tonic::Status {
    fn from(e: AgentError) -> tonic::Status {
        let mut msg = e.to_string();
        if msg.len() > MAX_STATUS_MESSAGE_BYTES {
            msg = format!(
                "{}…",
                gpufleet_kernels::prefix(&msg, MAX_STATUS_MESSAGE_BYTES)
            );
        }
        match e {
            AgentError::InvalidArgument { .. }
            | AgentError::Spec { .. }
            | AgentError::Env(_)
            | AgentError::HostMemory(_) => tonic::Status::invalid_argument(msg),
            AgentError::QueueFull { .. } => tonic::Status::resource_exhausted(msg),
            AgentError::DuplicateRun { .. } => tonic::Status::already_exists(msg),
            AgentError::NoPowerSources => tonic::Status::failed_precondition(msg),
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
        let s: tonic::Status = AgentError::HostMemory(crate::host::memory::HostMemoryShortage {
            what: "vec_add".into(),
            needed: 24 << 30,
            available: 20 << 30,
            why: "MemAvailable".into(),
        })
        .into();
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
        assert!(
            s.message()
                .starts_with("field params: vec_add needs about 24.0 GiB")
        );
    }

    #[test]
    fn long_messages_are_cut_to_the_bound() {
        let s: tonic::Status = AgentError::Internal("é".repeat(5000)).into();
        assert!(s.message().len() <= MAX_STATUS_MESSAGE_BYTES + '…'.len_utf8());
        assert!(s.message().ends_with('…'));
    }
}
