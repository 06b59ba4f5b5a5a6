//! The transformer kernels through the agent on the cpu backend: `llm` prefill and decode of
//! `tiny` validated step by step with their token figures, the layer kernels, f16 refused with a
//! reason on the cpu, q8_0 and q4_0 weights validated, and the debug switch that perturbs one
//! step's weights caught and named.

mod common;

use common::{assert_ok, client, run, spec, start};
use gpufleet_proto::v1 as pb;

fn llm(variant: &str, params: &[(&str, i64)]) -> pb::RunSpec {
    let mut s = spec("llm", params);
    s.variant = variant.into();
    s.settings_mut().timeout_s = Some(120.0);
    s
}

#[tokio::test(flavor = "multi_thread")]
async fn tiny_prefill_and_decode_are_validated_with_their_token_figures() {
    let agent = start(|_| {}).await;
    let mut c = client(&agent).await;
    // model 0 = tiny; a short prompt and generation after a cached context.
    let params = [
        ("model", 0),
        ("prompt", 24),
        ("gen", 6),
        ("context", 5),
        ("batch", 2),
    ];
    let (_, r) = run(&mut c, "llm-prefill", llm("prefill", &params)).await;
    assert_ok(&r);
    let v = r.validation.as_ref().unwrap();
    assert!(v.passed && v.sampled, "{}", v.message);
    assert!(v.message.contains("whole blocks"), "{}", v.message);
    let m = r.metric.as_ref().unwrap();
    assert_eq!(m.kind, "tokens_per_s");
    assert!(m.value > 0.0);
    assert!(
        r.config.contains_key("time_to_first_token_ms"),
        "{:?}",
        r.config
    );
    assert_eq!(r.config["roofline"], "arithmetic");

    let (_, r) = run(&mut c, "llm-decode", llm("decode", &params)).await;
    assert_ok(&r);
    assert!(r.validation.as_ref().unwrap().passed);
    for key in [
        "token_latency_p50_ms",
        "token_latency_p99_ms",
        "achieved_gbps",
    ] {
        assert!(r.config.contains_key(key), "{key}: {:?}", r.config);
    }
    assert_eq!(r.config["roofline"], "memory bandwidth");
    // 2 sequences × 6 tokens per iteration.
    let median = r.stats.as_ref().unwrap().median_s;
    let tps = r.metric.as_ref().unwrap().value;
    assert!(
        (tps * median - 12.0).abs() < 1e-6,
        "{tps} tok/s at {median} s"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_layer_kernels_run_and_validate() {
    let agent = start(|_| {}).await;
    let mut c = client(&agent).await;
    let heads = [
        ("batch", 2),
        ("tokens", 3),
        ("context", 9),
        ("heads", 4),
        ("kv_heads", 2),
        ("head_dim", 16),
    ];
    for (kernel, variant, params) in [
        ("rope", "default", &heads[..]),
        ("attention", "prefill", &heads[..]),
        ("attention", "decode", &heads[..]),
        ("swiglu", "default", &[("rows", 5), ("ffn", 40)][..]),
        ("gemv", "default", &[("batch", 3), ("k", 70), ("n", 33)][..]),
        (
            "gemv",
            "default",
            &[("batch", 20), ("k", 64), ("n", 48)][..],
        ),
    ] {
        let mut s = spec(kernel, params);
        s.variant = variant.into();
        let (_, r) = run(&mut c, &format!("{kernel}-{variant}"), s).await;
        assert_ok(&r);
        assert!(r.validation.as_ref().unwrap().passed, "{kernel}");
    }
    // The cpu is f32 only: f16 weights are refused, naming the dtype.
    let mut s = spec("gemv", &[("k", 64), ("n", 32)]);
    s.dtype = "f16".into();
    let (_, r) = run(&mut c, "gemv-f16", s).await;
    assert_eq!(r.status(), pb::RunStatus::Unsupported, "{}", r.message);
    assert!(r.message.contains("in f16"), "{}", r.message);
}

#[tokio::test(flavor = "multi_thread")]
async fn quantized_weights_validate_and_a_wrong_scale_is_caught() {
    let agent = start(|_| {}).await;
    let mut c = client(&agent).await;
    for dtype in ["q8_0", "q4_0"] {
        // tiny's prefill and decode, small's decode, and gemv over a few rows and many.
        let runs = [
            llm("prefill", &[("model", 0), ("prompt", 20), ("batch", 2)]),
            llm(
                "decode",
                &[("model", 0), ("gen", 4), ("context", 3), ("batch", 2)],
            ),
            llm("decode", &[("model", 1), ("gen", 2)]),
            spec("gemv", &[("batch", 3), ("k", 96), ("n", 37)]),
            spec("gemv", &[("batch", 17), ("k", 64), ("n", 40)]),
        ];
        for mut s in runs {
            s.dtype = dtype.into();
            // Q4_0 also capped at AVX2, where its dot products are integer ones on the input's
            // digits (quant.rs): the path of CPUs without AVX-512, validated on any x86-64 host.
            // And the rows at a time by the rule (Q8_0 one on AMD, else four) and forced to one
            // and to four (GPUFLEET_CPU_QUANT_ROWS), so AVX-512's two copies are both validated
            // on any host that has them.
            let caps: &[(&str, &str)] = if dtype == "q4_0" {
                &[("auto", "rule"), ("avx2", "rule"), ("auto", "1")]
            } else {
                &[("auto", "rule"), ("auto", "4"), ("auto", "1")]
            };
            for (cap, rows) in caps {
                let mut s = s.clone();
                s.env.insert("GPUFLEET_CPU_ISA".into(), (*cap).into());
                if *rows != "rule" {
                    s.env
                        .insert("GPUFLEET_CPU_QUANT_ROWS".into(), (*rows).into());
                }
                let name = format!("{}-{}-{dtype}-{cap}-rows{rows}", s.kernel, s.variant);
                let (_, r) = run(&mut c, &name, s).await;
                assert_ok(&r);
                let v = r.validation.as_ref().unwrap();
                assert!(v.passed, "{name}: {}", v.message);
                assert_eq!(r.dtype, dtype, "{name}");
                // Forced, the switch is named; else one row for q8_0 on an AMD CPU, by rule.
                let rule = (dtype == "q8_0" && amd_cpu()).then_some("1 (q8_0 on AMD)");
                let forced = format!("{rows} (debug)");
                let expected = if *rows == "rule" {
                    rule
                } else {
                    Some(forced.as_str())
                };
                assert_eq!(
                    r.config.get("quant_rows").map(String::as_str),
                    expected,
                    "{name}"
                );
                #[cfg(target_arch = "x86_64")]
                if *cap == "avx2" && std::arch::is_x86_feature_detected!("avx2") {
                    assert_eq!(
                        r.config.get("isa").map(String::as_str),
                        Some("avx2"),
                        "{name}"
                    );
                }
            }
        }
    }
    // A row that is not whole blocks is refused, naming k.
    let mut s = spec("gemv", &[("k", 70), ("n", 8)]);
    s.dtype = "q4_0".into();
    let refused = c
        .run(pb::RunRequest {
            run_id: "gemv-q4_0-ragged".into(),
            spec: Some(s),
        })
        .await
        .expect_err("a ragged row refused");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(
        refused
            .message()
            .contains("k=70 must be a multiple of 32 in q4_0"),
        "{}",
        refused.message()
    );
    // Weights scaled before packing get scales the reference does not have: caught, named.
    let mut s = llm("decode", &[("model", 0), ("gen", 2)]);
    s.dtype = "q4_0".into();
    s.env.insert(
        "GPUFLEET_DEBUG_PERTURB_LAYER".into(),
        "layers.0.attention.wo".into(),
    );
    let (_, r) = run(&mut c, "llm-q4_0-perturbed", s).await;
    assert_eq!(r.status(), pb::RunStatus::Invalid, "{}", r.message);
    let v = r.validation.unwrap();
    assert!(
        v.message
            .contains("`pass 0: layers.0.attention.wo` (linear"),
        "{}",
        v.message
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_perturbed_step_is_caught_and_named() {
    let agent = start(|_| {}).await;
    let mut c = client(&agent).await;
    let mut s = llm("decode", &[("model", 0), ("gen", 3)]);
    s.env.insert(
        "GPUFLEET_DEBUG_PERTURB_LAYER".into(),
        "layers.3.feed_forward.w_gate_up".into(),
    );
    let (_, r) = run(&mut c, "llm-perturbed", s).await;
    assert_eq!(r.status(), pb::RunStatus::Invalid, "{}", r.message);
    let v = r.validation.unwrap();
    assert!(!v.passed);
    assert!(
        v.message
            .contains("`pass 0: layers.3.feed_forward.w_gate_up` (linear"),
        "{}",
        v.message
    );

    // A middle block is caught whole.
    let mut s = llm("prefill", &[("model", 0), ("prompt", 8)]);
    s.env.insert(
        "GPUFLEET_DEBUG_PERTURB_LAYER".into(),
        "layers.2.attention.wo".into(),
    );
    let (_, r) = run(&mut c, "llm-perturbed-middle", s).await;
    assert_eq!(r.status(), pb::RunStatus::Invalid, "{}", r.message);
    assert!(
        r.validation.unwrap().message.contains("block `layers.2`"),
        "the middle block named"
    );

    // An unknown step is the run's error, naming some that exist.
    let mut s = llm("decode", &[("model", 0), ("gen", 2)]);
    s.env.insert(
        "GPUFLEET_DEBUG_PERTURB_LAYER".into(),
        "layers.9.nope".into(),
    );
    let (_, r) = run(&mut c, "llm-perturbed-unknown", s).await;
    assert_ne!(r.status(), pb::RunStatus::Ok);
    assert!(
        r.message.contains("layers.0.attention_norm"),
        "{}",
        r.message
    );
}

/// Whether this host's CPU is an AMD one, as the CPU backend's rule for Q8_0's rows at a time reads
/// it.
fn amd_cpu() -> bool {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    gpufleet_agent::host::cpu_vendor(&cpuinfo) == "AMD"
}
