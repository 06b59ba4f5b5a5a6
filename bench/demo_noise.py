#!/usr/bin/env python3
"""How many of `gpufleet demo`'s results are marked noisy, idle and under load.

Runs `gpufleet demo` in a fresh directory (its own database) with each binary given, optionally
with `stress-ng --cpu N` beside it, and reads the stored results back as JSON:

- results, and how many are noisy (and why, for binaries that store the robust figures);
- rows of the comparison (one spec) with two or more `ok` devices, and how many of them carry a
  `x` figure (at least one non-noisy cell to be the best);
- what the old rule (plain CV above 10%) would have said of the same results.

    bench/demo_noise.py --gpufleet target/release/gpufleet [--vs /tmp/before/gpufleet] \
        [--runs 2] [--stress 2]

Prints a Markdown table (one line per binary, run and load) for docs/PERFORMANCE.md, and JSON
with `--json`.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict


def quartile_cv(r):
    p25, p75, med = r.get("p25_s"), r.get("p75_s"), r.get("median_s")
    if p25 is None or p75 is None or not med:
        return None
    return (p75 - p25) / 1.349 / med


def ci_pct(r):
    lo, hi, med = r.get("ci_low_s"), r.get("ci_high_s"), r.get("median_s")
    if lo is None or hi is None or not med:
        return None
    return (hi - lo) / 2 / med * 100


def why(r):
    """The first reason the noise rule gives (mirrors gpufleet_kernels::NoiseFigures)."""
    ci, target = ci_pct(r), r.get("target_ci_pct")
    if ci is not None and target and ci > target:
        return "interval"
    if (r.get("robust_cv") or 0) > 0.125:
        return "robust_cv"
    q = quartile_cv(r)
    if q is not None and q > 0.125:
        return "quartile_cv"
    if (r.get("cv") or 0) > 0.10:
        return "cv (old rule)"
    return "?"


def demo(binary, stress):
    workdir = tempfile.mkdtemp(prefix="gpufleet-demo-noise-")
    load = None
    try:
        if stress:
            if not shutil.which("stress-ng"):
                sys.exit("--stress needs stress-ng (apt-get install stress-ng)")
            load = subprocess.Popen(
                ["stress-ng", "--cpu", str(stress), "--quiet"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(1)
        start = time.monotonic()
        env = dict(os.environ, PATH=os.path.dirname(os.path.abspath(binary)) + ":" + os.environ["PATH"])
        subprocess.run(
            [binary, "demo"], cwd=workdir, env=env, check=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wall = time.monotonic() - start
    finally:
        if load:
            load.terminate()
            load.wait()
    out = subprocess.run(
        [binary, "results", "--format", "json", "--all"],
        cwd=workdir, check=True, capture_output=True, text=True,
    ).stdout
    shutil.rmtree(workdir, ignore_errors=True)
    return json.loads(out), wall


def summarise(results):
    ok = [r for r in results if r["status"] == "ok"]
    noisy = [r for r in ok if r["noisy"]]
    reasons = defaultdict(int)
    for r in noisy:
        reasons[why(r)] += 1
    rows = defaultdict(list)
    for r in ok:
        rows[r["spec_key"]].append(r)
    multi = [cells for cells in rows.values() if len(cells) >= 2]
    with_x = [cells for cells in multi if any(not c["noisy"] for c in cells)]
    return {
        "results_ok": len(ok),
        "noisy": len(noisy),
        "noisy_by": dict(reasons),
        "old_rule_noisy": sum(1 for r in ok if (r.get("cv") or 0) > 0.10
                              or (ci_pct(r) or 0) > (r.get("target_ci_pct") or 1e9)),
        "rows": len(rows),
        "rows_noisy_only": sum(1 for cells in rows.values() if all(c["noisy"] for c in cells)),
        "rows_2plus": len(multi),
        "rows_2plus_with_x": len(with_x),
        "outliers_high": sum(r.get("outliers_high") or 0 for r in ok),
        "warmup_trimmed": sum(1 for r in ok if "warmup_trimmed" in (r.get("config") or {})),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpufleet", required=True, help="the gpufleet binary to measure")
    ap.add_argument("--vs", help="a reference gpufleet binary, run alternately in the same session")
    ap.add_argument("--runs", type=int, default=2, help="demos per binary and load (default 2)")
    ap.add_argument("--stress", type=int, default=0, help="also run with stress-ng --cpu N beside the demo")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a Markdown table")
    args = ap.parse_args()
    binaries = [("new", args.gpufleet)] + ([("reference", args.vs)] if args.vs else [])
    loads = [0] + ([args.stress] if args.stress else [])
    lines = []
    for load in loads:
        for i in range(args.runs):
            for name, binary in binaries:
                results, wall = demo(binary, load)
                s = summarise(results)
                s.update(binary=name, run=i + 1, stress=load, wall_s=round(wall, 1))
                lines.append(s)
                print(json.dumps(s), file=sys.stderr)
    if args.json:
        print(json.dumps(lines, indent=2))
        return
    print("| binary | load | run | ok results | noisy | noisy by | old rule | rows ≥2 devices | with × | outliers | trimmed | wall s |")
    print("| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for s in lines:
        load = f"stress-ng --cpu {s['stress']}" if s["stress"] else "idle"
        by = ", ".join(f"{k} {v}" for k, v in sorted(s["noisy_by"].items())) or "-"
        print(f"| {s['binary']} | {load} | {s['run']} | {s['results_ok']} | {s['noisy']} | {by} | "
              f"{s['old_rule_noisy']} | {s['rows_2plus']} | {s['rows_2plus_with_x']} | "
              f"{s['outliers_high']} | {s['warmup_trimmed']} | {s['wall_s']} |")


if __name__ == "__main__":
    main()
