//! Campaign execution against in-memory agent links (no sockets): job states, retries up to the
//! bound, an agent lost mid-campaign, a result stored once when its run is retried.

use super::execute::{Executor, execute_campaign};
use super::job::{JobFailure, JobOutcome};
use super::owner::owner_id;
use super::plan::PlannedJob;
use super::progress::Reporter;
use super::request::{CampaignRequest, RetryPolicy, StoredRequest};
use super::run::{CampaignOutcome, run_campaign_with};
use super::selection::Selection;
use crate::db::Db;
use crate::link::{AgentLink, Connect, LinkError, RunEvents};
use crate::store::{AgentRow, CampaignState, DeviceRecord, JobState, NewJob, ResultFilter};
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use gpufleet_kernels::{Dtype, Mode, PartialSettings, SuiteRun};
use gpufleet_proto::v1 as pb;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the fake agent does with one run request.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Step {
    /// Progress, a power sample, then an ok result.
    Ok,
    /// The connection cannot be made.
    Unreachable,
    /// The agent's queue is full.
    Busy,
    /// The agent refuses the spec.
    Refused,
    /// A progress event, then the connection breaks.
    BreakMidRun,
    /// The link panics (a bug in the coordinator's side of it).
    Panic,
}

/// An agent in memory: a scripted answer per run (then `Ok` for ever), and every run id it saw.
struct FakeAgent {
    name: String,
    script: Mutex<VecDeque<Step>>,
    seen: Mutex<Vec<String>>,
    /// Cannot be reached even to describe itself (when the campaign is planned).
    down: bool,
}

impl FakeAgent {
    fn new(name: &str, script: &[Step]) -> Arc<FakeAgent> {
        Arc::new(FakeAgent {
            name: name.into(),
            script: Mutex::new(script.iter().copied().collect()),
            seen: Mutex::new(Vec::new()),
            down: false,
        })
    }

    fn down(name: &str) -> Arc<FakeAgent> {
        Arc::new(FakeAgent {
            down: true,
            ..Arc::into_inner(FakeAgent::new(name, &[])).unwrap()
        })
    }

