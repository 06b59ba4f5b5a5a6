//! `agents add|list|rm` and `describe`.

use super::args::AgentsCommand;
use crate::db::Db;
use crate::fleet::attachment::attached;
use crate::link::grpc::AgentAddr;
use crate::store::{AgentKind, AgentRow, token_hash};
use crate::table::{Format, Table};
use crate::time::ago;
use anyhow::{Context, bail};
use std::time::Duration;

/// `agents add|list|rm`. Returns the exit code: 1 when `list --check` found an agent unreachable
/// (within `connect_timeout`).
pub async fn agents(db: &Db, cmd: AgentsCommand, connect_timeout: Duration) -> anyhow::Result<i32> {
    match cmd {
        AgentsCommand::Add {
            name,
            url,
            token,
            dial_in,
            connect,
            token_out,
            json,
            pin_sha256,
            ca_cert,
        } => {
            if dial_in {
                let opts = Enrol {
                    given: token,
                    connect,
                    token_out,
                    json,
                };
                enrol(db, &name, opts)?;
                return Ok(0);
            }
            let url = url.unwrap_or_default();
            let trust = trust_of(&url, pin_sha256, ca_cert)?;
            let row = db.with(|s| -> Result<_, crate::store::StoreError> {
                let row = s.add_agent(&name, &url, token.as_deref())?;
                s.set_agent_tls(row.id, trust.0.as_deref(), trust.1.as_deref())?;
                Ok(row)
            })?;
            println!("added agent {} at {}", row.name, row.url);
        }
        AgentsCommand::List { check, output } => {
            return list(db, check, output, connect_timeout).await;
        }
        AgentsCommand::Rm { name } => {
            if db.with(|s| s.remove_agent(&name))? {
                println!(
                    "removed agent {name} (its results are kept; a dial-in agent's token no longer attaches)"
                );
            } else {
                bail!("no agent named {name}");
            }
        }
    }
    Ok(0)
}

/// The pin (normalised) or CA (PEM, checked) of an https agent; refused for http.
fn trust_of(
    url: &str,
    pin: Option<String>,
    ca: Option<std::path::PathBuf>,
) -> anyhow::Result<(Option<String>, Option<String>)> {
    if (pin.is_some() || ca.is_some()) && !url.starts_with("https://") {
        bail!("--pin-sha256 and --ca-cert are for https:// agents");
    }
    let pin = pin
        .map(|p| gpufleet_proto::tls::normalize_pin(&p))
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let ca = match ca {
        Some(path) => {
            let pem = std::fs::read_to_string(&path)
                .map_err(|e| anyhow::anyhow!("--ca-cert {}: {e}", path.display()))?;
            gpufleet_proto::tls::roots(pem.as_bytes())
                .map_err(|e| anyhow::anyhow!("--ca-cert {}: {e}", path.display()))?;
            Some(pem)
        }
        None => None,
    };
    Ok((pin, ca))
}

/// Whether an agent can be reached now: a direct agent answers Describe (its device count), a
/// dial-in agent is attached to a live serve. The error says why not.
async fn reach(a: &AgentRow, now: f64, connect_timeout: Duration) -> Result<String, String> {
    match a.kind {
        AgentKind::Direct => AgentAddr::of(a, connect_timeout)
            .describe()
            .await
            .map(|i| format!("ok ({} devices)", i.devices.len()))
            .map_err(|e| e.to_string()),
        AgentKind::DialIn if attached(a, now) => Ok("ok (attached)".to_string()),
        AgentKind::DialIn => Err(format!("not attached ({})", seen_text(a, now))),
    }
}

/// A dial-in agent's connection state for people: `connected 5m`, `last seen 2h ago`, `never`.
fn seen_text(a: &AgentRow, now: f64) -> String {
    match (a.kind, a.connected_since, a.last_seen) {
        (AgentKind::Direct, ..) => "-".to_string(),
        (_, Some(since), _) if attached(a, now) => format!("connected {}", ago(now - since)),
        (_, _, Some(seen)) => format!("last seen {} ago", ago(now - seen)),
        _ => "never attached".to_string(),
    }
}

