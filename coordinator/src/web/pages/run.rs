//! `/runs/{id}`: one result, every field, its iteration times and its power trace.

use super::{base, page};
use crate::store::{ResultFilter, ResultRecord, ResultRow, Store};
use crate::table::{fmt_metric, params_text, per_watt_unit};
use crate::time::fmt_time;
use crate::web::links::{HistoryQuery, Links};
use crate::web::page::{Page, WebError, clip};
use crate::web::svg::{self, PowerReading};
use serde_json::{Value, json};

/// `/runs/{reference}`: a result number, or 4 or more leading hex digits of its run id (the
/// short run ids `gpufleet results` prints). A short id made only of digits reads as a number
/// first; when no result has that number, as a run id's start (one run id in forty begins with
/// eight digits).
///
/// # Errors
/// [`WebError::BadRequest`] for a reference that is neither, or a prefix that several run ids
/// share; [`WebError::NotFound`] when nothing matches.
pub fn run_by_ref(store: &Store, links: &Links, reference: &str) -> Result<Page, WebError> {
    let prefix = reference.to_ascii_lowercase();
    let is_prefix = prefix.len() >= 4 && prefix.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
    if let Ok(number) = reference.parse::<i64>() {
        match run(store, links, number) {
            Err(WebError::NotFound(_)) if is_prefix => {}
            page => return page,
        }
    } else if !is_prefix {
        return Err(WebError::BadRequest(format!(
            "result {:?} is neither a result number nor a run id (4 or more of its hex digits, as `gpufleet results` prints)",
            clip(reference)
        )));
    }
    match store.results_with_run_prefix(&prefix, 2)?.as_slice() {
        [one] => run(store, links, *one),
        [] => Err(WebError::NotFound(format!(
            "no result numbered or whose run id starts with {prefix}"
        ))),
        _ => Err(WebError::BadRequest(format!(
            "run id {prefix} starts more than one result's run id; give more of it"
        ))),
    }
}

/// `/runs/{id}`.
pub fn run(store: &Store, links: &Links, id: i64) -> Result<Page, WebError> {
    let row = store
        .results(&ResultFilter {
            id: Some(id),
            with_samples: true,
            ..Default::default()
        })?
        .pop()
        .ok_or_else(|| WebError::NotFound(format!("no result {id}")))?;
    let rec = &row.record;
    let mut fields = fields(&row, links);
    if let Some(c) = store.confirms(row.id)? {
        fields.push(("Confirms".into(), format!("result #{c}"), links.run(c)));
    }
    if let Some(sig) = rec.signal {
        fields.push(("Signal".into(), sig.to_string(), String::new()));
    }
    let fields: Vec<Value> = fields
        .into_iter()
        .map(|(a, b, c)| json!([a, b, c]))
        .collect();
    let times_chart = (!rec.times.is_empty())
        .then(|| svg::histogram(&rec.times, rec.median_s, rec.upper_fence_s));
    // What retention dropped: said where the chart would be, so an empty space is explained.
    let compacted: Vec<String> = [
        (rec.samples_compacted_at, "per-iteration times"),
        (rec.power_compacted_at, "power trace"),
    ]
    .into_iter()
    .filter_map(|(at, what)| {
        at.map(|t| {
            format!(
                "The {what} of this result was compacted on {} (gpufleet db compact); its summary is kept.",
                fmt_time(t)
            )
        })
    })
    .collect();
    let m = base(
        links,
        store,
        &format!(
            "Result #{id}: {} on {}",
            rec.kernel,
            row.device_name.clone().unwrap_or(rec.device_id.clone())
        ),
        "run",
    )?;
    Ok(page(
        "run.html",
        m,
        json!({
            "status": rec.status, "status_class": rec.status, "message": rec.message, "fields": fields,
            "energy": energy(rec), "times_chart": times_chart, "power_chart": power_chart(rec),
            "compacted": compacted,
            "json_fields": json_fields(rec), "stderr_tail": rec.stderr_tail,
        }),
    ))
}

/// `value unit` of a metric-like figure, `-` when missing.
fn num(v: Option<f64>, unit: &str) -> String {
    v.map(|v| format!("{} {unit}", fmt_metric(v)))
        .unwrap_or_else(|| "-".into())
}

/// Microseconds of a time in seconds, `-` when missing.
fn us(v: Option<f64>) -> String {
    v.map(|v| format!("{:.3} µs", v * 1e6))
        .unwrap_or_else(|| "-".into())
}

/// The robust CV, why the result is noisy if it is, and the high outliers.
fn robust(rec: &ResultRecord) -> String {
    let spread = rec
        .robust_cv
        .map(|r| format!("{:.2}%", r * 100.0))
        .unwrap_or("-".into());
    let noisy = rec.noisy_note();
    let outliers = match (rec.outliers_high, rec.upper_fence_s) {
        (Some(n), Some(f)) => format!(" · {n} above the Tukey fence {}", us(Some(f))),
        _ => String::new(),
    };
    format!("{spread}{noisy}{outliers}")
}

/// Timed iterations, and the warm-up the agent recorded in the config (how many, how long,
/// how many first samples it dropped as still warming up).
fn iterations(rec: &ResultRecord) -> String {
    let config = |key: &str| rec.config.get(key).and_then(Value::as_str);
    let mut text = rec.iterations.to_string();
    if let (Some(n), Some(s)) = (config("warmup_iterations"), config("warmup_s")) {
        text += &format!(" · {n} warm-up in {s} s");
        if let Some(t) = config("warmup_trimmed") {
            text += &format!(" ({t} found slow after the fact)");
        }
        if config("warmup_capped").is_some() {
            text += " (capped while still falling)";
        }
    }
    text
}

