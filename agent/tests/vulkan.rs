//! The Vulkan backend through the agent on whatever Vulkan device is present
//! (lavapipe in CI): pipeline caching, tuning, modes, the storage range, and
//! a driver that refuses the instance (conformance is in `conformance.rs`).
//! Skips with a reason when no Vulkan device exists, unless GPUFLEET_REQUIRE
//! names `vulkan`.

mod common;

use common::{
    OnBackend, assert_config, assert_few_wide_rows_are_split,
    assert_gemm_tuning_is_searched_then_cached, assert_ok, assert_transfers_take_longer,
    compute_then_with_transfers, on, on_backend, run, spec, unavailable_with, vec_add_twice,
};
use gpufleet_proto::v1 as pb;

#[tokio::test]
async fn pipelines_and_gemm_tuning_are_cached_and_timestamps_time_the_work() {
    let Some(mut t) = on_backend("vulkan").await else {
        return;
    };
    let (first, second) = vec_add_twice(&mut t.client, &t.device).await;
    assert_ok(&first);
    assert_config(&first, "pipeline_cache", "miss");
    assert_config(&second, "pipeline_cache", "hit");
    assert_config(&second, "timing", "timestamps");
    assert_gemm_tuning_is_searched_then_cached(&mut t.client, &t.device).await;
}

#[tokio::test]
async fn with_transfers_mode_includes_the_copies() {
    let Some(mut t) = on_backend("vulkan").await else {
        return;
    };
    let (compute, transfers) = compute_then_with_transfers(&mut t.client, &t.device).await;
    assert!(transfers.validation.clone().unwrap().passed);
    // On a CPU device (lavapipe) "transfers" are copies within host memory
    // and its timestamps are too coarse to order them: compare on GPUs only.
    if t.device.device_type != "cpu" {
        assert_transfers_take_longer(compute, transfers);
    }
}

#[tokio::test]
async fn a_host_without_vulkan_drivers_lists_the_backend_as_unavailable() {
    // A driver manifest that does not exist: instance creation fails the
    // way AMDVLK's ERROR_INCOMPATIBLE_DRIVER does.
    let empty = tempfile::tempdir().unwrap();
    let dir = empty.path().display().to_string();
    let reason = unavailable_with("vulkan", "VK_DRIVER_FILES", format!("{dir}/none.json")).await;
    assert!(
        reason.contains("vkCreateInstance")
            || reason.contains("libvulkan")
            || reason.contains("no devices"),
        "{reason}"
    );
}

