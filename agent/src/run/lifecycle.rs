//! A run from request to its one RunResult: plan, admit to the device's
//! queue, wait for the device, check the host's memory again (another run
//! may have taken it meanwhile), run the worker with a watchdog and a memory
//! limit, forward its progress, cut the power trace to the kernel window,
//! send the result. If the receiver of the events goes away mid-run the run
//! is cancelled: nobody would receive its result.

use super::AgentCore;
use super::counters;
use super::plan::{Plan, plan};
use super::queue::{Ticket, queue_key};
use super::result::{bare_result, finish};
use crate::error::AgentError;
use crate::host::memory::HostMemory;
use crate::isolation::{monotonic_ns, parent, unix_now_s};
use crate::power::run_energy::{Window, energy, wait_for_sample_after};
use gpufleet_kernels::quote;
use gpufleet_proto::v1 as pb;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// How many events of a run may wait for a slow receiver.
const EVENT_BUFFER: usize = 64;

fn progress_event(phase: &str, message: String, iterations: u32) -> pb::RunEvent {
    pb::RunEvent {
        event: Some(pb::run_event::Event::Progress(pb::Progress {
            phase: phase.to_string(),
            message,
            iterations_done: iterations,
        })),
    }
}

fn result_event(r: pb::RunResult) -> pb::RunEvent {
    counters::record_run(r.status());
    pb::RunEvent {
        event: Some(pb::run_event::Event::Result(r)),
    }
}

/// Longest run id a client may choose (a UUID is 36 characters).
pub const MAX_RUN_ID_BYTES: usize = 128;

