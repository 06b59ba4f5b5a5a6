//! The OpenCL backend through the agent on whatever OpenCL device is present
//! (PoCL in CI): program caching, tuning, modes, and the CL 1.1 build check
//! (conformance is in `conformance.rs`). Skips with a reason when no OpenCL
//! device exists, unless GPUFLEET_REQUIRE names `opencl`.

mod common;

use common::{
    assert_config, assert_few_wide_rows_are_split, assert_gemm_tuning_is_searched_then_cached,
    assert_ok, assert_transfers_take_longer, compute_then_with_transfers, on, on_backend, required,
    run, spec, unavailable_with, vec_add_twice,
};
use gpufleet_proto::v1 as pb;

#[tokio::test]
async fn programs_are_cached_and_gemm_tuning_is_recorded() {
    let Some(mut t) = on_backend("opencl").await else {
        return;
    };
    let (first, second) = vec_add_twice(&mut t.client, &t.device).await;
    assert_config(&first, "binary_cache", "miss");
    assert_config(&second, "binary_cache", "hit");
    assert_gemm_tuning_is_searched_then_cached(&mut t.client, &t.device).await;
}

#[tokio::test]
async fn few_wide_rows_run_split_over_groups_and_validate() {
    if let Some(mut t) = on_backend("opencl").await {
        assert_few_wide_rows_are_split(&mut t).await;
    }
}

#[tokio::test]
async fn with_transfers_mode_includes_the_copies() {
    let Some(mut t) = on_backend("opencl").await else {
        return;
    };
    let (compute, transfers) = compute_then_with_transfers(&mut t.client, &t.device).await;
    assert_transfers_take_longer(compute, transfers);
}

/// Decode attention over a long cache with few (row, head) groups for the device's compute units
/// runs split along the sequence (`llm_attention` in chunks, then `llm_attention_merge`) and
/// validates against f64: two query heads over one key/value head after 300 positions, one
/// sequence and two (batch 2 may or may not be split, depending on the compute units).
#[tokio::test]
async fn decode_attention_split_along_a_long_cache_validates() {
    let Some(mut t) = on_backend("opencl").await else {
        return;
    };
    for batch in [1, 2] {
        let mut s = spec(
            "attention",
            &[
                ("batch", batch),
                ("tokens", 1),
                ("context", 300),
                ("heads", 2),
                ("kv_heads", 1),
                ("head_dim", 64),
            ],
        );
        s.variant = "decode".into();
        let (_, r) = run(&mut t.client, "split-attention", on(&t.device, s)).await;
        assert_ok(&r);
        assert!(r.validation.as_ref().unwrap().passed, "{}", r.message);
        if batch == 1 {
            assert!(
                r.config.contains_key("attention_split"),
                "batch 1: {:?}",
                r.config
            );
        }
    }
}

/// A transfer's ceiling is the link, which no peak table holds: its result has no % of peak (absent
/// on the wire, null in JSON), never a 0.
#[tokio::test]
async fn a_transfer_has_no_percentage_of_peak() {
    let Some(mut t) = on_backend("opencl").await else {
        return;
    };
    let (_, r) = run(
        &mut t.client,
        "transfer",
        on(&t.device, spec("transfer", &[("bytes", 1 << 20)])),
    )
    .await;
    assert_ok(&r);
    assert!(r.metric.is_some());
    assert_eq!((r.pct_of_peak, r.peak_source.as_str()), (None, ""));
    let json = serde_json::to_value(&r).unwrap();
    assert!(json["pct_of_peak"].is_null(), "{}", json["pct_of_peak"]);
}

