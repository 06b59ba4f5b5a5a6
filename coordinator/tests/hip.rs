//! A `hip` build of the coordinator (`--features hip`) on a host without an AMD GPU: its
//! in-process agent lists HIP as unavailable with the reason and still serves the other backends,
//! and `gpufleet describe` shows that over real gRPC.
#![cfg(feature = "hip")]

mod common;
use common::{BIN, Proc};
use std::process::Command;

#[test]
fn describe_from_a_hip_build_lists_hip_unavailable_and_serves_the_rest() {
    let agent = Proc::agent(false);
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .arg("--db")
        .arg(dir.path().join("fleet.db"))
        .args(["describe", &agent.url, "--json"])
        .output()
        .unwrap();
    drop(agent);
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
