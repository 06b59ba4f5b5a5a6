//! Side-by-side comparison of results. Pure: rows in, a pivot and rendered text out.
//!
//! A [`Pivot`] has one row per spec (kernel, variant, params, dtype, mode, env set) and one column
//! per device, agent or backend ([`By`]). In each row, `relative` is 1.00 for the best `ok`,
//! non-noisy cell and below 1 for the others, whichever way the metric improves (GFLOP/s up, µs
//! down). A [`Baseline`] (a column, or the same device's result in another campaign) adds the %
//! change of every cell, marked better or worse by the metric's direction. Cells that are not `ok`
//! have no metric; the table shows their status and a footnote with the reason.

use crate::table::{Format, Table};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One device's latest result for one spec key.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompareRow {
    pub spec_key: String,
    pub kernel: String,
    pub variant: String,
    pub params: BTreeMap<String, i64>,
    pub dtype: String,
    pub mode: String,
    pub env_set: String,
    pub agent: String,
    pub device_id: String,
    pub device_name: String,
    pub backend: String,
    pub status: String,
    pub message: String,
    pub metric: Option<f64>,
    pub unit: String,
    pub higher_is_better: bool,
    pub pct_of_peak: Option<f64>,
    /// Where the peak behind `pct_of_peak` came from (`cpu-table`, `cpuinfo`, `driver`...).
    pub peak_source: String,
    pub cv: Option<f64>,
    /// Half-width of the median's 95% interval, percent of the median.
    pub ci_pct: Option<f64>,
    /// CV above 10% or the interval wider than its target: never the best of its row.
    pub noisy: bool,
    pub iterations: u32,
    /// Average power over the kernel window, watts (devices with a sensor).
    pub avg_watts: Option<f64>,
    /// The metric per watt: GFLOP/s/W or GB/s/W.
    pub metric_per_watt: Option<f64>,
    /// Energy per unit of work: J/GFLOP or J/GB.
    pub joules_per_unit: Option<f64>,
    /// This row's metric relative to the best cell of its pivot row (1 = best).
    pub relative: Option<f64>,
    /// The baseline's metric for this cell, when a baseline was asked for and has one.
    pub baseline: Option<f64>,
    /// (metric − baseline) / baseline × 100.
    pub change_pct: Option<f64>,
    /// Whether the change is for the better (by `higher_is_better`); `None` without a change.
    pub better: Option<bool>,
    pub run_id: String,
    /// The stored result's row id (links to its page).
    pub result_id: i64,
}

impl CompareRow {
    /// True when `% of peak` is above 100: the peak is wrong (a base clock, a missing boost
    /// table entry), so the figure must not be shown as a plain number.
    pub fn peak_suspect(&self) -> bool {
        self.pct_of_peak.is_some_and(|p| p > 100.0)
    }
}

/// What the columns of a comparison are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum By {
    /// One column per device (`agent:device`): the same spec on every device.
    #[default]
    Device,
    /// One column per agent; rows also split by device id (`opencl:0`).
    Agent,
    /// One column per backend; rows also split by agent (the backends of one host side by side).
    Backend,
}

/// What the % change of each cell is against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Baseline {
    /// No change column: cells are relative to the best of their row.
    None,
    /// A column of the pivot, named by its key, a device id or an unambiguous device name.
    Column(String),
    /// The same device's result of the same spec in this campaign (the caller looks them up).
    Campaign(i64),
}

impl Baseline {
    /// `--baseline`: all digits is a campaign id, anything else a column.
    pub fn parse(text: &str) -> Baseline {
        let t = text.trim();
        if t.is_empty() {
            Baseline::None
        } else if t.bytes().all(|b| b.is_ascii_digit()) {
            t.parse()
                .map_or(Baseline::Column(t.into()), Baseline::Campaign)
        } else {
            Baseline::Column(t.to_string())
        }
    }
}

/// `value` relative to `reference`, oriented so that above 1 is better whichever way the metric
/// improves; `None` unless both are positive.
pub fn ratio(value: f64, reference: f64, higher_is_better: bool) -> Option<f64> {
    (value > 0.0 && reference > 0.0).then(|| {
        if higher_is_better {
            value / reference
        } else {
            reference / value
        }
    })
}

