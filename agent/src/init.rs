//! The agent as its container's first process (PID 1).
//!
//! The images start `gpufleet-agent` directly (`exec` in `docker/agent-entrypoint.sh`), and hosts
//! such as RunPod start an image's entry point with no `--init`, so the agent is often PID 1. PID 1
//! inherits every orphan in the container (a helper a driver started in a worker whose process
//! group was then killed, the child of a vendor tool such as `rocm-smi`), and the kernel keeps each
//! one as a zombie until PID 1 waits for it; a process that never does fills the container's
//! process table with them. The agent cannot simply `waitpid(-1)`: that would also take its own
//! workers' exit statuses from under tokio, which waits for each worker by pid.
//!
//! So, as PID 1 only, the binary forks before anything else starts: the parent stays PID 1 as a
//! minimal init (like `docker run --init`'s): it waits for every child that ends, passes SIGTERM,
//! SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 on to the agent (`docker stop` still stops the
//! agent cleanly), and exits with the agent's status when the agent ends. The child goes on as
//! the agent, unchanged. Anywhere else (systemd, a shell, a test) nothing happens: the host's
//! init already reaps orphans.

/// The signals the init passes on to the agent.
const FORWARDED: [libc::c_int; 6] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// When this process is PID 1, becomes the init described in the module docs and returns only in
/// the forked agent; elsewhere returns at once. Call it first thing in `main`, while the process
/// has one thread (before the runtime, the logger or any spawned thread).
pub fn reap_orphans_if_pid1() {
    // SAFETY: getpid has no preconditions.
    if unsafe { libc::getpid() } != 1 {
        return;
    }
    // SAFETY: sigset_t is plain data that sigemptyset initialises; sigprocmask, fork, prctl,
    // sigwait, waitpid and kill are called with valid arguments and pointers to owned locals, in
    // a process with one thread (the caller's contract), so the forked child may go on running
    // Rust code.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in FORWARDED.into_iter().chain([libc::SIGCHLD]) {
            libc::sigaddset(&mut set, sig);
        }
        // Blocked before the fork, so that none sent in between is lost: the init takes them
        // with sigwait, the agent gets its old mask back.
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigprocmask(libc::SIG_BLOCK, &set, &mut old);
        let agent = libc::fork();
        if agent <= 0 {
            // The agent (or no fork possible: then the agent as before, reaping nothing).
            if agent == 0 {
                // The container ends with its PID 1 anyway; this makes it certain.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            }
            libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
            return;
        }
        loop {
            let mut sig: libc::c_int = 0;
            if libc::sigwait(&set, &mut sig) != 0 {
                continue;
            }
            if sig != libc::SIGCHLD {
                libc::kill(agent, sig);
                continue;
            }
            // Every child that ended: orphans, and the agent itself.
            loop {
                let mut status: libc::c_int = 0;
                let pid = libc::waitpid(-1, &mut status, libc::WNOHANG);
                if pid <= 0 {
                    break;
                }
                if pid == agent {
                    std::process::exit(exit_code(status));
                }
            }
        }
    }
}

/// The exit code of a shell for a child that ended with `status`: its code, or 128 + the signal
/// that killed it.
fn exit_code(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_init_exits_as_a_shell_would() {
        assert_eq!(exit_code(0), 0);
        assert_eq!(exit_code(2 << 8), 2);
        assert_eq!(exit_code(libc::SIGKILL), 137);
        assert_eq!(exit_code(libc::SIGTERM), 143);
    }

    #[test]
    fn nothing_happens_outside_pid_1() {
        reap_orphans_if_pid1();
        assert_ne!(std::process::id(), 1);
    }
}
