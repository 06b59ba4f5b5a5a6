//! A generated fleet history for the dashboard's tests and benchmark (`gpufleet seed-history`,
//! hidden): agents with a device per backend, one campaign per night with a result per spec and
//! device, jitter, a driver update on one agent (a segment boundary), a step regression on one
//! series that the real regression check suspects, reruns and confirms, and one result with a power
//! trace. Everything goes through the store's and the checker's own functions.

use crate::regression::check::{assess_new, resolve};
use crate::regression::detect::DetectConfig;
use crate::store::{DeviceRecord, JobState, NewJob, PowerPoint, ResultRecord, Store, StoreError};
use gpufleet_proto::power::Reading;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct SeedConfig {
    /// Agents `seed-a0`, `seed-a1`, …
    pub agents: usize,
    /// Backends, one device each per agent.
    pub backends: Vec<String>,
    /// Specs per device (`gemm n=256·2^i`).
    pub specs: usize,
    /// Nights, one campaign each.
    pub nights: usize,
    /// The night from which the first series (agent 0, second backend, first spec) is 20% slower.
    pub regression_at: Option<usize>,
    /// Unix seconds of the first night.
    pub start: f64,
    /// Raw iteration times stored per result.
    pub iterations: usize,
    /// Besides the last night's first result, every this-many-th result carries a power trace
    /// (0: none), as results of a fleet that measures energy do.
    pub power_every: usize,
    /// A night in one transaction (fast); `false` commits each result on its own, as a campaign
    /// does (the insert-throughput benchmark).
    pub bulk: bool,
    /// Every this many nights (0: never) every series moves by 20 % (down, then back up at the
    /// next step): one confirmed regression or improvement per series per step, for histories
    /// heavy with alerts.
    pub steps_every: usize,
}

impl SeedConfig {
    /// The first night for a history of `nights` that ends yesterday.
    pub fn start_for(nights: usize) -> f64 {
        crate::time::now().floor() - (nights as f64 + 1.0) * 86_400.0
    }
}

impl Default for SeedConfig {
    fn default() -> Self {
        SeedConfig {
            agents: 2,
            backends: vec!["cpu".into(), "opencl".into(), "vulkan".into()],
            specs: 3,
            nights: 30,
            regression_at: Some(25),
            start: SeedConfig::start_for(30),
            iterations: 20,
            power_every: 0,
            bulk: true,
            steps_every: 0,
        }
    }
}

/// What was generated.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct SeedSummary {
    pub campaigns: usize,
    pub results: usize,
    pub alerts: usize,
    /// The result that carries a power trace.
    pub power_result: Option<i64>,
}

/// xorshift64*: deterministic jitter without a dependency.
struct Jitter(u64);