/// Fills `relative` per spec key against its best `ok`, non-noisy row (noisy rows get a relative
/// figure but never set the best) and orders rows by kernel, spec key, then best first.
pub fn rank(rows: &mut [CompareRow]) {
    let mut best: BTreeMap<String, f64> = BTreeMap::new();
    for r in rows.iter() {
        if let (Some(v), "ok", false) = (r.metric, r.status.as_str(), r.noisy) {
            let e = best.entry(r.spec_key.clone()).or_insert(v);
            *e = if r.higher_is_better {
                e.max(v)
            } else {
                e.min(v)
            };
        }
    }
    for r in rows.iter_mut() {
        r.relative = match (r.metric, best.get(&r.spec_key), r.status.as_str()) {
            (Some(v), Some(&b), "ok") => ratio(v, b, r.higher_is_better),
            _ => None,
        };
    }
    rows.sort_by(|a, b| {
        (a.kernel.as_str(), a.spec_key.as_str())
            .cmp(&(b.kernel.as_str(), b.spec_key.as_str()))
            .then(
                b.relative
                    .unwrap_or(-1.0)
                    .total_cmp(&a.relative.unwrap_or(-1.0)),
            )
            .then(a.device_id.cmp(&b.device_id))
    });
}

/// Sets `baseline`, `change_pct` and `better` of `row` against the metric `base`.
fn set_change(row: &mut CompareRow, base: Option<f64>) {
    row.baseline = base;
    (row.change_pct, row.better) = match (row.metric, base) {
        (Some(v), Some(b)) if row.status == "ok" && b > 0.0 => {
            let change = (v - b) / b * 100.0;
            (Some(change), Some((change > 0.0) == row.higher_is_better))
        }
        _ => (None, None),
    };
}

/// The unit of a metric per watt: throughput per watt (`GFLOP/s/W`), or, for `img/s`, images per
/// joule, the same quantity under its usual name.
pub fn per_watt_unit(unit: &str) -> String {
    if unit == "img/s" {
        "img/J".to_string()
    } else {
        format!("{unit}/W")
    }
}

/// Formats a metric with a precision that suits its size.
pub fn fmt_metric(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

/// Four significant digits (at most six characters below a million), for matrix cells.
pub fn fmt_short(v: f64) -> String {
    let a = v.abs();
    if a >= 1000.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 10.0 {
        format!("{v:.2}")
    } else if a >= 1.0 {
        format!("{v:.3}")
    } else {
        format!("{v:.4}")
    }
}

/// The environment set of a spec key (`…@NAME` of an env-matrix campaign); empty when none.
pub fn env_set(spec_key: &str) -> &str {
    spec_key.rsplit_once('@').map_or("", |(_, n)| n)
}

/// A number for CSV: full precision, empty when missing.
pub fn csv_number(v: Option<f64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// One column of a pivot.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct PivotColumn {
    /// `agent:device_id`, the agent or the backend, by [`By`].
    pub key: String,
    /// Device names seen in the column (one for `By::Device`).
    pub devices: BTreeSet<String>,
}

/// One row of a pivot: a spec (plus the agent or device when the columns are not devices) and
/// its cell in every column.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PivotRow {
    pub spec_key: String,
    pub kernel: String,
    pub variant: String,
    pub params: BTreeMap<String, i64>,
    pub dtype: String,
    pub mode: String,
    pub env_set: String,
    /// The device id (`By::Agent`) or agent (`By::Backend`) the row is about; empty by device.
    pub within: String,
    /// Cells in column order; `None` where the column has no result for the row.
    pub cells: Vec<Option<CompareRow>>,
}

impl PivotRow {
    /// The unit of the row's metric (the first cell that has one).
    pub fn unit(&self) -> &str {
        self.cells
            .iter()
            .flatten()
            .map(|c| c.unit.as_str())
            .find(|u| !u.is_empty())
            .unwrap_or("")
    }
}

