#!/usr/bin/env python3
"""OpenCL `gemm/blocked` with extra compiler options against cuBLAS, same GPU, same run.

Usage (on the GPU host, release binaries in BIN_DIR):
  python3 bench/opencl_gemm_options.py --n 4096 --options="|-cl-mad-enable|-DGPUFLEET_X=1|" \
      [--bin-dir .dev] [--out DIR] [--sass]

--options is one string of option sets separated by `|` (a set may start with `-`, which argparse
would take for a flag of its own).

The first run tunes the tile (cached for the rest). Each option set is then run through a real agent with
`--env GPUFLEET_DEBUG_OPENCL_OPTIONS=...` (appended to the program's build options), its program built
afresh (the binary cache is emptied after the tuning run), validated, 20 iterations and >= 1 s. An
empty option set is the plan as it is; put it several times to see the run-to-run spread. torch's
`mm` (cuBLAS, TF32 off) is timed before and after; Vulkan's `gemm/blocked` (the same design through
the other compiler) twice at the end. With --sass, each program's PTX (the NVIDIA driver's binary) is
kept in OUT and assembled with the CUDA toolkit's ptxas for sm_90: registers, spills and the SASS
instruction mix of `gemm_blocked`.
"""
import argparse, glob, json, os, shutil, statistics, subprocess

from benchlib import device_of, free_port, local_agent, sass_report


def torch_gemm(n):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.rand(n, n, device="cuda") * 2 - 1
    b = torch.rand(n, n, device="cuda") * 2 - 1
    c = torch.empty_like(a)
    for _ in range(5):
        torch.mm(a, b, out=c)
    torch.cuda.synchronize()
    ts = []
    for _ in range(30):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); torch.mm(a, b, out=c); e.record(); e.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
    return 2 * n ** 3 / statistics.median(ts) / 1e9


def run(bin_dir, db, dev, n, extra, backend="opencl"):
    args = [os.path.join(bin_dir, "gpufleet"), "--db", db, "run", "--agent", "gpu", "--backend", backend,
            "--device", dev, "--kernel", "gemm", "--variant", "blocked", "--param", f"m={n}", "--param", f"n={n}",
            "--param", f"k={n}", "--min-iterations", "20", "--min-seconds", "1", "--json"]
    if extra:
        args += ["--env", f"GPUFLEET_DEBUG_OPENCL_OPTIONS={extra}"]
    out = subprocess.run(args, capture_output=True, text=True)
    try:
        return json.loads(out.stdout[out.stdout.index("["):])[0]
    except ValueError:
        return {"status": "error", "message": out.stderr[-400:], "config": {}}


def value(r):
    return r["metric"]["value"] if r.get("metric") else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--options", default="|-cl-mad-enable|", help="option sets separated by |")
    ap.add_argument("--bin-dir", default=".dev")
    ap.add_argument("--out", default=os.environ.get("OUT", "opencl_gemm_options"))
    ap.add_argument("--sass", action="store_true", help="keep each program's PTX and assemble it with ptxas")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    before = torch_gemm(args.n)
    rows = []
    with local_agent(args.bin_dir, free_port(), "gpu", settle_s=4) as (db, info):
        dev = device_of(info, "opencl")
        if dev is None:
            raise SystemExit("no OpenCL GPU on this host")
        warm = run(args.bin_dir, db, dev["id"], args.n, "")
        print("tuning run:", warm["status"], warm["config"].get("build_options", warm.get("message", "")), flush=True)
        for f in glob.glob(os.path.join(os.path.dirname(db), "opencl", "*.bin")):
            os.remove(f)  # each run below builds its own program: one new binary each
        seen = set()
        for i, extra in enumerate(args.options.split("|")):
            r = run(args.bin_dir, db, dev["id"], args.n, extra)
            note = ""
            for f in glob.glob(os.path.join(os.path.dirname(db), "opencl", "*.bin")):
                if f not in seen and args.sass and b"gemm_blocked" in open(f, "rb").read():
                    kept = os.path.join(args.out, f"run{i}.ptx")
                    shutil.copy(f, kept)
                    note = sass_report(kept, "gemm_blocked")
                seen.add(f)
            rows.append((extra or "(as planned)", r["status"], value(r), note))
            print(f"{rows[-1][0]!r}: {r['status']} {value(r):.0f} GFLOP/s {note}", flush=True)
        vk = device_of(info, "vulkan")
        for _ in range(2 if vk else 0):
            r = run(args.bin_dir, db, vk["id"], args.n, "", "vulkan")
            rows.append(("Vulkan, the same design", r["status"], value(r), ""))
    cublas = statistics.mean([before, torch_gemm(args.n)])
    print(f"\nfp32 GEMM n={args.n}, torch cuBLAS {cublas:.0f} GFLOP/s (mean of before and after)\n")
    print("| build | status | GFLOP/s | of cuBLAS |\n| --- | --- | ---: | ---: |")
    for what, status, v, _ in rows:
        print(f"| `{what}` | {status} | {v:.0f} | {v / cublas:.3f} |")


if __name__ == "__main__":
    main()
