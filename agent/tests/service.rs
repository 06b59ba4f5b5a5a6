//! The agent over real loopback gRPC with real worker processes: results,
//! the three debug kernels, bad input, queueing, cancellation, token, health
//! (the cpu backend's conformance run is in `conformance.rs`).

mod common;

use common::{cancel, client, describe, last_result, refused, refused_naming, run, spec, start};
use gpufleet_proto::v1 as pb;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

#[tokio::test]
async fn describe_lists_host_cpu_device_and_kernels() {
    let a = start(|_| {}).await;
    let info = describe(&mut client(&a).await).await;
    let host = info.host.unwrap();
    assert!(!host.hostname.is_empty() && host.logical_cores >= 1 && host.memory_bytes > 0);
    let cpu = info.backends.iter().find(|b| b.name == "cpu").unwrap();
    assert!(cpu.available, "{}", cpu.reason);
    assert_eq!(info.devices[0].id, "cpu:0");
    let names: Vec<&str> = info.kernels.iter().map(|k| k.name.as_str()).collect();
    for k in ["gemm", "conv2d", "memlat_cpu", "debug_crash"] {
        assert!(names.contains(&k), "{k} missing from {names:?}");
    }
    assert!(info.debug_kernels);
}

#[tokio::test]
async fn gemm_runs_validated_with_stats_and_window() {
    let a = start(|_| {}).await;
    let mut c = client(&a).await;
    let (phases, r) = run(
        &mut c,
        "g1",
        spec("gemm", &[("m", 64), ("n", 48), ("k", 32)]),
    )
    .await;
    assert_eq!(r.status(), pb::RunStatus::Ok, "{}", r.message);
    assert!(
        phases.iter().any(|p| p == "queued") && phases.iter().any(|p| p == "warmup"),
        "{phases:?}"
    );
    let v = r.validation.unwrap();
    assert!(v.passed && v.elements_checked > 0);
    let stats = r.stats.unwrap();
    assert!(stats.count >= 3 && stats.median_s > 0.0 && stats.p10_s <= stats.p90_s);
    assert_eq!(r.times_s.len(), stats.count as usize);
    let m = r.metric.unwrap();
    assert_eq!(m.kind, "gflops");
    let expect = 2.0 * 64.0 * 48.0 * 32.0 / stats.median_s / 1e9;
    assert!(
        (m.value - expect).abs() / expect < 1e-9,
        "metric from the median"
    );
    assert!(r.window_end_ns > r.window_begin_ns && r.window_begin_ns > 0);
    assert_eq!(
        r.fingerprint.unwrap().kernels_version,
        gpufleet_kernels::KERNELS_VERSION
    );
    assert_eq!(r.variant, "blocked");
    assert_eq!(r.params.get("k"), Some(&32));
}

#[tokio::test]
async fn debug_kernels_crash_hang_and_lie_and_the_agent_keeps_serving() {
    let a = start(|_| {}).await;
    let mut c = client(&a).await;

    let mut s = spec("debug_crash", &[("mode", 0)]);
    s.env.insert("GPU_TEST_MARKER".into(), "42".into());
    let (_, r) = run(&mut c, "crash", s).await;
    assert_eq!(r.status(), pb::RunStatus::Crashed, "{}", r.message);
    assert_eq!(r.signal, libc_sigsegv());
    assert!(r.message.contains("SIGSEGV"), "{}", r.message);
    // The worker's own words, and the override reaching the worker.
    for needle in ["crashing on purpose", "GPU_TEST_MARKER=42"] {
        assert!(
            r.stderr_tail.contains(needle),
            "{needle} not in: {}",
            r.stderr_tail
        );
    }
    assert!(
        std::env::var("GPU_TEST_MARKER").is_err(),
        "and not the agent"
    );

    let (_, r) = run(&mut c, "abort", spec("debug_crash", &[("mode", 1)])).await;
    assert_eq!(r.status(), pb::RunStatus::Crashed);
    assert!(r.message.contains("SIGABRT"), "{}", r.message);

    let mut s = spec("debug_hang", &[]);
    s.settings_mut().timeout_s = Some(1.0);
    let t = Instant::now();
    let (_, r) = run(&mut c, "hang", s).await;
    assert_eq!(r.status(), pb::RunStatus::TimedOut, "{}", r.message);
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "watchdog fired late: {:?}",
        t.elapsed()
    );

    let (_, r) = run(&mut c, "wrong", spec("debug_wrong", &[])).await;
    assert_eq!(r.status(), pb::RunStatus::Invalid, "{}", r.message);
    assert!(!r.validation.unwrap().passed);
    assert!(r.metric.is_none(), "an invalid result has no metric");

    let (_, r) = run(&mut c, "after", spec("vec_add", &[("n", 1000)])).await;
    assert_eq!(r.status(), pb::RunStatus::Ok, "{}", r.message);
}

