//! Printing stored results: `results`, `compare`, `campaigns`, and a campaign's outcome after
//! `run` and `demo`.

use super::args::{CompareArgs, ResultsArgs};
use crate::campaign::run::CampaignOutcome;
use crate::compare::{Baseline, By, Pivot, llama_bench};
use crate::db::Db;
use crate::regression::check::parse_since;
use crate::store::{Direction, ResultFilter, ResultRow};
use crate::table::{Column, Format, Table, csv_number, fmt_metric, or_dash, params_text};
use crate::time::now;

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
        let bad = rows.iter().filter(|r| !r.record.is_ok()).count();
        let total = rows.len();
        let pivot = Pivot::new(rows.clone(), By::Device);
        print!("{}", pivot.render(format));
        // A transformer's results also as llama-bench prints its own, to put beside them.
        let (llama, _) = llama_bench(&rows);
        if !llama.rows.is_empty() {
            print!(
                "\nAs llama-bench prints it:\n\n{}",
                llama.render(Format::LlamaBench)
            );
        }
        eprintln!(
            "campaign {}: {} results, {} ok, {} not ok{}",
            o.campaign_id,
            total,
            total - bad,
            bad,
            if o.planned.skipped > 0 {
                format!(
                    ", {} combinations skipped (not implemented by the backend or the device)",
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
    let mut v = serde_json::to_value(r).expect("a stored result serialises to JSON");
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
        summary_only: true,
        ..Default::default()
    };
    check_kernel(filter.kernel.as_deref())?;
    let rows = db.with(|s| s.results(&filter))?;
    if rows.is_empty() {
        eprintln!("{}", why_no_results(db, &filter)?);
        return Ok(1);
    }
    if a.scope.output.compare_format() == Format::LlamaBench {
        return Ok(llama_bench_table(&rows, &baseline));
    }
    let mut pivot = Pivot::new(rows, a.by);
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
                    summary_only: true,
                    ..Default::default()
                })
            })?;
            pivot.against_campaign(id, &base);
        }
    }
    print!("{}", pivot.render(a.scope.output.format()?));
    Ok(0)
}

/// `compare --format llama-bench`: the table, or exit status 1 when no `ok` `llm` result
/// matches, 2 with a baseline (the table has no column to compare against).
fn llama_bench_table(rows: &[ResultRow], baseline: &Baseline) -> i32 {
    if *baseline != Baseline::None {
        eprintln!("error: --baseline does not apply to --format llama-bench (one row per result)");
        return 2;
    }
    let (table, left_out) = llama_bench(rows);
    if table.rows.is_empty() {
        eprintln!(
            "no ok llm results match ({left_out} other results); run e.g. \
             gpufleet run --suite llm --agent NAME"
        );
        return 1;
    }
    print!("{}", table.render(Format::LlamaBench));
    if left_out > 0 {
        eprintln!(
            "{left_out} results left out: llama-bench's table lists the ok results of kernel llm"
        );
    }
    0
}

/// Rows per store read of `results --all`.
const ALL_PAGE: usize = 1_000;

