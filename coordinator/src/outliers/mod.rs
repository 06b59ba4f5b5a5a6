//! Fleet outliers: identical devices compared with each other, and the one that does not perform
//! like its siblings named with a likely cause (issue 56).
//!
//! # Sibling groups
//!
//! Devices with the same model, backend, driver and device memory form a group ([`SiblingKey`]):
//! the model and memory from the device's stored description, the driver from the result's own
//! fingerprint, so a device whose driver changed joins the group of that driver, as its history
//! starts a new segment. For each spec of a campaign a group of at least
//! [`OutlierConfig::min_group`] devices has a centre (the median of its devices' values) and a
//! robust spread across devices (1.4826 × the median absolute deviation), not the spread within a
//! run.
//!
//! # Outliers
//!
//! A device is an outlier on a spec when its value is *worse* than its siblings' median (lower
//! throughput, higher latency) by more than [`OutlierConfig::k`] robust spreads **and** by at
//! least [`OutlierConfig::min_gap_pct`] of the median: the spread keeps a noisy group from crying
//! wolf, the gap keeps a very quiet group from flagging a 1 % difference nobody cares about. A
//! device with several results on a spec (its rerun) is an outlier only when every one of them is
//! beyond both bounds, and then [`Outlier::confirmed`]: after a scheduled campaign the serve reruns
//! each device named once ([`collect::queue_outlier_reruns`]), as it reruns a suspect regression. The
//! defaults were chosen by the seeded simulation in `tests.rs` (table in docs/fleet.md). Each
//! outlier gets its likely cause from what is stored ([`cause`]): a PCIe link below its maximum,
//! a lower power cap or clock, a higher temperature during the run, another firmware, a noisy
//! run, or "unknown".
//!
//! # Layout
//! - this file: the groups, the detection (pure: observations in, report out).
//! - [`cause`]: the likely cause of one outlier, from its conditions and its siblings'.
//! - [`collect`]: the observations of a campaign, from the store.

pub mod cause;
pub mod collect;
#[cfg(test)]
mod tests;

use self::cause::{Conditions, median};
use serde::Serialize;
use std::collections::BTreeMap;

/// The knobs of detection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OutlierConfig {
    /// Groups with fewer devices than this are not judged: a median of three says little.
    pub min_group: usize,
    /// How many robust spreads (across the group's devices) worse than the median a device must
    /// be.
    pub k: f64,
    /// The smallest gap from the median ever flagged, percent of the median.
    pub min_gap_pct: f64,
}

impl OutlierConfig {
    /// The defaults (see the module's doc and docs/fleet.md).
    pub const DEFAULT: OutlierConfig = OutlierConfig {
        min_group: 5,
        k: 4.0,
        min_gap_pct: 5.0,
    };
}

impl Default for OutlierConfig {
    fn default() -> Self {
        OutlierConfig::DEFAULT
    }
}

/// What makes devices siblings: the same model, backend, driver and device memory.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct SiblingKey {
    pub model: String,
    pub backend: String,
    pub driver: String,
    pub memory_bytes: u64,
}

impl std::fmt::Display for SiblingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let driver = if self.driver.is_empty() {
            "driver unknown".to_string()
        } else {
            format!("driver {}", self.driver)
        };
        write!(f, "{} · {} · {driver}", self.model, self.backend)?;
        if self.memory_bytes > 0 {
            write!(
                f,
                " · {:.1} GiB",
                self.memory_bytes as f64 / f64::from(1u32 << 30)
            )?;
        }
        Ok(())
    }
}

/// One device's result on one spec.
#[derive(Debug, Clone)]
pub struct Observation {
    pub result_id: i64,
    pub run_id: String,
    pub agent: String,
    pub device_id: String,
    pub group: SiblingKey,
    pub spec_key: String,
    /// The metric's unit (`GB/s`, `GFLOP/s`, `us`).
    pub unit: String,
    pub value: f64,
    pub higher_is_better: bool,
    /// What the run ran under, for the cause.
    pub conditions: Conditions,
}

/// One outlier.
#[derive(Debug, Clone, Serialize)]
pub struct Outlier {
    pub agent: String,
    pub device_id: String,
    pub result_id: i64,
    pub run_id: String,
    pub value: f64,
    /// How much worse than the median, percent of the median.
    pub gap_pct: f64,
    /// How many robust spreads from the median (infinite when the siblings do not spread).
    pub spreads: f64,
    /// The likely cause, in words ("PCIe x4 of x16", ..., "unknown").
    pub cause: String,
    /// The device's results on the spec in the campaign (the first and its reruns); every one
    /// of them is beyond the bounds.
    pub results: usize,
    /// A rerun confirmed it: two results or more, all beyond the bounds.
    pub confirmed: bool,
}

impl Outlier {
    /// Whether a rerun confirmed it, in words.
    pub fn rerun(&self) -> String {
        if self.confirmed {
            format!("confirmed ({} results)", self.results)
        } else {
            "not rerun yet".to_string()
        }
    }
}

/// One spec of one group.
#[derive(Debug, Clone, Serialize)]
pub struct SpecReport {
    pub spec_key: String,
    pub unit: String,
    pub higher_is_better: bool,
    pub devices: usize,
    pub median: f64,
    /// 1.4826 × MAD across the group's devices, in the metric's unit.
    pub spread: f64,
    pub outliers: Vec<Outlier>,
    /// Every device's value, for the groups page's strip (not in the JSON: a fleet's worth).
    #[serde(skip)]
    pub points: Vec<Point>,
}

