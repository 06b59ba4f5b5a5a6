//! Results pivoted: one row per spec, one column per device, agent or backend, and the baseline
//! the % changes are against.

use super::cell::{Cell, set_relative};
use crate::store::{ResultRecord, ResultRow};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};

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

/// One column of a pivot.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PivotColumn {
    /// `agent:device_id`, the agent or the backend, by [`By`].
    pub key: String,
    /// Device names seen in the column (one for `By::Device`).
    pub devices: BTreeSet<String>,
}

/// One row of a pivot: a spec (plus the agent or device when the columns are not devices) and
/// its cell in every column.
#[derive(Debug, Clone, PartialEq)]
pub struct PivotRow {
    /// The device id (`By::Agent`) or agent (`By::Backend`) the row is about; empty by device.
    pub within: String,
    /// Cells in column order; `None` where the column has no result for the row. At least one
    /// is `Some`, and all of them share the row's spec key.
    pub cells: Vec<Option<Cell>>,
}

impl PivotRow {
    /// The record of the row's first cell: what every cell of the row shares (spec key, kernel,
    /// variant, params, dtype, mode, env set).
    pub fn spec(&self) -> &ResultRecord {
        self.cells
            .iter()
            .flatten()
            .map(Cell::record)
            .next()
            .expect("a pivot row has a cell")
    }

    /// The unit of the row's metric (the first cell that has one).
    pub fn unit(&self) -> &str {
        self.cells
            .iter()
            .flatten()
            .map(|c| c.record().unit())
            .find(|u| !u.is_empty())
            .unwrap_or("")
    }
}

/// Results pivoted: rows by spec, columns by [`By`].
#[derive(Debug, Clone, PartialEq)]
pub struct Pivot {
    pub by: By,
    pub columns: Vec<PivotColumn>,
    pub rows: Vec<PivotRow>,
    /// The column the % changes are against, when the baseline is a column.
    pub baseline_column: Option<usize>,
    /// The campaign the % changes are against, when the baseline is a campaign.
    pub baseline_campaign: Option<i64>,
}

/// A pivot row's sort and identity key: kernel, params as numbers, spec key, within.
type RowKey = (String, Vec<i64>, String, String);

impl Pivot {
    /// Pivots `rows` (latest results, one per device and spec key) by `by`, each row ranked on
    /// its own cells.
    pub fn new(rows: Vec<ResultRow>, by: By) -> Pivot {
        let column_of = |r: &ResultRow| match by {
            By::Device => format!("{}:{}", r.agent, r.record.device_id),
            By::Agent => r.agent.clone(),
            By::Backend => r.record.backend.clone(),
        };
        let within_of = |r: &ResultRow| match by {
            By::Device => String::new(),
            By::Agent => r.record.device_id.clone(),
            By::Backend => match r.record.device_id.rsplit_once(':') {
                Some((_, index)) if index != "0" => format!("{}:{index}", r.agent),
                _ => r.agent.clone(),
            },
        };
        let mut columns: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for r in &rows {
            let name = match r.device_name.as_deref() {
                None | Some("") => r.record.device_id.clone(),
                Some(name) => name.to_string(),
            };
            columns.entry(column_of(r)).or_default().insert(name);
        }
        let index: HashMap<String, usize> = columns
            .keys()
            .enumerate()
            .map(|(i, k)| (k.clone(), i))
            .collect();
        let mut by_key: BTreeMap<RowKey, PivotRow> = BTreeMap::new();
        for r in rows {
            let within = within_of(&r);
            let key = (
                r.record.kernel.clone(),
                r.record.params.values().copied().collect(),
                r.record.spec_key.clone(),
                within.clone(),
            );
            let col = index[&column_of(&r)];
            let row = by_key.entry(key).or_insert_with(|| PivotRow {
                within,
                cells: vec![None; columns.len()],
            });
            // Two devices in one cell (two GPUs of one backend on one agent by backend): keep the
            // first, in input order.
            if row.cells[col].is_none() {
                row.cells[col] = Some(Cell::new(r));
            }
        }
        let mut out_rows: Vec<PivotRow> = by_key.into_values().collect();
        for row in &mut out_rows {
            let mut cells: Vec<&mut Cell> = row.cells.iter_mut().flatten().collect();
            set_relative(&mut cells);
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
            let base = row.cells.get(col).and_then(|b| b.as_ref()?.metric());
            for (i, c) in row.cells.iter_mut().enumerate() {
                if let Some(c) = c
                    && i != col
                {
                    c.set_change(base);
                }
            }
        }
    }

    /// Sets every cell's % change against `base`: results of campaign `campaign`, matched by spec
    /// key, agent and device.
    pub fn against_campaign(&mut self, campaign: i64, base: &[ResultRow]) {
        self.baseline_campaign = Some(campaign);
        let by_cell: HashMap<(&str, &str, &str), f64> = base
            .iter()
            .filter_map(|b| {
                let r = &b.record;
                Some((
                    (r.spec_key.as_str(), b.agent.as_str(), r.device_id.as_str()),
                    r.ok_metric()?,
                ))
            })
            .collect();
        for c in self
            .rows
            .iter_mut()
            .flat_map(|r| r.cells.iter_mut().flatten())
        {
            let key = (c.record().spec_key.as_str(), c.agent(), c.device_id());
            let base = by_cell.get(&key).copied();
            c.set_change(base);
        }
    }

    /// Every cell, row by row: the long form that CSV and JSON give.
    pub fn cells(&self) -> Vec<&Cell> {
        self.rows
            .iter()
            .flat_map(|r| r.cells.iter().flatten())
            .collect()
    }
}