/// `results`: the newest `--limit` matches, oldest of them first (like a log's tail), or with
/// `--all` every match, read page by page so memory stays flat however many there are.
pub fn results(db: &Db, a: ResultsArgs) -> anyhow::Result<()> {
    let format = a.scope.output.format()?;
    let since = a
        .since
        .as_deref()
        .map(|t| parse_since(t, now()))
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let filter = ResultFilter {
        campaign_id: a.scope.campaign,
        kernel: a.scope.kernel,
        agent: a.scope.agent,
        status: a.status,
        since,
        with_samples: a.samples && format == Format::Json,
        ..Default::default()
    };
    check_kernel(filter.kernel.as_deref())?;
    let mut out = ResultsOut::new(format, a.samples);
    if a.all {
        let mut after = None;
        loop {
            let page =
                db.with(|s| s.results_page(&filter, ALL_PAGE, after, Direction::OldestFirst))?;
            out.print(&page.rows, db)?;
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        return out.finish();
    }
    let page = db.with(|s| s.results_page(&filter, a.limit, None, Direction::NewestFirst))?;
    if page.rows.is_empty() {
        // Scripts still get their empty document; a person gets the reason instead of a header.
        eprintln!("{}", why_no_results(db, &filter)?);
        if matches!(format, Format::Json | Format::Csv) {
            out.print(&[], db)?;
            return out.finish();
        }
        return Ok(());
    }
    let mut rows = page.rows;
    rows.reverse();
    out.print(&rows, db)?;
    out.finish()?;
    if page.next.is_some() {
        eprintln!(
            "(the newest {} matching results; --all prints every one, --limit N another number, --since a time window)",
            a.limit
        );
    }
    Ok(())
}

/// Refuses a `--kernel` the catalog does not have, listing the ones it has, before any query.
fn check_kernel(kernel: Option<&str>) -> anyhow::Result<()> {
    if let Some(k) = kernel {
        gpufleet_kernels::lookup_kernel(k, false).map_err(|e| anyhow::anyhow!("--kernel: {e}"))?;
    }
    Ok(())
}

/// Why no stored result matched `f`: an empty database, an agent name no result has (the
/// registered ones listed), or filters that select nothing together.
fn why_no_results(db: &Db, f: &ResultFilter) -> anyhow::Result<String> {
    let total: i64 = db
        .with(|s| s.result_status_counts())?
        .iter()
        .map(|(_, n)| n)
        .sum();
    if total == 0 {
        return Ok(
            "no results yet; run a suite first (gpufleet run --suite smoke --agent NAME)".into(),
        );
    }
    if let Some(agent) = &f.agent {
        let of_agent = ResultFilter {
            agent: Some(agent.clone()),
            ..Default::default()
        };
        let page = db.with(|s| s.results_page(&of_agent, 1, None, Direction::NewestFirst))?;
        if page.rows.is_empty() {
            let known: Vec<String> = db
                .with(|s| s.agents())?
                .into_iter()
                .map(|a| a.name)
                .collect();
            return Ok(format!(
                "no results of an agent named {} (registered agents: {}; `gpufleet agents list`)",
                gpufleet_kernels::quote(agent),
                if known.is_empty() {
                    "none".into()
                } else {
                    known.join(", ")
                }
            ));
        }
    }
    let given: Vec<String> = [
        ("--campaign", f.campaign_id.map(|c| c.to_string())),
        ("--kernel", f.kernel.clone()),
        ("--suite", f.suite.clone()),
        ("--agent", f.agent.clone()),
        ("--status", f.status.clone()),
        ("--since", f.since.map(|_| "…".to_string())),
    ]
    .into_iter()
    .filter_map(|(flag, v)| v.map(|v| format!("{flag} {v}")))
    .collect();
    Ok(format!(
        "none of the {total} stored results match {}; `gpufleet results` lists the newest",
        if given.is_empty() {
            "these filters".into()
        } else {
            given.join(" ")
        }
    ))
}

/// Prints results page by page in one format: one JSON array, one CSV header, one noise legend.
struct ResultsOut {
    format: Format,
    samples: bool,
    printed: usize,
    noisy: bool,
}

impl ResultsOut {
    fn new(format: Format, samples: bool) -> ResultsOut {
        ResultsOut {
            format,
            samples,
            printed: 0,
            noisy: false,
        }
    }

    fn print(&mut self, rows: &[ResultRow], db: &Db) -> anyhow::Result<()> {
        // print!, not write!: a reader that goes away (`| head`) ends the command quietly
        // (gpufleet_kernels::quiet_broken_pipes).
        match self.format {
            Format::Json => {
                for r in rows {
                    let sep = if self.printed == 0 { "[\n" } else { ",\n" };
                    print!("{sep}{}", serde_json::to_string_pretty(&result_json(r))?);
                    self.printed += 1;
                }
            }
            Format::Csv => {
                let text = results_csv(rows, self.samples, db)?;
                // The header once, on the first page.
                let body = if self.printed == 0 {
                    text.as_str()
                } else {
                    text.split_once('\n').map_or("", |(_, rest)| rest)
                };
                print!("{body}");
                self.printed += rows.len();
            }
            _ => {
                if !rows.is_empty() || self.printed == 0 {
                    let t = Table::of(RESULT_COLUMNS, rows);
                    print!("{}", t.render(self.format));
                }
                self.printed += rows.len();
                self.noisy |= rows.iter().any(|r| r.record.noisy);
            }
        }
        Ok(())
    }

    fn finish(self) -> anyhow::Result<()> {
        match self.format {
            Format::Json if self.printed == 0 => println!("[]"),
            Format::Json => println!("\n]"),
            _ if self.noisy => println!("\n~ noisy: {}", gpufleet_kernels::noisy_rule()),
            _ => {}
        }
        Ok(())
    }
}

/// Results as CSV: numbers plain (empty when missing), units in the headers, the full run id;
/// with `samples`, one line per iteration instead (long format).
fn results_csv(rows: &[ResultRow], samples: bool, db: &Db) -> anyhow::Result<String> {
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
    Ok(Table::of(RESULT_CSV_COLUMNS, rows).render(Format::Csv))
}

/// The campaign id of a result; empty for an ad-hoc run.
fn campaign_of(r: &ResultRow) -> String {
    r.record
        .campaign_id
        .map(|c| c.to_string())
        .unwrap_or_default()
}

/// `results` as a table for people.
const RESULT_COLUMNS: &[Column<ResultRow>] = &[
    Column::new("run", |r| r.record.run_id.chars().take(8).collect()),
    Column::new("campaign", campaign_of),
    Column::new("kernel", |r| {
        let rec = &r.record;
        if rec.variant.is_empty() || rec.variant == "default" {
            rec.kernel.clone()
        } else {
            format!("{}/{}", rec.kernel, rec.variant)
        }
    }),
    // Cut to keep the table inside a wide terminal; CSV and JSON carry every parameter.
    Column::new("params", |r| {
        let text = params_text(&r.record.params, ",");
        match text.char_indices().nth(PARAMS_SHOWN) {
            Some((i, _)) => format!("{}…", &text[..i]),
            None => text,
        }
    }),
    Column::new("dtype", |r| r.record.dtype.clone()),
    Column::new("mode", |r| r.record.mode.clone()),
    Column::new("env set", |r| or_dash(r.record.env_set())),
    Column::new("agent", |r| r.agent.clone()),
    Column::new("device", |r| r.record.device_id.clone()),
    Column::new("backend", |r| r.record.backend.clone()),
    Column::new("status", |r| r.record.status.clone()),
    Column::new("metric", |r| match r.record.ok_metric() {
        Some(v) if r.record.noisy => format!("{}~", fmt_metric(v)),
        Some(v) => fmt_metric(v),
        None => "-".into(),
    }),
    Column::new("unit", |r| or_dash(r.record.unit())),
    Column::new("median ms", |r| {
        r.record
            .median_s
            .map(|m| format!("{:.4}", m * 1e3))
            .unwrap_or_else(|| "-".into())
    }),
    Column::new("±ci %", |r| {
        r.record
            .ci_pct()
            .map(|c| format!("{c:.2}"))
            .unwrap_or_else(|| "-".into())
    }),
    // The robust spread only: a plain CV that one slow iteration inflates is in CSV and JSON.
    Column::new("rcv %", |r| {
        r.record
            .robust_cv
            .map(|c| format!("{:.1}", c * 100.0))
            .unwrap_or_else(|| "-".into())
    }),
    Column::new("message", |r| r.record.message.chars().take(60).collect()),
];

/// Characters of a result's parameters the table shows.
const PARAMS_SHOWN: usize = 40;

/// Milliseconds for CSV, from seconds.
fn csv_ms(v: Option<f64>) -> String {
    csv_number(v.map(|s| s * 1e3))
}

/// `results --format csv`: numbers plain (empty when missing), units in the headers.
const RESULT_CSV_COLUMNS: &[Column<ResultRow>] = &[
    Column::new("result_id", |r| r.id.to_string()),
    Column::new("run_id", |r| r.record.run_id.clone()),
    Column::new("campaign", campaign_of),
    Column::new("kernel", |r| r.record.kernel.clone()),
    Column::new("variant", |r| r.record.variant.clone()),
    Column::new("params", |r| params_text(&r.record.params, ";")),
    Column::new("dtype", |r| r.record.dtype.clone()),
    Column::new("mode", |r| r.record.mode.clone()),
    Column::new("env_set", |r| r.record.env_set().to_string()),
    Column::new("agent", |r| r.agent.clone()),
    Column::new("device", |r| r.record.device_id.clone()),
    Column::new("backend", |r| r.record.backend.clone()),
    Column::new("status", |r| r.record.status.clone()),
    Column::new("metric", |r| csv_number(r.record.ok_metric())),
    Column::new("unit", |r| r.record.unit().to_string()),
    Column::new("pct_of_peak", |r| csv_number(r.record.pct_of_peak)),
    Column::new("peak_suspect", |r| r.record.peak_suspect().to_string()),
    Column::new("peak_source", |r| r.record.peak_source.clone()),
    Column::new("median_ms", |r| csv_ms(r.record.median_s)),
    Column::new("p10_ms", |r| csv_ms(r.record.p10_s)),
    Column::new("p90_ms", |r| csv_ms(r.record.p90_s)),
    Column::new("ci_low_ms", |r| csv_ms(r.record.ci_low_s)),
    Column::new("ci_high_ms", |r| csv_ms(r.record.ci_high_s)),
    Column::new("ci_pct", |r| csv_number(r.record.ci_pct())),
    Column::new("target_ci_pct", |r| csv_number(r.record.target_ci_pct)),
    Column::new("cv_pct", |r| csv_number(r.record.cv.map(|c| c * 100.0))),
    Column::new("robust_cv_pct", |r| {
        csv_number(r.record.robust_cv.map(|c| c * 100.0))
    }),
    Column::new("p25_ms", |r| csv_ms(r.record.p25_s)),
    Column::new("p75_ms", |r| csv_ms(r.record.p75_s)),
    Column::new("upper_fence_ms", |r| csv_ms(r.record.upper_fence_s)),
    Column::new("outliers_high", |r| {
        r.record
            .outliers_high
            .map(|n| n.to_string())
            .unwrap_or_default()
    }),
    Column::new("noisy", |r| r.record.noisy.to_string()),
    Column::new("iterations", |r| r.record.iterations.to_string()),
    Column::new("avg_w", |r| csv_number(r.record.avg_watts)),
    Column::new("energy_j", |r| csv_number(r.record.energy_j)),
    Column::new("created_at", |r| csv_number(r.record.created_at)),
    Column::new("message", |r| r.record.message.clone()),
];

/// `campaigns`.
pub fn campaigns(db: &Db, output: super::Output) -> anyhow::Result<()> {
    let rows = db.with(|s| s.campaigns())?;
    let format = output.format()?;
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
            "wrote {} pages to {} ({} results, {} histories, {} campaigns, {} devices); open {}",
            summary.pages,
            a.html.display(),
            summary.runs,
            summary.histories,
            summary.campaigns,
            summary.devices,
            a.html.join("index.html").display()
        );
    }
    Ok(())
}