impl Jitter {
    /// Uniform in [-1, 1).
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        (x >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
}

fn record(
    run_id: String,
    n: i64,
    value: f64,
    (backend, driver): (&str, &str),
    t: f64,
    iterations: usize,
) -> ResultRecord {
    // GFLOP/s of an n³ GEMM, so the times below are consistent with the metric.
    let flop = 2.0 * (n as f64).powi(3);
    let median = flop / (value * 1e9);
    ResultRecord {
        run_id,
        device_id: format!("{backend}:0"),
        backend: backend.into(),
        kernel: "gemm".into(),
        variant: "tiled".into(),
        params: BTreeMap::from([("k".into(), n), ("m".into(), n), ("n".into(), n)]),
        dtype: "f32".into(),
        mode: "compute_only".into(),
        status: "ok".into(),
        metric_kind: Some("flops".into()),
        metric_unit: Some("GFLOP/s".into()),
        metric_value: Some(value),
        higher_is_better: Some(true),
        pct_of_peak: Some(value / 10.0),
        median_s: Some(median),
        p10_s: Some(median * 0.98),
        p90_s: Some(median * 1.03),
        min_s: Some(median * 0.97),
        max_s: Some(median * 1.06),
        mean_s: Some(median * 1.005),
        stddev_s: Some(median * 0.012),
        cv: Some(0.012),
        robust_cv: Some(0.009),
        p25_s: Some(median * 0.995),
        p75_s: Some(median * 1.007),
        upper_fence_s: Some(median * 1.025),
        outliers_high: Some(0),
        iterations: iterations as u64,
        validation: json!({"checked": true, "passed": true, "message": "max |err| within tolerance"}),
        config: json!({"tile": "16x16"}),
        fingerprint: json!({"agent_version": "0.1.0", "backend": backend, "driver_version": driver,
                            "api_version": "3.0", "os_kernel_version": "6.1.0", "kernels_version": "1",
                            "env": {}, "power_cap_w": 0.0}),
        started_at: t - 5.0,
        wall_s: 2.5,
        created_at: Some(t),
        times: (0..iterations)
            .map(|i| median * (0.98 + 0.004 * (i % 10) as f64))
            .collect(),
        ..Default::default()
    }
}

/// A power trace around a 0.6 s kernel window: idle 60 W, 250 W while it runs.
fn with_power(mut r: ResultRecord, t: f64) -> ResultRecord {
    let begin = 5_000_000_000u64;
    let (wb, we) = (begin + 400_000_000, begin + 1_000_000_000);
    r.power = (0..70u64)
        .map(|i| {
            let ns = begin + i * 20_000_000;
            PowerPoint {
                source: "nvml".into(),
                scope: "board".into(),
                pci_bus_id: String::new(),
                monotonic_ns: ns,
                wall_unix_s: t - 2.0 + i as f64 * 0.02,
                reading: Reading {
                    watts: Some(if (wb..we).contains(&ns) { 250.0 } else { 60.0 }),
                    energy_j: None,
                    temperature_c: Some(55.0),
                    sclk_mhz: Some(1980),
                    mclk_mhz: None,
                    utilization_pct: None,
                },
            }
        })
        .collect();
    let value = r.metric_value.unwrap_or(1.0);
    r.energy = json!({"joules": 150.0, "avg_watts": 250.0, "peak_watts": 252.0, "idle_watts": 60.0,
                      "source": "nvml", "method": "counter", "window_s": 0.6, "samples": 30, "scope": "board",
                      "pci_bus_id": "", "window_begin_ns": wb, "window_end_ns": we,
                      "joules_per_unit_unit": "J/GFLOP", "message": ""});
    r.energy_j = Some(150.0);
    r.avg_watts = Some(250.0);
    r.metric_per_watt = Some(value / 250.0);
    r.joules_per_unit = Some(250.0 / value);
    r
}

/// Generates the history into `store` (its clock is moved night by night, then restored).
///
/// # Errors
/// [`StoreError`] from the store.
pub fn seed_history(store: &mut Store, cfg: &SeedConfig) -> Result<SeedSummary, StoreError> {
    let clock = Arc::new(AtomicU64::new(cfg.start.to_bits()));
    let c = clock.clone();
    store.set_clock(move || f64::from_bits(c.load(Ordering::Relaxed)));
    let out = seed(store, cfg, &clock);
    store.set_clock(crate::time::now);
    out
}

fn seed(store: &mut Store, cfg: &SeedConfig, clock: &AtomicU64) -> Result<SeedSummary, StoreError> {
    let mut summary = SeedSummary::default();
    let mut power_run = None;
    let mut last_campaign = None;
    let mut jitter = Jitter(0x9e37_79b9_7f4a_7c15);
    let mut devices = Vec::new();
    for a in 0..cfg.agents {
        let name = format!("seed-a{a}");
        let agent = match store.agent(&name)? {
            Some(row) => row,
            None => store.add_agent(&name, &format!("http://10.0.0.{}:50051", a + 10), None)?,
        };
        for (b, backend) in cfg.backends.iter().enumerate() {
            let peaks =
                json!({"peaks": {"fp32_flops": 1e12 * (b + 1) as f64, "memory_bytes_per_s": 4e11}});
            let row = store.upsert_device(
                agent.id,
                &DeviceRecord {
                    device_id: format!("{backend}:0"),
                    backend: backend.clone(),
                    vendor: "Seed".into(),
                    name: format!("Seed {backend} device {a}"),
                    arch: format!("seed{b}"),
                    pci_bus_id: String::new(),
                    info_json: peaks.to_string(),
                },
            )?;
            devices.push((agent.id, a, b, backend.clone(), row));
        }
    }
    let detect = DetectConfig::default();
    let mut run = 0u64;
    let mut next_id = move || {
        run += 1;
        format!("seed-{}-{run}", uuid::Uuid::new_v4().simple())
    };
    let began = std::time::Instant::now();
    let mut stretch = (began, 0usize);
    for night in 0..cfg.nights {
        // A night in one transaction: the same insert path and checks, one commit.
        let mut night_of = |store: &mut Store| -> Result<(), StoreError> {
            let t = cfg.start + night as f64 * 86_400.0;
            clock.store(t.to_bits(), Ordering::Relaxed);
            let campaign = store.create_campaign("nightly", "generated history", "{}")?;
            summary.campaigns += 1;
            for (i, (agent_id, a, b, backend, row)) in devices.iter().enumerate() {
                // Agent 1 updates its driver halfway: a new baseline segment.
                let driver = if *a == 1 && night >= cfg.nights / 2 {
                    "2.0"
                } else {
                    "1.0"
                };
                for s in 0..cfg.specs {
                    let (n, spec_key) = seed_spec(s);
                    let base =
                        100.0 * (*b + 1) as f64 * (1.0 + *a as f64 * 0.5) * (1.0 + s as f64 * 0.2);
                    let step = cfg.regression_at.is_some_and(|r| night >= r)
                        && *a == 0
                        && *b == 1
                        && s == 0;
                    let stepped = cfg.steps_every > 0 && (night / cfg.steps_every) % 2 == 1;
                    let value = base
                        * (1.0 + 0.01 * jitter.next())
                        * if step || stepped { 0.8 } else { 1.0 };
                    let rid = next_id();
                    let job = store.add_job(&NewJob {
                        campaign_id: campaign,
                        agent_id: *agent_id,
                        device_row_id: Some(*row),
                        spec_key: spec_key.clone(),
                        spec_json: "{}".into(),
                        run_id: rid.clone(),
                    })?;
                    let mut r = record(
                        rid,
                        n,
                        value,
                        (backend, driver),
                        t + (i * cfg.specs + s) as f64,
                        cfg.iterations,
                    );
                    r.campaign_id = Some(campaign);
                    r.job_id = Some(job);
                    r.agent_id = *agent_id;
                    r.device_row_id = Some(*row);
                    r.spec_key = spec_key;
                    if night + 1 == cfg.nights && i == 0 && s == 0 {
                        r = with_power(r, t);
                        power_run = Some(r.run_id.clone());
                    } else if cfg.power_every > 0 && summary.results % cfg.power_every == 0 {
                        r = with_power(r, t);
                    }
                    store.insert_result(&r)?;
                    summary.results += 1;
                }
            }
            // The real check: suspects get a confirmation job; rerun each like the suspect ran.
            assess_new(store, Some(campaign), &detect, &mut next_id)?;
            for job in store.jobs(campaign)? {
                let (Some(suspect), JobState::Queued) = (job.confirms_result_id, job.state) else {
                    continue;
                };
                let Some(orig) = store
                    .results(&crate::store::ResultFilter {
                        id: Some(suspect),
                        ..Default::default()
                    })?
                    .pop()
                else {
                    continue;
                };
                let mut r = orig.record.clone();
                r.run_id = job.run_id.clone();
                r.job_id = Some(job.id);
                r.created_at = Some(t + 3_600.0);
                r.metric_value = r.metric_value.map(|v| v * (1.0 + 0.005 * jitter.next()));
                store.insert_result(&r)?;
                summary.results += 1;
            }
            summary.alerts += resolve(store, Some(campaign), &detect)?.confirmed;
            store.set_campaign_state(campaign, crate::store::CampaignState::Done)?;
            last_campaign = Some(campaign);
            Ok(())
        };
        if cfg.bulk {
            store.bulk(night_of)?;
        } else {
            night_of(store)?;
        }
        if cfg.nights >= 50 && (night + 1) % (cfg.nights / 10) == 0 {
            // The rate of this stretch of nights, so a slowdown as the file grows shows.
            let (since, results) = stretch;
            eprintln!(
                "seed-history: night {}/{}, {} results, {:.0} s; {:.0} results/s over the last {} nights",
                night + 1,
                cfg.nights,
                summary.results,
                began.elapsed().as_secs_f64(),
                (summary.results - results) as f64 / since.elapsed().as_secs_f64(),
                cfg.nights / 10
            );
            stretch = (std::time::Instant::now(), summary.results);
        }
    }
    if let (Some(run), Some(campaign)) = (power_run, last_campaign) {
        summary.power_result = store
            .results(&crate::store::ResultFilter {
                campaign_id: Some(campaign),
                ..Default::default()
            })?
            .iter()
            .find(|r| r.record.run_id == run)
            .map(|r| r.id);
    }
    Ok(summary)
}
/// The size and spec key of the seed's spec `s`: a square GEMM of 256 · 2^s for the first eight
/// (the keys the tests know), then 32,768 plus 256 · (s − 7): every `s` its own key (a shift past
/// 63 bits wrapped round and gave two specs of a night one key).
fn seed_spec(s: usize) -> (i64, String) {
    let n = if s < 8 {
        256i64 << s
    } else {
        (256i64 << 7) + 256 * (s as i64 - 7)
    };
    (n, format!("gemm/tiled/k={n},m={n},n={n}/f32/compute_only"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_seeded_spec_has_a_key_of_its_own() {
        let keys: std::collections::BTreeSet<String> =
            (0..10_000).map(|s| super::seed_spec(s).1).collect();
        assert_eq!(keys.len(), 10_000);
        assert_eq!(
            super::seed_spec(2).1,
            "gemm/tiled/k=1024,m=1024,n=1024/f32/compute_only"
        );
    }
}
