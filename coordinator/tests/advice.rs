//! The commands the CLI prints as advice work as printed: `agents add NAME --dial-in`'s agent
//! command attaches an agent to a real serve over pinned TLS with no secret on its command line,
//! and a stopped local agent (the demo's, after the demo) is refused before anything is stored,
//! with a command that starts one.

use gpufleet_coordinator::store::{ResultFilter, Store};
use std::path::Path;
use std::process::{Command, Stdio};

mod common;
use common::{BIN, Serve, agent_bin, gpufleet, ok_stdout as ok, wait_for};

/// The lines of `text` that start (after indentation) with `program `, split into arguments.
fn printed_commands(text: &str, program: &str) -> Vec<Vec<String>> {
    text.lines()
        .map(str::trim)
        .filter(|l| l.starts_with(&format!("{program} ")))
        .map(|l| {
            // A trailing `&` (run in the background) is the shell's, not the program's.
            let l = l.trim_end_matches('&').trim_end();
            l.split_whitespace().skip(1).map(String::from).collect()
        })
        .collect()
}

fn attached(db: &Path, name: &str) -> bool {
    let v: Vec<serde_json::Value> =
        serde_json::from_str(&ok(&gpufleet(db, &["agents", "list", "--json"]))).unwrap();
    v.iter().any(|a| a["name"] == name && a["attached"] == true)
}

#[test]
fn enrolment_advice_attaches_an_agent_as_printed_and_keeps_the_token_off_command_lines() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    let serve = Serve::start(&db, dir.path());
    let connect = format!("https://{}", serve.fleet);
    let tls = dir.path().join("tls");
    let enrol = |name: &str, extra: &[&str]| {
        let mut cmd = Command::new(BIN);
        cmd.arg("--db")
            .arg(&db)
            .args(["agents", "add", name, "--dial-in", "--connect", &connect])
            .args(extra)
            .env("GPUFLEET_TLS_SELF_SIGNED", &tls)
            .env_remove("GPUFLEET_TLS_CERT");
        ok(&cmd.output().unwrap())
    };

    // Printed once, on its own line: the token; every printed command is without it, and
    // agent.toml's lines carry the serve's pin.
    let shown = enrol("shown", &[]);
    let token = shown
        .lines()
        .find_map(|l| l.strip_prefix("token (shown once; only its hash is stored): "))
        .expect("the token line")
        .to_string();
    assert_eq!(shown.matches(&token).count(), 1, "{shown}");
    assert!(
        shown.contains(&format!("pin_sha256 = \"{}\"", serve.pin)),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("connect = \"{connect}\"")),
        "{shown}"
    );

    // With --token-out the token is only in the file (mode 600), and the agent command the
    // advice prints, run exactly as printed, attaches.
    let file = dir.path().join("rig.token");
    let text = enrol("rig", &["--token-out", file.to_str().unwrap()]);
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(!text.contains(written.trim()), "{text}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let commands = printed_commands(&text, "gpufleet-agent");
    let [args] = commands.as_slice() else {
        panic!("one gpufleet-agent command expected: {text}");
    };
    assert!(!args.iter().any(|a| a == "--token"), "{args:?}");
    let state = tempfile::tempdir().unwrap();
    let mut agent = Command::new(agent_bin())
        .args(args)
        .env("XDG_STATE_HOME", state.path())
        .env(
            "GPUFLEET_CACHE_DIR",
            std::env::temp_dir().join("gpufleet-test-cache"),
        )
        .env_remove("GPUFLEET_LISTEN")
        .env_remove("GPUFLEET_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the advised agent to attach", 60, || attached(&db, "rig"));
    let _ = agent.kill();
    let _ = agent.wait();

    // A file that exists is not overwritten, and nothing is enrolled.
    let out = Command::new(BIN)
        .arg("--db")
        .arg(&db)
        .args(["agents", "add", "again", "--dial-in", "--token-out"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--token-out"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), written);
    let listed = ok(&gpufleet(&db, &["agents", "list"]));
    assert!(!listed.contains("again"), "{listed}");
}

#[test]
fn a_stopped_demo_agent_is_refused_before_anything_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    // The demo registers its in-process agent as `local` on a loopback port that goes with it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    ok(&gpufleet(
        &db,
        &[
            "agents",
            "add",
            "local",
            &format!("http://127.0.0.1:{port}"),
        ],
    ));
    let out = gpufleet(&db, &["run", "--agent", "local", "--suite", "smoke"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("`gpufleet demo`'s in-process agent"), "{err}");
    assert!(err.contains("nothing was run or stored"), "{err}");
    let store = Store::open(&db).unwrap();
    assert!(store.campaigns().unwrap().is_empty());
    assert!(store.results(&ResultFilter::default()).unwrap().is_empty());

    // The command it gives parses as printed (here with `describe`, which serves nothing).
    let commands = printed_commands(&err, "gpufleet-agent");
    let [args] = commands.as_slice() else {
        panic!("one gpufleet-agent command expected: {err}");
    };
    let described = Command::new(agent_bin())
        .args(args)
        .arg("describe")
        .env(
            "GPUFLEET_CACHE_DIR",
            std::env::temp_dir().join("gpufleet-test-cache"),
        )
        .output()
        .unwrap();
    assert!(
        described.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&described.stderr)
    );
    for (i, cmd) in printed_commands(&err, "gpufleet").iter().enumerate() {
        // `agents add NAME URL` as printed, into another database.
        let other = dir.path().join(format!("advice-{i}.db"));
        let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
        ok(&gpufleet(&other, &args));
    }
}
