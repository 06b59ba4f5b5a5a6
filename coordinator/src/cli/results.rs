//! Printing stored results: `results`, `compare`, `campaigns`, and a campaign's outcome after
//! `run` and `demo`.

use super::args::{CompareArgs, ResultsArgs};
use crate::campaign::run::CampaignOutcome;
use crate::compare::{self, fmt_metric};
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
/// nothing), with the reason on stderr.
pub fn compare(db: &Db, a: CompareArgs) -> anyhow::Result<i32> {
    if let Some(id) = a.scope.campaign
        && db.with(|s| s.campaign(id))?.is_none()
    {
        eprintln!("no campaign {id} (gpufleet campaigns lists them)");
        return Ok(1);
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
    let mut cmp: Vec<_> = rows.iter().map(to_compare_row).collect();
    compare::rank(&mut cmp);
    if cmp.is_empty() {
        eprintln!("no results match; run a suite first (gpufleet run --suite smoke --agent NAME)");
    }
    print!("{}", compare::render(&cmp, a.scope.output.format()));
    Ok(if cmp.is_empty() { 1 } else { 0 })
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
            crate::convert::params_text(&rec.params, ","),
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
        "median_ms",
        "p10_ms",
        "p90_ms",
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
            ms(rec.median_s),
            ms(rec.p10_s),
            ms(rec.p90_s),
            csv_number(rec.cv.map(|c| c * 100.0)),
            crate::compare::is_noisy(rec.cv).to_string(),
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
        .map(|t| crate::regression::check::parse_since(t, crate::schedule::now()))
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
