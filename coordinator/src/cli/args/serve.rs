//! `gpufleet serve`'s options: listeners, schedules, regression detection, retention, TLS and the
//! API's tokens.

use super::db::parse_age;
use crate::regression::detect::DetectConfig;
use clap::Args;
use gpufleet_proto::addr::parse_host_port;
use std::net::SocketAddr;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address of the HTTP endpoints (HOST:PORT; HOST may be a name such as localhost). Prints
    /// `listening on ADDR` once bound.
    #[arg(
        long,
        default_value = "127.0.0.1:8787",
        env = "GPUFLEET_LISTEN",
        value_parser = parse_host_port
    )]
    pub listen: SocketAddr,
    /// Seconds between schedule checks.
    #[arg(long, default_value_t = 15.0)]
    pub tick_s: f64,
    /// Do not run slots missed while the coordinator was down (default: the
    /// latest missed slot of each schedule runs once at start).
    #[arg(long)]
    pub no_catch_up: bool,
    /// Regression baseline: the last N ok, non-noisy results. The defaults of these knobs were
    /// chosen by simulation (docs/architecture.md): at ±4% night-to-night jitter about 0.5% of
    /// 100-night series get a false alert and 98% of 10% steps are confirmed within two nights.
    #[arg(long, default_value_t = DetectConfig::DEFAULT.baseline_n)]
    pub baseline: usize,
    /// Smallest change flagged, percent.
    #[arg(long, default_value_t = DetectConfig::DEFAULT.threshold_pct)]
    pub threshold_pct: f64,
    /// Robust spreads a change must exceed on a noisy baseline.
    #[arg(long, default_value_t = DetectConfig::DEFAULT.k)]
    pub k: f64,
    /// Let noisy results (robust spread above 12.5% or an interval wider than their target) into regression
    /// baselines; by default they are left out.
    #[arg(long)]
    pub include_noisy: bool,
    /// Once a day, drop the raw iteration times of results older than this (90d, 12w): every
    /// summary stays, and so does whatever an alert or a baseline refers to (see `db compact`).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub retain_samples: Option<f64>,
    /// Once a day, drop the power traces of results older than this (30d); energy figures stay.
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub retain_power: Option<f64>,
    /// Address of the Fleet gRPC service that dial-in agents attach to
    /// (`gpufleet-agent --connect`). Not served unless given. Prints
    /// `fleet listening on ADDR` once bound.
    #[arg(long, env = "GPUFLEET_FLEET_LISTEN", value_parser = parse_host_port)]
    pub fleet_listen: Option<SocketAddr>,
    /// Samples a second per channel that keep serve's power gauges in /metrics and the agent
    /// pages fresh, from every connected agent (dial-in over its link, direct over its
    /// StreamPower); 0 asks for power only while someone watches (`gpufleet power`, an agent
    /// page).
    #[arg(long, default_value_t = 1.0, env = "GPUFLEET_POWER_METRICS_HZ", value_parser = parse_metrics_hz)]
    pub power_metrics_hz: f64,
    /// Seconds a run waits for its dial-in agent to come back after the link
    /// dropped before the campaign's retry rule applies.
    #[arg(long, default_value_t = 600.0, env = "GPUFLEET_GRACE_S")]
    pub grace_s: f64,
    /// Seconds a stop (SIGTERM, SIGINT) may take: the serve stops accepting, sends its
    /// dial-in agents to the next coordinator of their lists, hands its campaigns back
    /// (`interrupted`, for the next serve to resume) and exits, at the latest after this,
    /// whatever is left (a half-sent request, a database that does not answer).
    #[arg(long, default_value_t = 10.0, env = "GPUFLEET_STOP_TIMEOUT_S")]
    pub stop_timeout_s: f64,
    /// TLS certificate (PEM, chain) for both listeners. Required beyond
    /// loopback (or --tls-self-signed).
    #[arg(
        long,
        env = "GPUFLEET_TLS_CERT",
        requires = "tls_key",
        conflicts_with = "tls_self_signed"
    )]
    pub tls_cert: Option<std::path::PathBuf>,
    /// TLS private key (PEM) for --tls-cert.
    #[arg(long, env = "GPUFLEET_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Make a CA and a server certificate in DIR the first time (kept and
    /// reused after), serve TLS with them and print the certificate's
    /// SHA-256 for agents' --pin-sha256 (or give them DIR/ca.crt as
    /// --ca-cert).
    #[arg(long, env = "GPUFLEET_TLS_SELF_SIGNED", value_name = "DIR")]
    pub tls_self_signed: Option<std::path::PathBuf>,
    /// Extra host name or IP address the self-signed certificate is valid
    /// for (repeatable; localhost, 127.0.0.1, ::1, the host name and the
    /// listen addresses are always in it).
    #[arg(long = "tls-san", value_name = "NAME")]
    pub tls_sans: Vec<String>,
    /// Token for reading the HTTP API (GET). Required, with --admin-token,
    /// when --listen is beyond loopback.
    #[arg(long, env = "GPUFLEET_READ_TOKEN", hide_env_values = true)]
    pub read_token: Option<String>,
    /// Token for everything on the HTTP API (reads, campaigns, enrolment).
    #[arg(long, env = "GPUFLEET_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
}

/// `--power-metrics-hz`: 0 (off) to 20 samples a second.
fn parse_metrics_hz(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=20.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "{} is not a rate from 0 (off) to 20 samples a second",
            gpufleet_kernels::quote(s)
        )),
    }
}
