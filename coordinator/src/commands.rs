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
use gpufleet_kernels::{Problem, RunDefaults, Suite, SuiteRun, find_kernel};
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
    let run = SuiteRun {
        kernel: kernel.clone(),
        variants: Some(vec![problem.variant.clone()]),
        params: problem.params.clone(),
        dtype: problem.dtype,
        mode: args.mode,
        warmup: args.warmup,
        min_iterations: args.min_iterations,
        min_seconds: args.min_seconds,
        max_iterations: RunDefaults::STANDARD.max_iterations,
        timeout_s: args.timeout_s.unwrap_or(RunDefaults::STANDARD.timeout_s),
        env: BTreeMap::new(),
    };
    Ok(("adhoc".to_string(), vec![run], Vec::new()))
}

/// Parses `--env-set` values; names must be unique.
///
/// # Errors
/// The first bad value, naming `--env-set`.
pub fn parse_env_sets(values: &[String]) -> anyhow::Result<Vec<crate::plan::EnvSet>> {
    let mut sets: Vec<crate::plan::EnvSet> = Vec::new();
    for v in values {
        let set = crate::plan::EnvSet::parse(v).map_err(|e| anyhow::anyhow!("--env-set: {e}"))?;
        if sets.iter().any(|s| s.name == set.name) {
            anyhow::bail!("--env-set: the name {:?} is used twice", set.name);
        }
        sets.push(set);
    }
    Ok(sets)
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
        env_sets: parse_env_sets(&args.env_sets)?,
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

/// `serve`: the service loop, HTTP endpoints, graceful stop.
pub async fn serve(db: &Db, args: crate::cli::ServeArgs) -> anyhow::Result<i32> {
    use crate::service::{Service, ServiceConfig};
    use std::io::Write;
    let detect = crate::regress::DetectConfig {
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
    let cfg = ServiceConfig {
        catch_up: !args.no_catch_up,
        detect,
        ..Default::default()
    };
    let service = Service::new(db.clone(), cfg, Arc::new(crate::progress::LogReporter));
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("--listen {}: cannot bind", args.listen))?;
    println!("listening on {}", listener.local_addr()?);
    std::io::stdout().flush()?;
    eprintln!(
        "gpufleet serve: owner {}, {} schedule(s), database {}",
        service.owner(),
        db.with(|s| s.schedules())?.len(),
        db.with(|s| s.path().display().to_string())
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let http = {
        let mut rx = stop_rx.clone();
        let app = crate::http::router(service.clone());
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
    let mut rx = stop_rx.clone();
    let tick = std::time::Duration::from_secs_f64(args.tick_s);
    loop {
        match service.tick(crate::service::now()).await {
            Ok(ids) if !ids.is_empty() => eprintln!("started campaigns {ids:?}"),
            Ok(_) => {}
            Err(e) => eprintln!("schedule check failed: {e}"),
        }
        for r in service.reap() {
            eprintln!("{}", report_line(&r));
        }
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            _ = rx.wait_for(|s| *s) => break,
        }
    }
    let released = service.stop().await?;
    if !released.is_empty() {
        eprintln!("campaigns {released:?} interrupted; the next `gpufleet serve` resumes them");
    }
    signals.abort();
    let _ = http.await;
    Ok(0)
}

fn report_line(r: &crate::service::CampaignReport) -> String {
    format!(
        "campaign {}{}: {} results, {} checked ({} stable, {} no verdict, {} suspect), {} confirmed, {} not confirmed{}",
        r.campaign_id,
        r.schedule
            .as_deref()
            .map(|s| format!(" (schedule {s})"))
            .unwrap_or_default(),
        r.results,
        r.assess.checked,
        r.assess.stable,
        r.assess.no_verdict,
        r.assess.suspects,
        r.resolve.confirmed,
        r.resolve.not_confirmed,
        r.error
            .as_deref()
            .map(|e| format!("; error: {e}"))
            .unwrap_or_default()
    )
}

/// `schedule add|list|rm|run-now`.
pub async fn schedule(db: &Db, cmd: crate::cli::ScheduleCommand) -> anyhow::Result<i32> {
    use crate::cli::ScheduleCommand;
    use crate::service::{ScheduleSpec, Service, ServiceConfig, fmt_time, request_of};
    match cmd {
        ScheduleCommand::Add(a) => {
            let cron: crate::cron::Cron = a
                .cron
                .parse()
                .map_err(|e| anyhow::anyhow!("--cron {:?}: {e}", a.cron))?;
            if !a.all && a.agents.is_empty() {
                bail!("give --agent NAME (repeatable) or --all");
            }
            let spec = ScheduleSpec {
                suite: a.suite.clone(),
                agents: a.agents.clone(),
                all_agents: a.all,
                backends: a.backends.clone(),
                kernels: a.kernels.clone(),
                env: parse_kv(&a.env, "env")?,
                env_sets: parse_env_sets(&a.env_sets)?,
                timeout_s: a.timeout_s,
            };
            // Refuse now what would fail every night.
            let agents = db.with(|s| s.agents())?;
            request_of(&a.name, &spec, &agents).map_err(|e| anyhow::anyhow!("{e}"))?;
            let row = db.with(|s| {
                s.add_schedule(
                    &a.name,
                    &a.cron,
                    &serde_json::to_string(&spec).unwrap_or_default(),
                    !a.no_catch_up,
                )
            })?;
            let next = cron
                .next_after(crate::service::now() as i64)
                .map(|t| fmt_time(t as f64))
                .unwrap_or_else(|| "never".into());
            println!(
                "added schedule {} ({} UTC, suite {}); next run {next}",
                row.name, row.cron, spec.suite
            );
            Ok(0)
        }
        ScheduleCommand::List { json } => {
            let rows = db.with(|s| s.schedules())?;
            let now = crate::service::now();
            let next = |r: &crate::store::ScheduleRow| crate::service::next_slot(r, now);
            if json {
                let v: Vec<serde_json::Value> = rows
                    .iter()
                    .map(|r| {
                        let mut v = serde_json::to_value(r).unwrap_or_default();
                        v["next_slot"] = serde_json::json!(next(r));
                        v
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                let mut t = Table::new(&[
                    "name",
                    "cron (UTC)",
                    "suite",
                    "agents",
                    "last slot",
                    "next slot",
                    "catch-up",
                ]);
                for r in &rows {
                    let spec: ScheduleSpec =
                        serde_json::from_value(r.spec.clone()).unwrap_or_default();
                    t.push(vec![
                        r.name.clone(),
                        r.cron.clone(),
                        spec.suite.clone(),
                        if spec.all_agents {
                            "all".into()
                        } else {
                            spec.agents.join(",")
                        },
                        r.last_slot.map(fmt_time).unwrap_or_else(|| "-".into()),
                        next(r)
                            .map(|t| fmt_time(t as f64))
                            .unwrap_or_else(|| "never".into()),
                        if r.catch_up { "yes" } else { "no" }.into(),
                    ]);
                }
                print!("{}", t.render(Format::Table));
            }
            Ok(0)
        }
        ScheduleCommand::Rm { name } => {
            if db.with(|s| s.remove_schedule(&name))? {
                println!("removed schedule {name} (its campaigns and results stay)");
                Ok(0)
            } else {
                bail!("no schedule named {name:?}")
            }
        }
        ScheduleCommand::RunNow { name, json } => {
            let row = db
                .with(|s| s.schedule(&name))?
                .ok_or_else(|| anyhow::anyhow!("no schedule named {name:?}"))?;
            let reporter = Arc::new(CliReporter::new());
            let service = Service::new(db.clone(), ServiceConfig::default(), reporter.clone());
            let report = service.run_now(&row).await;
            reporter.finish();
            let report = report?;
            let since = db
                .with(|s| s.campaign(report.campaign_id))?
                .map(|c| c.created_at)
                .unwrap_or(0.0);
            let alerts: Vec<_> = db
                .with(|s| s.alerts(since))?
                .into_iter()
                .filter(|a| a.campaign_id == Some(report.campaign_id))
                .collect();
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({"report": report, "alerts": alerts})
                    )?
                );
            } else {
                eprintln!("{}", report_line(&report));
                print_alerts(&alerts);
            }
            Ok(if report.error.is_some() { 1 } else { 0 })
        }
    }
}

fn print_alerts(alerts: &[crate::store::AlertRow]) {
    if alerts.is_empty() {
        println!("no confirmed regressions or improvements");
        return;
    }
    let mut t = Table::new(&[
        "when", "agent", "device", "spec", "change", "before", "after", "unit", "bound",
    ]);
    for a in alerts {
        t.push(vec![
            crate::service::fmt_time(a.created_at),
            a.agent.clone().unwrap_or_default(),
            a.device_id.clone(),
            a.spec_key.clone(),
            format!("{} {:+.1}%", a.direction, a.change_pct),
            fmt_metric(a.before_value),
            fmt_metric(a.after_value),
            a.metric_unit.clone(),
            format!("±{:.1}%", a.bound_pct),
        ]);
    }
    print!("{}", t.render(Format::Table));
}

/// `regressions`: alerts (and verdicts), exit 1 with --fail-on when one matches.
pub fn regressions(db: &Db, a: crate::cli::RegressionsArgs) -> anyhow::Result<i32> {
    use crate::cli::FailOn;
    let since = match &a.since {
        Some(t) => crate::regressions::parse_since(t, crate::service::now())
            .map_err(|e| anyhow::anyhow!(e))?,
        None => 0.0,
    };
    let alerts = db.with(|s| s.alerts(since))?;
    let checks = if a.all {
        db.with(|s| s.checks(since))?
    } else {
        Vec::new()
    };
    if a.json {
        let mut v = serde_json::json!({ "since": since, "alerts": alerts });
        if a.all {
            v["checks"] = serde_json::to_value(&checks)?;
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print_alerts(&alerts);
        if a.all {
            let mut t = Table::new(&["result", "verdict", "direction", "reason"]);
            for c in &checks {
                t.push(vec![
                    c.result_id.to_string(),
                    c.verdict.clone(),
                    c.direction.clone().unwrap_or_default(),
                    c.reason.clone(),
                ]);
            }
            print!("{}", t.render(Format::Table));
        }
    }
    let failing = alerts
        .iter()
        .filter(|al| match a.fail_on {
            Some(FailOn::Regression) => al.direction == "regression",
            Some(FailOn::Improvement) => al.direction == "improvement",
            Some(FailOn::Any) => true,
            None => false,
        })
        .count();
    if failing > 0 {
        eprintln!("{failing} alert(s) match --fail-on");
        return Ok(1);
    }
    Ok(0)
}
