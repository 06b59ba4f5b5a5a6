//! `gpufleet power` against a real agent over gRPC, its power read from an RX 580 sysfs fixture;
//! and the same agent dialing in to `gpufleet serve`, read through the serve's API and its
//! `/metrics`.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Stdio};

mod common;
use common::{
    BIN, Proc, Serve, dial_url, enrol, gpufleet, http_get, http_get_until, ok_stdout as ok,
    wait_for,
};

/// An RX 580 at 0000:03:00.0 as `card0`/`hwmon2` under `root`, reading `watts_uw` µW and 41 °C;
/// returns its hwmon directory.
fn rx580(root: &Path, watts_uw: &str) -> std::path::PathBuf {
    let dev = root.join("sys/devices/pci0000:00/0000:03:00.0");
    let hwmon = dev.join("hwmon/hwmon2");
    fs::create_dir_all(&hwmon).unwrap();
    let card = root.join("sys/class/drm/card0");
    fs::create_dir_all(&card).unwrap();
    symlink(&dev, card.join("device")).unwrap();
    fs::write(dev.join("device"), "0x67df\n").unwrap();
    fs::write(dev.join("gpu_busy_percent"), "37\n").unwrap();
    for (f, v) in [
        ("name", "amdgpu\n"),
        ("power1_input", watts_uw),
        ("temp1_input", "41000\n"),
        ("temp1_label", "edge\n"),
        ("freq1_input", "1340000000\n"),
    ] {
        fs::write(hwmon.join(f), v).unwrap();
    }
    hwmon
}

/// The JSON Lines of 3 s at 5 Hz: 15 samples within 20%.
fn three_seconds_at_5_hz(out: &str) -> Vec<serde_json::Value> {
    let samples: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        (12..=18).contains(&samples.len()),
        "{} samples in 3 s at 5 Hz",
        samples.len()
    );
    samples
}

/// `gpufleet power URL ARGS...` on `db`.
fn power(db: &Path, url: &str, args: &str) -> std::process::Output {
    let mut all = vec!["power", url];
    all.extend(args.split_whitespace());
    gpufleet(db, &all)
}

fn agent_on(root: &Path) -> Proc {
    let mut cmd = Command::new(BIN);
    cmd.args(["serve-agent", "--listen", "127.0.0.1:0", "--sysfs-root"])
        .arg(root);
    Proc::start(cmd)
}

#[test]
fn live_samples_at_the_asked_rate_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let hwmon = rx580(dir.path(), "8123000\n");
    let agent = agent_on(dir.path());
    let db = dir.path().join("fleet.db");

    // JSON Lines: 3 s at 5 Hz is 15 samples (within 20%), each the fixture's figures.
    let out = ok(&power(
        &db,
        &agent.url,
        "--seconds 3 --rate-hz 5 --format json",
    ));
    let samples = three_seconds_at_5_hz(&out);
    for s in &samples {
        assert_eq!(s["source"], "amdgpu-hwmon");
        assert_eq!(s["pci_bus_id"], "0000:03:00.0");
        assert_eq!(s["scope"], "asic");
        assert_eq!(s["watts"], 8.123);
        assert_eq!(s["temperature_c"], 41.0);
        assert_eq!(s["sclk_mhz"], 1340);
        assert_eq!(s["utilization_pct"], 37.0);
        assert_eq!(s["label"], "amdgpu power1_input, temp1_input");
    }
    let t = |i: usize| samples[i]["monotonic_ns"].as_u64().unwrap() as f64 / 1e9;
    let span = t(samples.len() - 1) - t(0);
    let rate = (samples.len() - 1) as f64 / span;
    assert!((4.0..=6.0).contains(&rate), "{rate:.2} Hz over {span:.2} s");

    // CSV follows the sensor: a new value shows up.
    fs::write(hwmon.join("power1_input"), "30500000\n").unwrap();
    let out = ok(&power(
        &db,
        &agent.url,
        "--seconds 1 --rate-hz 4 --format csv",
    ));
    let mut lines = out.lines();
    assert_eq!(
        lines.next().unwrap(),
        "wall_unix_s,source,scope,pci_bus_id,label,watts,temperature_c,sclk_mhz,mclk_mhz,utilization_pct,energy_j"
    );
    let rows: Vec<&str> = lines.collect();
    assert!(!rows.is_empty());
    assert!(
        rows.iter().all(|r| r.contains(",30.5,41,1340,,37,")),
        "{rows:?}"
    );

    // Plain lines when stdout is not a terminal; a filter that matches nothing is the agent's
    // refusal, exit 1 with its reason.
    // Its columns are named once, above the lines.
    let out = ok(&power(&db, &agent.url, "--seconds 1 --device 0000:03:00.0"));
    let mut lines = out.lines();
    let header = lines.next().unwrap();
    assert!(
        header.starts_with("time (UTC)") && header.contains("power") && header.contains("busy"),
        "{out}"
    );
    assert!(
        lines.all(|l| l.contains("30.5 W") && l.contains("41.0 °C")),
        "{out}"
    );
    let out = power(&db, &agent.url, "--source nvml --seconds 1");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no power channel matches source `nvml`"),
        "{err}"
    );
}

