//! `/devices/{agent}/{device}`: one device's ceilings and roofline.
//!
//! The ceilings measured by the `ceilings` suite's kernels (the latest result of each): arithmetic
//! from `compute_peak` per type, memory bandwidth from the best of `copy` and the roofline sweep's
//! low end, host transfers from `transfer`; each beside the device table's theoretical peak where
//! there is one. The roofline chart puts every latest result of the device at its operational
//! intensity (the catalog's FLOPs over bytes for its kernel and parameters) and its achieved
//! GFLOP/s, under the measured roof (solid) and the theoretical one (dashed).

use super::{base, page};
use crate::store::{DeviceRow, ResultFilter, ResultRow, Store};
use crate::table::fmt_metric;
use crate::web::links::Links;
use crate::web::page::{Page, WebError, clip};
use crate::web::svg::{self, Roof, RoofPoint};
use gpufleet_kernels::{KernelId, Problem};
use serde_json::{Value, json};

/// A result's operational intensity and achieved GFLOP/s, and its family's name; `None` for a
/// result the catalog no longer knows, without time, or that moves no bytes or does no arithmetic
/// (a copy: it is the bandwidth roof instead).
fn placed(r: &ResultRow) -> Option<(f64, f64, &'static str)> {
    let rec = &r.record;
    let median = rec.median_s.filter(|m| *m > 0.0)?;
    let p = Problem::new(&rec.kernel, &rec.variant, &rec.params, &rec.dtype, true).ok()?;
    let (flops, bytes) = (p.flops(), p.bytes());
    if flops <= 0.0 || bytes <= 0.0 {
        return None;
    }
    let family = match p.id() {
        KernelId::Gemm => "gemm",
        KernelId::Conv2d => "conv",
        KernelId::Model(_) => "network",
        KernelId::Llm(_) => "transformer",
        KernelId::Elementwise(_) => "memory",
        KernelId::Rows(_) => "rows",
        KernelId::Ceiling(_) => "ceiling",
        KernelId::Host(_) | KernelId::Debug(_) => "other",
    };
    Some((flops / bytes, flops / median / 1e9, family))
}

/// The highest `value` among the results `keep` selects, with its result's id.
fn highest(
    results: &[ResultRow],
    keep: impl Fn(&ResultRow) -> bool,
    value: impl Fn(&ResultRow) -> Option<f64>,
) -> Option<(f64, i64)> {
    results
        .iter()
        .filter(|r| keep(r))
        .filter_map(|r| value(r).map(|v| (v, r.id)))
        .max_by(|a, b| a.0.total_cmp(&b.0))
}

/// The best metric among the latest ok results of `kernel`/`variant` (any parameters).
fn best(results: &[ResultRow], kernel: &str, variant: Option<&str>) -> Option<(f64, i64)> {
    highest(
        results,
        |r| r.record.kernel == kernel && variant.is_none_or(|v| r.record.variant == v),
        |r| r.record.metric_value,
    )
}

/// The roofline sweep's low end (flops per byte 0: a copy), in GB/s from its configuration.
fn sweep_bandwidth(results: &[ResultRow]) -> Option<(f64, i64)> {
    highest(
        results,
        |r| r.record.kernel == "roofline" && r.record.params.get("pairs") == Some(&0),
        |r| r.record.config.get("achieved_gbps")?.as_str()?.parse().ok(),
    )
}

