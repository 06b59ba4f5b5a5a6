//! Printing stored results: `results`, `compare`, `campaigns`, and a campaign's outcome after
//! `run` and `demo`.

use super::args::{CompareArgs, ResultsArgs};
use crate::campaign::run::CampaignOutcome;
use crate::compare::{Baseline, By, Pivot, fmt_metric};
use crate::convert::to_compare_row;
use crate::db::Db;
use crate::store::{ResultFilter, ResultRow};
use crate::table::{Format, Table};

/// Prints a campaign's results (JSON on stdout with `json`, else the comparison table) and returns
/// the exit code: 0 when every result is ok, 1 otherwise.
///
/// # Errors
/// When the results cannot be read.
pub fn print_outcome(db: &Db, o: &CampaignOutcome, json: bool) -> anyhow::Result<i32> {
    let format = if json { Format::Json } else { Format::Table };
    let filter = ResultFilter {
        campaign_id: Some(o.campaign_id),
        ..Default::default()
    };
    let rows = db.with(|s| s.results(&filter))?;
    if format == Format::Json {
        let v: Vec<serde_json::Value> = rows.iter().map(result_json).collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let pivot = Pivot::new(rows.iter().map(to_compare_row).collect(), By::Device);
        print!("{}", pivot.render(format));
        let bad = rows.iter().filter(|r| r.record.status != "ok").count();
        eprintln!(
            "campaign {}: {} results, {} ok, {} not ok{}",
            o.campaign_id,
            rows.len(),
            rows.len() - bad,
            bad,
            if o.planned.skipped > 0 {
                format!(
                    ", {} combinations skipped (not implemented by the backend)",
                    o.planned.skipped
                )
            } else {
                String::new()
            }
        );
    }
    // An agent that could not be reached when the campaign was planned ran nothing: that is a
    // failure for CI as much as a failed result.
    for u in &o.planned.unreachable {
        eprintln!("unreachable: {u}");
    }
    Ok(
        if rows.iter().all(|r| r.record.status == "ok") && o.planned.unreachable.is_empty() {
            0
        } else {
            1
        },
    )
}

