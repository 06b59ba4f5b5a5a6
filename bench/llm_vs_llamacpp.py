#!/usr/bin/env python3
"""gpufleet's transformer (`llm`) versus llama.cpp: same host, same run, same weights (issue 53, point 8).

For each model and dtype, `gpufleet export-model llm` writes the seeded weights an agent generates.
This script writes them as a GGUF file of llama.cpp's `llama` architecture holding exactly our
shapes and values (F16 or F32; or Q8_0 / Q4_0: every matrix quantized by the gguf package's own
quantizer, llama.cpp's reference one, from the f32 weights `export-model --dtype q4_0` writes, which
its blocks hold exactly; norms F32), then:

  - `--roundtrip`: proves a quantized file holds exactly our weights without llama.cpp: reads the GGUF
    back with the gguf package, dequantizes every matrix (and undoes the Q/K row permutation) and
    compares it with the exported f32 weights, element for element. Needs only `gguf` and numpy.
  - `--check`: proves the file holds our model. llama.cpp (through llama-cpp-python, on the CPU)
    computes the logits of every position of a short token prefix; the same network built in float64
    from the exported weights (bench/llm_vs_torch.py's TorchLlm) computes them too; the largest
    difference over the largest logit must stay under a tolerance per dtype. As a control, the same
    file written without the Q/K row permutation must fail the same test (so the check can fail).
    Exits non-zero on a mismatch. `python3 -m pytest bench/llm_vs_llamacpp.py` runs the same check.
  - otherwise, times llama.cpp's `llama-bench` (pp512 and tg128: `-p 512 -n 128 -ngl 99 -o json`,
    mean ± stddev of its repetitions) and ours through a real agent (variants prefill with prompt=512
    and decode with gen=128, batch 1, median, checked steps validated against f64) on each backend,
    and writes a Markdown table.

How our model maps to the `llama` architecture (what convert_hf_to_gguf.py does for a Hugging Face
Llama, since ours is laid out like one):
  - the fused `wqkv` ([(heads + 2 kv_heads) head_dim, dim], q rows, then k, then v) is split into
    attn_q, attn_k, attn_v, and `w_gate_up` (gate rows, then up) into ffn_gate and ffn_up;
  - our RoPE rotates halves (x[i] with x[i + head_dim/2], frequency theta^(-2i/head_dim)) like
    Hugging Face's; llama.cpp's `llama` rotates adjacent pairs (x[2i] with x[2i+1], same frequency).
    So the rows of each head of q and k are interleaved (row i -> 2i, row head_dim/2 + i -> 2i + 1):
    q·k is unchanged and each pair gets the same rotation;
  - norms are F32 (as the converter writes them); a tied LM head is left out, so llama.cpp uses the
    embedding for it, as it does for Llama 3.2 1B;
  - the vocabulary is synthetic, of the model's size: a SentencePiece (`llama`) vocabulary of <unk>,
    <s>, </s>, the 256 byte tokens and `<tN>` for the rest. Neither side tokenizes text here.

The GGUF of 1b f16 is about 2.5 GB (8b: 16 GB): it is written to a temporary folder (--tmp) and
removed once its rows are done.

llama-bench and the gguf package come from bench/build_llamacpp.sh (.llamacpp/; on a GPU host, carry
.llamacpp/carry: its llama-bench-vulkan.tar.xz is unpacked into a temporary folder).

--check needs torch, numpy and llama-cpp-python, built for the CPU from the same sdist (about 12
minutes on 2 cores):
  CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_OPENMP=OFF" \
    CMAKE_BUILD_PARALLEL_LEVEL=2 nice -n 19 pip install .llamacpp/src/llama_cpp_python-0.3.36.tar.gz

Usage:
  python3 bench/llm_vs_llamacpp.py --bin-dir target/release --roundtrip          # q8_0/q4_0 files hold our weights
  python3 bench/llm_vs_llamacpp.py --bin-dir target/release --check              # here, on the CPU
  python3 bench/llm_vs_llamacpp.py --bin-dir .dev --backend vulkan --models tiny small 1b --out peers.md
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import cpu_model, device_of, emit, local_agent, ours, val  # noqa: E402
from llm_vs_torch import TorchLlm, export, ratio  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMACPP = os.path.join(ROOT, ".llamacpp")
CARRY = os.path.join(LLAMACPP, "carry")

# Largest max |llama.cpp - float64| / max |float64| over the check's logits that passes. Measured
# (16 positions): about 2e-7 in f32 (with an f32 KV cache) and 3e-5 to 6e-5 in f16 (llama.cpp rounds
# activations and the KV cache to F16) for tiny, small and 1b; the file without the q/k permutation
# is off by 6e-3 (tiny), 4e-3 (small) and 1.3e-3 (1b): the seeded weights' attention is nearly
# uniform, so RoPE moves the logits little, and the f16 bound must stay well below that.
CHECK_TOL = {"f32": 1e-5, "f16": 3e-4}
# llama.cpp's gguf quantization types and file types of our quantized dtypes.
QUANTIZED = {"q8_0": ("Q8_0", "MOSTLY_Q8_0"), "q4_0": ("Q4_0", "MOSTLY_Q4_0")}


def die(msg):
    sys.exit(f"llm_vs_llamacpp.py: {msg}")


def import_gguf():
    """The gguf package: the one bench/build_llamacpp.sh vendored (.llamacpp/carry/py), else an installed one."""
    py = os.path.join(CARRY, "py")
    if os.path.isdir(py) and py not in sys.path:
        sys.path.insert(0, py)
    try:
        import gguf
    except ImportError as e:
        die(f"cannot import gguf ({e}): run bench/build_llamacpp.sh (it vendors it into {py}) or pip install gguf")
    return gguf


def permute_rope(w, heads, head_dim):
    """Rows of W ([heads * head_dim, cols]) of each head reordered from rotate-half pairs (i, i +
    head_dim/2) to adjacent pairs (2i, 2i + 1): convert_hf_to_gguf.py's `LlamaModel.permute`."""
    cols = w.shape[1]
    return w.reshape(heads, 2, head_dim // 2, cols).swapaxes(1, 2).reshape(heads * head_dim, cols)


def vocabulary(n):
    """A SentencePiece vocabulary of N tokens llama.cpp loads: (tokens, scores, token types)."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256  # unknown, control, control, byte
    if n < len(tokens):
        die(f"vocab {n} is below the {len(tokens)} tokens a SentencePiece vocabulary starts with")
    tokens += [f"<t{i}>" for i in range(len(tokens), n)]
    types += [1] * (n - len(types))  # normal
    scores = [0.0] * 3 + [-1.0] * 256 + [-float(i) for i in range(259, n)]
    return tokens, scores, types


def write_gguf(m, out_dir, path, permute=True):
    """Writes the model exported to OUT_DIR (its model.json is M) to PATH as a GGUF of arch `llama`.
    PERMUTE=False leaves q and k in rotate-half order: a wrong file, the check's control."""
    import numpy as np
    gguf = import_gguf()
    f16 = m["dtype"] == "f16"
    quant = QUANTIZED.get(m["dtype"])
    # A quantized export is f32 values its blocks hold exactly.
    stored = "f32" if quant else m["dtype"]
    raw = np.memmap(os.path.join(out_dir, f"weights.{stored}"), dtype="<f2" if f16 else "<f4", mode="r")
    d, hd, h, kvh, ffn, v = m["dim"], m["head_dim"], m["heads"], m["kv_heads"], m["ffn"], m["vocab"]

    def take(off, *shape):
        n = 1
        for s in shape:
            n *= s
        return raw[off:off + n].reshape(*shape)

    def norm(off):
        return np.asarray(take(off, d), dtype=np.float32)

    w = gguf.GGUFWriter(path, "llama")
    w.add_name(f"gpufleet-{m['model']}")
    w.add_context_length(max(4096, m["tokens"]))
    w.add_embedding_length(d)
    w.add_block_count(m["blocks"])
    w.add_feed_forward_length(ffn)
    w.add_head_count(h)
    w.add_head_count_kv(kvh)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(float(m["rope_theta"]))
    w.add_layer_norm_rms_eps(float(m["norm_eps"]))
    w.add_vocab_size(v)
    if quant:
        w.add_file_type(getattr(gguf.LlamaFileType, quant[1]))
    else:
        w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if f16 else gguf.LlamaFileType.ALL_F32)
    tokens, scores, types = vocabulary(v)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)

    def matrix(name, a):
        """A matrix as stored: quantized by the gguf package (llama.cpp's reference quantizer)."""
        if quant:
            qt = getattr(gguf.GGMLQuantizationType, quant[0])
            w.add_tensor(name, gguf.quants.quantize(np.ascontiguousarray(a, dtype=np.float32), qt), raw_dtype=qt)
        else:
            w.add_tensor(name, np.ascontiguousarray(a))

    matrix("token_embd.weight", take(m["tok_embeddings"], v, d))
    for i, l in enumerate(m["layers"]):
        qkv = take(l["wqkv"], (h + 2 * kvh) * hd, d)
        q, k, vv = qkv[:h * hd], qkv[h * hd:(h + kvh) * hd], qkv[(h + kvh) * hd:]
        if permute:
            q, k = permute_rope(q, h, hd), permute_rope(k, kvh, hd)
        gu = take(l["w_gate_up"], 2 * ffn, d)
        w.add_tensor(f"blk.{i}.attn_norm.weight", norm(l["attention_norm"]))
        matrix(f"blk.{i}.attn_q.weight", q)
        matrix(f"blk.{i}.attn_k.weight", k)
        matrix(f"blk.{i}.attn_v.weight", vv)
        matrix(f"blk.{i}.attn_output.weight", take(l["wo"], d, h * hd))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", norm(l["ffn_norm"]))
        matrix(f"blk.{i}.ffn_gate.weight", gu[:ffn])
        matrix(f"blk.{i}.ffn_up.weight", gu[ffn:])
        matrix(f"blk.{i}.ffn_down.weight", take(l["w2"], d, ffn))
    w.add_tensor("output_norm.weight", norm(m["norm"]))
    if not m["tied"]:
        matrix("output.weight", take(m["output"], v, d))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def roundtrip(bin_dir, model, dtype):
    """--roundtrip: the quantized GGUF of MODEL read back and dequantized by the gguf package equals
    the exported f32 weights, every matrix element for element (q and k with their rows put back in
    rotate-half order). Returns the names of the tensors that differ (empty: the file is our model)."""
    import numpy as np
    gguf = import_gguf()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "model")
        m = export(bin_dir, model, dtype, 1, 8, out)
        path = os.path.join(tmp, "model.gguf")
        write_gguf(m, out, path)
        raw = np.fromfile(os.path.join(out, "weights.f32"), dtype="<f4")
        d, hd, h, kvh, ffn, v = m["dim"], m["head_dim"], m["heads"], m["kv_heads"], m["ffn"], m["vocab"]

        def unpermute(a, heads):
            return a.reshape(heads, hd // 2, 2, a.shape[1]).swapaxes(1, 2).reshape(heads * hd, a.shape[1])

        want = {"token_embd.weight": raw[m["tok_embeddings"]:][:v * d].reshape(v, d)}
        if not m["tied"]:
            want["output.weight"] = raw[m["output"]:][:v * d].reshape(v, d)
        for i, l in enumerate(m["layers"]):
            qkv = raw[l["wqkv"]:][:(h + 2 * kvh) * hd * d].reshape(-1, d)
            gu = raw[l["w_gate_up"]:][:2 * ffn * d].reshape(2 * ffn, d)
            want.update({f"blk.{i}.attn_q.weight": ("q", qkv[:h * hd]), f"blk.{i}.attn_k.weight": ("k", qkv[h * hd:(h + kvh) * hd]),
                         f"blk.{i}.attn_v.weight": qkv[(h + kvh) * hd:], f"blk.{i}.attn_output.weight": raw[l["wo"]:][:d * h * hd].reshape(d, -1),
                         f"blk.{i}.ffn_gate.weight": gu[:ffn], f"blk.{i}.ffn_up.weight": gu[ffn:],
                         f"blk.{i}.ffn_down.weight": raw[l["w2"]:][:d * ffn].reshape(d, ffn)})
        qt = getattr(gguf.GGMLQuantizationType, QUANTIZED[dtype][0])
        bad, seen = [], set()
        for t in gguf.GGUFReader(path).tensors:
            if t.name not in want:
                continue
            seen.add(t.name)
            got = gguf.quants.dequantize(t.data, t.tensor_type)
            exp = want[t.name]
            if isinstance(exp, tuple):
                got = unpermute(got, h if exp[0] == "q" else kvh)
                exp = exp[1]
            if t.tensor_type != qt or got.shape != exp.shape or not np.array_equal(got, exp):
                bad.append(t.name)
        bad += sorted(set(want) - seen)
        print(f"GGUF {model} {dtype}: {len(seen)} matrices in {QUANTIZED[dtype][0]}, "
              f"{'every one equal to our weights' if not bad else f'{len(bad)} differ: ' + ', '.join(bad[:4])}",
              flush=True)
    return bad


def test_quantized_gguf_holds_our_weights_exactly():
    """--roundtrip on tiny, q8_0 and q4_0 (pytest); skipped without the gguf package or our binaries."""
    import pytest
    pytest.importorskip("gguf")
    bin_dir = os.environ.get("GPUFLEET_BIN_DIR", os.path.join(ROOT, "target", "release"))
    if not os.path.exists(os.path.join(bin_dir, "gpufleet")):
        pytest.skip(f"no gpufleet in {bin_dir} (set GPUFLEET_BIN_DIR)")
    for dtype in QUANTIZED:
        assert roundtrip(bin_dir, "tiny", dtype) == []


def gguf_error(bin_dir, model, dtype, n=16, permute=True, threads=None):
    """Max |llama.cpp - float64| / max |float64| over the logits of every position of the first N
    exported tokens, llama.cpp through llama-cpp-python on the CPU."""
    import numpy as np
    import torch
    from llama_cpp import Llama
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "model")
        m = export(bin_dir, model, dtype, 1, n, out)
        path = os.path.join(tmp, "model.gguf")
        write_gguf(m, out, path, permute=permute)
        toks = np.fromfile(os.path.join(out, "tokens.i32"), dtype="<i4")[:n].astype("int64")
        ref = TorchLlm(m, out, "cpu", torch.float64)
        cos, sin = ref.rope_tables(n)
        with torch.inference_mode():
            want = ref.forward(torch.from_numpy(toks)[None], 0, ref.new_cache(1, n), cos, sin, every=True)[0].numpy()
        # An f32 model gets an f32 KV cache (llama.cpp's default is f16), so its bound can be tight.
        cache = {"type_k": 0, "type_v": 0} if dtype == "f32" else {}
        llm = Llama(model_path=path, n_ctx=max(n, 32), n_batch=n, logits_all=True, n_gpu_layers=0, verbose=False,
                    n_threads=threads or len(os.sched_getaffinity(0)), **cache)
        llm.eval([int(t) for t in toks])
        got = np.array(llm.scores[:n], dtype=np.float64)
        del llm
    return float(np.abs(got - want).max() / np.abs(want).max())


