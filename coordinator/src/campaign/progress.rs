//! Progress of long CLI work. On a terminal: a bar with the current job and
//! a line per finished job above it. Elsewhere (CI logs, pipes): one plain
//! line per finished job on stderr, no bar, no escape codes.

use super::plan::PlannedJob;
use crate::compare::fmt_metric;
use gpufleet_proto::v1 as pb;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Receives campaign events. Implementations must be cheap: they are
/// called from the job tasks.
pub trait Reporter: Send + Sync {
    fn planned(&self, campaign_id: i64, jobs: usize);
    fn started(&self, job: &PlannedJob);
    fn progress(&self, job: &PlannedJob, phase: &str, message: &str);
    fn finished(&self, job: &PlannedJob, result: &pb::RunResult);
    fn note(&self, message: &str);
}

fn label(job: &PlannedJob) -> String {
    let params: Vec<String> = {
        let mut p: Vec<_> = job.spec.params.iter().collect();
        p.sort();
        p.into_iter().map(|(k, v)| format!("{k}={v}")).collect()
    };
    format!(
        "{}/{} {} on {}:{}",
        job.spec.kernel,
        job.spec.variant,
        params.join(","),
        job.agent,
        job.device.id
    )
}

/// One line describing a finished result.
pub fn result_line(job: &PlannedJob, r: &pb::RunResult) -> String {
    let status = r.status().name();
    match &r.metric {
        Some(m) if status == "ok" => {
            format!("{}: ok {} {}", label(job), fmt_metric(m.value), m.unit)
        }
        _ => format!("{}: {status} {}", label(job), r.message),
    }
}

/// Bar on a terminal, lines otherwise.
pub struct CliReporter {
    bar: Option<ProgressBar>,
    total: AtomicUsize,
    done: AtomicUsize,
}

impl CliReporter {
    pub fn new() -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = ProgressBar::new(0);
            b.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{pos}/{len}] {elapsed_precise} {wide_msg}",
                )
                .expect("valid template"),
            );
            b.enable_steady_tick(std::time::Duration::from_millis(120));
            b
        });
        CliReporter {
            bar,
            total: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
        }
    }

    fn line(&self, s: &str) {
        match &self.bar {
            Some(b) => b.println(s),
            None => eprintln!("{s}"),
        }
    }

    /// Removes the bar (before printing tables).
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

impl Default for CliReporter {
    fn default() -> Self {
        Self::new()
    }
}

impl Reporter for CliReporter {
    fn planned(&self, campaign_id: i64, jobs: usize) {
        self.total.store(jobs, Ordering::SeqCst);
        if let Some(b) = &self.bar {
            b.set_length(jobs as u64);
        }
        self.line(&format!("campaign {campaign_id}: {jobs} jobs"));
    }

    fn started(&self, job: &PlannedJob) {
        if let Some(b) = &self.bar {
            b.set_message(label(job));
        }
    }

    fn progress(&self, job: &PlannedJob, phase: &str, message: &str) {
        if let Some(b) = &self.bar {
            b.set_message(format!("{} — {phase} {message}", label(job)));
        }
    }

    fn finished(&self, job: &PlannedJob, r: &pb::RunResult) {
        let n = self.done.fetch_add(1, Ordering::SeqCst) + 1;
        let total = self.total.load(Ordering::SeqCst);
        self.line(&format!("[{n}/{total}] {}", result_line(job, r)));
        if let Some(b) = &self.bar {
            b.inc(1);
        }
    }

    fn note(&self, message: &str) {
        self.line(&format!("note: {message}"));
    }
}

/// For the schedule daemon: one line per campaign event on stderr, no bar (several campaigns may
/// run at once, and the output usually goes to a log).
#[derive(Debug, Default, Clone, Copy)]
pub struct LogReporter;

/// A log line of the serve: UTC timestamp first, like its tracing lines.
fn log_line(text: &str) {
    eprintln!(
        "{} {text}",
        crate::schedule::slots::fmt_timestamp(crate::schedule::now())
    );
}

impl Reporter for LogReporter {
    fn planned(&self, campaign_id: i64, jobs: usize) {
        log_line(&format!("campaign {campaign_id}: {jobs} jobs planned"));
    }

    fn started(&self, _job: &PlannedJob) {}

    fn progress(&self, _job: &PlannedJob, _phase: &str, _message: &str) {}

    fn finished(&self, job: &PlannedJob, r: &pb::RunResult) {
        log_line(&result_line(job, r));
    }

    fn note(&self, message: &str) {
        log_line(&format!("note: {message}"));
    }
}
