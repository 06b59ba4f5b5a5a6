//! `/compare`: the matrix of the latest result of each spec on each device, its filters, and the
//! CSV/JSON of exactly what it shows.

use super::{base, page, page_rows};
use crate::compare::{By, Cell, Pivot, csv, ratio};
use crate::store::{ResultFilter, ResultRecord, ResultRow, Store};
use crate::table::{fmt_metric, fmt_pct, or_dash, params_text, per_watt_unit};
use crate::web::links::{CompareQuery, HistoryQuery, Links, Scope};
use crate::web::page::{Page, WebError};
use crate::web::svg::{RatioCell, RatioRow, compare_chart, esc};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::fmt::Write;

/// The matrix: the pivot by device of what the filters show, and the filters' options.
pub struct Matrix {
    pivot: Pivot,
    options: [BTreeSet<String>; 4],
}

impl Matrix {
    /// Every shown cell, row by row (the CSV/JSON download).
    pub fn cells(&self) -> Vec<&Cell> {
        self.pivot.cells()
    }
}

/// The env-set filter's name of a result: its set, or `-` for none.
fn env_option(r: &ResultRow) -> String {
    or_dash(r.record.env_set())
}

/// Builds the matrix from the latest result of each spec on each device.
///
/// # Errors
/// [`WebError::BadRequest`] for a baseline that names no column; store errors.
pub fn matrix(store: &Store, q: &CompareQuery, scope: &Scope) -> Result<Matrix, WebError> {
    let all = store.results(&ResultFilter {
        latest_per_device_and_key: true,
        summary_only: true,
        ..Default::default()
    })?;
    let all: Vec<ResultRow> = all.into_iter().filter(|r| scope.has_result(r)).collect();
    let mut options: [BTreeSet<String>; 4] = Default::default();
    for r in &all {
        options[0].extend(r.suite.clone());
        options[1].insert(r.record.kernel.clone());
        options[2].insert(r.record.dtype.clone());
        options[3].insert(env_option(r));
    }
    let keep = |want: &str, have: &str| want.is_empty() || want == have;
    let shown: Vec<ResultRow> = all
        .into_iter()
        .filter(|r| {
            keep(&q.suite, r.suite.as_deref().unwrap_or(""))
                && keep(&q.kernel, &r.record.kernel)
                && keep(&q.dtype, &r.record.dtype)
                && (q.env.is_empty() || q.env == r.record.env_set() || q.env == env_option(r))
        })
        .collect();
    let mut pivot = Pivot::new(shown, By::Device);
    if !q.baseline.is_empty() {
        let Some(col) = pivot.columns.iter().position(|c| c.key == q.baseline) else {
            return Err(WebError::BadRequest(format!(
                "baseline {:?} is not a column of this view (columns are agent:device)",
                crate::web::page::clip(&q.baseline)
            )));
        };
        pivot.against_column(col);
    }
    Ok(Matrix { pivot, options })
}

/// A matrix cell for the page: the relative figure (or % change against the baseline column)
/// and the CSS classes that colour it.
fn cell_view(p: &Pivot, col: usize, c: &Cell) -> (Option<String>, Vec<&'static str>) {
    let mut class = Vec::new();
    let relative = if !c.record().is_ok() {
        class.push("failed");
        None
    } else if p.baseline_column == Some(col) {
        class.push("base");
        Some("baseline".to_string())
    } else if p.baseline_column.is_some() {
        match (c.change_pct, c.better) {
            (Some(pct), Some(better)) => {
                class.push(if better { "better" } else { "worse" });
                Some(format!("{pct:+.1}%"))
            }
            _ => None,
        }
    } else {
        c.relative.map(|r| {
            class.push(if (r - 1.0).abs() < 1e-9 {
                "best"
            } else if r > 1.0 {
                "better"
            } else {
                "worse"
            });
            format!("×{r:.2}")
        })
    };
    if c.record().noisy {
        class.push("noisy");
    }
    (relative, class)
}

