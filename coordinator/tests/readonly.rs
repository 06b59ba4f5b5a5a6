//! Read-only commands on a database the user cannot write (a file and directory without write
//! permission), on a path where there is no database, and on a file that is none.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};

mod common;
use common::{BIN, gpufleet, ok_stdout as ok};

/// `gpufleet ARGS` as an unprivileged user when this runs as root (root ignores permissions).
fn as_user(args: &[&str]) -> Option<Output> {
    // SAFETY: geteuid takes no arguments, always succeeds and only reads this process's
    // credentials.
    let root = unsafe { libc::geteuid() } == 0;
    let mut cmd = if root {
        if Command::new("setpriv").arg("--help").output().is_err() {
            return None;
        }
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN]);
        c
    } else {
        Command::new(BIN)
    };
    Some(cmd.args(args).output().unwrap())
}

#[test]
fn read_only_commands_read_a_database_nobody_may_write() {
    let dir = tempfile::Builder::new()
        .prefix("gpufleet-ro")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let db = dir.path().join("ro.db");
    ok(&gpufleet(
        &db,
        &["agents", "add", "rig", "http://127.0.0.1:50051"],
    ));
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o444)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o555)).unwrap();
    let path = db.to_str().unwrap();
    let Some(list) = as_user(&["--db", path, "agents", "list", "--json"]) else {
        eprintln!("skipped: running as root without setpriv, so permissions cannot be tested");
        return;
    };
    let text = ok(&list);
    assert!(text.contains("\"rig\""), "{text}");
    for args in [&["results"][..], &["campaigns"], &["schedule", "list"]] {
        let out = as_user(&[&["--db", path][..], args].concat()).unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
    }
    // It reads, and says there is nothing to compare (exit 1), not that it cannot open the file.
    let out = as_user(&["--db", path, "compare"]).unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no results yet"));
    let out = as_user(&["--db", path, "agents", "add", "x", "http://127.0.0.1:1"]).unwrap();
    assert!(
        !out.status.success(),
        "a write to a read-only database failed"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "nothing was created next to it"
    );
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_mistyped_database_path_is_an_error_not_an_empty_database() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("typo.db");
    for args in [&["results"][..], &["agents", "list"], &["compare"]] {
        let out = gpufleet(&missing, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("no gpufleet database"), "{err}");
        assert!(!missing.exists(), "{args:?} created {}", missing.display());
    }
}

/// An empty file (a `touch`, a copy that failed, a volume mounted before its data) makes every
/// read command exit 2 saying what the file is and how to make a database of it, never SQLite's
/// "Query returned no rows"; a file that is not SQLite and a missing path stay as clear.
#[test]
fn a_file_that_holds_no_database_is_an_error_saying_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, b"not a database\n").unwrap();
    let missing = dir.path().join("typo.db");
    let cases: [(&std::path::Path, &str); 3] = [
        (
            &empty,
            "is an empty file (0 bytes), not a gpufleet database: run `gpufleet serve --db",
        ),
        (&text, "is not a gpufleet database (not an SQLite file)"),
        (&missing, "no gpufleet database here"),
    ];
    for (db, expected) in cases {
        for args in [
            &["agents", "list"][..],
            &["results"],
            &["compare"],
            &["describe", "rig"],
        ] {
            let out = gpufleet(db, args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{args:?} on {}: {err}",
                db.display()
            );
            assert!(err.contains(expected), "{args:?}: {err}");
            assert!(!err.contains("no rows"), "{args:?}: {err}");
        }
    }
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0, "left empty");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        2,
        "nothing created"
    );
    // A command that writes makes the empty file a database, as the message says.
    ok(&gpufleet(
        &empty,
        &["agents", "add", "rig", "http://127.0.0.1:50051"],
    ));
    assert!(ok(&gpufleet(&empty, &["agents", "list"])).contains("rig"));
}