    fn runs(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

fn info() -> pb::AgentInfo {
    pb::AgentInfo {
        devices: vec![pb::Device {
            id: "cpu:0".into(),
            backend: "cpu".into(),
            name: "fake cpu".into(),
            ..Default::default()
        }],
        backends: vec![pb::BackendStatus {
            name: "cpu".into(),
            available: true,
            kernels: vec![pb::KernelSupport {
                kernel: "gemm".into(),
                variants: vec!["naive".into()],
                dtypes: vec!["f32".into()],
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn ok_result(req: &pb::RunRequest) -> pb::RunResult {
    let spec = req.spec.clone().unwrap_or_default();
    pb::RunResult {
        run_id: req.run_id.clone(),
        status: pb::RunStatus::Ok as i32,
        device_id: spec.device_id.clone(),
        backend: "cpu".into(),
        variant: spec.variant.clone(),
        params: spec.params.clone(),
        dtype: spec.dtype.clone(),
        spec: Some(spec),
        ..Default::default()
    }
}

fn event(e: pb::run_event::Event) -> Result<pb::RunEvent, LinkError> {
    Ok(pb::RunEvent { event: Some(e) })
}

impl AgentLink for FakeAgent {
    fn name(&self) -> &str {
        &self.name
    }

    fn describe(&self) -> BoxFuture<'_, Result<pb::AgentInfo, LinkError>> {
        async move {
            if self.down {
                return Err(LinkError::Unreachable(format!("{} is down", self.name)));
            }
            Ok(info())
        }
        .boxed()
    }

    fn run(&self, request: pb::RunRequest) -> BoxFuture<'_, Result<RunEvents, LinkError>> {
        async move {
            self.seen.lock().unwrap().push(request.run_id.clone());
            let step = self.script.lock().unwrap().pop_front().unwrap_or(Step::Ok);
            let progress = event(pb::run_event::Event::Progress(pb::Progress {
                phase: "running".into(),
                ..Default::default()
            }));
            let events: Vec<Result<pb::RunEvent, LinkError>> = match step {
                Step::Ok => vec![
                    progress,
                    event(pb::run_event::Event::Power(pb::PowerSample::default())),
                    event(pb::run_event::Event::Result(ok_result(&request))),
                ],
                Step::BreakMidRun => vec![
                    progress,
                    Err(LinkError::Unreachable(format!("{} broke", self.name))),
                ],
                Step::Unreachable => {
                    return Err(LinkError::Unreachable(format!("{} is down", self.name)));
                }
                Step::Busy => return Err(LinkError::Busy(format!("{} is busy", self.name))),
                Step::Panic => panic!("the link to {} panicked", self.name),
                Step::Refused => return Err(LinkError::Refused(format!("{} refused", self.name))),
            };
            Ok(futures::stream::iter(events).boxed())
        }
        .boxed()
    }
}

/// Collects the notes, for the retry messages.
#[derive(Default)]
struct Notes(Mutex<Vec<String>>);

impl Reporter for Notes {
    fn planned(&self, _: i64, _: usize) {}
    fn started(&self, _: &PlannedJob) {}
    fn progress(&self, _: &PlannedJob, _: &str, _: &str) {}
    fn finished(&self, _: &PlannedJob, _: &pb::RunResult) {}
    fn note(&self, message: &str) {
        self.0.lock().unwrap().push(message.to_string());
    }
}

/// A database with the fake agents registered, and an executor that reaches them in memory.
struct Fleet {
    _dir: tempfile::TempDir,
    db: Db,
    agents: Vec<AgentRow>,
    ex: Executor,
    notes: Arc<Notes>,
}

fn fleet(fakes: &[Arc<FakeAgent>]) -> Fleet {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("fleet.db")).unwrap();
    let agents: Vec<AgentRow> = fakes
        .iter()
        .map(|f| {
            db.with(|s| s.add_agent(&f.name, "http://127.0.0.1:1", None))
                .unwrap()
        })
        .collect();
    let by_name: BTreeMap<String, Arc<FakeAgent>> =
        fakes.iter().map(|f| (f.name.clone(), f.clone())).collect();
    let connect: Connect =
        Arc::new(move |a: &AgentRow| by_name[&a.name].clone() as Arc<dyn AgentLink>);
    let notes = Arc::new(Notes::default());
    let ex = Executor {
        owner: owner_id(),
        retry: RetryPolicy {
            retries: 2,
            backoff: Duration::from_millis(1),
            ..RetryPolicy::default()
        },
        max_attempts: 3,
        reporter: notes.clone(),
        connect,
    };
    Fleet {
        _dir: dir,
        db,
        agents,
        ex,
        notes,
    }
}

/// `n` gemm runs of different sizes: `n` jobs per agent, run in order on its one device.
fn request(f: &Fleet, n: usize) -> CampaignRequest {
    let runs = (0..n)
        .map(|i| SuiteRun {
            kernel: "gemm".into(),
            variants: Some(vec!["naive".into()]),
            params: [("m", 16), ("n", 16), ("k", 16 + 16 * i as i64)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            dtype: Dtype::F32,
            mode: Mode::ComputeOnly,
            settings: PartialSettings {
                warmup: Some(0),
                min_iterations: Some(1),
                min_seconds: Some(0.0),
                max_iterations: Some(1),
                timeout_s: Some(10.0),
                target_ci_pct: Some(0.0),
                max_seconds: Some(1.0),
            },
            env: BTreeMap::new(),
        })
        .collect();
    CampaignRequest {
        suite: "test".into(),
        description: "fake agents".into(),
        runs,
        agents: f.agents.clone(),
        selection: Selection::default(),
        retry: f.ex.retry,
    }
}

fn job_states(f: &Fleet, campaign_id: i64) -> Vec<(String, JobState)> {
    let mut v: Vec<_> =
        f.db.with(|s| s.jobs(campaign_id))
            .unwrap()
            .into_iter()
            .map(|j| (j.agent, j.state))
            .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn campaign_state(f: &Fleet, id: i64) -> CampaignState {
    f.db.with(|s| s.campaign(id)).unwrap().unwrap().state
}

fn stored(f: &Fleet, id: i64) -> usize {
    let filter = ResultFilter {
        campaign_id: Some(id),
        ..Default::default()
    };
    f.db.with(|s| s.results(&filter)).unwrap().len()
}

fn failures(outcomes: &[JobOutcome]) -> Vec<Option<JobFailure>> {
    outcomes.iter().map(|o| o.failure).collect()
}

#[tokio::test]
async fn every_job_done_and_the_campaign_done() {
    let a = FakeAgent::new("a", &[]);
    let f = fleet(std::slice::from_ref(&a));
    let out = run_campaign_with(&f.db, request(&f, 3), &f.ex)
        .await
        .unwrap();
    assert_eq!(out.results.len(), 3);
    assert!(out.results.iter().all(|r| r.status() == pb::RunStatus::Ok));
    assert_eq!(
        job_states(&f, out.campaign_id),
        vec![("a".into(), JobState::Done); 3]
    );
    assert_eq!(campaign_state(&f, out.campaign_id), CampaignState::Done);
    assert_eq!(stored(&f, out.campaign_id), 3);
    // The stored request plans the same campaign again.
    let spec =
        f.db.with(|s| s.campaign(out.campaign_id))
            .unwrap()
            .unwrap()
            .spec;
    let again = StoredRequest::from_json(&spec).unwrap();
    assert_eq!(again, StoredRequest::of(&request(&f, 3)));
}

#[tokio::test]
async fn an_unreachable_agent_is_retried_up_to_the_bound_then_fails_the_campaign() {
    // Two failures: within the two retries, the job succeeds on the third attempt.
    let a = FakeAgent::new("a", &[Step::Unreachable, Step::Busy]);
    let f = fleet(std::slice::from_ref(&a));
    let out = run_campaign_with(&f.db, request(&f, 1), &f.ex)
        .await
        .unwrap();
    assert_eq!(out.results[0].status(), pb::RunStatus::Ok);
    assert_eq!(a.runs().len(), 3);
    let notes = f.notes.0.lock().unwrap().clone();
    assert!(notes.iter().any(|n| n.contains("retry 1/2")), "{notes:?}");
    assert!(notes.iter().any(|n| n.contains("retry 2/2")), "{notes:?}");
    assert_eq!(campaign_state(&f, out.campaign_id), CampaignState::Done);

    // Three failures: one more than the retries allow.
    let b = FakeAgent::new("b", &[Step::Unreachable; 3]);
    let f = fleet(std::slice::from_ref(&b));
    let out = run_campaign_with(&f.db, request(&f, 2), &f.ex)
        .await
        .unwrap();
    assert_eq!(
        b.runs().len(),
        3,
        "the second job fails fast without a call"
    );
    let mut messages: Vec<&str> = out.results.iter().map(|r| r.message.as_str()).collect();
    messages.sort();
    assert_eq!(
        messages,
        vec![
            "agent unreachable: b is down",
            "agent unreachable: b was lost earlier in this campaign"
        ]
    );
    assert!(
        out.results
            .iter()
            .all(|r| r.status() == pb::RunStatus::Unreachable)
    );
    assert_eq!(
        job_states(&f, out.campaign_id),
        vec![("b".into(), JobState::Failed); 2]
    );
    assert_eq!(campaign_state(&f, out.campaign_id), CampaignState::Failed);
    assert_eq!(stored(&f, out.campaign_id), 2);
}

#[tokio::test]
async fn busy_and_refused_are_results_that_do_not_fail_the_campaign() {
    let a = FakeAgent::new("a", &[Step::Refused, Step::Busy, Step::Busy, Step::Busy]);
    let f = fleet(std::slice::from_ref(&a));
    let id = run_campaign_with(&f.db, request(&f, 2), &f.ex)
        .await
        .unwrap()
        .campaign_id;
    let outcomes = execute_campaign(&f.db, id, &f.ex).await.unwrap();
    assert!(outcomes.is_empty(), "nothing left to run");
    let rows = f.db.with(|s| {
        s.results(&ResultFilter {
            campaign_id: Some(id),
            ..Default::default()
        })
    });
    let mut messages: Vec<String> = rows
        .unwrap()
        .into_iter()
        .map(|r| r.record.message)
        .collect();
    messages.sort();
    assert_eq!(messages, vec!["a is busy", "a refused"]);
    assert_eq!(a.runs().len(), 4, "refused: no retry; busy: two retries");
    assert_eq!(job_states(&f, id), vec![("a".into(), JobState::Done); 2]);
    assert_eq!(campaign_state(&f, id), CampaignState::Done);
}

#[tokio::test]
async fn an_agent_lost_mid_campaign_fails_only_its_remaining_jobs() {
    let a = FakeAgent::new(
        "a",
        &[
            Step::Ok,
            Step::Unreachable,
            Step::Unreachable,
            Step::Unreachable,
        ],
    );
    let b = FakeAgent::new("b", &[]);
    let f = fleet(&[a.clone(), b.clone()]);
    let id = run_campaign_with(&f.db, request(&f, 3), &f.ex)
        .await
        .unwrap()
        .campaign_id;
    let states = job_states(&f, id);
    let of = |agent: &str, state: JobState| {
        states
            .iter()
            .filter(|(a, s)| a == agent && *s == state)
            .count()
    };
    assert_eq!(of("a", JobState::Done), 1);
    assert_eq!(of("a", JobState::Failed), 2);
    assert_eq!(of("b", JobState::Done), 3);
    assert_eq!(
        a.runs().len(),
        4,
        "one ok, then one attempt and two retries"
    );
    assert_eq!(b.runs().len(), 3);
    assert_eq!(campaign_state(&f, id), CampaignState::Failed);
    assert_eq!(stored(&f, id), 6);
}

#[tokio::test]
async fn a_run_retried_after_a_broken_stream_is_stored_once() {
    let a = FakeAgent::new("a", &[Step::BreakMidRun]);
    let f = fleet(std::slice::from_ref(&a));
    let out = run_campaign_with(&f.db, request(&f, 1), &f.ex)
        .await
        .unwrap();
    let runs = a.runs();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0], runs[1], "a retry keeps the run id");
    assert_eq!(out.results[0].run_id, runs[0]);
    assert_eq!(stored(&f, out.campaign_id), 1);
    // Executing the campaign again runs and stores nothing more.
    let again = execute_campaign(&f.db, out.campaign_id, &f.ex)
        .await
        .unwrap();
    assert_eq!(failures(&again), Vec::<Option<JobFailure>>::new());
    assert_eq!(stored(&f, out.campaign_id), 1);
    assert_eq!(a.runs().len(), 2);
}

/// A worker that panics loses its attempt, not the campaign: its job is interrupted, requeued
/// and run again (it was left `running` for ever, its lease renewed by the living process), and
/// a job whose every attempt panics fails once the attempts are used up.
#[tokio::test]
async fn a_panicking_worker_costs_an_attempt_not_the_campaign() {
    async fn within(f: &Fleet, jobs: usize) -> CampaignOutcome {
        let run = run_campaign_with(&f.db, request(f, jobs), &f.ex);
        tokio::time::timeout(Duration::from_secs(60), run)
            .await
            .expect("the campaign ends")
            .unwrap()
    }
    let a = FakeAgent::new("a", &[Step::Panic]);
    let f = fleet(std::slice::from_ref(&a));
    let out = within(&f, 2).await;
    assert!(out.results.iter().all(|r| r.status() == pb::RunStatus::Ok));
    assert_eq!(
        job_states(&f, out.campaign_id),
        vec![("a".into(), JobState::Done); 2]
    );
    assert_eq!(campaign_state(&f, out.campaign_id), CampaignState::Done);
    assert_eq!(stored(&f, out.campaign_id), 2, "one result per job");
    let notes = f.notes.0.lock().unwrap().clone();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("worker for this device failed: the link to a panicked")),
        "{notes:?}"
    );

    let b = FakeAgent::new("b", &[Step::Panic; 10]);
    let f = fleet(std::slice::from_ref(&b));
    let out = within(&f, 1).await;
    assert_eq!(b.runs().len(), 3, "max_attempts runs, each on a new run id");
    assert_eq!(
        job_states(&f, out.campaign_id),
        vec![("b".into(), JobState::Failed)]
    );
    // As for any job whose attempts ran out: the job fails, the campaign ends `done`.
    assert_eq!(campaign_state(&f, out.campaign_id), CampaignState::Done);
    let message = &out.results[0].message;
    assert!(
        message.contains("interrupted 3 times") && message.contains("the link to b panicked"),
        "{message}"
    );
}

/// A campaign of the first fake agent with one queued job per `(spec_json, device info_json)`.
fn stored_jobs(f: &Fleet, jobs: &[(&str, &str)]) -> i64 {
    let agent_id = f.agents[0].id;
    f.db.with(|s| -> Result<i64, crate::store::StoreError> {
        let id = s.create_campaign("test", "stored by hand", "{}")?;
        for (i, (spec, info)) in jobs.iter().enumerate() {
            let device = DeviceRecord {
                device_id: format!("cpu:{i}"),
                backend: "cpu".into(),
                vendor: String::new(),
                name: String::new(),
                arch: String::new(),
                pci_bus_id: String::new(),
                info_json: info.to_string(),
            };
            let device_row_id = Some(s.upsert_device(agent_id, &device)?);
            s.add_job(&NewJob {
                campaign_id: id,
                agent_id,
                device_row_id,
                spec_key: format!("gemm/naive/k=16,m=16,n=16/f32/compute_only@{i}"),
                spec_json: spec.to_string(),
                run_id: format!("run-{i}"),
            })?;
        }
        Ok(id)
    })
    .unwrap()
}

#[tokio::test]
async fn a_stored_spec_or_device_that_does_not_parse_fails_its_job_naming_the_job_and_field() {
    let a = FakeAgent::new("a", &[]);
    let f = fleet(std::slice::from_ref(&a));
    let good_device = r#"{"id": "cpu:0", "backend": "cpu"}"#;
    let id = stored_jobs(
        &f,
        &[
            (
                r#"{"kernel": "gemm", "min_seconds": "half a second"}"#,
                good_device,
            ),
            (
                r#"{"kernel": "gemm", "device_id": "cpu:1"}"#,
                r#"{"id": 7}"#,
            ),
        ],
    );
    let mut outcomes = execute_campaign(&f.db, id, &f.ex).await.unwrap();
    outcomes.sort_by(|a, b| a.result.run_id.cmp(&b.result.run_id));
    assert_eq!(
        failures(&outcomes),
        vec![Some(JobFailure::Unreadable), Some(JobFailure::Unreadable)]
    );
    assert!(a.runs().is_empty(), "neither job ran as something else");
    let job_ids: Vec<i64> =
        f.db.with(|s| s.jobs(id))
            .unwrap()
            .iter()
            .map(|j| j.id)
            .collect();
    let spec = &outcomes[0].result.message;
    assert!(
        spec.starts_with(&format!("job {} (gemm/", job_ids[0]))
            && spec.contains("its stored spec does not parse: field `min_seconds`: invalid type"),
        "{spec}"
    );
    let device = &outcomes[1].result.message;
    assert!(
        device.starts_with(&format!("job {} (gemm/", job_ids[1]))
            && device.contains("the stored description of device cpu:1 does not parse: field `id`"),
        "{device}"
    );
    assert_eq!(outcomes[0].result.status(), pb::RunStatus::Error);
    assert_eq!(job_states(&f, id), vec![("a".into(), JobState::Failed); 2]);
    // Each failure is a stored result of the campaign, saying why.
    assert_eq!(stored(&f, id), 2);
}

#[tokio::test]
async fn an_unreachable_agents_stored_description_that_does_not_parse_is_named() {
    let up = FakeAgent::new("a", &[]);
    let down = FakeAgent::down("b");
    let f = fleet(&[up, down]);
    let b = f.agents[1].id;
    f.db.with(|s| s.set_agent_info(b, r#"{"devices": 5}"#))
        .unwrap();
    let out = run_campaign_with(&f.db, request(&f, 1), &f.ex)
        .await
        .unwrap();
    let rows = f.db.with(|s| {
        s.results(&ResultFilter {
            campaign_id: Some(out.campaign_id),
            ..Default::default()
        })
    });
    let unreachable: Vec<String> = rows
        .unwrap()
        .into_iter()
        .filter(|r| r.record.status == "unreachable")
        .map(|r| r.record.message)
        .collect();
    assert_eq!(unreachable.len(), 1, "{unreachable:?}");
    assert!(
        unreachable[0].contains(
            "(its stored description does not parse: field `devices`: invalid type: integer `5`"
        ) && unreachable[0].ends_with(", so its runs are unknown)"),
        "{}",
        unreachable[0]
    );
}