/// The transformer's GPU kernels validated on whatever OpenCL device is here: `llm_matmul` and
/// `llm_attention_tiled` for prefill, `llm_gemv_team` for one-row projections with the unchecked
/// blocks' norms, SwiGLUs and residual adds folded in, `llm_gemv` for a few rows, `llm_matmul_64`
/// for a projection too small to fill the compute units. A CPU device (PoCL in CI) is planned as
/// a GPU through the debug switch.
#[tokio::test]
async fn the_transformer_gpu_kernels_validate_on_the_device_at_hand() {
    let Some(mut t) = on_backend("opencl").await else {
        return;
    };
    let gpu = |mut s: pb::RunSpec| {
        s.env
            .insert("GPUFLEET_DEBUG_OPENCL_GPU_PLANS".into(), "1".into());
        s.settings_mut().timeout_s = Some(120.0);
        on(&t.device, s)
    };
    let mut prefill = spec("llm", &[("model", 0), ("prompt", 20), ("batch", 2)]);
    prefill.variant = "prefill".into();
    let mut decode = spec("llm", &[("model", 0), ("gen", 3), ("context", 4)]);
    decode.variant = "decode".into();
    let mut batched = spec("llm", &[("model", 0), ("gen", 2), ("batch", 3)]);
    batched.variant = "decode".into();
    let wide = spec("gemv", &[("batch", 1), ("k", 72), ("n", 8200)]);
    let odd = spec("gemv", &[("batch", 1), ("k", 61), ("n", 7)]);
    // One tile of 128 rows × 128 features: fewer than the compute units (2 or more).
    let small = spec("gemv", &[("batch", 100), ("k", 40), ("n", 70)]);
    for (name, s, want, attention, folded) in [
        ("prefill", prefill, "16 tiled", "4 tiled", "0"),
        ("decode", decode, "0 tiled", "0 tiled", "36"),
        ("batched", batched, "0 tiled", "0 tiled", "0"),
        ("wide-gemv", wide, "(1 by teams)", "", "0"),
        ("odd-gemv", odd, "(1 by teams)", "", "0"),
        ("small-matmul", small, "1 of them 64x128", "", "0"),
    ] {
        let (_, r) = run(&mut t.client, name, gpu(s)).await;
        assert_ok(&r);
        assert!(r.validation.as_ref().unwrap().passed, "{name}");
        let projections = &r.config["projections"];
        assert!(projections.contains(want), "{name}: {projections}");
        assert!(!projections.contains("gemv_rows"), "{name}: {projections}");
        assert!(
            r.config["attention"].starts_with(attention),
            "{name}: {:?}",
            r.config
        );
        assert_eq!(r.config["folded_steps"], folded, "{name}");
    }
}

