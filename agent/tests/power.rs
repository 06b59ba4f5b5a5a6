//! Power end to end: a real agent whose only power source is a fixture
//! RAPL tree that a test thread keeps updating, like the kernel's powercap
//! driver would. The energy it reports for a run must match the energy the
//! test wrote into the counter over the worker's kernel window.

mod common;

use gpufleet_agent::isolation::monotonic_ns;
use gpufleet_agent::power::PowerConfig;
use gpufleet_proto::v1 as pb;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio_stream::StreamExt;

/// Counter range small enough that it wraps several times during a run.
const RANGE_UJ: u64 = 20_000_000;

/// Power P(t) = 20 + 30 t W for t seconds since `t0`, so the energy is
/// E(t) = 20 t + 15 t² J: a run's energy is known in closed form.
fn energy_j(t0_ns: u64, t_ns: u64) -> f64 {
    let t = t_ns.saturating_sub(t0_ns) as f64 * 1e-9;
    20.0 * t + 15.0 * t * t
}

/// A RAPL powercap tree under `root` whose counter follows [`energy_j`]
/// until `stop` is set.
fn fake_rapl(root: &Path, stop: Arc<AtomicBool>) -> u64 {
    let zone = root.join("sys/class/powercap/intel-rapl:0");
    std::fs::create_dir_all(&zone).unwrap();
    std::fs::write(zone.join("name"), "package-0\n").unwrap();
    std::fs::write(zone.join("max_energy_range_uj"), format!("{RANGE_UJ}\n")).unwrap();
    let t0 = monotonic_ns();
    let write = move |zone: &Path| {
        let uj = (energy_j(t0, monotonic_ns()) * 1e6) as u64 % RANGE_UJ;
        // Write-then-rename so the sampler never reads a half-written file.
        let tmp = zone.join(".energy_uj.tmp");
        std::fs::write(&tmp, format!("{uj}\n")).unwrap();
        std::fs::rename(&tmp, zone.join("energy_uj")).unwrap();
    };
    write(&zone);
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            write(&zone);
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    t0
}