#[tokio::test]
async fn buffers_past_the_storage_range_are_unsupported_not_wrong() {
    let Some(mut t) = on_backend("vulkan").await else {
        return;
    };
    // 2^28 floats = 1 GiB per buffer: past lavapipe's 128 MiB storage range.
    let big = on(&t.device, spec("copy", &[("n", 1 << 28)]));
    let (_, r) = run(&mut t.client, "big", big).await;
    if t.device.name.contains("llvmpipe") {
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

#[tokio::test]
async fn few_wide_rows_run_split_over_groups_and_validate() {
    if let Some(mut t) = on_backend("vulkan").await {
        assert_few_wide_rows_are_split(&mut t).await;
    }
}

#[tokio::test]
async fn half_weights_of_gemv_and_llm_decode_validate_where_the_device_lists_them() {
    let Some(mut t) = on_backend("vulkan").await else {
        return;
    };
    let listed = |kernel: &str| {
        t.status
            .kernels
            .iter()
            .any(|k| k.kernel == kernel && k.dtypes.iter().any(|d| d == "f16"))
    };
    if !listed("gemv") || !listed("llm") {
        eprintln!("skipped: {} has no 16-bit storage buffers", t.device.name);
        return;
    }
    let runs = [
        (
            "gemv",
            "default",
            &[("batch", 3), ("k", 257), ("n", 130)][..],
        ),
        (
            "llm",
            "decode",
            &[("model", 0), ("context", 5), ("gen", 3), ("batch", 2)][..],
        ),
    ];
    for (kernel, variant, params) in runs {
        let name = format!("{kernel}-f16");
        let r = validated(&mut t, &name, (kernel, variant, "f16"), params, &[]).await;
        assert_config(&r, "weights", "f16 (16-bit storage)");
    }
}

/// Runs `kernel`'s `variant` in `dtype` with `params` and worker `env` on `t`'s device, and asserts
/// it ran `ok` and validated.
async fn validated(
    t: &mut OnBackend,
    name: &str,
    (kernel, variant, dtype): (&str, &str, &str),
    params: &[(&str, i64)],
    env: &[(&str, &str)],
) -> pb::RunResult {
    let mut s = on(&t.device, spec(kernel, params));
    s.variant = variant.into();
    s.dtype = dtype.into();
    s.env
        .extend(env.iter().map(|&(k, v)| (k.to_string(), v.to_string())));
    s.settings_mut().timeout_s = Some(300.0);
    let (_, r) = run(&mut t.client, name, s).await;
    assert_ok(&r);
    assert!(
        r.validation.as_ref().unwrap().passed,
        "{name}: {}",
        r.message
    );
    r
}

/// q8_0 and q4_0 weights (packed, read as words by the `llm_q*` shaders, or by teams with the steps
/// folded in where a projection has one row): `tiny`'s prefill and decode, `small`'s decode and
/// gemv validate, and a decode is replayed.
#[tokio::test]
async fn quantized_weights_validate() {
    let Some(mut t) = on_backend("vulkan").await else {
        return;
    };
    for dtype in ["q8_0", "q4_0"] {
        let runs = [
            (
                "prefill",
                "llm",
                &[("model", 0), ("prompt", 20), ("batch", 2)][..],
            ),
            (
                "decode",
                "llm",
                &[("model", 0), ("gen", 3), ("context", 4), ("batch", 2)][..],
            ),
            ("decode", "llm", &[("model", 1), ("gen", 2)][..]),
            ("default", "gemv", &[("batch", 3), ("k", 96), ("n", 77)][..]),
        ];
        for (variant, kernel, params) in runs {
            let name = format!("{kernel}-{variant}-{dtype}");
            let r = validated(&mut t, &name, (kernel, variant, dtype), params, &[]).await;
            assert!(
                r.config["weights"].starts_with(dtype),
                "{name}: {:?}",
                r.config
            );
            let shaders = &r.config["shaders"];
            // One row a pass (a decode of one sequence): teams, and replayed.
            if variant == "decode" && !params.iter().any(|&(p, v)| p == "batch" && v > 1) {
                assert!(shaders.contains("llm_gemv_team_q"), "{name}: {shaders}");
                assert!(
                    r.config["replay"].contains("replay one recorded pass"),
                    "{name}"
                );
            } else {
                assert!(shaders.contains("llm_linear_q"), "{name}: {shaders}");
            }
        }
    }
}

/// A run's parameters.
type Params = &'static [(&'static str, i64)];

/// The packed team gemvs' two runs in the tests below: `small`'s decode (the norm, SwiGLU, RoPE and
/// residual add folded in) and a gemv of 35 blocks a row, not a whole number of a team's trips.
const PACKED_RUNS: [(&str, &str, Params); 2] = [
    ("decode", "llm", &[("model", 1), ("gen", 2)]),
    ("default", "gemv", &[("batch", 1), ("k", 1120), ("n", 77)]),
];

/// Whether `device` has shaderIntegerDotProduct (the feature [`gpufleet_kernels::INT8_DOT`]).
fn has_int8_dot(device: &pb::Device) -> bool {
    device
        .features
        .iter()
        .any(|f| f == gpufleet_kernels::INT8_DOT)
}