/// q8_0 and q4_0 weights: `tiny`'s prefill and decode, `small`'s decode and gemv validate, every
/// projection through the quantized gemv on the CPU's plan; planned as a GPU, the one-row
/// projections by teams (one sequence's with the norms, SwiGLUs, adds and RoPEs folded in) and a
/// prefill's by tiles (`llm_qmatmul`).
#[tokio::test]
async fn quantized_weights_validate_on_the_device_at_hand() {
    let Some(mut t) = on_backend("opencl").await else {
        return;
    };
    for dtype in ["q8_0", "q4_0"] {
        let mut prefill = spec("llm", &[("model", 0), ("prompt", 20), ("batch", 2)]);
        prefill.variant = "prefill".into();
        let mut decode = spec(
            "llm",
            &[("model", 0), ("gen", 3), ("context", 4), ("batch", 2)],
        );
        decode.variant = "decode".into();
        let mut small = spec("llm", &[("model", 1), ("gen", 2)]);
        small.variant = "decode".into();
        let gemv = spec("gemv", &[("batch", 3), ("k", 96), ("n", 77)]);
        // Three teams of features on 8,192-long rows: widened to the group's 256 work-items
        // under the experiment switch.
        let wide = spec("gemv", &[("batch", 1), ("k", 8192), ("n", 12)]);
        // One sequence: the packed teams fold the norms, SwiGLUs, adds and RoPEs.
        let mut one = spec("llm", &[("model", 0), ("gen", 3), ("context", 4)]);
        one.variant = "decode".into();
        for (name, mut s, gpu) in [
            ("prefill", prefill.clone(), false),
            ("prefill-gpu-plan", prefill, true),
            ("decode", decode.clone(), false),
            ("decode-gpu-plan", decode, true),
            ("small", small.clone(), false),
            ("gemv", gemv, true),
            ("gemv-wide", wide, true),
            ("folded-gpu-plan", one, true),
            ("small-folded-gpu-plan", small, true),
        ] {
            s.dtype = dtype.into();
            s.settings_mut().timeout_s = Some(300.0);
            if gpu {
                s.env
                    .insert("GPUFLEET_DEBUG_OPENCL_GPU_PLANS".into(), "1".into());
            }
            if name == "gemv-wide" {
                s.env
                    .insert("GPUFLEET_DEBUG_OPENCL_WIDE_QUANT_TEAMS".into(), "1".into());
            }
            let name = format!("{name}-{dtype}");
            let (_, r) = run(&mut t.client, &name, on(&t.device, s)).await;
            assert_ok(&r);
            assert!(r.validation.as_ref().unwrap().passed, "{name}");
            let projections = &r.config["projections"];
            assert!(r.config["weights"].starts_with(dtype), "{name}");
            if name.starts_with("prefill-gpu") {
                // Planned as a GPU, the prompt's projections run by tiles.
                let tiled: usize = projections
                    .split(" tiled")
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                assert!(
                    tiled > 0 && projections.contains(&format!("; {tiled} of quantized blocks")),
                    "{name}: {projections}"
                );
                continue;
            }
            let gemv: usize = projections
                .split(" gemv")
                .next()
                .and_then(|p| p.rsplit(' ').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            assert!(
                gemv > 0 && projections.contains(&format!("{gemv} of quantized blocks")),
                "{name}: {projections}"
            );
            // Planned as a GPU, the one-row projections run by teams.
            assert_eq!(
                gpu,
                !projections.contains("(0 by teams"),
                "{name}: {projections}"
            );
            if name.starts_with("gemv-wide") {
                assert_eq!(r.config["quant_teams"], "1 of 256 work-items", "{name}");
            }
            let folded: usize = r.config["folded_steps"].parse().unwrap();
            assert_eq!(
                folded > 0,
                name.contains("folded"),
                "{name}: {folded} folded"
            );
        }
    }
}

/// `llm_qgemv_team_*`'s q4_0 lanes take a quarter of QB blocks a trip (a define, 4 unless set): 1,
/// 2 and 4 validate, on whole trips and on a row's partial last trip (k = 2,080 is 65 blocks), in a
/// gemv and in `tiny`'s decode, planned as a GPU, through the compiler-options switch. Teams keep
/// 32 work-items; under `GPUFLEET_DEBUG_OPENCL_WIDE_QUANT_TEAMS`, on PoCL's few compute units, the
/// gemvs' few features widen them (4,096 / 32 blocks: 128 work-items; 65 blocks: 64).
#[tokio::test]
async fn q4_0_team_gemvs_validate_at_every_block_count_a_lane() {
    let Some(mut t) = on_backend("opencl").await else {
        return;
    };
    let mut decode = spec("llm", &[("model", 0), ("gen", 2), ("context", 3)]);
    decode.variant = "decode".into();
    let runs = [
        (
            "gemv-whole",
            spec("gemv", &[("batch", 1), ("k", 4096), ("n", 40)]),
        ),
        (
            "gemv-partial",
            spec("gemv", &[("batch", 2), ("k", 2080), ("n", 9)]),
        ),
        ("decode", decode),
    ];
    let widths = [
        ("gemv-whole", "1 of 128 work-items"),
        ("gemv-partial", "1 of 64 work-items"),
    ];
    for (qb, wide) in [
        ("1", true),
        ("2", true),
        ("4", true),
        ("4", false),
        ("2", false),
    ] {
        for (name, s) in &runs {
            let mut s = on(&t.device, s.clone());
            s.dtype = "q4_0".into();
            s.settings_mut().timeout_s = Some(120.0);
            s.env
                .insert("GPUFLEET_DEBUG_OPENCL_GPU_PLANS".into(), "1".into());
            s.env
                .insert("GPUFLEET_DEBUG_OPENCL_OPTIONS".into(), format!("-DQB={qb}"));
            if wide {
                s.env
                    .insert("GPUFLEET_DEBUG_OPENCL_WIDE_QUANT_TEAMS".into(), "1".into());
            }
            let name = format!("{name}-qb{qb}{}", if wide { "-wide" } else { "" });
            let (_, r) = run(&mut t.client, &name, s).await;
            assert_ok(&r);
            assert!(r.validation.as_ref().unwrap().passed, "{name}");
            // Its one-row projections run by teams (`(0 by teams` where none does).
            assert!(
                !r.config["projections"].contains("(0 by teams"),
                "{name}: {}",
                r.config["projections"]
            );
            let teams = &r.config["quant_teams"];
            match widths.iter().find(|(w, _)| name.starts_with(w)) {
                Some((_, width)) if wide => assert_eq!(teams, width, "{name}"),
                _ => assert!(teams.ends_with(" of 32 work-items"), "{name}: {teams}"),
            }
        }
    }
}

#[tokio::test]
async fn a_host_without_opencl_drivers_lists_the_backend_as_unavailable() {
    // An empty vendor directory: the loader finds no driver.
    let empty = tempfile::tempdir().unwrap();
    let dir = empty.path().display().to_string();
    let reason = unavailable_with("opencl", "OCL_ICD_VENDORS", dir).await;
    assert!(
        reason.contains("OpenCL") || reason.contains("libOpenCL"),
        "{reason}"
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
    // transfer launches nothing (transfer.rs runs it as a copy).
    for (kernel, variants, dtypes) in plan::supported()
        .into_iter()
        .filter(|(k, _, _)| *k != "transfer")
    {
        for v in &variants {
            for d in &dtypes {
                let p = gpufleet_kernels::Problem::new(kernel, v, &Default::default(), d, true)
                    .unwrap();
                // compute_peak's fp16, fp64 and int8 need cl_khr_fp16, cl_khr_fp64 and
                // cl_khr_integer_dot_product of the device.
                let lacks = match (kernel, *v) {
                    ("compute_peak", "fp16") => !caps.fp16,
                    ("compute_peak", "fp64") => !caps.fp64,
                    ("compute_peak", "int8") => !caps.int8_dot,
                    _ => false,
                };
                if lacks {
                    let e = plan::plan(&p, &caps, None).unwrap_err();
                    assert!(e.0.contains("lacks"), "{kernel}/{v}: {e}");
                    continue;
                }
                let pl =
                    plan::plan(&p, &caps, None).unwrap_or_else(|e| panic!("{kernel}/{v}/{d}: {e}"));
                assert!(
                    pl.program.options.contains("-cl-std=CL1.1"),
                    "{}",
                    pl.program.options
                );
                let mut prog = Program::create_from_source(&ctx, &pl.program.source).unwrap();
                if prog.build(ctx.devices(), &pl.program.options).is_err() {
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
        let mut prog = Program::create_from_source(&ctx, &pl.program.source).unwrap();
        assert!(
            prog.build(ctx.devices(), &pl.program.options).is_ok(),
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
        .program
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

/// A run cannot make PoCL load a library from a cache directory it names: a first run, by an
/// agent whose owner allows the directory, fills `POCL_CACHE_DIR`; every compiled kernel there is
/// replaced by a library whose constructor leaves a mark. A default agent refuses the variable
/// (naming it and where to allow it) and the plant never runs; the owner-allowed agent, given the
/// same request, loads it, which shows the plant is real.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cannot_make_pocl_load_a_library_planted_in_its_cache() {
    let work = tempfile::tempdir().unwrap();
    let (cache, mark) = (work.path().join("cache"), work.path().join("planted-ran"));
    std::fs::create_dir(&cache).unwrap();
    let source = work.path().join("plant.c");
    std::fs::write(
        &source,
        format!(
            "#include <stdio.h>\n__attribute__((constructor)) static void plant(void) {{ FILE *f = fopen(\"{}\", \"w\"); if (f) fclose(f); }}\n",
            mark.display()
        ),
    )
    .unwrap();
    let plant = work.path().join("plant.so");
    let built = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&plant)
        .arg(&source)
        .status();
    if !built.is_ok_and(|s| s.success()) {
        eprintln!("skipped: no C compiler (cc) to build the planted library");
        return;
    }
    let dir = cache.display().to_string();
    let allowed = dir.clone();
    let owner = common::start(move |cfg| {
        cfg.reuse_workers = false;
        cfg.loader = gpufleet_agent::env::LoaderPolicy {
            allowed: vec![allowed],
            config: Some("/etc/gpufleet/agent.toml".into()),
        };
    })
    .await;
    let Some((device, _)) = common::backend_device(&owner, "opencl").await else {
        return;
    };
    if !device.name.to_lowercase().contains("pthread") && !device.vendor.contains("PoCL") {
        eprintln!("skipped: the OpenCL device is not PoCL ({})", device.name);
        return;
    }
    let mut s = on(&device, spec("vec_add", &[("n", 4096)]));
    s.env.insert("POCL_CACHE_DIR".into(), dir.clone());
    let mut owner_client = common::client(&owner).await;
    let (_, r) = run(&mut owner_client, "fill-cache", s.clone()).await;
    assert_ok(&r);
    let mut kernels = Vec::new();
    let mut stack = vec![cache.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "so") {
                kernels.push(p);
            }
        }
    }
    assert!(!kernels.is_empty(), "PoCL left no compiled kernel in {dir}");
    for k in &kernels {
        std::fs::copy(&plant, k).unwrap();
    }

    // A default agent: refused before any worker starts, and nothing planted runs.
    let default = common::start(|_| {}).await;
    let st = common::refused(&mut common::client(&default).await, s.clone()).await;
    assert_eq!(st.code(), tonic::Code::InvalidArgument, "{st:?}");
    assert!(
        st.message().contains("POCL_CACHE_DIR=") && st.message().contains("[loader] allow"),
        "{}",
        st.message()
    );
    assert!(!mark.exists(), "the planted library ran");

    // Where the owner allows the directory, PoCL does load what is in it.
    let _ = run(&mut owner_client, "planted", s).await;
    assert!(
        mark.exists(),
        "PoCL did not load the planted cache ({} kernels replaced), so this test proves nothing",
        kernels.len()
    );
}
