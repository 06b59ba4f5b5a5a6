//! The Vulkan backend through the agent (conformance on whatever Vulkan
//! device is present: lavapipe in CI), pipeline caching, modes, and a
//! driver that refuses the instance. Skips with a reason when no Vulkan
//! device exists, unless GPUFLEET_REQUIRE names `vulkan`.

mod common;

use common::{client, required, run, spec, start};
use gpufleet_proto::v1 as pb;

/// The first Vulkan device, or None (after printing why) when there is none.
async fn vulkan_device(a: &common::TestAgent) -> Option<(pb::Device, pb::BackendStatus)> {
    let info = client(a)
        .await
        .describe(pb::DescribeRequest {})
        .await
        .unwrap()
        .into_inner();
    let backend = info
        .backends
        .iter()
        .find(|b| b.name == "vulkan")
        .expect("vulkan backend is compiled in")
        .clone();
    let device = info.devices.iter().find(|d| d.backend == "vulkan").cloned();
    match device {
        Some(d) if backend.available => Some((d, backend)),
        _ => {
            assert!(
                !required("vulkan"),
                "GPUFLEET_REQUIRE names vulkan but it is unavailable: {}",
                backend.reason
            );
            eprintln!("skipping: vulkan unavailable: {}", backend.reason);
            None
        }
    }
}

fn on(device: &pb::Device, mut s: pb::RunSpec) -> pb::RunSpec {
    s.device_id = device.id.clone();
    s
}

#[tokio::test]
async fn every_catalog_kernel_runs_validated_on_vulkan() {
    let a = start(|_| {}).await;
    let Some((dev, backend)) = vulkan_device(&a).await else {
        return;
    };
    let mut c = client(&a).await;
    let suite = gpufleet_kernels::Suite::builtin("smoke").unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for (i, r) in suite.runs.iter().enumerate() {
        let Some(sup) = backend.kernels.iter().find(|k| k.kernel == r.kernel) else {
            continue;
        };
        for v in r.variants.clone().unwrap_or_else(|| sup.variants.clone()) {
            let mut s = on(&dev, spec(&r.kernel, &[]));
            s.params = r.params.iter().map(|(k, v)| (k.clone(), *v)).collect();
            s.variant = v.clone();
            let (_, res) = run(&mut c, &format!("vk-{i}-{v}"), s).await;
            assert_eq!(
                res.status(),
                pb::RunStatus::Ok,
                "{}/{v} on {}: {}",
                r.kernel,
                dev.id,
                res.message
            );
            assert!(res.validation.unwrap().passed);
            assert!(res.stats.unwrap().median_s > 0.0, "device time measured");
            seen.insert(r.kernel.clone());
        }
    }
    for k in gpufleet_kernels::catalog()
        .iter()
        .filter(|k| !k.debug && !k.host_only)
    {
        assert!(seen.contains(k.name), "{} did not run on vulkan", k.name);
    }
    // fp16 storage with fp32 accumulation where the device has it.
    let f16 = backend
        .kernels
        .iter()
        .any(|k| k.kernel == "gemm" && k.dtypes.iter().any(|d| d == "f16"));
    let f16_variants: &[&str] = if f16 { &["blocked"] } else { &[] };
    for &v in f16_variants {
        let mut s = on(&dev, spec("gemm", &[("m", 67), ("n", 45), ("k", 33)]));
        s.variant = v.into();
        s.dtype = "f16".into();
        let (_, res) = run(&mut c, &format!("f16-{v}"), s).await;
        assert_eq!(
            res.status(),
            pb::RunStatus::Ok,
            "gemm/{v} f16: {}",
            res.message
        );
    }
    // A wrong answer on the device is caught like anywhere else.
    let (_, res) = run(&mut c, "wrong", on(&dev, spec("debug_wrong", &[]))).await;
    assert_eq!(res.status(), pb::RunStatus::Invalid, "{}", res.message);
}

