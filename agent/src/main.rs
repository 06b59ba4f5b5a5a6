//! `gpufleet-agent`: parses the command line and calls the library.

mod cli;

use anyhow::Context;
use gpufleet_agent::config::AgentFile;
use gpufleet_agent::isolation::{WorkerCommand, child};
use gpufleet_agent::{AgentConfig, AgentCore};
use std::net::SocketAddr;
use std::time::Duration;

fn main() {
    // First, while this is the only thread: as a container's PID 1, an init that reaps orphans.
    gpufleet_agent::init::reap_orphans_if_pid1();
    gpufleet_kernels::quiet_broken_pipes();
    if let Err(e) = real_main() {
        eprintln!("error: {}", gpufleet_kernels::error_chain(e.as_ref()));
        std::process::exit(2);
    }
}

fn real_main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    // Worker processes re-enter this binary before any parsing or runtime.
    if args.get(1).map(String::as_str) == Some("worker") {
        std::process::exit(child::main(&args[2..]));
    }
    let matches = <cli::Cli as clap::CommandFactory>::command().get_matches();
    let cli =
        <cli::Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let cli = match cli.command {
        Some(cli::Command::Simulate(args)) => return simulate(*args),
        command => cli::Cli { command, ..cli },
    };
    let (cli, file) = cli.with_file(&matches)?;
    init_logging("info");
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(run(cli, file))
}

/// Logs to stderr, filtered by `RUST_LOG` or else by `default`.
fn init_logging(default: &str) {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| default.into()),
        )
        .with_writer(std::io::stderr)
        // Colours only on a terminal: a log written to a file or a pipe stays plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// `gpufleet-agent simulate` (tests and benchmarks only): takes everything from its own flags,
/// not from the agent's configuration file, and logs its own lines and warnings only, since the
/// per-link lines of thousands of agents would drown them.
fn simulate(args: cli::SimulateArgs) -> anyhow::Result<()> {
    init_logging("warn,gpufleet_agent::simulate=info");
    let cfg = args.config()?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(gpufleet_agent::simulate::simulate(cfg, shutdown_signal()))
}

async fn run(cli: cli::Cli, file: Option<AgentFile>) -> anyhow::Result<()> {
    let mut worker = WorkerCommand::current_exe(&["worker"])?;
    if let Some(dir) = &cli.cache_dir {
        // Absolute: a worker runs in a working directory of its own.
        let dir =
            std::path::absolute(dir).with_context(|| format!("--cache-dir {}", dir.display()))?;
        worker
            .env
            .push(("GPUFLEET_CACHE_DIR".into(), dir.display().to_string()));
    }
    let mut config = AgentConfig::new(worker);
    config.enable_debug_kernels = cli.enable_debug_kernels;
    config.limit_worker_memory = !cli.no_worker_memory_limit;
    config.reuse_workers = !cli.fresh_worker_per_run;
    config.queue_capacity = cli.queue_capacity;
    config.token = match &cli.token_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| token_file_error(path, cli.token_file_from.as_deref()))?
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_string(),
        ),
        None => cli.token.clone(),
    }
    .filter(|t| !t.is_empty());
    config.discovery_timeout = Duration::from_secs_f64(cli.discovery_timeout_s.max(0.1));
    config.power = cli.power.config();
    config.device_pci = cli.device_pci.iter().cloned().collect();
    if let Some(file) = file {
        config.loader = gpufleet_agent::env::LoaderPolicy {
            allowed: file.loader_allow,
            config: Some(file.path),
        };
    }

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

    let dial = match cli.connect.is_empty() {
        false => Some(dial_config(
            &cli,
            cli.connect.clone(),
            config.token.clone(),
        )?),
        true => None,
    };
    // Direct mode stays the default; with --connect it is on only when asked for.
    let listen = match (cli.listen, &dial) {
        (Some(addr), _) => Some(addr),
        (None, None) => Some(SocketAddr::from(([127, 0, 0, 1], 50051))),
        (None, Some(_)) => None,
    };
    let listener = match listen {
        Some(addr) => {
            gpufleet_agent::service::auth::check_listen_token(addr, config.token.as_deref())
                .map_err(anyhow::Error::msg)?;
            gpufleet_agent::service::auth::check_listen_tls(addr, cli.tls_cert.is_some())
                .map_err(anyhow::Error::msg)?;
            Some(
                tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("binding {addr}"))?,
            )
        }
        None => None,
    };
    let tls = match (&cli.tls_cert, &cli.tls_key) {
        (Some(cert), Some(key)) => {
            let read = |p: &std::path::Path, what: &str| {
                std::fs::read(p).with_context(|| format!("{what} {}", p.display()))
            };
            Some(tonic::transport::ServerTlsConfig::new().identity(
                tonic::transport::Identity::from_pem(
                    read(cert, "--tls-cert")?,
                    read(key, "--tls-key")?,
                ),
            ))
        }
        _ => None,
    };
    let metrics = match cli.metrics_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding --metrics-listen {addr}"))?,
        ),
        None => None,
    };
    let core = AgentCore::start(config).await;
    if let Some(l) = metrics {
        tracing::info!("metrics on http://{}/metrics", l.local_addr()?);
        tokio::spawn(gpufleet_agent::metrics::serve(l, core.clone()));
    }
    for b in &core.inventory.backends {
        if b.available {
            tracing::info!(backend = %b.name, devices = b.devices.len(), "backend available");
        } else {
            tracing::warn!(backend = %b.name, reason = %b.reason, "backend unavailable");
        }
    }
    let direct = async {
        match listener {
            Some(l) => {
                tracing::info!("gpufleet-agent listening on {}", l.local_addr()?);
                gpufleet_agent::serve_with(l, tls, shutdown_signal(), core.clone()).await?;
            }
            None => shutdown_signal().await,
        }
        anyhow::Ok(())
    };
    let dialing = async {
        match dial {
            Some(cfg) => {
                tracing::info!(name = %cfg.name, "dialing in to {}", cfg.urls.join(", then "));
                gpufleet_agent::dial::dial_in(core.clone(), cfg, shutdown_signal()).await
            }
            None => std::future::pending().await,
        }
    };
    // Either ends the agent: a signal stops both, a refused dial-in is an error.
    tokio::select! {
        r = direct => r?,
        r = dialing => r?,
    }
    tracing::info!("gpufleet-agent stopped");
    Ok(())
}

