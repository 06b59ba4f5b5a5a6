#!/usr/bin/env python3
"""gpufleet's CNN workloads (simple_cnn, resnet18, mobilenet_v2) versus PyTorch on the same host in
the same run, with the same weights and images (issue 19).

For each network and batch, `gpufleet export-model` writes the graph, the seeded weights and images
an agent runs, and the f64 reference logits. This script builds the same network in PyTorch from
them (functional conv2d / max_pool2d / adaptive_avg_pool2d / linear per layer, batch norm already
folded, as our kernels run it), checks torch's logits against the f64 reference (so both sides
compute the same function), then times

  - torch on CUDA (TF32 off, cuDNN autotuned, CUDA events, median of eager forwards) against ours
    on each GPU backend (`--backend opencl vulkan`), and
  - torch on the CPU (all the cores the agent's worker uses) against our `cpu` backend.

Ours runs through a real agent (worker process, device timing, every layer validated against the
f64 reference). The table gives images/s, the ratio to torch and ours' p50/p99 per batch.

Usage (on the GPU host, release binaries in BIN_DIR):
  python3 bench/models_vs_torch.py --bin-dir .dev --backend cpu opencl vulkan --out models.md
"""
import argparse, datetime, json, os, statistics, subprocess, sys, tempfile, time

from benchlib import cpu_model, device_of, emit, local_agent, ours, pct, val

NETS = ("simple_cnn", "resnet18", "mobilenet_v2")
BATCHES = (1, 8)


def export(bin_dir, net, batch, out):
    subprocess.run([os.path.join(bin_dir, "gpufleet"), "export-model", net, "--batch", str(batch), "--out", out],
                   check=True, capture_output=True, text=True)
    with open(os.path.join(out, "graph.json")) as f:
        graph = json.load(f)
    return graph


