//! The OpenCL backend through the agent (conformance on whatever OpenCL
//! device is present: PoCL in CI), program caching, tuning, modes, and the
//! CL 1.1 build check. Skips with a reason when no OpenCL device exists,
//! unless GPUFLEET_REQUIRE names `opencl`.

mod common;

use common::{client, required, run, spec, start};
use gpufleet_proto::v1 as pb;

/// The first OpenCL device, or None (after printing why) when there is none.
async fn opencl_device(a: &common::TestAgent) -> Option<(pb::Device, pb::BackendStatus)> {
    let info = client(a)
        .await
        .describe(pb::DescribeRequest {})
        .await
        .unwrap()
        .into_inner();
    let backend = info
        .backends
        .iter()
        .find(|b| b.name == "opencl")
        .expect("opencl backend is compiled in")
        .clone();
    let device = info.devices.iter().find(|d| d.backend == "opencl").cloned();
    match device {
        Some(d) if backend.available => Some((d, backend)),
        _ => {
            assert!(
                !required("opencl"),
                "GPUFLEET_REQUIRE names opencl but it is unavailable: {}",
                backend.reason
            );
            eprintln!("skipping: opencl unavailable: {}", backend.reason);
            None
        }
    }
}

fn on(device: &pb::Device, mut s: pb::RunSpec) -> pb::RunSpec {
    s.device_id = device.id.clone();
    s
}

#[tokio::test]
async fn every_catalog_kernel_runs_validated_on_opencl() {
    let a = start(|_| {}).await;
    let Some((dev, backend)) = opencl_device(&a).await else {
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
            let (_, res) = run(&mut c, &format!("cl-{i}-{v}"), s).await;
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
        assert!(seen.contains(k.name), "{} did not run on opencl", k.name);
    }
    // fp16 storage with fp32 accumulation, every variant, awkward sizes.
    for v in ["naive", "tiled", "blocked"] {
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
async fn programs_are_cached_and_gemm_tuning_is_recorded() {
    let a = start(|_| {}).await;
    let Some((dev, _)) = opencl_device(&a).await else {
        return;
    };
    let mut c = client(&a).await;
    let (_, first) = run(&mut c, "c1", on(&dev, spec("vec_add", &[("n", 4096)]))).await;
    let (_, second) = run(&mut c, "c2", on(&dev, spec("vec_add", &[("n", 4096)]))).await;
    assert_eq!(
        first.config.get("binary_cache").map(String::as_str),
        Some("miss"),
        "{:?}",
        first.config
    );
    assert_eq!(
        second.config.get("binary_cache").map(String::as_str),
        Some("hit"),
        "{:?}",
        second.config
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
    // The tuned parameters are part of the recorded configuration.
    assert!(
        again.config.keys().any(|k| k.contains("tile")),
        "{:?}",
        again.config
    );
}

#[tokio::test]
async fn with_transfers_mode_includes_the_copies() {
    let a = start(|_| {}).await;
    let Some((dev, _)) = opencl_device(&a).await else {
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
    let (cm, tm) = (compute.stats.unwrap().min_s, transfers.stats.unwrap().min_s);
    assert!(
        tm > cm,
        "upload + kernel + readback ({tm}) should take longer than the kernel ({cm})"
    );
}

#[tokio::test]
async fn a_host_without_opencl_drivers_lists_the_backend_as_unavailable() {
    // An empty vendor directory: the loader finds no driver.
    let empty = tempfile::tempdir().unwrap();
    let dir = empty.path().display().to_string();
    let a = start(move |c| c.worker.env.push(("OCL_ICD_VENDORS".into(), dir))).await;
    let info = client(&a)
        .await
        .describe(pb::DescribeRequest {})
        .await
        .unwrap()
        .into_inner();
    let cl = info.backends.iter().find(|b| b.name == "opencl").unwrap();
    assert!(!cl.available);
    assert!(
        cl.reason.contains("OpenCL") || cl.reason.contains("libOpenCL"),
        "{}",
        cl.reason
    );
    assert!(
        info.backends.iter().any(|b| b.name == "cpu" && b.available),
        "the other backends still serve"
    );
}

#[test]
fn every_plan_builds_with_cl_1_1() {
    use gpufleet_agent::backend::opencl::{device, plan};
    use opencl3::context::Context;
    use opencl3::program::Program;
    let found = match device::enumerate() {
        Ok(f) if !f.is_empty() => f,
        other => {
            let why = other
                .err()
                .map(|e| e.to_string())
                .unwrap_or_else(|| "no device".into());
            assert!(!required("opencl"), "GPUFLEET_REQUIRE names opencl: {why}");
            eprintln!("skipping: {why}");
            return;
        }
    };
    let dev = &found[0];
    let mut caps = dev.caps.clone();
    caps.opencl_c = (1, 1);
    let ctx = Context::from_device(&opencl3::device::Device::new(dev.id)).unwrap();
    let mut built = 0;
    for (kernel, variants, dtypes) in plan::supported() {
        for v in &variants {
            for d in &dtypes {
                let p = gpufleet_kernels::Problem::new(kernel, v, &Default::default(), d, true)
                    .unwrap();
                let pl =
                    plan::plan(&p, &caps, None).unwrap_or_else(|e| panic!("{kernel}/{v}/{d}: {e}"));
                assert!(pl.options.contains("-cl-std=CL1.1"), "{}", pl.options);
                let mut prog = Program::create_from_source(&ctx, &pl.source).unwrap();
                if prog.build(ctx.devices(), &pl.options).is_err() {
                    panic!(
                        "{kernel}/{v}/{d} does not build as CL1.1:\n{}",
                        prog.get_build_log(dev.id).unwrap_or_default()
                    );
                }
                built += 1;
            }
        }
    }
    for t in plan::gemm_candidates(&caps) {
        let p = gpufleet_kernels::Problem::new("gemm", "blocked", &Default::default(), "f32", true)
            .unwrap();
        let pl = plan::plan(&p, &caps, Some(&t)).unwrap();
        let mut prog = Program::create_from_source(&ctx, &pl.source).unwrap();
        assert!(
            prog.build(ctx.devices(), &pl.options).is_ok(),
            "candidate {t:?} does not build"
        );
        built += 1;
    }
    assert!(built > 15, "built {built} programs");
}

#[test]
fn a_failed_build_is_a_compile_error_with_the_log() {
    use gpufleet_agent::backend::BackendError;
    use gpufleet_agent::backend::opencl::{device, kernel, plan};
    use opencl3::context::Context;
    let Ok(found) = device::enumerate() else {
        return;
    };
    let Some(dev) = found.first() else {
        assert!(
            !required("opencl"),
            "GPUFLEET_REQUIRE names opencl but no device was found"
        );
        return;
    };
    let ctx = Context::from_device(&opencl3::device::Device::new(dev.id)).unwrap();
    let p =
        gpufleet_kernels::Problem::new("vec_add", "", &Default::default(), "f32", false).unwrap();
    let mut broken = plan::plan(&p, &dev.caps, None).unwrap();
    broken
        .source
        .push_str("\n__kernel void broken(__global float* x) { x[0] = undefined_name; }\n");
    match kernel::build(&ctx, dev, &broken, "vec_add") {
        Err(BackendError::Compile { log, .. }) => {
            assert!(
                log.contains("undefined_name"),
                "the build log names the error: {log}"
            )
        }
        Err(other) => panic!("expected a compile error, got {other}"),
        Ok(_) => panic!("a broken source built"),
    }
}
