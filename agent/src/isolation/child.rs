//! The worker side: `worker serve` (jobs on stdin, one JSON line each, until stdin closes) and
//! `worker discover NAME`.

use super::monotonic_ns;
use super::protocol::{DiscoveryReply, WorkerEvent, WorkerJob, WorkerOutcome, WorkerStatus};
use crate::backend::{self, BackendError, PreparedKernel};
use crate::stats::{enough_samples, interval_pct};
use gpufleet_kernels::{Buffer, Problem, model};
use std::fs::File;
use std::io::{BufRead, BufWriter, Write};
use std::os::fd::FromRawFd;
use std::time::Instant;

/// How often the worker reports progress while measuring.
const PROGRESS_EVERY_S: f64 = 0.5;

/// The worker's protocol channel: the process's original stdout.
struct Channel {
    out: BufWriter<File>,
}

impl Channel {
    /// Takes the original stdout for the protocol and sends fd 1 to stderr.
    fn take_stdout() -> std::io::Result<Channel> {
        // SAFETY: dup/dup2 on the process's own standard descriptors; the new
        // descriptor is owned by the File below and closed on drop.
        let fd = unsafe {
            let fd = libc::dup(1);
            if fd < 0 || libc::dup2(2, 1) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            fd
        };
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        Ok(Channel {
            out: BufWriter::new(file),
        })
    }

    fn send<T: serde::Serialize>(&mut self, msg: &T) {
        // A broken pipe means the parent is gone; nothing useful to do.
        if let Ok(line) = serde_json::to_string(msg) {
            let _ = writeln!(self.out, "{line}");
            let _ = self.out.flush();
        }
    }

    fn progress(&mut self, phase: &str, message: String, iterations: u32) {
        self.send(&WorkerEvent::Progress {
            phase: phase.into(),
            message,
            iterations,
        });
    }
}

/// Entry point of a worker process; `args` follow the worker word
/// (`["serve"]` or `["discover", "cpu"]`). Returns the process exit code.
pub fn main(args: &[String]) -> i32 {
    let mut chan = match Channel::take_stdout() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("worker: cannot set up the protocol channel: {e}");
            return 2;
        }
    };
    match args.first().map(String::as_str) {
        Some("serve") => {
            // Each job's kernel and buffers are dropped inside `run_job`, before its outcome goes
            // out, so the parent may hand over the next job as soon as it has read the outcome.
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if line.trim().is_empty() {
                    continue;
                }
                let outcome = match gpufleet_kernels::from_json_str::<WorkerJob>(&line) {
                    Ok(job) => run_job(&job, &mut chan),
                    Err(e) => {
                        WorkerOutcome::failed(WorkerStatus::Error, format!("malformed job: {e}"))
                    }
                };
                chan.send(&WorkerEvent::Outcome(outcome));
            }
            0
        }
        Some("discover") => {
            let name = args.get(1).map(String::as_str).unwrap_or("");
            let reply = match backend::registry::by_name(name) {
                Some(b) => match b.discover() {
                    Ok(devices) => DiscoveryReply::Devices(devices),
                    Err(e) => DiscoveryReply::Unavailable(e),
                },
                None => DiscoveryReply::Unavailable(BackendError::Unavailable {
                    backend: name.to_string(),
                    reason: "not compiled into this binary".into(),
                }),
            };
            chan.send(&reply);
            0
        }
        _ => {
            eprintln!("worker: usage: worker serve | worker discover <backend>");
            2
        }
    }
}

/// The debug switch [`model::PERTURB_ENV`]: for a model run on an agent with debug kernels
/// enabled, the layer's name and a copy of the inputs with that layer's weights perturbed (the
/// backend gets the copy, validation the true inputs). `None` when the switch is unset.
fn perturbed_inputs(
    job: &WorkerJob,
    problem: &Problem,
    inputs: &[Buffer],
) -> Result<Option<(String, Vec<Buffer>)>, String> {
    let Ok(layer) = std::env::var(model::PERTURB_ENV) else {
        return Ok(None);
    };
    if !job.allow_debug {
        return Err(format!(
            "{} is a debug switch: the agent must enable debug kernels",
            model::PERTURB_ENV
        ));
    }
    if problem.net().is_none() {
        return Err(format!(
            "{} applies to the networks and the cnn_* layer kernels, not {}",
            model::PERTURB_ENV,
            problem.kernel.name
        ));
    }
    let mut copy = inputs.to_vec();
    let Some(Buffer::F32(weights)) = copy.get_mut(1) else {
        return Err("model inputs without a weights buffer".into());
    };
    problem.graph().perturb(weights, &layer)?;
    Ok(Some((layer, copy)))
}

