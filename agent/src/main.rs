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
        return power_report(&config.power, seconds, json).await;
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

    if !cli.listen.ip().is_loopback() && config.token.is_none() {
        anyhow::bail!(
            "--listen {} is not a loopback address: set --token (or GPUFLEET_AGENT_TOKEN) so only your coordinator can run kernels here",
            cli.listen
        );
    }
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

/// `gpufleet-agent power`: samples for a while and reports.
async fn power_report(
    config: &gpufleet_agent::power::PowerConfig,
    seconds: f64,
    json: bool,
) -> anyhow::Result<()> {
    use gpufleet_agent::service::PowerState;
    if !(seconds > 0.0 && seconds <= 3600.0) {
        anyhow::bail!("--seconds {seconds} is outside (0, 3600]");
    }
    let state = PowerState::start(config).await;
    let sampler = &state.sampler;
    if !json {
        for u in &state.unavailable {
            println!("{:<13} unavailable: {}", u.name, u.reason);
        }
        if sampler.channels().is_empty() {
            println!("no power channel to sample");
        }
    }
    let start = gpufleet_agent::isolation::monotonic_ns();
    let mut feed = sampler.subscribe();
    let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(seconds);
    let mut last_print = 0u64;
    while let Ok(r) = tokio::time::timeout_at(deadline, feed.recv()).await {
        let Ok(s) = r else { continue };
        // One line per channel per second at most.
        if !json && (s.monotonic_ns - last_print > 1_000_000_000 || s.channel > 0) {
            last_print = s.monotonic_ns;
            let c = &sampler.channels()[s.channel];
            let fmt =
                |v: Option<f64>, unit: &str| v.map_or("-".into(), |v| format!("{v:.2} {unit}"));
            println!(
                "{:>8.3} s  {:<13} {:<13} {:>11}  energy {:>12}  temp {:>9}",
                (s.monotonic_ns - start) as f64 * 1e-9,
                c.source,
                if c.channel.pci_bus_id.is_empty() {
                    "host"
                } else {
                    &c.channel.pci_bus_id
                },
                fmt(s.reading.watts, "W"),
                fmt(s.reading.energy_j, "J"),
                fmt(s.reading.temperature_c, "C"),
            );
        }
    }
    let cost = sampler.cost();
    let channels: Vec<serde_json::Value> = sampler
        .channels()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let st = sampler.status(i);
            serde_json::json!({
                "source": c.source,
                "pci_bus_id": c.channel.pci_bus_id,
                "scope": c.channel.scope.name(),
                "label": c.channel.label,
                "energy_counter": c.channel.energy_counter,
                "samples": st.samples,
                "measured_period_s": st.measured_period.map(|p| p.as_secs_f64()),
                "nominal_period_s": c.channel.nominal_period.as_secs_f64(),
                "last_error": st.last_error,
                "stopped": st.stopped,
            })
        })
        .collect();
    if json {
        let unavailable: Vec<serde_json::Value> = state
            .unavailable
            .iter()
            .map(|u| serde_json::json!({"source": u.name, "reason": u.reason}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "rate_hz": sampler.rate_hz(),
                "seconds": seconds,
                "channels": channels,
                "unavailable": unavailable,
                "sampler_cost": {
                    "ticks": cost.ticks,
                    "cpu_s": cost.cpu_s,
                    "wall_s": cost.wall_s,
                    "cpu_pct_of_one_core": cost.cpu_pct(),
                },
            }))?
        );
    } else {
        for c in &channels {
            println!("{c}");
        }
        println!(
            "sampler: {} ticks at {} Hz in {:.1} s, {:.3} s CPU = {:.3}% of one core",
            cost.ticks,
            sampler.rate_hz(),
            cost.wall_s,
            cost.cpu_s,
            cost.cpu_pct()
        );
    }
    Ok(())
}
