#!/usr/bin/env python3
"""N agents on one serve: time from campaign start until all results are stored, serve RSS and CPU.
With --simulate: N `gpufleet-agent simulate` agents on two serves sharing one PostgreSQL.

Starts N real `gpufleet-agent` processes (cpu backend only: OpenCL and Vulkan loaders are pointed
at nothing so discovery is instant) that both dial in to one `gpufleet serve --fleet-listen` (TLS,
pinned) and listen on loopback. Then, in the same run, the same `noop` campaign three ways:
  - dial-in: `gpufleet run --agent pod0 ... pod{N-1}`, handed to the serve, which holds the streams;
  - direct (reference): `gpufleet run --agent d0 ... d{N-1}`, the CLI dialing each agent's gRPC port;
  - dial-in again (warm).
For each: wall time from the `run` command's start to its exit (all N results stored), and the
serve's CPU seconds and peak RSS (VmHWM) over the whole bench.

--simulate (issue 56's scale): a throwaway PostgreSQL cluster (ci/postgres.sh), N agents enrolled,
two `gpufleet serve --fleet-listen` (TLS, one certificate) on it, two `gpufleet-agent simulate`
processes of N/2 agents each (the first half dials serve A first, the second half serve B). Then:
time until all N are attached, `agents list` (wall, 3 times), one `noop` campaign on all N (wall
from the `run` command's start to its exit: every result stored), p95 of 20 GETs of `/`, `/groups`,
`/compare` and `/api/agents` on serve A, and each serve's RSS, peak RSS, CPU and threads.

Usage: bench/fleet_scale.py [--agents 100] [--bin target/release]
       bench/fleet_scale.py --simulate --agents 2000 [--bin target/release]
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import free_port, percentile, timed_loads  # noqa: E402


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


def run_noop(gpufleet, db, agents):
    """Wall seconds of one cpu `noop` campaign on AGENTS, from `gpufleet run`'s start to its exit
    (every result stored); exits the bench when the run fails."""
    names = [x for a in agents for x in ("--agent", a)]
    t0 = time.perf_counter()
    r = subprocess.run([gpufleet, "--db", db, "run", *names, "--kernel", "noop", "--backend", "cpu"],
                       capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"run: exit {r.returncode}\n{r.stderr[-2000:]}")
    return dt


def threads(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("Threads:"))


def start_serve(gpufleet, db, tls, err):
    """`gpufleet serve` with a fleet listener and TLS from TLS: (process, http addr, fleet addr, pin)."""
    serve = subprocess.Popen(
        [gpufleet, "--db", db, "serve", "--listen", "127.0.0.1:0", "--fleet-listen", "127.0.0.1:0",
         "--tls-self-signed", tls, "--tick-s", "2"],
        stdout=subprocess.PIPE, stderr=open(err, "w"), text=True)
    http = fleet = pin = None
    while pin is None or fleet is None or http is None:
        line = serve.stdout.readline()
        if not line:
            sys.exit(f"serve exited; see {err}")
        for prefix in ("listening on ", "fleet listening on ", "tls sha256 "):
            if line.startswith(prefix):
                v = line.split()[-1]
                if prefix == "listening on ":
                    http = v
                elif prefix.startswith("fleet"):
                    fleet = v
                else:
                    pin = v
    return serve, http, fleet, pin


def simulated(args):
    """Issue 56's scale: N simulated agents on two serves sharing one PostgreSQL."""
    gpufleet = os.path.realpath(os.path.join(args.bin, "gpufleet"))
    agent = os.path.realpath(os.path.join(args.bin, "gpufleet-agent"))
    here = os.path.dirname(os.path.abspath(__file__))
    pg_sh = os.path.join(here, "..", "ci", "postgres.sh")
    work = tempfile.mkdtemp(prefix="gpufleet-scale-sim-")
    os.chmod(work, 0o755)
    pg_dir = os.path.join(work, "pg")
    port = free_port()
    url = subprocess.run(["bash", pg_sh, "start", pg_dir, str(port)], check=True, capture_output=True,
                         text=True).stdout.strip().splitlines()[-1]
    db = url.rsplit("/", 1)[0] + "/fleet"
    subprocess.run(["psql", url, "-qc", "CREATE DATABASE fleet"], check=True, capture_output=True)
    procs = []
    n = args.agents
    halves = [("sa", n // 2), ("sb", n - n // 2)]

    def g(*a):
        return subprocess.run([gpufleet, "--db", db, *a], check=True, capture_output=True, text=True)

    try:
        t = time.time()
        for prefix, count in halves:
            with open(os.path.join(work, f"tokens-{prefix}"), "w") as f:
                for i in range(count):
                    name = f"{prefix}-{i:04d}"
                    tok = json.loads(g("agents", "add", name, "--dial-in", "--json").stdout)["token"]
                    f.write(f"{name} {tok}\n")
        print(f"{n} agents enrolled in {time.time() - t:.0f} s (one `agents add` each)", flush=True)
        tls = os.path.join(work, "tls")
        a = start_serve(gpufleet, db, tls, os.path.join(work, "serve-a.err"))
        procs.append(a[0])
        b = start_serve(gpufleet, db, tls, os.path.join(work, "serve-b.err"))
        procs.append(b[0])
        assert a[3] == b[3], "the two serves should share one certificate"
        t = time.time()
        for (prefix, count), order in zip(halves, [(a, b), (b, a)]):
            connects = [x for s in order for x in ("--connect", f"https://{s[2]}")]
            procs.append(subprocess.Popen(
                [agent, "simulate", "--agents", str(count), "--name-prefix", prefix,
                 "--tokens", os.path.join(work, f"tokens-{prefix}"), *connects, "--pin-sha256", a[3],
                 "--state-dir", os.path.join(work, f"state-{prefix}"), "--seed", "1"],
                stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, f"sim-{prefix}.err"), "w")))
        while True:
            up = sum(x["attached"] for x in json.loads(g("agents", "list", "--json").stdout))
            if up == n:
                break
            if time.time() - t > 600:
                sys.exit(f"only {up} of {n} agents attached within 600 s")
            time.sleep(1)
        attach_s = time.time() - t
        print(f"{n} agents attached in {attach_s:.1f} s", flush=True)
        lists = []
        for _ in range(3):
            t0 = time.perf_counter()
            listed = g("agents", "list").stdout.count("\n")
            lists.append(time.perf_counter() - t0)
        cpu0 = [proc_stat(s[0].pid)[0] for s in (a, b)]
        campaign_s = run_noop(gpufleet, db, [f"{prefix}-{i:04d}" for prefix, count in halves for i in range(count)])
        cpu1 = [proc_stat(s[0].pid)[0] for s in (a, b)]
        stored = subprocess.run(["psql", db, "-tAc", "SELECT count(*), count(*) FILTER (WHERE status = 'ok') "
                                 "FROM results"], check=True, capture_output=True, text=True).stdout.strip()
        pages = []
        for path in ["/", "/groups", "/compare", "/api/agents"]:
            times, size = timed_loads(f"https://{a[1]}", path, 20)
            pages.append((path, percentile(times, 50), percentile(times, 95), size))
        print(f"\n{n} simulated agents, two serves on one PostgreSQL, cpu noop; results stored (all, ok): "
              f"{stored.replace('|', ', ')}\n")
        print(f"| measure | value |\n| --- | --- |")
        print(f"| all {n} attached (from the simulators' start) | {attach_s:.1f} s |")
        print(f"| `agents list` wall (max of 3; {listed} lines) | {max(lists):.2f} s |")
        print(f"| one noop per agent, `run` start to every result stored | {campaign_s:.1f} s |")
        for label, s, c0, c1 in [("A", a, cpu0[0], cpu1[0]), ("B", b, cpu0[1], cpu1[1])]:
            cpu, rss, hwm = proc_stat(s[0].pid)
            print(f"| serve {label}: RSS / peak RSS / threads / CPU s in the campaign / CPU s in all "
                  f"| {rss:.0f} MiB / {hwm:.0f} MiB / {threads(s[0].pid)} / {c1 - c0:.1f} / {cpu:.1f} |")
        for path, p50, p95, size in pages:
            print(f"| `{path}` on serve A: p50 / p95 / bytes | {p50 * 1000:.0f} ms / {p95 * 1000:.0f} ms / {size:,} |")
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
        subprocess.run(["bash", pg_sh, "stop", pg_dir], capture_output=True)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, default=100)
    ap.add_argument("--bin", default="target/release")
    ap.add_argument("--base-port", type=int, default=43000)
    ap.add_argument("--simulate", action="store_true",
                    help="simulated agents on two serves sharing a throwaway PostgreSQL")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (--simulate)")
    args = ap.parse_args()
    if args.simulate:
        return simulated(args)
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

        rows = []
        for label, prefix in [("dial-in (cold)", "pod"), ("direct, CLI dials (reference)", "d"),
                              ("dial-in (warm)", "pod")]:
            c0, _, _ = proc_stat(serve.pid)
            dt = run_noop(gpufleet, db, [f"{prefix}{i}" for i in range(n)])
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
