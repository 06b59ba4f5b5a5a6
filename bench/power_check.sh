#!/usr/bin/env bash
# Power figures for docs/PERFORMANCE.md on a GPU host:
#   1. what the agent lists (sources, PCI ids),
#   2. the sampler's CPU cost at 20 and 100 Hz (idle, `gpufleet-agent power`),
#   3. a long GEMM (>= 5 s window) on each GPU backend through a real agent and
#      coordinator, with the energy counter and the integrated samples side by side,
#   4. the smoke suite with energy columns in `gpufleet compare`.
# Usage: bench/power_check.sh BIN_DIR OUT_DIR
set -euo pipefail
bin=$(cd "$1" && pwd)
out=$2
mkdir -p "$out"
export GPUFLEET_DB="$out/power.db"
rm -f "$GPUFLEET_DB"*

"$bin/gpufleet-agent" describe --json >"$out/describe.json"
"$bin/gpufleet-agent" describe | sed -n '/power sources:/,$p' | tee "$out/power_sources.txt"
for hz in 20 100 100b 1000; do
    "$bin/gpufleet-agent" --power-rate-hz "${hz%b}" power --seconds 20 --json >"$out/sampler_${hz}hz.json"
    python3 - "$out/sampler_${hz}hz.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
c = d["sampler_cost"]
print(f"sampler {d['rate_hz']:.0f} Hz: {c['ticks']} ticks in {c['wall_s']:.1f} s, {c['cpu_s']*1e3:.1f} ms CPU = {c['cpu_pct_of_one_core']:.3f}% of one core")
for ch in d["channels"]:
    print(f"  {ch['source']} {ch['pci_bus_id']} samples={ch['samples']} measured_period={ch['measured_period_s']} nominal={ch['nominal_period_s']}")
EOF
done

"$bin/gpufleet-agent" --listen 127.0.0.1:50071 --power-rate-hz 100 2>"$out/agent.log" &
agent=$!
trap 'kill $agent 2>/dev/null || true' EXIT
for _ in $(seq 100); do
    "$bin/gpufleet" agents add gpu http://127.0.0.1:50071 >/dev/null 2>&1 && break
    sleep 0.2
done
# The GPU's devices only (the host may also have PoCL on its CPU).
gpus=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join(x["id"] for x in d["devices"] if x["backend"] in ("opencl","vulkan") and x["device_type"]=="discrete_gpu"))' "$out/describe.json")
for backend in opencl vulkan; do
    dev=$(for g in $gpus; do case $g in $backend:*) echo "$g";; esac; done | head -1)
    [ -n "$dev" ] || { echo "no $backend GPU"; continue; }
    "$bin/gpufleet" run --agent gpu --device "$dev" --kernel gemm --variant blocked \
        --param m=4096 --param n=4096 --param k=4096 --min-seconds 6 --min-iterations 10 \
        --json >"$out/gemm_$backend.json" 2>"$out/gemm_$backend.log" || true
done
python3 - "$out"/gemm_*.json <<'EOF'
import json, sys
for path in sys.argv[1:]:
    for r in json.load(open(path)):
        e = r.get("energy") or {}
        if not e:
            print(path, r.get("status"), r.get("message"), "no energy"); continue
        c, i = e.get("counter_joules", 0), e.get("integrated_joules", 0)
        diff = (i - c) / c * 100 if c else float("nan")
        print(f"{r['backend']:7} gemm 4096: {r['metric_value']:.0f} GFLOP/s, window {e['window_s']:.2f} s, "
              f"{e['samples']} samples, counter {c:.1f} J, integrated {i:.1f} J ({diff:+.2f}%), "
              f"avg {e['avg_watts']:.1f} W, peak {e['peak_watts']:.1f} W, idle {e.get('idle_watts', 0):.1f} W, "
              f"{e['metric_per_watt']:.2f} {e['metric_per_watt_unit']}, {e['joules_per_unit']:.4f} {e['joules_per_unit_unit']}")
EOF
"$bin/gpufleet" run --agent gpu --suite smoke --backend opencl --backend vulkan >"$out/smoke.log" 2>&1 || true
"$bin/gpufleet" compare --format md >"$out/compare.md" || true
python3 - "$GPUFLEET_DB" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
print("integrity:", db.execute("PRAGMA integrity_check").fetchone()[0])
print("results with energy:", db.execute("SELECT count(*) FROM results WHERE energy_j IS NOT NULL").fetchone()[0],
      "of", db.execute("SELECT count(*) FROM results").fetchone()[0])
print("power samples stored:", db.execute("SELECT count(*) FROM power_samples").fetchone()[0])
EOF
