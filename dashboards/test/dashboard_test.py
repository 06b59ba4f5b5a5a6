#!/usr/bin/env python3
"""The dashboard in a real browser, the static report from disk, and metrics scraped by a real
Prometheus.

1. Seeds a database through real runs (`gpufleet demo`: cpu, PoCL, lavapipe) and a generated history
   (`gpufleet seed-history`: 2 agents x 3 backends, 30 nights, one confirmed regression, a power
   trace), starts `gpufleet serve`, and loads every page in headless Chromium (Debian's, through
   Debian's chromedriver): asserts content, no console errors, a screenshot per page; then the same
   pages with JavaScript disabled.
2. `gpufleet report --html`: opens index.html from disk and follows links in Chromium; every relative
   link of every page must exist.
3. Live power: an agent on an RX 580 sysfs fixture dials in to the serve; its page (`/agents/rig`)
   follows the fixture's watts in Chromium without a reload, and shows the last value with
   JavaScript off.
4. Prometheus (Debian's binary) scrapes `gpufleet-agent --metrics-listen` (on the same fixture, so
   there is a power channel) and serve's /metrics; its HTTP API must return the power and results
   series, and serve's power gauge of the dial-in agent. The Grafana dashboard must be valid JSON
   naming only metrics that exist.

Usage: dashboard_test.py BIN_DIR [OUT_DIR]   (screenshots and logs go to OUT_DIR,
default target/dashboard-test). Exits non-zero on any failure.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from benchlib import rx580_fixture  # noqa: E402  (the RX 580 sysfs fixture the soak bench uses too)
sys.path.insert(0, str(Path(__file__).resolve().parent))
import layout  # noqa: E402  (the pages' layout checks, measured in the browser)
from layout import browser  # noqa: E402  (Debian's Chromium through Debian's chromedriver)
BIN = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "target/debug").resolve()
OUT = Path(sys.argv[2] if len(sys.argv) > 2 else ROOT / "target/dashboard-test").resolve()
PROCS = []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args, log, env=None):
    p = subprocess.Popen(args, stdout=open(OUT / log, "w"), stderr=subprocess.STDOUT, env=env)
    PROCS.append(p)
    return p


def wait_http(url, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.read().decode()
        except Exception:
            time.sleep(0.2)
    raise SystemExit(f"FAIL: {url} did not answer in {timeout} s")


def check(cond, what):
    if not cond:
        raise SystemExit(f"FAIL: {what}")
    print(f"  ok: {what}")


def console_errors(d):
    return [e for e in d.get_log("browser") if e.get("level") == "SEVERE"]


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpufleet-dash-"))
    db = work / "fleet.db"
    env = dict(os.environ)
    gpufleet, agent = str(BIN / "gpufleet"), str(BIN / "gpufleet-agent")
    print("== seeding: real runs and a generated history")
    subprocess.run([gpufleet, "demo", "--db", str(db)], check=True, stdout=open(OUT / "demo.log", "w"), stderr=subprocess.STDOUT, env=env)
    seed = json.loads(subprocess.run([gpufleet, "seed-history", "--db", str(db)], check=True, capture_output=True, text=True).stdout)
    print(f"  {seed}")
    check(seed["alerts"] == 1 and seed["power_result"], "the history has one confirmed regression and a power trace")

    port, fport = free_port(), free_port()
    base = f"http://127.0.0.1:{port}"
    start([gpufleet, "serve", "--db", str(db), "--listen", f"127.0.0.1:{port}", "--tick-s", "3600",
           "--fleet-listen", f"127.0.0.1:{fport}"], "serve.log", env)
    wait_http(base + "/healthz")
    alerts = json.loads(wait_http(base + "/api/alerts"))
    a = alerts[0]
    history = "/history?" + urllib.parse.urlencode({"spec": a["spec_key"], "agent": a["agent"], "device": a["device_id"]})
    pages = {
        "fleet": ("/", ["seed-a0", "seed-a1", "local", "Seed cpu device 0"]),
        "compare": ("/compare", ["Seed cpu device 0", "Seed opencl device 1", "Seed vulkan device 0"]),
        "history": (history, ["Alerts", "regression", "p10–p90 band"]),
        "run": (f"/runs/{seed['power_result']}", ["Power trace", "kernel window", "Energy"]),
        "campaigns": ("/campaigns", ["nightly", "smoke"]),
        "campaign": ("/campaigns/1", ["smoke", "done"]),
        "alerts": ("/alerts", ["regression", "Acknowledge"]),
        # The seed's devices are each of a model of their own: no group to judge, said so.
        "groups": ("/groups", ["Sibling groups", "No group has 5 or more devices"]),
        "device": ("/devices/local/cpu:0", ["Ceilings", "Roofline", "fp32 arithmetic (compute_peak)", "theoretical"]),
    }
    print("== pages in headless Chromium")
    from selenium.webdriver.common.by import By
    d = browser(js=True)
    try:
        for name, (path, texts) in pages.items():
            d.get(base + path)
            body = d.find_element(By.TAG_NAME, "body").text
            for t in texts:
                check(t in body or t in d.page_source, f"{name}: shows {t!r}")
            errors = console_errors(d)
            check(not errors, f"{name}: no console errors {errors[:2]}")
            # What a person sees: no cell's text over another's, no label over a label or cut,
            # no legend over a line, distinct axis ticks (layout.py; at 1400 px wide).
            faults = layout.check_page(d)
            check(not faults, f"{name}: no layout faults {faults[:3]}")
            d.save_screenshot(str(OUT / f"{name}.png"))
        # The same on a history of six results within a minute (the demo's, one per spec) and on
        # the page of a result the CLI names by its short run id.
        demo_spec = json.loads(subprocess.run([gpufleet, "results", "--db", str(db), "--agent", "local", "--kernel", "gemm",
                                               "--limit", "1", "--format", "json"], check=True, capture_output=True, text=True).stdout)[0]
        short_id = demo_spec["run_id"][:8]
        for name, path in [
            ("demo history", "/history?" + urllib.parse.urlencode({"spec": demo_spec["spec_key"], "agent": "local", "device": demo_spec["device_id"]})),
            ("run by its short id", f"/runs/{short_id}"),
        ]:
            d.get(base + path)
            check("Result #" in d.page_source or "result" in d.title.lower() or "History" in d.page_source, f"{name}: {path} answers")
            faults = layout.check_page(d)
            check(not faults, f"{name}: no layout faults {faults[:3]}")
        d.get(base + "/compare")
        heads = [h.text.split("\n")[0] for h in d.find_elements(By.CSS_SELECTOR, "table.matrix thead th")]
        check({"Seed cpu device 0", "Seed cpu device 1", "Seed opencl device 0"} <= set(heads), f"device names are the matrix columns: {heads[:8]}")
        # The chart view beside the table: every spec as a heat map here (many specs), and as bars
        # against a baseline column once a filter leaves a few.
        cells = d.find_elements(By.CSS_SELECTOR, "svg.compare-chart.heat g.cell")
        check(len(cells) >= 20, f"the compare page's heat map has {len(cells)} cells")
        keys = [o.get_attribute("value") for o in d.find_elements(By.CSS_SELECTOR, "select[name=baseline] option")]
        base_key = next(k for k in keys if k.startswith("seed-a0:cpu"))
        d.get(base + "/compare?" + urllib.parse.urlencode({"kernel": "gemm", "baseline": base_key}))
        bars = d.find_elements(By.CSS_SELECTOR, "svg.compare-chart.bars rect.bar")
        check(len(bars) >= 3 and d.find_elements(By.CSS_SELECTOR, "svg.compare-chart rect.bar.base"),
              f"gemm against {base_key}: {len(bars)} bars, the baseline's among them")
        check(d.find_elements(By.CSS_SELECTOR, "svg.compare-chart rect.bar.better, svg.compare-chart rect.bar.worse"),
              "and the other devices better or worse than it")
        tip = d.find_elements(By.CSS_SELECTOR, "svg.compare-chart rect.bar.worse, svg.compare-chart rect.bar.better")[0]
        title = tip.find_element(By.TAG_NAME, "title").get_attribute("textContent")
        check("×" in title and ":" in title, f"a bar's tooltip gives the device, figure and ratio: {title!r}")
        d.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", tip)
        check("/runs/" in d.current_url and "Result #" in d.page_source, f"a bar opens its result ({d.current_url})")
        d.get(base + history)
        pts = d.find_elements(By.CSS_SELECTOR, "svg.series .pt")
        check(len(pts) >= 30, f"the history SVG has {len(pts)} points (30 nights and the rerun)")
        check(len(d.find_elements(By.CSS_SELECTOR, "svg.series .alert")) == 1, "one alert is marked on it")
        check(d.find_elements(By.CSS_SELECTOR, "svg.series .band"), "with the p10-p90 band")
        # The device page: the demo's smoke results on its roofline, under both roofs.
        d.get(base + "/devices/local/cpu:0")
        pts = d.find_elements(By.CSS_SELECTOR, "svg.roofline .pt")
        check(len(pts) >= 20, f"the roofline places {len(pts)} of the demo's results")
        # The theoretical roof needs both of the device table's peaks: a CPU missing from the cpu table
        # (a VM's "Intel(R) Xeon(R) Processor") has a formula fp32 peak but no memory bandwidth.
        theory = {}
        for tr in d.find_elements(By.CSS_SELECTOR, "table.ceilings tbody tr"):
            tds = tr.find_elements(By.TAG_NAME, "td")
            theory[tds[0].text] = tds[2].text
        has_theory = all(theory.get(k, "-") != "-" for k in
                         ("fp32 arithmetic (compute_peak)", "memory bandwidth (copy, roofline sweep)"))
        theoretical = d.find_elements(By.CSS_SELECTOR, "svg.roofline .roof.theoretical")
        check(d.find_elements(By.CSS_SELECTOR, "svg.roofline .roof.measured") and bool(theoretical) == has_theory,
              f"under the measured roof, and the theoretical one exactly when the table has both peaks ({has_theory})")
        title = pts[0].find_element(By.TAG_NAME, "title").get_attribute("textContent")
        check("GFLOP/s at" in title and "FLOP/byte" in title, f"a point's tooltip names its spec: {title!r}")
        d.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", pts[0])
        check("/runs/" in d.current_url and "Result #" in d.page_source, f"a point opens its result ({d.current_url})")
        d.get(base + "/")
        d.find_element(By.CSS_SELECTOR, "a[href='/devices/local/cpu:0']").click()
        check(d.current_url.endswith("/devices/local/cpu:0"), "the fleet page links each device's page")
        d.get(base + f"/runs/{seed['power_result']}")
        check(d.find_elements(By.CSS_SELECTOR, "svg.power rect.window"), "the power trace marks the kernel window")
        check(d.find_elements(By.CSS_SELECTOR, "svg.power line.idle"), "and the idle baseline")
        # The script sorts tables: a click on a header orders the rows.
        d.get(base + "/campaigns")
        d.find_elements(By.CSS_SELECTOR, "table.sortable thead th")[0].click()
        ids = [int(r.text) for r in d.find_elements(By.CSS_SELECTOR, "table.sortable tbody tr td:first-child")]
        check(ids == sorted(ids), "a header click sorts the campaigns")
        check(not console_errors(d), "no console errors after sorting")
    finally:
        d.quit()

    print("== the same pages with JavaScript disabled")
    d = browser(js=False)
    try:
        for name, (path, texts) in pages.items():
            d.get(base + path)
            check(all(t in d.page_source for t in texts), f"{name}: complete without JavaScript")
            d.save_screenshot(str(OUT / f"{name}-nojs.png"))
        d.get(base + history)
        check(len(d.find_elements(By.CSS_SELECTOR, "svg.series .pt")) >= 30, "history chart without JavaScript")
        d.get(base + "/devices/local/cpu:0")
        check(len(d.find_elements(By.CSS_SELECTOR, "svg.roofline .pt")) >= 20, "roofline without JavaScript")
        d.get(base + "/compare")
        check(len(d.find_elements(By.CSS_SELECTOR, "svg.compare-chart g.cell")) >= 20, "compare chart without JavaScript")
    finally:
        d.quit()

    print("== static report from disk")
    report = work / "report"
    subprocess.run([gpufleet, "--db", str(db), "report", "--html", str(report)], check=True)
    broken = []
    htmls = list(report.rglob("*.html"))
    for page in htmls:
        for link in re.findall(r'(?:href|src)="([^"]*)"', page.read_text()):
            link = link.replace("&#x2f;", "/").replace("&amp;", "&")
            if link.startswith("data:"):
                continue
            if link.startswith(("http:", "https:", "/")) or not (page.parent / link).exists():
                broken.append(f"{page.relative_to(report)} -> {link}")
    check(not broken, f"{len(htmls)} report pages, every link resolves {broken[:3]}")
    d = browser(js=True)
    try:
        d.get((report / "index.html").as_uri())
        check("seed-a0" in d.page_source, "the report's index opens from disk")
        d.find_element(By.LINK_TEXT, "Compare").click()
        check("Seed cpu device 0" in d.page_source and d.current_url.endswith("compare.html"), "its Compare link works")
        check(len(d.find_elements(By.CSS_SELECTOR, "svg.compare-chart g.cell")) >= 20, "the report's compare page has its chart")
        d.find_element(By.CSS_SELECTOR, "table.matrix td.cell a").click()
        check("/runs/" in d.current_url and "Result #" in d.page_source, f"a matrix cell opens its result ({d.current_url})")
        d.find_element(By.PARTIAL_LINK_TEXT, "Alerts").click()
        d.find_element(By.CSS_SELECTOR, "table td a").click()
        check("/history/" in d.current_url and d.find_elements(By.CSS_SELECTOR, "svg.series .alert"), "an alert opens its history")
        d.get((report / "index.html").as_uri())
        dev_links = [a.get_attribute("href") for a in d.find_elements(By.CSS_SELECTOR, "a[href*='devices/']")]
        check(len(dev_links) >= 3, f"the report's fleet page links {len(dev_links)} device pages")
        d.get(dev_links[0])
        check(d.find_elements(By.CSS_SELECTOR, "svg.roofline .pt"), f"a report device page draws its roofline ({d.current_url})")
        check(not console_errors(d), "no console errors in the report")
        d.save_screenshot(str(OUT / "report-history.png"))
    finally:
        d.quit()

    print("== live power: a dial-in agent's page follows its sensor")
    sysfs = work / "sysfs"
    watts_file = rx580_fixture(sysfs)
    enrolled = json.loads(subprocess.run([gpufleet, "agents", "add", "rig", "--dial-in", "--json", "--db", str(db)],
                                         check=True, capture_output=True, text=True).stdout)
    start([agent, "--connect", f"http://127.0.0.1:{fport}", "--name", "rig", "--state-dir", str(work / "rig-state")],
          "rig.log", dict(env, GPUFLEET_TOKEN=enrolled["token"], GPUFLEET_SYSFS_ROOT=str(sysfs)))
    end = time.time() + 60
    while time.time() < end and not json.loads(wait_http(base + "/api/agents/rig/power/latest"))["samples"]:
        time.sleep(0.5)
    check(json.loads(wait_http(base + "/api/agents/rig/power/latest"))["samples"], "the serve holds rig's latest samples")
    d = browser(js=True)
    try:
        d.get(base + "/agents/rig")
        cell = lambda: d.find_element(By.CSS_SELECTOR, "#live-table td[data-fig='watts']").text
        check(cell() == "8.1 W", f"the agent page shows the fixture's 8.1 W ({cell()!r})")
        d.execute_script("window.__not_reloaded = 42;")
        watts_file.write_text("31500000\n")
        end = time.time() + 15
        while time.time() < end and cell() != "31.5 W":
            time.sleep(0.2)
        check(cell() == "31.5 W", f"the page follows the sensor to 31.5 W ({cell()!r})")
        check(d.execute_script("return window.__not_reloaded;") == 42, "without a reload")
        status = d.find_element(By.ID, "live-status").text
        check(status.startswith("live: "), f"the page says it is live ({status!r})")
        check(d.find_elements(By.CSS_SELECTOR, "#live-charts svg polyline.trace"), "it draws the channel's watts")
        check(not console_errors(d), "no console errors on the agent page")
        d.save_screenshot(str(OUT / "agent-live.png"))
    finally:
        d.quit()
    d = browser(js=False)
    try:
        d.get(base + "/agents/rig")
        text = d.find_element(By.CSS_SELECTOR, "#live-table td[data-fig='watts']").text
        check(text == "31.5 W", f"without JavaScript the page shows the last value ({text!r})")
        d.save_screenshot(str(OUT / "agent-nojs.png"))
    finally:
        d.quit()
    watts_file.write_text("8123000\n")

    print("== Prometheus scrapes an agent and serve")
    aport, mport, pport = free_port(), free_port(), free_port()
    aenv = dict(env, GPUFLEET_SYSFS_ROOT=str(sysfs))
    start([agent, "--listen", f"127.0.0.1:{aport}", "--metrics-listen", f"127.0.0.1:{mport}"], "agent.log", aenv)
    agent_text = wait_http(f"http://127.0.0.1:{mport}/metrics")
    serve_text = wait_http(base + "/metrics")
    check('gpufleet_power_watts{agent="rig"' in serve_text, "serve exports the dial-in agent's power")
    check("gpufleet_agent_power_watts{" in agent_text, "the agent exports its power channel")
    (work / "prometheus.yml").write_text(json.dumps({
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [
            {"job_name": "agent", "static_configs": [{"targets": [f"127.0.0.1:{mport}"]}]},
            {"job_name": "serve", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]},
        ]}))
    prom = shutil.which("prometheus") or "/usr/bin/prometheus"
    start([prom, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'tsdb'}",
           f"--web.listen-address=127.0.0.1:{pport}"], "prometheus.log")
    wait_http(f"http://127.0.0.1:{pport}/-/ready", 60)

    def query(q):
        url = f"http://127.0.0.1:{pport}/api/v1/query?" + urllib.parse.urlencode({"query": q})
        return json.loads(urllib.request.urlopen(url, timeout=5).read())["data"]["result"]

    series = {}
    end = time.time() + 60
    while time.time() < end:
        series = {q: query(q) for q in ["gpufleet_agent_power_watts", "gpufleet_results", "gpufleet_http_request_duration_seconds_count"]}
        if all(series.values()):
            break
        time.sleep(1)
    for q, r in series.items():
        check(r, f"Prometheus returns {q} ({len(r)} series)")
    watts = float(series["gpufleet_agent_power_watts"][0]["value"][1])
    check(abs(watts - 8.123) < 1e-6, f"the power series is the fixture's 8.123 W ({watts})")
    rig = []
    end = time.time() + 30
    while time.time() < end:
        rig = query('gpufleet_power_watts{agent="rig",source="amdgpu-hwmon",device="0000:03:00.0"}')
        if rig and abs(float(rig[0]["value"][1]) - 8.123) < 1e-6:
            break
        time.sleep(1)
    check(rig and abs(float(rig[0]["value"][1]) - 8.123) < 1e-6,
          f"through serve, Prometheus has the dial-in agent's 8.123 W ({rig})")
    ok = [r for r in series["gpufleet_results"] if r["metric"].get("value") == "ok"]
    check(ok and float(ok[0]["value"][1]) > 500, "the results series counts the stored results")

    print("== Grafana dashboard")
    names = set()
    for text in (agent_text, serve_text):
        for m in re.finditer(r"^# TYPE (\S+) (\S+)", text, re.M):
            name, kind = m.groups()
            names.add(name)
            if kind == "counter":
                names.add(name + "_total")
            if kind == "histogram":
                names.update({name + "_bucket", name + "_sum", name + "_count"})
    dash = json.loads((ROOT / "dashboards/grafana/gpufleet.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    used = {m for e in exprs for m in re.findall(r"\bgpufleet_[a-z_]+", e)}
    check(exprs and used, f"the dashboard has {len(exprs)} queries")
    check(used <= names, f"it names only metrics that exist (unknown: {sorted(used - names)})")
    prov = (ROOT / "dashboards/grafana/provisioning/dashboards.yaml").read_text()
    check("gpufleet" in prov and "path:" in prov, "a provisioning file points at it")
    print("dashboard test: ok")


if __name__ == "__main__":
    try:
        main()
    finally:
        for p in PROCS:
            p.terminate()
        for p in PROCS:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
