#!/usr/bin/env python3
"""gpufleet's transformer (`llm`: prefill and decode of a Llama-shaped model) versus PyTorch on the
same host, in the same run, with the same weights (issue 31).

For each model and dtype, `gpufleet export-model llm` writes the seeded weights an agent generates
and token ids. This script builds the same network in PyTorch from them (F.linear per projection,
rotate-half RoPE, grouped-query attention through F.scaled_dot_product_attention over a static KV
cache, SwiGLU, RMSNorm), checks its logits against the same network in float64 (so both sides
compute the same function), then times, on the GPU (CUDA events; TF32 off for f32) and on the CPU:

  - prefill: `prompt` tokens per sequence in one forward (pp512), tokens/s;
  - decode: `gen` tokens one forward each from an empty cache (tg128), eager, tokens/s;
  - decode as a CUDA graph (GPU only; `--no-graph` leaves it out): one decode step with static
    shapes (token and position in device buffers, attention over the whole `gen`-slot cache with a
    mask made from the position, cache writes by index_copy_ at the position, RoPE gathered by it)
    captured once and replayed per token, so no Python or launch overhead is counted. Its logits are
    checked against the eager forward's on the first steps (`graph err`, max |diff| / max |logit|).

and ours through a real agent (worker process, device timing, every checked step validated against
f64) on each backend. Ours' decode roofline is its achieved bandwidth (bytes a pass must read, over
its time) over our own `copy` kernel's bandwidth on the same device, measured in the same run.

Usage (on the GPU host, release binaries in BIN_DIR):
  python3 bench/llm_vs_torch.py --bin-dir .dev --backend opencl --models tiny small 1b --out llm.md
  python3 bench/llm_vs_torch.py --bin-dir target/release --check   # static-shape step vs eager, CPU
"""
import argparse, datetime, json, math, os, statistics, subprocess, sys, tempfile, time

from benchlib import cpu_model, device_of, emit, local_agent, ours, val


def ratio(a, b):
    """a/b to two places, or "-" when either is missing."""
    return f"{a / b:.2f}" if b and a == a and b == b else "-"


def export(bin_dir, model, dtype, batch, tokens, out):
    subprocess.run([os.path.join(bin_dir, "gpufleet"), "export-model", "llm", "--model", model, "--dtype", dtype,
                    "--batch", str(batch), "--tokens", str(tokens), "--out", out], check=True,
                   capture_output=True, text=True)
    with open(os.path.join(out, "model.json")) as f:
        return json.load(f)


