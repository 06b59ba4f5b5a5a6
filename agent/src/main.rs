//! `gpufleet-agent`: parses the command line and calls the library.

mod cli;

use anyhow::Context;
use clap::Parser;
use gpufleet_agent::isolation::{WorkerCommand, child};
use gpufleet_agent::{AgentConfig, AgentCore};
use std::time::Duration;

fn main() {
    if let Err(e) = real_main() {
        eprintln!("error: {e:#}");
        std::process::exit(2);
    }
}

fn real_main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    // Worker processes re-enter this binary before any parsing or runtime.
    if args.get(1).map(String::as_str) == Some("worker") {
        std::process::exit(child::main(&args[2..]));
    }
    let cli = cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(run(cli))
}

async fn run(cli: cli::Cli) -> anyhow::Result<()> {
    let mut worker = WorkerCommand::current_exe(&["worker"])?;
    if let Some(dir) = &cli.cache_dir {
        worker
            .env
            .push(("GPUFLEET_CACHE_DIR".into(), dir.display().to_string()));
    }
    let mut config = AgentConfig::new(worker);
    config.enable_debug_kernels = cli.enable_debug_kernels;
    config.queue_capacity = cli.queue_capacity;
    config.token = cli.token.filter(|t| !t.is_empty());
    config.discovery_timeout = Duration::from_secs_f64(cli.discovery_timeout_s.max(0.1));
    config.power = cli.power.config();

    if let Some(cli::Command::Power { seconds, json }) = cli.command {
        if !(seconds > 0.0 && seconds <= 3600.0) {
            anyhow::bail!("--seconds {seconds} is outside (0, 3600]");
        }
        gpufleet_agent::power::report::report(
            &config.power,
            seconds,
            json,
            &mut std::io::stdout().lock(),
        )
        .await?;
        return Ok(());
    }

    if let Some(cli::Command::Describe { json }) = cli.command {
        let core = AgentCore::start(config).await;
        let info = core.describe();
        if json {
            println!("{}", serde_json::to_string_pretty(&info)?);
        } else {
            print!("{}", gpufleet_proto::display::agent_info_text(&info));
        }
        return Ok(());
    }

    gpufleet_agent::service::auth::check_listen_token(cli.listen, config.token.as_deref())
        .map_err(anyhow::Error::msg)?;
    let listener = tokio::net::TcpListener::bind(cli.listen)
        .await
        .with_context(|| format!("binding {}", cli.listen))?;
    let core = AgentCore::start(config).await;
    for b in &core.inventory.backends {
        if b.available {
            tracing::info!(backend = %b.name, devices = b.devices.len(), "backend available");
        } else {
            tracing::warn!(backend = %b.name, reason = %b.reason, "backend unavailable");
        }
    }
    tracing::info!("gpufleet-agent listening on {}", listener.local_addr()?);
    gpufleet_agent::serve(listener, shutdown_signal(), core).await?;
    tracing::info!("gpufleet-agent stopped");
    Ok(())
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing the SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
