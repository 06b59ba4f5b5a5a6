//! Progress of long CLI work. On a terminal: a bar with the current job and
//! a line per finished job above it. Elsewhere (CI logs, pipes): one plain
//! line per finished job on stderr, no bar, no escape codes.

use super::plan::PlannedJob;
use crate::table::fmt_metric;
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
    /// `jobs` more were queued after planning (confirmation reruns), so the count grows.
    fn more(&self, jobs: usize, why: &str) {
        if jobs > 0 {
            self.note(&format!("{jobs} more jobs: {why}"));
        }
    }
}

/// `[n/total, ETA m:ss]`: the remaining jobs at the average pace so far.
fn counter(n: usize, total: usize, elapsed: std::time::Duration) -> String {
    if n == 0 || n >= total {
        return format!("[{n}/{total}]");
    }
    let left = elapsed.as_secs_f64() / n as f64 * (total - n) as f64;
    let s = left.round() as u64;
    format!("[{n}/{total}, ETA {}:{:02}]", s / 60, s % 60)
}

fn label(job: &PlannedJob) -> String {
    let params: Vec<String> = {
        let mut p: Vec<_> = job.spec.params.iter().collect();
        p.sort();
        p.into_iter()
            .map(|(k, v)| format!("{k}={}", gpufleet_kernels::show_param(k, *v)))
            .collect()
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
    start: std::sync::Mutex<Option<std::time::Instant>>,
}

impl CliReporter {
    pub fn new() -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = ProgressBar::new(0);
            b.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{pos}/{len}] {elapsed_precise} ETA {eta} {wide_msg}",
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
            start: std::sync::Mutex::new(None),
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
        if let Ok(mut s) = self.start.lock() {
            s.get_or_insert_with(std::time::Instant::now);
        }
        if let Some(b) = &self.bar {
            b.set_length(jobs as u64);
        }
        self.line(&format!("campaign {campaign_id}: {jobs} jobs"));
    }

    fn more(&self, jobs: usize, why: &str) {
        if jobs == 0 {
            return;
        }
        let total = self.total.fetch_add(jobs, Ordering::SeqCst) + jobs;
        if let Some(b) = &self.bar {
            b.set_length(total as u64);
        }
        self.line(&format!("{jobs} more jobs: {why}"));
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
        // A job nobody announced (a resumed campaign's leftovers) still never shows [n/less].
        let total = self.total.fetch_max(n, Ordering::SeqCst).max(n);
        if let Some(b) = &self.bar
            && b.length().unwrap_or(0) < total as u64
        {
            b.set_length(total as u64);
        }
        let elapsed = self
            .start
            .lock()
            .ok()
            .and_then(|s| *s)
            .map(|s| s.elapsed())
            .unwrap_or_default();
        self.line(&format!(
            "{} {}",
            counter(n, total, elapsed),
            result_line(job, r)
        ));
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
    eprintln!("{} {text}", crate::time::fmt_timestamp(crate::time::now()));
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_counter_never_shows_more_done_than_planned_and_estimates_the_rest() {
        assert_eq!(counter(0, 4, Duration::from_secs(3)), "[0/4]");
        // 2 of 4 in 30 s: 30 s to go.
        assert_eq!(counter(2, 4, Duration::from_secs(30)), "[2/4, ETA 0:30]");
        assert_eq!(counter(1, 5, Duration::from_secs(40)), "[1/5, ETA 2:40]");
        assert_eq!(counter(4, 4, Duration::from_secs(30)), "[4/4]");
        let r = CliReporter::new();
        r.planned(1, 2);
        r.more(2, "confirmation reruns");
        assert_eq!(r.total.load(Ordering::SeqCst), 4);
        let job = PlannedJob {
            agent: "a".into(),
            device: pb::Device::default(),
            spec: pb::RunSpec::default(),
            spec_key: "k".into(),
        };
        for _ in 0..5 {
            r.finished(&job, &pb::RunResult::default());
        }
        assert_eq!(
            r.total.load(Ordering::SeqCst),
            5,
            "an unannounced job raises the total"
        );
    }
}
