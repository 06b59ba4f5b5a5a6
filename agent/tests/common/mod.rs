//! Helpers shared by the agent's integration tests: a real agent on a
//! loopback port with real worker processes, and small RPC wrappers.
#![allow(dead_code)]

use gpufleet_agent::isolation::WorkerCommand;
use gpufleet_agent::{AgentConfig, AgentCore};
use gpufleet_kernels::PartialSettings;
use gpufleet_proto::v1 as pb;
use pb::agent_client::AgentClient;
use std::collections::HashMap;
use tokio_stream::StreamExt;
use tonic::transport::Channel;

pub struct TestAgent {
    pub url: String,
    /// The agent's own cache directory (its workers have it as GPUFLEET_CACHE_DIR).
    pub cache: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

pub async fn start(configure: impl FnOnce(&mut AgentConfig)) -> TestAgent {
    let worker = WorkerCommand {
        program: env!("CARGO_BIN_EXE_gpufleet-agent").into(),
        args: vec!["worker".into()],
        ..Default::default()
    };
    // Each test agent gets its own cache, so cache hits are the test's own.
    let cache = tempfile::tempdir().unwrap();
    let mut worker = worker;
    worker.env.push((
        "GPUFLEET_CACHE_DIR".into(),
        cache.path().display().to_string(),
    ));
    worker
        .env
        .push(("GPUFLEET_TUNE_BUDGET_S".into(), "2".into()));
    let mut config = AgentConfig::new(worker);
    config.enable_debug_kernels = true;
    configure(&mut config);
    let core = AgentCore::start(config).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(gpufleet_agent::serve(
        listener,
        async {
            let _ = rx.await;
        },
        core,
    ));
    TestAgent {
        url,
        cache,
        _stop: tx,
    }
}

pub async fn client(a: &TestAgent) -> AgentClient<Channel> {
    AgentClient::connect(a.url.clone()).await.unwrap()
}

pub fn spec(kernel: &str, params: &[(&str, i64)]) -> pb::RunSpec {
    pb::RunSpec {
        kernel: kernel.into(),
        params: params
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect::<HashMap<_, _>>(),
        device_id: "cpu:0".into(),
        settings: Some(PartialSettings {
            warmup: Some(1),
            min_iterations: Some(3),
            min_seconds: Some(0.01),
            timeout_s: Some(30.0),
            ..PartialSettings::default()
        }),
        seed: 7,
        ..Default::default()
    }
}

/// Runs a spec and returns (progress phases, the one result).
pub async fn run(
    c: &mut AgentClient<Channel>,
    id: &str,
    s: pb::RunSpec,
) -> (Vec<String>, pb::RunResult) {
    let mut stream = c
        .run(pb::RunRequest {
            run_id: id.into(),
            spec: Some(s),
        })
        .await
        .expect("run accepted")
        .into_inner();
    let mut phases = Vec::new();
    let mut results = Vec::new();
    while let Some(ev) = stream.next().await {
        match ev.expect("stream item").event {
            Some(pb::run_event::Event::Progress(p)) => phases.push(p.phase),
            Some(pb::run_event::Event::Result(r)) => results.push(r),
            _ => {}
        }
    }
    assert_eq!(results.len(), 1, "exactly one result");
    (phases, results.pop().unwrap())
}

/// Reads a run's event stream to its end and returns its one result.
pub async fn last_result(events: &mut tonic::Streaming<pb::RunEvent>) -> pb::RunResult {
    let mut last = None;
    while let Some(ev) = events.next().await {
        if let Some(pb::run_event::Event::Result(r)) = ev.expect("stream item").event {
            last = Some(r);
        }
    }
    last.expect("a result")
}

/// Cancels `run_id`; whether the agent found it queued or running.
pub async fn cancel(c: &mut AgentClient<Channel>, run_id: &str) -> bool {
    c.cancel(pb::CancelRequest {
        run_id: run_id.into(),
    })
    .await
    .expect("cancel answered")
    .into_inner()
    .found
}

pub async fn refused(c: &mut AgentClient<Channel>, s: pb::RunSpec) -> tonic::Status {
    match c
        .run(pb::RunRequest {
            run_id: String::new(),
            spec: Some(s),
        })
        .await
    {
        Ok(_) => panic!("expected a refusal"),
        Err(status) => status,
    }
}

/// Asserts that `s` is refused as invalid with `needle` in the message; returns the status.
pub async fn refused_naming(
    c: &mut AgentClient<Channel>,
    s: pb::RunSpec,
    needle: &str,
) -> tonic::Status {
    let st = refused(c, s).await;
    assert_eq!(st.code(), tonic::Code::InvalidArgument, "{needle}: {st:?}");
    assert!(
        st.message().contains(needle),
        "{needle} not in {:?}",
        st.message()
    );
    st
}

/// Whether `GPUFLEET_REQUIRE` (comma-separated) names `backend`: then a
/// missing backend fails the test instead of skipping it.
pub fn required(backend: &str) -> bool {
    std::env::var("GPUFLEET_REQUIRE").is_ok_and(|v| v.split(',').any(|b| b.trim() == backend))
}

/// The agent's Describe answer.
pub async fn describe(c: &mut AgentClient<Channel>) -> pb::AgentInfo {
    c.describe(pb::DescribeRequest {})
        .await
        .expect("describe")
        .into_inner()
}

/// The first device of `backend` and the backend's status, or None (after
/// printing why) when the backend is unavailable or has no device. Fails
/// instead of skipping when `GPUFLEET_REQUIRE` names the backend.
pub async fn backend_device(
    a: &TestAgent,
    backend: &str,
) -> Option<(pb::Device, pb::BackendStatus)> {
    let info = describe(&mut client(a).await).await;
    let status = info
        .backends
        .iter()
        .find(|b| b.name == backend)
        .unwrap_or_else(|| panic!("{backend} backend is compiled in"))
        .clone();
    let device = info.devices.iter().find(|d| d.backend == backend).cloned();
    match device {
        Some(d) if status.available => Some((d, status)),
        _ => {
            assert!(
                !required(backend),
                "GPUFLEET_REQUIRE names {backend} but it is unavailable: {}",
                status.reason
            );
            eprintln!("skipping: {backend} unavailable: {}", status.reason);
            None
        }
    }
}

/// A fresh agent with a client and the first device of a backend.
pub struct OnBackend {
    pub agent: TestAgent,
    pub client: AgentClient<Channel>,
    pub device: pb::Device,
    pub status: pb::BackendStatus,
}

/// Starts an agent and finds the first device of `backend`; None (after
/// printing why, or failing under `GPUFLEET_REQUIRE`) when there is none.
pub async fn on_backend(backend: &str) -> Option<OnBackend> {
    let agent = start(|_| {}).await;
    let (device, status) = backend_device(&agent, backend).await?;
    let client = client(&agent).await;
    Some(OnBackend {
        agent,
        client,
        device,
        status,
    })
}

/// `s` aimed at `device`.
pub fn on(device: &pb::Device, mut s: pb::RunSpec) -> pb::RunSpec {
    s.device_id = device.id.clone();
    s
}

/// Asserts that `r` ended `ok`, with its message otherwise.
pub fn assert_ok(r: &pb::RunResult) {
    assert_eq!(r.status(), pb::RunStatus::Ok, "{}", r.message);
}

/// Asserts that a result's `config` records `key` = `value`.
pub fn assert_config(r: &pb::RunResult, key: &str, value: &str) {
    assert_eq!(
        r.config.get(key).map(String::as_str),
        Some(value),
        "{:?}",
        r.config
    );
}

/// Runs a gemm twice on `dev`: the first run searches the tuning space, the
/// second finds the tuned parameters cached and records them.
pub async fn assert_gemm_tuning_is_searched_then_cached(
    c: &mut AgentClient<Channel>,
    dev: &pb::Device,
) {
    let g = || on(dev, spec("gemm", &[("m", 96), ("n", 80), ("k", 64)]));
    let (_, tuned) = run(c, "t1", g()).await;
    assert_ok(&tuned);
    assert!(
        tuned
            .config
            .get("tuning")
            .is_some_and(|t| t.starts_with("searched")),
        "{:?}",
        tuned.config
    );
    let (_, again) = run(c, "t2", g()).await;
    assert_config(&again, "tuning", "cached");
    // The tuned parameters are part of the recorded configuration.
    assert!(
        again.config.keys().any(|k| k.contains("tile")),
        "{:?}",
        again.config
    );
}

/// Runs a large copy on `dev` compute-only, then with host transfers; returns
/// both results (the second checked `ok`).
pub async fn compute_then_with_transfers(
    c: &mut AgentClient<Channel>,
    dev: &pb::Device,
) -> (pb::RunResult, pb::RunResult) {
    // Minimums over many iterations: the machine may be busy with other tests.
    let mut s = on(dev, spec("copy", &[("n", 1 << 22)]));
    s.settings_mut().min_iterations = Some(20);
    let (_, compute) = run(c, "m1", s.clone()).await;
    s.mode = pb::RunMode::WithTransfers as i32;
    let (_, transfers) = run(c, "m2", s).await;
    assert_ok(&transfers);
    (compute, transfers)
}

/// Asserts that transfers made the copy slower than the kernel alone.
pub fn assert_transfers_take_longer(compute: pb::RunResult, transfers: pb::RunResult) {
    let (cm, tm) = (compute.stats.unwrap().min_s, transfers.stats.unwrap().min_s);
    assert!(
        tm > cm,
        "upload + kernel + readback ({tm}) should take longer than the kernel ({cm})"
    );
}

/// Starts an agent whose workers see `key=value` (a driver setting that
/// hides every driver of `backend`) and returns why `backend` is
/// unavailable, after checking that the cpu backend still serves.
pub async fn unavailable_with(backend: &str, key: &str, value: String) -> String {
    let key = key.to_string();
    let a = start(move |c| c.worker.env.push((key, value))).await;
    let info = describe(&mut client(&a).await).await;
    let status = info.backends.iter().find(|b| b.name == backend).unwrap();
    assert!(!status.available);
    assert!(
        info.backends.iter().any(|b| b.name == "cpu" && b.available),
        "the other backends still serve"
    );
    status.reason.clone()
}

/// Runs the same small vec_add twice on `dev` (a cache miss, then a hit).
pub async fn vec_add_twice(
    c: &mut AgentClient<Channel>,
    dev: &pb::Device,
) -> (pb::RunResult, pb::RunResult) {
    let (_, first) = run(c, "c1", on(dev, spec("vec_add", &[("n", 4096)]))).await;
    let (_, second) = run(c, "c2", on(dev, spec("vec_add", &[("n", 4096)]))).await;
    (first, second)
}

/// Runs softmax, log_softmax and layernorm on two rows of 70001 columns (too long for registers,
/// too few rows to fill any device): the planner splits each row over several groups with ragged
/// chunks, and the agent validates the output against the f64 reference.
pub async fn assert_few_wide_rows_are_split(t: &mut OnBackend) {
    for kernel in ["softmax", "log_softmax", "layernorm"] {
        let s = on(&t.device, spec(kernel, &[("rows", 2), ("cols", 70_001)]));
        let (_, r) = run(&mut t.client, &format!("split-{kernel}"), s).await;
        assert_ok(&r);
        assert!(
            r.config.contains_key("groups_per_row"),
            "{kernel} was not split: {:?}",
            r.config
        );
        assert!(r.validation.as_ref().is_some_and(|v| v.passed), "{kernel}");
    }
}