fn fixture_config(root: &Path) -> PowerConfig {
    PowerConfig {
        sysfs_root: root.to_path_buf(),
        rate_hz: 100.0,
        ..PowerConfig::none()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_energy_matches_the_counter_written_by_hand() {
    let root = tempfile::tempdir().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = fake_rapl(root.path(), stop.clone());
    let agent = common::start(|c| c.power = fixture_config(root.path())).await;
    let mut c = common::client(&agent).await;

    let info = common::describe(&mut c).await;
    let rapl = info
        .power_sources
        .iter()
        .find(|p| p.name == "rapl" && p.available)
        .unwrap_or_else(|| panic!("rapl listed: {:?}", info.power_sources));
    assert_eq!(rapl.scope, "package");
    assert!(rapl.energy_counter);
    assert_eq!(rapl.device_ids, vec!["cpu:0".to_string()]);
    assert_eq!(rapl.poll_hz, 100.0);

    // Let the sampler collect an idle baseline first.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut spec = common::spec("vec_add", &[("n", 4096)]);
    spec.settings_mut().min_seconds = Some(0.2);
    let mut stream = c
        .run(pb::RunRequest {
            run_id: "power-e2e".into(),
            spec: Some(spec),
        })
        .await
        .unwrap()
        .into_inner();
    let mut samples = Vec::new();
    let mut result = None;
    while let Some(ev) = stream.next().await {
        match ev.unwrap().event {
            Some(pb::run_event::Event::Power(p)) => samples.push(p),
            Some(pb::run_event::Event::Result(r)) => result = Some(r),
            _ => {}
        }
    }
    stop.store(true, Ordering::Relaxed);
    let r = result.expect("a result");
    assert_eq!(r.status(), pb::RunStatus::Ok, "{}", r.message);
    let e = r.energy.clone().expect("energy figures");
    let (begin, end) = (r.window_begin_ns, r.window_end_ns);
    let window_s = (end - begin) as f64 * 1e-9;

    // The expected energy, computed from the formula the fixture follows.
    let expected = energy_j(t0, end) - energy_j(t0, begin);
    assert_eq!(e.source, "rapl");
    assert_eq!(e.method, "counter");
    assert!(
        (e.joules - expected).abs() / expected < 0.02,
        "counter energy {} J vs {expected} J by hand (window {window_s} s)",
        e.joules
    );
    // Watts derived from the counter, integrated, agree more loosely.
    assert!(
        (e.integrated_joules - expected).abs() / expected < 0.10,
        "integrated {} J vs {expected} J",
        e.integrated_joules
    );
    assert!((e.avg_watts - expected / window_s).abs() / (expected / window_s) < 0.02);
    // P(t) rises, so the peak is at least the power at the window's end.
    let p_end = 20.0 + 30.0 * (end - t0) as f64 * 1e-9;
    assert!(
        e.peak_watts > 0.9 * p_end,
        "peak {} vs {p_end}",
        e.peak_watts
    );
    // The idle baseline: the power before the worker started (below P at begin).
    let p_begin = 20.0 + 30.0 * (begin - t0) as f64 * 1e-9;
    assert!(
        e.idle_watts > 20.0 && e.idle_watts < p_begin,
        "idle {}",
        e.idle_watts
    );
    assert!((e.dynamic_joules - (e.joules - e.idle_watts * e.window_s)).abs() < 1e-6);

    // A 0.2 s timed part is shorter than the 1 s minimum window: a power run.
    assert!(e.power_run, "{}", e.message);
    assert!(window_s >= 1.0, "window {window_s} s");
    assert!(e.iterations > r.times_s.len() as u64);
    assert!(e.message.contains("power run"), "{}", e.message);
    assert!((e.joules_per_iteration * e.iterations as f64 - e.joules).abs() < 1e-6);
    assert_eq!(e.metric_per_watt_unit, "GB/s/W");
    let gbps = r.metric.as_ref().unwrap().value;
    assert!((e.metric_per_watt - gbps / e.avg_watts).abs() < 1e-9);
    assert!(e.joules_per_unit > 0.0 && e.joules_per_unit_unit == "J/GB");

    // The trace in the stream spans the idle baseline and the window, in order.
    assert!(
        samples.len() as f64 > 0.5 * window_s * 100.0,
        "{} samples",
        samples.len()
    );
    assert!(
        samples
            .windows(2)
            .all(|w| w[0].monotonic_ns <= w[1].monotonic_ns)
    );
    assert!(samples.first().unwrap().monotonic_ns < begin);
    assert!(samples.last().unwrap().monotonic_ns >= end);
    assert!(samples.iter().all(|s| s.source == "rapl" && s.has_energy));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_power_filters_and_a_run_without_sensor_has_no_energy() {
    let root = tempfile::tempdir().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    fake_rapl(root.path(), stop.clone());
    let agent = common::start(|c| c.power = fixture_config(root.path())).await;
    let mut c = common::client(&agent).await;

    let mut live = c
        .stream_power(pb::PowerRequest {
            device_id: "cpu:0".into(),
            source: String::new(),
            rate_hz: 0.0,
        })
        .await
        .unwrap()
        .into_inner();
    let mut got = Vec::new();
    while got.len() < 5 {
        let s = tokio::time::timeout(Duration::from_secs(5), live.next())
            .await
            .expect("a sample within 5 s")
            .unwrap()
            .unwrap();
        got.push(s);
    }
    assert!(
        got.iter()
            .all(|s| s.source == "rapl" && s.scope == "package")
    );
    assert!(
        got.windows(2)
            .all(|w| w[0].monotonic_ns < w[1].monotonic_ns)
    );

    drop(live);

    // A rate keeps that many samples a second of the sampler's 100: 5 Hz for 2 s is about 10.
    let mut paced = c
        .stream_power(pb::PowerRequest {
            device_id: "cpu:0".into(),
            source: String::new(),
            rate_hz: 5.0,
        })
        .await
        .unwrap()
        .into_inner();
    let first = paced.next().await.unwrap().unwrap().monotonic_ns;
    let mut last = first;
    let mut n = 1;
    while last - first < 2_000_000_000 {
        let s = tokio::time::timeout(Duration::from_secs(5), paced.next())
            .await
            .expect("a sample within 5 s")
            .unwrap()
            .unwrap();
        assert!(
            s.monotonic_ns - last >= 150_000_000,
            "{} ms between samples at 5 Hz",
            (s.monotonic_ns - last) / 1_000_000
        );
        last = s.monotonic_ns;
        n += 1;
    }
    assert!((10..=12).contains(&n), "{n} samples in 2 s at 5 Hz");
    drop(paced);
    let err = c
        .stream_power(pb::PowerRequest {
            rate_hz: -3.0,
            ..Default::default()
        })
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("rate_hz"), "{}", err.message());

    // Filters that match nothing are refused naming the field.
    let err = c
        .stream_power(pb::PowerRequest {
            device_id: String::new(),
            source: "nvml".into(),
            rate_hz: 0.0,
        })
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("source"), "{}", err.message());
    let err = c
        .stream_power(pb::PowerRequest {
            device_id: "no-such-device".into(),
            source: String::new(),
            rate_hz: 0.0,
        })
        .await
        .err()
        .unwrap();
    assert!(err.message().contains("device_id"), "{}", err.message());
    // A 100 KB filter is refused as itself, quoting only its start (a probe once got
    // "metadata size exceeds limit" instead).
    let err = c
        .stream_power(pb::PowerRequest {
            device_id: "d".repeat(100_000),
            source: String::new(),
            rate_hz: 0.0,
        })
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("device_id") && err.message().contains("(100000 bytes)"),
        "{}",
        err.message()
    );
    assert!(err.message().len() < 1024, "{} bytes", err.message().len());

    // A negative window turns the power run off; the energy is still there.
    let mut spec = common::spec("vec_add", &[("n", 1024)]);
    spec.power_window_s = Some(-1.0);
    let (_, r) = common::run(&mut c, "no-power-run", spec).await;
    let e = r.energy.expect("energy");
    assert!(!e.power_run);
    assert!(e.message.contains("rough"), "{}", e.message);
    // A window longer than the timeout is refused.
    let mut spec = common::spec("vec_add", &[("n", 1024)]);
    spec.power_window_s = Some(60.0);
    let err = common::refused(&mut c, spec).await;
    assert!(
        err.message().contains("power_window_s"),
        "{}",
        err.message()
    );
    stop.store(true, Ordering::Relaxed);

    // An agent without sources: Describe says why, runs carry no energy.
    let bare = common::start(|c| c.power = PowerConfig::none()).await;
    let mut b = common::client(&bare).await;
    let info = common::describe(&mut b).await;
    assert!(
        info.power_sources
            .iter()
            .all(|p| !p.available && !p.reason.is_empty())
    );
    let (_, r) = common::run(&mut b, "bare", common::spec("vec_add", &[("n", 1024)])).await;
    assert_eq!(r.status(), pb::RunStatus::Ok);
    assert!(r.energy.is_none());
    let err = b
        .stream_power(pb::PowerRequest::default())
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
}