/// The `<td>` of one cell (or of a missing one): its figure, marks, tooltip and links. Written
/// here, not in the template: at a million results the matrix has 2,700 cells, and a template
/// object per cell cost more than reading them (docs/PERFORMANCE.md, issue 35).
fn cell_html(p: &Pivot, col: usize, c: Option<&Cell>, links: &Links, out: &mut String) {
    let Some(c) = c else {
        out.push_str("<td class=\"none\">–</td>");
        return;
    };
    let r = c.record();
    let hq = HistoryQuery {
        spec: r.spec_key.clone(),
        agent: c.agent().to_string(),
        device: r.device_id.clone(),
        scale: String::new(),
    };
    let (relative, class) = cell_view(p, col, c);
    let unit = r.unit();
    let mut extra = Vec::new();
    if let Some(pct) = r.pct_of_peak {
        extra.push(if r.peak_suspect() {
            format!("peak? {} of a peak from {}", fmt_pct(pct), r.peak_source)
        } else {
            format!("{} of peak", fmt_pct(pct))
        });
    }
    if let Some(w) = r.metric_per_watt {
        extra.push(format!("{} {}", fmt_metric(w), per_watt_unit(unit)));
    }
    if let Some(j) = r.joules_per_unit {
        extra.push(format!(
            "{j:.3e} J/{}",
            unit.split('/').next().unwrap_or("")
        ));
    }
    // A roofline point without arithmetic (pairs=0) does 0 FLOP/s by design: what it measures is
    // the bandwidth, which it records.
    if r.ok_metric() == Some(0.0)
        && let Some(gbps) = r
            .config
            .get(gpufleet_kernels::ACHIEVED_GBPS)
            .and_then(Value::as_str)
    {
        extra.push(format!("no arithmetic: {gbps} GB/s moved"));
    }
    let title = if r.is_ok() {
        let ci = r
            .ci_pct()
            .map(|v| format!(", median ±{v:.1}%"))
            .unwrap_or_default();
        // The robust spread first; the plain CV, which one slow iteration moves, after it.
        let robust = r
            .robust_cv
            .map(|v| format!("robust cv {:.1}%", v * 100.0))
            .unwrap_or_else(|| "robust cv -".into());
        let cv =
            r.cv.map(|v| format!(", plain cv {:.1}% (every iteration)", v * 100.0))
                .unwrap_or_default();
        let noisy = r.noisy_note();
        format!("{robust}{ci}{cv}{noisy}")
    } else {
        format!("{}: {}", r.status, r.message)
    };
    let run = esc(&links.run(c.result.id));
    let sort = c.metric().map(|v| v.to_string()).unwrap_or_default();
    // Writing to a String cannot fail.
    let _ = write!(
        out,
        "<td class=\"num cell {}\" title=\"{}\" data-sort=\"{sort}\">",
        class.join(" "),
        esc(&title)
    );
    let _ = match c.metric() {
        Some(v) => write!(
            out,
            "<a href=\"{run}\">{}</a> <span class=\"unit\">{}</span>",
            esc(&fmt_metric(v)),
            esc(unit)
        ),
        None => write!(
            out,
            "<a href=\"{run}\" class=\"status\">{}</a>",
            esc(&r.status)
        ),
    };
    if let Some(relative) = relative {
        let _ = write!(out, "<br><span class=\"rel\">{}</span>", esc(&relative));
    }
    if !extra.is_empty() {
        let _ = write!(
            out,
            "<br><span class=\"muted small\">{}</span>",
            esc(&extra.join(" · "))
        );
    }
    let _ = write!(
        out,
        " <a class=\"hist\" href=\"{}\" title=\"history\">▸</a></td>",
        esc(&links.history(&hq))
    );
}

/// A matrix cell for the chart: its figure relative to the baseline column (or, without one, to
/// the best of its row), oriented so above 1 is better.
fn ratio_cell(p: &Pivot, col: usize, c: &Cell, device: &str, links: &Links) -> RatioCell {
    let r = c.record();
    let reference = p.baseline_column == Some(col);
    let figure = match (c.metric(), p.baseline_column) {
        (None, _) => None,
        (Some(_), Some(_)) if reference => Some(1.0),
        (Some(v), Some(_)) => c.baseline.and_then(|b| ratio(v, b, r.higher_is_better())),
        (Some(_), None) => c.relative,
    };
    let what = match (c.metric(), figure) {
        (Some(v), Some(f)) if !reference => {
            format!("{} {}, ×{f:.3}", fmt_metric(v), r.unit())
        }
        (Some(v), _) if reference => format!("{} {}", fmt_metric(v), r.unit()),
        (Some(v), None) if p.baseline_column.is_some() => format!(
            "{} {}; no ratio: the baseline column has no figure in this row",
            fmt_metric(v),
            r.unit()
        ),
        (Some(v), _) => format!(
            "{} {}; no ratio: no cell of this row is quiet enough to be the best",
            fmt_metric(v),
            r.unit()
        ),
        (None, _) => format!("{}: {}", r.status, crate::web::page::clip(&r.message)),
    };
    RatioCell {
        ratio: figure,
        reference,
        title: format!("{device}: {what}{}", if r.noisy { " (noisy)" } else { "" }),
        href: links.run(c.result.id),
    }
}

/// A spec in one line for the chart's label: `kernel/variant params dtype @env`.
fn spec_label(r: &ResultRecord) -> String {
    let mut label = r.kernel.clone();
    if !r.variant.is_empty() {
        label = format!("{label}/{}", r.variant);
    }
    for part in [params_text(&r.params, ","), r.dtype.clone()] {
        if !part.is_empty() {
            label = format!("{label} {part}");
        }
    }
    if !r.env_set().is_empty() {
        label = format!("{label} @{}", r.env_set());
    }
    label
}

/// Spec rows per page of `/compare` at most: a matrix of thousands of specs is pages, not one page
/// of megabytes. The CSV/JSON downloads and the static report give every row.
pub const ROWS_PER_PAGE: usize = 200;
/// Cells per page of `/compare` at most (about 650 bytes each with the chart): a page of many
/// devices has fewer rows, so no page passes 2 MB; never fewer than [`MIN_ROWS_PER_PAGE`] rows.
pub const CELLS_PER_PAGE: usize = 2_400;
/// Spec rows per page of `/compare` at least, however many columns it shows.
pub const MIN_ROWS_PER_PAGE: usize = 20;