fn libc_sigsegv() -> i32 {
    11
}

// Given here as an older client gives them: the top-level fields `RunSpec.settings` replaced
// (deprecated, still read); the last bound is checked in `settings` too.
#[allow(deprecated)]
#[tokio::test]
async fn absent_settings_take_the_defaults_and_given_ones_are_used_as_they_are() {
    let a = start(|_| {}).await;
    let mut c = client(&a).await;
    // A minimal request, as a client built before the settings were `optional` sends one that
    // wants the defaults: no setting on the wire.
    let minimal = pb::RunSpec {
        kernel: "noop".into(),
        device_id: "cpu:0".into(),
        ..Default::default()
    };
    let (_, r) = run(&mut c, "defaults", minimal.clone()).await;
    assert_eq!(r.status(), pb::RunStatus::Ok, "{}", r.message);
    let d = gpufleet_kernels::RunSettings::DEFAULT;
    // The warm-up count is a minimum: warm-up also lasts a minimum time, and on while times fall.
    assert!(r.warmup_done >= d.warmup, "{}", r.warmup_done);
    assert!(r.stats.unwrap().count >= d.min_iterations);
    // Given: zero warm-up is zero (a cold measurement: no minimum time, nothing dropped); an older client's negative target still means none.
    let given = pb::RunSpec {
        warmup: Some(0),
        min_iterations: Some(2),
        max_iterations: Some(2),
        min_seconds: Some(0.0),
        target_ci_pct: Some(-1.0),
        ..minimal.clone()
    };
    let (_, r) = run(&mut c, "given", given).await;
    assert_eq!(r.status(), pb::RunStatus::Ok, "{}", r.message);
    assert_eq!(r.warmup_done, 0);
    let stats = r.stats.unwrap();
    assert_eq!((stats.count, stats.target_ci_pct), (2, 0.0));
    // Outside the bounds: refused naming the field and the bound.
    for (s, needle) in [
        (
            pb::RunSpec {
                min_iterations: Some(0),
                ..minimal.clone()
            },
            "field min_iterations: 0 is outside 1..=100000",
        ),
        (
            pb::RunSpec {
                target_ci_pct: Some(101.0),
                ..minimal.clone()
            },
            "field target_ci_pct: 101 is outside [0, 100]",
        ),
        (
            pb::RunSpec {
                max_iterations: Some(100_001),
                ..minimal.clone()
            },
            "field max_iterations: 100001 is outside 1..=100000",
        ),
        (
            pb::RunSpec {
                min_seconds: Some(f64::NAN),
                ..minimal.clone()
            },
            "field min_seconds: NaN is outside [0, 3600]",
        ),
        (
            pb::RunSpec {
                settings: Some(gpufleet_kernels::PartialSettings {
                    min_seconds: Some(-1.0),
                    ..Default::default()
                }),
                ..minimal.clone()
            },
            "field min_seconds: -1 is outside [0, 3600]",
        ),
    ] {
        refused_naming(&mut c, s, needle).await;
    }
}