/// A result for scripts: the stored row plus a `metric` object and the
/// device name.
fn result_json(r: &ResultRow) -> serde_json::Value {
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

/// `compare`: exit status 1 when nothing matches (an unknown campaign, a filter that selects
/// nothing), 2 for a baseline that names no column, with the reason on stderr.
pub fn compare(db: &Db, a: CompareArgs) -> anyhow::Result<i32> {
    let baseline = Baseline::parse(a.baseline.as_deref().unwrap_or(""));
    for id in [
        a.scope.campaign,
        match baseline {
            Baseline::Campaign(id) => Some(id),
            _ => None,
        },
    ]
    .into_iter()
    .flatten()
    {
        if db.with(|s| s.campaign(id))?.is_none() {
            eprintln!("no campaign {id} (gpufleet campaigns lists them)");
            return Ok(1);
        }
    }
    let filter = ResultFilter {
        campaign_id: a.scope.campaign,
        kernel: a.scope.kernel,
        suite: a.suite,
        agent: a.scope.agent,
        latest_per_device_and_key: true,
        ..Default::default()
    };
    let rows = db.with(|s| s.results(&filter))?;
    if rows.is_empty() {
        eprintln!("no results match; run a suite first (gpufleet run --suite smoke --agent NAME)");
        return Ok(1);
    }
    let mut pivot = Pivot::new(rows.iter().map(to_compare_row).collect(), a.by);
    match baseline {
        Baseline::None => {}
        Baseline::Column(name) => match pivot.column(&name) {
            Ok(col) => pivot.against_column(col),
            Err(e) => {
                eprintln!("error: --baseline: {e}");
                return Ok(2);
            }
        },
        Baseline::Campaign(id) => {
            let base = db.with(|s| {
                s.results(&ResultFilter {
                    campaign_id: Some(id),
                    latest_per_device_and_key: true,
                    ..Default::default()
                })
            })?;
            let base: Vec<_> = base.iter().map(to_compare_row).collect();
            pivot.against_campaign(id, &base);
        }
    }
    print!("{}", pivot.render(a.scope.output.format()));
    Ok(0)
}

/// `results`.
pub fn results(db: &Db, a: ResultsArgs) -> anyhow::Result<()> {
    let format = a.scope.output.format();
    let filter = ResultFilter {
        campaign_id: a.scope.campaign,
        kernel: a.scope.kernel,
        agent: a.scope.agent,
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
    if format == Format::Csv {
        print!("{}", results_csv(&rows, a.samples, db)?);
        return Ok(());
    }
    let mut t = Table::new(&[
        "run",
        "campaign",
        "kernel",
        "variant",
        "params",
        "dtype",
        "mode",
        "env set",
        "agent",
        "device",
        "backend",
        "status",
        "metric",
        "unit",
        "median ms",
        "±ci %",
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
            crate::convert::params_text(&rec.params, ","),
            rec.dtype.clone(),
            rec.mode.clone(),
            match crate::compare::env_set(&rec.spec_key) {
                "" => "-".to_string(),
                e => e.to_string(),
            },
            r.agent.clone(),
            rec.device_id.clone(),
            rec.backend.clone(),
            rec.status.clone(),
            match rec.metric_value.filter(|_| rec.status == "ok") {
                Some(v) if rec.noisy => format!("{}~", fmt_metric(v)),
                Some(v) => fmt_metric(v),
                None => "-".into(),
            },
            rec.metric_unit.clone().unwrap_or_else(|| "-".into()),
            rec.median_s
                .map(|m| format!("{:.4}", m * 1e3))
                .unwrap_or_else(|| "-".into()),
            rec.ci_pct()
                .map(|c| format!("{c:.2}"))
                .unwrap_or_else(|| "-".into()),
            rec.cv
                .map(|c| format!("{:.1}", c * 100.0))
                .unwrap_or_else(|| "-".into()),
            rec.message.chars().take(80).collect(),
        ]);
    }
    print!("{}", t.render(format));
    if rows.iter().any(|r| r.record.noisy) {
        println!(
            "\n~ noisy: CV above {:.0}% or the median's 95% interval (±ci) wider than its target",
            gpufleet_kernels::NOISY_CV * 100.0
        );
    }
    Ok(())
}

/// Results as CSV: numbers plain (empty when missing), units in the headers, the full run id;
/// with `samples`, one line per iteration instead (long format).
fn results_csv(rows: &[ResultRow], samples: bool, db: &Db) -> anyhow::Result<String> {
    use crate::compare::csv_number;
    if samples {
        let mut t = Table::new(&["run_id", "iteration", "seconds"]);
        for r in rows {
            let run = r.record.run_id.clone();
            for (i, s) in db.with(|st| st.result_samples(&run))?.iter().enumerate() {
                t.push(vec![run.clone(), i.to_string(), s.to_string()]);
            }
        }
        return Ok(t.render(Format::Csv));
    }
    let mut t = Table::new(&[
        "result_id",
        "run_id",
        "campaign",
        "kernel",
        "variant",
        "params",
        "dtype",
        "mode",
        "env_set",
        "agent",
        "device",
        "backend",
        "status",
        "metric",
        "unit",
        "pct_of_peak",
        "peak_suspect",
        "peak_source",
        "median_ms",
        "p10_ms",
        "p90_ms",
        "ci_low_ms",
        "ci_high_ms",
        "ci_pct",
        "target_ci_pct",
        "cv_pct",
        "noisy",
        "iterations",
        "avg_w",
        "energy_j",
        "created_at",
        "message",
    ]);
    let ms = |v: Option<f64>| csv_number(v.map(|s| s * 1e3));
    for r in rows {
        let rec = &r.record;
        t.push(vec![
            r.id.to_string(),
            rec.run_id.clone(),
            rec.campaign_id.map(|c| c.to_string()).unwrap_or_default(),
            rec.kernel.clone(),
            rec.variant.clone(),
            crate::convert::params_text(&rec.params, ";"),
            rec.dtype.clone(),
            rec.mode.clone(),
            crate::compare::env_set(&rec.spec_key).to_string(),
            r.agent.clone(),
            rec.device_id.clone(),
            rec.backend.clone(),
            rec.status.clone(),
            csv_number(rec.metric_value.filter(|_| rec.status == "ok")),
            rec.metric_unit.clone().unwrap_or_default(),
            csv_number(rec.pct_of_peak.filter(|p| *p > 0.0)),
            rec.pct_of_peak.is_some_and(|p| p > 100.0).to_string(),
            rec.peak_source.clone(),
            ms(rec.median_s),
            ms(rec.p10_s),
            ms(rec.p90_s),
            ms(rec.ci_low_s),
            ms(rec.ci_high_s),
            csv_number(rec.ci_pct()),
            csv_number(rec.target_ci_pct),
            csv_number(rec.cv.map(|c| c * 100.0)),
            rec.noisy.to_string(),
            rec.iterations.to_string(),
            csv_number(rec.avg_watts),
            csv_number(rec.energy_j),
            csv_number(rec.created_at),
            rec.message.clone(),
        ]);
    }
    Ok(t.render(Format::Csv))
}

/// `campaigns`.
pub fn campaigns(db: &Db, output: super::Output) -> anyhow::Result<()> {
    let rows = db.with(|s| s.campaigns())?;
    let format = output.format();
    if format == Format::Json {
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
    print!("{}", t.render(format));
    Ok(())
}

/// `gpufleet report --html DIR`.
pub fn report(db: &Db, a: super::args::ReportArgs) -> anyhow::Result<()> {
    let since = a
        .since
        .as_deref()
        .map(|t| crate::regression::check::parse_since(t, crate::time::now()))
        .transpose()
        .map_err(|e| anyhow::anyhow!("--since: {e}"))?;
    let scope = crate::web::Scope {
        campaign: a.campaign,
        since,
    };
    let summary = db
        .with(|s| crate::web::report::write_report(s, &a.html, &scope))
        .map_err(|e| anyhow::anyhow!("report: {e}"))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!(
            "wrote {} pages to {} ({} results, {} histories, {} campaigns); open {}",
            summary.pages,
            a.html.display(),
            summary.runs,
            summary.histories,
            summary.campaigns,
            a.html.join("index.html").display()
        );
    }
    Ok(())
}
