//! Who may listen where: beyond loopback the agent serves only with a bearer token that is not
//! trivially guessable, so a request from the network cannot run kernels on this host unless it
//! carries the coordinator's secret.

use std::net::SocketAddr;

/// Checks that serving on `listen` with `token` is allowed: any token (or none) on loopback;
/// beyond loopback a token of at least [`gpufleet_kernels::MIN_SECRET_CHARS`] printable ASCII characters, none of
/// them whitespace (it travels in an `authorization` header).
///
/// # Errors
/// A message naming `--token` and the bound, never quoting the token itself.
pub fn check_listen_token(listen: SocketAddr, token: Option<&str>) -> Result<(), String> {
    if listen.ip().is_loopback() {
        return Ok(());
    }

    let Some(token) = token else {
        return Err(format!(
            "--listen {listen} is not a loopback address: set --token (or GPUFLEET_TOKEN) so only your coordinator can run kernels here"
        ));
    };
    if let Some(why) = gpufleet_kernels::weak_secret(token) {
        return Err(format!(
            "--token {why} to serve beyond loopback (--listen {listen})"
        ));
    }
    Ok(())
}

/// Beyond loopback the agent serves only TLS, so its token never crosses the network in
/// plaintext.
///
/// # Errors
/// A message naming `--tls-cert`.
pub fn check_listen_tls(listen: SocketAddr, tls: bool) -> Result<(), String> {
    if listen.ip().is_loopback() || tls {
        return Ok(());
    }
    Err(format!(
        "--listen {listen} is not a loopback address: serve TLS there (--tls-cert and --tls-key) so the token never crosses the network in plaintext, or dial in to the coordinator instead (--connect)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn loopback_needs_nothing() {
        assert!(check_listen_token(addr("127.0.0.1:1"), None).is_ok());
        assert!(check_listen_token(addr("[::1]:1"), Some(" ")).is_ok());
    }

    #[test]
    fn beyond_loopback_a_real_token_is_required() {
        let any = addr("0.0.0.0:50051");
        let e = check_listen_token(any, None).unwrap_err();
        assert!(e.contains("--token") && e.contains("loopback"), "{e}");
        for weak in [
            " ",
            "",
            "short-token",
            "                    ",
            "sixteen chars!! ",
        ] {
            let e = check_listen_token(any, Some(weak)).unwrap_err();
            assert!(e.contains("at least 16"), "{weak:?}: {e}");
            assert!(weak.trim().is_empty() || !e.contains(weak.trim()), "{e}");
        }
        assert!(check_listen_token(any, Some("0123456789abcdef")).is_ok());
        assert!(check_listen_token(addr("10.0.0.5:1"), Some("tab\there-0123456789")).is_err());
    }

    #[test]
    fn beyond_loopback_tls_is_required() {
        assert!(check_listen_tls(addr("127.0.0.1:1"), false).is_ok());
        assert!(check_listen_tls(addr("0.0.0.0:1"), true).is_ok());
        let e = check_listen_tls(addr("0.0.0.0:1"), false).unwrap_err();
        assert!(e.contains("--tls-cert"), "{e}");
    }
}