class TorchLlm:
    """The exported model in PyTorch: weights on DEVICE in DTYPE (a torch dtype)."""

    def __init__(self, m, out_dir, device, dtype):
        import numpy as np
        import torch
        # A quantized export (q8_0, q4_0) is weights.f32, values its blocks hold exactly.
        f16 = m["dtype"] == "f16"
        raw = np.fromfile(os.path.join(out_dir, "weights.f16" if f16 else "weights.f32"), dtype="<f2" if f16 else "<f4")
        w = torch.from_numpy(raw).to(device)
        d, hd, h, kvh, ffn, v = m["dim"], m["head_dim"], m["heads"], m["kv_heads"], m["ffn"], m["vocab"]
        take = lambda off, *shape: w[off:off + math.prod(shape)].reshape(*shape).to(dtype).contiguous()  # noqa: E731
        self.m, self.device, self.dtype = m, device, dtype
        self.layers = [dict(an=take(l["attention_norm"], d), wqkv=take(l["wqkv"], (h + 2 * kvh) * hd, d),
                            wo=take(l["wo"], d, h * hd), fn=take(l["ffn_norm"], d),
                            wgu=take(l["w_gate_up"], 2 * ffn, d), w2=take(l["w2"], d, ffn)) for l in m["layers"]]
        self.norm = take(m["norm"], d)
        self.emb = take(m["tok_embeddings"], v, d)
        self.out = take(m["output"], v, d)
        del w
        half = hd // 2
        inv = torch.tensor([m["rope_theta"] ** (-2.0 * i / hd) for i in range(half)], dtype=torch.float64)
        self.inv = inv

    def rope_tables(self, positions):
        import torch
        ang = torch.arange(positions, dtype=torch.float64)[:, None] * self.inv[None, :]
        return ang.cos().to(self.device, self.dtype), ang.sin().to(self.device, self.dtype)

    def new_cache(self, batch, cap):
        import torch
        m = self.m
        shape = (batch, m["kv_heads"], cap, m["head_dim"])
        return [(torch.zeros(shape, device=self.device, dtype=self.dtype),
                 torch.zeros(shape, device=self.device, dtype=self.dtype)) for _ in self.layers]

    def forward(self, tokens, pos0, cache, cos, sin, every=False):
        """Logits of each sequence's last position for TOKENS ([batch, T]) at positions pos0.., or
        with EVERY of each position ([batch, T, vocab])."""
        import torch
        import torch.nn.functional as F
        m = self.m
        b, t = tokens.shape
        h, kvh, hd = m["heads"], m["kv_heads"], m["head_dim"]
        half = hd // 2
        c, s = cos[pos0:pos0 + t][None, None], sin[pos0:pos0 + t][None, None]

        def rms(x, g):
            return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + m["norm_eps"]).to(x.dtype) * g

        def rot(x):
            x1, x2 = x[..., :half], x[..., half:]
            return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)

        x = F.embedding(tokens, self.emb)
        for l, (kc, vc) in zip(self.layers, cache):
            qkv = F.linear(rms(x, l["an"]), l["wqkv"])
            q, k, v = qkv.split((h * hd, kvh * hd, kvh * hd), dim=-1)
            q = rot(q.view(b, t, h, hd).transpose(1, 2))
            k = rot(k.view(b, t, kvh, hd).transpose(1, 2))
            kc[:, :, pos0:pos0 + t] = k
            vc[:, :, pos0:pos0 + t] = v.view(b, t, kvh, hd).transpose(1, 2)
            keys = kc[:, :, :pos0 + t].repeat_interleave(h // kvh, dim=1)
            vals = vc[:, :, :pos0 + t].repeat_interleave(h // kvh, dim=1)
            a = F.scaled_dot_product_attention(q, keys, vals, is_causal=(t > 1 and pos0 == 0))
            x = x + F.linear(a.transpose(1, 2).reshape(b, t, h * hd), l["wo"])
            gu = F.linear(rms(x, l["fn"]), l["wgu"])
            g, u = gu.chunk(2, dim=-1)
            x = x + F.linear(F.silu(g) * u, l["w2"])
        return F.linear(rms(x if every else x[:, -1], self.norm), self.out)

    def step(self, token, pos, cache, cos, sin):
        """One decode step whose shapes do not depend on the position, so it can be captured as a CUDA
        graph: TOKEN ([batch, 1] int64) at POS (a 1-element int64 tensor on the device), CACHE of any
        capacity above POS. Returns the logits [batch, vocab] in a fresh tensor."""
        import torch
        import torch.nn.functional as F
        m = self.m
        b = token.shape[0]
        h, kvh, hd = m["heads"], m["kv_heads"], m["head_dim"]
        half, group = hd // 2, h // kvh
        cap = cache[0][0].shape[2]
        c, s = cos.index_select(0, pos), sin.index_select(0, pos)  # [1, half]
        # Slots after POS hold stale or zero rows: masked out (True = attend).
        mask = (torch.arange(cap, device=pos.device) <= pos).view(1, 1, 1, cap)

        def rms(x, g):
            return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + m["norm_eps"]).to(x.dtype) * g

        def rot(x):
            x1, x2 = x[..., :half], x[..., half:]
            return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)

        x = F.embedding(token[:, 0], self.emb)  # [b, dim]
        for l, (kc, vc) in zip(self.layers, cache):
            q, k, v = F.linear(rms(x, l["an"]), l["wqkv"]).split((h * hd, kvh * hd, kvh * hd), dim=-1)
            kc.index_copy_(2, pos, rot(k.view(b, kvh, 1, hd)))
            vc.index_copy_(2, pos, v.view(b, kvh, 1, hd))
            # Query head i reads kv head i // group: the group's queries are rows of one kv head, so
            # the cache is read once, not repeated per query head.
            q = rot(q.view(b, kvh, group, hd))
            a = F.scaled_dot_product_attention(q, kc, vc, attn_mask=mask)
            x = x + F.linear(a.reshape(b, h * hd), l["wo"])
            g, u = F.linear(rms(x, l["fn"]), l["wgu"]).chunk(2, dim=-1)
            x = x + F.linear(F.silu(g) * u, l["w2"])
        return F.linear(rms(x, self.norm), self.out)