#[test]
fn ctrl_c_ends_it_cleanly_and_an_unreachable_agent_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    rx580(dir.path(), "8000000\n");
    let agent = agent_on(dir.path());
    let db = dir.path().join("fleet.db");
    let child = Command::new(BIN)
        .arg("--db")
        .arg(&db)
        .args(["power", &agent.url, "--format", "json", "--rate-hz", "10"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let n = String::from_utf8_lossy(&out.stdout).lines().count();
    assert!(n >= 5, "{n} samples before Ctrl-C");
    assert!(
        err.contains(&format!("{n} samples of 1 channel(s)")),
        "{err}"
    );

    // Nothing listens on port 1; an agent killed mid-stream ends it.
    let out = power(&db, "http://127.0.0.1:1", "--seconds 1");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot reach agent"), "{err}");
    let child = Command::new(BIN)
        .arg("--db")
        .arg(&db)
        .args(["power", &agent.url, "--seconds", "30"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1000));
    drop(agent);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("error:"), "{err}");

    // Bad arguments are usage errors, naming the flag.
    let out = power(&db, "http://127.0.0.1:1", "--rate-hz=5000");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rate-hz"));
}

/// The `gpufleet_power_watts` gauge of `agent`'s RX 580 channel in serve's `/metrics`, if any.
fn gauge(http: &str, agent: &str) -> Option<f64> {
    let metrics = http_get(http, "/metrics");
    let prefix = format!(
        "gpufleet_power_watts{{agent=\"{agent}\",device=\"0000:03:00.0\",source=\"amdgpu-hwmon\",channel=\"amdgpu power1_input, temp1_input\"}} "
    );
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map(|v| v.trim().parse().unwrap())
}

/// `GET path` of `addr` accepting gzip, until `enough` holds of what arrived.
fn get_gzip(addr: &str, path: &str, enough: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    http_get_until(addr, path, "Accept-Encoding: gzip\r\n", enough)
}

