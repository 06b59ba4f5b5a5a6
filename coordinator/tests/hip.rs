//! A `hip` build of the coordinator (`--features hip`) on a host without an AMD GPU: its
//! in-process agent lists HIP as unavailable with the reason and still serves the other backends,
//! and `gpufleet describe` shows that over real gRPC.
#![cfg(feature = "hip")]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_gpufleet");

#[test]
fn describe_from_a_hip_build_lists_hip_unavailable_and_serves_the_rest() {
    let mut agent = Command::new(BIN)
        .args(["serve-agent", "--listen", "127.0.0.1:0"])
        .env(
            "GPUFLEET_CACHE_DIR",
            std::env::temp_dir().join("gpufleet-hip-cache"),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(agent.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .arg("--db")
        .arg(dir.path().join("fleet.db"))
        .args(["describe", &format!("http://{addr}"), "--json"])
        .output()
        .unwrap();
    let _ = agent.kill();
    let _ = agent.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let backends = info["backends"].as_array().unwrap();
    let hip = backends
        .iter()
        .find(|b| b["name"] == "hip")
        .unwrap_or_else(|| panic!("no hip backend listed: {info}"));
    assert_eq!(hip["available"], serde_json::Value::Bool(false), "{hip}");
    assert_eq!(hip["reason"], "no HIP device (hipErrorNoDevice)", "{hip}");
    let cpu = backends.iter().find(|b| b["name"] == "cpu").unwrap();
    assert_eq!(cpu["available"], serde_json::Value::Bool(true));
    let devices = info["devices"].as_array().unwrap();
    assert!(devices.iter().any(|d| d["id"] == "cpu:0"), "{info}");
    assert!(devices.iter().all(|d| d["backend"] != "hip"));
}
