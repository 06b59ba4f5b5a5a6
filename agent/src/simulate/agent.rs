//! One simulated agent: the [`RunCore`] a dial-in link serves, with one device that runs one run
//! at a time, answers each with a draw from its [`Profile`] after `run_s`, and cancels on request.
//! It holds a few hundred bytes; a run holds its request until it ends.

use super::answer::{self, SimRun};
use super::device;
use super::draw::Profile;
use crate::backend::DeviceInfo;
use crate::dial::run_core::{PowerFeed, RunCore};
use crate::error::AgentError;
use crate::isolation::{monotonic_ns, unix_now_s};
use crate::run::lifecycle::run_id_chars_ok;
use gpufleet_kernels::{Problem, quote};
use gpufleet_proto::v1 as pb;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, mpsc};

/// How many events of a run may wait for the link (a run sends three).
const EVENT_BUFFER: usize = 4;

/// A simulated agent.
pub struct SimAgent {
    name: String,
    /// Its device (shared by every agent of the simulation).
    device: Arc<DeviceInfo>,
    profile: Profile,
    /// The PCIe link its device reports (`gen3 x16` unless `--pcie` narrowed it).
    link: String,
    /// How long a run takes once the device is free.
    run_s: Duration,
    /// Runs drawn so far: the number of the next run's stream.
    runs: AtomicU64,
    /// Held by the run on the device.
    busy: tokio::sync::Mutex<()>,
    /// Runs queued or running, with what cancels each.
    active: Mutex<HashMap<String, Arc<Notify>>>,
}