class StaticDecode:
    """TorchLlm's static-shape decode step over a cache of CAP slots, captured once as a CUDA graph
    when CAPTURE (the step runs eagerly otherwise: what --check tests off a GPU). Calling it copies a
    token ([batch, 1]) and a position (a 1-element tensor) on the device into the graph's input
    buffers and replays it; it returns the graph's own logits buffer, overwritten by the next call."""

    def __init__(self, net, batch, cap, cos, sin, capture):
        import torch
        self.token = torch.zeros((batch, 1), dtype=torch.int64, device=net.device)
        self.pos = torch.zeros(1, dtype=torch.int64, device=net.device)
        cache = net.new_cache(batch, cap)
        self.run = lambda: net.step(self.token, self.pos, cache, cos, sin)  # noqa: E731
        self.graph = None
        if capture:
            # Warm on a side stream (cuBLAS and SDPA pick their kernels), then capture. The cache
            # rows the warm-up wrote at slot 0 are overwritten by the first real step.
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    self.run()
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.logits = self.run()

    def __call__(self, token, pos):
        self.token.copy_(token)
        self.pos.copy_(pos)
        if self.graph is None:
            self.logits = self.run()
        else:
            self.graph.replay()
        return self.logits


# Largest max |static - eager| / max |eager| of the first decode steps' logits that passes.
GRAPH_TOL = {"f32": 1e-4, "f16": 2e-2}


def static_vs_eager(net, toks, steps, cap, cos, sin, capture):
    """Max |static step - eager forward| / max |eager| over the logits of the first STEPS decode steps
    of TOKS ([batch, >= steps]) from an empty cache of CAP slots."""
    import torch
    eager_cache = net.new_cache(toks.shape[0], cap)
    static = StaticDecode(net, toks.shape[0], cap, cos, sin, capture)
    positions = torch.arange(cap, dtype=torch.int64, device=net.device)
    diff = scale = 0.0
    for s in range(steps):
        want = net.forward(toks[:, s:s + 1], s, eager_cache, cos, sin).double()
        got = static(toks[:, s:s + 1], positions[s:s + 1]).double()
        diff = max(diff, float((got - want).abs().max()))
        scale = max(scale, float(want.abs().max()))
    return diff / scale