/// `agents list [--check] [--json]`.
async fn list(
    db: &Db,
    check: bool,
    output: super::Output,
    connect_timeout: Duration,
) -> anyhow::Result<i32> {
    let format = output.format()?;
    let rows = db.with(|s| s.agents())?;
    let now = crate::time::now();
    let reach: Vec<Option<Result<String, String>>> = if check {
        futures::future::join_all(
            rows.iter()
                .map(|a| async move { Some(reach(a, now, connect_timeout).await) }),
        )
        .await
    } else {
        vec![None; rows.len()]
    };
    if format == Format::Json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .zip(&reach)
            .map(|(a, r)| {
                let mut v = serde_json::to_value(a).expect("an agent row serialises to JSON");
                v["attached"] = serde_json::Value::from(attached(a, now));
                if let Some(r) = r {
                    v["reachable"] = serde_json::Value::from(r.is_ok());
                    v["check"] = serde_json::Value::from(r.clone().unwrap_or_else(|e| e));
                }
                v
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let mut t = Table::new(&[
            "name", "kind", "address", "state", "version", "token", "check",
        ]);
        for (a, r) in rows.iter().zip(&reach) {
            let address = match a.kind {
                AgentKind::Direct => a.url.clone(),
                AgentKind::DialIn => a.remote_addr.clone().unwrap_or_else(|| "-".into()),
            };
            t.push(vec![
                a.name.clone(),
                a.kind.name().to_string(),
                address,
                seen_text(a, now),
                a.agent_version.clone().unwrap_or_else(|| "-".into()),
                match a.kind {
                    AgentKind::DialIn => "enrolled",
                    AgentKind::Direct if a.token.is_some() => "yes",
                    AgentKind::Direct => "no",
                }
                .into(),
                match r {
                    None => "-".into(),
                    Some(Ok(t)) => t.clone(),
                    Some(Err(e)) => format!("unreachable: {e}"),
                },
            ]);
        }
        print!("{}", t.render(format));
    }
    let unreachable = reach.iter().flatten().filter(|r| r.is_err()).count();
    if unreachable > 0 {
        eprintln!("{unreachable} of {} agents unreachable", rows.len());
        return Ok(1);
    }
    Ok(0)
}

/// `agents add NAME --dial-in`'s options.
pub struct Enrol {
    /// The token to use instead of a fresh one.
    pub given: Option<String>,
    /// The fleet listener the agent dials (default `https://THIS_HOST:7443`).
    pub connect: Option<String>,
    /// Write the token here (a new file, mode 600) instead of printing it.
    pub token_out: Option<std::path::PathBuf>,
    pub json: bool,
}

/// Where the agent's package keeps its token (agent.toml's `token_file`).
const PACKAGED_TOKEN_FILE: &str = "/etc/gpufleet/token";

/// The SHA-256 an agent pins: of the serve's certificate in `GPUFLEET_TLS_CERT`, else in the
/// self-signed directory `GPUFLEET_TLS_SELF_SIGNED` names, else in the packaged coordinator's.
/// `None` when none is readable here.
fn serve_pin() -> Option<String> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    let cert = var("GPUFLEET_TLS_CERT")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            var("GPUFLEET_TLS_SELF_SIGNED").map(|d| std::path::Path::new(&d).join("server.crt"))
        })
        .unwrap_or_else(|| std::path::Path::new(super::PACKAGED_STATE_DIR).join("tls/server.crt"));
    crate::tls::pin_of_cert_file(&cert).ok()
}

/// `https://THIS_HOST:7443`: the packaged coordinator's fleet listener, by this host's name.
fn default_connect() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    format!("https://{host}:7443")
}

/// `agents add NAME --dial-in`: a fresh 256-bit token (or the one given), printed once or written
/// to a new file; the store keeps its hash. Then what the agent's host needs, each command as it
/// can be typed and none with the token in it.
fn enrol(db: &Db, name: &str, opts: Enrol) -> anyhow::Result<()> {
    use rand::RngCore;
    let token = match opts.given {
        Some(t) => {
            if let Some(why) = gpufleet_kernels::weak_secret(&t) {
                bail!("--token {why}");
            }
            t
        }
        None => {
            let mut bytes = [0u8; 32];
            rand::rng().fill_bytes(&mut bytes);
            bytes.iter().map(|b| format!("{b:02x}")).collect()
        }
    };
    let connect = opts.connect.unwrap_or_else(default_connect);
    if !connect.starts_with("https://") && !connect.starts_with("http://") {
        bail!(
            "--connect {}: give the fleet listener as https://HOST:PORT",
            gpufleet_kernels::quote(&connect)
        );
    }
    // The file first: a refused path enrols nothing.
    let token_file = match &opts.token_out {
        Some(path) => {
            write_new_private(path, &token)
                .with_context(|| format!("--token-out {}", path.display()))?;
            std::path::absolute(path)?
        }
        None => PACKAGED_TOKEN_FILE.into(),
    };
    let hash = token_hash(&token);
    let row = db.with(|s| s.enrol_agent(name, &hash))?;
    let pin = serve_pin();
    if opts.json {
        let mut doc = serde_json::json!({
            "name": row.name, "kind": row.kind.name(), "connect": connect, "pin_sha256": pin,
        });
        match &opts.token_out {
            Some(_) => doc["token_file"] = token_file.display().to_string().into(),
            None => doc["token"] = token.into(),
        }
        println!("{doc}");
        return Ok(());
    }
    println!("enrolled dial-in agent {}", row.name);
    let install = match &opts.token_out {
        Some(_) => {
            println!(
                "token written to {} (mode 600; only its hash is stored)",
                token_file.display()
            );
            format!(
                "  sudo install -m 600 -o gpufleet -g gpufleet {} {PACKAGED_TOKEN_FILE}    # a copy of that file",
                token_file.display()
            )
        }
        None => {
            println!("token (shown once; only its hash is stored): {token}");
            format!(
                "  sudo install -m 600 -o gpufleet -g gpufleet /dev/null {PACKAGED_TOKEN_FILE}\n  sudo tee {PACKAGED_TOKEN_FILE} >/dev/null    # paste the token, then Ctrl-D"
            )
        }
    };
    let (pin_value, pin_note) = match &pin {
        Some(p) => (p.clone(), String::new()),
        None => (
            "PIN".to_string(),
            "\nPIN: the serve's certificate SHA-256, the `tls sha256` line `gpufleet serve` printed \
             (packaged: journalctl -u gpufleet-coordinator | grep 'tls sha256')"
                .to_string(),
        ),
    };
    println!(
        "On the agent's host (package gpufleet-agent), the token in a file only the gpufleet user reads, never on a command line:\n{install}\n\
         then in /etc/gpufleet/agent.toml:\n  connect = \"{connect}\"\n  name = \"{name}\"\n  token_file = \"{PACKAGED_TOKEN_FILE}\"\n  pin_sha256 = \"{pin_value}\"\n\
         and: sudo systemctl start gpufleet-agent\n\
         Without the package:\n  gpufleet-agent --connect {connect} --name {name} --token-file {} --pin-sha256 {pin_value}{pin_note}",
        token_file.display(),
        name = row.name,
    );
    Ok(())
}

