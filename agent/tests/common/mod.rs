//! Helpers shared by the agent's integration tests: a real agent on a
//! loopback port with real worker processes, and small RPC wrappers.
#![allow(dead_code)]

use gpufleet_agent::isolation::WorkerCommand;
use gpufleet_agent::{AgentConfig, AgentCore};
use gpufleet_proto::v1 as pb;
use pb::agent_client::AgentClient;
use std::collections::HashMap;
use tokio_stream::StreamExt;
use tonic::transport::Channel;

pub struct TestAgent {
    pub url: String,
    _cache: tempfile::TempDir,
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
        _cache: cache,
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
        warmup: 1,
        min_iterations: 3,
        min_seconds: 0.01,
        timeout_s: 30.0,
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

/// Whether `GPUFLEET_REQUIRE` (comma-separated) names `backend`: then a
/// missing backend fails the test instead of skipping it.
pub fn required(backend: &str) -> bool {
    std::env::var("GPUFLEET_REQUIRE").is_ok_and(|v| v.split(',').any(|b| b.trim() == backend))
}