/// The quantized team gemvs on integer dot products (GPUFLEET_DEBUG_VULKAN_QUANT_DOT=1 runs them
/// wherever the device has shaderIntegerDotProduct; lavapipe has it, not accelerated):
/// [`PACKED_RUNS`] validate in both formats, and the plan says which shader ran.
#[tokio::test]
async fn quantized_team_gemvs_on_integer_dot_products_validate() {
    let Some(mut t) = on_backend("vulkan").await else {
        return;
    };
    if !has_int8_dot(&t.device) {
        eprintln!("skipped: {} has no shaderIntegerDotProduct", t.device.name);
        return;
    }
    for dtype in ["q8_0", "q4_0"] {
        for (variant, kernel, params) in PACKED_RUNS {
            let name = format!("{kernel}-{variant}-{dtype}-dot");
            let env = [("GPUFLEET_DEBUG_VULKAN_QUANT_DOT", "1")];
            let r = validated(&mut t, &name, (kernel, variant, dtype), params, &env).await;
            let want = format!("llm_gemv_team_{}_dot", &dtype[..2]);
            let shaders = &r.config["shaders"];
            assert!(shaders.contains(&want), "{name}: {shaders}");
        }
    }
}

/// The packed team gemvs at every block count a lane may take a quarter of (the planner's 2 runs in
/// the other tests; GPUFLEET_DEBUG_VULKAN_QUANT_BLOCKS sets 1 or 4): [`PACKED_RUNS`] (a partial trip
/// at each) validate in both formats, on the float path and (4) on integer dot products where the
/// device has them.
#[tokio::test]
async fn packed_team_gemvs_validate_at_every_block_count_a_lane() {
    let Some(mut t) = on_backend("vulkan").await else {
        return;
    };
    let mut cases = vec![("1", "0"), ("4", "0")];
    if has_int8_dot(&t.device) {
        cases.push(("4", "1"));
    }
    for (blocks, quant_dot) in cases {
        for dtype in ["q8_0", "q4_0"] {
            for (variant, kernel, params) in PACKED_RUNS {
                let name = format!("{kernel}-{variant}-{dtype}-qb{blocks}-dot{quant_dot}");
                let env = [
                    ("GPUFLEET_DEBUG_VULKAN_QUANT_BLOCKS", blocks),
                    ("GPUFLEET_DEBUG_VULKAN_QUANT_DOT", quant_dot),
                ];
                validated(&mut t, &name, (kernel, variant, dtype), params, &env).await;
            }
        }
    }
}

#[tokio::test]
async fn weights_made_as_several_buffers_are_bound_a_tensor_at_a_time_and_validate_profiled() {
    let Some(mut t) = on_backend("vulkan").await else {
        return;
    };
    // Allocations of at most 2 MiB: tiny's 4 MiB embedding gets a buffer of its own, each
    // block's projections a few, as an 8b model's 16 GB do under a 4 GiB allocation limit.
    // And q4_0's packed weights (2.2 MiB in all) in allocations of at most 512 KiB.
    for (variant, dtype) in [
        ("decode", "f32"),
        ("prefill", "f32"),
        ("decode", "f16"),
        ("decode", "q4_0"),
    ] {
        let mut s = on(
            &t.device,
            spec(
                "llm",
                &[("model", 0), ("context", 5), ("gen", 3), ("prompt", 9)],
            ),
        );
        s.variant = variant.into();
        s.dtype = dtype.into();
        let limit = if dtype == "q4_0" { 512 << 10 } else { 2 << 20 };
        s.env.insert(
            "GPUFLEET_DEBUG_VULKAN_MAX_ALLOCATION".into(),
            limit.to_string(),
        );
        // And every dispatch timed, by kind.
        s.env
            .insert("GPUFLEET_DEBUG_VULKAN_PROFILE".into(), "1".into());
        s.settings_mut().timeout_s = Some(120.0);
        let name = format!("{variant}-{dtype}");
        let (_, r) = run(&mut t.client, &name, s).await;
        if dtype == "f16" && r.status() == pb::RunStatus::Unsupported {
            eprintln!("{name} skipped: {}", r.message);
            continue;
        }
        assert_ok(&r);
        assert!(
            r.validation.as_ref().unwrap().passed,
            "{name}: {}",
            r.message
        );
        let buffers = r
            .config
            .get("input1_buffers")
            .map(String::as_str)
            .unwrap_or("");
        let n: usize = buffers.split(' ').next().unwrap_or("").parse().unwrap_or(0);
        assert!(n >= 3, "{name}: {:?}", r.config);
        if r.config.get("timing").map(String::as_str) == Some("timestamps") {
            let profile = &r.config["dispatch_profile_us"];
            assert!(
                profile.contains("attention: ") && profile.contains(" ×"),
                "{name}: {profile}"
            );
        }
    }
}

