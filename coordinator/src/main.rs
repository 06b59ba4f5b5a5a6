//! `gpufleet`: parses the command line and calls the library.

use clap::Parser;
use gpufleet_coordinator::cli::{self, Cli, Command};
use gpufleet_coordinator::db::Db;
use gpufleet_coordinator::link::grpc::is_url;
use gpufleet_coordinator::store::ServeLock;

fn main() {
    // As a container's PID 1 (the coordinator's image), an init that reaps the orphans the
    // in-process agent's workers may leave (see gpufleet_agent::init).
    #[cfg(feature = "local-agent")]
    gpufleet_agent::init::reap_orphans_if_pid1();
    gpufleet_kernels::quiet_broken_pipes();
    let args: Vec<String> = std::env::args().collect();
    // Worker processes of the demo's in-process agent re-enter here.
    #[cfg(feature = "local-agent")]
    if args.get(1).map(String::as_str) == Some("agent-worker") {
        std::process::exit(gpufleet_agent::isolation::child::main(&args[2..]));
    }
    let cli = Cli::parse_from(&args);
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        // Colours only on a terminal: a log written to a file or a pipe stays plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let code = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt.block_on(run(cli)),
        Err(e) => Err(anyhow::anyhow!("starting the async runtime: {e}")),
    };
    match code {
        Ok(c) => std::process::exit(c),
        Err(e) => {
            // Each cause once, even where an outer message already quotes the inner one.
            eprintln!("error: {}", gpufleet_kernels::error_chain(e.as_ref()));
            std::process::exit(2);
        }
    }
}

/// The database a command uses: `--db` (or `GPUFLEET_DB`); else `./gpufleet.db` where it exists,
/// or for the demo; else, on the packaged coordinator's host, its database; else
/// `./gpufleet.db`. The second member says the packaged one was chosen by default.
fn database_path(cli: &Cli) -> (std::path::PathBuf, bool) {
    let local = std::path::PathBuf::from("gpufleet.db");
    if let Some(p) = &cli.db {
        return (p.clone(), false);
    }
    let packaged = std::path::Path::new(cli::PACKAGED_STATE_DIR);
    if matches!(cli.command, Command::Demo(_)) || local.exists() || !packaged.is_dir() {
        return (local, false);
    }
    (packaged.join("gpufleet.db"), true)
}

/// Opens the database, saying how to reach the packaged coordinator's when that default cannot
/// be opened by this user.
fn open_db(path: &std::path::Path, packaged: bool, read_only: bool) -> anyhow::Result<Db> {
    let opened = if read_only {
        Db::open_read_only(path)
    } else {
        Db::open(path)
    };
    opened.map_err(|e| {
        if packaged {
            anyhow::anyhow!(
                "{e}\nthis host runs the packaged coordinator, whose database is {} (the default \
                 here, since ./gpufleet.db does not exist) and which only its gpufleet user opens: \
                 run the command as that user, `sudo -u gpufleet gpufleet ...`, or give another \
                 database with --db",
                path.display()
            )
        } else {
            e.into()
        }
    })
}

