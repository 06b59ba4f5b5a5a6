//! The comparison as people read it: a terminal or Markdown matrix with its legend and the
//! footnotes of failed cells.

use super::cell::Cell;
use super::export::csv;
use super::pivot::{By, Pivot, PivotRow};
use crate::table::{Format, Table, fmt_short, or_dash, params_text};
use std::collections::{BTreeMap, BTreeSet};

/// Reads one text field of a pivot row (for the constant-column check).
type RowField = fn(&PivotRow) -> &str;

impl Pivot {
    /// Renders the pivot: a table (text or Markdown) with its legend, or every cell as CSV / JSON
    /// (`llama-bench` is another table over the same rows: [`super::llama_bench`]).
    pub fn render(&self, format: Format) -> String {
        match format {
            Format::Json => {
                serde_json::to_string_pretty(&self.cells())
                    .expect("comparison cells serialise to JSON")
                    + "\n"
            }
            Format::Csv => csv(&self.cells()),
            Format::Table | Format::Md | Format::LlamaBench => self.table(format),
        }
    }

    fn table(&self, format: Format) -> String {
        // Columns whose value is the same in every row say nothing per row: one line under the
        // table. The variant goes with the kernel (`gemm/tiled`; the default variant unnamed).
        let fields: [(&str, RowField); 4] = [
            // compute_peak's variant, not its stored dtype, says what it computes in.
            ("dtype", |r| {
                let s = r.spec();
                gpufleet_kernels::variant_arithmetic(&s.kernel, &s.variant).unwrap_or(&s.dtype)
            }),
            ("mode", |r| &r.spec().mode),
            ("env set", |r| r.spec().env_set()),
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
            // compute_peak's rows say their type in the variant (`compute_peak/fp64`): they
            // neither make nor join an `all rows: dtype f32`.
            let values: BTreeSet<&str> = self
                .rows
                .iter()
                .filter(|r| {
                    name != "dtype"
                        || gpufleet_kernels::variant_arithmetic(&r.spec().kernel, &r.spec().variant)
                            .is_none()
                })
                .map(get)
                .collect();
            let name = if name == "within" { within_name } else { name };
            if values.len() > 1 {
                varying.push((name, get));
            } else if let Some(v) = values.into_iter().next().filter(|v| !v.is_empty()) {
                let own_type = self.rows.iter().any(|r| {
                    gpufleet_kernels::variant_arithmetic(&r.spec().kernel, &r.spec().variant)
                        .is_some()
                });
                if name == "dtype" && own_type {
                    constant.push(format!("{name} {v} (compute_peak: the variant's type)"));
                } else {
                    constant.push(format!("{name} {v}"));
                }
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
            let spec = row.spec();
            let mut cells = vec![if spec.variant.is_empty() || spec.variant == "default" {
                spec.kernel.clone()
            } else {
                format!("{}/{}", spec.kernel, spec.variant)
            }];
            cells.extend(varying.iter().map(|(_, get)| or_dash(get(row))));
            cells.push(params_cell(&spec.params, abbreviations.get(&spec.kernel)));
            cells.push(or_dash(row.unit()));
            for (i, c) in row.cells.iter().enumerate() {
                let Some(c) = c else {
                    cells.push("-".into());
                    continue;
                };
                any_noisy |= c.record().noisy;
                any_peak |= c.record().peak_suspect();
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
                "~ noisy: {}; never the best or a baseline",
                gpufleet_kernels::noisy_rule()
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
    fn cell_text(&self, c: &Cell, col: usize, notes: &mut Vec<String>) -> String {
        let r = c.record();
        let Some(v) = c.metric() else {
            let n = notes.len() + 1;
            let message: String = r.message.chars().take(160).collect();
            notes.push(format!(
                "[{n}] {} on {}:{}: {}",
                r.kernel,
                c.agent(),
                r.device_id,
                if message.is_empty() {
                    r.status.as_str()
                } else {
                    message.as_str()
                }
            ));
            return format!("{} [{n}]", r.status);
        };
        let mut s = fmt_short(v);
        if r.noisy {
            s.push('~');
        }
        if r.peak_suspect() {
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
        } else if let Some(rel) = c.relative {
            s.push_str(&format!(" ×{rel:.2}"));
        }
        s
    }
}

/// Params as text for a table cell.
fn params_cell(params: &BTreeMap<String, i64>, abbr: Option<&BTreeMap<String, String>>) -> String {
    match abbr {
        Some(abbr) => params
            .iter()
            .map(|(k, v)| {
                let name = abbr.get(k).map_or(k.as_str(), String::as_str);
                let value = gpufleet_kernels::show_param(k, *v);
                // `f=16`, never `f16`: a filter count written so reads as a dtype.
                let sep = if reads_as_dtype(name, &value) {
                    "="
                } else {
                    ""
                };
                format!("{name}{sep}{value}")
            })
            .collect::<Vec<_>>()
            .join(" "),
        None if params.is_empty() => "-".to_string(),
        None => params_text(params, ","),
    }
}

/// Whether an abbreviated parameter written without a separator would read as a dtype (`f16`,
/// `i8`, `q4`, `bf16`, `u8`, `fp8`).
fn reads_as_dtype(abbr: &str, value: &str) -> bool {
    matches!(abbr, "f" | "i" | "q" | "u" | "bf" | "fp" | "int")
        && !value.is_empty()
        && value.chars().all(|c| c.is_ascii_digit())
}

/// `short` (a name's shortest unique prefix), or the name's initials when that prefix runs into a
/// second word (`head_dim` beside `heads` is `head_`; its initials `hd` say more in less) and no
/// other name of `all` starts with them.
fn initials(name: &str, short: &str, all: &BTreeSet<String>) -> String {
    if !short.contains('_') {
        return short.to_string();
    }
    let init: String = name.split('_').filter_map(|w| w.chars().next()).collect();
    if all.iter().any(|o| o != name && o.starts_with(&init)) {
        short.to_string()
    } else {
        init
    }
}

/// Params written out longer than this are abbreviated (`b1 c8 h32`, `f=16` where `f16` would read as a dtype), with a legend line.
const PARAMS_WIDTH: usize = 20;

/// Per kernel whose params text is too wide: each param name's shortest prefix that is unique
/// among that kernel's params ([`initials`] where that prefix runs into a second word).
fn param_abbreviations(rows: &[PivotRow]) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut names: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut wide: BTreeSet<String> = BTreeSet::new();
    for r in rows {
        let spec = r.spec();
        names
            .entry(spec.kernel.clone())
            .or_default()
            .extend(spec.params.keys().cloned());
        if params_text(&spec.params, ",").chars().count() > PARAMS_WIDTH {
            wide.insert(spec.kernel.clone());
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
                    (name.clone(), initials(name, short, all))
                })
                .collect();
            (kernel, abbr)
        })
        .collect()
}
