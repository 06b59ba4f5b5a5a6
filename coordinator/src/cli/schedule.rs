//! `schedule add|list|rm|run-now` and `regressions`.

use super::args::{FailOn, RegressionsArgs, ScheduleCommand};
use super::parse::campaign_options;
use crate::campaign::progress::CliReporter;
use crate::campaign::request::RetryPolicy;
use crate::db::Db;
use crate::regression::check::parse_since;
use crate::schedule::{Cron, Daemon, DaemonConfig, ScheduleSpec, next_slot, request_of};
use crate::store::{AlertRow, ScheduleRow};
use crate::table::{Format, Table, fmt_metric};
use crate::time::{fmt_time, now};
use anyhow::{Context, bail};
use std::sync::Arc;
use std::time::Duration;

/// `schedule add|list|rm|run-now`.
pub async fn schedule(
    db: &Db,
    cmd: ScheduleCommand,
    connect_timeout: Duration,
) -> anyhow::Result<i32> {
    match cmd {
        ScheduleCommand::Add(a) => {
            let cron: Cron = a
                .cron
                .parse()
                .map_err(|e| anyhow::anyhow!("--cron {:?}: {e}", a.cron))?;
            if !a.all && a.agents.is_empty() {
                bail!("give --agent NAME (repeatable) or --all");
            }
            let options = campaign_options(&a.overrides, &a.backends, &a.kernels)?;
            // A suite file is kept by its content (what every slot runs) and its absolute path
            // (for people): the serve that fires the schedule runs from another directory, and
            // a later edit of the file must not change what the nightly series measures.
            let (suite, suite_toml) = match std::fs::canonicalize(&a.suite) {
                Ok(path) if !gpufleet_kernels::BUILTIN_SUITES.contains(&a.suite.as_str()) => {
                    let text = std::fs::read_to_string(&path)
                        .with_context(|| format!("reading suite file {}", path.display()))?;
                    (path.display().to_string(), Some(text))
                }
                // A built-in name, or no such file (which request_of below explains).
                _ => (a.suite.clone(), None),
            };
            let suite_sha256 = suite_toml
                .as_deref()
                .map(|t| gpufleet_proto::digest::sha256_hex(t.as_bytes()));
            let spec = ScheduleSpec {
                suite,
                suite_toml,
                suite_sha256,
                agents: a.agents.clone(),
                all_agents: a.all,
                options,
            };
            // Refuse now what would fail every night.
            let agents = db.with(|s| s.agents())?;
            request_of(&a.name, &spec, &agents).map_err(|e| anyhow::anyhow!("{e}"))?;
            let spec_json = serde_json::to_string(&spec)?;
            let row = db.with(|s| s.add_schedule(&a.name, &a.cron, &spec_json, !a.no_catch_up))?;
            let next = cron
                .next_after(now() as i64)
                .map(|t| fmt_time(t as f64))
                .unwrap_or_else(|| "never".into());
            println!(
                "added schedule {} ({} UTC, suite {}); next run {next}",
                row.name, row.cron, spec.suite
            );
            Ok(0)
        }
        ScheduleCommand::List { output } => {
            let rows = db.with(|s| s.schedules())?;
            let now = now();
            let next = |r: &ScheduleRow| next_slot(r, now);
            let format = output.format()?;
            if format == Format::Json {
                let v = rows
                    .iter()
                    .map(|r| {
                        let mut v = serde_json::to_value(r)?;
                        v["next_slot"] = serde_json::json!(next(r));
                        Ok(v)
                    })
                    .collect::<serde_json::Result<Vec<_>>>()?;
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
                    "filters",
                ]);
                for r in &rows {
                    let spec: ScheduleSpec = gpufleet_kernels::from_json_value(&r.spec)
                        .with_context(|| {
                            format!("schedule {}: its stored spec does not parse", r.name)
                        })?;
                    t.push(vec![
                        r.name.clone(),
                        r.cron.clone(),
                        spec.suite.clone(),
                        if spec.all_agents {
                            "all".into()
                        } else {
                            spec.agents.join(",")
                        },
                        // A new schedule starts from its creation time, which is not a slot.
                        r.last_slot
                            .filter(|t| *t > r.created_at)
                            .map(fmt_time)
                            .unwrap_or_else(|| "never".into()),
                        next(r)
                            .map(|t| fmt_time(t as f64))
                            .unwrap_or_else(|| "never".into()),
                        if r.catch_up { "yes" } else { "no" }.into(),
                        filters_text(&spec),
                    ]);
                }
                print!("{}", t.render(format));
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
            let cfg = DaemonConfig {
                retry: RetryPolicy::connecting_within(connect_timeout),
                ..DaemonConfig::default()
            };
            let daemon = Daemon::new(db.clone(), cfg, reporter.clone());
            let report = daemon.run_now(&row).await;
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
                eprintln!("{report}");
                print_alerts(&alerts, Format::Table);
            }
            // 0 only when every result is ok: a failed run or an unreachable agent is a failure
            // for whatever gates on this (ci/nightly.yml).
            Ok(if report.error.is_some() || report.not_ok > 0 {
                1
            } else {
                0
            })
        }
    }
}

