//! `gpufleet demo`: the whole system on one machine in one command. An
//! agent is served in-process on a loopback port (its workers are this
//! binary's hidden `agent-worker` entry), registered as `local`, and the
//! suite runs on every device of every available backend over real gRPC.

use crate::campaign::progress::CliReporter;
use crate::campaign::request::{CampaignRequest, RetryPolicy};
use crate::campaign::run::run_campaign;
use crate::campaign::selection::Selection;
use crate::cli::args::DemoArgs;
use crate::cli::results::print_outcome;
use crate::db::Db;
use anyhow::Context;
use gpufleet_agent::isolation::WorkerCommand;
use gpufleet_agent::{AgentConfig, AgentCore};
use gpufleet_kernels::Suite;
use std::path::Path;
use std::sync::Arc;

pub use crate::cli::agents::LOCAL_AGENT;

/// Runs the demo; returns the exit code (0 when every result is ok).
///
/// # Errors
/// When the local agent cannot start or the suite cannot be loaded.
pub async fn demo(db: &Db, db_path: &Path, args: DemoArgs) -> anyhow::Result<i32> {
    let suite = Suite::resolve(&args.suite)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding a loopback port")?;
    let addr = listener.local_addr()?;
    eprintln!("gpufleet demo: starting a local agent on {addr}, discovering backends…");
    let core = AgentCore::start(AgentConfig::new(WorkerCommand::current_exe(&[
        "agent-worker",
    ])?))
    .await;
    for b in &core.inventory.backends {
        if b.available {
            let ids: Vec<&str> = b.devices.iter().map(|d| d.id.as_str()).collect();
            eprintln!("  backend {:<8} available: {}", b.name, ids.join(", "));
        } else {
            eprintln!("  backend {:<8} unavailable: {}", b.name, b.reason);
        }
    }
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(gpufleet_agent::serve(
        listener,
        async {
            let _ = stop_rx.await;
        },
        core,
    ));
    let url = format!("http://{addr}");
    let agent = db
        .call(move |s| s.upsert_agent(LOCAL_AGENT, &url, None))
        .await?;
    let reporter = Arc::new(CliReporter::new());
    let req = CampaignRequest {
        suite: suite.name.clone(),
        description: format!("gpufleet demo ({} suite on the local agent)", suite.name),
        runs: suite.runs,
        agents: vec![agent],
        selection: Selection::default(),
        retry: RetryPolicy::default(),
    };
    let outcome = run_campaign(db, req, reporter.clone()).await;
    reporter.finish();
    let _ = stop_tx.send(());
    let _ = server.await;
    let outcome = outcome?;
    let code = print_outcome(db, &outcome, args.json)?;
    eprintln!(
        "results are in {} (campaign {}); try `gpufleet compare` or `gpufleet results --campaign {} --format json`",
        db_path.display(),
        outcome.campaign_id,
        outcome.campaign_id
    );
    eprintln!(
        "the agent `{LOCAL_AGENT}` stopped with the demo (its results stay); for more runs start one: \
         `gpufleet-agent --listen 127.0.0.1:50051 &`, `gpufleet agents add rig http://127.0.0.1:50051`, \
         `gpufleet run --suite smoke --agent rig`"
    );
    Ok(code)
}
