//! What the run core counts over the process's life: finished runs by status and worker crashes.
//! The run core adds to them as each run ends; the metrics exporter (`crate::metrics`) reads them
//! at each scrape. They live here, with the runs they count, so the exporter depends on the run
//! core and never the other way round.

use gpufleet_proto::v1::RunStatus;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Finished runs per status name.
static RUNS: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());
/// Runs whose worker crashed or was killed by the watchdog.
static CRASHES: AtomicU64 = AtomicU64::new(0);

/// Counts a finished run by its status; a crash or a watchdog kill is also a worker crash.
pub fn record_run(status: RunStatus) {
    let name = status.name();
    *RUNS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(name)
        .or_default() += 1;
    if name == "crashed" || name == "timed_out" {
        CRASHES.fetch_add(1, Ordering::Relaxed);
    }
}

/// Finished runs per status name so far, every status listed (from zero), so rates exist
/// before the first run of each.
pub fn runs_by_status() -> BTreeMap<&'static str, u64> {
    let mut all: BTreeMap<&'static str, u64> = (1..=32)
        .filter_map(|i| RunStatus::try_from(i).ok())
        .map(|s| (s.name(), 0))
        .collect();
    for (status, n) in RUNS.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        *all.entry(status).or_default() += n;
    }
    all
}

/// Runs whose worker crashed or was killed by the watchdog, so far.
pub fn worker_crashes() -> u64 {
    CRASHES.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_count_by_status_and_crashes_count_twice() {
        let before = runs_by_status();
        let crashes = worker_crashes();
        record_run(RunStatus::Ok);
        record_run(RunStatus::TimedOut);
        let after = runs_by_status();
        assert_eq!(after["ok"], before["ok"] + 1);
        assert_eq!(after["timed_out"], before["timed_out"] + 1);
        assert!(after.contains_key("cancelled"), "every status is listed");
        assert!(worker_crashes() > crashes);
    }
}