/// Where an unreadable token file was named, and who must read it: `token_file` of a config
/// file is read by the service's user, which is the one that has to be able to open it.
fn token_file_error(path: &std::path::Path, config: Option<&std::path::Path>) -> String {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let user = gpufleet_agent::host::user_name(uid).unwrap_or_else(|| format!("uid {uid}"));
    let named = match config {
        Some(c) => format!("token_file {} (from {})", path.display(), c.display()),
        None => format!("--token-file {}", path.display()),
    };
    format!(
        "{named}: this agent runs as {user}, who must be able to read it (the package's service user \
         is gpufleet: sudo chown gpufleet:gpufleet {p} && sudo chmod 600 {p})",
        p = path.display()
    )
}

/// The dial-in settings from the command line: name, token (from --token or --token-file), trust
/// and state directory.
fn dial_config(
    cli: &cli::Cli,
    urls: Vec<String>,
    token: Option<String>,
) -> anyhow::Result<gpufleet_agent::dial::DialConfig> {
    use gpufleet_agent::dial::DialConfig;
    use gpufleet_proto::tls::Trust;
    let name = cli
        .name
        .clone()
        .or_else(|| std::env::var("RUNPOD_POD_ID").ok())
        .filter(|n| !n.is_empty())
        .or_else(gpufleet_agent::host::hostname)
        .context("--name is required (no $RUNPOD_POD_ID and no host name)")?;
    let token = token.context(
        "--connect needs the enrolment token: --token, --token-file or GPUFLEET_TOKEN (from `gpufleet agents add NAME --dial-in`)",
    )?;
    let trust = match (&cli.ca_cert, &cli.pin_sha256) {
        (Some(ca), _) => Some(Trust::Ca(ca.clone())),
        (None, Some(pin)) => Some(Trust::Pin(pin.clone())),
        (None, None) => None,
    };
    let state_dir = cli.state_dir.clone().unwrap_or_else(default_state_dir);
    if !(cli.max_backoff_s.is_finite() && cli.max_backoff_s >= 0.5) {
        anyhow::bail!("--max-backoff-s must be at least 0.5");
    }
    Ok(DialConfig {
        urls,
        name,
        token,
        state_dir,
        trust,
        backoff_min: Duration::from_millis(500),
        backoff_max: Duration::from_secs_f64(cli.max_backoff_s),
    })
}

/// `$XDG_STATE_HOME/gpufleet`, else `~/.local/state/gpufleet`.
fn default_state_dir() -> std::path::PathBuf {
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return std::path::PathBuf::from(d).join("gpufleet");
    }
    match std::env::var_os("HOME") {
        Some(h) => std::path::PathBuf::from(h).join(".local/state/gpufleet"),
        None => std::env::temp_dir().join("gpufleet-state"),
    }
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing the SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