/// One device's value on a spec.
#[derive(Debug, Clone)]
pub struct Point {
    pub agent: String,
    pub device_id: String,
    pub result_id: i64,
    pub value: f64,
}

/// One sibling group.
#[derive(Debug, Clone, Serialize)]
pub struct GroupReport {
    pub key: SiblingKey,
    /// Devices in the group (on any spec).
    pub devices: usize,
    pub specs: Vec<SpecReport>,
    /// Specs not judged: fewer devices than `min_group` ran them.
    pub too_small: usize,
}

impl GroupReport {
    /// The group's outliers, on every spec.
    pub fn outliers(&self) -> impl Iterator<Item = (&SpecReport, &Outlier)> {
        self.specs
            .iter()
            .flat_map(|s| s.outliers.iter().map(move |o| (s, o)))
    }
}

/// Judges every group on every spec. Several results of one device on one spec (a rerun) count
/// as their median.
pub fn detect(observations: &[Observation], cfg: &OutlierConfig) -> Vec<GroupReport> {
    // group → spec → device → its observations
    type Devices<'a> = BTreeMap<(&'a str, &'a str), Vec<&'a Observation>>;
    let mut groups: BTreeMap<&SiblingKey, BTreeMap<&str, Devices<'_>>> = BTreeMap::new();
    for o in observations.iter().filter(|o| o.value.is_finite()) {
        groups
            .entry(&o.group)
            .or_default()
            .entry(&o.spec_key)
            .or_default()
            .entry((&o.agent, &o.device_id))
            .or_default()
            .push(o);
    }
    let mut reports = Vec::new();
    for (key, specs) in groups {
        let mut all_devices = std::collections::BTreeSet::new();
        let mut report = GroupReport {
            key: key.clone(),
            devices: 0,
            specs: Vec::new(),
            too_small: 0,
        };
        for (spec_key, devices) in specs {
            all_devices.extend(devices.keys().copied());
            if devices.len() < cfg.min_group {
                report.too_small += 1;
                continue;
            }
            report.specs.push(judge(spec_key, &devices, cfg));
        }
        report.devices = all_devices.len();
        reports.push(report);
    }
    reports
}

/// One spec of one group: its centre, spread and outliers.
fn judge(
    spec_key: &str,
    devices: &BTreeMap<(&str, &str), Vec<&Observation>>,
    cfg: &OutlierConfig,
) -> SpecReport {
    // Each device's value (the median of its results), the result that stands for it, and its
    // least bad result (an outlier must be one in every result: its rerun confirms it).
    let per_device: Vec<(f64, &Observation, f64, usize)> = devices
        .values()
        .map(|obs| {
            let mut values: Vec<f64> = obs.iter().map(|o| o.value).collect();
            let v = median(&mut values).unwrap_or(f64::NAN);
            let closest = obs
                .iter()
                .min_by(|a, b| (a.value - v).abs().total_cmp(&(b.value - v).abs()))
                .expect("a device has a result");
            let least_bad = if obs[0].higher_is_better {
                values.iter().copied().fold(f64::NEG_INFINITY, f64::max)
            } else {
                values.iter().copied().fold(f64::INFINITY, f64::min)
            };
            (v, *closest, least_bad, obs.len())
        })
        .collect();
    let mut values: Vec<f64> = per_device.iter().map(|(v, ..)| *v).collect();
    let centre = median(&mut values).unwrap_or(f64::NAN);
    let mut deviations: Vec<f64> = values.iter().map(|v| (v - centre).abs()).collect();
    let spread = gpufleet_kernels::MAD_TO_SIGMA * median(&mut deviations).unwrap_or(0.0);
    let first = per_device[0].1;
    let higher_is_better = first.higher_is_better;
    let siblings: Vec<&Conditions> = per_device.iter().map(|(_, o, ..)| &o.conditions).collect();
    // How much worse than the centre `v` is: percent of the centre, robust spreads, whether worse.
    let worse = |v: f64| {
        let w = if higher_is_better {
            centre - v
        } else {
            v - centre
        };
        let spreads = if spread > 0.0 {
            w / spread
        } else {
            f64::INFINITY
        };
        (100.0 * w / centre.abs(), spreads, w > 0.0)
    };
    let beyond = |(gap, spreads, worse): (f64, f64, bool)| {
        worse && gap >= cfg.min_gap_pct && spreads > cfg.k
    };
    let mut outliers = Vec::new();
    for (v, o, least_bad, results) in &per_device {
        if centre.abs() <= 0.0 || !beyond(worse(*least_bad)) {
            continue;
        }
        let (gap_pct, spreads, _) = worse(*v);
        outliers.push(Outlier {
            agent: o.agent.clone(),
            device_id: o.device_id.clone(),
            result_id: o.result_id,
            run_id: o.run_id.clone(),
            value: *v,
            gap_pct,
            spreads,
            cause: cause::likely_cause(&o.conditions, &siblings),
            results: *results,
            confirmed: *results >= 2,
        });
    }
    outliers.sort_by(|a, b| b.gap_pct.total_cmp(&a.gap_pct));
    SpecReport {
        spec_key: spec_key.to_string(),
        unit: first.unit.clone(),
        higher_is_better,
        devices: per_device.len(),
        median: centre,
        spread,
        outliers,
        points: per_device
            .iter()
            .map(|(v, o, ..)| Point {
                agent: o.agent.clone(),
                device_id: o.device_id.clone(),
                result_id: o.result_id,
                value: *v,
            })
            .collect(),
    }
}