/// The result's fields as (label, text, link) in display order; the link is empty where none.
fn fields(row: &ResultRow, links: &Links) -> Vec<(String, String, String)> {
    let rec = &row.record;
    let hq = HistoryQuery {
        spec: rec.spec_key.clone(),
        agent: row.agent.clone(),
        device: rec.device_id.clone(),
        scale: String::new(),
    };
    let field = |label: &str, text: String| (label.to_string(), text, String::new());
    let cv = rec
        .cv
        .map(|c| format!("{:.2}%", c * 100.0))
        .unwrap_or("-".into());
    let mut fields = vec![
        field("Run id", rec.run_id.clone()),
        (
            "Kernel".into(),
            format!("{}/{}", rec.kernel, rec.variant),
            links.history(&hq),
        ),
        field("Parameters", params_text(&rec.params, ", ")),
        field("Dtype · mode", format!("{} · {}", rec.dtype, rec.mode)),
        field("Agent", row.agent.clone()),
        field(
            "Device",
            format!(
                "{} ({})",
                row.device_name.clone().unwrap_or_default(),
                rec.device_id
            ),
        ),
        field("Backend", rec.backend.clone()),
        field("Metric", num(rec.ok_metric(), rec.unit())),
        field(
            "% of peak",
            rec.pct_of_peak
                .map(|p| format!("{p:.1}%"))
                .unwrap_or("-".into()),
        ),
        field(
            "Median · p10 · p90",
            format!(
                "{} · {} · {}",
                us(rec.median_s),
                us(rec.p10_s),
                us(rec.p90_s)
            ),
        ),
        // The robust figures first: one slow iteration (a page fault, a preempted thread) moves
        // the plain ones, which follow, labelled as such.
        field("Robust CV · outliers", robust(rec)),
        field("Iterations · warm-up", iterations(rec)),
        field(
            "Min · max · mean (every iteration)",
            format!("{} · {} · {}", us(rec.min_s), us(rec.max_s), us(rec.mean_s)),
        ),
        field("Plain CV (every iteration)", cv),
        field("Started", fmt_time(rec.started_at)),
        field("Wall time", format!("{:.2} s", rec.wall_s)),
        field("Stored", rec.created_at.map(fmt_time).unwrap_or_default()),
    ];
    if let Some(c) = rec.campaign_id {
        let suite = row
            .suite
            .as_ref()
            .map(|s| format!(" ({s})"))
            .unwrap_or_default();
        fields.push(("Campaign".into(), format!("#{c}{suite}"), links.campaign(c)));
    }
    fields
}

/// The energy figures as (label, text), from the result's energy object; empty without one.
fn energy(rec: &ResultRecord) -> Vec<Value> {
    let e = &rec.energy;
    if !e.is_object() {
        return Vec::new();
    }
    let watts = |key: &str| {
        e[key]
            .as_f64()
            .filter(|w| *w > 0.0)
            .map(|w| format!("{w:.1} W"))
    };
    [
        ("Energy", rec.energy_j.map(|j| format!("{j:.3} J"))),
        ("Average power", rec.avg_watts.map(|w| format!("{w:.1} W"))),
        ("Peak power", watts("peak_watts")),
        ("Idle power", watts("idle_watts")),
        (
            "Window",
            e["window_s"]
                .as_f64()
                .map(|w| format!("{w:.3} s, {} samples", e["samples"])),
        ),
        (
            "Source",
            e["source"].as_str().map(|s| {
                format!(
                    "{s} ({}, {})",
                    e["scope"].as_str().unwrap_or(""),
                    e["method"].as_str().unwrap_or("")
                )
            }),
        ),
        (
            "Per watt",
            rec.metric_per_watt
                .map(|v| format!("{} {}", fmt_metric(v), per_watt_unit(rec.unit()))),
        ),
        (
            "Per unit of work",
            rec.joules_per_unit.map(|v| {
                format!(
                    "{v:.4e} {}",
                    e["joules_per_unit_unit"].as_str().unwrap_or("J/unit")
                )
            }),
        ),
        (
            "Note",
            e["message"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(String::from),
        ),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.map(|v| json!([k, v])))
    .collect()
}

/// The power trace of the energy's channel with the kernel window marked; `None` without
/// samples.
fn power_chart(rec: &ResultRecord) -> Option<String> {
    let e = &rec.energy;
    let pci = e["pci_bus_id"].as_str().unwrap_or("");
    let source = e["source"].as_str().unwrap_or("");
    let readings: Vec<PowerReading> = rec
        .power
        .iter()
        .filter(|p| {
            (source.is_empty() || p.source == source) && (pci.is_empty() || p.pci_bus_id == pci)
        })
        .filter_map(|p| {
            Some(PowerReading {
                monotonic_ns: p.monotonic_ns,
                watts: p.reading.watts?,
            })
        })
        .collect();
    let window = match (e["window_begin_ns"].as_u64(), e["window_end_ns"].as_u64()) {
        (Some(a), Some(b)) if b > a => Some((a, b)),
        _ => None,
    };
    (!readings.is_empty()).then(|| {
        svg::power_chart(
            &readings,
            window,
            e["idle_watts"].as_f64().filter(|w| *w > 0.0),
            "seconds from the first sample (the run's window shaded)",
        )
    })
}

/// Validation, tuned configuration and fingerprint as pretty JSON, those that are not empty.
fn json_fields(rec: &ResultRecord) -> Vec<Value> {
    [
        ("Validation", &rec.validation),
        ("Tuned configuration", &rec.config),
        ("Fingerprint", &rec.fingerprint),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_null() && v.as_object().is_none_or(|o| !o.is_empty()))
    .map(|(k, v)| {
        let text = serde_json::to_string_pretty(v).expect("a JSON value serialises");
        json!([k, text])
    })
    .collect()
}
