#!/usr/bin/env bash
# The transformer's rows on a GPU host in one call (issues 53 and 54): our copy as the roofline, decode
# through bench/agents_ab.py, the peers (llama.cpp's Vulkan build, PyTorch's CUDA-graph decode), the `perf`
# suite on Vulkan, and the `8b` workers' host memory peaks. Each part runs under what is left of LIMIT
# seconds (a device call's limit) so a call cut short keeps the parts it finished, each in its own file
# under OUT.
#
#   bench/llm_gpu_rows.sh BIN_DIR OUT [PART...]
#
# BIN_DIR holds the release `gpufleet` and `gpufleet-agent`; PARTs (default: decode peers perf):
#   decode   copy 2^28 floats on Vulkan and OpenCL, then `1b` f16/f32 and `8b` f16 decode (agents_ab.py)
#   quant    `8b` q4_0 and q8_0 decode on Vulkan and OpenCL (agents_ab.py)
#   peers    llama.cpp's Vulkan build, `1b` f16 pp512 and tg128 (llm_vs_llamacpp.py; carry .llamacpp/carry)
#   torch    PyTorch eager and one CUDA graph a token, `1b` f16 (llm_vs_torch.py)
#   perf     the `perf` suite on Vulkan: rows `ok`, and none with a pct_of_peak of 0
#   peaks    worker host memory peaks of `8b` decode, Vulkan and OpenCL, f16 / q4_0 / q8_0 (worker_peak.py)
# LIMIT (seconds, default 570) bounds the whole; a part starts only with 60 seconds left.
set -uo pipefail

if [ $# -lt 2 ]; then
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
bin=$1
out=$2
shift 2
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(decode peers perf)
here=$(cd "$(dirname "$0")" && pwd)
limit=${LIMIT:-570}
t0=$(date +%s)
mkdir -p "$out"
left() { echo $((limit - ($(date +%s) - t0))); }
stamp() { echo "== [$(($(date +%s) - t0)) s] $*"; }
under() { # under SECONDS_RESERVED CMD...: CMD under what is left less the reserve
    local reserve=$1
    shift
    local t=$(($(left) - reserve))
    if [ "$t" -lt 60 ]; then
        stamp "skipped (${t} s left): $*"
        return 1
    fi
    timeout "$t" "$@"
}

jobs=$(mktemp)
trap 'rm -f "$jobs"' EXIT
ab() { # ab NAME < JOBS: the JSON job list on stdin through agents_ab.py, rows into OUT/NAME.md
    cat >"$jobs"
    under 0 python3 "$here/agents_ab.py" --build new="$bin" --jobs "$jobs" --out "$out/$1.md" --timeout-s 300
}
for part in "${parts[@]}"; do
    stamp "$part"
    case "$part" in
    decode)
        ab decode <<'EOF'
[
 {"backend": "vulkan", "kernel": "copy", "params": {"n": 268435456}, "iters": 20},
 {"backend": "opencl", "kernel": "copy", "params": {"n": 268435456}, "iters": 20},
 {"backend": "vulkan", "kernel": "llm", "variant": "decode", "dtype": "f16", "params": {"model": "1b", "gen": 128}, "iters": 5},
 {"backend": "vulkan", "kernel": "llm", "variant": "decode", "dtype": "f32", "params": {"model": "1b", "gen": 128}, "iters": 5},
 {"backend": "opencl", "kernel": "llm", "variant": "decode", "dtype": "f16", "params": {"model": "1b", "gen": 128}, "iters": 5},
 {"backend": "vulkan", "kernel": "llm", "variant": "decode", "dtype": "f16", "params": {"model": "8b", "gen": 64}, "iters": 3},
 {"backend": "opencl", "kernel": "llm", "variant": "decode", "dtype": "f16", "params": {"model": "8b", "gen": 32}, "iters": 3}
]
EOF
        ;;
    quant)
        ab quant <<'EOF'
[
 {"backend": "vulkan", "kernel": "copy", "params": {"n": 268435456}, "iters": 20},
 {"backend": "vulkan", "kernel": "llm", "variant": "decode", "dtype": "q4_0", "params": {"model": "8b", "gen": 128}, "iters": 3},
 {"backend": "vulkan", "kernel": "llm", "variant": "decode", "dtype": "q8_0", "params": {"model": "8b", "gen": 128}, "iters": 3},
 {"backend": "opencl", "kernel": "llm", "variant": "decode", "dtype": "q4_0", "params": {"model": "8b", "gen": 128}, "iters": 3},
 {"backend": "opencl", "kernel": "llm", "variant": "decode", "dtype": "q8_0", "params": {"model": "8b", "gen": 128}, "iters": 3}
]
EOF
        ;;
    peers)
        under 0 python3 "$here/llm_vs_llamacpp.py" --bin-dir "$bin" --backend vulkan --models 1b --dtypes f16 \
            --tests pp tg --reps 2 --out "$out/llamacpp.md"
        ;;
    torch)
        under 0 python3 "$here/llm_vs_torch.py" --bin-dir "$bin" --backend vulkan --models 1b --dtypes f16 \
            --out "$out/torch.md"
        ;;
    perf)
        port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
        cache=$(mktemp -d)
        "$bin/gpufleet-agent" --listen "127.0.0.1:$port" --cache-dir "$cache" 2>/dev/null &
        agent=$!
        sleep 3
        "$bin/gpufleet" --db "$cache/perf.db" agents add h "http://127.0.0.1:$port" >/dev/null
        under 0 "$bin/gpufleet" --db "$cache/perf.db" run --suite perf --agent h --backend vulkan --json \
            >"$out/perf.json" 2>"$out/perf.log"
        kill "$agent"
        wait "$agent" 2>/dev/null
        rm -rf "$cache"
        python3 - "$out/perf.json" <<'EOF' | tee "$out/perf.md"
import json, sys
try:
    rows = json.load(open(sys.argv[1]))
except ValueError:
    sys.exit("the perf suite printed no results (cut short?)")
ok = sum(r.get("status") == "ok" for r in rows)
zero = [r.get("spec_key", "?") for r in rows if r.get("pct_of_peak") == 0]
print(f"perf suite on Vulkan: {ok} of {len(rows)} rows ok; pct_of_peak of 0 on {len(zero)} {zero[:3]}")
EOF
        ;;
    peaks)
        for spec in "vulkan f16" "opencl f16" "vulkan q4_0" "opencl q4_0" "vulkan q8_0"; do
            set -- $spec
            under 0 python3 "$here/worker_peak.py" --bin-dir "$bin" --backend "$1" --kernel llm --variant decode \
                --dtype "$2" --param model=8b --param gen=32 --timeout-s 300 --out "$out/peaks.md"
        done
        ;;
    *)
        echo "unknown part $part (decode quant peers torch perf peaks)" >&2
        exit 2
        ;;
    esac
done
stamp "done"
