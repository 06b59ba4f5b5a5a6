#!/usr/bin/env python3
"""gpufleet's GPU backends versus PyTorch (cuBLAS, TF32 off) on the same GPU in the same run: every
row issue 18 asks for.

  - fp32 GEMM at n = 2048, 4096, 8192 (ours `gemm/blocked`, tuned on its first run, then cached);
  - copy and triad bandwidth at n = 2^26;
  - softmax, layernorm, rmsnorm and the fused layernorm+rmsnorm at 4096×4096, 16384×1024 and
    256×65536, each against torch's op and against the same backend's copy bandwidth (the
    issue's goal: >= 0.85 of copy);
  - noop launch latency (median of 1000 device-timed launches);
  - optionally a suite (`--suite standard`), validated.

Usage (on the GPU host, with release binaries in BIN_DIR):
  python3 bench/gpu_vs_torch.py --backend opencl vulkan --bin-dir .dev --out report.md

Ours runs through a real agent (worker process, device timing, the result validated against the
f64 reference); torch is timed with CUDA events. Both report medians after a warm-up. Bytes per
row kernel are the catalog's (softmax 8·r·c; norms 4·(2·r·c + v·c) with v weight vectors).
"""
import argparse, datetime, json, os, statistics, subprocess, sys

from benchlib import device_of, emit, local_agent, ours, pct, val

GEMM_NS = (2048, 4096, 8192)
ROW_SHAPES = ((4096, 4096), (16384, 1024), (256, 65536))
ROW_KERNELS = (("softmax", 0), ("layernorm", 2), ("rmsnorm", 1), ("layernorm_rmsnorm_fused", 3))


def sh(args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw)


def row_bytes(kernel, rows, cols):
    vectors = dict(ROW_KERNELS)[kernel]
    return 8.0 * rows * cols if kernel == "softmax" else 4.0 * (2 * rows * cols + vectors * cols)


def torch_figures(bw_n, gemm_only=False):
    import torch
    import torch.nn.functional as F
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

    out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "gemm": {}, "rows": {}}
    for n in GEMM_NS:
        a = torch.rand(n, n, device=dev) * 2 - 1
        b = torch.rand(n, n, device=dev) * 2 - 1
        c = torch.empty_like(a)
        out["gemm"][n] = 2 * n ** 3 / time_it(lambda: torch.mm(a, b, out=c)) / 1e9
        del a, b, c
    if gemm_only:
        return out
    x = torch.rand(bw_n, device=dev); y = torch.empty_like(x); z = torch.rand(bw_n, device=dev)
    out["copy"] = 8 * bw_n / time_it(lambda: y.copy_(x)) / 1e9
    out["triad"] = 12 * bw_n / time_it(lambda: torch.add(x, z, alpha=3.0, out=y)) / 1e9
    del x, y, z
    for rows, cols in ROW_SHAPES:
        x = torch.rand(rows, cols, device=dev) * 2 - 1
        w = torch.rand(cols, device=dev); b = torch.rand(cols, device=dev); g = torch.rand(cols, device=dev)
        ops = {
            "softmax": lambda: torch.softmax(x, dim=1),
            "layernorm": lambda: F.layer_norm(x, (cols,), w, b, 1e-5),
            "rmsnorm": lambda: F.rms_norm(x, (cols,), g, 1e-6),
            # Two torch ops (torch has no fused one); the bytes are the fused kernel's.
            "layernorm_rmsnorm_fused": lambda: F.rms_norm(F.layer_norm(x, (cols,), w, b, 1e-5), (cols,), g, 1e-6),
        }
        for k, fn in ops.items():
            out["rows"][(k, rows, cols)] = row_bytes(k, rows, cols) / time_it(fn) / 1e9
        del x
    return out