/// Spec rows per page for `columns` device columns on it.
pub fn rows_per_page(columns: usize) -> usize {
    (CELLS_PER_PAGE / columns.max(1)).clamp(MIN_ROWS_PER_PAGE, ROWS_PER_PAGE)
}
/// Device columns per page of `/compare` (`cols=N`): a fleet of thousands of devices is pages of
/// columns too (`/groups` summarises identical ones); the downloads give every column.
pub const COLUMNS_PER_PAGE: usize = 100;

/// `/compare`.
pub fn compare_page(
    store: &Store,
    links: &Links,
    q: &CompareQuery,
    scope: &Scope,
) -> Result<Page, WebError> {
    let m = matrix(store, q, scope)?;
    let p = &m.pivot;
    let (cols, column_pager) = page_rows(p.columns.len(), COLUMNS_PER_PAGE, q.cols, links, |n| {
        links.compare_with(&CompareQuery {
            cols: Some(n),
            ..q.clone()
        })
    })?;
    // Each column's device name and its label, `name (agent:device)`.
    let devices: Vec<String> = p
        .columns
        .iter()
        .map(|c| c.devices.iter().next().cloned().unwrap_or_default())
        .collect();
    let labels: Vec<String> = p
        .columns
        .iter()
        .zip(&devices)
        .map(|(c, device)| format!("{device} ({})", c.key))
        .collect();
    let columns: Vec<Value> = p.columns[cols.clone()]
        .iter()
        .zip(devices[cols.clone()].iter().zip(&labels[cols.clone()]))
        .map(|(c, (device, label))| {
            let (agent, device_id) = c.key.split_once(':').unwrap_or((&c.key, ""));
            let backend = device_id.split(':').next().unwrap_or("");
            json!({"key": c.key, "label": label, "device": device, "agent": agent, "backend": backend})
        })
        .collect();
    let baseline_label = p.baseline_column.map(|i| labels[i].clone());
    let per_page = rows_per_page(cols.len());
    let (shown, pager) = page_rows(p.rows.len(), per_page, q.page, links, |n| {
        links.compare_with(&CompareQuery {
            page: Some(n),
            ..q.clone()
        })
    })?;
    let chart_reference = if p.baseline_column.is_some() {
        "the baseline"
    } else {
        "the best of each row"
    };
    let chart_rows: Vec<RatioRow> = p.rows[shown.clone()]
        .iter()
        .map(|row| RatioRow {
            label: spec_label(row.spec()),
            cells: row
                .cells
                .iter()
                .enumerate()
                .skip(cols.start)
                .take(cols.len())
                .map(|(i, c)| c.as_ref().map(|c| ratio_cell(p, i, c, &devices[i], links)))
                .collect(),
        })
        .collect();
    let chart = (!chart_rows.is_empty())
        .then(|| compare_chart(&labels[cols.clone()], &chart_rows, chart_reference));
    let rows: Vec<Value> = p.rows[shown]
        .iter()
        .map(|row| {
            let mut cells = String::new();
            for (i, c) in row.cells.iter().enumerate().skip(cols.start).take(cols.len()) {
                cell_html(p, i, c.as_ref(), links, &mut cells);
            }
            let spec = row.spec();
            json!({"kernel": spec.kernel, "variant": spec.variant, "params": params_text(&spec.params, ", "),
                   "dtype": spec.dtype, "mode": spec.mode, "env_set": spec.env_set(), "cells": cells})
        })
        .collect();
    let names = [
        ("suite", "Suite", &q.suite),
        ("kernel", "Kernel", &q.kernel),
        ("dtype", "Dtype", &q.dtype),
        ("env", "Env set", &q.env),
    ];
    let filters: Vec<Value> = names
        .iter()
        .zip(&m.options)
        .map(|((name, label, value), opts)| json!({"name": name, "label": label, "value": value, "options": opts}))
        .collect();
    let base = base(links, store, "Compare", "compare")?;
    let every_row = CompareQuery {
        page: None,
        cols: None,
        ..q.clone()
    };
    Ok(page(
        "compare.html",
        base,
        json!({
            "columns": columns, "rows": rows, "filters": filters, "baseline": q.baseline,
            "baseline_label": baseline_label, "noisy_rule": gpufleet_kernels::noisy_rule(),
            "pager": pager, "column_pager": column_pager, "chart": chart, "chart_reference": chart_reference,
            "csv_href": links.compare_download(&every_row, "csv"), "json_href": links.compare_download(&every_row, "json"),
            "self_href": links.compare_with(q),
        }),
    ))
}

/// The matrix as CSV: one line per cell, numbers unformatted (the same columns as
/// `gpufleet compare --format csv`).
pub fn matrix_csv(m: &Matrix) -> String {
    csv(&m.cells())
}