/// `/devices/{agent}/{device}`.
///
/// # Errors
/// [`WebError::NotFound`] when the agent has no such device; a store error.
pub fn device(
    store: &Store,
    links: &Links,
    agent: &str,
    device_id: &str,
) -> Result<Page, WebError> {
    let dev: DeviceRow = store
        .devices()?
        .into_iter()
        .find(|d| d.agent == agent && d.device_id == device_id)
        .ok_or_else(|| {
            WebError::NotFound(format!(
                "agent {} has no device {}",
                clip(agent),
                clip(device_id)
            ))
        })?;
    let results: Vec<ResultRow> = store
        .results(&ResultFilter {
            agent: Some(agent.to_string()),
            device_id: Some(device_id.to_string()),
            status: Some("ok".into()),
            latest_per_device_and_key: true,
            ..Default::default()
        })?
        .into_iter()
        .filter(|r| r.record.mode == "compute_only")
        .collect();
    let peaks = &dev.info["peaks"];
    let theory = |key: &str| peaks[key].as_f64().filter(|v| *v > 0.0).map(|v| v / 1e9);
    let source = |key: &str| peaks[key].as_str().unwrap_or("").to_string();
    let (fp32, fp16, mem) = (
        theory("fp32_flops"),
        theory("fp16_flops"),
        theory("memory_bytes_per_s"),
    );
    let copy = best(&results, "copy", None);
    let bandwidth = [copy, sweep_bandwidth(&results)]
        .into_iter()
        .flatten()
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let compute = best(&results, "compute_peak", Some("fp32"));
    // The ceilings table: what was measured, by which result, beside the theory.
    let mut ceilings = Vec::new();
    let mut row = |what: &str,
                   measured: Option<(f64, i64)>,
                   unit: &str,
                   theory: Option<(f64, String)>| {
        let pct = match (measured, &theory) {
            (Some((m, _)), Some((t, _))) => format!("{:.1}%", m / t * 100.0),
            _ => "-".into(),
        };
        ceilings.push(json!({
            "what": what,
            "measured": measured.map(|(v, _)| format!("{} {unit}", fmt_metric(v))).unwrap_or_else(|| "-".into()),
            "href": measured.map(|(_, id)| links.run(id)).unwrap_or_default(),
            "theoretical": theory.as_ref().map(|(v, _)| format!("{} {unit}", fmt_metric(*v))).unwrap_or_else(|| "-".into()),
            "source": theory.map(|(_, s)| s).unwrap_or_default(),
            "pct": pct,
        }));
    };
    row(
        "fp32 arithmetic (compute_peak)",
        compute,
        "GFLOP/s",
        fp32.map(|v| (v, source("fp32_source"))),
    );
    row(
        "fp16 arithmetic (compute_peak)",
        best(&results, "compute_peak", Some("fp16")),
        "GFLOP/s",
        fp16.map(|v| (v, source("fp16_source"))),
    );
    row(
        "fp64 arithmetic (compute_peak)",
        best(&results, "compute_peak", Some("fp64")),
        "GFLOP/s",
        None,
    );
    row(
        "int32 arithmetic (compute_peak)",
        best(&results, "compute_peak", Some("int32")),
        "GOP/s",
        None,
    );
    row(
        "int8 dot products (compute_peak)",
        best(&results, "compute_peak", Some("int8")),
        "GOP/s",
        None,
    );
    row(
        "memory bandwidth (copy, roofline sweep)",
        bandwidth,
        "GB/s",
        mem.map(|v| (v, source("memory_source"))),
    );
    for (variant, what) in [
        ("h2d", "host to device"),
        ("d2h", "device to host"),
        ("d2d", "device to device"),
    ] {
        for (pinned, memory) in [(1, "pinned"), (0, "pageable")] {
            if variant == "d2d" && pinned == 0 {
                continue;
            }
            let m = highest(
                &results,
                |r| {
                    r.record.kernel == "transfer"
                        && r.record.variant == variant
                        && r.record.params.get("pinned") == Some(&pinned)
                },
                |r| r.record.metric_value,
            );
            let label = if variant == "d2d" {
                format!("{what} (transfer)")
            } else {
                format!("{what}, {memory} (transfer)")
            };
            row(&label, m, "GB/s", None);
        }
    }
    let mut roofs = Vec::new();
    if let (Some((c, _)), Some((b, _))) = (compute, bandwidth) {
        roofs.push(Roof {
            gbps: b,
            gflops: c,
            measured: true,
            label: "measured".into(),
        });
    }
    if let (Some(c), Some(b)) = (fp32, mem) {
        roofs.push(Roof {
            gbps: b,
            gflops: c,
            measured: false,
            label: "theoretical".into(),
        });
    }
    let mut points = Vec::new();
    let mut unplaced = 0usize;
    for r in &results {
        let Some((intensity, gflops, family)) = placed(r) else {
            unplaced += 1;
            continue;
        };
        let rec = &r.record;
        let params: Vec<String> = rec.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        points.push(RoofPoint {
            intensity,
            gflops,
            family: family.into(),
            title: format!(
                "{} {} {} {}: {} GFLOP/s at {} FLOP/byte (result #{})",
                rec.kernel,
                rec.variant,
                params.join(","),
                rec.dtype,
                fmt_metric(gflops),
                fmt_metric(intensity),
                r.id
            ),
            href: links.run(r.id),
        });
    }
    let chart =
        (!points.is_empty() || !roofs.is_empty()).then(|| svg::roofline_chart(&points, &roofs));
    let facts: Vec<Value> = [
        ("Agent", dev.agent.clone()),
        ("Device id", dev.device_id.clone()),
        ("Backend", dev.backend.clone()),
        ("Vendor", dev.vendor.clone()),
        ("Architecture", dev.arch.clone()),
        ("PCI bus id", dev.pci_bus_id.clone()),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_empty())
    .map(|(k, v)| json!([k, v]))
    .collect();
    let m = base(links, store, &format!("Device: {}", dev.name), "device")?;
    Ok(page(
        "device.html",
        m,
        json!({
            "name": dev.name,
            "facts": facts,
            "ceilings": ceilings,
            "chart": chart,
            "points": points.len(),
            "unplaced": unplaced,
            "no_ceilings": compute.is_none() && bandwidth.is_none(),
        }),
    ))
}
