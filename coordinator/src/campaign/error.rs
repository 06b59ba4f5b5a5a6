//! Why a campaign stops before any job runs. Below every campaign file that raises it (`plan.rs`
//! when it resolves runs, `prepare.rs` when it reaches agents and stores jobs, `run.rs`,
//! `handoff.rs`), so none of them imports another for its error type.

use crate::store::StoreError;
use gpufleet_kernels::{SettingError, SpecError};

/// Errors that stop a campaign before any job runs.
#[derive(Debug, thiserror::Error)]
pub enum CampaignError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A run's spec is invalid (see [`resolve_runs`](super::plan::resolve_runs)).
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// A run's measurement settings (its suite's, with the command line's overrides) are outside
    /// their bounds.
    #[error("{kernel}: {source}")]
    Settings {
        /// The run's kernel.
        kernel: String,
        /// The field and the bound it misses.
        source: SettingError,
    },
    /// An environment override no agent would accept (`LD_PRELOAD`, `PATH`...).
    #[error("env: {0}")]
    Env(String),
    #[error("no agent could be reached: {0}")]
    NoAgent(String),
    #[error("nothing to run: {0}")]
    NothingToRun(String),
}
