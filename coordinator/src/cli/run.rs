//! `gpufleet run`: a suite, or one ad-hoc spec, on one or more agents.

use super::agents::{lookup_agent, refuse_ended_demo_agent};
use super::args::RunArgs;
use super::parse::{campaign_options, parse_kv};
use super::results::print_outcome;
use crate::campaign::error::CampaignError;
use crate::campaign::handoff::{hand_off, needs_handoff};
use crate::campaign::plan::resolve_runs;
use crate::campaign::progress::CliReporter;
use crate::campaign::request::{CampaignRequest, RetryPolicy};
use crate::campaign::run::run_campaign;
use crate::campaign::selection::Selection;
use crate::db::Db;
use crate::table::{Format, Table};
use anyhow::{Context, bail};
use gpufleet_kernels::{PartialSettings, Suite, SuiteRun, find_kernel, human_bytes};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The runs of `gpufleet run`: a suite's, or one ad-hoc spec. The ad-hoc spec is validated, and
/// its settings resolved, with the campaign's runs
/// ([`resolve_runs`](crate::campaign::plan::resolve_runs)), before any agent is contacted.
///
/// # Errors
/// An unknown suite or `--kernel`, a malformed `--param`.
pub fn runs_of(args: &RunArgs) -> anyhow::Result<(String, Vec<SuiteRun>, Vec<String>)> {
    if let Some(name) = &args.suite {
        let suite = Suite::resolve(name)?;
        for k in &args.kernels {
            gpufleet_kernels::lookup_kernel(k, false)
                .map_err(|e| anyhow::anyhow!("--kernel: {e}"))?;
            if !suite.runs.iter().any(|r| &r.kernel == k) {
                let mut theirs: Vec<&str> = Vec::new();
                for r in &suite.runs {
                    if !theirs.contains(&r.kernel.as_str()) {
                        theirs.push(&r.kernel);
                    }
                }
                bail!(
                    "--kernel: the suite `{}` has no run of `{k}` (its kernels: {}); without --suite, `--kernel {k}` runs it alone",
                    suite.name,
                    theirs.join(", ")
                );
            }
        }
        return Ok((suite.name.clone(), suite.runs, args.kernels.clone()));
    }
    let [kernel] = args.kernels.as_slice() else {
        bail!(
            "without --suite, give exactly one --kernel (and optionally --variant, --param NAME=VALUE)"
        );
    };
    let mut params = match &args.model_config {
        Some(path) => gpufleet_kernels::llm::read_shape_params(path)
            .map_err(|e| anyhow::anyhow!("--model-config {e}"))?,
        None => BTreeMap::new(),
    };
    for (k, v) in parse_kv(&args.params, "param")? {
        // A name (`model=1b`) for a parameter that has names; a number otherwise. An unknown
        // kernel or parameter is refused when the runs are resolved.
        let def = find_kernel(kernel).and_then(|d| d.param(&k));
        let n = match def {
            Some(d) => d
                .parse_value(&v)
                .map_err(|e| anyhow::anyhow!("--param {e}"))?,
            None => v
                .parse()
                .with_context(|| format!("--param {k}={v}: the value must be an integer"))?,
        };
        params.insert(k, n);
    }
    // The kernel's default variant unless one is named (an unknown kernel keeps "" and is
    // refused when the runs are resolved).
    let variant = args
        .variant
        .clone()
        .or_else(|| find_kernel(kernel).map(|k| k.default_variant.to_string()))
        .unwrap_or_default();
    let run = SuiteRun {
        kernel: kernel.clone(),
        variants: Some(vec![variant]),
        params,
        dtype: args.dtype,
        mode: args.mode,
        // What the flags give; the rest (and the overrides) are applied when the campaign is
        // planned, like a suite's.
        settings: PartialSettings {
            warmup: Some(args.warmup),
            min_iterations: Some(args.min_iterations),
            min_seconds: Some(args.min_seconds),
            ..PartialSettings::default()
        },
        env: BTreeMap::new(),
    };
    Ok(("adhoc".to_string(), vec![run], Vec::new()))
}

/// `run --dry-run`: every spec the runs resolve to, with its weights and device memory, as a table
/// or JSON; nothing contacted or stored.
fn dry_run(args: &RunArgs, runs: &[SuiteRun], kernels: &[String]) -> anyhow::Result<i32> {
    let resolved = resolve_runs(runs, &selection(args, kernels)?)?;
    let mut rows = Vec::new();
    for r in &resolved {
        if !kernels.is_empty() && !kernels.contains(&r.run.kernel) {
            continue;
        }
        for p in &r.problems {
            rows.push((
                p.spec_key(r.run.mode),
                p.weight_bytes(),
                p.footprint_bytes(),
            ));
        }
    }
    if args.json {
        let doc: Vec<_> = rows
            .iter()
            .map(|(spec, weights, memory)| {
                serde_json::json!({"spec": spec, "weight_bytes": weights, "memory_bytes": memory})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(0);
    }
    let mut table = Table::new(&["spec", "weights", "memory"]);
    for (spec, weights, memory) in &rows {
        let w = weights.map_or("-".to_string(), human_bytes);
        table.push(vec![spec.clone(), w, human_bytes(*memory)]);
    }
    print!("{}", table.render(Format::Table));
    eprintln!(
        "{} spec(s); memory is every buffer a device holds for one (weights, inputs, outputs); \
         nothing was run",
        rows.len()
    );
    Ok(0)
}

/// The devices, options and power window `run`'s flags select.
fn selection(args: &RunArgs, kernels: &[String]) -> anyhow::Result<Selection> {
    Ok(Selection {
        devices: args.devices.clone(),
        options: campaign_options(&args.overrides, &args.backends, kernels)?,
        power_window_s: args.power_window_s,
    })
}

/// `run`.
pub async fn run(db: &Db, args: RunArgs, connect_timeout: Duration) -> anyhow::Result<i32> {
    let (suite, runs, kernels) = runs_of(&args)?;
    if args.dry_run {
        return dry_run(&args, &runs, &kernels);
    }
    let agents = args
        .agents
        .iter()
        .map(|n| lookup_agent(db, n))
        .collect::<anyhow::Result<Vec<_>>>()?;
    for a in &agents {
        refuse_ended_demo_agent(a).await?;
    }
    let selection = selection(&args, &kernels)?;
    let reporter = Arc::new(CliReporter::new());
    let req = CampaignRequest {
        description: format!("gpufleet run on {}", args.agents.join(", ")),
        suite,
        runs,
        agents,
        selection,
        retry: RetryPolicy::connecting_within(connect_timeout),
    };
    let outcome = if needs_handoff(&req) {
        hand_off(db, req, reporter.as_ref()).await
    } else {
        run_campaign(db, req, reporter.clone()).await
    };
    reporter.finish();
    let outcome = match outcome {
        // Every agent down is a failed run (1, like one agent down), not a usage error (2); the
        // campaign holds an `unreachable` row for each.
        Err(e @ CampaignError::NoAgent(_)) => {
            eprintln!("error: {e}");
            return Ok(1);
        }
        other => other?,
    };
    print_outcome(db, &outcome, args.json)
}
