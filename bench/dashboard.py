#!/usr/bin/env python3
"""Dashboard pages over 100,000 stored results: server time per page (p50/p95 of N loads, on
loopback) and page weight (HTML plus the stylesheet and script it links), against the JSON API's
/api/campaigns in the same run as a reference for what a plain store read costs.

Seeds the database with `gpufleet seed-history` (2 agents x 3 backends x SPECS specs x NIGHTS nights,
the real regression check running every night), starts `gpufleet serve`, then loads each page.

Usage: bench/dashboard.py [--bin target/release] [--nights 300] [--specs 56] [--loads 20] [--db PATH]
"""
import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

from benchlib import free_port, load, percentile, timed_loads


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release")
    ap.add_argument("--nights", type=int, default=300)
    ap.add_argument("--specs", type=int, default=56)
    ap.add_argument("--loads", type=int, default=20)
    ap.add_argument("--db")
    a = ap.parse_args()
    gpufleet = str(Path(a.bin) / "gpufleet")
    db = Path(a.db) if a.db else Path(tempfile.mkdtemp(prefix="gpufleet-dash-bench-")) / "fleet.db"
    if not db.exists():
        t = time.time()
        out = subprocess.run([gpufleet, "seed-history", "--db", str(db), "--nights", str(a.nights), "--specs", str(a.specs)],
                             check=True, capture_output=True, text=True).stdout
        print(f"seeded in {time.time() - t:.0f} s: {out.strip()}")
    n = sqlite3.connect(db).execute("SELECT count(*) FROM results").fetchone()[0]
    print(f"{n} results in {db}")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    serve = subprocess.Popen([gpufleet, "serve", "--db", str(db), "--listen", f"127.0.0.1:{port}", "--tick-s", "3600"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(base + "/healthz", timeout=1)
                break
            except Exception:
                time.sleep(0.2)
        alert = json.loads(urllib.request.urlopen(base + "/api/alerts").read())[0]
        hist = "/history?" + urllib.parse.urlencode({"spec": alert["spec_key"], "agent": alert["agent"], "device": alert["device_id"]})
        campaign = json.loads(urllib.request.urlopen(base + "/api/campaigns").read())[-1]["id"]
        assets = sum(load(base + p)[1] for p in ["/static/gpufleet.css", "/static/gpufleet.js"])
        pages = [("fleet", "/"), ("compare", "/compare"), ("compare filtered", "/compare?kernel=gemm&baseline=seed-a0%3Acpu%3A0"),
                 ("compare.csv", "/compare.csv"), ("history", hist), ("result", f"/runs/{alert['result_id']}"),
                 ("campaigns", "/campaigns"), ("campaign", f"/campaigns/{campaign}"), ("alerts", "/alerts"),
                 ("reference: /api/campaigns", "/api/campaigns")]
        rows = []
        for name, path in pages:
            times, size = timed_loads(base, path, a.loads)
            weight = size + (assets if not path.startswith(("/api", "/compare.csv")) else 0)
            rows.append((name, percentile(times, 50) * 1e3, percentile(times, 95) * 1e3, weight / 1024))
        print(f"\n| page | p50 ms | p95 ms | weight KB |\n| --- | ---: | ---: | ---: |")
        for name, p50, p95, kb in rows:
            print(f"| {name} | {p50:.1f} | {p95:.1f} | {kb:.1f} |")
        bad = [r for r in rows if not r[0].startswith("reference") and (r[2] > 200 or r[3] > 300)]
        print("\ngoal (p95 < 200 ms, weight < 300 KB):", "met" if not bad else f"missed by {[r[0] for r in bad]}")
    finally:
        serve.terminate()
        serve.wait()


if __name__ == "__main__":
    sys.exit(main())
