//! One cell of a comparison: a stored result and where it stands in its row.

use crate::store::{ResultRecord, ResultRow};
use std::borrow::BorrowMut;
use std::collections::HashMap;

/// One device's latest result for one spec key, and the figures a comparison adds to it. The
/// result is the stored row itself, so every view reads the record's own fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// The stored result, with the names of who ran it.
    pub result: ResultRow,
    /// This cell's metric relative to the best cell of its pivot row (1 = best).
    pub relative: Option<f64>,
    /// The baseline's metric for this cell, when a baseline was asked for and has one.
    pub baseline: Option<f64>,
    /// (metric − baseline) / baseline × 100.
    pub change_pct: Option<f64>,
    /// Whether the change is for the better (by the metric's direction); `None` without a change.
    pub better: Option<bool>,
}

impl Cell {
    /// A cell of `result`, not yet ranked.
    pub fn new(result: ResultRow) -> Cell {
        Cell {
            result,
            relative: None,
            baseline: None,
            change_pct: None,
            better: None,
        }
    }

    /// The stored record.
    pub fn record(&self) -> &ResultRecord {
        &self.result.record
    }

    /// The metric, when the run ended `ok`.
    pub fn metric(&self) -> Option<f64> {
        self.record().ok_metric()
    }

    /// The agent that ran it.
    pub fn agent(&self) -> &str {
        &self.result.agent
    }

    /// The agent's id of the device (`opencl:0`).
    pub fn device_id(&self) -> &str {
        &self.record().device_id
    }

    /// The device's name; empty when the device row is unknown.
    pub fn device_name(&self) -> &str {
        self.result.device_name.as_deref().unwrap_or("")
    }

    /// Sets `baseline`, `change_pct` and `better` against the metric `base`.
    pub(super) fn set_change(&mut self, base: Option<f64>) {
        self.baseline = base;
        let higher = self.record().higher_is_better();
        (self.change_pct, self.better) = match (self.metric(), base) {
            (Some(v), Some(b)) if b > 0.0 => {
                let change = (v - b) / b * 100.0;
                (Some(change), Some((change > 0.0) == higher))
            }
            _ => (None, None),
        };
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

/// Fills `relative` ([`set_relative`]) and orders cells by kernel, spec key, then best first.
pub fn rank(cells: &mut [Cell]) {
    set_relative(cells);
    cells.sort_by(|a, b| {
        let (ra, rb) = (a.record(), b.record());
        (ra.kernel.as_str(), ra.spec_key.as_str())
            .cmp(&(rb.kernel.as_str(), rb.spec_key.as_str()))
            .then(
                b.relative
                    .unwrap_or(-1.0)
                    .total_cmp(&a.relative.unwrap_or(-1.0)),
            )
            .then(ra.device_id.cmp(&rb.device_id))
    });
}

/// Fills `relative` per spec key against its best `ok`, non-noisy cell (noisy cells get a
/// relative figure but never set the best), in place: a pivot row ranks its own cells.
pub(super) fn set_relative<C: BorrowMut<Cell>>(cells: &mut [C]) {
    let mut best: HashMap<&str, f64> = HashMap::new();
    for c in cells.iter() {
        let c = c.borrow();
        let r = c.record();
        if let (Some(v), false) = (c.metric(), r.noisy) {
            let e = best.entry(r.spec_key.as_str()).or_insert(v);
            *e = if r.higher_is_better() {
                e.max(v)
            } else {
                e.min(v)
            };
        }
    }
    let relative: Vec<Option<f64>> = cells
        .iter()
        .map(|c| {
            let c = c.borrow();
            let r = c.record();
            match (c.metric(), best.get(r.spec_key.as_str())) {
                (Some(v), Some(&b)) => ratio(v, b, r.higher_is_better()),
                _ => None,
            }
        })
        .collect();
    for (c, relative) in cells.iter_mut().zip(relative) {
        c.borrow_mut().relative = relative;
    }
}
