#!/usr/bin/env python3
"""What NVIDIA's compiler makes of one OpenCL kernel of a run: registers, spills and the SASS mix.

Usage (on an NVIDIA GPU host with the CUDA toolkit's ptxas and cuobjdump, release binaries in BIN_DIR):
  python3 bench/opencl_sass.py --kernel gemv --dtype q4_0 --param k=4096 --param n=14336 \\
      --function llm_qgemv_team [--bin-dir .dev] [--out DIR]

Runs the spec once through a real agent (its own cache directory, so its OpenCL program is built
afresh), validated; the program binaries the run adds to the agent's cache are the driver's PTX. Each
one holding FUNCTION is kept in OUT (program0.ptx, ...) and assembled for sm_90 with `ptxas -O3 -v`:
the report names FUNCTION's registers and spills and counts its SASS instructions by opcode (the SASS
beside the PTX, PROGRAM.ptx.sass). The driver's own JIT of the same PTX cannot be read through OpenCL:
this is the CUDA toolkit's build of it, close to but not the code that ran. Several --function may be
given (an `llm` run builds several kernels). `--json` prints the report as JSON.
"""
import argparse, glob, json, os, shutil, sys

from benchlib import device_of, free_port, local_agent, ours, sass_report, val


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernel", required=True, help="the kernel to run (gemv, llm, gemm, ...)")
    ap.add_argument("--variant", help="its variant (default: the kernel's default)")
    ap.add_argument("--dtype", help="f32, f16, q8_0, q4_0 (default: the kernel's default)")
    ap.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="repeatable")
    ap.add_argument("--function", action="append", required=True,
                    help="an OpenCL kernel function to report (repeatable), e.g. llm_qgemv_team")
    ap.add_argument("--bin-dir", default=".dev", help="where gpufleet and gpufleet-agent are")
    ap.add_argument("--out", default=os.environ.get("OUT", "opencl_sass"))
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    args = ap.parse_args()
    params = {}
    for p in args.param:
        name, sep, value = p.partition("=")
        if not sep or not name:
            ap.error(f"--param wants NAME=VALUE, got {p[:40]!r}")
        params[name] = value
    os.makedirs(args.out, exist_ok=True)
    report = {"spec": {"kernel": args.kernel, "variant": args.variant, "dtype": args.dtype, "params": params}}
    with local_agent(args.bin_dir, free_port(), "gpu", settle_s=4) as (db, info):
        dev = device_of(info, "opencl")
        if dev is None:
            raise SystemExit("no OpenCL device on this host")
        report["device"] = dev.get("name")
        before = set(glob.glob(os.path.join(os.path.dirname(db), "opencl", "*.bin")))
        r = ours(args.bin_dir, db, "gpu", "opencl", dev["id"], args.kernel, params, variant=args.variant,
                 iters=3, min_seconds=0.2, dtype=args.dtype)
        report["run"] = {"status": r.get("status"), "value": val(r), "unit": (r.get("metric") or {}).get("unit"),
                         "validated": (r.get("validation") or {}).get("passed"), "message": r.get("message", "")}
        added = sorted(set(glob.glob(os.path.join(os.path.dirname(db), "opencl", "*.bin"))) - before)
        report["functions"] = {}
        for i, path in enumerate(added):
            data = open(path, "rb").read()
            wanted = [f for f in args.function if f.encode() in data]
            if not wanted:
                continue
            kept = os.path.join(args.out, f"program{i}.ptx")
            shutil.copy(path, kept)
            for f in wanted:
                report["functions"].setdefault(f, []).append({"ptx": kept, "report": sass_report(kept, f)})
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        print()
        return
    run = report["run"]
    print(f"{args.kernel} {args.dtype or ''} {params} on {report['device']}: {run['status']} "
          f"{run['value']:.1f} {run['unit']} (validated: {run['validated']}) {run['message'][:200]}")
    for f in args.function:
        found = report["functions"].get(f)
        if not found:
            print(f"{f}: in no program this run built (program binaries added: {len(added)})")
        for entry in found or []:
            print(f"{entry['ptx']}: {entry['report']}")


if __name__ == "__main__":
    main()