def backend_table(bin_dir, db, backend, info, t, bw_n, gemm_only=False):
    d = device_of(info, backend)
    if d is None:
        return [f"\n{backend}: no device ({[b for b in info['backends'] if b['name'] == backend]})"]
    run = lambda *a, **kw: ours(bin_dir, db, "gpu", backend, d["id"], *a, **kw)  # noqa: E731
    lines = [
        f"\n### {backend} backend vs PyTorch on {t['gpu']}, every row ({datetime.date.today()})\n",
        f"Device {d['id']} ({d['name']}, {d['arch']}, driver {d['driver_version']}), torch {t['torch']} "
        "(cuBLAS, TF32 off), same run. Ours: median device time through the agent, validated.\n",
        "| measure | gpufleet | torch | vs torch | vs our copy | status, config |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    statuses = []
    for n in GEMM_NS:
        p = {"m": n, "n": n, "k": n}
        first = run("gemm", p, "blocked")  # tunes (or takes the cached tuning)
        g = run("gemm", p, "blocked")
        best = max(val(first), val(g)) if g["status"] == "ok" else float("nan")
        c = g.get("config", {})
        tile = "x".join(c.get(k, "?") for k in ("tile_m", "tile_n", "tile_k"))
        lines.append(f"| fp32 GEMM n={n} (GFLOP/s) | {best:.0f} | {t['gemm'][n]:.0f} | {pct(best, t['gemm'][n])} | | "
                     f"{g['status']}, tile {tile}, work {c.get('work_m', '?')}x{c.get('work_n', '?')}, "
                     f"tuning {first.get('config', {}).get('tuning', '?')} |")
        statuses.append(g["status"])
    if gemm_only:
        lines.append(f"\n{len(statuses)} results, {len([s for s in statuses if s != 'ok'])} not ok.")
        return lines
    cp = run("copy", {"n": bw_n})
    tr = run("triad", {"n": bw_n})
    copy = val(cp)
    exp = bw_n.bit_length() - 1
    lines.append(f"| copy n=2^{exp} (GB/s) | {copy:.0f} | {t['copy']:.0f} | {pct(copy, t['copy'])} | 100% | {cp['status']} |")
    lines.append(f"| triad n=2^{exp} (GB/s) | {val(tr):.0f} | {t['triad']:.0f} | {pct(val(tr), t['triad'])} | "
                 f"{pct(val(tr), copy)} | {tr['status']} |")
    statuses += [cp["status"], tr["status"]]
    for k, _ in ROW_KERNELS:
        for rows, cols in ROW_SHAPES:
            r = run(k, {"rows": rows, "cols": cols})
            c = r.get("config", {})
            how = ", ".join(f"{a}={c[a]}" for a in sorted(c) if a not in ("binary_cache", "pipeline_cache", "worker",
                                                                          "build_options", "program"))
            tv = t["rows"][(k, rows, cols)]
            lines.append(f"| {k} {rows}×{cols} (GB/s) | {val(r):.0f} | {tv:.0f} | {pct(val(r), tv)} | "
                         f"{pct(val(r), copy)} | {r['status']}, {how[:140]} |")
            statuses.append(r["status"])
    nop = run("noop", {}, iters=1000)
    lines.append(f"| noop launch (µs, median) | {val(nop):.2f} | - | - | | {nop['status']} |")
    statuses.append(nop["status"])
    bad = len([s for s in statuses if s != "ok"])
    lines.append(f"\n{len(statuses)} results, {bad} not ok.")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", nargs="+", default=["opencl", "vulkan"])
    ap.add_argument("--bin-dir", default=".dev")
    ap.add_argument("--out", default="gpu_report.md")
    ap.add_argument("--bw-n", type=int, default=1 << 26)
    ap.add_argument("--gemm-only", action="store_true", help="only the GEMM rows (tile experiments)")
    ap.add_argument("--suite", default="", help="also run this suite on each backend (e.g. standard)")
    args = ap.parse_args()
    lines = []
    with local_agent(args.bin_dir, 50977, "gpu") as (db, info):
        for b in info["backends"]:
            print(f"backend {b['name']}: available={b['available']} {b['reason']}", file=sys.stderr)
        t = torch_figures(args.bw_n, args.gemm_only)
        for backend in args.backend:
            lines += backend_table(args.bin_dir, db, backend, info, t, args.bw_n, args.gemm_only)
            print("\n".join(lines), file=sys.stderr, flush=True)
            if args.suite:
                suite = subprocess.run([os.path.join(args.bin_dir, "gpufleet"), "--db", db, "run", "--suite",
                                        args.suite, "--agent", "gpu", "--backend", backend, "--json"],
                                       capture_output=True, text=True)
                rows = json.loads(suite.stdout or "[]")
                by = {}
                for r in rows:
                    by.setdefault(r["status"], []).append(f"{r['kernel']}/{r['variant']}")
                lines.append(f"\n`{args.suite}` suite on {backend}: {len(rows)} results: "
                             + ", ".join(f"{k} {len(v)}" for k, v in sorted(by.items())) + ".")
    emit(lines, args.out, append=False)

if __name__ == "__main__":
    main()
