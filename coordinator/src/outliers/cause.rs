//! The likely cause of an outlier, from what is stored about its run and its siblings' runs: the
//! PCIe link the agent read (`pcie_link:<bus>` and `pcie_link_max:<bus>` in the fingerprint's
//! platform), the power cap and clock in the fingerprint, the temperature and shader clock of the
//! power trace, a firmware the siblings do not have, and how noisy the run was. Every cause that
//! holds is named, most specific first; "unknown" when none does.

/// What one run ran under, as far as the store knows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Conditions {
    /// The PCIe link the device ran on and the device's maximum (`gen3 x4`, `gen3 x16`).
    pub pcie: Option<(String, String)>,
    pub power_cap_w: Option<f64>,
    /// The clock in the fingerprint, MHz.
    pub clock_mhz: Option<f64>,
    /// The highest temperature in the run's power trace, °C.
    pub max_temp_c: Option<f64>,
    /// The mean shader clock in the run's power trace, MHz.
    pub mean_sclk_mhz: Option<f64>,
    /// The device's firmware (VBIOS, GPU firmware), where the agent reports one.
    pub firmware: Option<String>,
    /// 1.4826 × MAD / median of the run's iteration times.
    pub robust_cv: Option<f64>,
    /// The store marked the run noisy.
    pub noisy: bool,
}

/// How much lower a power cap or clock must be than the siblings' median to be named (5 %).
const LOWER: f64 = 0.95;
/// How much hotter than the siblings' median a run must be to be named, °C.
const HOTTER_C: f64 = 10.0;

/// `gen3 x4` → (3, 4); `x16` alone → (0, 16).
fn link(text: &str) -> Option<(u32, u32)> {
    let mut gen_ = 0;
    let mut width = None;
    for word in text.split_whitespace() {
        if let Some(g) = word.strip_prefix("gen") {
            gen_ = g.parse().ok()?;
        } else if let Some(w) = word.strip_prefix('x') {
            width = w.parse().ok();
        }
    }
    Some((gen_, width?))
}

/// "PCIe x4 of x16", "PCIe gen2 of gen4", "PCIe gen2 x8 of gen4 x16", when the link runs below
/// the device's maximum.
fn pcie(o: &Conditions) -> Option<String> {
    let (now, max) = o.pcie.as_ref()?;
    let ((g, w), (gm, wm)) = (link(now)?, link(max)?);
    let slower = g > 0 && gm > 0 && g < gm;
    let narrower = w < wm;
    match (slower, narrower) {
        (false, false) => None,
        (false, true) => Some(format!("PCIe x{w} of x{wm}")),
        (true, false) => Some(format!("PCIe gen{g} of gen{gm}")),
        (true, true) => Some(format!("PCIe gen{g} x{w} of gen{gm} x{wm}")),
    }
}

/// The median of values (sorted here).
pub(super) fn median(values: &mut [f64]) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    gpufleet_kernels::percentile(values, 50.0)
}

/// The median of the siblings' figure, `f` of each (those that have one).
fn siblings_median(
    siblings: &[&Conditions],
    f: impl Fn(&Conditions) -> Option<f64>,
) -> Option<f64> {
    let mut values: Vec<f64> = siblings
        .iter()
        .filter_map(|s| f(s))
        .filter(|v| v.is_finite())
        .collect();
    median(&mut values)
}

/// Every cause that holds for a run under `c` among its siblings' runs (which may include it),
/// joined with `; `, or "unknown".
pub fn likely_cause(c: &Conditions, siblings: &[&Conditions]) -> String {
    let mut causes = Vec::new();
    causes.extend(pcie(c));
    let lower = |mine: Option<f64>, theirs: Option<f64>| match (mine, theirs) {
        (Some(m), Some(t)) if t > 0.0 && m < LOWER * t => Some((m, t)),
        _ => None,
    };
    if let Some((m, t)) = lower(c.power_cap_w, siblings_median(siblings, |s| s.power_cap_w)) {
        causes.push(format!("power cap {m:.0} W (siblings {t:.0} W)"));
    }
    let sclk = lower(
        c.mean_sclk_mhz,
        siblings_median(siblings, |s| s.mean_sclk_mhz),
    );
    let clock = sclk.or_else(|| lower(c.clock_mhz, siblings_median(siblings, |s| s.clock_mhz)));
    if let Some((m, t)) = clock {
        causes.push(format!("clock {m:.0} MHz (siblings {t:.0} MHz)"));
    }
    if let (Some(m), Some(t)) = (c.max_temp_c, siblings_median(siblings, |s| s.max_temp_c))
        && m > t + HOTTER_C
    {
        causes.push(format!("{m:.0} °C during the run (siblings {t:.0} °C)"));
    }
    if let Some(mine) = &c.firmware
        && let Some(theirs) = most_common(siblings.iter().filter_map(|s| s.firmware.as_deref()))
        && mine != theirs
    {
        causes.push(format!("firmware {mine} (siblings {theirs})"));
    }
    let usual_cv = siblings_median(siblings, |s| s.robust_cv).unwrap_or(0.0);
    if c.noisy
        || c.robust_cv
            .is_some_and(|cv| cv > (3.0 * usual_cv).max(0.05))
    {
        let cv = c
            .robust_cv
            .map(|cv| format!(" (robust CV {:.1} %)", 100.0 * cv))
            .unwrap_or_default();
        causes.push(format!("a noisy run{cv}"));
    }
    if causes.is_empty() {
        "unknown".to_string()
    } else {
        causes.join("; ")
    }
}

/// The most common of `values` (the first of those tied), if any.
fn most_common<'a>(values: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let mut counts: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for v in values {
        *counts.entry(v).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0)))
        .map(|(v, _)| v)
}
