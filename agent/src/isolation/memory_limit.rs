//! A worker's memory limit, and how a worker that ran out of memory is told from one that
//! crashed.
//!
//! # Why RLIMIT_DATA, for every backend
//! The limit is `setrlimit(RLIMIT_DATA)` in the forked child before exec. Since Linux 4.7 it
//! bounds the private writable mappings (heap and anonymous `mmap`, where every buffer of a
//! worker lives) and is checked when a mapping is made or made writable, so an allocation past it
//! fails at once, before the memory is touched: Rust then prints `memory allocation of N bytes
//! failed` and aborts, and a backend's `try_reserve` or a driver's allocation returns an error.
//! RLIMIT_AS was measured and rejected: it counts address space that is not memory. lavapipe's
//! worker (67 MiB resident) died of SIGSEGV under an RLIMIT_AS of 512 MiB, PoCL's could not
//! start its threads under 256 MiB, and GPU drivers reserve far more (CUDA and ROCm reserve
//! terabytes of PROT_NONE address space for unified addressing). Even on the cpu backend
//! RLIMIT_AS was erratic: vec_add n=2^24 (390 MiB resident) passed under 450 MiB and failed under
//! 500 MiB, depending on how many 64 MiB malloc arenas its threads had reserved. RLIMIT_DATA
//! ignores PROT_NONE reservations, shared mappings (device memory mapped from a driver) and
//! file mappings; vec_add n=2^24 ran under 390 MiB of it, lavapipe and PoCL start under 64 and
//! 128 MiB.
//!
//! # Recognising the end
//! - An allocation that failed under the limit: Rust's handler writes `memory allocation of N
//!   bytes failed` to stderr and aborts (SIGABRT). The parent looks for that line in the stream
//!   as it arrives (a backtrace after it may push it out of the kept tail).
//! - The kernel's OOM killer (the host's, or a cgroup's): SIGKILL that the parent did not send,
//!   while /proc/vmstat's `oom_kill` went up.
//!
//! A per-worker cgroup v2 (`memory.max` on a child cgroup) is not made: the agent's cgroup is
//! often not writable (a container, a user service) and RLIMIT_DATA needs no privilege.

use crate::host::memory::gib;

/// How a worker ran out of memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutOfMemory {
    /// An allocation of `bytes` failed (under the worker's limit, or on an exhausted host).
    AllocationFailed { bytes: u64 },
    /// The kernel's OOM killer ended the worker.
    Killed,
}

impl std::fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OutOfMemory::AllocationFailed { bytes } if *bytes < 1 << 30 => write!(
                f,
                "an allocation of {:.1} MiB failed",
                *bytes as f64 / (1u64 << 20) as f64
            ),
            OutOfMemory::AllocationFailed { bytes } => {
                write!(f, "an allocation of {} failed", gib(*bytes))
            }
            OutOfMemory::Killed => f.write_str("the kernel's OOM killer ended it (SIGKILL)"),
        }
    }
}

/// Sets the calling process's RLIMIT_DATA (soft and hard) to `bytes`.
///
/// Async-signal-safe (one `setrlimit` call), so it may run between fork and exec.
///
/// # Errors
/// The OS error of `setrlimit`.
pub fn limit_data(bytes: u64) -> std::io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: bytes as libc::rlim_t,
        rlim_max: bytes as libc::rlim_t,
    };
    // SAFETY: setrlimit reads one valid, owned rlimit struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_DATA, &lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `N` of a Rust allocation-failure line (`memory allocation of N bytes failed`).
pub fn alloc_failure_bytes(line: &str) -> Option<u64> {
    let rest = line.trim().strip_prefix("memory allocation of ")?;
    rest.strip_suffix(" bytes failed")?.parse().ok()
}

/// Whether a worker that ended by `signal` (the parent sent none) ran out of memory: it aborted
/// after printing an allocation failure, or it was SIGKILLed while the OOM-kill count rose.
pub fn out_of_memory(
    signal: Option<i32>,
    alloc_failure: Option<u64>,
    oom_kills_rose: bool,
) -> Option<OutOfMemory> {
    match (signal, alloc_failure) {
        (Some(libc::SIGABRT), Some(bytes)) => Some(OutOfMemory::AllocationFailed { bytes }),
        (Some(libc::SIGKILL), _) if oom_kills_rose => Some(OutOfMemory::Killed),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_allocation_failure_line() {
        assert_eq!(
            alloc_failure_bytes("memory allocation of 67108864 bytes failed\n"),
            Some(64 << 20)
        );
        assert_eq!(
            alloc_failure_bytes("memory allocation of many bytes failed"),
            None
        );
        assert_eq!(alloc_failure_bytes("stack backtrace:"), None);
    }

    #[test]
    fn tells_out_of_memory_from_other_deaths() {
        let abort = Some(libc::SIGABRT);
        assert_eq!(
            out_of_memory(abort, Some(1 << 30), false),
            Some(OutOfMemory::AllocationFailed { bytes: 1 << 30 })
        );
        assert_eq!(out_of_memory(abort, None, true), None, "a plain abort");
        assert_eq!(
            out_of_memory(Some(libc::SIGKILL), None, true),
            Some(OutOfMemory::Killed)
        );
        assert_eq!(out_of_memory(Some(libc::SIGKILL), None, false), None);
        assert_eq!(out_of_memory(Some(libc::SIGSEGV), Some(5), true), None);
        assert_eq!(
            OutOfMemory::AllocationFailed { bytes: 64 << 20 }.to_string(),
            "an allocation of 64.0 MiB failed"
        );
        assert_eq!(
            OutOfMemory::AllocationFailed { bytes: 3 << 30 }.to_string(),
            "an allocation of 3.0 GiB failed"
        );
    }

    #[test]
    fn the_limit_applies_to_a_child() {
        // A child process sets the limit on itself and then fails to allocate past it.
        // SAFETY: fork in a test; the child only calls async-signal-safe functions (setrlimit,
        // mmap, _exit) before exiting.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let code = match limit_data(256 << 20) {
                Err(_) => 2,
                // SAFETY: an anonymous private mapping; the result is only compared.
                Ok(()) => unsafe {
                    let p = libc::mmap(
                        std::ptr::null_mut(),
                        512 << 20,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    );
                    if p == libc::MAP_FAILED { 0 } else { 1 }
                },
            };
            // SAFETY: ends the forked child without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status));
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "the 512 MiB mapping was refused"
        );
    }
}