#[tokio::test]
async fn pipelines_and_gemm_tuning_are_cached_and_timestamps_time_the_work() {
    let a = start(|_| {}).await;
    let Some((dev, _)) = vulkan_device(&a).await else {
        return;
    };
    let mut c = client(&a).await;
    let (_, first) = run(&mut c, "c1", on(&dev, spec("vec_add", &[("n", 4096)]))).await;
    let (_, second) = run(&mut c, "c2", on(&dev, spec("vec_add", &[("n", 4096)]))).await;
    assert_eq!(first.status(), pb::RunStatus::Ok, "{}", first.message);
    assert_eq!(
        first.config.get("pipeline_cache").map(String::as_str),
        Some("miss"),
        "{:?}",
        first.config
    );
    assert_eq!(
        second.config.get("pipeline_cache").map(String::as_str),
        Some("hit"),
        "{:?}",
        second.config
    );
    assert_eq!(
        second.config.get("timing").map(String::as_str),
        Some("timestamps")
    );

    let g = || on(&dev, spec("gemm", &[("m", 96), ("n", 80), ("k", 64)]));
    let (_, tuned) = run(&mut c, "t1", g()).await;
    assert_eq!(tuned.status(), pb::RunStatus::Ok, "{}", tuned.message);
    assert!(
        tuned
            .config
            .get("tuning")
            .is_some_and(|t| t.starts_with("searched")),
        "{:?}",
        tuned.config
    );
    let (_, again) = run(&mut c, "t2", g()).await;
    assert_eq!(
        again.config.get("tuning").map(String::as_str),
        Some("cached"),
        "{:?}",
        again.config
    );
    assert!(
        again.config.keys().any(|k| k.contains("tile")),
        "{:?}",
        again.config
    );
}

#[tokio::test]
async fn with_transfers_mode_includes_the_copies() {
    let a = start(|_| {}).await;
    let Some((dev, _)) = vulkan_device(&a).await else {
        return;
    };
    let mut c = client(&a).await;
    // Minimums over many iterations: the machine may be busy with other tests.
    let mut s = on(&dev, spec("copy", &[("n", 1 << 22)]));
    s.min_iterations = 20;
    let (_, compute) = run(&mut c, "m1", s.clone()).await;
    s.mode = pb::RunMode::WithTransfers as i32;
    let (_, transfers) = run(&mut c, "m2", s).await;
    assert_eq!(
        transfers.status(),
        pb::RunStatus::Ok,
        "{}",
        transfers.message
    );
    assert!(transfers.validation.unwrap().passed);
    // On a CPU device (lavapipe) "transfers" are copies within host memory
    // and its timestamps are too coarse to order them: compare on GPUs only.
    if dev.device_type != "cpu" {
        let (cm, tm) = (compute.stats.unwrap().min_s, transfers.stats.unwrap().min_s);
        assert!(
            tm > cm,
            "upload + kernel + readback ({tm}) should take longer than the kernel ({cm})"
        );
    }
}

#[tokio::test]
async fn a_host_without_vulkan_drivers_lists_the_backend_as_unavailable() {
    // A driver manifest that does not exist: instance creation fails the
    // way AMDVLK's ERROR_INCOMPATIBLE_DRIVER does.
    let empty = tempfile::tempdir().unwrap();
    let dir = empty.path().display().to_string();
    let a = start(move |c| {
        c.worker
            .env
            .push(("VK_DRIVER_FILES".into(), format!("{dir}/none.json")))
    })
    .await;
    let info = client(&a)
        .await
        .describe(pb::DescribeRequest {})
        .await
        .unwrap()
        .into_inner();
    let cl = info.backends.iter().find(|b| b.name == "vulkan").unwrap();
    assert!(!cl.available);
    assert!(
        cl.reason.contains("vkCreateInstance")
            || cl.reason.contains("libvulkan")
            || cl.reason.contains("no devices"),
        "{}",
        cl.reason
    );
    assert!(
        info.backends.iter().any(|b| b.name == "cpu" && b.available),
        "the other backends still serve"
    );
}

#[tokio::test]
async fn buffers_past_the_storage_range_are_unsupported_not_wrong() {
    let a = start(|_| {}).await;
    let Some((dev, _)) = vulkan_device(&a).await else {
        return;
    };
    let mut c = client(&a).await;
    // 2^28 floats = 1 GiB per buffer: past lavapipe's 128 MiB storage range.
    let (_, r) = run(&mut c, "big", on(&dev, spec("copy", &[("n", 1 << 28)]))).await;
    if dev.name.contains("llvmpipe") {
        assert_eq!(r.status(), pb::RunStatus::Unsupported, "{}", r.message);
        assert!(r.message.contains("maxStorageBufferRange"), "{}", r.message);
    } else {
        assert!(
            matches!(r.status(), pb::RunStatus::Ok | pb::RunStatus::Unsupported),
            "{}",
            r.message
        );
    }
}