fn invalid(field: &'static str, message: String) -> AgentError {
    AgentError::InvalidArgument { field, message }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn progress(phase: &str, message: &str) -> pb::RunEvent {
    pb::RunEvent {
        event: Some(pb::run_event::Event::Progress(pb::Progress {
            phase: phase.to_string(),
            message: message.to_string(),
            iterations_done: 0,
        })),
    }
}

impl SimAgent {
    pub fn new(
        name: String,
        device: Arc<DeviceInfo>,
        profile: Profile,
        link: String,
        run_s: Duration,
    ) -> SimAgent {
        SimAgent {
            name,
            device,
            profile,
            link,
            run_s,
            runs: AtomicU64::new(0),
            busy: tokio::sync::Mutex::new(()),
            active: Mutex::new(HashMap::new()),
        }
    }

    /// The platform facts in its description and its results' fingerprints.
    fn platform(&self) -> BTreeMap<String, String> {
        device::platform(&self.link)
    }

    /// A result of `run` with no measurement: `status` and why.
    fn ended(&self, run: &SimRun, status: pb::RunStatus, message: String) -> pb::RunResult {
        answer::ended(run, (&self.device, &self.platform()), status, message)
    }

    /// Checks a request as the agent's planner does (run id, device, kernel and parameters,
    /// environment, settings, device memory).
    fn admit(&self, req: pb::RunRequest) -> Result<SimRun, AgentError> {
        let spec = req
            .spec
            .ok_or_else(|| invalid("spec", "is required".into()))?;
        let run_id = if req.run_id.is_empty() {
            format!("{}-run-{}", self.name, monotonic_ns())
        } else if run_id_chars_ok(&req.run_id) {
            req.run_id
        } else {
            return Err(invalid(
                "run_id",
                format!("{} is not a usable run id", quote(&req.run_id)),
            ));
        };
        if spec.device_id != self.device.id {
            return Err(invalid(
                "device_id",
                format!(
                    "unknown device {} (devices: {})",
                    quote(&spec.device_id),
                    self.device.id
                ),
            ));
        }
        let params = spec.params.iter().map(|(k, v)| (k.clone(), *v)).collect();
        let problem = Problem::new(&spec.kernel, &spec.variant, &params, &spec.dtype, false)?;
        for (k, v) in &spec.env {
            crate::env::check_override(k, v)?;
        }
        let settings = spec
            .given_settings()
            .resolve()
            .map_err(|e| invalid(e.field, e.message))?;
        crate::run::plan::fits_device(&problem, &self.device)?;
        let supported = crate::backend::supports(
            &device::support(),
            problem.kernel.name,
            &problem.variant,
            problem.dtype.name(),
        );
        Ok(SimRun {
            run_id,
            spec,
            problem,
            settings,
            supported,
        })
    }

    /// The admitted run, from waiting for the device to its result. Cancelled (or its receiver
    /// gone) while queued or running, it ends `cancelled`.
    async fn execute(
        self: Arc<Self>,
        run: SimRun,
        cancel: Arc<Notify>,
        tx: mpsc::Sender<pb::RunEvent>,
    ) {
        let result = if run.supported {
            self.measure(&run, &cancel, &tx).await
        } else {
            self.ended(
                &run,
                pb::RunStatus::Unsupported,
                format!(
                    "a simulated agent answers {} (default variants, f32) only",
                    device::KERNELS.join(", ")
                ),
            )
        };
        lock(&self.active).remove(&run.run_id);
        let _ = tx
            .send(pb::RunEvent {
                event: Some(pb::run_event::Event::Result(result)),
            })
            .await;
    }

    async fn measure(
        &self,
        run: &SimRun,
        cancel: &Notify,
        tx: &mpsc::Sender<pb::RunEvent>,
    ) -> pb::RunResult {
        let cancelled = |when: &str| {
            self.ended(
                run,
                pb::RunStatus::Cancelled,
                format!("cancelled while {when}"),
            )
        };
        let _ = tx.send(progress("queued", &self.device.id)).await;
        let _device = tokio::select! {
            held = self.busy.lock() => held,
            _ = cancel.notified() => return cancelled("queued"),
            _ = tx.closed() => return cancelled("queued"),
        };
        let _ = tx.send(progress("running", "simulated")).await;
        let (started, begin) = (unix_now_s(), monotonic_ns());
        tokio::select! {
            _ = tokio::time::sleep(self.run_s) => {}
            _ = cancel.notified() => return cancelled("running"),
            _ = tx.closed() => return cancelled("running"),
        }
        let number = self.runs.fetch_add(1, Ordering::Relaxed);
        let times = self.profile.times(&run.problem, number, run.iterations());
        answer::ok(
            run,
            (&self.device, &self.platform()),
            times,
            started,
            (begin, monotonic_ns()),
        )
    }
}

impl RunCore for SimAgent {
    fn describe(&self) -> pb::AgentInfo {
        device::agent_info(&self.name, &self.link, &self.device)
    }

    fn submit(
        self: Arc<Self>,
        req: pb::RunRequest,
    ) -> Result<mpsc::Receiver<pb::RunEvent>, AgentError> {
        let run = self.admit(req)?;
        let cancel = Arc::new(Notify::new());
        {
            let mut active = lock(&self.active);
            if active.contains_key(&run.run_id) {
                return Err(AgentError::DuplicateRun { run_id: run.run_id });
            }
            if active.len() > device::QUEUE_CAPACITY {
                return Err(AgentError::QueueFull {
                    device: self.device.id.clone(),
                    capacity: device::QUEUE_CAPACITY,
                });
            }
            active.insert(run.run_id.clone(), cancel.clone());
        }
        let (tx, rx) = mpsc::channel(EVENT_BUFFER);
        tokio::spawn(self.execute(run, cancel, tx));
        Ok(rx)
    }

    fn cancel(&self, run_id: &str) -> bool {
        match lock(&self.active).get(run_id) {
            Some(cancel) => {
                // A permit is kept when the run is not waiting yet, so a cancel is never lost.
                cancel.notify_one();
                true
            }
            None => false,
        }
    }

    fn power_feed(self: Arc<Self>, _req: &pb::PowerRequest) -> Result<PowerFeed, AgentError> {
        Err(AgentError::NoPowerSources)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(run_s: f64) -> Arc<SimAgent> {
        Arc::new(SimAgent::new(
            "sim-0000".into(),
            Arc::new(device::device(&device::Model::default())),
            Profile::new(1, 0, 0.01, 0.0),
            device::MAX_LINK.into(),
            Duration::from_secs_f64(run_s),
        ))
    }

    fn request(id: &str, kernel: &str) -> pb::RunRequest {
        pb::RunRequest {
            run_id: id.into(),
            spec: Some(pb::RunSpec {
                kernel: kernel.into(),
                device_id: "cpu:simulated".into(),
                ..Default::default()
            }),
        }
    }

    async fn result(mut rx: mpsc::Receiver<pb::RunEvent>) -> pb::RunResult {
        while let Some(ev) = rx.recv().await {
            if let Some(pb::run_event::Event::Result(r)) = ev.event {
                return r;
            }
        }
        panic!("no result")
    }

    #[tokio::test]
    async fn runs_are_answered_refused_or_cancelled_as_on_a_real_agent() {
        let a = agent(0.0);
        let r = result(a.clone().submit(request("r1", "copy")).unwrap()).await;
        assert_eq!(r.status(), pb::RunStatus::Ok, "{}", r.message);
        assert_eq!(r.run_id, "r1");
        assert_eq!(r.times_s.len(), answer::MIN_ITERATIONS as usize);
        let r = result(a.clone().submit(request("r2", "triad")).unwrap()).await;
        assert_eq!(r.status(), pb::RunStatus::Unsupported);
        assert!(r.message.contains("noop, copy"), "{}", r.message);
        let mut bad = request("r3", "copy");
        bad.spec.as_mut().unwrap().device_id = "cpu:0".into();
        let e = a.clone().submit(bad).unwrap_err().to_string();
        assert!(
            e.contains("device_id") && e.contains("cpu:simulated"),
            "{e}"
        );
        let e = a.clone().submit(request("r4", "nope")).unwrap_err();
        assert!(matches!(e, AgentError::Spec { .. }), "{e}");
        assert!(matches!(
            a.clone().power_feed(&pb::PowerRequest::default()),
            Err(AgentError::NoPowerSources)
        ));
        assert!(
            a.describe().devices[0]
                .features
                .contains(&"simulated".to_string())
        );
    }

    #[tokio::test]
    async fn a_cancel_ends_a_running_or_queued_run_and_a_duplicate_is_refused() {
        let a = agent(60.0);
        let running = a.clone().submit(request("long", "gemm")).unwrap();
        let queued = a.clone().submit(request("next", "gemm")).unwrap();
        assert!(matches!(
            a.clone().submit(request("long", "gemm")),
            Err(AgentError::DuplicateRun { .. })
        ));
        assert!(a.cancel("next") && a.cancel("long"));
        assert!(!a.cancel("unknown"));
        for rx in [running, queued] {
            let r = result(rx).await;
            assert_eq!(r.status(), pb::RunStatus::Cancelled);
            assert!(r.message.starts_with("cancelled while"), "{}", r.message);
        }
        assert!(!a.cancel("long"), "an ended run is forgotten");
    }
}