async fn run(cli: Cli) -> anyhow::Result<i32> {
    let (db_path, packaged) = database_path(&cli);
    if let Command::ServeAgent {
        listen,
        enable_debug_kernels,
        queue_capacity,
        sysfs_root,
    } = cli.command
    {
        return serve_agent(listen, enable_debug_kernels, queue_capacity, sysfs_root).await;
    }
    // Listings and comparisons only read: they work on a database the user cannot write and
    // never create one at a mistyped path.
    let read_only = matches!(
        cli.command,
        Command::Compare(_)
            | Command::Results(_)
            | Command::Campaigns { .. }
            | Command::Regressions(_)
            | Command::Outliers(_)
            | Command::Report(_)
            | Command::Describe { .. }
            | Command::Power(_)
            | Command::Agents(cli::AgentsCommand::List { .. })
            | Command::Schedule(cli::ScheduleCommand::List { .. })
            | Command::Db(cli::DbCommand::Backup { .. } | cli::DbCommand::Stats { .. })
    );
    if let Command::ExportModel(args) = &cli.command {
        return cli::model::export_model(args).map(|()| 0);
    }
    if let Command::Healthz { addr, tls_dir } = &cli.command {
        return cli::serve::healthz(*addr, tls_dir.as_deref()).await;
    }
    // A restore replaces the file; opening it as a store first would create or migrate it.
    // A copy names both its databases; --db is not one of them.
    if let Command::Db(cli::DbCommand::Copy {
        src,
        dst,
        merge,
        json,
    }) = &cli.command
    {
        return cli::db::copy(src, dst, *merge, *json);
    }
    if let Command::Db(cli::DbCommand::Restore { file, force }) = &cli.command {
        if gpufleet_coordinator::store::postgres_url(&db_path).is_some() {
            return Err(gpufleet_coordinator::store::StoreError::SqliteOnly {
                what: "`gpufleet db restore`",
                remedy: "use pg_restore, or `gpufleet db copy` from an SQLite backup",
            }
            .into());
        }
        return cli::db::restore(file, &db_path, *force);
    }
    // `serve` owns its file from before the open until it exits, so a restore cannot swap the
    // file between the two.
    let serve_lock = match &cli.command {
        Command::Serve(_) => ServeLock::acquire(&db_path)?,
        _ => None,
    };
    // A command given an agent's URL needs no registered agents, so no database file; nor does
    // a dry run.
    let by_url = match &cli.command {
        Command::Describe { agent, .. } => is_url(agent),
        Command::Power(args) => is_url(&args.agent),
        Command::Run(args) => args.dry_run,
        _ => false,
    };
    let db = if by_url {
        Db::in_memory()?
    } else {
        open_db(&db_path, packaged, read_only)?
    };
    // How long reaching an agent may take, handed to every command that dials one.
    let connect_timeout = std::time::Duration::from_secs_f64(cli.connect_timeout_s);
    match cli.command {
        Command::Demo(args) => demo(&db, &db_path, args).await,
        Command::Agents(cmd) => cli::agents::agents(&db, cmd, connect_timeout).await,
        Command::Describe { agent, json } => {
            cli::agents::describe(&db, &agent, json, connect_timeout)
                .await
                .map(|_| 0)
        }
        Command::Run(args) => cli::run::run(&db, args, connect_timeout).await,
        Command::Power(args) => cli::power::power(&db, args, connect_timeout).await,
        Command::Compare(args) => cli::results::compare(&db, args),
        Command::Results(args) => cli::results::results(&db, args).map(|_| 0),
        Command::ServeAgent { .. }
        | Command::Healthz { .. }
        | Command::ExportModel(_)
        | Command::Db(cli::DbCommand::Restore { .. } | cli::DbCommand::Copy { .. }) => {
            unreachable!("handled above")
        }
        Command::Db(cli::DbCommand::Backup { file, json }) => cli::db::backup(&db, &file, json),
        Command::Db(cli::DbCommand::Stats { json }) => cli::db::stats(&db, json),
        Command::Db(cli::DbCommand::Compact(args)) => cli::db::compact(&db, &args),
        Command::Campaigns { output } => cli::results::campaigns(&db, output).map(|_| 0),
        Command::Serve(args) => cli::serve::serve(&db, args, connect_timeout, serve_lock).await,
        Command::Schedule(cmd) => cli::schedule::schedule(&db, cmd, connect_timeout).await,
        Command::Regressions(args) => cli::schedule::regressions(&db, args),
        Command::Outliers(args) => cli::outliers::outliers(&db, args),
        Command::Report(args) => cli::results::report(&db, args).map(|_| 0),
        Command::SeedHistory {
            agents,
            nights,
            specs,
            backends,
            iterations,
            power_every,
            no_bulk,
            steps_every,
        } => {
            let cfg = gpufleet_coordinator::web::seed::SeedConfig {
                agents,
                nights,
                specs,
                backends,
                iterations,
                power_every,
                bulk: !no_bulk,
                steps_every,
                start: gpufleet_coordinator::web::seed::SeedConfig::start_for(nights),
                ..Default::default()
            };
            let summary = db.with(|s| gpufleet_coordinator::web::seed::seed_history(s, &cfg))?;
            println!("{}", serde_json::to_string(&summary)?);
            Ok(0)
        }
    }
}

#[cfg(feature = "local-agent")]
async fn demo(
    db: &Db,
    path: &std::path::Path,
    args: gpufleet_coordinator::cli::DemoArgs,
) -> anyhow::Result<i32> {
    gpufleet_coordinator::demo::demo(db, path, args).await
}

#[cfg(not(feature = "local-agent"))]
async fn demo(
    _db: &Db,
    _path: &std::path::Path,
    _args: gpufleet_coordinator::cli::DemoArgs,
) -> anyhow::Result<i32> {
    anyhow::bail!(
        "this gpufleet was built without the `local-agent` feature; start gpufleet-agent and use `gpufleet run`"
    )
}

#[cfg(feature = "local-agent")]
async fn serve_agent(
    listen: std::net::SocketAddr,
    debug: bool,
    queue_capacity: usize,
    sysfs_root: Option<std::path::PathBuf>,
) -> anyhow::Result<i32> {
    use gpufleet_agent::isolation::WorkerCommand;
    use std::io::Write;
    if !listen.ip().is_loopback() {
        anyhow::bail!(
            "serve-agent listens on loopback only; use gpufleet-agent with --token for a network agent"
        );
    }
    let mut config =
        gpufleet_agent::AgentConfig::new(WorkerCommand::current_exe(&["agent-worker"])?);
    config.enable_debug_kernels = debug;
    config.queue_capacity = queue_capacity;
    if let Some(root) = sysfs_root {
        config.power = gpufleet_agent::power::PowerConfig {
            sysfs_root: root,
            ..gpufleet_agent::power::PowerConfig::none()
        };
    }
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let core = gpufleet_agent::AgentCore::start(config).await;
    println!("listening on {}", listener.local_addr()?);
    std::io::stdout().flush()?;
    gpufleet_agent::serve(listener, std::future::pending(), core).await?;
    Ok(0)
}

#[cfg(not(feature = "local-agent"))]
async fn serve_agent(
    _: std::net::SocketAddr,
    _: bool,
    _: usize,
    _: Option<std::path::PathBuf>,
) -> anyhow::Result<i32> {
    anyhow::bail!("built without the `local-agent` feature")
}
