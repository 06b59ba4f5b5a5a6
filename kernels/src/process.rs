//! Process-wide behaviour the two binaries share.

/// The exit status a shell reports for a process that SIGPIPE ended: what `gpufleet results |
/// head -1` returns once `head` has gone.
pub const BROKEN_PIPE_EXIT: i32 = 141;

/// Makes a command whose output goes into a pipe that closes early (`gpufleet results | head -1`)
/// end quietly with status 141, as Unix tools do, instead of panicking on the failed write
/// (status 101). Call it first in `main`.
///
/// SIGPIPE itself stays ignored (Rust's default): with its default action restored, any write to a
/// socket whose peer has gone (tokio writes HTTP/2 frames with `writev`, which has no
/// MSG_NOSIGNAL) would kill the process, so an agent would die when a coordinator hangs up. Only
/// the panic `print!` raises on a broken stdout or stderr is turned into the quiet exit.
pub fn quiet_broken_pipes() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if is_broken_print(panic_message(info.payload())) {
            std::process::exit(BROKEN_PIPE_EXIT);
        }
        default(info);
    }));
}

/// The message a panic was raised with (`panic!("...")`'s text); empty for another payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("")
}

/// Whether a panic message is the one `print!`/`eprint!` raise on a closed pipe.
fn is_broken_print(message: &str) -> bool {
    message.starts_with("failed printing to std") && message.contains("Broken pipe")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_broken_stdout_is_quiet() {
        assert!(is_broken_print(
            "failed printing to stdout: Broken pipe (os error 32)"
        ));
        assert!(!is_broken_print(
            "failed printing to stdout: No space left on device"
        ));
        assert!(!is_broken_print("index out of bounds"));
    }
}