def torch_net(graph, out_dir, device, half=False):
    """The network of GRAPH as a function of a batch of images, its weights on DEVICE (in f16 when
    HALF), and the images."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    w = torch.from_numpy(np.fromfile(os.path.join(out_dir, "weights.f32"), dtype="<f4")).to(device)
    c, h, wd = graph["image"]
    images = torch.from_numpy(np.fromfile(os.path.join(out_dir, "images.f32"), dtype="<f4")) \
        .reshape(graph["batch"], c, h, wd).to(device)
    if half:
        w, images = w.half(), images.half()
    act = {"none": lambda x: x, "relu": F.relu, "relu6": lambda x: F.hardtanh(x, 0.0, 6.0)}
    layers = []
    for l in graph["layers"]:
        cin = l["in"][0]
        cout = l["out"][0]
        if l["op"] == "conv":
            k, g = l["k"], l["groups"]
            filt = w[l["w_offset"]:l["w_offset"] + l["w_len"]].reshape(cout, cin // g, k, k).contiguous()
            bias = w[l["w_offset"] + l["w_len"]:l["w_offset"] + l["w_len"] + cout].contiguous()
            fn = (lambda filt, bias, s, p, g, a: lambda x: a(F.conv2d(x, filt, bias, s, p, 1, g)))(
                filt, bias, l["stride"], l["pad"], g, act[l["act"]])
        elif l["op"] == "maxpool":
            fn = (lambda k, s, p: lambda x: F.max_pool2d(x, k, s, p))(l["k"], l["stride"], l["pad"])
        elif l["op"] == "avgpool":
            fn = lambda x: F.adaptive_avg_pool2d(x, 1)  # noqa: E731
        elif l["op"] == "linear":
            k_in = l["in"][0] * l["in"][1] * l["in"][2]
            mat = w[l["w_offset"]:l["w_offset"] + l["w_len"]].reshape(cout, k_in).contiguous()
            bias = w[l["w_offset"] + l["w_len"]:l["w_offset"] + l["w_len"] + cout].contiguous()
            fn = (lambda mat, bias, a: lambda x: a(F.linear(x.flatten(1), mat, bias)).reshape(x.shape[0], -1, 1, 1))(
                mat, bias, act[l["act"]])
        elif l["op"] == "add":
            fn = None
        else:
            raise SystemExit(f"unknown op {l['op']} in {graph['net']}")
        layers.append((l, fn))

    def forward(x):
        tensors = [x]
        for l, fn in layers:
            if fn is None:
                tensors.append(act[l["act"]](tensors[l["input"]] + tensors[l["skip"]]))
            else:
                tensors.append(fn(tensors[l["input"]]))
        return tensors[-1].flatten(1)

    return forward, images


def torch_figures(graph, out_dir, device, threads, half=False):
    """(images/s, max |logit error| / largest reference logit) of torch on DEVICE (HALF: weights and
    images in f16 on CUDA, cuDNN's f16 kernels)."""
    import numpy as np
    import torch
    torch.set_num_threads(threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    forward, images = torch_net(graph, out_dir, device, half)
    ref = np.fromfile(os.path.join(out_dir, "reference_logits.f64"), dtype="<f8").reshape(graph["batch"], -1)
    with torch.inference_mode():
        got = forward(images).double().cpu().numpy()
        err = float(np.abs(got - ref).max() / np.abs(ref).max())
        cuda = device == "cuda"
        for _ in range(5):
            forward(images)
        ts = []
        deadline = time.perf_counter() + 2.0
        while len(ts) < 10 or (time.perf_counter() < deadline and len(ts) < 200):
            if cuda:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record(); forward(images); e.record(); e.synchronize()
                ts.append(s.elapsed_time(e) / 1e3)
            else:
                t0 = time.perf_counter(); forward(images); ts.append(time.perf_counter() - t0)
    return graph["batch"] / statistics.median(ts), err


def latency_ms(bin_dir, db, result):
    """(p50, p99) of a stored result's per-iteration times, in ms (nearest rank)."""
    out = subprocess.run([os.path.join(bin_dir, "gpufleet"), "--db", db, "results", "--campaign",
                          str(result.get("campaign_id", 0)), "--samples", "--format", "json"],
                         capture_output=True, text=True)
    try:
        times = sorted(json.loads(out.stdout)[0]["times"])
    except (ValueError, IndexError, KeyError):
        return float("nan"), float("nan")
    rank = lambda q: times[min(len(times) - 1, max(0, -(-len(times) * q // 100) - 1))]  # noqa: E731
    return rank(50) * 1e3, rank(99) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", nargs="+", default=["cpu", "opencl", "vulkan"])
    ap.add_argument("--bin-dir", default=".dev")
    ap.add_argument("--nets", nargs="+", default=list(NETS))
    ap.add_argument("--batches", nargs="+", type=int, default=list(BATCHES))
    ap.add_argument("--dtypes", nargs="+", default=["f32"], choices=["f32", "f16"],
                    help="f16: ours in f16 storage (f32 arithmetic) against torch in f16 on the GPU")
    ap.add_argument("--out", default="models_report.md")
    args = ap.parse_args()
    import torch
    threads = len(os.sched_getaffinity(0))
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    lines = [f"\n### CNN inference vs PyTorch, same weights, same run ({datetime.date.today()})\n",
             f"torch {torch.__version__}; CPU {cpu_model()} ({threads} threads on both sides); "
             f"GPU {gpu or 'none'} (torch: cuDNN, TF32 off, eager). Ours: median through the agent, every layer "
             "validated; torch: logits checked against the same f64 reference.\n",
             "| network | batch | dtype | backend | gpufleet img/s | torch img/s | vs torch | ours p50 / p99 per batch (ms) | ours img/J | torch logit err | status |",
             "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    bad = 0
    with local_agent(args.bin_dir, 50978, "gpu") as (db, info), tempfile.TemporaryDirectory() as tmp:
        for b in info["backends"]:
            print(f"backend {b['name']}: available={b['available']} {b['reason']}", file=sys.stderr)
        for net in args.nets:
            for batch in args.batches:
                out = os.path.join(tmp, f"{net}-{batch}")
                graph = export(args.bin_dir, net, batch, out)
                for backend, dtype in [(b, d) for d in args.dtypes for b in args.backend]:
                    dev = device_of(info, backend)
                    row = f"| {net} | {batch} | {dtype} | {backend}"
                    if dev is None or (dtype == "f16" and backend == "cpu"):
                        lines.append(f"{row} | - | - | - | - | - | - | {'no device' if dev is None else 'f32 only'} |")
                        continue
                    where = "cpu" if backend == "cpu" else ("cuda" if gpu else None)
                    half = dtype == "f16"
                    t, err = (torch_figures(graph, out, where, threads, half) if where
                              else (float("nan"), float("nan")))
                    r = ours(args.bin_dir, db, "gpu", backend, dev["id"], net, {"batch": batch}, iters=10,
                             min_seconds=1.0, dtype=dtype)
                    lat = "{:.2f} / {:.2f}".format(*latency_ms(args.bin_dir, db, r))
                    status = r["status"] if r["status"] == "ok" else f"{r['status']}: {r.get('message', '')[:120]}"
                    bad += r["status"] != "ok"
                    lines.append(f"{row} ({dev['name'][:28]}) | {val(r):.1f} | {t:.1f} | "
                                 f"{pct(val(r), t)} | {lat} | {r.get('metric_per_watt') or float('nan'):.2f} | {err:.1e} | {status} |")
                    print(lines[-1], file=sys.stderr, flush=True)
    lines.append(f"\n{bad} results not ok.")
    emit(lines, args.out, append=False)


if __name__ == "__main__":
    main()
