//! Side-by-side comparison of results with the same spec key across
//! devices. Pure: rows in, ranked rows and rendered text out.
//!
//! Each result is compared with the best `ok` result of its spec key
//! (kernel, variant, params, dtype, mode): `relative` is 1.00 for the best
//! and below 1 for the others, whichever way the metric improves (GFLOP/s up,
//! µs down). Rows that are not `ok` have no metric and no relative figure.

use crate::table::{Format, Table};
use serde::Serialize;
use std::collections::BTreeMap;

/// One device's latest result for one spec key.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompareRow {
    pub spec_key: String,
    pub kernel: String,
    pub variant: String,
    pub params: String,
    pub dtype: String,
    pub mode: String,
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
    pub cv: Option<f64>,
    pub iterations: u32,
    /// Average power over the kernel window, watts (devices with a sensor).
    pub avg_watts: Option<f64>,
    /// The metric per watt: GFLOP/s/W or GB/s/W.
    pub metric_per_watt: Option<f64>,
    /// Energy per unit of work: J/GFLOP or J/GB.
    pub joules_per_unit: Option<f64>,
    /// This row's metric relative to the best row of its spec key (1 = best).
    pub relative: Option<f64>,
    pub run_id: String,
}

/// A result whose coefficient of variation is above this is noisy: it is marked in every view and
/// never the best of its spec key.
pub const NOISY_CV: f64 = 0.10;