/// A JSON body of an HTTP answer.
fn body(answer: &str) -> serde_json::Value {
    let (_, body) = answer.split_once("\r\n\r\n").unwrap();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[test]
fn a_dial_in_agents_power_through_the_serve_and_its_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let hwmon = rx580(dir.path(), "8123000\n");
    let db = dir.path().join("fleet.db");
    let token = enrol(&db, "rig");
    let serve = Serve::with_args(&db, &["--fleet-listen", "127.0.0.1:0"]);

    // Not attached yet: exit 1 saying so.
    let out = power(&db, "rig", "--seconds 1");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("dial-in agent rig has never attached"),
        "{err}"
    );

    let mut agent = dial_url(
        &format!("http://{}", serve.fleet),
        "rig",
        &token,
        "",
        &dir.path().join("state"),
    );
    let mut agent = agent.arg("--sysfs-root").arg(dir.path()).spawn().unwrap();
    // The gauges (1 Hz by default) carry the fixture's watts, labelled with the agent.
    wait_for("rig's power gauge", 30, || {
        gauge(&serve.http, "rig") == Some(8.123)
    });

    // 3 s at 5 Hz through the serve: 15 samples within 20%, each the fixture's figures.
    let out = ok(&power(&db, "rig", "--seconds 3 --rate-hz 5 --format json"));
    let samples = three_seconds_at_5_hz(&out);
    for s in &samples {
        assert_eq!(s["pci_bus_id"], "0000:03:00.0");
        assert_eq!(s["watts"], 8.123);
        assert_eq!(s["temperature_c"], 41.0);
        assert_eq!(s["label"], "amdgpu power1_input, temp1_input");
    }
    let latest = body(&http_get(&serve.http, "/api/agents/rig/power/latest"));
    assert_eq!(latest["connected"], true);
    assert_eq!(latest["samples"][0]["watts"], 8.123);

    // gzip when the client accepts it: a page and /metrics come compressed; the power feed, an
    // event stream, never does, so each sample reaches a watcher as it is read.
    for path in ["/", "/metrics"] {
        let answer = get_gzip(&serve.http, path, |_| false);
        let at = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let head = String::from_utf8_lossy(&answer[..at]).to_ascii_lowercase();
        assert!(head.contains("content-encoding: gzip"), "{path}: {head}");
        // The body is chunked: its first chunk's size line, then the gzip magic.
        let body = &answer[at + 4..];
        let magic = body.windows(2).position(|w| w == [0x1f, 0x8b]);
        assert!(
            magic.is_some_and(|m| m < 12),
            "{path}: {:?}",
            &body[..16.min(body.len())]
        );
    }
    let feed = get_gzip(&serve.http, "/api/agents/rig/power?rate_hz=5", |b| {
        b.windows(5).any(|w| w == b"data:")
    });
    let feed = String::from_utf8_lossy(&feed).to_ascii_lowercase();
    assert!(
        feed.contains("text/event-stream") && !feed.contains("content-encoding"),
        "{feed:.600}"
    );
    assert!(
        feed.contains("8.123"),
        "a sample as it was read: {feed:.600}"
    );

    // A changed reading reaches the gauge and a watcher.
    std::fs::write(hwmon.join("power1_input"), "31500000\n").unwrap();
    wait_for("the new reading in the gauge", 10, || {
        gauge(&serve.http, "rig") == Some(31.5)
    });

    // A bad filter exits 1 naming the field; so does an unknown agent's stream on the API.
    let out = power(&db, "rig", "--device vulkan:9 --seconds 1");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("device: `vulkan:9` is neither"), "{err}");
    let missing = http_get(&serve.http, "/api/agents/nobody/power");
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
    assert!(
        body(&missing)["error"]
            .as_str()
            .unwrap()
            .contains("not connected")
    );
    // A name of 10,000 bytes is quoted cut short; an unknown parameter or a bad rate is named.
    let long = http_get(
        &serve.http,
        &format!("/api/agents/{}/power", "x".repeat(10_000)),
    );
    assert!(long.starts_with("HTTP/1.1 404"), "{long:.300}");
    assert!(
        body(&long)["error"].as_str().unwrap().len() < 400,
        "{long:.600}"
    );
    for (query, field) in [
        ("rate_hz=-1", "rate_hz"),
        ("rate_hz=fast", "rate_hz"),
        ("hz=3", "hz"),
    ] {
        let bad = http_get(&serve.http, &format!("/api/agents/rig/power?{query}"));
        assert!(bad.starts_with("HTTP/1.1 400"), "{query}: {bad}");
        assert!(
            body(&bad)["error"].as_str().unwrap().contains(field),
            "{query}: {bad}"
        );
    }

    // The agent goes: a watcher ends with exit 1 saying why, and the gauges disappear.
    let watcher = std::process::Command::new(BIN)
        .arg("--db")
        .arg(&db)
        .args(["power", "rig", "--format", "csv"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let _ = agent.kill();
    let _ = agent.wait();
    let out = watcher.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("error: dial-in agent rig"), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).lines().count() > 2);
    assert_eq!(gauge(&serve.http, "rig"), None, "the gauge disappears");
}

/// A direct agent started with a token, read by URL: the token comes from `--token-file`, never
/// the command line; without it the agent refuses, and the refusal says so.
#[test]
fn a_tokened_agent_is_read_by_url_with_a_token_file() {
    let dir = tempfile::tempdir().unwrap();
    rx580(dir.path(), "8123000\n");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let token = "a-token-of-more-than-sixteen-characters";
    let mut agent = Command::new(common::agent_bin())
        .args(["--listen", &format!("127.0.0.1:{port}"), "--sysfs-root"])
        .arg(dir.path())
        .env("GPUFLEET_TOKEN", token)
        .env(
            "GPUFLEET_CACHE_DIR",
            std::env::temp_dir().join("gpufleet-test-cache"),
        )
        .env_remove("GPUFLEET_CONNECT")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let db = dir.path().join("fleet.db");
    wait_for("the agent to listen", 30, || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let file = dir.path().join("token");
    fs::write(&file, format!("{token}\n")).unwrap();
    let out = ok(&power(
        &db,
        &url,
        &format!("--seconds 1 --format json --token-file {}", file.display()),
    ));
    assert!(
        out.lines().count() > 0 && out.contains("\"watts\":8.123"),
        "{out}"
    );
    let refused = power(&db, &url, "--seconds 1 --format json");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(err.to_lowercase().contains("token"), "{err}");
    let _ = agent.kill();
    let _ = agent.wait();
}
