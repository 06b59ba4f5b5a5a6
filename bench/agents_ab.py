#!/usr/bin/env python3
"""Agent builds side by side on one host: the same specs through each build's real agent, alternating.

A kernel change is measured against the build before it in the same call, on the same GPU, never against
a figure from another day. Each --build names a folder holding `gpufleet` and `gpufleet-agent` (release
binaries), and optionally worker environment overrides (a debug switch, compiler options):

  python3 bench/agents_ab.py --build base=/tmp/sb/base --build new=/tmp/sb/new \\
      --build ft8=/tmp/sb/new:GPUFLEET_DEBUG_OPENCL_OPTIONS=-DFT=8 --jobs jobs.json --out ab.md

JOBS is a JSON list, one object a spec: {"backend": "vulkan", "kernel": "gemv", "dtype": "q4_0",
"params": {"k": 4096, "n": 14336}, "variant": null, "iters": 20, "builds": ["base", "new"]} (variant,
dtype, iters and builds optional; builds default to every --build). The builds take turns, their order
reversed from one spec to the next. A spec's rows are printed (and appended to --out) as soon as they
are measured, so a run cut short keeps what it measured: build, spec, status and validation, the metric,
its median time, its ratio to the spec's first build (for a row without a metric, such as an invalid one
under a debug switch, the inverse ratio of the median times), the achieved GB/s and joules a unit where
the agent reports them.
With --rounds N the whole list runs N times, each round through freshly started agents (on a small VM a CPU
row can move by a third from one agent process to the next), and a closing table gives each spec's and
build's median ratio to the first build over the rounds, with its range.
Exit 1 when a row is not `ok` and validated.
"""
import argparse
import contextlib
import hashlib
import json
import os
import statistics
import sys
import time

from benchlib import device_of, free_port, local_agent, ours, teller, val


def parse_build(text):
    """NAME=DIR[:KEY=VAL[,KEY=VAL...]] -> (name, dir, env)."""
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise argparse.ArgumentTypeError(f"--build wants NAME=DIR[:KEY=VAL,...], got {text[:60]!r}")
    folder, _, envs = rest.partition(":")
    env = {}
    for pair in filter(None, envs.split(",")):
        k, sep, v = pair.partition("=")
        if not sep or not k:
            raise argparse.ArgumentTypeError(f"--build {name}: an override wants KEY=VAL, got {pair[:60]!r}")
        env[k] = v
    return name, folder, env