#[tokio::test]
async fn bad_input_is_refused_naming_the_field() {
    let a = start(|_| {}).await;
    let mut c = client(&a).await;
    let cases: Vec<(pb::RunSpec, &str)> = vec![
        (spec("gemmm", &[]), "kernel"),
        (
            pb::RunSpec {
                variant: "fastest".into(),
                ..spec("gemm", &[])
            },
            "variant",
        ),
        (spec("gemm", &[("m", 0)]), "m=0"),
        (spec("gemm", &[("m", -5)]), "m=-5"),
        (spec("gemm", &[("n", 1_000_000_000)]), "n=1000000000"),
        (spec("gemm", &[("q", 3)]), "q"),
        (
            pb::RunSpec {
                device_id: "opencl:9".into(),
                ..spec("gemm", &[])
            },
            "device_id",
        ),
        (
            pb::RunSpec {
                device_id: String::new(),
                ..spec("gemm", &[])
            },
            "device_id",
        ),
        (
            pb::RunSpec {
                dtype: "f64".into(),
                ..spec("gemm", &[])
            },
            "dtype",
        ),
        (
            {
                let mut s = spec("gemm", &[]);
                s.settings_mut().timeout_s = Some(-1.0);
                s
            },
            "timeout_s",
        ),
        (
            spec("gemm", &[("m", 65536), ("n", 65536), ("k", 65536)]),
            "memory",
        ),
        (
            pb::RunSpec {
                mode: 99,
                ..spec("gemm", &[])
            },
            "mode",
        ),
    ];
    for (s, needle) in cases {
        refused_naming(&mut c, s, needle).await;
    }
    let mut s = spec("gemm", &[]);
    s.env.insert("LD_PRELOAD".into(), "/tmp/x.so".into());
    let st = refused(&mut c, s).await;
    assert_eq!(st.code(), tonic::Code::InvalidArgument);
    assert!(
        st.message().contains("LD_PRELOAD") && st.message().contains("env"),
        "{}",
        st.message()
    );
    // Huge inputs are quoted short, so each refusal arrives as itself, naming the field (a probe
    // with a 1 MB kernel name once got "metadata size exceeds limit" instead).
    let huge = "k".repeat(1 << 20);
    let mut env_key = spec("copy", &[]);
    env_key.env.insert("K".repeat(1 << 20), "1".into());
    let device = pb::RunSpec {
        device_id: huge.clone(),
        ..spec("copy", &[])
    };
    for (s, needle) in [
        (spec(&huge, &[]), "kernel"),
        (env_key, "env"),
        (device, "device_id"),
    ] {
        let st = refused(&mut c, s).await;
        assert_eq!(st.code(), tonic::Code::InvalidArgument, "{needle}: {st:?}");
        let m = st.message();
        assert!(m.contains(needle) && m.contains("(1048576 bytes)"), "{m}");
        assert!(m.len() < 1024, "{needle}: {} bytes", m.len());
    }
    let req = pb::RunRequest {
        run_id: huge.clone(),
        spec: Some(spec("copy", &[("n", 100)])),
    };
    let Err(st) = c.run(req).await else {
        panic!("a 1 MB run id is refused")
    };
    assert_eq!(st.code(), tonic::Code::InvalidArgument, "{st:?}");
    assert!(st.message().contains("run_id"), "{}", st.message());
    assert!(st.message().len() < 1024, "{} bytes", st.message().len());
    // Still serving.
    let (_, r) = run(&mut c, "ok", spec("copy", &[("n", 100)])).await;
    assert_eq!(r.status(), pb::RunStatus::Ok);
}

#[tokio::test]
async fn debug_kernels_need_the_flag() {
    let a = start(|c| c.enable_debug_kernels = false).await;
    let mut c = client(&a).await;
    let st = refused(&mut c, spec("debug_crash", &[])).await;
    assert_eq!(st.code(), tonic::Code::InvalidArgument);
    assert!(
        st.message().contains("--enable-debug-kernels"),
        "{}",
        st.message()
    );
    let info = describe(&mut c).await;
    assert!(info.kernels.iter().all(|k| !k.name.starts_with("debug_")));
}

#[tokio::test]
async fn queue_is_bounded_and_runs_can_be_cancelled() {
    let a = start(|c| c.queue_capacity = 1).await;
    let mut c = client(&a).await;
    let mut hang = spec("debug_hang", &[]);
    hang.settings_mut().timeout_s = Some(60.0);
    let first = c
        .run(pb::RunRequest {
            run_id: "h1".into(),
            spec: Some(hang.clone()),
        })
        .await
        .unwrap()
        .into_inner();
    // Let the first run take the device before the second queues.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = c
        .run(pb::RunRequest {
            run_id: "h2".into(),
            spec: Some(hang.clone()),
        })
        .await
        .unwrap()
        .into_inner();
    let st = c
        .run(pb::RunRequest {
            run_id: "h3".into(),
            spec: Some(hang.clone()),
        })
        .await
        .expect_err("queue full");
    assert_eq!(st.code(), tonic::Code::ResourceExhausted, "{st:?}");
    let dup = c
        .run(pb::RunRequest {
            run_id: "h1".into(),
            spec: Some(hang),
        })
        .await
        .expect_err("duplicate");
    assert_eq!(dup.code(), tonic::Code::AlreadyExists);

    assert!(cancel(&mut c, "h2").await);
    assert!(cancel(&mut c, "h1").await);
    assert!(!cancel(&mut c, "nope").await);
    for (mut s, why) in [(first, "running"), (second, "queued")] {
        let r = last_result(&mut s).await;
        assert_eq!(r.status(), pb::RunStatus::Cancelled, "{why}: {}", r.message);
        assert!(r.message.contains(why), "{}", r.message);
    }
    let (_, r) = run(&mut c, "after", spec("noop", &[])).await;
    assert_eq!(r.status(), pb::RunStatus::Ok, "{}", r.message);
}

