#!/usr/bin/env python3
"""100 agents on one serve: time from campaign start until all results are stored, serve RSS and CPU.

Starts N real `gpufleet-agent` processes (cpu backend only: OpenCL and Vulkan loaders are pointed
at nothing so discovery is instant) that both dial in to one `gpufleet serve --fleet-listen` (TLS,
pinned) and listen on loopback. Then, in the same run, the same `noop` campaign three ways:
  - dial-in: `gpufleet run --agent pod0 ... pod{N-1}`, handed to the serve, which holds the streams;
  - direct (reference): `gpufleet run --agent d0 ... d{N-1}`, the CLI dialing each agent's gRPC port;
  - dial-in again (warm).
For each: wall time from the `run` command's start to its exit (all N results stored), and the
serve's CPU seconds and peak RSS (VmHWM) over the whole bench.

Usage: bench/fleet_scale.py [--agents 100] [--bin target/release]
"""

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time


def proc_stat(pid):
    """(cpu seconds, VmRSS MiB, VmHWM MiB) of a process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    rss = hwm = 0.0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
    return cpu, rss, hwm


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, default=100)
    ap.add_argument("--bin", default="target/release")
    ap.add_argument("--base-port", type=int, default=43000)
    args = ap.parse_args()
    gpufleet = os.path.realpath(os.path.join(args.bin, "gpufleet"))
    agent = os.path.realpath(os.path.join(args.bin, "gpufleet-agent"))
    work = tempfile.mkdtemp(prefix="gpufleet-scale-")
    db = os.path.join(work, "fleet.db")
    procs = []

    def g(*a, **kw):
        return subprocess.run([gpufleet, "--db", db, *a], check=True, capture_output=True, text=True, **kw)

    try:
        n = args.agents
        tokens = []
        for i in range(n):
            tokens.append(json.loads(g("agents", "add", f"pod{i}", "--dial-in", "--json").stdout)["token"])
            # The same agent process, reached directly (its token guards the listener too).
            g("agents", "add", f"d{i}", f"http://127.0.0.1:{args.base_port + i}", "--token", tokens[i])
        serve = subprocess.Popen(
            [gpufleet, "--db", db, "serve", "--listen", "127.0.0.1:0", "--fleet-listen", "127.0.0.1:0",
             "--tls-self-signed", os.path.join(work, "tls"), "--tick-s", "5"],
            stdout=subprocess.PIPE, stderr=open(os.path.join(work, "serve.err"), "w"), text=True)
        procs.append(serve)
        fleet = pin = None
        while pin is None:
            line = serve.stdout.readline()
            if not line:
                sys.exit("serve exited")
            if line.startswith("fleet listening on "):
                fleet = line.split()[-1]
            if line.startswith("tls sha256 "):
                pin = line.split()[-1]
        env = dict(os.environ, OCL_ICD_VENDORS="/nonexistent", VK_DRIVER_FILES="/nonexistent.json",
                   GPUFLEET_CACHE_DIR=os.path.join(work, "cache"))
        env.pop("GPUFLEET_LISTEN", None)
        t = time.time()
        for i in range(n):
            e = dict(env, GPUFLEET_TOKEN=tokens[i])
            procs.append(subprocess.Popen(
                [agent, "--connect", f"https://{fleet}", "--name", f"pod{i}", "--pin-sha256", pin,
                 "--listen", f"127.0.0.1:{args.base_port + i}", "--state-dir", os.path.join(work, f"s{i}")],
                env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        while True:
            agents = json.loads(g("agents", "list", "--json").stdout)
            up = sum(a["attached"] for a in agents)
            if up == n:
                break
            if time.time() - t > 300:
                sys.exit(f"only {up} of {n} agents attached within 300 s")
            time.sleep(0.5)
        print(f"{n} agents attached in {time.time() - t:.1f} s")
        cpu0, _, _ = proc_stat(serve.pid)

        def campaign(prefix):
            names = [a for i in range(n) for a in ("--agent", f"{prefix}{i}")]
            t0 = time.perf_counter()
            r = subprocess.run([gpufleet, "--db", db, "run", *names, "--kernel", "noop", "--backend", "cpu"],
                               capture_output=True, text=True)
            dt = time.perf_counter() - t0
            if r.returncode != 0:
                sys.exit(f"run {prefix}: exit {r.returncode}\n{r.stderr[-2000:]}")
            return dt

        rows = []
        for label, prefix in [("dial-in (cold)", "pod"), ("direct, CLI dials (reference)", "d"),
                              ("dial-in (warm)", "pod")]:
            c0, _, _ = proc_stat(serve.pid)
            dt = campaign(prefix)
            c1, rss, hwm = proc_stat(serve.pid)
            rows.append((label, dt, c1 - c0, rss, hwm))
        con = sqlite3.connect(db)
        stored, ok = con.execute("SELECT count(*), sum(status = 'ok') FROM results").fetchone()
        print(f"\n{n} agents, cpu noop; results stored: {stored} ({ok} ok)\n")
        print("| campaign | wall s (start to all stored) | serve CPU s | serve RSS MiB | serve peak RSS MiB |")
        print("| --- | --- | --- | --- | --- |")
        for label, dt, cpu, rss, hwm in rows:
            print(f"| {label} | {dt:.2f} | {cpu:.2f} | {rss:.0f} | {hwm:.0f} |")
        total_cpu, _, _ = proc_stat(serve.pid)
        print(f"\nserve CPU over the whole bench (attach included): {total_cpu - 0:.2f} s; since all attached: {total_cpu - cpu0:.2f} s")
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