/// Results pivoted: rows by spec, columns by [`By`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pivot {
    pub by: By,
    pub columns: Vec<PivotColumn>,
    pub rows: Vec<PivotRow>,
    /// The column the % changes are against, when the baseline is a column.
    pub baseline_column: Option<usize>,
    /// The campaign the % changes are against, when the baseline is a campaign.
    pub baseline_campaign: Option<i64>,
}

/// Reads one text field of a pivot row (for the constant-column check).
type RowField = fn(&PivotRow) -> &str;

/// A pivot row's sort and identity key: kernel, params as numbers, spec key, within.
type RowKey = (String, Vec<i64>, String, String);

impl Pivot {
    /// Pivots `rows` (latest results, one per device and spec key) by `by`, each row ranked on
    /// its own cells.
    pub fn new(rows: Vec<CompareRow>, by: By) -> Pivot {
        let column_of = |r: &CompareRow| match by {
            By::Device => format!("{}:{}", r.agent, r.device_id),
            By::Agent => r.agent.clone(),
            By::Backend => r.backend.clone(),
        };
        let within_of = |r: &CompareRow| match by {
            By::Device => String::new(),
            By::Agent => r.device_id.clone(),
            By::Backend => match r.device_id.rsplit_once(':') {
                Some((_, index)) if index != "0" => format!("{}:{index}", r.agent),
                _ => r.agent.clone(),
            },
        };
        let mut columns: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for r in &rows {
            let name = if r.device_name.is_empty() {
                r.device_id.clone()
            } else {
                r.device_name.clone()
            };
            columns.entry(column_of(r)).or_default().insert(name);
        }
        let index: HashMap<&str, usize> = columns
            .keys()
            .enumerate()
            .map(|(i, k)| (k.as_str(), i))
            .collect();
        let mut by_key: BTreeMap<RowKey, PivotRow> = BTreeMap::new();
        for r in &rows {
            let within = within_of(r);
            let key = (
                r.kernel.clone(),
                r.params.values().copied().collect(),
                r.spec_key.clone(),
                within.clone(),
            );
            let row = by_key.entry(key).or_insert_with(|| PivotRow {
                spec_key: r.spec_key.clone(),
                kernel: r.kernel.clone(),
                variant: r.variant.clone(),
                params: r.params.clone(),
                dtype: r.dtype.clone(),
                mode: r.mode.clone(),
                env_set: r.env_set.clone(),
                within,
                cells: vec![None; columns.len()],
            });
            let slot = &mut row.cells[index[column_of(r).as_str()]];
            // Two devices in one cell (two GPUs of one backend on one agent by backend): keep the
            // first, in input order.
            if slot.is_none() {
                *slot = Some(r.clone());
            }
        }
        let mut out_rows: Vec<PivotRow> = by_key.into_values().collect();
        for row in &mut out_rows {
            let mut cells: Vec<CompareRow> = row.cells.iter().flatten().cloned().collect();
            rank(&mut cells);
            for c in row.cells.iter_mut().flatten() {
                c.relative = cells
                    .iter()
                    .find(|x| x.run_id == c.run_id)
                    .and_then(|x| x.relative);
            }
        }
        Pivot {
            by,
            columns: columns
                .into_iter()
                .map(|(key, devices)| PivotColumn { key, devices })
                .collect(),
            rows: out_rows,
            baseline_column: None,
            baseline_campaign: None,
        }
    }

