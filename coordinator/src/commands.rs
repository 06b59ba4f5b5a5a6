//! One handler per CLI command. Handlers print; the library does the work.

use crate::campaign::{CampaignOutcome, CampaignRequest, RetryPolicy, run_campaign};
use crate::cli::{AgentsCommand, CompareArgs, ResultsArgs, RunArgs};
use crate::client::AgentAddr;
use crate::compare::{self, fmt_metric};
use crate::db::Db;
use crate::plan::Selection;
use crate::progress::CliReporter;
use crate::record::to_compare_row;
use crate::store::{AgentRow, ResultFilter};
use crate::table::{Format, Table};
use anyhow::{Context, bail};
use gpufleet_kernels::{Problem, Suite, SuiteRun, find_kernel};
use gpufleet_proto::v1 as pb;
use std::collections::BTreeMap;
use std::sync::Arc;

/// `agents add|list|rm`.
pub async fn agents(db: &Db, cmd: AgentsCommand) -> anyhow::Result<()> {
    match cmd {
        AgentsCommand::Add { name, url, token } => {
            let row = db.with(|s| s.add_agent(&name, &url, token.as_deref()))?;
            println!("added agent {} at {}", row.name, row.url);
        }
        AgentsCommand::List { check, json } => {
            let rows = db.with(|s| s.agents())?;
            let reach: Vec<Option<String>> = if check {
                futures::future::join_all(rows.iter().map(|a| async move {
                    Some(match addr(a).describe().await {
                        Ok(i) => format!("ok ({} devices)", i.devices.len()),
                        Err(e) => format!("unreachable: {e}"),
                    })
                }))
                .await
            } else {
                vec![None; rows.len()]
            };
            if json {
                let v: Vec<serde_json::Value> = rows
                    .iter()
                    .zip(&reach)
                    .map(|(a, r)| {
                        let mut v = serde_json::to_value(a).unwrap_or_default();
                        if let Some(r) = r {
                            v["reachable"] = serde_json::Value::from(r.starts_with("ok"));
                            v["check"] = serde_json::Value::from(r.as_str());
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
                        r.unwrap_or_else(|| "-".into()),
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

fn addr(a: &AgentRow) -> AgentAddr {
    AgentAddr {
        name: a.name.clone(),
        url: a.url.clone(),
        token: a.token.clone(),
    }
}

fn lookup_agent(db: &Db, name: &str) -> anyhow::Result<AgentRow> {
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
        addr(&lookup_agent(db, agent)?)
    };
    let info = a.describe().await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&info)?);
    } else {
        print!("{}", gpufleet_proto::display::agent_info_text(&info));
    }
    Ok(())
}

fn parse_kv(items: &[String], what: &str) -> anyhow::Result<BTreeMap<String, String>> {
    items
        .iter()
        .map(|s| match s.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => bail!("--{what} `{s}` must be NAME=VALUE"),
        })
        .collect()
}

/// The runs of `gpufleet run`: a suite's, or one ad-hoc spec.
pub fn runs_of(args: &RunArgs) -> anyhow::Result<(String, Vec<SuiteRun>, Vec<String>)> {
    if let Some(name) = &args.suite {
        let suite = Suite::resolve(name)?;
        for k in &args.kernels {
            if find_kernel(k).is_none() {
                bail!("--kernel: unknown kernel `{k}`");
            }
        }
        return Ok((suite.name.clone(), suite.runs, args.kernels.clone()));
    }
    let [kernel] = args.kernels.as_slice() else {
        bail!(
            "without --suite, give exactly one --kernel (and optionally --variant, --param NAME=VALUE)"
        );
    };
    let mut params = BTreeMap::new();
    for (k, v) in parse_kv(&args.params, "param")? {
        let n: i64 = v
            .parse()
            .with_context(|| format!("--param {k}={v}: the value must be an integer"))?;
        params.insert(k, n);
    }
    let problem = Problem::new(
        kernel,
        args.variant.as_deref().unwrap_or(""),
        &params,
        &args.dtype,
        true,
    )?;
    if pb::RunMode::from_name(&args.mode).is_none() {
        bail!(
            "--mode `{}` must be compute_only or with_transfers",
            args.mode
        );
    }
    let run = SuiteRun {
        kernel: kernel.clone(),
        variants: Some(vec![problem.variant.clone()]),
        params: problem.params.clone(),
        dtype: args.dtype.clone(),
        mode: args.mode.clone(),
        warmup: args.warmup,
        min_iterations: args.min_iterations,
        min_seconds: args.min_seconds,
        max_iterations: 10_000,
        timeout_s: args.timeout_s.unwrap_or(120.0),
        env: BTreeMap::new(),
    };
    Ok(("adhoc".to_string(), vec![run], Vec::new()))
}

/// `run`.
pub async fn run(db: &Db, args: RunArgs) -> anyhow::Result<i32> {
    let (suite, runs, kernels) = runs_of(&args)?;
    let agents = args
        .agents
        .iter()
        .map(|n| lookup_agent(db, n))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let selection = Selection {
        backends: args.backends.clone(),
        devices: args.devices.clone(),
        kernels,
        env: parse_kv(&args.env, "env")?,
        timeout_s: args.timeout_s,
        power_window_s: args.power_window_s,
    };
    let reporter = Arc::new(CliReporter::new());
    let req = CampaignRequest {
        description: format!("gpufleet run on {}", args.agents.join(", ")),
        suite,
        runs,
        agents,
        selection,
        retry: RetryPolicy::default(),
    };
    let outcome = run_campaign(db, req, reporter.clone()).await;
    reporter.finish();
    let outcome = outcome?;
    print_outcome(
        db,
        &outcome,
        if args.json {
            Format::Json
        } else {
            Format::Table
        },
    )
}

/// Prints a campaign's results and returns the exit code: 0 when every
/// result is ok, 1 otherwise.
pub fn print_outcome(db: &Db, o: &CampaignOutcome, format: Format) -> anyhow::Result<i32> {
    let filter = ResultFilter {
        campaign_id: Some(o.campaign_id),
        ..Default::default()
    };
    let rows = db.with(|s| s.results(&filter))?;
    if format == Format::Json {
        let v: Vec<serde_json::Value> = rows.iter().map(result_json).collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let mut cmp: Vec<_> = rows.iter().map(to_compare_row).collect();
        compare::rank(&mut cmp);
        print!("{}", compare::render(&cmp, format));
        let bad = rows.iter().filter(|r| r.record.status != "ok").count();
        eprintln!(
            "campaign {}: {} results, {} ok, {} not ok{}",
            o.campaign_id,
            rows.len(),
            rows.len() - bad,
            bad,
            if o.skipped > 0 {
                format!(
                    ", {} combinations skipped (not implemented by the backend)",
                    o.skipped
                )
            } else {
                String::new()
            }
        );
    }
    Ok(if rows.iter().all(|r| r.record.status == "ok") {
        0
    } else {
        1
    })
}

/// A result for scripts: the stored row plus a `metric` object and the
/// device name.
fn result_json(r: &crate::store::ResultRow) -> serde_json::Value {
    let mut v = serde_json::to_value(r).unwrap_or_default();
    let rec = &r.record;
    v["device"] = serde_json::Value::from(rec.device_id.clone());
    v["metric"] = match (rec.metric_value, &rec.metric_unit, &rec.metric_kind) {
        (Some(value), Some(unit), Some(kind)) => {
            serde_json::json!({ "value": value, "unit": unit, "kind": kind })
        }
        _ => serde_json::Value::Null,
    };
    v
}

/// `compare`.
pub fn compare(db: &Db, a: CompareArgs) -> anyhow::Result<()> {
    let filter = ResultFilter {
        campaign_id: a.campaign,
        kernel: a.kernel,
        suite: a.suite,
        agent: a.agent,
        latest_per_device_and_key: true,
        ..Default::default()
    };
    let rows = db.with(|s| s.results(&filter))?;
    let mut cmp: Vec<_> = rows.iter().map(to_compare_row).collect();
    compare::rank(&mut cmp);
    if cmp.is_empty() && a.format != Format::Json {
        eprintln!("no results match; run a suite first (gpufleet run --suite smoke --agent NAME)");
    }
    print!("{}", compare::render(&cmp, a.format));
    Ok(())
}

/// `results`.
pub fn results(db: &Db, a: ResultsArgs) -> anyhow::Result<()> {
    let format = if a.json { Format::Json } else { a.format };
    let filter = ResultFilter {
        campaign_id: a.campaign,
        kernel: a.kernel,
        agent: a.agent,
        status: a.status,
        with_samples: a.samples && format == Format::Json,
        ..Default::default()
    };
    let rows = db.with(|s| s.results(&filter))?;
    if format == Format::Json {
        let v: Vec<serde_json::Value> = rows.iter().map(result_json).collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let mut t = Table::new(&[
        "run",
        "campaign",
        "kernel",
        "variant",
        "params",
        "agent",
        "device",
        "status",
        "metric",
        "unit",
        "median ms",
        "cv %",
        "message",
    ]);
    for r in &rows {
        let rec = &r.record;
        t.push(vec![
            rec.run_id.chars().take(8).collect(),
            rec.campaign_id.map(|c| c.to_string()).unwrap_or_default(),
            rec.kernel.clone(),
            rec.variant.clone(),
            rec.params
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(","),
            r.agent.clone(),
            rec.device_id.clone(),
            rec.status.clone(),
            rec.metric_value
                .map(fmt_metric)
                .unwrap_or_else(|| "-".into()),
            rec.metric_unit.clone().unwrap_or_else(|| "-".into()),
            rec.median_s
                .map(|m| format!("{:.4}", m * 1e3))
                .unwrap_or_else(|| "-".into()),
            rec.cv
                .map(|c| format!("{:.1}", c * 100.0))
                .unwrap_or_else(|| "-".into()),
            rec.message.chars().take(80).collect(),
        ]);
    }
    print!("{}", t.render(format));
    Ok(())
}

/// `campaigns`.
pub fn campaigns(db: &Db, json: bool) -> anyhow::Result<()> {
    let rows = db.with(|s| s.campaigns())?;
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    let mut t = Table::new(&["id", "suite", "state", "jobs", "description"]);
    for c in &rows {
        t.push(vec![
            c.id.to_string(),
            c.suite.clone(),
            c.state.name().to_string(),
            c.jobs.total().to_string(),
            c.description.clone(),
        ]);
    }
    print!("{}", t.render(Format::Table));
    Ok(())
}