def joules(r):
    """A result's joules a unit, three significant digits, or '-'."""
    j = r.get("joules_per_unit")
    return f"{j:.3g}" if isinstance(j, (int, float)) else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[1:]))
    ap.add_argument("--build", action="append", type=parse_build, required=True, metavar="NAME=DIR[:KEY=VAL,...]")
    ap.add_argument("--jobs", required=True, help="the JSON list of specs")
    ap.add_argument("--out", help="a Markdown file the rows are appended to")
    ap.add_argument("--timeout-s", type=int, default=400, help="a run's limit (default 400)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the whole job list this many times, each round with freshly started agents, and "
                         "close with each spec's and build's median ratio to the first build over the rounds "
                         "(on a small VM a CPU row can move by a third from one agent process to the next: "
                         "docs/PERFORMANCE.md, Zen 3)")
    ap.add_argument("--config", action="append", default=[], metavar="KEY",
                    help="also print this key of each result's configuration under its row (repeatable: "
                         "dispatch_profile_us with GPUFLEET_DEBUG_VULKAN_PROFILE=1, pipeline_stats with "
                         "GPUFLEET_DEBUG_VULKAN_PIPELINE_STATS=1)")
    args = ap.parse_args()
    builds = {name: (folder, env) for name, folder, env in args.build}
    if len(builds) != len(args.build):
        ap.error("two --build share a name")
    with open(args.jobs) as f:
        jobs = json.load(f)
    for i, job in enumerate(jobs):
        missing = [b for b in job.get("builds", []) if b not in builds]
        if "backend" not in job or "kernel" not in job or missing:
            ap.error(f"job {i}: needs backend and kernel, and builds among --build (unknown: {missing})")

    # Two builds that would run the same agent with the same overrides measure nothing: say so before
    # any device time is spent (a shared cargo target folder can leave the "new" binary the old one).
    seen = {}
    for name, (folder, env) in builds.items():
        path = os.path.join(folder, "gpufleet-agent")
        try:
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
        except OSError as e:
            ap.error(f"--build {name}: cannot read {path}: {e.strerror}")
        key = (digest, tuple(sorted(env.items())))
        if key in seen:
            ap.error(f"--build {name} and --build {seen[key]} run the same agent binary ({digest[:12]}) with the "
                     "same overrides: the comparison would measure nothing")
        seen[key] = name

    say = teller(args.out)

    if args.rounds < 1:
        ap.error("--rounds wants 1 or more")
    bad = 0
    # (spec, build) -> the ratios to the spec's first build, one a round that measured both.
    ratios = {}
    say("| build | backend | spec | status | metric | median ms | vs first | GB/s | J/unit | wall s |")
    say("| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for _ in range(args.rounds):
        bad += one_round(args, builds, jobs, say, ratios)
    if args.rounds > 1:
        say("")
        say(f"| spec | build | median ratio to the first build over {args.rounds} rounds | min | max |")
        say("| --- | --- | ---: | ---: | ---: |")
        for (spec, name), rs in ratios.items():
            say(f"| {spec} | {name} | {statistics.median(rs):.3f} | {min(rs):.3f} | {max(rs):.3f} |")
    sys.exit(1 if bad else 0)


def one_round(args, builds, jobs, say, ratios):
    """Every job once, through agents started for this round; the rows not `ok` and validated."""
    bad = 0
    with contextlib.ExitStack() as stack:
        # One agent a folder: builds differing only in their overrides share it.
        agents = {}
        for folder in dict.fromkeys(folder for folder, _ in builds.values()):
            agents[folder] = (f"a{len(agents)}",) + stack.enter_context(
                local_agent(folder, free_port(), f"a{len(agents)}"))
        for i, job in enumerate(jobs):
            names = job.get("builds") or list(builds)
            spec = "/".join(str(job.get(k) or "-") for k in ("kernel", "variant", "dtype"))
            spec += " " + ",".join(f"{k}={v}" for k, v in job.get("params", {}).items())
            measured = {}
            for name in (names if i % 2 == 0 else names[::-1]):
                folder, env = builds[name]
                agent, db, info = agents[folder]
                dev = device_of(info, job["backend"])
                t = time.time()
                if dev is None:
                    r = {"status": "no device", "message": f"no {job['backend']} device"}
                else:
                    r = ours(folder, db, agent, job["backend"], dev["id"], job["kernel"], job.get("params", {}),
                             variant=job.get("variant"), iters=job.get("iters", 10), dtype=job.get("dtype"),
                             timeout_s=args.timeout_s, env=env)
                measured[name] = (r, time.time() - t)
            # A spec's rows together, in --build order, each beside the spec's first build.
            first = val(measured[names[0]][0])
            first_s = measured[names[0]][0].get("median_s")
            for name in names:
                r, wall = measured[name]
                ok = r.get("status") == "ok" and (r.get("validation") or {}).get("passed", False)
                bad += not ok
                value = val(r)
                status = "ok" if ok else f"{r.get('status')}: {(r.get('message') or '')[:100]}"
                # An invalid row keeps its time (a debug switch's bound): its speed beside the first
                # build's is then the inverse ratio of their median times.
                median_s = r.get("median_s")
                if value == value and first:
                    ratio = f"{value / first:.3f}"
                    ratios.setdefault((spec, name), []).append(value / first)
                elif median_s and first_s:
                    ratio = f"{first_s / median_s:.3f} (time)"
                else:
                    ratio = "-"
                shown = f"{value:.1f} {r['metric']['unit']}" if value == value else "-"
                ms = f"{median_s * 1e3:.3f}" if median_s else "-"
                say(f"| {name} | {job['backend']} | {spec} | {status} | {shown} | {ms} | {ratio} | "
                    f"{(r.get('config') or {}).get('achieved_gbps', '-')} | {joules(r)} | "
                    f"{wall:.0f} |")
                for key in args.config:
                    shown = (r.get("config") or {}).get(key)
                    if shown is not None:
                        say(f"|  | {key} | {shown} | | | | | | | |")
    return bad


if __name__ == "__main__":
    main()
