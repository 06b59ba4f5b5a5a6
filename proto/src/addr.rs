//! `HOST:PORT` on the command line: the one parser behind every address flag of both binaries
//! (`gpufleet-agent --listen` and `--metrics-listen`, `gpufleet serve --listen` and
//! `--fleet-listen`, `gpufleet healthz --addr`), so that `localhost:50051` is accepted where a
//! bare [`SocketAddr`] parse refuses every name. No clap here: clap takes the function as a
//! `value_parser`.

use std::net::{SocketAddr, ToSocketAddrs};

/// What every refusal offers as the accepted forms.
const EXAMPLES: &str = "e.g. 127.0.0.1:50051, localhost:50051 or [::1]:50051";

/// Most bytes of the input a refusal quotes (a mistyped flag can carry a whole file).
const QUOTE_MAX_BYTES: usize = 40;

/// Parses `HOST:PORT` into the address to bind or dial. HOST is an IPv4 address, an IPv6 address
/// in brackets (`[::1]`), or a name resolved by the system resolver (`/etc/hosts`, DNS). A name
/// that resolves to both families gives its first IPv4 address: `localhost` is `::1` first on
/// many systems, and serving on 127.0.0.1 keeps it the same loopback the defaults
/// (`127.0.0.1:50051`) and the docs name, which every client dialing `localhost` reaches.
///
/// # Errors
/// A message naming what is wrong (no port, a port that is not 0 to 65535, an IPv6 address
/// without brackets, a name that does not resolve) and quoting at most 40 bytes of the input.
pub fn parse_host_port(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let whole = quote(text);
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(format!("{whole} is not HOST:PORT ({EXAMPLES})"));
    };
    if host.is_empty() {
        return Err(format!("{whole} has no host before the port ({EXAMPLES})"));
    }
    let port: u16 = port.parse().map_err(|_| {
        format!(
            "{whole}: the port {} is not a number from 0 to 65535",
            quote(port)
        )
    })?;
    if host.starts_with('[') || host.ends_with(']') {
        return Err(format!(
            "{whole}: {} is not an IPv6 address in brackets ({EXAMPLES})",
            quote(host)
        ));
    }
    if host.contains(':') {
        return Err(format!(
            "{whole}: an IPv6 address goes in brackets, as in [::1]:{port}"
        ));
    }
    let resolved: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{whole}: cannot resolve the host {}: {e}", quote(host)))?
        .collect();
    resolved
        .iter()
        .find(|a| a.is_ipv4())
        .or(resolved.first())
        .copied()
        .ok_or_else(|| format!("{whole}: the host {} has no address", quote(host)))
}

/// `s` in backquotes, cut to [`QUOTE_MAX_BYTES`] at a character boundary (`` `aaa…` ``).
fn quote(s: &str) -> String {
    if s.len() <= QUOTE_MAX_BYTES {
        return format!("`{s}`");
    }
    let mut end = QUOTE_MAX_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("`{}…`", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    #[test]
    fn addresses_and_names_parse() {
        assert_eq!(
            parse_host_port("127.0.0.1:50051"),
            Ok(SocketAddr::from(([127, 0, 0, 1], 50051)))
        );
        assert_eq!(
            parse_host_port("0.0.0.0:0"),
            Ok(SocketAddr::from(([0, 0, 0, 0], 0)))
        );
        let v6 = parse_host_port("[::1]:7443").unwrap();
        assert!(v6.is_ipv6() && v6.ip().is_loopback() && v6.port() == 7443);
        // `localhost` is the IPv4 loopback even where it resolves to ::1 as well (or first).
        let local = parse_host_port("localhost:50051").unwrap();
        assert_eq!(local.ip(), IpAddr::V4(Ipv4Addr::LOCALHOST), "{local}");
        assert_eq!(local.port(), 50051);
        assert_eq!(parse_host_port(" localhost:0 ").unwrap().port(), 0);
    }

    #[test]
    fn refusals_say_what_is_wrong_and_quote_little() {
        let err = |s: &str| parse_host_port(s).unwrap_err();
        assert_eq!(
            err("foo"),
            "`foo` is not HOST:PORT (e.g. 127.0.0.1:50051, localhost:50051 or [::1]:50051)"
        );
        assert!(
            err("50051").contains("is not HOST:PORT"),
            "{}",
            err("50051")
        );
        assert!(err(":50051").contains("has no host"), "{}", err(":50051"));
        let e = err("localhost:http");
        assert!(e.contains("the port `http` is not a number"), "{e}");
        let e = err("127.0.0.1:70000");
        assert!(e.contains("the port `70000`"), "{e}");
        let e = err("::1:50051");
        assert!(e.contains("goes in brackets, as in [::1]:50051"), "{e}");
        let e = err("[nope]:50051");
        assert!(e.contains("`[nope]` is not an IPv6 address"), "{e}");
        let e = err("no-such-host.invalid:50051");
        assert!(
            e.starts_with(
                "`no-such-host.invalid:50051`: cannot resolve the host `no-such-host.invalid`"
            ),
            "{e}"
        );
        let long = format!("{}:1", "é".repeat(100));
        let e = err(&long);
        assert!(e.len() < 200, "{} bytes: {e}", e.len());
        assert!(e.starts_with("`éé") && e.contains("…`"), "{e}");
    }
}