#[tokio::test]
async fn token_is_required_when_configured() {
    let a = start(|c| c.token = Some("s3cret".into())).await;
    let mut c = client(&a).await;
    let st = c
        .describe(pb::DescribeRequest {})
        .await
        .expect_err("no token");
    assert_eq!(st.code(), tonic::Code::Unauthenticated);
    let mut req = tonic::Request::new(pb::DescribeRequest {});
    req.metadata_mut()
        .insert("authorization", "Bearer s3cret".parse().unwrap());
    assert!(c.describe(req).await.is_ok());
}

#[tokio::test]
async fn health_service_reports_serving() {
    let a = start(|_| {}).await;
    let channel = Channel::from_shared(a.url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let resp = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "gpufleet.v1.Agent".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        resp.status(),
        tonic_health::pb::health_check_response::ServingStatus::Serving
    );
}

#[test]
fn serving_beyond_loopback_needs_a_real_token() {
    let agent = env!("CARGO_BIN_EXE_gpufleet-agent");
    for token in [None, Some(" "), Some("short")] {
        let mut cmd = std::process::Command::new(agent);
        cmd.args(["--listen", "0.0.0.0:0"])
            .env_remove("GPUFLEET_TOKEN");
        if let Some(t) = token {
            cmd.args(["--token", t]);
        }
        let out = cmd.output().expect("running gpufleet-agent");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{token:?} served: {err}");
        assert!(err.contains("--token"), "{token:?}: {err}");
    }
}

#[test]
fn runpod_ids_and_the_host_probe_are_in_the_host_description() {
    let agent = env!("CARGO_BIN_EXE_gpufleet-agent");
    // A fixture sysfs with an amdgpu module parameter: the probe reads under --sysfs-root.
    let root = tempfile::tempdir().unwrap();
    let params = root.path().join("sys/module/amdgpu/parameters");
    std::fs::create_dir_all(&params).unwrap();
    std::fs::write(params.join("noretry"), "0\n").unwrap();
    let out = std::process::Command::new(agent)
        .args(["--discovery-timeout-s", "20", "--sysfs-root"])
        .arg(root.path())
        .args(["describe", "--json"])
        .env("RUNPOD_POD_ID", "pod-4x7q")
        .env("RUNPOD_DC_ID", "EU-RO-1")
        .output()
        .expect("running gpufleet-agent describe");
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["host"]["platform"]["runpod_pod_id"], "pod-4x7q",
        "{}",
        v["host"]
    );
    assert_eq!(v["host"]["platform"]["runpod_dc_id"], "EU-RO-1");
    assert_eq!(
        v["host"]["platform"]["amdgpu.noretry"], "0",
        "{}",
        v["host"]
    );
}

#[test]
fn describe_shows_a_gpu_in_a_narrow_slot_with_its_warning() {
    let agent = env!("CARGO_BIN_EXE_gpufleet-agent");
    // An RX 580 (gen3 x16) in a x4 slot, as sysfs nests it under its root port and links it from
    // sys/bus/pci/devices; no backend here claims it.
    let root = tempfile::tempdir().unwrap();
    let port = root.path().join("sys/devices/pci0000:00/0000:00:03.1");
    let gpu = port.join("0000:0a:00.0");
    let attrs = [(&port, "0x060400", "4"), (&gpu, "0x030000", "16")];
    for (dir, class, max_width) in attrs {
        std::fs::create_dir_all(dir).unwrap();
        for (file, value) in [
            ("class", class),
            ("current_link_speed", "8.0 GT/s PCIe"),
            ("current_link_width", "4"),
            ("max_link_speed", "8.0 GT/s PCIe"),
            ("max_link_width", max_width),
        ] {
            std::fs::write(dir.join(file), format!("{value}\n")).unwrap();
        }
    }
    let bus = root.path().join("sys/bus/pci/devices");
    std::fs::create_dir_all(&bus).unwrap();
    std::os::unix::fs::symlink(&gpu, bus.join("0000:0a:00.0")).unwrap();
    std::os::unix::fs::symlink(&port, bus.join("0000:00:03.1")).unwrap();
    let out = std::process::Command::new(agent)
        .args(["--discovery-timeout-s", "20", "--sysfs-root"])
        .arg(root.path())
        .arg("describe")
        .output()
        .expect("running gpufleet-agent describe");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let other = text
        .split("other GPUs on the PCI bus (no backend device):")
        .nth(1)
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        other.contains("0000:0a:00.0  pcie gen3 x4 (max gen3 x16)"),
        "{text}"
    );
    assert!(
        other.contains("warning: runs at gen3 x4, below its gen3 x16: x4 is the width of the link at 0000:00:03.1"),
        "{text}"
    );
}

