#!/usr/bin/env python3
"""Live power under load (issue 33 item 6): watchers on one dial-in agent while campaigns run on the
same link.

A real `gpufleet-agent` on the RX 580 sysfs fixture (sampling at 20 Hz) dials in to a real
`gpufleet serve` (plain HTTP on loopback). Then, in the same run:
  1. reference: campaigns of quick cpu runs with nobody watching (the serve's 1 Hz gauge
     subscription only);
  2. the soak: WATCHERS streams of /api/agents/rig/power at 20 Hz for SECONDS, one of which never
     reads (its socket fills and the serve must drop its samples, not buffer them), with the same
     campaigns back to back beside them.
Every 10 s it records the agent's and the serve's CPU (percent of one core over the interval) and
RSS. A result's delay is the time from its run's end on the agent (`started_at + wall_s`, the
agent's clock) to its row in the store (`created_at`, the serve's clock: the same host): the
reference and the soak give the delay without and with the watchers.

Prints a Markdown report (and writes it to --out): the reader rates, samples dropped for the stuck
watcher, the CPU and RSS over time, the result delays, and whether every campaign's every job has
exactly one result.

Usage: bench/power_soak.py [--bin target/release] [--seconds 600] [--watchers 20] [--out FILE]
"""

import argparse
import json
import os
import re
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from benchlib import cpu_model, rx580_fixture