/// What the regression check looks at, for an empty listing (a `run` or the demo is never
/// checked).
pub const CHECKED: &str = "only the results of scheduled campaigns (`gpufleet schedule add`, \
     `schedule run-now`, fired by `gpufleet serve`) are checked against their history";

fn print_alerts(alerts: &[AlertRow], format: Format) {
    if alerts.is_empty() && format == Format::Table {
        println!("no confirmed regressions or improvements; {CHECKED}");
        return;
    }
    let mut t = Table::new(&[
        "when", "agent", "device", "spec", "change", "before", "after", "unit", "bound",
    ]);
    for a in alerts {
        t.push(vec![
            fmt_time(a.created_at),
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
    print!("{}", t.render(format));
}

/// `regressions`: alerts (and verdicts), exit 1 with --fail-on when one matches.
pub fn regressions(db: &Db, a: RegressionsArgs) -> anyhow::Result<i32> {
    let since = match &a.since {
        Some(t) => parse_since(t, now()).map_err(|e| anyhow::anyhow!(e))?,
        None => 0.0,
    };
    let alerts = db.with(|s| s.alerts(since))?;
    let checks = if a.all {
        db.with(|s| s.checks(since))?
    } else {
        Vec::new()
    };
    let format = a.output.format()?;
    if format == Format::Json {
        let mut v = serde_json::json!({ "since": since, "alerts": alerts });
        if a.all {
            v["checks"] = serde_json::to_value(&checks)?;
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print_alerts(&alerts, format);
        if a.all {
            let mut t = Table::new(&[
                "result",
                "agent",
                "device",
                "spec",
                "verdict",
                "direction",
                "reason",
            ]);
            for c in &checks {
                t.push(vec![
                    c.result_id.to_string(),
                    c.agent.clone(),
                    c.device_id.clone(),
                    c.spec_key.clone(),
                    c.verdict.clone(),
                    c.direction.clone().unwrap_or_default(),
                    c.reason.clone(),
                ]);
            }
            if checks.is_empty() && format == Format::Table {
                println!("no verdicts; {CHECKED}");
            } else {
                print!("{}", t.render(format));
            }
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

/// What a schedule narrows or overrides, for `schedule list`: backends, kernels, env overrides,
/// env sets, timeout and measurement target; `-` for none.
fn filters_text(spec: &ScheduleSpec) -> String {
    let spec = &spec.options;
    let mut parts = Vec::new();
    if !spec.backends.is_empty() {
        parts.push(format!("backend {}", spec.backends.join(",")));
    }
    if !spec.kernels.is_empty() {
        parts.push(format!("kernel {}", spec.kernels.join(",")));
    }
    if !spec.env.is_empty() {
        let env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        parts.push(format!("env {}", env.join(",")));
    }
    if !spec.env_sets.is_empty() {
        let sets: Vec<&str> = spec.env_sets.iter().map(|s| s.name.as_str()).collect();
        parts.push(format!("env sets {}", sets.join(",")));
    }
    if let Some(t) = spec.timeout_s {
        parts.push(format!("timeout {t} s"));
    }
    if let Some(t) = spec.target_ci_pct {
        parts.push(format!("target ±{t}%"));
    }
    if let Some(t) = spec.max_seconds {
        parts.push(format!("budget {t} s"));
    }
    if parts.is_empty() {
        "-".to_string()
    } else {
        parts.join("; ")
    }
}
