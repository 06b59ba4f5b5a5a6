//! The allowlist for per-run environment overrides: [`gpufleet_kernels::env`], shared with the
//! coordinator, which checks suites and `--env` before it makes a campaign.

pub use gpufleet_kernels::env::*;
