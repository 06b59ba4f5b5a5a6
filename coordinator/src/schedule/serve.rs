//! The daemon's loop for `gpufleet serve`: tick, log what started and finished, sleep, until the
//! stop signal; then a graceful stop that leaves unfinished campaigns `interrupted` for the next
//! coordinator to resume. Listening (HTTP) and signal handling stay with the caller.

use super::daemon::Daemon;
use crate::store::StoreError;
use crate::time::now;
use std::time::Duration;
use tokio::sync::watch;

/// How often a serve looks for campaigns handed to it (see `campaign::handoff`).
pub const HANDOFF_POLL: Duration = Duration::from_millis(500);

/// Ticks `daemon` every `tick` until `stop` turns true, logging to stderr, then stops it. Returns
/// the campaigns that were interrupted by the stop.
///
/// # Errors
/// [`StoreError`] when the stop cannot be written; failed ticks are logged and the loop goes on.
pub async fn run_until_stopped(
    daemon: &Daemon,
    tick: Duration,
    mut stop: watch::Receiver<bool>,
) -> Result<Vec<i64>, StoreError> {
    let mut next_tick = tokio::time::Instant::now();
    loop {
        let result = if tokio::time::Instant::now() >= next_tick {
            next_tick += tick;
            let result = daemon.tick(now()).await;
            daemon.note_tick(result.as_ref().err());
            result
        } else {
            // Between ticks: campaigns handed over by `gpufleet run` (ownerless) start promptly.
            daemon.resume_orphans(now()).await
        };
        match result {
            Ok(ids) if !ids.is_empty() => eprintln!("started campaigns {ids:?}"),
            Ok(_) => {}
            Err(e) => eprintln!("schedule check failed: {e}"),
        }
        for r in daemon.reap() {
            eprintln!("{r}");
        }
        tokio::select! {
            _ = tokio::time::sleep(tick.min(HANDOFF_POLL)) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    daemon.stop().await
}
