#!/usr/bin/env python3
"""fp32 GEMM through the gpufleet agent's cpu backend versus numpy (OpenBLAS),
both measured in the same run on the same machine.

Usage: python3 bench/cpu_gemm.py [--n 1024] [--rounds 3] [--write docs/PERFORMANCE.md]

Builds the release binaries, starts a real gpufleet-agent on a loopback port,
runs `gemm/blocked` through `gpufleet run --json` (so the figure is what a
user gets: worker process, validation, median of device times), and times
numpy's `a @ b` the same way (warm-up, then iterations until both 10 runs and
1 s, median). Rounds alternate ours/numpy so drift hits both alike; the
reported figure per side is the median over rounds.
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time, datetime, platform

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def numpy_gflops(n, min_iter=10, min_s=1.0, warmup=3):
    import numpy as np
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    for _ in range(warmup):
        a @ b
    times, start = [], time.perf_counter()
    while len(times) < min_iter or time.perf_counter() - start < min_s:
        t = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t)
    return 2 * n ** 3 / statistics.median(times) / 1e9


def ours_gflops(bin_dir, db, n):
    out = subprocess.run(
        [os.path.join(bin_dir, "gpufleet"), "--db", db, "run", "--agent", "bench",
         "--kernel", "gemm", "--variant", "blocked", "--param", f"m={n}", "--param", f"n={n}",
         "--param", f"k={n}", "--min-iterations", "10", "--min-seconds", "1", "--json"],
        check=True, capture_output=True, text=True)
    r = json.loads(out.stdout)[0]
    assert r["status"] == "ok", r
    return r["metric"]["value"], r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--write", help="append the table to this Markdown file")
    args = ap.parse_args()
    try:
        import numpy  # noqa: F401
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "numpy"], check=True)
    subprocess.run(["cargo", "build", "--release", "--bins"], cwd=ROOT, check=True)
    bin_dir = os.path.join(ROOT, "target", "release")
    agent = subprocess.Popen([os.path.join(bin_dir, "gpufleet-agent"), "--listen", "127.0.0.1:50977"],
                             stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5)
        with tempfile.TemporaryDirectory() as d:
            db = os.path.join(d, "bench.db")
            subprocess.run([os.path.join(bin_dir, "gpufleet"), "--db", db, "agents", "add", "bench",
                            "http://127.0.0.1:50977"], check=True, capture_output=True)
            ours, theirs, last = [], [], None
            for i in range(args.rounds):
                g, last = ours_gflops(bin_dir, db, args.n)
                ours.append(g)
                theirs.append(numpy_gflops(args.n))
                print(f"round {i + 1}: gpufleet cpu gemm/blocked {ours[-1]:.1f} GFLOP/s, "
                      f"numpy {theirs[-1]:.1f} GFLOP/s", file=sys.stderr)
    finally:
        agent.terminate()
        agent.wait()
    o, t = statistics.median(ours), statistics.median(theirs)
    import numpy as np
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    table = (
        f"\n### fp32 GEMM n={args.n}, cpu backend vs numpy/OpenBLAS ({datetime.date.today()})\n\n"
        f"Host: {cpu}, {os.cpu_count()} logical cores. numpy {np.__version__}. "
        f"Median of {args.rounds} alternating rounds; each round is the median of >=10 iterations and >=1 s.\n\n"
        "| implementation | GFLOP/s | vs numpy |\n| --- | --- | --- |\n"
        f"| gpufleet cpu `gemm/blocked` (through agent + worker, validated) | {o:.1f} | {o / t * 100:.0f}% |\n"
        f"| numpy `a @ b` (OpenBLAS) | {t:.1f} | 100% |\n\n"
        f"Per round: ours {', '.join(f'{x:.1f}' for x in ours)}; numpy {', '.join(f'{x:.1f}' for x in theirs)}. "
        f"Config: {json.dumps(last.get('config', {}))}.\n")
    print(table)
    print(f"ratio: {o / t * 100:.1f}% (target >= 80%)")
    if args.write:
        with open(args.write, "a") as f:
            f.write(table)


if __name__ == "__main__":
    main()