/// At most [`MAX_RUN_ID_BYTES`] of `A-Za-z0-9-_.:` (the rule `submit` enforces).
pub fn run_id_chars_ok(id: &str) -> bool {
    id.len() <= MAX_RUN_ID_BYTES
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// A client-chosen run id travels in every event, log line and stored row: short, printable, no
/// separators a shell or a path would trip on.
fn check_run_id(id: &str) -> Result<(), AgentError> {
    if run_id_chars_ok(id) {
        return Ok(());
    }
    Err(AgentError::InvalidArgument {
        field: "run_id",
        message: format!(
            "{} must be at most {MAX_RUN_ID_BYTES} characters of A-Z a-z 0-9 - _ . :",
            quote(id)
        ),
    })
}

fn new_run_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "agent-{}-{}-{}",
        std::process::id(),
        monotonic_ns(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

impl AgentCore {
    /// Checks a run request and admits it to its device's queue. The run
    /// then goes on in a task; the receiver gets its progress, its power
    /// samples and exactly one RunResult. Dropping the receiver cancels it.
    ///
    /// # Errors
    /// [`AgentError::InvalidArgument`] naming the field of a bad request,
    /// [`AgentError::HostMemory`] for a run the host's memory cannot hold now,
    /// [`AgentError::QueueFull`] or [`AgentError::DuplicateRun`] from the
    /// device's queue.
    pub fn submit(
        self: &Arc<Self>,
        req: pb::RunRequest,
    ) -> Result<mpsc::Receiver<pb::RunEvent>, AgentError> {
        let spec = req.spec.ok_or_else(|| AgentError::InvalidArgument {
            field: "spec",
            message: "is required".into(),
        })?;
        let run_id = if req.run_id.is_empty() {
            new_run_id()
        } else {
            check_run_id(&req.run_id)?;
            req.run_id
        };
        let host = HostMemory::read(&self.config.host_root);
        let plan = plan(self, &run_id, &spec, &host)?;
        // One run at a time per physical device (see queue_key).
        let ticket = self.queues.admit(&queue_key(&plan.device), &run_id)?;
        let (tx, rx) = mpsc::channel::<pb::RunEvent>(EVENT_BUFFER);
        tokio::spawn(self.clone().execute(plan, ticket, tx));
        Ok(rx)
    }

    /// Signals cancellation of `run_id`; false if no such run is queued or
    /// running.
    pub fn cancel(&self, run_id: &str) -> bool {
        self.queues.cancel(run_id)
    }

    /// The admitted run, from waiting for the device to its result.
    async fn execute(
        self: Arc<Self>,
        mut plan: Plan,
        mut ticket: Ticket,
        tx: mpsc::Sender<pb::RunEvent>,
    ) {
        tracing::info!(run_id = %plan.run_id, kernel = plan.problem.kernel.name, device = %plan.device.id, "run queued");
        let _ = tx
            .send(progress_event("queued", plan.device.id.clone(), 0))
            .await;
        if !plan.supported {
            let msg = format!(
                "backend {} does not implement {} variant {} in {}",
                plan.device.backend,
                plan.problem.kernel.name,
                plan.problem.variant,
                plan.problem.dtype.name()
            );
            let _ = tx
                .send(result_event(bare_result(
                    &plan,
                    pb::RunStatus::Unsupported,
                    msg,
                )))
                .await;
            return;
        }
        let Some(_permit) = ticket.start().await else {
            let r = bare_result(
                &plan,
                pb::RunStatus::Cancelled,
                "cancelled while queued".into(),
            );
            let _ = tx.send(result_event(r)).await;
            return;
        };
        let host = HostMemory::read(&self.config.host_root);
        match plan.admit_memory(&host, self.config.limit_worker_memory) {
            Ok(memory) => plan.memory = memory,
            Err(e) => {
                let r = bare_result(
                    &plan,
                    pb::RunStatus::OutOfMemory,
                    format!("not started when its device became free: {e}"),
                );
                let _ = tx.send(result_event(r)).await;
                return;
            }
        }
        let _ = tx.send(progress_event("starting", String::new(), 0)).await;
        let worker_start_ns = monotonic_ns();
        if plan.power.is_some() {
            // A counter reading right before the window (see want_counter).
            self.power.sampler.want_counter();
        }
        let started = unix_now_s();
        let (ptx, mut prx) = mpsc::channel::<parent::ProgressEvent>(16);
        let forward_tx = tx.clone();
        let forward = tokio::spawn(async move {
            while let Some(p) = prx.recv().await {
                let _ = forward_tx
                    .send(progress_event(&p.phase, p.message, p.iterations))
                    .await;
            }
        });
        // Cancel the run when the receiver goes away.
        let watch_tx = tx.clone();
        let queues = self.queues.clone();
        let watch_id = plan.run_id.clone();
        let watcher = tokio::spawn(async move {
            watch_tx.closed().await;
            queues.cancel(&watch_id);
        });
        let outcome = parent::run_worker(
            &self.workers,
            &self.config.worker,
            &plan.job,
            &plan.env,
            plan.timeout,
            plan.memory.limit,
            ticket.cancel.clone(),
            ptx,
        )
        .await;
        let _ = forward.await;
        watcher.abort();
        // Untimed kernel runs inside the window: power repeats, and a slow start dropped as warm-up.
        let (power_iterations, trimmed_iterations) = match &outcome {
            Ok(parent::WorkerRun {
                ending: parent::Ending::Finished(o),
                ..
            }) => (o.power_iterations, o.trimmed_iterations),
            _ => (0, 0),
        };
        let mut result = match outcome {
            Ok(run) => {
                // Whether this run paid a process start, for anyone reading first-run figures.
                let worker = if run.reused { "reused" } else { "new" };
                let mut r = finish(&plan, run, started);
                r.config.insert("worker".into(), worker.into());
                r
            }
            Err(e) => bare_result(&plan, pb::RunStatus::Error, e.to_string()),
        };
        if let Some(p) = &plan.power
            && result.status() == pb::RunStatus::Ok
            && result.window_end_ns > result.window_begin_ns
        {
            let sampler = &self.power.sampler;
            // A fresh counter reading past the window (asked for now), and
            // two sensor periods.
            sampler.want_counter();
            let wait = (p.period * 2)
                .max(Duration::from_millis(500))
                .min(Duration::from_secs(3));
            wait_for_sample_after(sampler, p.channel, result.window_end_ns, wait).await;
            let window = Window {
                worker_start_ns,
                begin_ns: result.window_begin_ns,
                end_ns: result.window_end_ns,
                iterations: result.times_s.len() as u64 + power_iterations + trimmed_iterations,
                power_iterations,
            };
            let metric = result.metric.as_ref().map_or(0.0, |m| m.value);
            let (samples, energy) =
                energy(sampler, &self.power.idle, &plan.problem, p, &window, metric);
            for s in samples {
                let ev = pb::RunEvent {
                    event: Some(pb::run_event::Event::Power(s)),
                };
                if tx.send(ev).await.is_err() {
                    break;
                }
            }
            result.energy = energy;
        }
        if let Some(p) = &plan.power {
            self.power.mark_busy(p.channel);
        }
        tracing::info!(run_id = %plan.run_id, status = ?result.status(), "run finished");
        let _ = tx.send(result_event(result)).await;
        drop(ticket);
    }
}