    /// The index of the column `name` means: its key, else a device id or device name that
    /// matches exactly one column.
    ///
    /// # Errors
    /// A message that lists the columns when `name` matches none or several.
    pub fn column(&self, name: &str) -> Result<usize, String> {
        if let Some(i) = self.columns.iter().position(|c| c.key == name) {
            return Ok(i);
        }
        let matches: Vec<usize> = self
            .columns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.key.ends_with(&format!(":{name}")) || c.devices.contains(name))
            .map(|(i, _)| i)
            .collect();
        match matches.as_slice() {
            [i] => Ok(*i),
            _ => {
                let keys: Vec<&str> = self.columns.iter().map(|c| c.key.as_str()).collect();
                Err(format!(
                    "baseline `{}` {} (columns: {}; a number is a campaign id)",
                    gpufleet_kernels::prefix(name, 40),
                    if matches.is_empty() {
                        "is not a column of this comparison"
                    } else {
                        "matches several columns"
                    },
                    keys.join(", ")
                ))
            }
        }
    }

    /// Sets every cell's % change against column `col` of its row.
    pub fn against_column(&mut self, col: usize) {
        self.baseline_column = Some(col);
        for row in &mut self.rows {
            let base = row
                .cells
                .get(col)
                .cloned()
                .flatten()
                .and_then(|b| b.metric.filter(|_| b.status == "ok"));
            for (i, c) in row.cells.iter_mut().enumerate() {
                if let Some(c) = c
                    && i != col
                {
                    set_change(c, base);
                }
            }
        }
    }

    /// Sets every cell's % change against `base`: results of campaign `campaign`, matched by spec
    /// key, agent and device.
    pub fn against_campaign(&mut self, campaign: i64, base: &[CompareRow]) {
        self.baseline_campaign = Some(campaign);
        let by_cell: HashMap<(&str, &str, &str), f64> = base
            .iter()
            .filter(|b| b.status == "ok")
            .filter_map(|b| {
                Some((
                    (b.spec_key.as_str(), b.agent.as_str(), b.device_id.as_str()),
                    b.metric?,
                ))
            })
            .collect();
        for c in self
            .rows
            .iter_mut()
            .flat_map(|r| r.cells.iter_mut().flatten())
        {
            let base = by_cell
                .get(&(c.spec_key.as_str(), c.agent.as_str(), c.device_id.as_str()))
                .copied();
            set_change(c, base);
        }
    }

    /// Every cell, row by row: the long form that CSV and JSON give.
    pub fn cells(&self) -> Vec<&CompareRow> {
        self.rows
            .iter()
            .flat_map(|r| r.cells.iter().flatten())
            .collect()
    }

    /// Renders the pivot: a table (text or Markdown) with its legend, or every cell as CSV / JSON.
    pub fn render(&self, format: Format) -> String {
        match format {
            Format::Json => {
                serde_json::to_string_pretty(&self.cells()).unwrap_or_else(|_| "[]".into()) + "\n"
            }
            Format::Csv => csv(&self.cells()),
            Format::Table | Format::Md => self.table(format),
        }
    }

    fn table(&self, format: Format) -> String {
        // Columns whose value is the same in every row say nothing per row: one line under the
        // table. The variant goes with the kernel (`gemm/tiled`; the default variant unnamed).
        let fields: [(&str, RowField); 4] = [
            ("dtype", |r| &r.dtype),
            ("mode", |r| &r.mode),
            ("env set", |r| &r.env_set),
            ("within", |r| &r.within),
        ];
        let within_name = match self.by {
            By::Device => "within",
            By::Agent => "device",
            By::Backend => "agent",
        };
        let mut constant = Vec::new();
        let mut varying = Vec::new();
        for (name, get) in fields {
            let values: BTreeSet<&str> = self.rows.iter().map(get).collect();
            let name = if name == "within" { within_name } else { name };
            if values.len() > 1 {
                varying.push((name, get));
            } else if let Some(v) = values.into_iter().next().filter(|v| !v.is_empty()) {
                constant.push(format!("{name} {v}"));
            }
        }
        let abbreviations = param_abbreviations(&self.rows);
        let mut header = vec!["kernel".to_string()];
        header.extend(varying.iter().map(|(n, _)| n.to_string()));
        header.extend(["params".to_string(), "unit".to_string()]);
        // `agent:device` keys on two lines (agent over device) so columns stay narrow.
        header.extend(self.columns.iter().map(|c| match self.by {
            By::Device => c.key.replacen(':', "\n", 1),
            By::Agent | By::Backend => c.key.clone(),
        }));
        let header: Vec<&str> = header.iter().map(String::as_str).collect();
        let mut t = Table::new(&header);
        let mut notes: Vec<String> = Vec::new();
        let mut any_noisy = false;
        let mut any_peak = false;
        for row in &self.rows {
            let mut cells = vec![if row.variant.is_empty() || row.variant == "default" {
                row.kernel.clone()
            } else {
                format!("{}/{}", row.kernel, row.variant)
            }];
            cells.extend(varying.iter().map(|(_, get)| match get(row) {
                "" => "-".to_string(),
                v => v.to_string(),
            }));
            cells.push(params_cell(&row.params, abbreviations.get(&row.kernel)));
            cells.push(match row.unit() {
                "" => "-".to_string(),
                u => u.to_string(),
            });
            for (i, c) in row.cells.iter().enumerate() {
                let Some(c) = c else {
                    cells.push("-".into());
                    continue;
                };
                any_noisy |= c.noisy;
                any_peak |= c.peak_suspect();
                cells.push(self.cell_text(c, i, &mut notes));
            }
            t.push(cells);
        }
        let mut out = t.render(format);
        let mut legend = Vec::new();
        if !constant.is_empty() {
            legend.push(format!("all rows: {}", constant.join(", ")));
        }
        if self.by == By::Device || self.columns.iter().any(|c| c.devices.len() > 1) {
            for c in &self.columns {
                let devices: Vec<&str> = c.devices.iter().map(String::as_str).collect();
                legend.push(format!("{}: {}", c.key, devices.join(", ")));
            }
        }
        for (kernel, abbr) in &abbreviations {
            let pairs: Vec<String> = abbr.iter().map(|(k, a)| format!("{a}={k}")).collect();
            legend.push(format!("{kernel} params: {}", pairs.join(" ")));
        }
        legend.push(match (self.baseline_column, self.baseline_campaign) {
            (Some(col), _) => format!(
                "% change against {} (=); ▲ better, ▼ worse by the metric's direction",
                self.columns[col].key
            ),
            (None, Some(id)) => format!(
                "% change against the same device in campaign {id}; ▲ better, ▼ worse by the metric's direction"
            ),
            _ => "×: relative to the best non-noisy cell of the row (×1.00 = the best)".to_string(),
        });
        if any_noisy {
            legend.push(format!(
                "~ noisy: CV above {:.0}% or the median's 95% interval wider than its target; never the best, not a regression baseline",
                gpufleet_kernels::NOISY_CV * 100.0
            ));
        }
        if any_peak {
            legend.push(
                "peak?: above 100% of the theoretical peak, so the peak is wrong (its source is in the CSV/JSON)"
                    .to_string(),
            );
        }
        legend.extend(notes);
        if !legend.is_empty() {
            out.push('\n');
        }
        for l in legend {
            out.push_str(&l);
            out.push('\n');
        }
        out
    }

    /// A cell: value with marks (`~` noisy, `peak?`), then the relative figure or the % change;
    /// not-ok cells give their status and a numbered footnote with the reason.
    fn cell_text(&self, c: &CompareRow, col: usize, notes: &mut Vec<String>) -> String {
        let Some(v) = c.metric.filter(|_| c.status == "ok") else {
            let n = notes.len() + 1;
            let message: String = c.message.chars().take(160).collect();
            notes.push(format!(
                "[{n}] {} on {}:{}: {}",
                c.kernel,
                c.agent,
                c.device_id,
                if message.is_empty() {
                    c.status.as_str()
                } else {
                    message.as_str()
                }
            ));
            return format!("{} [{n}]", c.status);
        };
        let mut s = fmt_short(v);
        if c.noisy {
            s.push('~');
        }
        if c.peak_suspect() {
            s.push_str(" peak?");
        }
        if self.baseline_column == Some(col) {
            s.push_str(" =");
        } else if self.baseline_column.is_some() || self.baseline_campaign.is_some() {
            match (c.change_pct, c.better) {
                (Some(p), Some(better)) if p.abs() >= 0.05 => {
                    let mark = if better { "▲" } else { "▼" };
                    if p.abs() >= 10.0 {
                        s.push_str(&format!(" {p:+.0}%{mark}"));
                    } else {
                        s.push_str(&format!(" {p:+.1}%{mark}"));
                    }
                }
                (Some(_), _) => s.push_str(" ±0.0%"),
                _ => {}
            }
        } else if let Some(r) = c.relative {
            s.push_str(&format!(" ×{r:.2}"));
        }
        s
    }
}

