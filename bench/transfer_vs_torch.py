#!/usr/bin/env python3
"""Host-device transfers (issue 32): gpufleet's `transfer` kernel against PyTorch's `copy_` of the
same size on the same GPU, in the same run, and the `with_transfers` mode checked against it.

For each size and direction, pinned and pageable:
  - PyTorch: `dst.copy_(src, non_blocking=True)` between a CUDA tensor and a CPU tensor (pinned with
    `pin_memory()`, or not), timed with CUDA events over many copies after warm-up; d2d a copy
    between two CUDA tensors. GB/s counts the bytes once, like ours.
  - ours: `transfer` through a real agent (worker process, profiling events or timestamps, what
    arrived checked against what was sent) on each backend.

Then the agreement: `copy` of n floats in `with_transfers` mode minus the same in `compute_only`
is the time of one upload and one download of 4n bytes, which `transfer` h2d plus d2h of 4n bytes
predicts (pageable on OpenCL, whose `with_transfers` writes from ordinary host memory; pinned on
Vulkan, whose uploads go through host-visible buffers).

Usage (on the GPU host, release binaries in BIN_DIR):
  python3 bench/transfer_vs_torch.py --bin-dir .dev --backends opencl vulkan --out transfer.md
"""
import argparse, datetime

from benchlib import cpu_model, device_of, emit, free_port, local_agent, ours, val

MiB = 1 << 20


def torch_copy(direction, nbytes, pinned, reps=20):
    """PyTorch's GB/s for one copy of NBYTES in DIRECTION (median of 5 blocks of REPS copies)."""
    import torch
    n = nbytes // 4
    host = torch.arange(n, dtype=torch.float32)
    if pinned:
        host = host.pin_memory()
    dev = torch.empty(n, dtype=torch.float32, device="cuda")
    if direction == "h2d":
        src, dst = host, dev
    elif direction == "d2h":
        src, dst = dev.copy_(host), (torch.empty(n, dtype=torch.float32).pin_memory() if pinned
                                     else torch.empty(n, dtype=torch.float32))
    else:
        src, dst = dev.copy_(host), torch.empty_like(dev)
    for _ in range(3):
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    rates = []
    for _ in range(5):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            dst.copy_(src, non_blocking=True)
        stop.record()
        stop.synchronize()
        rates.append(nbytes * reps / (start.elapsed_time(stop) / 1e3) / 1e9)
    rates.sort()
    assert torch.equal(dst.cpu() if dst.is_cuda else dst, src.cpu() if src.is_cuda else src)
    return rates[2]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--backends", nargs="+", default=["opencl", "vulkan"])
    ap.add_argument("--sizes-mib", nargs="+", type=int, default=[16, 256, 1024])
    ap.add_argument("--out")
    args = ap.parse_args()
    import torch
    gpu = torch.cuda.get_device_name(0)
    lines = [f"### transfer vs PyTorch copy_, {datetime.date.today()}, {gpu}, {cpu_model()}", "",
             "| backend | direction | host memory | MiB | ours GB/s | torch GB/s | ours / torch | copy |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    torch_rates = {}
    for mib in args.sizes_mib:
        for direction in ["h2d", "d2h", "d2d"]:
            for pinned in ([1, 0] if direction != "d2d" else [1]):
                torch_rates[(mib, direction, pinned)] = torch_copy(direction, mib * MiB, pinned)
    agree = ["", "| backend | n floats | with_transfers - compute_only ms | transfer h2d + d2h ms | ratio | host memory |",
             "| --- | --- | --- | --- | --- | --- |"]
    with local_agent(args.bin_dir, free_port(), "xfer") as (db, info):
        for backend in args.backends:
            dev = device_of(info, backend)
            if dev is None:
                lines.append(f"| {backend} | - | | | | | | no device |")
                continue
            for mib in args.sizes_mib:
                for direction in ["h2d", "d2h", "d2d"]:
                    for pinned in ([1, 0] if direction != "d2d" else [1]):
                        r = ours(args.bin_dir, db, "xfer", backend, dev["id"], "transfer",
                                 {"bytes": mib * MiB, "pinned": pinned}, variant=direction, iters=10, min_seconds=0.5)
                        t = torch_rates[(mib, direction, pinned)]
                        v = val(r)
                        note = r["config"].get("copy", "") if r["status"] == "ok" else r["status"] + ": " + r.get("message", "")[:100]
                        host = "-" if direction == "d2d" else ("pinned" if pinned else "pageable")
                        lines.append(f"| {backend} | {direction} | {host} | {mib} | {v:,.1f} | {t:,.1f} | {v / t:.3f} | {note} |")
            # with_transfers against transfer, one size
            n = 64 * MiB // 4
            pinned = 0 if backend == "opencl" else 1
            times = {}
            for mode in ["compute_only", "with_transfers"]:
                import subprocess, json, os
                out = subprocess.run([os.path.join(args.bin_dir, "gpufleet"), "--db", db, "run", "--agent", "xfer",
                                      "--backend", backend, "--device", dev["id"], "--kernel", "copy", "--param", f"n={n}",
                                      "--mode", mode, "--min-iterations", "10", "--min-seconds", "0.5", "--json"],
                                     capture_output=True, text=True)
                res = json.loads(out.stdout)[0]
                times[mode] = res["median_s"]
            xfer = 0.0
            for direction in ["h2d", "d2h"]:
                r = ours(args.bin_dir, db, "xfer", backend, dev["id"], "transfer", {"bytes": 4 * n, "pinned": pinned},
                         variant=direction, iters=10, min_seconds=0.5)
                xfer += r["median_s"]
            diff = times["with_transfers"] - times["compute_only"]
            agree.append(f"| {backend} | {n} | {diff * 1e3:.3f} | {xfer * 1e3:.3f} | {xfer / diff:.3f} | "
                         f"{'pinned' if pinned else 'pageable'} |")
    emit(lines + agree, args.out)


if __name__ == "__main__":
    main()
