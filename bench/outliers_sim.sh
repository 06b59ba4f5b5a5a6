#!/usr/bin/env bash
# Issue 56's acceptance through the real path: 200 `gpufleet-agent simulate` agents dialing in to
# one `gpufleet serve` (SQLite), a `copy` campaign per seed; 10 seeds with 3 agents planted 10 %
# slower (`--slow NAME=0.10`), then 10 with none. Prints, per seed, the planted agents and the ones
# `gpufleet outliers --json` names. Usage: bench/outliers_sim.sh [BIN_DIR] (default target/debug).
set -euo pipefail
B=$(realpath "${1:-target/debug}")
D=$(mktemp -d /tmp/gpufleet-outliers-sim.XXXXXX)
DB=$D/fleet.db
for i in $(seq 0 199); do n=$(printf "sim-%04d" $i); echo "$n $($B/gpufleet --db $DB agents add $n --dial-in --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')"; done > $D/tokens
$B/gpufleet --db $DB serve --listen 127.0.0.1:0 --fleet-listen 127.0.0.1:0 --tick-s 0.5 > $D/serve.out 2>$D/serve.err &
SERVE=$!
trap 'kill $SERVE 2>/dev/null; pkill -f "gpufleet-agent simulate" 2>/dev/null || true' EXIT
for _ in $(seq 50); do grep -q "fleet listening" $D/serve.out && break; sleep 0.2; done
FLEET=$(sed -n 's/^fleet listening on //p' $D/serve.out)
printf 'name = "sim"\n[[run]]\nkernel = "copy"\n' > $D/sim.toml
agents=""; for i in $(seq 0 199); do agents="$agents --agent $(printf sim-%04d $i)"; done
campaign=0
for planted in yes no; do
for seed in $(seq 1 10); do
  slow=""; want=""
  if [ $planted = yes ]; then
    for k in $(python3 -c "import random; r=random.Random($seed); print(' '.join(str(x) for x in sorted(r.sample(range(200),3))))"); do
      n=$(printf sim-%04d $k); slow="$slow --slow $n=0.10"; want="$want $n"; done
  fi
  $B/gpufleet-agent simulate --agents 200 --tokens $D/tokens --connect http://$FLEET --state-dir $D/state --seed $((seed + 100)) --max-backoff-s 1 $slow > /dev/null 2>$D/sim.err &
  SIM=$!
  for _ in $(seq 100); do n=$($B/gpufleet --db $DB agents list --json | python3 -c 'import json,sys; print(sum(1 for a in json.load(sys.stdin) if a.get("attached")))'); [ "$n" = 200 ] && break; sleep 0.3; done
  $B/gpufleet --db $DB run --suite $D/sim.toml --backend cpu $agents > /dev/null 2>&1
  campaign=$((campaign + 1))
  got=$($B/gpufleet --db $DB outliers --campaign $campaign --json | python3 -c 'import json,sys; v=json.load(sys.stdin); print(" ".join(sorted(o["agent"] for g in v["groups"] for s in g["specs"] for o in s["outliers"])))' || true)
  echo "planted=$planted seed=$seed want=[${want# }] got=[$got]"
  kill $SIM; wait $SIM 2>/dev/null || true
  for _ in $(seq 100); do n=$($B/gpufleet --db $DB agents list --json | python3 -c 'import json,sys; print(sum(1 for a in json.load(sys.stdin) if a.get("attached")))'); [ "$n" = 0 ] && break; sleep 0.3; done
done
done