/// Params as text for a table cell.
fn params_cell(params: &BTreeMap<String, i64>, abbr: Option<&BTreeMap<String, String>>) -> String {
    match abbr {
        Some(abbr) => params
            .iter()
            .map(|(k, v)| format!("{}{v}", abbr.get(k).map_or(k.as_str(), String::as_str)))
            .collect::<Vec<_>>()
            .join(" "),
        None if params.is_empty() => "-".to_string(),
        None => crate::convert::params_text(params, ","),
    }
}

/// Params written out longer than this are abbreviated (`b1 c8 h32`), with a legend line.
const PARAMS_WIDTH: usize = 20;

/// Per kernel whose params text is too wide: each param name's shortest prefix that is unique
/// among that kernel's params.
fn param_abbreviations(rows: &[PivotRow]) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut names: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut wide: BTreeSet<String> = BTreeSet::new();
    for r in rows {
        names
            .entry(r.kernel.clone())
            .or_default()
            .extend(r.params.keys().cloned());
        if crate::convert::params_text(&r.params, ",").chars().count() > PARAMS_WIDTH {
            wide.insert(r.kernel.clone());
        }
    }
    wide.into_iter()
        .map(|kernel| {
            let all = &names[&kernel];
            let abbr = all
                .iter()
                .map(|name| {
                    let short = (1..=name.len())
                        .filter(|n| name.is_char_boundary(*n))
                        .map(|n| &name[..n])
                        .find(|p| all.iter().filter(|o| o.starts_with(p)).count() == 1)
                        .unwrap_or(name);
                    (name.clone(), short.to_string())
                })
                .collect();
            (kernel, abbr)
        })
        .collect()
}

