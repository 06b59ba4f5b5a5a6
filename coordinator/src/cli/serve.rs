//! `gpufleet serve`: binds the HTTP API (and, with `--fleet-listen`, the Fleet service dial-in
//! agents attach to), runs the schedule daemon until SIGINT/SIGTERM, stops gracefully.
//!
//! Exposure rules, checked before anything is bound ([`check_exposure`]): beyond loopback every
//! listener needs TLS, and the HTTP API needs a read and an admin token; tokens travel only inside
//! TLS there.

use super::args::ServeArgs;
use crate::campaign::progress::LogReporter;
use crate::campaign::request::RetryPolicy;
use crate::db::Db;
use crate::fleet::Hub;
use crate::fleet::link::links;
use crate::fleet::service::serve_fleet;
use crate::http::{ApiAuth, router_with_auth};
use crate::live::LivePower;
use crate::live::direct::follow_direct_agents;
use crate::regression::detect::DetectConfig;
use crate::schedule::{Daemon, DaemonConfig, run_until_stopped};
use crate::store::ServeLock;
use crate::tls::{ServeTls, TlsListener};
use anyhow::{Context, bail};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Refuses listeners beyond loopback without TLS, and an HTTP API beyond loopback without a read
/// and an admin token (each a real secret).
///
/// # Errors
/// A message naming the option to add.
pub fn check_exposure(args: &ServeArgs, tls: bool) -> anyhow::Result<()> {
    let beyond = |a: &SocketAddr| !a.ip().is_loopback();
    for (name, addr) in [
        ("--listen", Some(args.listen)),
        ("--fleet-listen", args.fleet_listen),
    ] {
        if let Some(addr) = addr
            && beyond(&addr)
            && !tls
        {
            bail!(
                "{name} {addr} is not a loopback address: serve TLS there (--tls-cert/--tls-key, or --tls-self-signed DIR) so tokens never cross the network in plaintext"
            );
        }
    }
    if beyond(&args.listen) {
        for (name, token) in [
            ("--read-token", &args.read_token),
            ("--admin-token", &args.admin_token),
        ] {
            let Some(token) = token else {
                bail!(
                    "--listen {} is not a loopback address: set {name} (and the other of --read-token/--admin-token) so the API is not open to the network",
                    args.listen
                );
            };
            if let Some(why) = gpufleet_kernels::weak_secret(token) {
                bail!("{name} {why}");
            }
        }
    }
    Ok(())
}

/// The serve's TLS from the arguments, if any.
fn load_tls(args: &ServeArgs) -> anyhow::Result<Option<ServeTls>> {
    let tls = match (&args.tls_cert, &args.tls_key, &args.tls_self_signed) {
        (Some(cert), Some(key), _) => ServeTls::from_files(cert, key)?,
        (_, _, Some(dir)) => {
            let mut names = args.tls_sans.clone();
            if let Ok(h) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
                names.push(h.trim().to_string());
            }
            for a in std::iter::once(args.listen).chain(args.fleet_listen) {
                if !a.ip().is_unspecified() {
                    names.push(a.ip().to_string());
                }
            }
            names.retain(|n| !n.is_empty());
            let (tls, made) = ServeTls::self_signed(dir, &names)?;
            if made {
                eprintln!(
                    "made a CA and a server certificate in {} (valid for {})",
                    dir.display(),
                    names.join(", ")
                );
            }
            tls
        }
        _ => return Ok(None),
    };
    Ok(Some(tls))
}

/// Where a client on this host reaches the HTTP API bound at `addr`: a wildcard address is
/// reached on loopback.
fn api_url(addr: SocketAddr, tls: bool) -> String {
    let ip = match addr.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    let scheme = if tls { "https" } else { "http" };
    format!("{scheme}://{}", SocketAddr::new(ip, addr.port()))
}