/// Writes `token` and a newline to a new file only its owner reads.
fn write_new_private(path: &std::path::Path, token: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    writeln!(f, "{token}")
}

/// The registered agent `name`.
///
/// # Errors
/// When there is none, listing the registered names.
pub fn lookup_agent(db: &Db, name: &str) -> anyhow::Result<AgentRow> {
    match db.with(|s| s.agent(name))? {
        Some(a) => Ok(a),
        None => {
            let known: Vec<String> = db
                .with(|s| s.agents())?
                .into_iter()
                .map(|a| a.name)
                .collect();
            bail!(
                "no agent named `{name}` (registered: {}); add it with `gpufleet agents add {name} http://HOST:PORT`",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            )
        }
    }
}

/// The name `gpufleet demo` registers its in-process agent under.
pub const LOCAL_AGENT: &str = "local";

/// Refuses `gpufleet demo`'s agent once the demo has ended: registered as [`LOCAL_AGENT`] at a
/// loopback port where nothing listens any more (connection refused). Said before a campaign is
/// made, so nothing is stored; any other unreachable agent is the campaign's to record (exit 1,
/// an `unreachable` result per job).
///
/// # Errors
/// The demo's port refuses connections; the message says how to start an agent.
pub async fn refuse_ended_demo_agent(row: &AgentRow) -> anyhow::Result<()> {
    if row.name != LOCAL_AGENT || row.kind != AgentKind::Direct {
        return Ok(());
    }
    let addr = row
        .url
        .strip_prefix("http://")
        .and_then(|rest| rest.split('/').next())
        .and_then(|hp| hp.parse::<std::net::SocketAddr>().ok());
    let Some(addr) = addr.filter(|a| a.ip().is_loopback()) else {
        return Ok(());
    };
    let probe = tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr));
    match probe.await {
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => bail!(
            "agent `{LOCAL_AGENT}` was `gpufleet demo`'s in-process agent, which stopped when the \
             demo ended (nothing listens at {} any more); nothing was run or stored. Run `gpufleet \
             demo` again, or start an agent on this host and register it:\n  gpufleet-agent \
             --listen 127.0.0.1:50051 &\n  gpufleet agents add {LOCAL_AGENT} http://127.0.0.1:50051",
            row.url
        ),
        _ => Ok(()),
    }
}

/// `describe` of a dial-in agent: what its last Hello said (only the serve holds its stream).
fn describe_dial_in(db: &Db, row: &AgentRow, json: bool) -> anyhow::Result<()> {
    let id = row.id;
    let Some(text) = db.with(|s| s.agent_info(id))? else {
        bail!(
            "dial-in agent {} has never attached; start it with `gpufleet-agent --connect https://HOST:PORT --name {} --token-file FILE --pin-sha256 PIN` (or its package's agent.toml), as `gpufleet agents add NAME --dial-in` said",
            row.name,
            row.name
        );
    };
    let info: gpufleet_proto::v1::AgentInfo = serde_json::from_str(&text)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&info)?);
    } else {
        eprintln!(
            "dial-in agent {}: {} (as its last Hello said)",
            row.name,
            seen_text(row, crate::time::now())
        );
        print!("{}", gpufleet_proto::display::agent_info_text(&info));
    }
    Ok(())
}

/// `describe AGENT`.
pub async fn describe(
    db: &Db,
    agent: &str,
    json: bool,
    connect_timeout: Duration,
) -> anyhow::Result<()> {
    let a = if let Some(a) = AgentAddr::of_url(agent, connect_timeout) {
        a
    } else {
        let row = lookup_agent(db, agent)?;
        if row.kind == AgentKind::DialIn {
            return describe_dial_in(db, &row, json);
        }
        AgentAddr::of(&row, connect_timeout)
    };
    let info = a.describe().await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&info)?);
    } else {
        print!("{}", gpufleet_proto::display::agent_info_text(&info));
    }
    Ok(())
}
