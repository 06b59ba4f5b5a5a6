//! The worker side: `worker serve` (jobs on stdin, one JSON line each, until stdin closes) and
//! `worker discover NAME`.

use super::monotonic_ns;
use super::protocol::{DiscoveryReply, WorkerEvent, WorkerJob, WorkerOutcome, WorkerStatus};
use crate::backend::{self, BackendError, PreparedKernel};
use crate::stats::{
    WARMUP_CAP_S, WARMUP_MIN_S, WARMUP_WINDOW, enough_samples, interval_pct, slow_start, steady,
};
use gpufleet_kernels::{Buffer, Problem, model};
use std::fs::File;
use std::io::{BufRead, BufWriter, Write};
use std::os::fd::FromRawFd;
use std::time::Instant;

/// How often the worker reports progress while measuring.
const PROGRESS_EVERY_S: f64 = 0.5;

/// How many times a run may drop a slow start it found after measuring and measure on.
const TRIM_ROUNDS: u32 = 2;

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
            // This thread measures; as a member of the global rayon pool it works on a cpu
            // kernel's tasks itself instead of handing them to the pool and sleeping until they
            // are done. Outside the pool every iteration ends with a wake-up of this thread, and
            // whether the pool's threads were still awake decides whether an element-wise kernel
            // runs on all of them or on one: two modes, up to 2× apart, on a small VM.
            if let Err(e) = rayon::ThreadPoolBuilder::new()
                .use_current_thread()
                .build_global()
            {
                eprintln!("worker: the cpu thread pool was set up before: {e}");
            }
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
    let llm = problem.llm_graph().filter(|g| g.weights_input.is_some());
    if problem.net().is_none() && llm.is_none() {
        return Err(format!(
            "{} applies to the networks, the cnn_* layer kernels, llm and gemv, not {}",
            model::PERTURB_ENV,
            problem.kernel.name
        ));
    }
    let mut copy = inputs.to_vec();
    let at = llm.as_ref().and_then(|g| g.weights_input).unwrap_or(1);
    let Some(weights) = copy.get_mut(at) else {
        return Err("model inputs without a weights buffer".into());
    };
    match (&llm, weights) {
        (Some(g), w) => {
            gpufleet_kernels::llm::perturb(g, w, problem.dtype.block_format(), &layer)?;
        }
        (None, Buffer::F32(w)) => problem.graph().perturb(w, &layer)?,
        (None, _) => return Err("a network's weights that are not f32".into()),
    }
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
    // Read after the runs: a kernel may note what it measured (a per-dispatch profile).
    let config_of = |kernel: &dyn backend::PreparedKernel| {
        let mut config = kernel.config();
        if let Some((layer, _)) = &perturbed {
            config.insert("debug_perturbed_layer".into(), layer.clone());
        }
        config
    };
    match measure(job, kernel.as_mut(), chan) {
        Ok(Measured {
            times,
            warm_up,
            power_iterations,
        }) => {
            let mut config = config_of(kernel.as_ref());
            warm_up.record(&mut config);
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
                warmup_done: warm_up.total(),
                validation,
                trimmed_iterations: u64::from(warm_up.trimmed),
                config,
                power_iterations,
            }
        }
        Err(e) => {
            let mut o = WorkerOutcome::from_backend_error(&e);
            o.config = config_of(kernel.as_ref());
            o
        }
    }
}

/// What [`measure`] ran.
struct Measured {
    times: Vec<f64>,
    warm_up: WarmUp,
    power_iterations: u64,
}

/// What warming up took, recorded in the result's config.
#[derive(Default)]
struct WarmUp {
    /// Untimed iterations before measuring.
    iterations: u32,
    /// Seconds they took.
    seconds: f64,
    /// Whether the cap ended warm-up while times were still falling.
    capped: bool,
    /// First measured samples found still warming up afterwards ([`slow_start`]) and dropped.
    trimmed: u32,
    /// Seconds those took.
    trimmed_s: f64,
}

impl WarmUp {
    /// Iterations that warmed up, before measuring or found afterwards.
    fn total(&self) -> u32 {
        self.iterations + self.trimmed
    }

    /// The config entries a result carries about its warm-up.
    fn record(&self, config: &mut std::collections::BTreeMap<String, String>) {
        config.insert("warmup_iterations".into(), self.total().to_string());
        config.insert(
            "warmup_s".into(),
            format!("{:.4}", self.seconds + self.trimmed_s),
        );
        if self.trimmed > 0 {
            config.insert("warmup_trimmed".into(), self.trimmed.to_string());
        }
        if self.capped {
            config.insert("warmup_capped".into(), "true".into());
        }
    }
}