def timed(fn, cuda, budget_s=2.0, least=3):
    """Median seconds of FN (CUDA events on a GPU) after one warm call."""
    import torch
    fn()
    ts = []
    deadline = time.perf_counter() + budget_s
    while len(ts) < least or (time.perf_counter() < deadline and len(ts) < 50):
        if cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); fn(); e.record(); e.synchronize()
            ts.append(s.elapsed_time(e) / 1e3)
        else:
            t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def torch_figures(m, out_dir, device, dtype_name, prompt, gen, batch, graph=True):
    """(prefill tok/s, eager decode tok/s, CUDA-graph decode tok/s, logit error vs float64 / largest
    logit, graph's logit error vs eager) of torch on DEVICE; the graph's figures are NaN off CUDA or
    without GRAPH."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dtype = torch.float16 if dtype_name == "f16" else torch.float32
    cuda = device == "cuda"
    net = TorchLlm(m, out_dir, device, dtype)
    import numpy as np
    toks = torch.from_numpy(np.fromfile(os.path.join(out_dir, "tokens.i32"), dtype="<i4").astype("int64")) \
        .reshape(m["batch"], m["tokens"])[:batch].to(device)
    cap = max(prompt, gen)
    cos, sin = net.rope_tables(cap)
    with torch.inference_mode():
        # The float64 check on a short prompt (the small models only: float64 of 1b is slow).
        err = float("nan")
        if m["model"] in ("tiny", "small"):
            ref = TorchLlm(m, out_dir, device, torch.float64)
            c64, s64 = ref.rope_tables(16)
            want = ref.forward(toks[:, :16], 0, ref.new_cache(batch, 16), c64, s64)
            got = net.forward(toks[:, :16], 0, net.new_cache(batch, 16), cos, sin).double()
            err = float((got - want).abs().max() / want.abs().max())
            del ref
        cache = net.new_cache(batch, cap)
        pre = timed(lambda: net.forward(toks[:, :prompt], 0, cache, cos, sin), cuda)

        def decode():
            for s in range(gen):
                net.forward(toks[:, s:s + 1], s, cache, cos, sin)
        dec = timed(decode, cuda, budget_s=4.0)
        dec_graph = graph_err = float("nan")
        if cuda and graph:
            del cache
            graph_err = static_vs_eager(net, toks, min(gen, 8), gen, cos, sin, capture=True)
            static = StaticDecode(net, batch, gen, cos, sin, capture=True)
            positions = torch.arange(gen, dtype=torch.int64, device=device)

            def decode_graph():
                for s in range(gen):
                    static(toks[:, s:s + 1], positions[s:s + 1])
            dec_graph = batch * gen / timed(decode_graph, cuda, budget_s=4.0)
    return batch * prompt / pre, batch * gen / dec, dec_graph, err, graph_err


def check(bin_dir, models, dtypes, steps=16):
    """--check: the static-shape decode step (captured as a CUDA graph where CUDA is there, run
    eagerly otherwise) against the eager forward, per model and dtype (f16 only on CUDA). Returns
    the number of mismatches."""
    import numpy as np
    import torch
    device = "cuda" if torch.cuda.is_available() else "cpu"
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            for dtype_name in dtypes:
                if dtype_name == "f16" and device == "cpu":
                    continue
                out = os.path.join(tmp, f"{model}-{dtype_name}")
                m = export(bin_dir, model, dtype_name, 1, steps, out)
                net = TorchLlm(m, out, device, torch.float16 if dtype_name == "f16" else torch.float32)
                toks = torch.from_numpy(np.fromfile(os.path.join(out, "tokens.i32"), dtype="<i4").astype("int64")) \
                    .reshape(1, steps).to(device)
                cos, sin = net.rope_tables(steps)
                with torch.inference_mode():
                    err = static_vs_eager(net, toks, steps, steps, cos, sin, capture=device == "cuda")
                ok = err <= GRAPH_TOL[dtype_name]
                bad += not ok
                print(f"static step vs eager, {model} {dtype_name} on {device} ({'graph' if device == 'cuda' else 'no capture'}), "
                      f"{steps} steps: max err {err:.2e} (tolerance {GRAPH_TOL[dtype_name]:.0e}) {'ok' if ok else 'MISMATCH'}")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", nargs="+", default=["opencl", "cpu"])
    ap.add_argument("--bin-dir", default=".dev")
    ap.add_argument("--models", nargs="+", default=["tiny", "small", "1b"])
    ap.add_argument("--dtypes", nargs="+", default=["f32", "f16"])
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--out", default="llm_report.md")
    ap.add_argument("--no-graph", action="store_true", help="leave out the CUDA-graph decode")
    ap.add_argument("--check", action="store_true",
                    help="only check the static-shape decode step against the eager forward (tiny and small "
                         "unless --models is given; on the CPU without CUDA) and exit non-zero on a mismatch")
    args = ap.parse_args()
    import torch
    if args.check:
        models = args.models if "--models" in sys.argv else ["tiny", "small"]
        sys.exit(1 if check(args.bin_dir, models, args.dtypes) else 0)
    threads = len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    lines = [f"\n### Transformer inference vs PyTorch, same weights, same run ({datetime.date.today()})\n",
             f"torch {torch.__version__}; CPU {cpu_model()} ({threads} threads); GPU {gpu or 'none'} "
             "(torch eager, SDPA, static KV cache, TF32 off; graph: the decode step with static shapes "
             "captured as one CUDA graph, replayed per token). Ours: median through the agent, checked steps "
             f"validated against f64. Prefill: pp{args.prompt}; decode: tg{args.gen} from an empty cache; "
             f"batch {args.batch}. Roofline: ours' achieved GB/s over ours' `copy` GB/s on the device. "
             "torch err: torch's logits vs float64; graph err: the graph's logits vs eager's (first 8 steps).\n",
             "| model | dtype | backend | phase | gpufleet tok/s | torch tok/s | vs torch | torch graph tok/s | vs graph "
             "| roofline | tok/J | torch err | graph err | status |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    bad = 0
    with local_agent(args.bin_dir, 50979, "gpu") as (db, info), tempfile.TemporaryDirectory() as tmp:
        for b in info["backends"]:
            print(f"backend {b['name']}: available={b['available']} {b['reason']}", file=sys.stderr)
        copy_gbps = {}
        for backend in args.backend:
            dev = device_of(info, backend)
            if dev is not None:
                r = ours(args.bin_dir, db, "gpu", backend, dev["id"], "copy", {"n": 1 << 28}, iters=10)
                copy_gbps[backend] = val(r)
                print(f"copy on {backend}: {val(r):.0f} GB/s", file=sys.stderr)
        for model in args.models:
            for dtype in args.dtypes:
                out = os.path.join(tmp, f"{model}-{dtype}")
                m = export(args.bin_dir, model, dtype, args.batch, max(args.prompt, args.gen), out)
                for backend in args.backend:
                    dev = device_of(info, backend)
                    if dev is None:
                        lines.append(f"| {model} | {dtype} | {backend} | - | - | - | - | - | - | - | - | - | - | no device |")
                        continue
                    where = "cpu" if backend == "cpu" else ("cuda" if gpu else None)
                    if where == "cpu" and dtype == "f16":
                        continue
                    try:
                        tp, td, tg, err, gerr = torch_figures(m, out, where, dtype, args.prompt, args.gen, args.batch,
                                                              graph=not args.no_graph)
                    except Exception as e:  # noqa: BLE001 - a torch failure is a row, not the end
                        print(f"torch {model} {dtype} on {where}: {e}", file=sys.stderr)
                        tp = td = tg = err = gerr = float("nan")
                    for phase, t in (("prefill", tp), ("decode", td)):
                        params = {"model": model, "batch": args.batch}
                        params["prompt" if phase == "prefill" else "gen"] = args.prompt if phase == "prefill" else args.gen
                        r = ours(args.bin_dir, db, "gpu", backend, dev["id"], "llm", params, variant=phase,
                                 iters=3, min_seconds=1.0, dtype=dtype, timeout_s=600)
                        roof = "-"
                        gbps = float(r.get("config", {}).get("achieved_gbps", "nan"))
                        if phase == "decode" and copy_gbps.get(backend):
                            roof = f"{gbps / copy_gbps[backend]:.2f}"
                        status = r["status"] if r["status"] == "ok" else f"{r['status']}: {r.get('message', '')[:120]}"
                        bad += r["status"] != "ok"
                        graph, graph_vs, graph_err = "-", "-", "-"
                        if phase == "decode" and tg == tg:
                            graph, graph_vs, graph_err = f"{tg:.1f}", ratio(val(r), tg), f"{gerr:.1e}"
                            if not gerr <= GRAPH_TOL[dtype]:
                                status += f"; graph logits off eager's by {gerr:.1e}"
                                bad += 1
                        lines.append(f"| {model} | {dtype} | {backend} ({dev['name'][:24]}) | {phase} | {val(r):.1f} | "
                                     f"{t:.1f} | {ratio(val(r), t)} | {graph} | {graph_vs} | {roof} | "
                                     f"{r.get('metric_per_watt') or float('nan'):.2f} | {err:.1e} | {graph_err} | {status} |")
                        print(lines[-1], file=sys.stderr, flush=True)
    lines.append(f"\n{bad} results not ok.")
    emit(lines, args.out, append=False)


if __name__ == "__main__":
    main()