/// `serve`: the daemon loop, HTTP endpoints, the fleet listener, graceful stop. `lock` is the
/// database's [`ServeLock`], taken before the database was opened (`None` for an in-memory one);
/// held until this returns, it makes `gpufleet db restore` refuse while the serve runs.
///
/// # Errors
/// Bad arguments, a listen address that cannot be bound, a store that cannot be read.
pub async fn serve(
    db: &Db,
    args: ServeArgs,
    connect_timeout: Duration,
    lock: Option<ServeLock>,
) -> anyhow::Result<i32> {
    let _lock = lock;
    let detect = DetectConfig {
        baseline_n: args.baseline,
        threshold_pct: args.threshold_pct,
        k: args.k,
        include_noisy: args.include_noisy,
        ..Default::default()
    };
    detect
        .validate()
        .map_err(|e| anyhow::anyhow!("--baseline/--threshold-pct/--k: {e}"))?;
    if !(args.tick_s.is_finite() && args.tick_s > 0.0) {
        bail!("--tick-s must be a positive number of seconds");
    }
    if !(args.grace_s.is_finite() && args.grace_s >= 0.0) {
        bail!("--grace-s must be a non-negative number of seconds");
    }
    if !(args.stop_timeout_s.is_finite() && args.stop_timeout_s > 0.0) {
        bail!("--stop-timeout-s must be a positive number of seconds");
    }
    let stop_timeout = Duration::from_secs_f64(args.stop_timeout_s);
    let tls_wanted = args.tls_cert.is_some() || args.tls_self_signed.is_some();
    check_exposure(&args, tls_wanted)?;
    let tls = load_tls(&args)?;
    let cfg = DaemonConfig {
        catch_up: !args.no_catch_up,
        detect,
        retry: RetryPolicy::connecting_within(connect_timeout),
        ..Default::default()
    };
    let live = LivePower::new(args.power_metrics_hz);
    let daemon = Daemon::new(db.clone(), cfg, Arc::new(LogReporter)).with_live(live.clone());
    let hub = Hub::new(
        db.clone(),
        daemon.owner().to_string(),
        std::time::Duration::from_secs_f64(args.grace_s),
        live.clone(),
    );
    let daemon = daemon.with_connect(links(hub.clone(), connect_timeout));
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
    let bound = listener.local_addr()?;
    hub.set_api_url(api_url(bound, tls.is_some()));
    println!("listening on {bound}");
    if let Some(l) = &fleet_listener {
        println!("fleet listening on {}", l.local_addr()?);
    }
    if let Some(tls) = &tls {
        // What agents give as --pin-sha256.
        println!("tls sha256 {}", tls.fingerprint()?);
    }
    std::io::stdout().flush()?;
    eprintln!(
        "gpufleet serve: owner {}, {} schedule(s), database {}",
        daemon.owner(),
        db.with(|s| s.schedules())?.len(),
        db.with(|s| s.path().display().to_string())
    );
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let fleet = fleet_listener.map(|listener| {
        let (hub, tls) = (hub.clone(), tls.as_ref().map(ServeTls::tonic));
        let seen = tokio::spawn(hub.clone().keep_seen());
        let stop = stopped(stop_rx.clone());
        tokio::spawn(async move {
            let r = serve_fleet(listener, tls, hub, stop).await;
            seen.abort();
            r
        })
    });
    let app = router_with_auth(
        daemon.clone(),
        ApiAuth {
            read: args.read_token.clone(),
            admin: args.admin_token.clone(),
        },
    );
    let http = {
        let stop = stopped(stop_rx.clone());
        match &tls {
            Some(tls) => {
                let listener = TlsListener::new(listener, tls.acceptor()?)?;
                tokio::spawn(async move {
                    axum::serve(listener, app)
                        .with_graceful_shutdown(stop)
                        .await
                })
            }
            None => tokio::spawn(async move {
                axum::serve(listener, app)
                    .with_graceful_shutdown(stop)
                    .await
            }),
        }
    };
    let signals = {
        let hub = hub.clone();
        tokio::spawn(async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("installing the SIGTERM handler");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => eprintln!("SIGINT: stopping"),
                _ = term.recv() => eprintln!("SIGTERM: stopping"),
            }
            stop_within(stop_timeout);
            let _ = stop_tx.send(true);
            let sent = hub
                .send_all_away("this coordinator is stopping: attach to the next one of your list");
            if sent > 0 {
                eprintln!("sent {sent} dial-in agent(s) to their next coordinator");
            }
        })
    };
    let direct = tokio::spawn(follow_direct_agents(live, db.clone(), connect_timeout));
    let retention = (args.retain_samples.is_some() || args.retain_power.is_some()).then(|| {
        let (samples, power, keep_last) = (args.retain_samples, args.retain_power, args.baseline);
        tokio::spawn(retain_daily(db.clone(), samples, power, keep_last))
    });
    let tick = std::time::Duration::from_secs_f64(args.tick_s);
    let released = run_until_stopped(&daemon, tick, stop_rx).await?;
    if let Some(task) = retention {
        task.abort();
    }
    direct.abort();
    if !released.is_empty() {
        eprintln!("campaigns {released:?} interrupted; the next `gpufleet serve` resumes them");
    }
    signals.abort();
    // The listeners finish what they have in hand, for half the stop's time at most: a client
    // that sent half a request and waits does not hold the stop (`stop_within` bounds the rest).
    let drain = tokio::time::Instant::now() + stop_timeout / 2;
    if tokio::time::timeout_at(drain, http).await.is_err() {
        eprintln!("HTTP connections still open at the stop: closed");
    }
    if let Some(fleet) = fleet {
        match tokio::time::timeout_at(drain, fleet).await {
            Ok(Ok(Err(e))) => eprintln!("fleet listener: {e}"),
            Err(_) => eprintln!("fleet streams still open at the stop: closed"),
            _ => {}
        }
    }
    Ok(0)
}

