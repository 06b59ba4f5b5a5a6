//! What scripts see: exit statuses, broken pipes, plain logs.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

mod common;
use common::{BIN, Proc, gpufleet, ok_stdout as ok};

fn seeded() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    ok(&gpufleet(
        &db,
        &["seed-history", "--nights", "10", "--specs", "4"],
    ));
    (dir, db)
}

/// `gpufleet results | head -1`: the reader goes away after one line; gpufleet ends quietly
/// (141, as a shell reports SIGPIPE, or 0 if it had written everything), never with a panic
/// (101).
#[test]
fn a_closed_pipe_ends_the_listing_quietly() {
    let (_dir, db) = seeded();
    for args in [&["results"][..], &["results", "--json"], &["compare"]] {
        let mut child = Command::new(BIN)
            .arg("--db")
            .arg(&db)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert!(!first.is_empty(), "{args:?} printed nothing");
        // The read end is dropped here, like `head -1` exiting.
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() || out.status.code() == Some(141),
            "{args:?}: {:?} {stderr}",
            out.status
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn compare_of_nothing_exits_1_with_the_reason() {
    let (_dir, db) = seeded();
    let out = gpufleet(&db, &["compare", "--campaign", "99"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no campaign 99"));
    // A kernel the catalog lacks is a usage error that lists the kernels; an agent no result
    // has lists the registered ones; a real filter that matches nothing says so.
    let out = gpufleet(&db, &["compare", "--kernel", "sofmax"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        err.contains("unknown kernel `sofmax`") && err.contains("softmax"),
        "{err}"
    );
    let out = gpufleet(&db, &["compare", "--agent", "nosuch"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        err.contains("no results of an agent named `nosuch`"),
        "{err}"
    );
    let out = gpufleet(&db, &["compare", "--kernel", "debug_hang"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        err.contains("stored results match --kernel debug_hang"),
        "{err}"
    );
    // `results` says the same instead of printing an empty table.
    let out = gpufleet(&db, &["results", "--agent", "nosuch"]);
    let (table, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(table.trim().is_empty(), "{table}");
    assert!(
        err.contains("no results of an agent named `nosuch`"),
        "{err}"
    );
    let out = gpufleet(&db, &["compare", "--campaign", "3"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// Logs written to a pipe or a file carry no terminal colour codes.
#[test]
fn logs_to_a_pipe_are_plain_text() {
    let out = Command::new(BIN)
        .args(["describe", "http://127.0.0.1:1", "--json"])
        .env("RUST_LOG", "debug")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.is_empty(), "debug logging printed nothing");
    assert!(
        !stderr.contains('\u{1b}'),
        "ANSI codes in a piped log: {stderr:?}"
    );
}

/// README: every listing command takes `--json` and `--format table|md|csv|json`.
#[test]
fn every_listing_takes_json_and_every_format() {
    let (_dir, db) = seeded();
    let listings: [&[&str]; 6] = [
        &["results"],
        &["compare"],
        &["campaigns"],
        &["agents", "list"],
        &["schedule", "list"],
        &["regressions", "--all"],
    ];
    for listing in listings {
        let json = ok(&gpufleet(&db, &[listing, &["--json"]].concat()));
        let same = ok(&gpufleet(&db, &[listing, &["--format", "json"]].concat()));
        assert_eq!(json, same, "{listing:?}");
        serde_json::from_str::<serde_json::Value>(&json)
            .unwrap_or_else(|e| panic!("{listing:?} --json: {e}: {json}"));
        let md = ok(&gpufleet(&db, &[listing, &["--format", "md"]].concat()));
        assert!(
            md.lines().nth(1).is_some_and(|l| l.starts_with("|")),
            "{listing:?} md: {md}"
        );
        let csv = ok(&gpufleet(&db, &[listing, &["--format", "csv"]].concat()));
        let header = csv.lines().next().unwrap_or_default();
        assert!(header.contains(','), "{listing:?} csv: {csv}");
    }
}

/// `run --agent ok --agent down`: the reachable agent's results are stored, the unreachable
/// agent gets an `unreachable` row, and the exit status is 1 with the unreachable agent named, so
/// CI does not read it as a pass. An agent that was reached before and is down now gets a row
/// for every run it would have had.
#[test]
fn a_run_with_an_unreachable_agent_exits_1() {
    let mut agent = Proc::agent(false);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    ok(&gpufleet(&db, &["agents", "add", "up", &agent.url]));
    ok(&gpufleet(
        &db,
        &["agents", "add", "down", "http://127.0.0.1:1"],
    ));
    let out = gpufleet(
        &db,
        &[
            "run",
            "--agent",
            "up",
            "--agent",
            "down",
            "--kernel",
            "noop",
            "--backend",
            "cpu",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("unreachable") && stderr.contains("down"),
        "{stderr}"
    );
    let stored = ok(&gpufleet(&db, &["results", "--json"]));
    let rows: Vec<serde_json::Value> = serde_json::from_str(&stored).unwrap();
    let status_of = |agent: &str| -> Vec<String> {
        rows.iter()
            .filter(|r| r["agent"] == agent)
            .map(|r| r["status"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(status_of("up"), ["ok"], "{stored}");
    assert_eq!(status_of("down"), ["unreachable"], "{stored}");
    let down = rows.iter().find(|r| r["agent"] == "down").unwrap();
    assert!(
        down["message"]
            .as_str()
            .unwrap()
            .contains("never described its devices"),
        "{down}"
    );
    let only = ok(&gpufleet(&db, &["results", "--status", "unreachable"]));
    assert!(only.contains("down") && !only.contains(" up "), "{only}");

    // Known devices, agent gone: one unreachable row per run it would have had.
    agent.kill();
    let out = gpufleet(
        &db,
        &[
            "run",
            "--agent",
            "up",
            "--kernel",
            "noop",
            "--backend",
            "cpu",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&ok(&gpufleet(
        &db,
        &["results", "--campaign", "2", "--json"],
    )))
    .unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (
            &rows[0]["status"],
            &rows[0]["kernel"],
            &rows[0]["device_id"]
        ),
        (&"unreachable".into(), &"noop".into(), &"cpu:0".into())
    );
}

/// `schedule run-now` with its agent down: an `unreachable` row is stored and the exit status is
/// 1, so a nightly job that gates on it fails; the results table names dtype, mode, env set and
/// backend of every row.
#[test]
fn run_now_with_an_agent_down_exits_1_and_stores_why() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    ok(&gpufleet(
        &db,
        &["agents", "add", "down", "http://127.0.0.1:1"],
    ));
    ok(&gpufleet(
        &db,
        &[
            "schedule",
            "add",
            "nightly",
            "--cron",
            "0 3 * * *",
            "--suite",
            "smoke",
            "--agent",
            "down",
        ],
    ));
    let out = gpufleet(&db, &["schedule", "run-now", "nightly"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let table = ok(&gpufleet(&db, &["results", "--status", "unreachable"]));
    assert!(
        table.contains("down") && table.contains("unreachable"),
        "{table}"
    );
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap()
        .split("  ")
        .map(str::trim)
        .collect();
    for column in ["dtype", "mode", "env set", "backend", "±ci %", "rcv %"] {
        assert!(header.contains(&column), "{column} missing: {header:?}");
    }
}

/// Two agents on loopback: `compare --by device` is one row per spec and one column per device,
/// narrow enough for a terminal; `--baseline` gives % changes; `--by backend|agent` pivot the
/// other ways; a baseline that names nothing is a usage error.
#[test]
fn compare_is_a_matrix_that_fits_a_terminal() {
    let (mut a, mut b) = (Proc::agent(false), Proc::agent(false));
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    ok(&gpufleet(&db, &["agents", "add", "rig1", &a.url]));
    ok(&gpufleet(&db, &["agents", "add", "rig2", &b.url]));
    // cpu and, where PoCL is installed, OpenCL: up to four device columns.
    let opencl = std::path::Path::new("/etc/OpenCL/vendors").exists();
    let mut args = vec![
        "run",
        "--agent",
        "rig1",
        "--agent",
        "rig2",
        "--suite",
        "smoke",
        "--backend",
        "cpu",
    ];
    if opencl {
        args.extend(["--backend", "opencl"]);
    }
    let out = gpufleet(&db, &args);
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Agents whose stdout reader is gone and whose coordinator hangs up after each call keep
    // serving (a write to a closed socket must not kill them with SIGPIPE).
    for agent in [&mut a, &mut b] {
        assert!(agent.child.try_wait().unwrap().is_none(), "an agent died");
    }
    let table = ok(&gpufleet(&db, &["compare", "--by", "device"]));
    assert!(!table.contains("unreachable"), "{table}");
    let header = table.lines().next().unwrap();
    let columns: Vec<&str> = header
        .split_whitespace()
        .filter(|h| h.starts_with("rig"))
        .collect();
    assert_eq!(columns.len(), if opencl { 4 } else { 2 }, "{table}");
    let widest = table.lines().map(|l| l.chars().count()).max().unwrap();
    assert!(widest <= 120, "{widest} columns wide:\n{table}");
    // One row per spec: gemm's three variants at one size are three rows, not six.
    assert_eq!(
        table.lines().filter(|l| l.starts_with("gemm/")).count(),
        3,
        "{table}"
    );
    let base = ok(&gpufleet(&db, &["compare", "--baseline", "rig1:cpu:0"]));
    assert!(base.contains("% change against rig1:cpu:0"), "{base}");
    assert!(
        base.lines().any(|l| l.contains('%') && (l.contains('▲') || l.contains('▼') || l.contains("±0.0%"))),
        "{base}"
    );
    let by_backend = ok(&gpufleet(&db, &["compare", "--by", "backend"]));
    assert!(
        by_backend.lines().next().unwrap().contains("agent"),
        "{by_backend}"
    );
    let by_agent = ok(&gpufleet(&db, &["compare", "--by", "agent"]));
    assert!(
        by_agent.lines().next().unwrap().contains("rig2"),
        "{by_agent}"
    );
    // Against an earlier campaign of the same devices.
    let campaign = ok(&gpufleet(
        &db,
        &["compare", "--baseline", "1", "--format", "csv"],
    ));
    assert!(
        campaign.lines().next().unwrap().contains("change_pct"),
        "{campaign}"
    );
    let out = gpufleet(&db, &["compare", "--baseline", "rig9:cuda:0"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("rig1:cpu:0"));
}

/// Mistakes in `run`'s arguments are refused before any agent is contacted or anything stored,
/// each said once.
#[test]
fn run_arguments_are_checked_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    ok(&gpufleet(
        &db,
        &["agents", "add", "far", "http://127.0.0.1:1"],
    ));
    let cases: [(&[&str], &str); 3] = [
        (
            &["--kernel", "noop", "--backend", "cuda"],
            "invalid value 'cuda' for '--backend",
        ),
        (
            &["--suite", "smoke", "--variant", "naive"],
            "cannot be used with",
        ),
        (
            &["--suite", "smoke", "--param", "n=4"],
            "cannot be used with",
        ),
    ];
    for (args, want) in cases {
        let out = gpufleet(&db, &[&["run", "--agent", "far"][..], args].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(
            !err.contains("cannot reach"),
            "{args:?} checked only after dialing: {err}"
        );
    }
    let out = gpufleet(&db, &["run", "--agent", "far", "--kernel", "sofmax"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.matches("unknown kernel").count(), 1, "said once: {err}");
    assert!(err.contains("softmax") && !err.contains("debug_"), "{err}");
    let campaigns = ok(&gpufleet(&db, &["campaigns", "--json"]));
    assert_eq!(campaigns.trim(), "[]", "nothing stored");
}

/// A schedule of a suite file works from any directory, and says "never" before its first slot.
#[test]
fn schedules_keep_the_suite_file_absolute_and_list_never_before_the_first_slot() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    std::fs::write(
        dir.path().join("mine.toml"),
        "name = \"mine\"\n[[run]]\nkernel = \"noop\"\n",
    )
    .unwrap();
    ok(&gpufleet(
        &db,
        &["agents", "add", "rig", "http://127.0.0.1:1"],
    ));
    let out = Command::new(BIN)
        .current_dir(dir.path())
        .args(["--db", db.to_str().unwrap(), "schedule", "add", "nightly"])
        .args([
            "--cron",
            "0 3 * * *",
            "--suite",
            "mine.toml",
            "--agent",
            "rig",
            "--backend",
            "vulkan",
            "--env-set",
            "stock:",
            "--env-set",
            "fast:RADV_PERFTEST=sam",
        ])
        .output()
        .unwrap();
    ok(&out);
    let listed = ok(&gpufleet(&db, &["schedule", "list", "--json"]));
    let abs = dir.path().canonicalize().unwrap().join("mine.toml");
    assert!(
        listed.contains(&format!("\"{}\"", abs.display())),
        "{listed}"
    );
    // The content is stored: deleting the file changes nothing for the schedule.
    let v: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert!(
        v[0]["spec"]["suite_toml"]
            .as_str()
            .unwrap()
            .contains("kernel = \"noop\""),
        "{listed}"
    );
    assert_eq!(v[0]["spec"]["suite_sha256"].as_str().unwrap().len(), 64);
    std::fs::remove_file(dir.path().join("mine.toml")).unwrap();
    let out = gpufleet(&db, &["schedule", "run-now", "nightly"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("mine.toml") && stderr.contains("1 results (1 not ok)"),
        "the stored suite ran (on an unreachable agent): {stderr}"
    );
    let table = ok(&gpufleet(&db, &["schedule", "list"]));
    let row = table.lines().find(|l| l.starts_with("nightly")).unwrap();
    assert!(row.contains("never"), "{table}");
    // Its filters and env sets are shown, not only its suite.
    assert!(
        row.contains("backend vulkan; env sets stock,fast"),
        "{table}"
    );
}

/// `compare --format csv` and `results --format csv` (with and without `--samples`) load with
/// Python's `csv` module and `float()` on every numeric column (empty allowed).
#[test]
fn csv_exports_are_numbers() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipped: no python3");
        return;
    }
    let (_dir, db) = seeded();
    let check = r#"
import csv, sys
numeric = set(sys.argv[1].split(","))
rows = list(csv.DictReader(sys.stdin))
assert rows, "no rows"
missing = numeric - set(rows[0])
assert not missing, f"columns missing: {missing}"
for r in rows:
    for k in numeric:
        if r[k] != "":
            float(r[k])
print(len(rows))
"#;
    for (args, numeric) in [
        (
            &["compare", "--format", "csv"][..],
            "metric,pct_of_peak,cv_pct,ci_pct,relative,baseline,change_pct,avg_w,metric_per_w,j_per_unit,iterations,result_id",
        ),
        (
            &["results", "--format", "csv"],
            "result_id,campaign,metric,pct_of_peak,median_ms,p10_ms,p90_ms,ci_low_ms,ci_high_ms,ci_pct,target_ci_pct,cv_pct,iterations,created_at",
        ),
        (
            &["results", "--format", "csv", "--samples"],
            "iteration,seconds",
        ),
    ] {
        let text = ok(&gpufleet(&db, args));
        let mut py = Command::new("python3")
            .args(["-c", check, numeric])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        py.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        let out = py.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            text.lines().take(3).collect::<Vec<_>>().join("\n")
        );
    }
}

/// `regressions --all` says which spec on which device of which agent each verdict is about.
#[test]
fn every_verdict_names_its_spec_device_and_agent() {
    let (_dir, db) = seeded();
    let table = ok(&gpufleet(&db, &["regressions", "--all"]));
    let verdicts: Vec<&str> = table
        .lines()
        .filter(|l| l.contains(" stable ") || l.contains(" no_verdict "))
        .collect();
    assert!(!verdicts.is_empty(), "{table}");
    for line in verdicts {
        assert!(
            line.contains("seed-a") && line.contains("gemm/tiled/"),
            "{line}"
        );
    }
}

/// A suite's mistakes are said once, with file, line and field, and a refused environment
/// override is refused before any campaign is made.
#[test]
fn suite_errors_are_said_once_and_before_any_campaign() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    ok(&gpufleet(
        &db,
        &["agents", "add", "far", "http://127.0.0.1:1"],
    ));
    let cases = [
        (
            "name = \"a\"\n[[run]]\nkernel = \"sofmax\"\n",
            "a.toml:3: field `kernel`: unknown kernel `sofmax`",
        ),
        (
            "name = \"b\"\n[[run]]\nkernel = \"gemm\"\nmin_iterations = \"ten\"\n",
            "b.toml:4: field `min_iterations`: invalid type",
        ),
        (
            "name = \"c\"\n[[run]]\nkernel = \"noop\"\nenv = { LD_PRELOAD = \"/x.so\" }\n",
            "env key `LD_PRELOAD` is not allowed",
        ),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let file = dir.path().join(format!("{}.toml", ["a", "b", "c"][i]));
        std::fs::write(&file, text).unwrap();
        let out = gpufleet(
            &db,
            &["run", "--agent", "far", "--suite", file.to_str().unwrap()],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(want), "{err}");
        let first = want.rsplit(':').next().unwrap().trim();
        assert_eq!(err.matches(first).count(), 1, "said once: {err}");
        assert!(
            !err.contains("cannot reach"),
            "checked only after dialing: {err}"
        );
    }
    assert_eq!(ok(&gpufleet(&db, &["campaigns", "--json"])).trim(), "[]");
}

/// A schedule whose stored spec does not parse is named with the field, never listed as an empty
/// one; a timeout of 0 is refused before anything is stored.
#[test]
fn stored_specs_that_do_not_parse_and_impossible_settings_are_errors_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    ok(&gpufleet(
        &db,
        &["agents", "add", "far", "http://127.0.0.1:1"],
    ));
    let out = gpufleet(
        &db,
        &[
            "run",
            "--agent",
            "far",
            "--kernel",
            "noop",
            "--timeout-s",
            "0",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--timeout-s") && err.contains("0 is outside (0, 86400]"),
        "{err}"
    );
    let campaigns = ok(&gpufleet(&db, &["campaigns", "--json"]));
    assert_eq!(campaigns.trim(), "[]", "nothing stored");

    let store = gpufleet_coordinator::db::Db::open(&db).unwrap();
    store
        .with(|s| {
            s.add_schedule(
                "nightly",
                "0 3 * * *",
                r#"{"suite": "smoke", "all_agents": true, "timeout_s": "soon"}"#,
                true,
            )
        })
        .unwrap();
    let out = gpufleet(&db, &["schedule", "list"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("schedule nightly: its stored spec does not parse: field `timeout_s`"),
        "{err}"
    );
}