def check(bin_dir, models, dtypes):
    """--check: every model and dtype must match, and the unpermuted control of each must not.
    Returns the number of failures."""
    bad = 0
    for model in models:
        for dtype in dtypes:
            err = gguf_error(bin_dir, model, dtype)
            ok = err <= CHECK_TOL[dtype]
            control = gguf_error(bin_dir, model, dtype, permute=False)
            caught = control > CHECK_TOL[dtype]
            bad += (not ok) + (not caught)
            print(f"GGUF vs float64, {model} {dtype}: max err {err:.2e} (tolerance {CHECK_TOL[dtype]:.0e}) "
                  f"{'ok' if ok else 'MISMATCH'}; unpermuted q/k control {control:.2e} "
                  f"{'fails as it must' if caught else 'PASSES: the check cannot tell'}", flush=True)
    return bad


def test_gguf_holds_our_model():
    """The check on tiny, f32 and f16 (pytest); skipped without llama-cpp-python or our binaries."""
    import pytest
    pytest.importorskip("llama_cpp")
    pytest.importorskip("torch")
    bin_dir = os.environ.get("GPUFLEET_BIN_DIR", os.path.join(ROOT, "target", "release"))
    if not os.path.exists(os.path.join(bin_dir, "gpufleet")):
        pytest.skip(f"no gpufleet in {bin_dir} (set GPUFLEET_BIN_DIR)")
    assert check(bin_dir, ["tiny"], ["f32", "f16"]) == 0


