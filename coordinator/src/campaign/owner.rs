//! Which process owns a campaign: `pid@host`, written with the campaign and refreshed by a
//! heartbeat while its jobs run, so another coordinator can tell a live owner from a dead one.

use std::time::Duration;

/// How often an executing process writes its heartbeat (and renews its job leases).
pub const HEARTBEAT: Duration = Duration::from_secs(5);

/// How long a claimed job stays claimed without a renewal: six heartbeats. A job whose claimer
/// stopped renewing is interrupted and claimed again.
pub const LEASE: Duration = Duration::from_secs(30);

/// How often the owner of a campaign looks again at jobs other serves run, and a serve at
/// campaigns that have jobs for the dial-in agents it holds.
pub const CLAIM_POLL: Duration = Duration::from_millis(500);

/// This process as a campaign owner: `pid@hostname`.
pub fn owner_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    format!("{}@{host}", std::process::id())
}

/// Whether the owner `pid@host` of a campaign is certainly gone: on this host, no process has that
/// pid any more. An owner on another host is judged by its heartbeat instead.
pub fn owner_is_dead(owner: &str) -> bool {
    let Some((pid, host)) = owner.split_once('@') else {
        return true;
    };
    let Ok(pid) = pid.parse::<i32>() else {
        return true;
    };
    let here = owner_id();
    let this_host = here.split_once('@').map(|(_, h)| h).unwrap_or_default();
    if host != this_host {
        return false;
    }
    if pid == std::process::id() as i32 {
        return false;
    }
    // Signal 0 checks existence; ESRCH means no such process.
    // SAFETY: kill with signal 0 sends nothing; it only checks the pid.
    let rc = unsafe { libc::kill(pid, 0) };
    rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}
