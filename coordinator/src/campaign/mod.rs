//! Campaigns: a suite × a set of agents and devices, planned into jobs, stored, executed, each
//! result stored in its own transaction as it arrives.
//!
//! | file | part |
//! | --- | --- |
//! | `error.rs` | why a campaign stops before any job runs ([`CampaignError`]) |
//! | `selection.rs` | what a campaign narrows and overrides ([`Selection`], the [`CampaignOptions`] a schedule keeps too) |
//! | `request.rs` | what to run ([`CampaignRequest`]) and its stored form ([`StoredRequest`]) |
//! | `plan.rs` | runs validated and their settings resolved once ([`resolve_runs`](plan::resolve_runs)), then suite × agents × devices → jobs (pure) |
//! | `prepare.rs` | describe the agents, plan, store the devices and queued jobs |
//! | `execute.rs` | run stored jobs over [`AgentLink`](crate::link::AgentLink)s: which jobs this process claims, workers per device, lost agents |
//! | `job.rs` | one job: its attempts and retries, its result stored, typed failures ([`JobFailure`]) |
//! | `owner.rs` | which process owns a campaign, its heartbeat |
//! | `run.rs` | the whole campaign in one call ([`run_campaign`]) |
//! | `handoff.rs` | a campaign with dial-in agents handed to the running serve and followed |
//! | `progress.rs` | campaign events to the terminal or the log |
//!
//! Failure handling: a job whose agent cannot be reached is retried a bounded number of times with
//! a growing pause; after that the job gets an `error` result ("agent unreachable: ...") with
//! [`JobFailure::AgentUnreachable`] and the agent is marked lost, so its remaining jobs fail fast
//! while other agents' jobs carry on. The failure enum, not the message, decides the job's and the
//! campaign's state.

pub mod error;
pub mod execute;
pub mod handoff;
pub mod job;
pub mod owner;
pub mod plan;
pub mod prepare;
pub mod progress;
pub mod request;
pub mod run;
pub mod selection;

#[cfg(test)]
mod tests;

pub use self::error::CampaignError;
pub use self::execute::{Executor, execute_campaign, finish_campaign};
pub use self::job::{JobFailure, JobOutcome};
pub use self::owner::{HEARTBEAT, owner_id, owner_is_dead};
pub use self::prepare::{Planned, device_record, plan_into, resolve_and_plan_into};
pub use self::request::{CampaignRequest, RetryPolicy, StoredRequest};
pub use self::run::{CampaignOutcome, run_campaign, run_campaign_with};
pub use self::selection::{CampaignOptions, EnvSet, Selection};
