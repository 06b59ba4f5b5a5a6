#!/usr/bin/env python3
"""A worker's host memory peak: one run through a freshly started agent, its worker's VmHWM read as it runs.

The agent's host memory admission (agent/src/run/host_peak.rs) is a model calibrated on such peaks: a fresh
agent, one job (3 iterations), the worker's resident high-water mark (VmHWM of /proc/PID/status, polled
every 50 ms; the worker is a child of the agent), and the run validated. This script makes that measurement
so that it can be repeated on any host, a GPU host included (Python and the release binaries only):

  python3 bench/worker_peak.py --bin-dir target/release --backend opencl --kernel llm --variant decode \\
      --dtype f16 --param model=small --param gen=2
  python3 bench/worker_peak.py --bin-dir /tmp/sb/new --backend vulkan --kernel llm --variant decode \\
      --dtype q4_0 --param model=8b --param gen=32 --rounds 2 --out peaks.md

Without --device the backend's first GPU is taken, a CPU driver (PoCL, lavapipe) only where it is the
backend's one device: a spec run without a device runs on every device of the backend, and the peak of
the slowest would be read. Each round prints a Markdown row (appended to --out): the spec, the device,
status and validation, the worker's peak in MiB, the run's wall time and its metric. Exit 1 when a row is
not `ok` and validated.
"""
import argparse
import os
import subprocess
import sys
import threading
import time

from benchlib import device_of, free_port, local_agent, ours, teller, val


def agent_pid(port):
    """The pid of the agent listening on 127.0.0.1:PORT (found by its command line), or None."""
    want = f"127.0.0.1:{port}"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"gpufleet-agent") and want.encode() in argv:
            return int(pid)
    return None


def children(pid):
    """The pids whose parent is PID."""
    out = []
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{p}/stat") as f:
                # The parent follows the command name, which is in parentheses and may hold spaces.
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            out.append(int(p))
    return out


def vm_hwm_kib(pid):
    """VmHWM of PID in KiB, or 0 when it has ended."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def parse_param(text):
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise argparse.ArgumentTypeError(f"--param wants NAME=VALUE, got {text[:60]!r}")
    return name, value


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[1:]))
    ap.add_argument("--bin-dir", required=True, help="release binaries (gpufleet, gpufleet-agent)")
    ap.add_argument("--backend", required=True, help="cpu, opencl, vulkan or hip")
    ap.add_argument("--device", help="the device id (default: the backend's first GPU, see above)")
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--variant")
    ap.add_argument("--dtype")
    ap.add_argument("--param", action="append", type=parse_param, default=[], metavar="NAME=VALUE")
    ap.add_argument("--mode", choices=["compute_only", "with_transfers"], default="compute_only")
    ap.add_argument("--iters", type=int, default=3, help="iterations (default 3, as the calibration's)")
    ap.add_argument("--rounds", type=int, default=1, help="repeat through a fresh agent each time")
    ap.add_argument("--timeout-s", type=int, default=600, help="the run's limit (default 600)")
    ap.add_argument("--out", help="a Markdown file the rows are appended to")
    args = ap.parse_args()
    if args.rounds < 1 or args.iters < 1:
        ap.error("--rounds and --iters want 1 or more")
    params = dict(args.param)
    spec = "/".join(x or "-" for x in (args.kernel, args.variant, args.dtype))
    spec += " " + (",".join(f"{k}={v}" for k, v in params.items()) or "-")
    if args.mode != "compute_only":
        spec += f" ({args.mode})"

    say = teller(args.out)

    say("| spec | device | status | validated | worker peak MiB | wall s | metric |")
    say("| --- | --- | --- | --- | ---: | ---: | ---: |")
    bad = 0
    for _ in range(args.rounds):
        port = free_port()
        with local_agent(args.bin_dir, port, "h") as (db, info):
            device = args.device or (device_of(info, args.backend) or {}).get("id")
            if not device:
                sys.exit(f"the agent has no {args.backend} device")
            agent = agent_pid(port)
            if agent is None:
                sys.exit(f"cannot find the agent on port {port} among the processes")
            peak, done = [0], threading.Event()

            def poll():
                while not done.is_set():
                    for w in children(agent):
                        peak[0] = max(peak[0], vm_hwm_kib(w))
                    time.sleep(0.05)

            poller = threading.Thread(target=poll, daemon=True)
            poller.start()
            start = time.monotonic()
            r = ours(args.bin_dir, db, "h", args.backend, device, args.kernel, params, variant=args.variant,
                     iters=args.iters, min_seconds=0, dtype=args.dtype, timeout_s=args.timeout_s, mode=args.mode)
            wall = time.monotonic() - start
            done.set()
            poller.join()
        passed = (r.get("validation") or {}).get("passed")
        status = r.get("status", "?")
        if status != "ok" or not passed:
            bad += 1
        metric = val(r)
        unit = (r.get("metric") or {}).get("kind", "")
        shown = f"{metric:.4g} {unit}" if metric == metric else (r.get("message") or "")[:80]
        say(f"| {spec} | {device} | {status} | {passed} | {peak[0] / 1024:.0f} | {wall:.1f} | {shown} |")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
