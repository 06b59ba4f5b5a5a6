//! `agents add|list|rm` and `describe`.

use super::args::AgentsCommand;
use crate::db::Db;
use crate::link::grpc::AgentAddr;
use crate::store::{AgentRow, token_hash};
use crate::table::{Format, Table};
use anyhow::bail;

/// `agents add|list|rm`.
pub async fn agents(db: &Db, cmd: AgentsCommand) -> anyhow::Result<()> {
    match cmd {
        AgentsCommand::Add {
            name,
            url,
            token,
            dial_in,
            json,
        } => {
            if dial_in {
                return enrol(db, &name, json);
            }
            let url = url.unwrap_or_default();
            let row = db.with(|s| s.add_agent(&name, &url, token.as_deref()))?;
            println!("added agent {} at {}", row.name, row.url);
        }
        AgentsCommand::List { check, json } => {
            let rows = db.with(|s| s.agents())?;
            // Per agent: the device count when it answered, else why not; decided by the
            // result, the text is only for people.
            let reach: Vec<Option<Result<usize, String>>> = if check {
                futures::future::join_all(rows.iter().map(|a| async move {
                    Some(match AgentAddr::from(a).describe().await {
                        Ok(i) => Ok(i.devices.len()),
                        Err(e) => Err(e.to_string()),
                    })
                }))
                .await
            } else {
                vec![None; rows.len()]
            };
            let check_text = |r: &Result<usize, String>| match r {
                Ok(devices) => format!("ok ({devices} devices)"),
                Err(e) => format!("unreachable: {e}"),
            };
            if json {
                let v: Vec<serde_json::Value> = rows
                    .iter()
                    .zip(&reach)
                    .map(|(a, r)| {
                        let mut v = serde_json::to_value(a).unwrap_or_default();
                        if let Some(r) = r {
                            v["reachable"] = serde_json::Value::from(r.is_ok());
                            v["check"] = serde_json::Value::from(check_text(r));
                        }
                        v
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                let mut t = Table::new(&["name", "url", "token", "check"]);
                for (a, r) in rows.iter().zip(reach) {
                    t.push(vec![
                        a.name.clone(),
                        a.url.clone(),
                        if a.token.is_some() { "yes" } else { "no" }.into(),
                        r.as_ref().map_or_else(|| "-".into(), check_text),
                    ]);
                }
                print!("{}", t.render(Format::Table));
            }
        }
        AgentsCommand::Rm { name } => {
            if db.with(|s| s.remove_agent(&name))? {
                println!("removed agent {name} (its results are kept)");
            } else {
                bail!("no agent named {name}");
            }
        }
    }
    Ok(())
}

/// `agents add NAME --dial-in`: a fresh 256-bit token, printed once; the store keeps its hash.
fn enrol(db: &Db, name: &str, json: bool) -> anyhow::Result<()> {
    use rand::RngCore;
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let hash = token_hash(&token);
    let row = db.with(|s| s.enrol_agent(name, &hash))?;
    if json {
        println!(
            "{}",
            serde_json::json!({"name": row.name, "token": token, "kind": row.kind.name()})
        );
    } else {
        println!("enrolled dial-in agent {}", row.name);
        println!("token (shown once; only its hash is stored): {token}");
        println!(
            "start it with: gpufleet-agent --connect https://COORDINATOR:PORT --name {} --token {token}",
            row.name
        );
    }
    Ok(())
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

/// `describe AGENT`.
pub async fn describe(db: &Db, agent: &str, json: bool) -> anyhow::Result<()> {
    let a = if agent.starts_with("http://") || agent.starts_with("https://") {
        AgentAddr {
            name: agent.to_string(),
            url: agent.to_string(),
            token: None,
        }
    } else {
        AgentAddr::from(&lookup_agent(db, agent)?)
    };
    let info = a.describe().await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&info)?);
    } else {
        print!("{}", gpufleet_proto::display::agent_info_text(&info));
    }
    Ok(())
}