fn run_job(job: &WorkerJob, chan: &mut Channel) -> WorkerOutcome {
    let Some(backend) = backend::registry::by_name(&job.backend) else {
        return WorkerOutcome::failed(
            WorkerStatus::Unsupported,
            format!("backend {} is not compiled into this binary", job.backend),
        );
    };
    let problem = match Problem::new(
        &job.kernel,
        &job.variant,
        &job.params,
        &job.dtype,
        job.allow_debug,
    ) {
        Ok(p) => p,
        Err(e) => return WorkerOutcome::failed(WorkerStatus::Error, e.to_string()),
    };
    chan.progress("preparing", "generating inputs".into(), 0);
    let inputs = problem.inputs(job.seed);
    let perturbed = match perturbed_inputs(job, &problem, &inputs) {
        Ok(p) => p,
        Err(message) => return WorkerOutcome::failed(WorkerStatus::Error, message),
    };
    chan.progress(
        "compiling",
        format!("preparing {} on {}", problem.kernel.name, job.device.id),
        0,
    );
    let prepare = backend::Prepare {
        device: &job.device,
        problem: &problem,
        inputs: perturbed.as_ref().map_or(&inputs, |(_, p)| p),
        mode: job.mode,
        tune_budget: backend::tuning::budget(job.settings.timeout_s),
    };
    let mut kernel = match backend.prepare(&prepare) {
        Ok(k) => k,
        Err(e) => return WorkerOutcome::from_backend_error(&e),
    };
    let mut config = kernel.config();
    if let Some((layer, _)) = &perturbed {
        config.insert("debug_perturbed_layer".into(), layer.clone());
    }
    match measure(job, kernel.as_mut(), chan) {
        Ok(Measured {
            times,
            warmup_done,
            power_iterations,
        }) => {
            let validation = if job.skip_validation {
                None
            } else {
                chan.progress("validating", String::new(), times.len() as u32);
                match kernel.output() {
                    Ok(out) => Some(problem.check(&inputs, &out)),
                    Err(e) => return WorkerOutcome::from_backend_error(&e),
                }
            };
            let passed = validation.as_ref().is_none_or(|v| v.passed);
            let message = match &validation {
                Some(v) if !v.passed => format!("validation failed: {}", v.message),
                Some(_) => String::new(),
                None => "validation skipped: not comparable".into(),
            };
            WorkerOutcome {
                status: if passed {
                    WorkerStatus::Ok
                } else {
                    WorkerStatus::Invalid
                },
                message,
                times_s: times,
                warmup_done,
                validation,
                config,
                power_iterations,
            }
        }
        Err(e) => {
            let mut o = WorkerOutcome::from_backend_error(&e);
            o.config = config;
            o
        }
    }
}

/// What [`measure`] ran.
struct Measured {
    times: Vec<f64>,
    warmup_done: u32,
    power_iterations: u64,
}

/// Warm-up, then timed iterations until the stop rule holds, then (for a
/// power run) untimed repeats until the window is `power_window_s` long.
/// Sends the kernel-window markers around the timed part and the repeats.
fn measure(
    job: &WorkerJob,
    kernel: &mut dyn PreparedKernel,
    chan: &mut Channel,
) -> Result<Measured, BackendError> {
    let rule = &job.settings;
    chan.progress("warmup", format!("{} warm-up iterations", rule.warmup), 0);
    for _ in 0..rule.warmup {
        kernel.run()?;
    }
    let mut checked = 0;
    let mut times = Vec::with_capacity(rule.min_iterations as usize);
    chan.send(&WorkerEvent::WindowBegin {
        monotonic_ns: monotonic_ns(),
    });
    let start = Instant::now();
    let mut last_report = 0.0;
    loop {
        times.push(kernel.run()?.as_secs_f64());
        let elapsed = start.elapsed().as_secs_f64();
        if enough_samples(rule, &times, elapsed, &mut checked) {
            break;
        }
        if elapsed - last_report >= PROGRESS_EVERY_S {
            last_report = elapsed;
            let interval = match (interval_pct(&times), rule.target_ci_pct) {
                (Some(ci), Some(target)) => format!(
                    ", median ±{ci:.1}% (target ±{target}%, budget {:.1} s)",
                    rule.max_seconds
                ),
                _ => String::new(),
            };
            chan.progress(
                "measuring",
                format!("{elapsed:.1} s{interval}"),
                times.len() as u32,
            );
        }
    }
    let mut power_iterations = 0u64;
    if start.elapsed().as_secs_f64() < job.power_window_s {
        chan.progress(
            "power",
            format!(
                "repeating the kernel until the window covers {:.1} s for the power sensor",
                job.power_window_s
            ),
            times.len() as u32,
        );
        while start.elapsed().as_secs_f64() < job.power_window_s {
            kernel.run()?;
            power_iterations += 1;
        }
    }
    chan.send(&WorkerEvent::WindowEnd {
        monotonic_ns: monotonic_ns(),
    });
    Ok(Measured {
        times,
        warmup_done: rule.warmup,
        power_iterations,
    })
}