#[tokio::test]
async fn a_decode_recorded_without_barriers_is_timed_and_says_so() {
    let Some(mut t) = on_backend("vulkan").await else {
        return;
    };
    // The debug switch that bounds what overlapping dependent dispatches could win: the run is
    // timed (valid where the device ran the dispatches one after the other, as lavapipe does,
    // invalid where they overlapped) and its configuration names the missing barriers.
    let mut s = on(&t.device, spec("llm", &[("model", 0), ("gen", 4)]));
    s.variant = "decode".into();
    s.env
        .insert("GPUFLEET_DEBUG_VULKAN_NO_BARRIERS".into(), "1".into());
    s.settings_mut().timeout_s = Some(120.0);
    let (_, r) = run(&mut t.client, "no-barriers", s).await;
    assert!(
        matches!(r.status(), pb::RunStatus::Ok | pb::RunStatus::Invalid),
        "{:?}: {}",
        r.status(),
        r.message
    );
    assert_eq!(
        r.config.get("barriers").map(String::as_str),
        Some("none (debug)"),
        "{:?}",
        r.config
    );
    assert!(r.stats.as_ref().is_some_and(|s| s.median_s > 0.0), "{r:?}");
}

#[tokio::test]
async fn a_chained_decode_validates_and_says_how_many_barriers_counters_replaced() {
    let Some(mut t) = on_backend("vulkan").await else {
        return;
    };
    // The dependent launch made of counters (GPUFLEET_DEBUG_VULKAN_CHAIN): the team gemvs and the
    // attention wait on the dispatch before them instead of a barrier (one-row projections: batch
    // 1). Folded layers (`small`), both quantized formats and half weights, and attention split along
    // a long cache (its merge keeps a barrier) all validate, recorded inline (one counter a dispatch).
    let cases: [(&str, &[(&str, i64)]); 4] = [
        ("f16", &[("model", 1), ("gen", 3)]),
        ("q4_0", &[("model", 1), ("gen", 3)]),
        ("q8_0", &[("model", 1), ("gen", 3)]),
        ("f32", &[("model", 0), ("context", 300), ("gen", 3)]),
    ];
    for (dtype, params) in cases {
        let mut s = on(&t.device, spec("llm", params));
        s.variant = "decode".into();
        s.dtype = dtype.into();
        s.env
            .insert("GPUFLEET_DEBUG_VULKAN_CHAIN".into(), "1".into());
        s.settings_mut().timeout_s = Some(300.0);
        let (_, r) = run(&mut t.client, &format!("chain-{dtype}"), s).await;
        assert_ok(&r);
        assert!(
            r.validation.as_ref().unwrap().passed,
            "{dtype}: {}",
            r.message
        );
        let chain = r.config.get("chain").map(String::as_str).unwrap_or("");
        let replaced: usize = chain.split(' ').next().unwrap_or("").parse().unwrap_or(0);
        assert!(
            replaced > 0 && chain.contains("replaced by counters"),
            "{dtype}: {:?}",
            r.config
        );
        assert!(
            !r.config.contains_key("replay"),
            "{dtype}: recorded inline: {:?}",
            r.config
        );
    }
}

