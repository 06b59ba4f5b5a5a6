#!/usr/bin/env python3
"""A device's ceilings (issue 32): `compute_peak` in every arithmetic type on each backend, through
a real agent (worker process, device timing, every result checked against the chain's closed
form), next to the theoretical peak of the device table and, on NVIDIA, the boost-clock peak from
`nvidia-smi` (SMs x 128 FP32 lanes x 2 x max SM clock) and the SM clock read while the kernels run.
Then, with --suite, the builtin `ceilings` suite on each backend: its wall time, the roofline
sweep (GFLOP/s and GB/s per point) and its bandwidth end against `copy`.

Usage (on the GPU host, release binaries in BIN_DIR):
  python3 bench/ceilings.py --bin-dir .dev --backends opencl vulkan --suite --out ceilings.md
"""
import argparse, datetime, json, os, subprocess, threading, time

from benchlib import cpu_model, device_of, emit, free_port, local_agent, ours, val

VARIANTS = ["fp32", "fp16", "fp64", "int32", "int8"]


def smi(query):
    """One `nvidia-smi --query-gpu` value of GPU 0, or None without nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        return out or None
    except (OSError, subprocess.TimeoutExpired):
        return None


class ClockWatch:
    """The SM clocks nvidia-smi reports every 100 ms while a block runs (the lowest and highest)."""

    def __enter__(self):
        self.seen, self.stop = [], threading.Event()
        self.thread = threading.Thread(target=self.watch, daemon=True)
        self.thread.start()
        return self

    def watch(self):
        while not self.stop.wait(0.1):
            v = smi("clocks.sm")
            if v and v.isdigit():
                self.seen.append(int(v))

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def span(self):
        return f"{min(self.seen)}-{max(self.seen)}" if self.seen else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--backends", nargs="+", default=["opencl", "vulkan"])
    ap.add_argument("--items", type=int, default=1 << 22)
    ap.add_argument("--pairs", type=int, default=1024)
    ap.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS,
                    help="compute_peak's arithmetic types to run (default: all)")
    ap.add_argument("--suite", action="store_true", help="also run the ceilings suite on each backend")
    ap.add_argument("--skip-peak", action="store_true", help="only the suite")
    ap.add_argument("--out")
    args = ap.parse_args()
    lines = [f"### compute_peak, {datetime.date.today()}, {cpu_model()}", ""]
    gpu = smi("name")
    boost = None
    if gpu:
        sms = None
        max_sm = smi("clocks.max.sm")
        lines.append(f"GPU: {gpu}, max SM clock {max_sm} MHz, power limit {smi('power.limit')} W")
    with local_agent(args.bin_dir, free_port(), "peak") as (db, info):
        lines += ["", "| backend | variant | items | pairs | GOP/s | % of table peak | peak source | vs boost fp32 | SM MHz during | status |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for backend in ([] if args.skip_peak else args.backends):
            dev = device_of(info, backend)
            if dev is None:
                lines.append(f"| {backend} | - | | | | | | | | no device |")
                continue
            if gpu and boost is None and dev["compute_units"]:
                sms = dev["compute_units"]
                boost = sms * 128 * 2 * float(max_sm) * 1e6 if max_sm else None
            for variant in args.variants:
                pairs = min(args.pairs, 2034) if variant == "fp16" else args.pairs
                params = {"items": args.items, "pairs": pairs}
                with ClockWatch() as clocks:
                    r = ours(args.bin_dir, db, "peak", backend, dev["id"], "compute_peak", params, variant=variant,
                             iters=20, min_seconds=1.0)
                v = val(r)
                pct = r.get("pct_of_peak") or 0
                vs_boost = f"{v * 1e9 / boost:.3f}" if boost and variant == "fp32" and v == v else "-"
                status = r["status"]
                if r["status"] != "ok":
                    status += ": " + r.get("message", "")[:120].replace("|", "/")
                lines.append(f"| {backend} | {variant} | {args.items} | {pairs} | {v:,.0f} | "
                             f"{pct:.1f} | {r.get('peak_source', '') or '-'} | {vs_boost} | {clocks.span()} | {status} |")
        if boost:
            lines.append("")
            lines.append(f"Boost-clock fp32 peak: {sms} SMs x 128 x 2 x {max_sm} MHz = {boost / 1e12:.1f} TFLOP/s.")
        if args.suite:
            for backend in args.backends:
                dev = device_of(info, backend)
                if dev is not None:
                    lines += suite_table(args.bin_dir, db, backend, dev)
    emit(lines, args.out)


def suite_table(bin_dir, db, backend, dev):
    """The ceilings suite on DEV: its wall time, every result, the sweep against copy."""
    start = time.monotonic()
    out = subprocess.run([os.path.join(bin_dir, "gpufleet"), "--db", db, "run", "--suite", "ceilings", "--agent", "peak",
                          "--backend", backend, "--device", dev["id"], "--json"], capture_output=True, text=True)
    wall = time.monotonic() - start
    try:
        results = json.loads(out.stdout)
    except ValueError:
        return ["", f"ceilings suite on {backend}: failed: {(out.stderr or out.stdout)[-300:]}"]
    lines = ["", f"`ceilings` suite on {backend} ({dev['name']}): {len(results)} results in {wall:.1f} s", "",
             "| kernel | variant | params | metric | GB/s | status |", "| --- | --- | --- | --- | --- | --- |"]
    copy = None
    low = None
    for r in results:
        m = r.get("metric") or {}
        gbps = (r.get("config") or {}).get("achieved_gbps", "")
        if r["kernel"] == "copy" and r["status"] == "ok":
            copy = m.get("value")
        if r["kernel"] == "roofline" and r["params"].get("pairs") == 0 and r["status"] == "ok":
            low = float(gbps)
        params = ",".join(f"{k}={v}" for k, v in sorted(r["params"].items()))
        value = f"{m.get('value', float('nan')):,.1f} {m.get('unit', '')}" if m else "-"
        status = r["status"] if r["status"] == "ok" else f"{r['status']}: {r.get('message', '')[:80]}"
        lines.append(f"| {r['kernel']} | {r['variant']} | {params} | {value} | {gbps} | {status} |")
    if copy and low:
        lines += ["", f"Roofline bandwidth end (pairs=0) {low:,.1f} GB/s against copy {copy:,.1f} GB/s: {low / copy:.3f}."]
    return lines


if __name__ == "__main__":
    main()
