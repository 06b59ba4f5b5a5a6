//! Names of the wire enums as lower-case words, one spelling for every part.

use crate::v1::{RunMode, RunStatus};

impl RunStatus {
    /// The status as stored and printed: `ok`, `invalid`, `compile_error`, ...
    pub fn name(self) -> &'static str {
        match self {
            RunStatus::Unspecified => "unspecified",
            RunStatus::Ok => "ok",
            RunStatus::Invalid => "invalid",
            RunStatus::CompileError => "compile_error",
            RunStatus::Unsupported => "unsupported",
            RunStatus::Crashed => "crashed",
            RunStatus::TimedOut => "timed_out",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Error => "error",
            RunStatus::OutOfMemory => "out_of_memory",
            RunStatus::Unreachable => "unreachable",
        }
    }

    /// Parses a name produced by [`RunStatus::name`].
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.name() == s)
    }

    /// Parses a status name given at an edge (a results filter), naming the known ones when it is
    /// none of them.
    ///
    /// # Errors
    /// `unknown status "x" (known: ok, invalid, ...)`.
    pub fn parse(s: &str) -> Result<Self, String> {
        Self::from_name(s).ok_or_else(|| {
            let known: Vec<&str> = Self::ALL.iter().map(|v| v.name()).collect();
            format!("unknown status {s:?} (known: {})", known.join(", "))
        })
    }

    /// Every status but `Unspecified`.
    pub const ALL: [RunStatus; 10] = [
        RunStatus::Ok,
        RunStatus::Invalid,
        RunStatus::CompileError,
        RunStatus::Unsupported,
        RunStatus::Crashed,
        RunStatus::TimedOut,
        RunStatus::Cancelled,
        RunStatus::Error,
        RunStatus::OutOfMemory,
        RunStatus::Unreachable,
    ];
}

impl RunMode {
    /// `compute_only` (also for `Unspecified`, the default) or `with_transfers`, for display of stored
    /// specs; requests are parsed by `gpufleet_kernels::Mode`, never from this name.
    pub fn name(self) -> &'static str {
        match self {
            RunMode::Unspecified | RunMode::ComputeOnly => "compute_only",
            RunMode::WithTransfers => "with_transfers",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_round_trip() {
        for s in RunStatus::ALL {
            assert_eq!(RunStatus::from_name(s.name()), Some(s));
        }
        assert_eq!(RunStatus::from_name("nope"), None);
        assert_eq!(
            RunStatus::from_name("out_of_memory"),
            Some(RunStatus::OutOfMemory)
        );
        let err = RunStatus::parse("oom").unwrap_err();
        assert!(
            err.contains("\"oom\"") && err.contains("timed_out, cancelled, error, out_of_memory")
        );
    }

    #[test]
    fn mode_names() {
        assert_eq!(RunMode::WithTransfers.name(), "with_transfers");
        assert_eq!(RunMode::Unspecified.name(), "compute_only");
    }
}