def proc_stat(pid):
    """(cpu seconds, VmRSS MiB) of a process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(l.split()[1]) / 1024 for l in f if l.startswith("VmRSS:"))
    return cpu, rss


class Reader(threading.Thread):
    """One watcher: GET the power stream and count its samples (or, `stuck`, never read)."""

    def __init__(self, addr, stuck):
        super().__init__(daemon=True)
        self.addr, self.stuck, self.samples, self.error = addr, stuck, 0, None
        self.stop = threading.Event()

    def run(self):
        host, port = self.addr.split(":")
        s = socket.socket()
        if self.stuck:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect((host, int(port)))
        s.sendall(f"GET /api/agents/rig/power?rate_hz=20 HTTP/1.1\r\nHost: {self.addr}\r\n"
                  "Accept: text/event-stream\r\n\r\n".encode())
        if self.stuck:
            self.stop.wait()
            s.close()
            return
        s.settimeout(5)
        buf = b""
        try:
            while not self.stop.is_set():
                chunk = s.recv(65536)
                if not chunk:
                    self.error = "the serve closed the stream"
                    return
                *lines, buf = (buf + chunk).split(b"\n")
                self.samples += sum(1 for line in lines if line.startswith(b"data: {"))
        except OSError as e:
            self.error = str(e)
        finally:
            s.close()


def suite(path):
    """Six quick cpu runs (about 0.3 s each)."""
    text = ('name = "soak"\ndescription = "power soak"\n[defaults]\nwarmup = 0\nmin_iterations = 2\n'
            "min_seconds = 0.2\nmax_iterations = 100000\ntimeout_s = 60\ntarget_ci_pct = 0\n")
    for i in range(6):
        text += f'[[run]]\nkernel = "vec_add"\nparams = {{ n = {65536 * (i + 1)} }}\n'
    path.write_text(text)


def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/release")
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--watchers", type=int, default=20)
    ap.add_argument("--reference-campaigns", type=int, default=5)
    ap.add_argument("--no-campaigns", action="store_true",
                    help="watchers only (the long run that shows where the agent's RSS levels off)")
    ap.add_argument("--out")
    args = ap.parse_args()
    gpufleet = os.path.realpath(os.path.join(args.bin, "gpufleet"))
    agent_bin = os.path.realpath(os.path.join(args.bin, "gpufleet-agent"))
    work = Path(tempfile.mkdtemp(prefix="gpufleet-soak-"))
    db = work / "fleet.db"
    procs = []

    def g(*a):
        return subprocess.run([gpufleet, "--db", str(db), *a], check=True, capture_output=True, text=True)

    try:
        sysfs = work / "sysfs"
        rx580_fixture(sysfs)
        suite(work / "soak.toml")
        token = json.loads(g("agents", "add", "rig", "--dial-in", "--json").stdout)["token"]
        serve = subprocess.Popen([gpufleet, "--db", str(db), "serve", "--listen", "127.0.0.1:0",
                                  "--fleet-listen", "127.0.0.1:0", "--tick-s", "1"],
                                 stdout=subprocess.PIPE, stderr=open(work / "serve.log", "w"), text=True)
        procs.append(serve)
        http = fleet = None
        while fleet is None:
            line = serve.stdout.readline()
            if not line:
                sys.exit(f"serve exited; see {work / 'serve.log'}")
            if line.startswith("listening on "):
                http = line.split()[-1]
            if line.startswith("fleet listening on "):
                fleet = line.split()[-1]
        env = dict(os.environ, GPUFLEET_TOKEN=token, GPUFLEET_SYSFS_ROOT=str(sysfs),
                   OCL_ICD_VENDORS="/nonexistent", VK_DRIVER_FILES="/nonexistent.json",
                   GPUFLEET_CACHE_DIR=str(work / "cache"))
        env.pop("GPUFLEET_LISTEN", None)
        agent = subprocess.Popen([agent_bin, "--connect", f"http://{fleet}", "--name", "rig",
                                  "--state-dir", str(work / "state"), "--power-rate-hz", "20"],
                                 env=env, stdout=subprocess.DEVNULL, stderr=open(work / "agent.log", "w"))
        procs.append(agent)
        t = time.time()
        while not any(a["attached"] for a in json.loads(g("agents", "list", "--json").stdout)):
            if time.time() - t > 60:
                sys.exit("the agent did not attach within 60 s")
            time.sleep(0.3)

        campaigns = []

        def campaign(phase):
            r = subprocess.run([gpufleet, "--db", str(db), "run", "--suite", str(work / "soak.toml"),
                                "--agent", "rig"], capture_output=True, text=True)
            campaigns.append((phase, r.returncode, r.stderr[-500:]))

        r0 = (time.time(), proc_stat(agent.pid), proc_stat(serve.pid))
        for _ in range(0 if args.no_campaigns else args.reference_campaigns):
            campaign("reference")
        r1 = (time.time(), proc_stat(agent.pid), proc_stat(serve.pid))
        ref_cpu = [100 * (r1[i][0] - r0[i][0]) / max(r1[0] - r0[0], 1e-9) for i in (1, 2)]

        readers = [Reader(http, stuck=(i == 0)) for i in range(args.watchers)]
        for r in readers:
            r.start()
        series = []
        stop = threading.Event()

        def beside():
            while not stop.is_set() and not args.no_campaigns:
                campaign("soak")

        runner = threading.Thread(target=beside, daemon=True)
        t0 = time.time()
        runner.start()
        last = (t0, proc_stat(agent.pid), proc_stat(serve.pid))
        while time.time() - t0 < args.seconds:
            time.sleep(10)
            now = (time.time(), proc_stat(agent.pid), proc_stat(serve.pid))
            dt = now[0] - last[0]
            series.append({
                "t": now[0] - t0,
                "agent_cpu_pct": 100 * (now[1][0] - last[1][0]) / dt, "agent_rss_mib": now[1][1],
                "serve_cpu_pct": 100 * (now[2][0] - last[2][0]) / dt, "serve_rss_mib": now[2][1],
            })
            last = now
        stop.set()
        runner.join()
        elapsed = time.time() - t0
        metrics = urllib.request.urlopen(f"http://{http}/metrics", timeout=10).read().decode()
        dropped = float((re.search(r"^gpufleet_power_watch_dropped_total (\S+)", metrics, re.M) or [0, "nan"])[1])
        watchers_open = float((re.search(r"^gpufleet_power_watchers (\S+)", metrics, re.M) or [0, "nan"])[1])
        for r in readers:
            r.stop.set()

        con = sqlite3.connect(db)
        rows = con.execute("""SELECT c.id, r.created_at - (r.started_at + r.wall_s), r.status
                              FROM results r JOIN jobs j ON j.run_id = r.run_id
                              JOIN campaigns c ON c.id = j.campaign_id ORDER BY c.id""").fetchall()
        jobs, distinct = con.execute("SELECT count(*), count(DISTINCT run_id) FROM jobs").fetchone()
        stored = con.execute("SELECT count(*), count(DISTINCT run_id) FROM results").fetchone()
        ref_ids = set(range(1, args.reference_campaigns + 1))
        delay_ref = [1000 * d for c, d, _ in rows if c in ref_ids]
        delay_soak = [1000 * d for c, d, _ in rows if c not in ref_ids]
        not_ok = [s for _, _, s in rows if s != "ok"]
        failed = [c for c in campaigns if c[1] != 0]

        first, tail = series[:6], series[-6:]
        avg = lambda xs, k: statistics.mean(x[k] for x in xs)
        lines = [
            f"Power soak on {cpu_model()} ({os.cpu_count()} CPUs): {args.watchers} watchers at 20 Hz on one dial-in "
            f"agent for {elapsed:.0f} s, campaigns beside them.",
            "",
            "| figure | value |",
            "| --- | --- |",
            f"| samples a reading watcher got | {', '.join(str(r.samples) for r in readers[1:4])}, ... "
            f"(mean {statistics.mean([r.samples for r in readers[1:]] or [0]) / elapsed:.1f} /s each) |",
            f"| reader errors | {sum(1 for r in readers[1:] if r.error)} |",
            f"| samples dropped (the stuck watcher) | {dropped:.0f} |",
            f"| watchers open at the end | {watchers_open:.0f} |",
            f"| agent CPU: campaigns alone / with watchers, first minute / last minute | {ref_cpu[0]:.1f}% / "
            f"{avg(first, 'agent_cpu_pct'):.1f}% / {avg(tail, 'agent_cpu_pct'):.1f}% |",
            f"| agent RSS, first minute / last minute / max | {avg(first, 'agent_rss_mib'):.1f} / {avg(tail, 'agent_rss_mib'):.1f} / "
            f"{max(x['agent_rss_mib'] for x in series):.1f} MiB |",
            f"| serve CPU: campaigns alone / with watchers, first minute / last minute | {ref_cpu[1]:.1f}% / "
            f"{avg(first, 'serve_cpu_pct'):.1f}% / {avg(tail, 'serve_cpu_pct'):.1f}% |",
            f"| serve RSS, first minute / last minute / max | {avg(first, 'serve_rss_mib'):.1f} / {avg(tail, 'serve_rss_mib'):.1f} / "
            f"{max(x['serve_rss_mib'] for x in series):.1f} MiB |",
            f"| result delay, nobody watching: p50 / p95 / max | {pct(delay_ref, .5):.1f} / {pct(delay_ref, .95):.1f} / "
            f"{max(delay_ref, default=float('nan')):.1f} ms ({len(delay_ref)} results) |",
            f"| result delay, {args.watchers} watchers: p50 / p95 / max | {pct(delay_soak, .5):.1f} / {pct(delay_soak, .95):.1f} / "
            f"{max(delay_soak, default=float('nan')):.1f} ms ({len(delay_soak)} results) |",
            f"| campaigns / failed | {len(campaigns)} / {len(failed)} |",
            f"| jobs / results stored (distinct run ids) / not ok | {jobs} / {stored[0]} ({stored[1]}) / {len(not_ok)} |",
        ]
        report = "\n".join(lines) + "\n"
        print(report)
        print(json.dumps(series))
        if args.out:
            Path(args.out).write_text(report + "\n" + json.dumps(series) + "\n")
        ok = (not failed and jobs == distinct == stored[0] == stored[1] and not not_ok
              and all(r.error is None for r in readers[1:]))
        sys.exit(0 if ok else 1)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


if __name__ == "__main__":
    main()
