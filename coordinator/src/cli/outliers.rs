//! `gpufleet outliers`: the devices that do worse than their identical siblings in a campaign,
//! each with its likely cause (see [`crate::outliers`]). Exits 1 when there is one, so a
//! provider's nightly script can act on it.

use super::args::OutliersArgs;
use crate::db::Db;
use crate::outliers::OutlierConfig;
use crate::outliers::collect::{campaign_outliers, latest_with_results};
use crate::table::{Format, Table, fmt_metric};
use anyhow::{anyhow, bail};

/// `outliers`: 0 when no outlier, 1 when any.
///
/// # Errors
/// Bad knobs, no such campaign, no campaign with results, a store that cannot be read.
pub fn outliers(db: &Db, a: OutliersArgs) -> anyhow::Result<i32> {
    if !(a.k.is_finite() && a.k > 0.0) {
        bail!("--k must be a positive number of spreads, got {}", a.k);
    }
    if !(a.min_gap_pct.is_finite() && (0.0..100.0).contains(&a.min_gap_pct)) {
        bail!("--min-gap-pct must be in [0, 100), got {}", a.min_gap_pct);
    }
    if a.min_group < 3 {
        bail!(
            "--min-group must be at least 3 (a median of fewer says little), got {}",
            a.min_group
        );
    }
    let cfg = OutlierConfig {
        min_group: a.min_group,
        k: a.k,
        min_gap_pct: a.min_gap_pct,
    };
    let format = a.output.format()?;
    let campaigns = db.with(|s| s.campaigns())?;
    let campaign = match a.campaign {
        Some(id) => campaigns
            .iter()
            .find(|c| c.id == id)
            .ok_or_else(|| anyhow!("--campaign {id}: no such campaign (`gpufleet campaigns` lists them)"))?,
        None => latest_with_results(
            campaigns
                .iter()
                .filter(|c| a.suite.as_ref().is_none_or(|s| &c.suite == s)),
        )
        .ok_or_else(|| match &a.suite {
                Some(s) => anyhow!("--suite {s}: no campaign of that suite has results"),
                None => anyhow!("no campaign has results yet: run a suite first (`gpufleet run --suite smoke --agent NAME`)"),
            })?,
    };
    let id = campaign.id;
    let groups = db.with(|s| campaign_outliers(s, id, &cfg))?;
    let found: usize = groups.iter().map(|g| g.outliers().count()).sum();
    if format == Format::Json {
        let v = serde_json::json!({
            "campaign": id,
            "suite": campaign.suite,
            "config": {"k": cfg.k, "min_gap_pct": cfg.min_gap_pct, "min_group": cfg.min_group},
            "outliers": found,
            "groups": groups,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(i32::from(found > 0));
    }
    let judged = groups.iter().filter(|g| !g.specs.is_empty()).count();
    println!(
        "campaign {id} ({}): {found} outlier(s) in {} sibling group(s), {judged} with {} or more devices on a spec",
        campaign.suite,
        groups.len(),
        cfg.min_group
    );
    let mut t = Table::new(&[
        "group",
        "spec",
        "agent",
        "device",
        "value",
        "median",
        "worse",
        "spreads",
        "likely cause",
        "rerun",
        "result",
    ]);
    for g in &groups {
        for (spec, o) in g.outliers() {
            t.push(vec![
                g.key.to_string(),
                spec.spec_key.clone(),
                o.agent.clone(),
                o.device_id.clone(),
                format!("{} {}", fmt_metric(o.value), spec.unit),
                format!("{} ± {}", fmt_metric(spec.median), fmt_metric(spec.spread)),
                format!("{:.1} %", o.gap_pct),
                if o.spreads.is_finite() {
                    format!("{:.1}", o.spreads)
                } else {
                    "∞".into()
                },
                o.cause.clone(),
                o.rerun(),
                o.result_id.to_string(),
            ]);
        }
    }
    if found > 0 {
        print!("{}", t.render(format));
    }
    let small: Vec<_> = groups.iter().filter(|g| g.specs.is_empty()).collect();
    if let Some(largest) = small.iter().max_by_key(|g| g.devices) {
        println!(
            "not judged: {} group(s) with fewer than {} devices on every spec (the largest: {}, {} device(s))",
            small.len(),
            cfg.min_group,
            largest.key,
            largest.devices
        );
    }
    Ok(i32::from(found > 0))
}