def find_llama_bench(path, tmp, cpu_only=False):
    """PATH, or .llamacpp/vulkan/llama-bench, or the one in .llamacpp/carry/llama-bench-vulkan.tar.xz
    unpacked into TMP. CPU_ONLY (our rows are all on the CPU): .llamacpp/cpu/llama-bench, never the
    Vulkan build, which on a host without a GPU would time llama.cpp on lavapipe."""
    if path:
        return path
    if cpu_only:
        cpu = os.path.join(LLAMACPP, "cpu", "llama-bench")
        if os.access(cpu, os.X_OK):
            return cpu
        die(f"no CPU llama-bench at {cpu}: run bench/build_llamacpp.sh --cpu or pass --llama-bench")
    built = os.path.join(LLAMACPP, "vulkan", "llama-bench")
    if os.access(built, os.X_OK):
        return built
    packed = os.path.join(CARRY, "llama-bench-vulkan.tar.xz")
    if os.path.exists(packed):
        with tarfile.open(packed) as t:
            t.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        return os.path.join(tmp, "vulkan", "llama-bench")
    die(f"no llama-bench: neither {built} nor {packed}; run bench/build_llamacpp.sh or pass --llama-bench")


def llama_bench(exe, path, prompt, gen, reps, extra, timeout_s=900):
    """llama-bench's JSON records for pp PROMPT and tg GEN on the GGUF at PATH (all layers on the
    GPU): {"pp": record, "tg": record}, or raises with the tail of what it said."""
    cmd = [exe, "-m", path, "-p", str(prompt), "-n", str(gen), "-ngl", "99", "-o", "json", "-r", str(reps)] + extra
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if r.returncode != 0:
        raise RuntimeError(f"llama-bench exited {r.returncode}: {(r.stderr or r.stdout)[-400:]}")
    recs = json.loads(r.stdout)
    out = {}
    for rec in recs:
        if rec["n_prompt"] > 0 and rec["n_gen"] == 0:
            out["pp"] = rec
        elif rec["n_gen"] > 0 and rec["n_prompt"] == 0:
            out["tg"] = rec
    return out, r.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[1:]))
    ap.add_argument("--check", action="store_true",
                    help="check the GGUF against float64 on the CPU (tiny and small unless --models is given) and exit")
    ap.add_argument("--roundtrip", action="store_true",
                    help="check that each quantized dtype's GGUF (q8_0 and q4_0 unless --dtypes) holds exactly our "
                         "weights (tiny and small unless --models), with the gguf package alone, and exit")
    ap.add_argument("--backend", nargs="+", default=["vulkan"], help="our backends to time (default vulkan)")
    ap.add_argument("--bin-dir", default=".dev", help="our release binaries (gpufleet, gpufleet-agent)")
    ap.add_argument("--models", nargs="+", default=["tiny", "small", "1b"])
    ap.add_argument("--dtypes", nargs="+", default=["f16", "f32"])
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--tests", nargs="+", choices=["pp", "tg"], default=["pp", "tg"],
                    help="which of pp (prefill) and tg (decode) to time, in this order (default both: an 8b row "
                         "pair takes minutes)")
    ap.add_argument("--reps", type=int, default=5, help="llama-bench repetitions (-r)")
    ap.add_argument("--llama-bench", help="the llama-bench to run (default: the one build_llamacpp.sh made)")
    ap.add_argument("--llama-bench-args", default="", help="more llama-bench arguments, e.g. '-fa 1'")
    ap.add_argument("--tmp", default=None, help="folder for the exported weights and GGUF files (default: $TMPDIR)")
    ap.add_argument("--out", default="llamacpp_report.md")
    args = ap.parse_args()

    if args.roundtrip:
        models = args.models if "--models" in sys.argv else ["tiny", "small"]
        dtypes = [d for d in args.dtypes if d in QUANTIZED] if "--dtypes" in sys.argv else list(QUANTIZED)
        sys.exit(1 if any(roundtrip(args.bin_dir, mo, d) for mo in models for d in dtypes) else 0)

    if args.check:
        models = args.models if "--models" in sys.argv else ["tiny", "small"]
        dtypes = args.dtypes if "--dtypes" in sys.argv else ["f32", "f16"]
        sys.exit(1 if check(args.bin_dir, models, dtypes) else 0)

    import_gguf()
    # llama-bench's -p and -n: 0 skips a test.
    bench_prompt = args.prompt if "pp" in args.tests else 0
    bench_gen = args.gen if "tg" in args.tests else 0
    threads = len(os.sched_getaffinity(0))
    bad = 0
    rows = []
    version = "?"
    vfile = os.path.join(CARRY, "VERSION")
    if os.path.exists(vfile):
        version = open(vfile).read().strip()
    cpu_only = set(args.backend) == {"cpu"}
    gpu_info = "the CPU" if cpu_only else "?"
    raw_records = []
    if args.tmp:
        os.makedirs(args.tmp, exist_ok=True)
    with local_agent(args.bin_dir, 50981, "gpu") as (db, info), tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        exe = find_llama_bench(args.llama_bench, tmp, cpu_only=cpu_only)
        for b in info["backends"]:
            print(f"backend {b['name']}: available={b['available']} {b['reason']}", file=sys.stderr)
        for model in args.models:
            for dtype in args.dtypes:
                out = os.path.join(tmp, f"{model}-{dtype}")
                m = export(args.bin_dir, model, dtype, 1, max(args.prompt, args.gen), out)
                path = os.path.join(tmp, f"{model}-{dtype}.gguf")
                write_gguf(m, out, path)
                print(f"{model} {dtype}: GGUF {os.path.getsize(path) / 1e9:.2f} GB", file=sys.stderr, flush=True)
                try:
                    peer, said = llama_bench(exe, path, bench_prompt, bench_gen, args.reps,
                                             args.llama_bench_args.split())
                    # Its device line says which matmul path it took (matrix cores: NV_coopmat2, KHR_coopmat, none).
                    for line in said.splitlines():
                        if line.startswith("ggml_vulkan: ") and " = " in line:
                            print(f"llama.cpp {model} {dtype}: {line}", file=sys.stderr, flush=True)
                    raw_records += [dict(rec, model=model, dtype=dtype) for rec in peer.values()]
                    for rec in peer.values():
                        gpu_info = rec.get("gpu_info") or gpu_info
                        print(f"llama.cpp {model} {dtype}: n_prompt={rec['n_prompt']} n_gen={rec['n_gen']} "
                              f"{rec['avg_ts']:.1f} ± {rec['stddev_ts']:.1f} t/s on {rec.get('backends')} "
                              f"{rec.get('gpu_info')} (flash_attn {rec.get('flash_attn')}, threads {rec.get('n_threads')})",
                              file=sys.stderr, flush=True)
                    peer_err = None
                except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
                    peer, peer_err = {}, str(e)[-200:].replace("\n", " ")
                    print(f"llama.cpp {model} {dtype}: {peer_err}", file=sys.stderr, flush=True)
                os.remove(path)
                for backend in args.backend:
                    dev = device_of(info, backend)
                    phases = {"pp": ("prefill", "pp", f"pp{args.prompt}"), "tg": ("decode", "tg", f"tg{args.gen}")}
                    for phase, key, test in (phases[t] for t in args.tests):
                        rec = peer.get(key)
                        theirs = f"{rec['avg_ts']:.1f} ± {rec['stddev_ts']:.1f}" if rec else "-"
                        if dev is None:
                            rows.append(f"| {model} | {dtype} | {backend} | {test} | - | {theirs} | - | no device |")
                            bad += 1
                            continue
                        params = {"model": model, "batch": 1}
                        params["prompt" if phase == "prefill" else "gen"] = args.prompt if phase == "prefill" else args.gen
                        r = ours(args.bin_dir, db, "gpu", backend, dev["id"], "llm", params, variant=phase,
                                 iters=3, min_seconds=1.0, dtype=dtype, timeout_s=600)
                        status = r["status"] if r["status"] == "ok" else f"{r['status']}: {r.get('message', '')[:120]}"
                        bad += r["status"] != "ok"
                        if not rec:
                            status += f"; llama.cpp: {peer_err or 'no record'}"
                            bad += 1
                        elif not rec.get("gpu_info") and backend != "cpu":
                            # With no Vulkan device llama.cpp runs everything on the CPU, -ngl or not.
                            status += "; llama.cpp saw no GPU and ran on the CPU"
                            bad += 1
                        rows.append(f"| {model} | {dtype} | {backend} ({dev['name'][:24]}) | {test} | {val(r):.1f} | "
                                    f"{theirs} | {ratio(val(r), rec['avg_ts'] if rec else float('nan'))} | {status} |")
                        print(rows[-1], file=sys.stderr, flush=True)
                # The exported weights of 8b are 16 GB: gone before the next model's.
                subprocess.run(["rm", "-rf", out], check=False)
    # The build find_llama_bench chose: the one --llama-bench named, or build_llamacpp.sh's CPU build
    # for CPU-only rows, else its Vulkan build.
    built = (f"llama-bench {args.llama_bench}" if args.llama_bench
             else "llama-bench built by bench/build_llamacpp.sh --cpu (CPU only)" if cpu_only
             else "llama-bench built by bench/build_llamacpp.sh (Vulkan, static)")
    bench_args = " ".join([f"-p {bench_prompt} -n {bench_gen} -ngl 99 -r {args.reps}"] + args.llama_bench_args.split())
    lines = [f"\n### Transformer inference vs llama.cpp, same weights, same run ({datetime.date.today()})\n",
             f"llama.cpp: {version}, {built}, on {gpu_info}; "
             f"`{bench_args}`, "
             "mean ± stddev of its repetitions; the GGUF holds our weights (f16/f32 as they are, checked against "
             f"float64 by `--check`; q8_0/q4_0 as the same blocks, checked by `--roundtrip`). Ours: median through the agent, checked steps validated against f64. CPU {cpu_model()} "
             f"({threads} threads). Batch 1, from an empty cache: pp{args.prompt} is {args.prompt} prompt tokens in one pass, "
             f"tg{args.gen} {args.gen} tokens decoded one a pass. vs llama.cpp: gpufleet ÷ llama.cpp.\n",
             "| model | dtype | backend | test | gpufleet tok/s | llama.cpp tok/s | vs llama.cpp | status |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | --- |"] + rows + [f"\n{bad} results not ok."]
    emit(lines, args.out, append=False)
    # llama-bench's own records beside the table (build commit, devices, every setting it used).
    with open(os.path.splitext(args.out)[0] + ".llama-bench.json", "w") as f:
        json.dump(raw_records, f, indent=1)


if __name__ == "__main__":
    main()
