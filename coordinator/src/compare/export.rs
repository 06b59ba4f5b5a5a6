//! The comparison's long form for scripts, one cell per line: the CSV columns and the JSON fields,
//! each written once as a list of (name, value of a cell).

use super::cell::Cell;
use crate::table::{Column, Format, Table, csv_number, params_text};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Value, json};

/// Cells as CSV for scripts: every numeric column a plain number (empty when missing) with its
/// unit in the header or in `unit`, the full run id, and the reason of non-ok rows.
pub fn csv(cells: &[&Cell]) -> String {
    Table::of(CSV_COLUMNS, cells.iter().copied()).render(Format::Csv)
}

const CSV_COLUMNS: &[Column<Cell>] = &[
    Column::new("kernel", |c| c.record().kernel.clone()),
    Column::new("variant", |c| c.record().variant.clone()),
    Column::new("params", |c| params_text(&c.record().params, ";")),
    Column::new("dtype", |c| c.record().dtype.clone()),
    Column::new("mode", |c| c.record().mode.clone()),
    Column::new("env_set", |c| c.record().env_set().to_string()),
    Column::new("agent", |c| c.agent().to_string()),
    Column::new("device", |c| c.device_id().to_string()),
    Column::new("device_name", |c| c.device_name().to_string()),
    Column::new("backend", |c| c.record().backend.clone()),
    Column::new("status", |c| c.record().status.clone()),
    Column::new("metric", |c| csv_number(c.metric())),
    Column::new("unit", |c| c.record().unit().to_string()),
    Column::new("higher_is_better", |c| {
        c.record().higher_is_better().to_string()
    }),
    Column::new("pct_of_peak", |c| csv_number(c.record().pct_of_peak)),
    Column::new("peak_suspect", |c| c.record().peak_suspect().to_string()),
    Column::new("peak_source", |c| c.record().peak_source.clone()),
    Column::new("cv_pct", |c| csv_number(c.record().cv.map(|v| v * 100.0))),
    Column::new("robust_cv_pct", |c| {
        csv_number(c.record().robust_cv.map(|v| v * 100.0))
    }),
    Column::new("outliers_high", |c| {
        c.record()
            .outliers_high
            .map(|n| n.to_string())
            .unwrap_or_default()
    }),
    Column::new("ci_pct", |c| csv_number(c.record().ci_pct())),
    Column::new("noisy", |c| c.record().noisy.to_string()),
    Column::new("relative", |c| csv_number(c.relative)),
    Column::new("baseline", |c| csv_number(c.baseline)),
    Column::new("change_pct", |c| csv_number(c.change_pct)),
    Column::new("avg_w", |c| csv_number(c.record().avg_watts)),
    Column::new("metric_per_w", |c| csv_number(c.record().metric_per_watt)),
    Column::new("j_per_unit", |c| csv_number(c.record().joules_per_unit)),
    Column::new("iterations", |c| (c.record().iterations as u32).to_string()),
    Column::new("result_id", |c| c.result.id.to_string()),
    Column::new("run_id", |c| c.record().run_id.clone()),
    Column::new("message", |c| c.record().message.clone()),
];

/// One field of a cell's JSON object: its name and its value.
type JsonField = (&'static str, fn(&Cell) -> Value);

/// The JSON object of a cell (`gpufleet compare --format json`, `/compare.json`): these fields in
/// this order.
const JSON_FIELDS: &[JsonField] = &[
    ("spec_key", |c| json!(c.record().spec_key)),
    ("kernel", |c| json!(c.record().kernel)),
    ("variant", |c| json!(c.record().variant)),
    ("params", |c| json!(c.record().params)),
    ("dtype", |c| json!(c.record().dtype)),
    ("mode", |c| json!(c.record().mode)),
    ("env_set", |c| json!(c.record().env_set())),
    ("agent", |c| json!(c.agent())),
    ("device_id", |c| json!(c.device_id())),
    ("device_name", |c| json!(c.device_name())),
    ("backend", |c| json!(c.record().backend)),
    ("status", |c| json!(c.record().status)),
    ("message", |c| json!(c.record().message)),
    ("metric", |c| json!(c.metric())),
    ("unit", |c| json!(c.record().unit())),
    ("higher_is_better", |c| json!(c.record().higher_is_better())),
    ("pct_of_peak", |c| json!(c.record().pct_of_peak)),
    ("peak_source", |c| json!(c.record().peak_source)),
    ("cv", |c| json!(c.record().cv)),
    ("robust_cv", |c| json!(c.record().robust_cv)),
    ("outliers_high", |c| json!(c.record().outliers_high)),
    ("ci_pct", |c| json!(c.record().ci_pct())),
    ("noisy", |c| json!(c.record().noisy)),
    ("iterations", |c| json!(c.record().iterations as u32)),
    ("avg_watts", |c| json!(c.record().avg_watts)),
    ("metric_per_watt", |c| json!(c.record().metric_per_watt)),
    ("joules_per_unit", |c| json!(c.record().joules_per_unit)),
    ("relative", |c| json!(c.relative)),
    ("baseline", |c| json!(c.baseline)),
    ("change_pct", |c| json!(c.change_pct)),
    ("better", |c| json!(c.better)),
    ("run_id", |c| json!(c.record().run_id)),
    ("result_id", |c| json!(c.result.id)),
];

impl Serialize for Cell {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(JSON_FIELDS.len()))?;
        for (name, value) in JSON_FIELDS {
            map.serialize_entry(name, &value(self))?;
        }
        map.end()
    }
}