#[tokio::test]
async fn decode_attention_split_along_a_long_cache_validates() {
    let Some(mut t) = on_backend("vulkan").await else {
        return;
    };
    // tiny (8 heads) after 300 positions, one and two sequences: few groups, so split in chunks.
    for batch in [1, 2] {
        let mut s = on(
            &t.device,
            spec(
                "llm",
                &[("model", 0), ("context", 300), ("gen", 3), ("batch", batch)],
            ),
        );
        s.variant = "decode".into();
        s.settings_mut().timeout_s = Some(120.0);
        let (_, r) = run(&mut t.client, "split-attention", s).await;
        assert_ok(&r);
        assert!(r.validation.as_ref().unwrap().passed, "{}", r.message);
        assert!(
            r.config.contains_key("attention_split"),
            "batch {batch}: {:?}",
            r.config
        );
    }
}

#[tokio::test]
async fn decode_replays_one_recorded_pass_whatever_the_tokens_generated() {
    let Some(mut t) = on_backend("vulkan").await else {
        return;
    };
    // tiny (every pass kept, copied out of the last's region) and small; then their prefill.
    for model in [0, 1] {
        let mut recorded = Vec::new();
        for generated in [2, 5] {
            let mut s = on(
                &t.device,
                spec(
                    "llm",
                    &[("model", model), ("gen", generated), ("context", 3)],
                ),
            );
            s.variant = "decode".into();
            s.settings_mut().timeout_s = Some(120.0);
            let (_, r) = run(&mut t.client, "replayed-decode", s).await;
            assert_ok(&r);
            assert!(r.validation.as_ref().unwrap().passed, "{}", r.message);
            let replay = r.config.get("replay").cloned().unwrap_or_default();
            assert!(
                replay.starts_with(&format!("{generated} passes replay")),
                "model {model} gen {generated}: {:?}",
                r.config
            );
            let count = |key: &str| r.config[key].parse::<usize>().unwrap();
            recorded.push((count("recorded_dispatches"), count("dispatches")));
        }
        // The dispatches recorded stay those of a pass (and the cache prefix); the plan's grow.
        assert_eq!(recorded[0].0, recorded[1].0, "model {model}: {recorded:?}");
        assert!(recorded[1].1 > recorded[0].1, "model {model}: {recorded:?}");
        let mut s = on(&t.device, spec("llm", &[("model", model), ("prompt", 6)]));
        s.variant = "prefill".into();
        let (_, r) = run(&mut t.client, "prefill", s).await;
        assert_ok(&r);
        assert!(r.validation.as_ref().unwrap().passed, "{}", r.message);
        assert!(!r.config.contains_key("replay"), "{:?}", r.config);
    }
}

