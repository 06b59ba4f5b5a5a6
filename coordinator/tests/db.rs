//! `gpufleet db backup/stats/restore` as a user runs them, with a real `gpufleet serve` holding the
//! database.

use std::process::Command;

mod common;
use common::{BIN, Proc, gpufleet, ok_stdout as ok};

#[test]
fn backup_stats_and_a_restore_that_waits_for_the_serve() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    let backup = dir.path().join("backup.db");
    ok(&gpufleet(
        &db,
        &["agents", "add", "kept", "http://127.0.0.1:50051"],
    ));

    let mut cmd = Command::new(BIN);
    cmd.arg("--db")
        .arg(&db)
        .args(["serve", "--listen", "127.0.0.1:0"]);
    let mut serve = Proc::start(cmd);

    // A backup while the serve runs.
    let out = gpufleet(&db, &["db", "backup", backup.to_str().unwrap(), "--json"]);
    let summary: serde_json::Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(summary["results"], 0);
    assert_eq!(
        summary["bytes"].as_u64(),
        Some(std::fs::metadata(&backup).unwrap().len())
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("100%"));
    let again = gpufleet(&db, &["db", "backup", backup.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));

    let stats: serde_json::Value =
        serde_json::from_str(&ok(&gpufleet(&db, &["db", "stats", "--json"]))).unwrap();
    let agents = stats["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "agents")
        .expect("agents listed");
    assert_eq!(agents["rows"], 1);
    assert!(ok(&gpufleet(&db, &["db", "stats"])).contains("total"));

    ok(&gpufleet(
        &db,
        &["agents", "add", "later", "http://127.0.0.1:50052"],
    ));
    let refused = gpufleet(&db, &["db", "restore", backup.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(err.contains("a running gpufleet serve owns"), "{err}");
    assert!(err.contains("stop it first"), "{err}");

    serve.signal("-TERM");
    assert!(serve.child.wait().unwrap().success());
    let text = ok(&gpufleet(&db, &["db", "restore", backup.to_str().unwrap()]));
    assert!(text.contains("fleet.db.before-restore"), "{text}");
    let agents = ok(&gpufleet(&db, &["agents", "list", "--json"]));
    assert!(agents.contains("\"kept\""), "{agents}");
    assert!(!agents.contains("\"later\""), "{agents}");
}
