//! A simulated run's RunResult, shaped as the agent's own: the catalog's metric kind and unit,
//! FLOPs and bytes, the iteration times with their statistics and % of peak (the run core's own
//! functions), a fingerprint, and a validation that says nothing was validated because nothing
//! ran.

use crate::backend::DeviceInfo;
use crate::run::result::{add_metric, stats, unmeasured};
use gpufleet_kernels::{KERNELS_VERSION, Problem, RunSettings};
use gpufleet_proto::v1 as pb;
use std::collections::BTreeMap;

/// Most iterations a simulated result carries: enough for its statistics, small on the wire.
pub const MAX_ITERATIONS: u32 = 64;
/// Fewest, whatever the run's `min_iterations`.
pub const MIN_ITERATIONS: u32 = 10;

/// What the config of every simulated result says.
const CONFIG_NOTE: &str =
    "gpufleet-agent simulate: drawn from a seeded distribution, no kernel ran";

/// A request a simulated agent admitted.
#[derive(Debug, Clone)]
pub struct SimRun {
    pub run_id: String,
    pub spec: pb::RunSpec,
    pub problem: Problem,
    pub settings: RunSettings,
    /// False when the kernel, variant or dtype is not among those the agent answers: the run
    /// ends `unsupported`, as on a real agent.
    pub supported: bool,
}

impl SimRun {
    /// How many iterations its result carries: its `min_iterations`, within
    /// [`MIN_ITERATIONS`]..=[`MAX_ITERATIONS`].
    pub fn iterations(&self) -> usize {
        self.settings
            .min_iterations
            .clamp(MIN_ITERATIONS, MAX_ITERATIONS) as usize
    }
}

fn fingerprint(
    run: &SimRun,
    dev: &DeviceInfo,
    platform: &BTreeMap<String, String>,
) -> pb::Fingerprint {
    pb::Fingerprint {
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
        backend: dev.backend.clone(),
        driver_version: dev.driver_version.clone(),
        api_version: dev.api_version.clone(),
        os_kernel_version: String::new(),
        kernels_version: KERNELS_VERSION.to_string(),
        env: run.spec.env.clone(),
        clock_mhz: dev.clock_mhz,
        power_cap_w: 0.0,
        platform: platform
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
}

/// A result on `dev` with no measurement: `status` and why.
pub fn ended(
    run: &SimRun,
    (dev, platform): (&DeviceInfo, &BTreeMap<String, String>),
    status: pb::RunStatus,
    message: String,
) -> pb::RunResult {
    unmeasured(
        (&run.run_id, &run.spec, &run.problem),
        dev,
        fingerprint(run, dev, platform),
        status,
        message,
    )
}

/// An `ok` result on `dev` with the drawn iteration times, started at `started_unix_s` and run in the
/// monotonic window `window_ns`.
pub fn ok(
    run: &SimRun,
    (dev, platform): (&DeviceInfo, &BTreeMap<String, String>),
    times_s: Vec<f64>,
    started_unix_s: f64,
    window_ns: (u64, u64),
) -> pb::RunResult {
    let mut r = ended(run, (dev, platform), pb::RunStatus::Ok, String::new());
    r.started_unix_s = started_unix_s;
    r.wall_s = window_ns.1.saturating_sub(window_ns.0) as f64 / 1e9;
    (r.window_begin_ns, r.window_end_ns) = window_ns;
    r.warmup_done = run.settings.warmup;
    r.config.insert("simulated".into(), CONFIG_NOTE.into());
    r.validation = Some(pb::Validation {
        checked: true,
        passed: true,
        message: "simulated: no kernel ran, so nothing was compared (gpufleet-agent simulate)"
            .into(),
        ..Default::default()
    });
    if let Some(s) = stats(&times_s, run.settings.target_ci_pct) {
        add_metric(&mut r, &run.problem, dev, &times_s, s.median_s);
        r.stats = Some(s);
    }
    r.times_s = times_s;
    r
}

#[cfg(test)]
mod tests {
    use super::super::device;
    use super::*;

    fn run(kernel: &str) -> SimRun {
        let problem = Problem::new(kernel, "", &BTreeMap::new(), "", false).unwrap();
        SimRun {
            run_id: "run-1".into(),
            spec: pb::RunSpec {
                kernel: kernel.into(),
                device_id: "cpu:simulated".into(),
                ..Default::default()
            },
            problem,
            settings: RunSettings::DEFAULT,
            supported: true,
        }
    }

    #[test]
    fn an_ok_result_reads_like_a_real_one_and_says_it_is_simulated() {
        let copy = run("copy");
        let platform = device::platform("gen3 x4");
        let dev = device::device(&device::Model::default());
        let times = vec![1e-3; copy.iterations()];
        let r = ok(&copy, (&dev, &platform), times, 1.7e9, (10, 2_000_010));
        assert_eq!(r.status(), pb::RunStatus::Ok);
        assert_eq!(r.variant, "default");
        assert_eq!(
            (r.device_id.as_str(), r.backend.as_str()),
            ("cpu:simulated", "cpu")
        );
        let m = r.metric.unwrap();
        assert_eq!((m.kind.as_str(), m.unit.as_str()), ("gbps", "GB/s"));
        assert!(m.higher_is_better);
        assert!((m.value - copy.problem.bytes() / 1e-3 / 1e9).abs() < 1e-9);
        assert!(r.pct_of_peak.is_some() && r.bytes > 0.0);
        let s = r.stats.unwrap();
        assert_eq!((s.count, s.median_s), (10, 1e-3));
        assert!(!s.noisy);
        let v = r.validation.unwrap();
        assert!(v.checked && v.passed && v.message.contains("simulated"));
        assert!(r.config["simulated"].contains("no kernel ran"));
        let fp = r.fingerprint.unwrap();
        assert_eq!(fp.driver_version, device::DRIVER);
        assert_eq!(
            fp.platform[&format!("pcie_link:{}", device::PCI_BUS_ID)],
            "gen3 x4"
        );
        assert_eq!(r.wall_s, 0.002);
    }

    #[test]
    fn noop_is_a_latency_and_gemm_a_rate_of_arithmetic() {
        let platform = device::platform(device::MAX_LINK);
        let dev = device::device(&device::Model::default());
        let platform = (&dev, &platform);
        let noop = ok(&run("noop"), platform, vec![8e-6; 10], 0.0, (0, 0));
        let m = noop.metric.unwrap();
        assert_eq!(m.unit, "µs");
        assert!(!m.higher_is_better && (m.value - 8.0).abs() < 1e-9);
        let gemm = ok(&run("gemm"), platform, vec![1e-3; 10], 0.0, (0, 0));
        assert_eq!(gemm.metric.unwrap().kind, "gflops");
        assert!(gemm.flops > 0.0);
        let cancelled = ended(&run("gemm"), platform, pb::RunStatus::Cancelled, "x".into());
        assert!(cancelled.metric.is_none() && cancelled.times_s.is_empty());
    }
}