/// Warms up until steady: at least `rule.warmup` iterations and [`WARMUP_MIN_S`] seconds, then
/// until the last windows show no downward trend ([`steady`]), for at most [`WARMUP_CAP_S`] (or
/// the measuring budget, when that is shorter). `warmup` 0 asks for none at all: a cold run.
fn warm_up(
    rule: &gpufleet_kernels::RunSettings,
    kernel: &mut dyn PreparedKernel,
    chan: &mut Channel,
) -> Result<WarmUp, BackendError> {
    chan.progress(
        "warmup",
        format!(
            "at least {} warm-up iterations and {WARMUP_MIN_S} s, until steady",
            rule.warmup
        ),
        0,
    );
    if rule.warmup == 0 {
        // Asked for none: a cold measurement, from the first iteration.
        return Ok(WarmUp::default());
    }
    let min_s = WARMUP_MIN_S.min(rule.max_seconds);
    let cap_s = rule.max_seconds.clamp(min_s, WARMUP_CAP_S);
    let start = Instant::now();
    let mut recent: std::collections::VecDeque<f64> =
        std::collections::VecDeque::with_capacity(2 * WARMUP_WINDOW);
    let mut iterations = 0u32;
    loop {
        let elapsed = start.elapsed().as_secs_f64();
        if iterations >= rule.warmup && elapsed >= min_s {
            if steady(recent.make_contiguous()) {
                break;
            }
            if elapsed >= cap_s {
                return Ok(WarmUp {
                    iterations,
                    seconds: elapsed,
                    capped: true,
                    ..WarmUp::default()
                });
            }
        }
        let t = kernel.run()?.as_secs_f64();
        if recent.len() == 2 * WARMUP_WINDOW {
            recent.pop_front();
        }
        recent.push_back(t);
        iterations += 1;
    }
    Ok(WarmUp {
        iterations,
        seconds: start.elapsed().as_secs_f64(),
        ..WarmUp::default()
    })
}

/// Warm-up, then timed iterations until the stop rule holds, then (for a
/// power run) untimed repeats until the window is `power_window_s` long.
/// Sends the kernel-window markers around the timed part and the repeats.
///
/// A slow start the warm-up could not see (a plateau of slow first iterations) is dropped from
/// the samples once the stop rule holds ([`slow_start`]), counted as warm-up, and measuring goes
/// on until the rule holds for the samples kept; at most [`TRIM_ROUNDS`] times, so a run that
/// never settles still ends.
fn measure(
    job: &WorkerJob,
    kernel: &mut dyn PreparedKernel,
    chan: &mut Channel,
) -> Result<Measured, BackendError> {
    let rule = &job.settings;
    let mut warm_up = warm_up(rule, kernel, chan)?;
    let mut checked = 0;
    let mut skip = 0;
    let mut rounds = 0;
    let mut times = Vec::with_capacity(rule.min_iterations as usize);
    chan.send(&WorkerEvent::WindowBegin {
        monotonic_ns: monotonic_ns(),
    });
    let start = Instant::now();
    let mut last_report = 0.0;
    loop {
        times.push(kernel.run()?.as_secs_f64());
        let elapsed = start.elapsed().as_secs_f64();
        if enough_samples(rule, &times[skip..], elapsed, &mut checked) {
            // A cold measurement (warmup 0) keeps its slow start: that is what it asked for.
            let slow = if rounds < TRIM_ROUNDS && rule.warmup > 0 {
                slow_start(&times[skip..])
            } else {
                0
            };
            if slow == 0 {
                break;
            }
            skip += slow;
            rounds += 1;
            checked = 0;
        }
        if elapsed - last_report >= PROGRESS_EVERY_S {
            last_report = elapsed;
            let interval = match (interval_pct(&times[skip..]), rule.target_ci_pct) {
                (Some(ci), Some(target)) => format!(
                    ", median ±{ci:.1}% (target ±{target}%, budget {:.1} s)",
                    rule.max_seconds
                ),
                _ => String::new(),
            };
            chan.progress(
                "measuring",
                format!("{elapsed:.1} s{interval}"),
                (times.len() - skip) as u32,
            );
        }
    }
    warm_up.trimmed = skip as u32;
    warm_up.trimmed_s = times.drain(..skip).sum();
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
        warm_up,
        power_iterations,
    })
}
