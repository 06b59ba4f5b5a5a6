//! `gpufleet serve`: binds the HTTP API, runs the schedule daemon until SIGINT/SIGTERM, stops
//! gracefully.

use super::args::ServeArgs;
use crate::campaign::progress::LogReporter;
use crate::db::Db;
use crate::fleet::Hub;
use crate::fleet::link::links;
use crate::fleet::service::serve_fleet;
use crate::regression::detect::DetectConfig;
use crate::schedule::{Daemon, DaemonConfig, run_until_stopped};
use anyhow::{Context, bail};
use std::io::Write;
use std::sync::Arc;

/// `serve`: the daemon loop, HTTP endpoints, graceful stop.
///
/// # Errors
/// Bad arguments, a listen address that cannot be bound, a store that cannot be read.
pub async fn serve(db: &Db, args: ServeArgs) -> anyhow::Result<i32> {
    let detect = DetectConfig {
        baseline_n: args.baseline,
        threshold_pct: args.threshold_pct,
        k: args.k,
        ..Default::default()
    };
    detect
        .validate()
        .map_err(|e| anyhow::anyhow!("--baseline/--threshold-pct/--k: {e}"))?;
    if !(args.tick_s.is_finite() && args.tick_s > 0.0) {
        bail!("--tick-s must be a positive number of seconds");
    }
    let cfg = DaemonConfig {
        catch_up: !args.no_catch_up,
        detect,
        ..Default::default()
    };
    if !(args.grace_s.is_finite() && args.grace_s >= 0.0) {
        bail!("--grace-s must be a non-negative number of seconds");
    }
    let daemon = Daemon::new(db.clone(), cfg, Arc::new(LogReporter));
    let hub = Hub::new(
        db.clone(),
        daemon.owner().to_string(),
        std::time::Duration::from_secs_f64(args.grace_s),
    );
    let daemon = daemon.with_connect(links(hub.clone()));
    let fleet_listener = match args.fleet_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("--fleet-listen {addr}: cannot bind"))?,
        ),
        None => None,
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("--listen {}: cannot bind", args.listen))?;
    println!("listening on {}", listener.local_addr()?);
    if let Some(l) = &fleet_listener {
        println!("fleet listening on {}", l.local_addr()?);
    }
    std::io::stdout().flush()?;
    eprintln!(
        "gpufleet serve: owner {}, {} schedule(s), database {}",
        daemon.owner(),
        db.with(|s| s.schedules())?.len(),
        db.with(|s| s.path().display().to_string())
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let fleet = fleet_listener.map(|listener| {
        let mut rx = stop_rx.clone();
        let (hub, seen) = (hub.clone(), tokio::spawn(hub.clone().keep_seen()));
        tokio::spawn(async move {
            let stop = async move {
                let _ = rx.wait_for(|s| *s).await;
            };
            let r = serve_fleet(listener, None, hub, stop).await;
            seen.abort();
            r
        })
    });
    let http = {
        let mut rx = stop_rx.clone();
        let app = crate::http::router(daemon.clone());
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = rx.wait_for(|s| *s).await;
                })
                .await
        })
    };
    let signals = tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing the SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => eprintln!("SIGINT: stopping"),
            _ = term.recv() => eprintln!("SIGTERM: stopping"),
        }
        let _ = stop_tx.send(true);
    });
    let tick = std::time::Duration::from_secs_f64(args.tick_s);
    let released = run_until_stopped(&daemon, tick, stop_rx).await?;
    if !released.is_empty() {
        eprintln!("campaigns {released:?} interrupted; the next `gpufleet serve` resumes them");
    }
    signals.abort();
    let _ = http.await;
    if let Some(fleet) = fleet
        && let Ok(Err(e)) = fleet.await
    {
        eprintln!("fleet listener: {e}");
    }
    Ok(0)
}
