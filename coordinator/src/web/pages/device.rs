//! `/devices/{agent}/{device}`: one device's ceilings and roofline.
//!
//! The ceilings measured by the `ceilings` suite's kernels (the latest result of each), as the
//! catalog lists them (`DEVICE_CEILINGS`: arithmetic per type, memory bandwidth, host transfers),
//! each beside the device table's theoretical peak where there is one. The roofline chart puts every latest result of the device at its operational
//! intensity (the catalog's FLOPs over bytes for its kernel and parameters) and its achieved
//! GFLOP/s, under the measured roof (solid) and the theoretical one (dashed).

use super::{base, page};
use crate::store::{DeviceRow, ResultFilter, ResultRow, Store};
use crate::table::fmt_metric;
use crate::web::links::Links;
use crate::web::page::{Page, WebError, clip};
use crate::web::svg::{self, Roof, RoofPoint};
use gpufleet_kernels::{
    ACHIEVED_GBPS, DEVICE_CEILINGS, DeviceCeiling, KernelGroup, Problem, RoofPart, human_bytes,
};
use serde_json::{Value, json};

/// A result's operational intensity and achieved GFLOP/s, and its kernel's group; `None` for a
/// result the catalog no longer knows, without time, or that moves no bytes or does no arithmetic
/// (a copy: it is the bandwidth roof instead).
fn placed(r: &ResultRow) -> Option<(f64, f64, KernelGroup)> {
    let rec = &r.record;
    let median = rec.median_s.filter(|m| *m > 0.0)?;
    // Operations on integers (compute_peak int8, int32) are not FLOPs: no point on this roof.
    if gpufleet_kernels::variant_unit(&rec.kernel, &rec.variant, "GFLOP/s") != "GFLOP/s" {
        return None;
    }
    let p = Problem::new(&rec.kernel, &rec.variant, &rec.params, &rec.dtype, true).ok()?;
    let (flops, bytes) = (p.flops(), p.bytes());
    if flops <= 0.0 || bytes <= 0.0 {
        return None;
    }
    Some((flops / bytes, flops / median / 1e9, p.id().group()))
}

/// The bytes one run of a result's problem moves (its size, for a label), when the catalog knows it.
fn moved_bytes(r: &ResultRow) -> Option<f64> {
    let rec = &r.record;
    let p = Problem::new(&rec.kernel, &rec.variant, &rec.params, &rec.dtype, true).ok()?;
    Some(p.bytes()).filter(|b| *b > 0.0)
}

/// The best value among the latest ok results that measure `ceiling` (see
/// [`gpufleet_kernels::CeilingSource`]), with its result's id.
fn measured(results: &[ResultRow], ceiling: &DeviceCeiling) -> Option<(f64, i64)> {
    let value = |r: &ResultRow| {
        let s = ceiling.sources.iter().find(|s| {
            r.record.kernel == s.kernel
                && s.variant.is_none_or(|v| r.record.variant == v)
                && s.param
                    .is_none_or(|(k, v)| r.record.params.get(k) == Some(&v))
        })?;
        if s.bandwidth {
            r.record.config.get(ACHIEVED_GBPS)?.as_str()?.parse().ok()
        } else {
            r.record.metric_value
        }
    };
    results
        .iter()
        .filter_map(|r| value(r).map(|v| (v, r.id)))
        .max_by(|a, b| a.0.total_cmp(&b.0))
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
    // The ceilings table: what was measured, by which result, beside the theory; and the roofs
    // the measured and theoretical compute and bandwidth ceilings draw.
    let mut ceilings = Vec::new();
    let (mut measured_roof, mut theory_roof) = ([None, None], [None, None]);
    for c in DEVICE_CEILINGS {
        let m = measured(&results, c);
        let theory = c.peak.and_then(|(value, source)| {
            let v = peaks[value].as_f64().filter(|v| *v > 0.0)? / 1e9;
            Some((v, peaks[source].as_str().unwrap_or("").to_string()))
        });
        if let Some(part) = c.roof {
            let i = usize::from(part == RoofPart::Bandwidth);
            measured_roof[i] = m.map(|(v, _)| v);
            theory_roof[i] = theory.as_ref().map(|(v, _)| *v);
        }
        let unit = c.unit;
        let pct = match (m, &theory) {
            (Some((m, _)), Some((t, _))) => format!("{:.1}%", m / t * 100.0),
            _ => "-".into(),
        };
        ceilings.push(json!({
            "what": c.what,
            "measured": m.map(|(v, _)| format!("{} {unit}", fmt_metric(v))).unwrap_or_else(|| "-".into()),
            "href": m.map(|(_, id)| links.run(id)).unwrap_or_default(),
            "theoretical": theory.as_ref().map(|(v, _)| format!("{} {unit}", fmt_metric(*v))).unwrap_or_else(|| "-".into()),
            "source": theory.map(|(_, s)| s).unwrap_or_default(),
            "pct": pct,
        }));
    }
    let mut roofs = Vec::new();
    // The measured bandwidth is as good as the run that set it: a smoke-size copy sits in a
    // cache (or pays a launch per few bytes), so the roof says how many bytes it moved.
    let bandwidth_bytes = DEVICE_CEILINGS
        .iter()
        .find(|c| c.roof == Some(RoofPart::Bandwidth))
        .and_then(|c| measured(&results, c))
        .and_then(|(_, id)| results.iter().find(|r| r.id == id))
        .and_then(moved_bytes);
    if let [Some(c), Some(b)] = measured_roof {
        roofs.push(Roof {
            gbps: b,
            gflops: c,
            measured: true,
            label: match bandwidth_bytes {
                Some(bytes) => format!(
                    "measured (bandwidth from {} moved)",
                    human_bytes(bytes as u64)
                ),
                None => "measured".into(),
            },
        });
    }
    if let [Some(c), Some(b)] = theory_roof {
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
            family,
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
    // Points above the measured roof: it was measured too small (or the run that set it was
    // slow), which the caption says rather than leaving them unexplained.
    let above_measured = match measured_roof {
        [Some(c), Some(b)] => points
            .iter()
            .filter(|p| p.gflops > 1.05 * c.min(b * p.intensity))
            .count(),
        _ => 0,
    };
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
            "above_measured": above_measured,
            "bandwidth_bytes": bandwidth_bytes.map(|b| human_bytes(b as u64)).unwrap_or_default(),
            "no_ceilings": measured_roof == [None, None],
        }),
    ))
}