/// A kernel, its variant and its parameters.
type Run<'a> = (&'a str, &'a str, &'a [(&'a str, i64)]);

#[tokio::test]
async fn attention_over_many_positions_and_wide_heads_validates() {
    let Some(mut t) = on_backend("vulkan").await else {
        return;
    };
    // Positions past one group's block of 128 (64 tasks, too many to split: the softmax carried
    // online from block to block), heads read as 4-vectors in lanes (16, 64, 96: 24 invocations a
    // lane, 5 lanes), read element by element in lanes (62: not a multiple of 4) and wider than
    // the group (258, several dimensions an invocation); an unaligned gemv.
    let runs: [Run<'_>; 6] = [
        (
            "attention",
            "decode",
            &[
                ("batch", 2),
                ("tokens", 2),
                ("context", 300),
                ("heads", 4),
                ("kv_heads", 2),
                ("head_dim", 16),
            ],
        ),
        (
            "attention",
            "decode",
            &[
                ("batch", 4),
                ("tokens", 1),
                ("context", 300),
                ("heads", 16),
                ("kv_heads", 4),
                ("head_dim", 62),
            ],
        ),
        (
            "attention",
            "decode",
            &[
                ("batch", 4),
                ("tokens", 1),
                ("context", 300),
                ("heads", 16),
                ("kv_heads", 4),
                ("head_dim", 64),
            ],
        ),
        (
            "attention",
            "prefill",
            &[
                ("batch", 1),
                ("tokens", 5),
                ("context", 200),
                ("heads", 2),
                ("kv_heads", 1),
                ("head_dim", 96),
            ],
        ),
        (
            "attention",
            "prefill",
            &[
                ("batch", 1),
                ("tokens", 3),
                ("context", 130),
                ("heads", 2),
                ("kv_heads", 2),
                ("head_dim", 258),
            ],
        ),
        ("gemv", "default", &[("batch", 6), ("k", 99), ("n", 37)]),
    ];
    for (kernel, variant, params) in runs {
        let mut s = on(&t.device, spec(kernel, params));
        s.variant = variant.into();
        let (_, r) = run(&mut t.client, kernel, s).await;
        assert_ok(&r);
        assert!(
            r.validation.as_ref().unwrap().passed,
            "{kernel} {params:?}: {}",
            r.message
        );
    }
}

/// A prefill's attention runs by tiles of 32 positions for a block of rows
/// (`llm_attention_tile`), and validates: rows a sequence not a multiple of the block, several
/// sequences, positions before the prompt, heads of 16 to 128 (40: four-vectors that do not divide
/// among a row's invocations; 128: blocks of 16 rows where the shared memory does not hold 32, as
/// on lavapipe's 32 KiB), `small`'s prefill; with GPUFLEET_DEBUG_VULKAN_NO_TILE_ATTENTION=1 the
/// same attention runs a group a row, and a decode's always does.
#[tokio::test]
async fn a_prefills_attention_runs_by_tiles_and_validates() {
    let Some(mut t) = on_backend("vulkan").await else {
        return;
    };
    let attention = |batch, tokens, context, heads, kv_heads, head_dim| {
        [
            ("batch", batch),
            ("tokens", tokens),
            ("context", context),
            ("heads", heads),
            ("kv_heads", kv_heads),
            ("head_dim", head_dim),
        ]
    };
    let tiled: [(&str, Vec<(&str, i64)>); 5] = [
        ("attention", attention(2, 45, 20, 6, 2, 64).to_vec()),
        ("attention", attention(1, 70, 0, 4, 4, 128).to_vec()),
        ("attention", attention(3, 33, 5, 4, 1, 40).to_vec()),
        ("attention", attention(1, 16, 100, 8, 2, 16).to_vec()),
        ("llm", vec![("model", 1), ("prompt", 40)]),
    ];
    for (kernel, params) in &tiled {
        let name = format!("tiled-{kernel}");
        let r = validated(&mut t, &name, (kernel, "prefill", "f32"), params, &[]).await;
        let shaders = &r.config["shaders"];
        assert!(
            shaders.contains("llm_attention_tile ×") && !shaders.contains("llm_attention ×"),
            "{params:?}: {shaders}"
        );
    }
    let off = [("GPUFLEET_DEBUG_VULKAN_NO_TILE_ATTENTION", "1")];
    // A variant, its parameters and the worker's environment.
    type Untiled<'a> = (&'a str, &'a [(&'a str, i64)], &'a [(&'a str, &'a str)]);
    let runs: [Untiled<'_>; 2] = [
        ("prefill", &tiled[0].1, &off),
        ("decode", &attention(2, 1, 40, 6, 2, 64), &[]),
    ];
    for (variant, params, env) in runs {
        let name = format!("untiled-{variant}");
        let r = validated(&mut t, &name, ("attention", variant, "f32"), params, env).await;
        let shaders = &r.config["shaders"];
        assert!(
            shaders.contains("llm_attention ×") && !shaders.contains("llm_attention_tile"),
            "{variant} {params:?}: {shaders}"
        );
    }
}
