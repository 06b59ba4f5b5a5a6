//! `gpufleet-agent simulate` against a real serve: 20 simulated dial-in agents over TLS with their
//! enrolment tokens, two of them planted 10 % slower; a campaign of `noop` and `copy` on all of
//! them; every job answered `ok` by a simulated device; `gpufleet outliers` names the two planted
//! agents, and only them, on `copy`.

use gpufleet_coordinator::store::{ResultFilter, Store};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};

mod common;
use common::{Serve, agent_bin, enrol, gpufleet, ok_stdout as ok, wait_for};

const AGENTS: usize = 20;
const PLANTED: [&str; 2] = ["sim-0003", "sim-0011"];

/// The simulation process, killed on drop.
struct Simulation(Child);

impl Drop for Simulation {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn simulate(args: &[&str]) -> Command {
    let mut cmd = Command::new(agent_bin());
    cmd.arg("simulate")
        .args(args)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null());
    cmd
}

fn attached(db: &Path) -> usize {
    let out = ok(&gpufleet(db, &["agents", "list", "--json"]));
    let v: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    v.iter().filter(|a| a["attached"] == true).count()
}

#[test]
fn simulated_agents_answer_a_campaign_and_the_planted_ones_are_the_outliers() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    let names: Vec<String> = (0..AGENTS).map(|i| format!("sim-{i:04}")).collect();
    let tokens: String = names
        .iter()
        .map(|n| format!("{n} {}\n", enrol(&db, n)))
        .collect();
    let tokens_file = dir.path().join("tokens.txt");
    std::fs::write(&tokens_file, tokens).unwrap();
    let serve = Serve::start(&db, dir.path());
    let state = dir.path().join("state");
    let url = format!("https://{}", serve.fleet);
    let n = AGENTS.to_string();
    let mut args = vec![
        "--agents",
        &n,
        "--tokens",
        tokens_file.to_str().unwrap(),
        "--connect",
        &url,
        "--pin-sha256",
        &serve.pin,
        "--state-dir",
        state.to_str().unwrap(),
        "--seed",
        "56",
        "--max-backoff-s",
        "1",
    ];
    let slow: Vec<String> = PLANTED.iter().map(|p| format!("{p}=0.10")).collect();
    for s in &slow {
        args.extend(["--slow", s]);
    }
    let _sim = Simulation(simulate(&args).stderr(Stdio::null()).spawn().unwrap());
    wait_for("the simulated agents to attach", 60, || {
        attached(&db) == AGENTS
    });

    let suite = dir.path().join("sim.toml");
    std::fs::write(
        &suite,
        "name = \"sim\"\n[[run]]\nkernel = \"noop\"\n[[run]]\nkernel = \"copy\"\n",
    )
    .unwrap();
    let mut run = vec![
        "run",
        "--suite",
        suite.to_str().unwrap(),
        "--backend",
        "cpu",
    ];
    for n in &names {
        run.extend(["--agent", n]);
    }
    ok(&gpufleet(&db, &run));

    let store = Store::open(&db).unwrap();
    let jobs = store.jobs(1).unwrap();
    let results = store.results(&ResultFilter::default()).unwrap();
    assert_eq!(jobs.len(), 2 * AGENTS, "noop and copy on every agent");
    assert_eq!(results.len(), jobs.len(), "one result per job");
    for r in &results {
        assert_eq!(r.record.status, "ok", "{:?}", r.record);
        assert_eq!(
            r.device_name.as_deref(),
            Some("Simulated device (gpufleet-agent simulate)")
        );
        assert_eq!(r.record.backend, "cpu");
        assert!(
            r.record.metric_value.is_some_and(|v| v > 0.0),
            "{:?}",
            r.record
        );
    }
    let by_agent: BTreeSet<&str> = results.iter().map(|r| r.agent.as_str()).collect();
    assert_eq!(by_agent.len(), AGENTS, "every simulated agent answered");
    // Every result was acknowledged, so every outbox is empty again.
    wait_for("empty outboxes", 10, || {
        names.iter().all(|n| {
            std::fs::read_dir(state.join(n).join("outbox"))
                .unwrap()
                .count()
                == 0
        })
    });

    let out = gpufleet(&db, &["outliers", "--json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "exit 1 when there are outliers\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let groups = v["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "one sibling group: {stdout}");
    assert_eq!(groups[0]["devices"], AGENTS, "{stdout}");
    let on_copy: BTreeSet<&str> = groups[0]["specs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["spec_key"].as_str().unwrap().starts_with("copy/"))
        .flat_map(|s| s["outliers"].as_array().unwrap())
        .map(|o| o["agent"].as_str().unwrap())
        .collect();
    assert_eq!(on_copy, BTreeSet::from(PLANTED), "{stdout}");
}

#[test]
fn a_simulated_agent_without_a_token_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.txt");
    std::fs::write(&tokens, "sim-0000 t0\nsim-0002 t2\n").unwrap();
    let out = simulate(&[
        "--agents",
        "3",
        "--tokens",
        tokens.to_str().unwrap(),
        "--connect",
        "http://127.0.0.1:9",
        "--state-dir",
        dir.path().to_str().unwrap(),
    ])
    .stderr(Stdio::piped())
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no token for sim-0001"), "{stderr}");
}