/// Pids of the `worker serve` processes of test agent `a` (children of this process, since the
/// agent runs in-process; told from other tests' by the agent's cache directory).
fn idle_serve_workers(a: &common::TestAgent) -> Vec<u32> {
    let me = std::process::id();
    let mine = format!("GPUFLEET_CACHE_DIR={}", a.cache.path().display());
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The fields after the command name (which may hold spaces): state, ppid, ...
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let ppid = after
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let zombie = after.split_whitespace().next() == Some("Z");
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let ours = environ.split(|&b| b == 0).any(|v| v == mine.as_bytes());
        if ppid == Some(me) && !zombie && ours && cmdline.split(|&b| b == 0).any(|a| a == b"serve")
        {
            out.push(pid);
        }
    }
    out
}

fn worker_of(r: &pb::RunResult) -> &str {
    r.config.get("worker").map_or("(none)", String::as_str)
}

#[tokio::test]
async fn workers_are_reused_only_after_ok_runs_with_the_same_environment() {
    let a = start(|_| {}).await;
    let mut c = client(&a).await;
    let small = || spec("vec_add", &[("n", 1000)]);

    let (_, r) = run(&mut c, "first", small()).await;
    assert_eq!(r.status(), pb::RunStatus::Ok, "{}", r.message);
    assert_eq!(worker_of(&r), "new");
    let idle = idle_serve_workers(&a);
    assert_eq!(idle.len(), 1, "one worker waits for the next run: {idle:?}");

    let (_, r) = run(&mut c, "second", small()).await;
    assert_eq!(r.status(), pb::RunStatus::Ok, "{}", r.message);
    assert_eq!(worker_of(&r), "reused");
    assert_eq!(idle_serve_workers(&a), idle, "the same process ran it");

    // Other environment overrides: a process started with them.
    let mut s = small();
    s.env.insert("GPU_TEST_MARKER".into(), "1".into());
    let (_, r) = run(&mut c, "other-env", s).await;
    assert_eq!(worker_of(&r), "new");

    // A run that did not end ok ends its worker, even with the same key.
    for id in ["wrong-1", "wrong-2"] {
        let (_, r) = run(&mut c, id, spec("debug_wrong", &[])).await;
        assert_eq!(r.status(), pb::RunStatus::Invalid, "{}", r.message);
        assert_eq!(worker_of(&r), "new", "{id}");
    }

    // An idle worker killed from outside is noticed: the next run starts a new one and is ok.
    for pid in &idle {
        // SAFETY: kill() on a pid read from /proc; at worst the process is already gone.
        unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (_, r) = run(&mut c, "after-kill", small()).await;
    assert_eq!(r.status(), pb::RunStatus::Ok, "{}", r.message);
    assert_eq!(worker_of(&r), "new");

    // A crash in a reused worker is still a crash with that run's own stderr.
    let (_, r) = run(&mut c, "crash", spec("debug_crash", &[("mode", 0)])).await;
    assert_eq!(r.status(), pb::RunStatus::Crashed, "{}", r.message);
    assert!(
        r.stderr_tail.contains("crashing on purpose"),
        "{}",
        r.stderr_tail
    );
    assert!(!r.stderr_tail.contains("vec_add"), "{}", r.stderr_tail);
}

#[tokio::test]
async fn fresh_worker_per_run_starts_one_for_every_run() {
    let a = start(|c| c.reuse_workers = false).await;
    let mut c = client(&a).await;
    for id in ["one", "two"] {
        let (_, r) = run(&mut c, id, spec("vec_add", &[("n", 1000)])).await;
        assert_eq!(r.status(), pb::RunStatus::Ok, "{}", r.message);
        assert_eq!(worker_of(&r), "new", "{id}");
    }
}

#[tokio::test]
async fn the_cpu_isa_cap_is_a_per_run_override_and_a_bad_value_is_the_runs_error() {
    let a = start(|_| {}).await;
    let mut c = client(&a).await;
    let gemm = |isa: &str| {
        let mut s = spec("gemm", &[("m", 96), ("n", 80), ("k", 70)]);
        s.variant = "blocked".into();
        s.env.insert("GPUFLEET_CPU_ISA".into(), isa.into());
        s
    };
    let (_, r) = run(&mut c, "portable", gemm("portable")).await;
    assert_eq!(r.status(), pb::RunStatus::Ok, "{}", r.message);
    assert_eq!(r.config.get("isa").map(String::as_str), Some("portable"));
    let (_, r) = run(&mut c, "avx2", gemm("avx2")).await;
    assert_eq!(r.status(), pb::RunStatus::Ok, "{}", r.message);
    let isa = r.config.get("isa").cloned().unwrap_or_default();
    assert!(
        ["avx2", "portable"].contains(&isa.as_str()),
        "capped: {isa}"
    );
    let (_, r) = run(&mut c, "bogus", gemm("avx9000")).await;
    assert_eq!(r.status(), pb::RunStatus::Unsupported, "{}", r.message);
    assert!(
        r.message.contains("GPUFLEET_CPU_ISA") && r.message.contains("avx9000"),
        "{}",
        r.message
    );
}

/// Loader variables through a real agent: a default agent refuses tool libraries, layers and
/// injection paths, and manifests outside the standard ICD directories; lavapipe's manifest in the
/// standard directory goes through; a manifest the owner lists in the agent's configuration goes
/// through once listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loader_variables_are_the_host_owners_decision() {
    let dir = tempfile::tempdir().unwrap();
    let mine = dir.path().join("my_icd.json");
    std::fs::write(&mine, r#"{"file_format_version": "1.0.0", "ICD": {"library_path": "/nonexistent.so", "api_version": "1.3.0"}}"#).unwrap();
    let mine = mine.display().to_string();
    let with = |k: &str, v: &str| {
        let mut s = spec("vec_add", &[("n", 4096)]);
        s.env.insert(k.into(), v.into());
        s
    };
    let a = start(|_| {}).await;
    let mut c = client(&a).await;
    for (k, v) in [
        ("HSA_TOOLS_LIB", "/tmp/libtool.so"),
        ("VK_LAYER_PATH", "/tmp/layers"),
        ("CUDA_INJECTION64_PATH", "/tmp/inject.so"),
        ("VK_DRIVER_FILES", mine.as_str()),
    ] {
        let st = refused(&mut c, with(k, v)).await;
        assert_eq!(st.code(), tonic::Code::InvalidArgument, "{k}: {st:?}");
        let m = st.message();
        assert!(
            m.contains(&format!("{k}=")) && m.contains("[loader] allow") && m.contains("env"),
            "{m}"
        );
    }
    let lvp = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json";
    if std::path::Path::new(lvp).exists() {
        let (_, r) = run(&mut c, "lvp-manifest", with("VK_DRIVER_FILES", lvp)).await;
        assert_eq!(r.status(), pb::RunStatus::Ok, "{}", r.message);
    } else {
        eprintln!("skipped the lavapipe manifest case: {lvp} is not installed");
    }
    drop(c);
    drop(a);

    let owned = mine.clone();
    let a = start(move |cfg| {
        cfg.loader = gpufleet_agent::env::LoaderPolicy {
            allowed: vec![owned],
            config: Some("/etc/gpufleet/agent.toml".into()),
        }
    })
    .await;
    let mut c = client(&a).await;
    let (_, r) = run(&mut c, "listed-manifest", with("VK_DRIVER_FILES", &mine)).await;
    assert_eq!(r.status(), pb::RunStatus::Ok, "{}", r.message);
    let st = refused(&mut c, with("HSA_TOOLS_LIB", "/tmp/libtool.so")).await;
    assert!(
        st.message().contains("/etc/gpufleet/agent.toml"),
        "{}",
        st.message()
    );
}