/// Bounds a stop: after `limit`, the process exits (status 1) whatever it still waits for — a
/// half-sent request, a stream, a database that does not answer. A thread of its own, so a busy
/// runtime cannot hold it up.
fn stop_within(limit: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        eprintln!(
            "the stop took longer than {:.0} s (--stop-timeout-s): exiting with what was left",
            limit.as_secs_f64()
        );
        std::process::exit(1);
    });
}

/// `serve --retain-samples/--retain-power`: compacts a minute after the start, then every 24 h, on
/// a connection of its own so the API's connection keeps answering (the deletes go in short
/// transactions; see `store::compact`). Freed pages are reused, not returned: `db compact`
/// vacuums.
async fn retain_daily(db: Db, samples: Option<f64>, power: Option<f64>, keep_last: usize) {
    let mut wait = std::time::Duration::from_secs(60);
    loop {
        tokio::time::sleep(wait).await;
        wait = std::time::Duration::from_secs(86_400);
        let done = db.call(move |s| s.open_another()).await.map(|store| {
            tokio::task::spawn_blocking(move || retain_once(store, samples, power, keep_last))
        });
        let done = match done {
            Ok(task) => task.await,
            Err(e) => Ok(Err(e)),
        };
        match done {
            Ok(Ok(r)) => eprintln!(
                "retention: dropped the samples of {} and the power traces of {} results, kept {} whole, in {:.1} s",
                r.samples_dropped, r.power_dropped, r.kept, r.seconds
            ),
            Ok(Err(e)) => eprintln!("retention: {e} (next try in 24 h)"),
            Err(e) => eprintln!("retention: {e} (next try in 24 h)"),
        }
    }
}

/// One retention pass, on `store` (a connection of its own).
fn retain_once(
    mut store: crate::store::Store,
    samples: Option<f64>,
    power: Option<f64>,
    keep_last: usize,
) -> Result<crate::store::CompactReport, crate::store::StoreError> {
    let now = crate::time::now();
    let policy = crate::store::Retention {
        samples_before: samples.map(|age| now - age),
        power_before: power.map(|age| now - age),
        keep_last,
    };
    store.compact(&policy, &mut |_| {})
}

