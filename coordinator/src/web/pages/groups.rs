//! `/groups`: a campaign's sibling groups (devices of one model, backend, driver and memory), one
//! strip per spec with a dot per device, the outliers marked, linked to their result and named
//! with their likely cause (see [`crate::outliers`]). Bounded: the groups with outliers first,
//! at most [`MAX_STRIPS`] strips.

use super::{base, page};
use crate::outliers::OutlierConfig;
use crate::outliers::collect::{campaign_outliers, latest_with_results};
use crate::store::Store;
use crate::table::fmt_metric;
use crate::web::links::{Links, Scope};
use crate::web::page::{Page, WebError};
use crate::web::svg::{StripDot, strip_chart};
use serde_json::{Value, json};

/// The most strips one page draws (a provider's campaign has thousands of group × spec pairs):
/// those with outliers first.
pub const MAX_STRIPS: usize = 60;

/// `/groups` for the campaign `scope` names, else the latest with results.
pub fn groups(store: &Store, links: &Links, scope: &Scope) -> Result<Page, WebError> {
    let campaigns = store.campaigns()?;
    let campaign = match scope.campaign {
        Some(id) => campaigns.iter().find(|c| c.id == id),
        None => latest_with_results(&campaigns),
    };
    let m = base(links, store, "Sibling groups", "groups")?;
    let Some(campaign) = campaign else {
        return Ok(page("groups.html", m, json!({ "groups": [] })));
    };
    let cfg = OutlierConfig::DEFAULT;
    let mut reports = campaign_outliers(store, campaign.id, &cfg)?;
    reports.sort_by_key(|g| {
        (
            std::cmp::Reverse(g.outliers().count()),
            std::cmp::Reverse(g.devices),
        )
    });
    let mut strips = 0;
    let mut shown = Vec::new();
    let (mut groups_left, mut strips_left) = (0, 0);
    for g in &reports {
        if g.specs.is_empty() {
            continue;
        }
        if strips >= MAX_STRIPS {
            groups_left += 1;
            strips_left += g.specs.len();
            continue;
        }
        let mut specs: Vec<_> = g.specs.iter().collect();
        specs.sort_by_key(|s| std::cmp::Reverse(s.outliers.len()));
        let take = specs.len().min(MAX_STRIPS - strips);
        strips_left += specs.len() - take;
        strips += take;
        let rows: Vec<Value> = specs[..take]
            .iter()
            .map(|s| {
                let dots: Vec<StripDot> =
                    s.points
                        .iter()
                        .map(|p| StripDot {
                            value: p.value,
                            label: format!("{} {}", p.agent, p.device_id),
                            href: links.run(p.result_id),
                            outlier: s.outliers.iter().find(|o| o.result_id == p.result_id).map(
                                |o| {
                                    format!(
                                        "{:.1} % worse than the median; likely {}",
                                        o.gap_pct, o.cause
                                    )
                                },
                            ),
                        })
                        .collect();
                json!({
                    "spec": s.spec_key,
                    "median": format!("{} {}", fmt_metric(s.median), s.unit),
                    "spread": format!("{} {}", fmt_metric(s.spread), s.unit),
                    "devices": s.devices,
                    "svg": strip_chart(&dots, s.median, &s.unit, &s.spec_key),
                    "outliers": s.outliers.iter().map(|o| json!({
                        "device": format!("{} {}", o.agent, o.device_id),
                        "value": format!("{} {}", fmt_metric(o.value), s.unit),
                        "gap": format!("{:.1} %", o.gap_pct),
                        "cause": o.cause,
                        "rerun": o.rerun(),
                        "href": links.run(o.result_id),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        shown.push(json!({
            "key": g.key.to_string(),
            "devices": g.devices,
            "outliers": g.outliers().count(),
            "specs": rows,
        }));
    }
    let small = reports.iter().filter(|g| g.specs.is_empty()).count();
    Ok(page(
        "groups.html",
        m,
        json!({
            "campaign": {"id": campaign.id, "suite": campaign.suite, "href": links.campaign(campaign.id)},
            "groups": shown,
            "outliers": reports.iter().map(|g| g.outliers().count()).sum::<usize>(),
            "small": small,
            "min_group": cfg.min_group, "k": cfg.k, "min_gap_pct": cfg.min_gap_pct,
            "groups_left": groups_left, "strips_left": strips_left,
        }),
    ))
}
