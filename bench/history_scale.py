#!/usr/bin/env python3
"""A year of nightly results (issue 29): every API route and dashboard page of `gpufleet serve`
(p50/p95 over LOADS requests on loopback), the CLI's listings, the serve's memory, the result insert
path's throughput while the pages are loaded, and `db compact`, on a database that
`gpufleet seed-history` made.

Make the databases first (30 agents x 3 backends x 30 specs, 100 iterations per result, a power
trace on every 20th, the real regression check every night):

    gpufleet --db 100k.db seed-history --agents 30 --nights 37  --specs 30 --iterations 100 --power-every 20
    gpufleet --db 1m.db   seed-history --agents 30 --nights 371 --specs 30 --iterations 100 --power-every 20

Usage: bench/history_scale.py --db PATH|postgres://URL [--bin target/release] [--loads 50]
                              [--insert-nights 2] [--compact] [--out docs/table.md]

--db takes a PostgreSQL URL as gpufleet does (issue 35): seed-history writes there the same way, or
`gpufleet db copy 1m.db postgres://...` moves an SQLite history there. Its size is read with `psql`.

--insert-nights adds that many nights (2,700 results each) through the insert path campaigns use, one
transaction per result with the regression check, while the pages are loaded in a loop.
--compact runs `db compact` (90 days of samples, 30 of power, then VACUUM) at the end: it changes the
database.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from benchlib import free_port, load, percentile, timed_loads  # noqa: E402


def get_json(base, path):
    with urllib.request.urlopen(base + path, timeout=60) as r:
        return json.loads(r.read())


def rss_mb(pid):
    """(VmRSS, VmHWM) of PID in MB."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            fields[k] = v.strip()
    return tuple(int(fields[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM"))


def is_postgres(db):
    return db.startswith(("postgres://", "postgresql://"))


def size_mb(db):
    if is_postgres(db):
        out = subprocess.run(["psql", db, "-Atc", "SELECT pg_database_size(current_database())"],
                             check=True, capture_output=True, text=True).stdout
        return int(out.strip()) / 2**20
    return sum(os.path.getsize(p) for p in (db, db + "-wal") if os.path.exists(p)) / 2**20


def counts(base):
    """(results, agents) as the serve reports them: /metrics' results by status, /api/agents."""
    with urllib.request.urlopen(base + "/metrics", timeout=60) as r:
        text = r.read().decode()
    n = sum(int(float(v)) for v in re.findall(r'^gpufleet_results\{[^}]*\} (\S+)$', text, re.M))
    return n, len(get_json(base, "/api/agents"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True)
    ap.add_argument("--bin", default="target/release")
    ap.add_argument("--loads", type=int, default=50)
    ap.add_argument("--insert-nights", type=int, default=2)
    ap.add_argument("--compact", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    gpufleet = str(Path(a.bin) / "gpufleet")
    db = a.db
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    serve = subprocess.Popen([gpufleet, "--db", db, "serve", "--listen", f"127.0.0.1:{port}", "--tick-s", "3600"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(base + "/healthz", timeout=1)
                break
            except Exception:
                time.sleep(0.2)
        n, agents = counts(base)
        engine = "PostgreSQL" if is_postgres(db) else "SQLite"
        out = [f"### {n:,} results on {engine} ({size_mb(db):,.0f} MB, {agents} agents)", ""]
        alert = get_json(base, "/api/alerts")[0]
        hist = "/history?" + urllib.parse.urlencode(
            {"spec": alert["spec_key"], "agent": alert["agent"], "device": alert["device_id"]})
        campaign = get_json(base, "/api/campaigns")[0]["id"]
        first = get_json(base, "/api/results?limit=50")
        deep = first["next"]
        for _ in range(20):  # page 21 of 50
            deep = get_json(base, f"/api/results?limit=50&after={deep}")["next"]
        checks_next = get_json(base, "/api/checks?limit=50")["next"]
        routes = [
            ("GET /healthz", "/healthz"),
            ("GET /metrics", "/metrics"),
            ("GET /api/agents", "/api/agents"),
            ("GET /api/campaigns", "/api/campaigns"),
            ("GET /api/campaigns/{id}", f"/api/campaigns/{campaign}"),
            ("GET /api/results (default: 500)", "/api/results"),
            ("GET /api/results?limit=50", "/api/results?limit=50"),
            ("GET /api/results?limit=50, page 21", f"/api/results?limit=50&after={deep}"),
            ("GET /api/results?kernel&agent&since=30d&limit=50",
             "/api/results?kernel=gemm&agent=seed-a7&since=30d&limit=50"),
            ("GET /api/schedules", "/api/schedules"),
            ("GET /api/alerts", "/api/alerts"),
            ("GET /api/checks (default: 500)", "/api/checks"),
            ("GET /api/checks?limit=50, page 2", f"/api/checks?limit=50&after={checks_next}"),
            ("page / (fleet)", "/"),
            ("page /compare", "/compare"),
            ("page /compare, filtered, vs a baseline", "/compare?kernel=gemm&baseline=seed-a0%3Acpu%3A0"),
            ("/compare.csv (every cell)", "/compare.csv"),
            ("/compare.json (every cell)", "/compare.json"),
            ("page /history (one series)", hist),
            ("page /runs/{id}", f"/runs/{alert['result_id']}"),
            ("page /campaigns", "/campaigns"),
            ("page /campaigns/{id}", f"/campaigns/{campaign}"),
            ("page /alerts", "/alerts"),
            ("page /groups", "/groups"),
        ]
        out += ["| request | p50 ms | p95 ms | KB | KB gzip |", "| --- | ---: | ---: | ---: | ---: |"]
        worst = 0.0
        for name, path in routes:
            times, size = timed_loads(base, path, a.loads)
            p95 = percentile(times, 95) * 1e3
            worst = max(worst, p95)
            _, gz = load(base + path, gzip=True)
            out.append(f"| {name} | {percentile(times, 50) * 1e3:.1f} | {p95:.1f} | {size / 1024:.1f} "
                       f"| {gz / 1024:.1f} |")
            print(out[-1], flush=True)
        rss, hwm = rss_mb(serve.pid)
        out += ["", f"Slowest p95: {worst:.1f} ms. `serve` RSS after the loads: {rss:.0f} MB (peak {hwm:.0f} MB).", ""]

        # Inserting through the campaign path while the pages are loaded.
        if a.insert_nights:
            hot = ["/", "/compare", "/api/results?limit=50", "/metrics", "/campaigns", hist, "/api/campaigns"]
            during = {p: [] for p in hot}
            stop = threading.Event()

            def reader():
                while not stop.is_set():
                    for p in hot:
                        t, _ = load(base + p)
                        during[p].append(t)

            th = threading.Thread(target=reader)
            th.start()
            t0 = time.perf_counter()
            seeded = subprocess.run(
                [gpufleet, "--db", db, "seed-history", "--no-bulk", "--agents", str(agents),
                 "--nights", str(a.insert_nights), "--specs", "30", "--iterations", "100", "--power-every", "20"],
                check=True, capture_output=True, text=True)
            dt = time.perf_counter() - t0
            stop.set()
            th.join()
            inserted = json.loads(seeded.stdout)["results"]
            out += [f"Insert path while serving: {inserted:,} results in {dt:.1f} s = **{inserted / dt:,.0f} results/s** "
                    "(one transaction per result, the regression check after each night), while one client "
                    "loaded these in a loop:", "",
                    "| request during inserts | loads | p50 ms | p95 ms |", "| --- | ---: | ---: | ---: |"]
            for p in hot:
                xs = during[p]
                out.append(f"| {p[:60]} | {len(xs)} | {percentile(xs, 50) * 1e3:.1f} | {percentile(xs, 95) * 1e3:.1f} |")
            rss, hwm = rss_mb(serve.pid)
            out += ["", f"`serve` RSS after: {rss:.0f} MB (peak {hwm:.0f} MB).", ""]

        # The CLI on the same database (the serve still holds it).
        out += ["| command | median s of 5 |", "| --- | ---: |"]
        for args in (["results"], ["results", "--limit", "50", "--json"], ["compare"], ["regressions"],
                     ["campaigns"]):
            ts = []
            for _ in range(5):
                t0 = time.perf_counter()
                subprocess.run([gpufleet, "--db", db, *args], check=True, capture_output=True)
                ts.append(time.perf_counter() - t0)
            out.append(f"| `gpufleet {' '.join(args)}` | {statistics.median(ts):.3f} |")
    finally:
        serve.terminate()
        serve.wait()

    if a.compact:
        before = size_mb(db)
        t0 = time.perf_counter()
        r = subprocess.run([gpufleet, "--db", db, "db", "compact", "--json"], check=True, capture_output=True, text=True)
        dt = time.perf_counter() - t0
        rep = json.loads(r.stdout)
        out += ["", f"`db compact` (samples older than 90 days, power older than 30, VACUUM): {dt:.0f} s "
                f"({rep['seconds']:.0f} s of deletes, {rep['vacuum_seconds']:.0f} s of VACUUM); "
                f"raw times of {rep['samples_dropped']:,} results and {rep['power_dropped']:,} power traces "
                f"({rep['power_rows_deleted']:,} samples) dropped, {rep['kept']:,} old results kept whole; "
                f"**{before:,.0f} MB → {size_mb(db):,.0f} MB**."]
    text = "\n".join(out) + "\n"
    print(text)
    if a.out:
        with open(a.out, "a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    sys.exit(main())