/// `healthz`: GET /healthz of the serve at `addr` (its wildcard address means this host), over TLS
/// verified by `tls_dir/ca.crt` when that exists. Exit 0 when it answers 200.
///
/// # Errors
/// No connection, a failed handshake, or an answer that is not 200, within 5 s.
pub async fn healthz(addr: SocketAddr, tls_dir: Option<&std::path::Path>) -> anyhow::Result<i32> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut addr = addr;
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let ca = tls_dir.map(|d| d.join("ca.crt")).filter(|p| p.exists());
    let ask = async {
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        let request = format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        let mut answer = Vec::new();
        match &ca {
            Some(ca) => {
                let mut config =
                    gpufleet_proto::tls::client_config(&gpufleet_proto::tls::Trust::Ca(ca.clone()))
                        .map_err(anyhow::Error::msg)?;
                // The API speaks HTTP/1.1, not the gRPC listeners' h2.
                config.alpn_protocols = vec![b"http/1.1".to_vec()];
                let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
                let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
                    .connect(name, tcp)
                    .await?;
                tls.write_all(request.as_bytes()).await?;
                tls.read_to_end(&mut answer).await?;
            }
            None => {
                let mut tcp = tcp;
                tcp.write_all(request.as_bytes()).await?;
                tcp.read_to_end(&mut answer).await?;
            }
        }
        anyhow::Ok(String::from_utf8_lossy(&answer).to_string())
    };
    let answer = tokio::time::timeout(std::time::Duration::from_secs(5), ask)
        .await
        .map_err(|_| anyhow::anyhow!("no answer from {addr} within 5 s"))??;
    let status = answer.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1) == Some("200") {
        println!("{}", answer.rsplit("\r\n\r\n").next().unwrap_or("").trim());
        Ok(0)
    } else {
        if status.is_empty() {
            eprintln!("{addr}: no HTTP answer (a TLS serve needs --tls-dir)");
        } else {
            // A 503 says what is wrong in its body (`problems`).
            eprintln!("{addr}: {status}");
            eprintln!("{}", answer.rsplit("\r\n\r\n").next().unwrap_or("").trim());
        }
        Ok(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(extra: &[&str]) -> ServeArgs {
        #[derive(Parser)]
        struct P {
            #[command(flatten)]
            a: ServeArgs,
        }
        let mut v = vec!["serve"];
        v.extend_from_slice(extra);
        P::try_parse_from(v).unwrap().a
    }

    #[test]
    fn retention_ages_parse_and_a_pass_compacts_on_its_own_connection() {
        let a = args(&["--retain-samples", "90d", "--retain-power", "2w"]);
        assert_eq!(a.retain_samples, Some(90.0 * 86_400.0));
        assert_eq!(a.retain_power, Some(14.0 * 86_400.0));
        #[derive(Parser)]
        struct P {
            #[command(flatten)]
            a: ServeArgs,
        }
        for bad in ["90", "0d", "soon"] {
            let err = P::try_parse_from(["serve", "--retain-samples", bad])
                .err()
                .unwrap()
                .to_string();
            assert!(
                err.contains("--retain-samples") && err.contains("90d"),
                "{err}"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fleet.db");
        let db = crate::db::Db::open(&path).unwrap();
        db.with(|s| {
            crate::web::seed::seed_history(
                s,
                &crate::web::seed::SeedConfig {
                    nights: 12,
                    power_every: 5,
                    regression_at: None,
                    ..Default::default()
                },
            )
        })
        .unwrap();
        // Samples older than 5 days, power older than 10: the serve's own connection stays open.
        let open = || crate::store::Store::open(&path).unwrap();
        let r = retain_once(open(), Some(5.0 * 86_400.0), Some(10.0 * 86_400.0), 3).unwrap();
        assert!(r.samples_dropped > 0 && r.power_dropped > 0, "{r:?}");
        let again = retain_once(open(), Some(5.0 * 86_400.0), Some(10.0 * 86_400.0), 3).unwrap();
        assert_eq!((again.samples_dropped, again.power_dropped), (0, 0));
        assert_eq!(db.with(|s| s.integrity_check()).unwrap(), "ok");
    }

    #[test]
    fn loopback_needs_nothing() {
        check_exposure(&args(&["--fleet-listen", "127.0.0.1:7443"]), false).unwrap();
    }

    #[test]
    fn listeners_take_a_host_name_and_localhost_is_loopback() {
        let named = args(&[
            "--listen",
            "localhost:0",
            "--fleet-listen",
            "localhost:7443",
        ]);
        assert!(named.listen.ip().is_loopback(), "{}", named.listen);
        assert_eq!(named.fleet_listen.map(|a| a.port()), Some(7443));
        check_exposure(&named, false).unwrap();
        use crate::cli::{Cli, Command};
        let cli = Cli::try_parse_from(["gpufleet", "healthz", "--addr", "localhost:8787"]).unwrap();
        let Command::Healthz { addr, .. } = cli.command else {
            panic!("{:?}", cli.command)
        };
        assert!(addr.ip().is_loopback() && addr.port() == 8787, "{addr}");
        let err = Cli::try_parse_from(["gpufleet", "serve", "--listen", "localhost"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("`localhost` is not HOST:PORT"), "{err}");
    }

    #[test]
    fn beyond_loopback_needs_tls_and_both_tokens() {
        let strong = "0123456789abcdef";
        let e = check_exposure(&args(&["--fleet-listen", "0.0.0.0:7443"]), false).unwrap_err();
        assert!(e.to_string().contains("--fleet-listen 0.0.0.0:7443"), "{e}");
        assert!(e.to_string().contains("TLS"), "{e}");
        check_exposure(&args(&["--fleet-listen", "0.0.0.0:7443"]), true).unwrap();
        let open = args(&["--listen", "0.0.0.0:8787"]);
        let e = check_exposure(&open, true).unwrap_err();
        assert!(e.to_string().contains("--read-token"), "{e}");
        let weak = args(&[
            "--listen",
            "0.0.0.0:8787",
            "--read-token",
            "x",
            "--admin-token",
            strong,
        ]);
        let e = check_exposure(&weak, true).unwrap_err();
        assert!(
            e.to_string().contains("--read-token must be at least 16"),
            "{e}"
        );
        let ok = args(&[
            "--listen",
            "0.0.0.0:8787",
            "--read-token",
            strong,
            "--admin-token",
            strong,
        ]);
        check_exposure(&ok, true).unwrap();
        assert!(
            check_exposure(&ok, false).is_err(),
            "tokens never in plaintext"
        );
    }
}
