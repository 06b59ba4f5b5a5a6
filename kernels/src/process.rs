//! Process-wide behaviour the two binaries share.

/// Restores the default action of SIGPIPE, which Rust's runtime sets to "ignore": a command whose
/// output goes into a pipe that closes early (`gpufleet results | head -1`) then ends quietly, as
/// Unix tools do (exit status 141), instead of panicking on the failed write (exit status 101).
/// Call it first in `main`, before any thread starts.
pub fn quiet_broken_pipes() {
    // SAFETY: signal(2) with SIG_DFL installs no handler; called before other threads exist.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