/// Cells as CSV for scripts: every numeric column a plain number (empty when missing) with its
/// unit in the header or in `unit`, the full run id, and the reason of non-ok rows.
pub fn csv(rows: &[&CompareRow]) -> String {
    let mut t = Table::new(&[
        "kernel",
        "variant",
        "params",
        "dtype",
        "mode",
        "env_set",
        "agent",
        "device",
        "device_name",
        "backend",
        "status",
        "metric",
        "unit",
        "higher_is_better",
        "pct_of_peak",
        "peak_suspect",
        "peak_source",
        "cv_pct",
        "ci_pct",
        "noisy",
        "relative",
        "baseline",
        "change_pct",
        "avg_w",
        "metric_per_w",
        "j_per_unit",
        "iterations",
        "result_id",
        "run_id",
        "message",
    ]);
    for r in rows {
        t.push(vec![
            r.kernel.clone(),
            r.variant.clone(),
            crate::convert::params_text(&r.params, ";"),
            r.dtype.clone(),
            r.mode.clone(),
            r.env_set.clone(),
            r.agent.clone(),
            r.device_id.clone(),
            r.device_name.clone(),
            r.backend.clone(),
            r.status.clone(),
            csv_number(r.metric),
            r.unit.clone(),
            r.higher_is_better.to_string(),
            csv_number(r.pct_of_peak.filter(|p| *p > 0.0)),
            r.peak_suspect().to_string(),
            r.peak_source.clone(),
            csv_number(r.cv.map(|c| c * 100.0)),
            csv_number(r.ci_pct),
            r.noisy.to_string(),
            csv_number(r.relative),
            csv_number(r.baseline),
            csv_number(r.change_pct),
            csv_number(r.avg_watts),
            csv_number(r.metric_per_watt),
            csv_number(r.joules_per_unit),
            r.iterations.to_string(),
            r.result_id.to_string(),
            r.run_id.clone(),
            r.message.clone(),
        ]);
    }
    t.render(Format::Csv)
}

#[cfg(test)]
mod tests;