/// Whether a result with this CV is noisy (no CV: not known to be).
pub fn is_noisy(cv: Option<f64>) -> bool {
    cv.is_some_and(|c| c > NOISY_CV)
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
        if let (Some(v), "ok", false) = (r.metric, r.status.as_str(), is_noisy(r.cv)) {
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

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map(f).unwrap_or_else(|| "-".to_string())
}

/// Units of the per-watt and per-work columns for a metric unit.
fn power_units(unit: &str) -> (&'static str, &'static str) {
    match unit {
        "GFLOP/s" => ("GFLOP/s/W", "J/GFLOP"),
        "GB/s" => ("GB/s/W", "J/GB"),
        _ => ("", ""),
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

/// Ranked rows as CSV for scripts: every numeric column a plain number (empty when missing) with
/// its unit in the header or in `unit`, the full run id, and the reason of non-ok rows.
pub fn csv(rows: &[CompareRow]) -> String {
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
        "cv_pct",
        "noisy",
        "relative",
        "avg_w",
        "metric_per_w",
        "j_per_unit",
        "iterations",
        "run_id",
        "message",
    ]);
    for r in rows {
        t.push(vec![
            r.kernel.clone(),
            r.variant.clone(),
            r.params.clone(),
            r.dtype.clone(),
            r.mode.clone(),
            env_set(&r.spec_key).to_string(),
            r.agent.clone(),
            r.device_id.clone(),
            r.device_name.clone(),
            r.backend.clone(),
            r.status.clone(),
            csv_number(r.metric),
            r.unit.clone(),
            r.higher_is_better.to_string(),
            csv_number(r.pct_of_peak.filter(|p| *p > 0.0)),
            csv_number(r.cv.map(|c| c * 100.0)),
            is_noisy(r.cv).to_string(),
            csv_number(r.relative),
            csv_number(r.avg_watts),
            csv_number(r.metric_per_watt),
            csv_number(r.joules_per_unit),
            r.iterations.to_string(),
            r.run_id.clone(),
            r.message.clone(),
        ]);
    }
    t.render(Format::Csv)
}

/// Renders ranked rows in `format`.
pub fn render(rows: &[CompareRow], format: Format) -> String {
    match format {
        Format::Json => {
            return serde_json::to_string_pretty(rows).unwrap_or_else(|_| "[]".into()) + "\n";
        }
        Format::Csv => return csv(rows),
        Format::Table | Format::Md => {}
    }
    // Energy columns only when some device had a power sensor.
    let power = rows.iter().any(|r| r.avg_watts.is_some());
    // The env-set column only when a campaign ran an environment matrix.
    let matrix = rows.iter().any(|r| !env_set(&r.spec_key).is_empty());
    let mut header = vec!["kernel", "variant", "params", "dtype", "mode"];
    if matrix {
        header.push("env set");
    }
    header.extend([
        "agent", "device", "backend", "status", "metric", "unit", "% peak", "cv %", "rel",
    ]);
    if power {
        header.extend(["avg W", "metric/W", "J/unit"]);
    }
    let mut t = Table::new(&header);
    for r in rows {
        let mut cells = vec![
            r.kernel.clone(),
            r.variant.clone(),
            r.params.clone(),
            r.dtype.clone(),
            r.mode.clone(),
        ];
        if matrix {
            cells.push(match env_set(&r.spec_key) {
                "" => "-".to_string(),
                name => name.to_string(),
            });
        }
        cells.extend([
            r.agent.clone(),
            r.device_id.clone(),
            r.backend.clone(),
            r.status.clone(),
            opt(r.metric, fmt_metric),
            if r.metric.is_some() {
                r.unit.clone()
            } else {
                "-".into()
            },
            opt(r.pct_of_peak.filter(|p| *p > 0.0), |p| format!("{p:.1}")),
            opt(r.cv, |c| format!("{:.1}", c * 100.0)),
            opt(r.relative, |x| format!("{x:.2}")),
        ]);
        if power {
            let (per_watt, per_unit) = power_units(&r.unit);
            cells.extend([
                opt(r.avg_watts, |w| format!("{w:.1}")),
                opt(r.metric_per_watt, |v| {
                    format!("{} {per_watt}", fmt_metric(v))
                }),
                opt(r.joules_per_unit, |j| format!("{j:.3e} {per_unit}")),
            ]);
        }
        t.push(cells);
    }
    t.render(format)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(key: &str, dev: &str, status: &str, metric: Option<f64>, higher: bool) -> CompareRow {
        CompareRow {
            spec_key: key.into(),
            kernel: key.split('/').next().unwrap().into(),
            variant: "v".into(),
            params: "n=1".into(),
            dtype: "f32".into(),
            mode: "compute_only".into(),
            agent: "a".into(),
            device_id: dev.into(),
            device_name: dev.into(),
            backend: "cpu".into(),
            status: status.into(),
            message: String::new(),
            metric,
            unit: "GFLOP/s".into(),
            higher_is_better: higher,
            pct_of_peak: None,
            cv: Some(0.01),
            iterations: 10,
            avg_watts: None,
            metric_per_watt: None,
            joules_per_unit: None,
            relative: None,
            run_id: format!("{key}-{dev}"),
        }
    }

    #[test]
    fn relative_to_best_either_direction() {
        let mut rows = vec![
            row("gemm/x", "d1", "ok", Some(50.0), true),
            row("gemm/x", "d2", "ok", Some(100.0), true),
            row("noop/x", "d1", "ok", Some(2.0), false),
            row("noop/x", "d2", "ok", Some(8.0), false),
            row("gemm/x", "d3", "crashed", None, true),
        ];
        rank(&mut rows);
        assert_eq!(rows[0].device_id, "d2");
        assert_eq!(rows[0].relative, Some(1.0));
        assert_eq!(rows[1].relative, Some(0.5));
        assert_eq!(rows[2].status, "crashed");
        assert_eq!(rows[2].relative, None);
        assert_eq!(rows[3].device_id, "d1");
        assert_eq!(rows[4].relative, Some(0.25));
    }

    #[test]
    fn failed_rows_do_not_set_the_best() {
        let mut rows = vec![
            row("k/x", "d1", "invalid", Some(1000.0), true),
            row("k/x", "d2", "ok", Some(10.0), true),
        ];
        rank(&mut rows);
        let ok = rows.iter().find(|r| r.device_id == "d2").unwrap();
        assert_eq!(ok.relative, Some(1.0));
    }

    #[test]
    fn renders_all_formats() {
        let mut rows = vec![row("gemm/x", "d1", "ok", Some(12.345), true)];
        rank(&mut rows);
        let t = render(&rows, Format::Table);
        assert!(t.contains("12.35"), "{t}");
        assert!(render(&rows, Format::Md).starts_with("| kernel |"));
        assert!(render(&rows, Format::Csv).starts_with("kernel,variant"));
        let j: serde_json::Value = serde_json::from_str(&render(&rows, Format::Json)).unwrap();
        assert_eq!(j[0]["metric"], 12.345);
        assert_eq!(j[0]["relative"], 1.0);
        assert!(!t.contains("avg W"), "no sensor, no energy columns: {t}");
    }

    #[test]
    fn energy_columns_appear_with_a_sensor() {
        let mut a = row("gemm/x", "d1", "ok", Some(500.0), true);
        a.avg_watts = Some(250.0);
        a.metric_per_watt = Some(2.0);
        a.joules_per_unit = Some(0.5);
        let mut rows = vec![a, row("gemm/x", "d2", "ok", Some(100.0), true)];
        rank(&mut rows);
        let t = render(&rows, Format::Table);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].ends_with("avg W  metric/W        J/unit"), "{t}");
        assert!(
            lines[2].ends_with("250.0  2.00 GFLOP/s/W  5.000e-1 J/GFLOP"),
            "{t}"
        );
        assert!(lines[3].ends_with("-      -               -"), "{t}");
        // CSV: the same figures as plain numbers, units in the header or the unit column.
        let csv = render(&rows, Format::Csv);
        assert!(
            csv.lines()
                .next()
                .unwrap()
                .contains(",avg_w,metric_per_w,j_per_unit,"),
            "{csv}"
        );
        assert!(csv.lines().nth(1).unwrap().contains(",250,2,0.5,"), "{csv}");
        assert!(csv.lines().nth(2).unwrap().contains(",,,,"), "{csv}");
    }

    #[test]
    fn env_sets_are_their_own_rows_with_their_name() {
        let mut rows = vec![
            row("gemm/x@stock", "d1", "ok", Some(100.0), true),
            row("gemm/x@gfx1030", "d1", "ok", Some(120.0), true),
        ];
        rank(&mut rows);
        // Each set is ranked on its own key: both are the best of their row.
        assert!(rows.iter().all(|r| r.relative == Some(1.0)));
        let t = render(&rows, Format::Table);
        assert!(
            t.lines().next().unwrap().contains("mode          env set"),
            "{t}"
        );
        let csv = render(&rows, Format::Csv);
        assert!(
            csv.contains(",gfx1030,") && csv.contains(",stock,"),
            "{csv}"
        );
        let plain = render(&[row("gemm/x", "d1", "ok", Some(1.0), true)], Format::Table);
        assert!(!plain.contains("env set"), "{plain}");
    }
}
