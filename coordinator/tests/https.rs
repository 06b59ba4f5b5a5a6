//! The HTTPS API keeps answering while clients hold connections open without a TLS handshake:
//! each handshake runs apart from the accept loop, with its deadline.

use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;
use common::{BIN, Serve};

#[test]
fn idle_connections_do_not_hold_up_a_client_of_the_https_api() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    let tls = dir.path().join("tls");
    let serve = Serve::with_args(&db, &["--tls-self-signed", tls.to_str().unwrap()]);
    let healthz = || {
        let started = Instant::now();
        let out = Command::new(BIN)
            .args(["healthz", "--addr", &serve.http, "--tls-dir"])
            .arg(&tls)
            .output()
            .unwrap();
        (out, started.elapsed())
    };
    let (out, _) = healthz();
    assert!(out.status.success(), "{out:?}");
    // 200 connections that never say a word (no ClientHello), all open at once.
    let idle: Vec<TcpStream> = (0..200)
        .map(|_| TcpStream::connect(&serve.http).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let (out, took) = healthz();
    assert!(out.status.success(), "{out:?}");
    // Handshakes in the accept loop once made this wait 10 s per idle connection ahead of it.
    assert!(
        took < Duration::from_secs(5),
        "healthz took {took:?} beside {} idle connections",
        idle.len()
    );
    drop(idle);
}
