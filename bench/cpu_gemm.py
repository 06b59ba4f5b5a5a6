#!/usr/bin/env python3
"""fp32 GEMM through the gpufleet agent's cpu backend versus numpy (OpenBLAS), same run, same
machine, same threads, for each instruction set the CPU has: AVX-512 and AVX2.

Usage: python3 bench/cpu_gemm.py [--n 1024 4096] [--isa avx512 avx2] [--rounds 3]
       [--bin-dir target/release] [--write docs/PERFORMANCE.md]

Starts a real gpufleet-agent on a loopback port and runs `gemm/blocked` through `gpufleet run
--json` (so the figure is what a user gets: worker process, validation, median of device times).
The AVX2 row caps both sides: ours with the run's `--env GPUFLEET_CPU_ISA=avx2`, OpenBLAS with
`OPENBLAS_CORETYPE=Haswell` (its AVX2 kernels). numpy runs in a child process per round (the
variable is read when OpenBLAS loads), times `a @ b` after a warm-up until both 10 runs and 1 s,
and reports the median, the core OpenBLAS says it uses and its thread count. Rounds alternate
ours/numpy so drift hits both alike; the reported figure per side is the median over rounds.
"""
import argparse, json, os, statistics, subprocess, sys, datetime

from benchlib import cpu_model, emit, local_agent

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

NUMPY_CHILD = r"""
import ctypes, json, statistics, sys, time
import numpy as np
n = int(sys.argv[1])
rng = np.random.default_rng(1)
a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
for _ in range(3):
    a @ b
times, start = [], time.perf_counter()
while len(times) < 10 or time.perf_counter() - start < 1.0:
    t = time.perf_counter()
    a @ b
    times.append(time.perf_counter() - t)
core, threads = "?", 0
try:
    from threadpoolctl import threadpool_info
    for lib in threadpool_info():
        if lib.get("internal_api") == "openblas":
            core, threads = lib.get("architecture", "?"), lib.get("num_threads", 0)
except Exception:
    pass
print(json.dumps({"gflops": 2 * n ** 3 / statistics.median(times) / 1e9, "core": core,
                  "threads": threads, "numpy": np.__version__}))
"""

# OpenBLAS's names for its AVX2 kernels; AVX-512 is whatever it picks itself on this CPU.
OPENBLAS_CORETYPE = {"avx512": None, "avx2": "Haswell"}


def numpy_gflops(n, isa):
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    if OPENBLAS_CORETYPE[isa]:
        env["OPENBLAS_CORETYPE"] = OPENBLAS_CORETYPE[isa]
    out = subprocess.run([sys.executable, "-c", NUMPY_CHILD, str(n)], env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout)


def ours_gflops(bin_dir, db, n, isa):
    out = subprocess.run(
        [os.path.join(bin_dir, "gpufleet"), "--db", db, "run", "--agent", "bench", "--backend", "cpu",
         "--kernel", "gemm", "--variant", "blocked", "--param", f"m={n}", "--param", f"n={n}",
         "--param", f"k={n}", "--min-iterations", "10", "--min-seconds", "1",
         "--env", f"GPUFLEET_CPU_ISA={isa}", "--json"],
        check=True, capture_output=True, text=True)
    r = json.loads(out.stdout)[0]
    assert r["status"] == "ok", r
    return r["metric"]["value"], r


def cpu_flags():
    for line in open("/proc/cpuinfo"):
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--isa", nargs="+", default=["avx512", "avx2"], choices=["avx512", "avx2"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bin-dir", help="release binaries (default: build them)")
    ap.add_argument("--write", help="append the table to this Markdown file")
    args = ap.parse_args()
    for mod in ("numpy", "threadpoolctl"):
        try:
            __import__(mod)
        except ImportError:
            # threadpoolctl only names OpenBLAS's core; a host without PyPI goes on without it.
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", mod], check=mod == "numpy")
    if not args.bin_dir:
        subprocess.run(["cargo", "build", "--release", "--bins"], cwd=ROOT, check=True)
        args.bin_dir = os.path.join(ROOT, "target", "release")
    isas = [i for i in args.isa if i != "avx512" or "avx512f" in cpu_flags()]
    for i in set(args.isa) - set(isas):
        print(f"skipped {i}: this CPU does not have it", file=sys.stderr)
    rows = []
    with local_agent(args.bin_dir, 50977, "bench", settle_s=1.5) as (db, _):
        for isa in isas:
            for n in args.n:
                ours, theirs, last, blas = [], [], None, None
                for i in range(args.rounds):
                    g, last = ours_gflops(args.bin_dir, db, n, isa)
                    ours.append(g)
                    blas = numpy_gflops(n, isa)
                    theirs.append(blas["gflops"])
                    print(f"{isa} n={n} round {i + 1}: gpufleet {ours[-1]:.1f} GFLOP/s "
                          f"({last['config'].get('isa')}), numpy {theirs[-1]:.1f} "
                          f"({blas['core']}, {blas['threads']} threads)", file=sys.stderr)
                rows.append((isa, n, ours, theirs, last, blas))
    cpu = cpu_model()
    lines = [
        f"### fp32 GEMM, cpu backend vs numpy/OpenBLAS, AVX-512 and AVX2 ({datetime.date.today()})",
        "",
        f"Host: {cpu}, {os.cpu_count()} logical cores. numpy {rows[0][5]['numpy'] if rows else '?'}. "
        f"Median of {args.rounds} alternating rounds; each round is the median of >= 10 iterations and >= 1 s.",
        "",
        "| ISA | n | gpufleet `gemm/blocked` GFLOP/s | OpenBLAS GFLOP/s | ratio | our kernels | OpenBLAS core, threads |",
        "| --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for isa, n, ours, theirs, last, blas in rows:
        o, t = statistics.median(ours), statistics.median(theirs)
        lines.append(f"| {isa} | {n} | {o:.1f} | {t:.1f} | {o / t:.2f} | {last['config'].get('isa')} "
                     f"({last['config'].get('threads')} threads) | {blas['core']}, {blas['threads']} |")
    lines.append("")
    for isa, n, ours, theirs, _, _ in rows:
        lines.append(f"- {isa} n={n} per round: ours {', '.join(f'{x:.1f}' for x in ours)}; "
                     f"OpenBLAS {', '.join(f'{x:.1f}' for x in theirs)}")
    emit(lines, args.write)


if __name__ == "__main__":
    main()
