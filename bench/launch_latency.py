#!/usr/bin/env python3
"""Where an empty kernel's time goes on the GPU host, in one run (issue 18, launch latency).

Three views of the same single-work-item kernel, each the median of N launches after a warm-up:
  - gpufleet `noop` through a real agent (OpenCL and Vulkan; the result's metric is the device time
    between the command's START and END timestamps);
  - the same OpenCL kernel through pyopencl, split into the profiling intervals the driver reports
    (QUEUED→SUBMIT, SUBMIT→START, START→END) and the host-observed enqueue→finish time, with and
    without a profiling queue, and N launches back to back with one finish (the launch rate);
  - PyTorch's smallest CUDA op (an in-place add on one float), timed with CUDA events and on the host.

Usage on the GPU host (release binaries in BIN_DIR, pyopencl installed from carried wheels):
  python3 bench/launch_latency.py --bin-dir .dev --out latency.md
"""
import argparse, json, os, statistics, subprocess, sys, time

from benchlib import emit, local_agent

N = 2000

def med(xs):
    return statistics.median(xs)

def opencl_breakdown():
    import numpy as np
    import pyopencl as cl
    plats = [p for p in cl.get_platforms() if "NVIDIA" in p.name]
    dev = plats[0].get_devices()[0]
    ctx = cl.Context([dev])
    src = "__kernel void noop(__global float* out, __global const float* in) { out[0] = in[0]; }"
    prg = cl.Program(ctx, src).build()
    a = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4)
    b = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4)
    out = {"device": dev.name, "driver": dev.driver_version}
    for profiling in (True, False):
        props = cl.command_queue_properties.PROFILING_ENABLE if profiling else 0
        q = cl.CommandQueue(ctx, dev, properties=props)
        k = prg.noop
        k.set_args(a, b)
        for _ in range(100):
            cl.enqueue_nd_range_kernel(q, k, (1,), None)
        q.finish()
        host, qs, ss, se = [], [], [], []
        for _ in range(N):
            t0 = time.perf_counter_ns()
            e = cl.enqueue_nd_range_kernel(q, k, (1,), None)
            q.finish()
            host.append((time.perf_counter_ns() - t0) / 1e3)
            if profiling:
                p = e.profile
                qs.append((p.submit - p.queued) / 1e3)
                ss.append((p.start - p.submit) / 1e3)
                se.append((p.end - p.start) / 1e3)
        t0 = time.perf_counter_ns()
        for _ in range(N):
            cl.enqueue_nd_range_kernel(q, k, (1,), None)
        q.finish()
        rate = (time.perf_counter_ns() - t0) / 1e3 / N
        tag = "prof" if profiling else "noprof"
        out[f"host_{tag}"] = med(host)
        out[f"back_to_back_{tag}"] = rate
        if profiling:
            out.update(queued_submit=med(qs), submit_start=med(ss), start_end=med(se))
    return out

def torch_reference():
    import torch
    x = torch.zeros(1, device="cuda")
    for _ in range(100):
        x.add_(1)
    torch.cuda.synchronize()
    ev, host = [], []
    for _ in range(N):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter_ns()
        s.record(); x.add_(1); e.record(); e.synchronize()
        host.append((time.perf_counter_ns() - t0) / 1e3)
        ev.append(s.elapsed_time(e) * 1e3)
    t0 = time.perf_counter_ns()
    for _ in range(N):
        x.add_(1)
    torch.cuda.synchronize()
    return {"events": med(ev), "host": med(host), "back_to_back": (time.perf_counter_ns() - t0) / 1e3 / N,
            "torch": torch.__version__}

def gpufleet_noop(bin_dir):
    out = {}
    g = os.path.join(bin_dir, "gpufleet")
    with local_agent(bin_dir, 50978, "gpu") as (db, info):
        for backend in ("opencl", "vulkan"):
            devs = [d for d in info["devices"] if d["backend"] == backend and d["device_type"] != "cpu"]
            if not devs:
                continue
            r = subprocess.run([g, "--db", db, "run", "--agent", "gpu", "--backend", backend, "--device",
                                devs[0]["id"], "--kernel", "noop", "--min-iterations", str(N), "--json"],
                               capture_output=True, text=True)
            row = json.loads(r.stdout)[0]
            out[backend] = {"median_us": row["metric"]["value"] if row.get("metric") else None,
                            "status": row["status"], "iterations": row["iterations"],
                            "wall_s": row["wall_s"]}
    return out

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default=".dev")
    ap.add_argument("--out", default="latency.md")
    args = ap.parse_args()
    ours = gpufleet_noop(args.bin_dir)
    cl_ = opencl_breakdown()
    t = torch_reference()
    f = lambda v: f"{v:.2f}" if isinstance(v, float) else str(v)
    lines = [
        f"### Empty-kernel latency on {cl_['device']} (driver {cl_['driver']}, torch {t['torch']}), same run, "
        f"median of {N}\n",
        "| what | µs |", "| --- | --- |",
        f"| gpufleet `noop`, OpenCL (START→END, through the agent) | {f(ours.get('opencl', {}).get('median_us'))} |",
        f"| gpufleet `noop`, Vulkan (timestamps, through the agent) | {f(ours.get('vulkan', {}).get('median_us'))} |",
        f"| OpenCL QUEUED→SUBMIT | {f(cl_['queued_submit'])} |",
        f"| OpenCL SUBMIT→START | {f(cl_['submit_start'])} |",
        f"| OpenCL START→END | {f(cl_['start_end'])} |",
        f"| OpenCL host enqueue→finish, profiling queue | {f(cl_['host_prof'])} |",
        f"| OpenCL host enqueue→finish, no profiling | {f(cl_['host_noprof'])} |",
        f"| OpenCL back to back, per launch, profiling queue | {f(cl_['back_to_back_prof'])} |",
        f"| OpenCL back to back, per launch, no profiling | {f(cl_['back_to_back_noprof'])} |",
        f"| CUDA (torch add_ on 1 float), events | {f(t['events'])} |",
        f"| CUDA, host record→synchronize | {f(t['host'])} |",
        f"| CUDA back to back, per op | {f(t['back_to_back'])} |",
        "",
        f"gpufleet runs: {json.dumps(ours)}",
    ]
    emit(lines, args.out, append=False)

if __name__ == "__main__":
    main()
