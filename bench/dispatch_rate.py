#!/usr/bin/env python3
"""Runs per second one agent serves to concurrent clients, with fresh and with reused workers.

Issue 18 ("dispatch rate"): small cpu runs from many clients at once. Each way, in the same run on
the same host, starts a real `gpufleet-agent` on a loopback port and has C client threads (each its
own gRPC channel, Python grpcio with stubs generated from proto/) send R `noop` runs each, one after
another, all at once. A run is warm-up 1, 10 timed iterations, no interval target, no power window,
validated, so the agent's own work per run is small and what is measured is the path around it:
request, plan, device queue, worker, result.

  - fresh: `gpufleet-agent --fresh-worker-per-run` (a worker process per run; the reference, and
    how the agent worked before the pool);
  - reused: the default (a worker is kept after an ok run for the next one with the same key).

Reported per way: runs/s (all runs over the wall time from the first request to the last result),
the p50 and p99 of a run's client-observed latency (which includes waiting in the device queue),
every result's status, and how many results say `worker: reused`.

Usage: python3 bench/dispatch_rate.py [--bin-dir target/release] [--clients 20] [--runs 10]
       [--write docs/PERFORMANCE.md]
"""
import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from benchlib import cpu_model, emit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def stubs(out_dir):
    """Generates and imports the gpufleet.v1 stubs."""
    from grpc_tools import protoc

    proto_root = os.path.join(ROOT, "proto")
    files = [os.path.join("gpufleet", "v1", f) for f in ("agent.proto",)]
    rc = protoc.main(["protoc", f"-I{proto_root}", f"--python_out={out_dir}",
                      f"--grpc_python_out={out_dir}"] + [os.path.join(proto_root, f) for f in files])
    if rc != 0:
        sys.exit(f"protoc failed with {rc}")
    sys.path.insert(0, out_dir)
    from gpufleet.v1 import agent_pb2, agent_pb2_grpc  # noqa: E402
    return agent_pb2, agent_pb2_grpc


def start_agent(bin_dir, port, extra):
    env = dict(os.environ)
    # cpu only: discovery of OpenCL/Vulkan is not what is measured.
    env["OCL_ICD_VENDORS"] = "/nonexistent"
    env["VK_DRIVER_FILES"] = "/nonexistent.json"
    agent = subprocess.Popen(
        [os.path.join(bin_dir, "gpufleet-agent"), "--listen", f"127.0.0.1:{port}",
         "--queue-capacity", "256"] + extra,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return agent


def one_way(pb, grpc_mod, bin_dir, port, extra, clients, runs, min_seconds):
    import grpc
    agent = start_agent(bin_dir, port, extra)
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=30)
        stub = grpc_mod.AgentStub(channel)
        for _ in range(100):
            info = stub.Describe(pb.DescribeRequest())
            if any(d.id == "cpu:0" for d in info.devices):
                break
            time.sleep(0.1)

        def spec():
            # The measurement fields are optional on the wire: a field left out is the agent's
            # default (here: max_iterations when measuring by time), an explicit 0 means zero.
            bound = {} if min_seconds else {"max_iterations": 10}
            settings = pb.RunSettings(warmup=1, min_iterations=10, min_seconds=min_seconds,
                                      target_ci_pct=0.0, timeout_s=60.0, **bound)
            return pb.RunSpec(kernel="noop", device_id="cpu:0", settings=settings,
                              power_window_s=-1.0, seed=1)

        def run(s, run_id):
            result = None
            for ev in s.Run(pb.RunRequest(run_id=run_id, spec=spec())):
                if ev.HasField("result"):
                    result = ev.result
            return result

        # One run first, so both ways start from a discovered, warm agent.
        run(stub, f"warm-{port}")
        latencies, statuses, reused = [], {}, [0]
        lock = threading.Lock()
        barrier = threading.Barrier(clients + 1)

        def client(i):
            ch = grpc.insecure_channel(f"127.0.0.1:{port}")
            s = grpc_mod.AgentStub(ch)
            barrier.wait()
            for j in range(runs):
                t = time.perf_counter()
                r = run(s, f"c{i}-r{j}-{port}")
                dt = time.perf_counter() - t
                name = pb.RunStatus.Name(r.status) if r else "NO_RESULT"
                with lock:
                    latencies.append(dt)
                    statuses[name] = statuses.get(name, 0) + 1
                    if r is not None and r.config.get("worker") == "reused":
                        reused[0] += 1
            ch.close()

        threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        lat = sorted(latencies)
        return {
            "runs": len(lat),
            "wall_s": wall,
            "rate": len(lat) / wall,
            "p50_ms": statistics.median(lat) * 1e3,
            "p99_ms": lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1e3,
            "statuses": statuses,
            "reused": reused[0],
        }
    finally:
        agent.terminate()
        agent.wait(timeout=10)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "target", "release"))
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--runs", type=int, default=10, help="runs per client")
    ap.add_argument("--rounds", type=int, default=2, help="each way this many times, alternating")
    ap.add_argument("--min-seconds", type=float, default=0.0,
                    help="each run's min_seconds (0: exactly 10 timed iterations)")
    ap.add_argument("--write", help="append the table to this Markdown file")
    args = ap.parse_args()
    try:
        import grpc  # noqa: F401
        import grpc_tools  # noqa: F401
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "grpcio", "grpcio-tools"],
                       check=True)
    with tempfile.TemporaryDirectory() as tmp:
        pb, grpc_mod = stubs(tmp)
        rows = []
        port = 50990
        for rnd in range(args.rounds):
            for name, extra in (("fresh worker per run (reference)", ["--fresh-worker-per-run"]),
                                ("reused workers (default)", [])):
                port += 1
                r = one_way(pb, grpc_mod, args.bin_dir, port, extra, args.clients, args.runs,
                            args.min_seconds)
                r["way"] = name
                r["round"] = rnd + 1
                rows.append(r)
                print(f"round {rnd + 1} {name}: {r['rate']:.1f} runs/s, p50 {r['p50_ms']:.0f} ms, "
                      f"p99 {r['p99_ms']:.0f} ms, {r['statuses']}, reused {r['reused']}",
                      flush=True)
    cpu = cpu_model()
    lines = [
        f"### Dispatch rate: {args.clients} clients × {args.runs} cpu `noop` runs, one agent "
        f"({datetime.date.today()})",
        "",
        f"Host: {cpu}, {os.cpu_count()} CPUs, binaries from `{args.bin_dir}`. Each run: warm-up 1, "
        + (f"timed iterations for {args.min_seconds} s" if args.min_seconds else "10 timed iterations")
        + ", validated, no power window. Latency is client-observed (includes waiting in the device queue).",
        "",
        "| round | way | runs/s | p50 ms | p99 ms | statuses | results on a reused worker |",
        "| --- | --- | ---: | ---: | ---: | --- | ---: |",
    ]
    for r in rows:
        st = ", ".join(f"{k.replace('RUN_STATUS_', '').lower()} {v}" for k, v in sorted(r["statuses"].items()))
        lines.append(f"| {r['round']} | {r['way']} | {r['rate']:.1f} | {r['p50_ms']:.0f} | "
                     f"{r['p99_ms']:.0f} | {st} | {r['reused']} |")
    emit(lines, args.write)


if __name__ == "__main__":
    main()
