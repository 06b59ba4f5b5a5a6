#!/usr/bin/env bash
# Builds the gpufleet images from the Dockerfiles users build (only the base images are substituted,
# by build args, with the local ones docker/base-images.sh makes) and tests them on the Docker engine:
#   1. the size goals hold (coordinator < 100 MB, agent-mesa < 300 MB; every image's size and its
#      largest files are written to docs/docker.md), and each agent image describes itself without
#      GPUs, every backend saying why it is unavailable;
#   2. a fleet on a private network: the coordinator, an agent-mesa (lavapipe, cpu) and an
#      agent-mesa-full (PoCL, lavapipe, cpu) container dialing in over TLS pinned to the coordinator's self-signed certificate; a `smoke` campaign on
#      both while one agent is `docker kill`ed (and started again) and the other's network is
#      disconnected for CUT_S seconds: every planned job has exactly one result.
#   3. agent-rocm (unless SKIP_ROCM): describes itself without an AMD GPU (hip unavailable: no HIP
#      device) and, dialing in to the same coordinator, runs the smoke suite on its cpu backend, all ok;
#   4. `compose --profile cpu up -d` (docker/compose.yaml, with these images): both agents attach,
#      the smoke suite run through the coordinator container is all `ok`, its /healthz answers, and
#      `down -v` leaves no container or volume.
# Exits non-zero on any failure. Usage: docker/test.sh   Env: CUT_S (30), SUITE (smoke), SKIP_ROCM,
# HIP_AGENT_BIN (a hip agent built on this machine for agent-rocm, see docker/build_images.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
CUT_S="${CUT_S:-30}"
SUITE="${SUITE:-smoke}"
if ! docker info >/dev/null 2>&1; then
    echo "docker/test.sh: no Docker engine answers (docker info failed); start dockerd first" >&2
    exit 1
fi
log() { echo "[docker $(date +%T)] $*"; }
fail() {
    echo "FAIL: $*" >&2
    for c in gf-coord gf-a1 gf-a2; do
        docker logs --tail 30 "$c" 2>&1 | sed "s/^/$c: /" >&2 || true
    done
    exit 1
}

# The same build the release workflow runs (ci/release.yml), with the local base images.
LOCAL_BASES=1 bash docker/build_images.sh gpufleet test

log "sizes (goals: coordinator < 100 MB, agent-mesa < 300 MB), written to docs/docker.md"
mapfile -t images < <(bash docker/build_images.sh gpufleet test --list)
sizes=$(mktemp)
for img in "${images[@]}"; do
    bytes=$(docker image inspect -f '{{.Size}}' "gpufleet/$img:test")
    # What takes the space: the five largest files (every image keeps find and du).
    largest=$(docker run --rm --user 0 --entrypoint sh "gpufleet/$img:test" -c \
        'find / -xdev -type f -size +2M -exec du -k {} + 2>/dev/null; true' | sort -rn | head -5 |
        awk '{n=split($2, p, "/"); printf "%s%s %d MB", (NR > 1 ? ", " : ""), p[n], $1 / 1024}') ||
        fail "$img: listing its largest files"
    printf '%s\t%s\t%s\n' "$img" "$bytes" "$largest" >>"$sizes"
done
python3 - "$sizes" docs/docker.md <<'EOF' || fail "size goals"
import datetime, sys
goals = {"coordinator": 100, "agent-mesa": 300}
rows, over = [], []
for line in open(sys.argv[1]):
    img, size, largest = line.rstrip("\n").split("\t")
    mb = int(size) / 1e6
    goal = goals.get(img)
    verdict = "" if goal is None else (f"< {goal} MB: met" if mb < goal else f"< {goal} MB: NOT met")
    if goal is not None and mb >= goal:
        over.append(f"{img} is {mb:.0f} MB, over its goal of {goal} MB")
    rows.append(f"| {img} | {mb:.0f} MB | {verdict} | {largest} |")
    print(f"  {img}: {mb:.0f} MB {verdict}")
doc = open(sys.argv[2]).read()
begin, end = "<!-- sizes:begin -->", "<!-- sizes:end -->"
table = "\n".join([
    begin,
    f"Written by `docker/test.sh` on {datetime.date.today()} (local bases, legacy builder):",
    "",
    "| image | size | goal | largest files |",
    "| --- | --- | --- | --- |",
    *rows,
    end,
])
if begin in doc and end in doc:
    doc = doc[: doc.index(begin)] + table + doc[doc.index(end) + len(end):]
else:
    doc = doc.rstrip("\n") + "\n\n## Sizes\n\n" + table + "\n"
open(sys.argv[2], "w").write(doc)
if over:
    sys.exit("; ".join(over))
EOF
rm -f "$sizes"

log "describe without GPUs"
for img in "${images[@]}"; do
    { [ "$img" = coordinator ] || [ "$img" = agent-rocm-build ]; } && continue
    out="$(docker run --rm "gpufleet/$img:test" gpufleet-agent describe --json)" || fail "$img describe"
    python3 - "$img" "$out" <<'EOF' || fail "$img describe output"
import json, sys
img, info = sys.argv[1], json.loads(sys.argv[2])
backends = {b["name"]: b for b in info["backends"]}
assert backends["cpu"]["available"], backends["cpu"]
for name, b in backends.items():
    assert b["available"] or b["reason"], f"{img}: {name} unavailable without a reason"
    print(f"  {img}: {name}: {'available' if b['available'] else 'unavailable: ' + b['reason']}")
if img == "agent-rocm":
    assert "no HIP device" in backends["hip"]["reason"], backends["hip"]
if img.startswith("agent-mesa"):
    # Both: lavapipe; agent-mesa-full: PoCL too (agent-mesa has no OpenCL driver, and says so).
    assert backends["vulkan"]["available"], backends
    assert backends["opencl"]["available"] == (img == "agent-mesa-full"), backends["opencl"]
EOF
done

log "fleet on a private network"
cleanup() {
    docker rm -f gf-coord gf-a1 gf-a2 gf-a3 >/dev/null 2>&1 || true
    docker network rm gf-net >/dev/null 2>&1 || true
    docker volume rm gf-coord gf-a1 gf-a2 gf-a3 >/dev/null 2>&1 || true
}
trap cleanup EXIT
cleanup
docker network create gf-net >/dev/null
READ=read-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
ADMIN=admin-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
coord() { docker run --rm -v gf-coord:/var/lib/gpufleet gpufleet/coordinator:test "$@"; }
token() { coord agents add "$1" --dial-in --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])'; }
T1="$(token a1)"
T2="$(token a2)"
rocm=""
if printf '%s\n' "${images[@]}" | grep -qx agent-rocm; then rocm=1; T3="$(token a3)"; fi
docker run -d --name gf-coord --network gf-net -v gf-coord:/var/lib/gpufleet \
    -e GPUFLEET_READ_TOKEN="$READ" -e GPUFLEET_ADMIN_TOKEN="$ADMIN" \
    gpufleet/coordinator:test serve --tls-san gf-coord --tick-s 2 --grace-s 120 >/dev/null
for _ in $(seq 100); do docker logs gf-coord 2>/dev/null | grep -q "^tls sha256" && break; sleep 0.2; done
PIN="$(docker logs gf-coord 2>/dev/null | sed -n 's/^tls sha256 //p')"
[ -n "$PIN" ] || fail "the coordinator printed no certificate fingerprint"
agent() { # NAME TOKEN IMAGE
    docker run -d --name "gf-$1" --network gf-net -v "gf-$1:/var/lib/gpufleet" \
        -e GPUFLEET_CONNECT=https://gf-coord:7443 -e GPUFLEET_NAME="$1" -e GPUFLEET_TOKEN="$2" \
        -e GPUFLEET_PIN_SHA256="$PIN" "gpufleet/$3:test" --max-backoff-s 2 >/dev/null
}
agent a1 "$T1" agent-mesa
agent a2 "$T2" agent-mesa-full
attached() { docker exec gf-coord gpufleet agents list --json | python3 -c 'import json,sys; print(sum(a["attached"] for a in json.load(sys.stdin)))'; }
for _ in $(seq 120); do [ "$(attached)" = 2 ] && break; sleep 1; done
[ "$(attached)" = 2 ] || fail "the agents did not attach"
docker exec gf-coord gpufleet agents list

stored() { docker exec gf-coord gpufleet results --all --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))'; }
log "campaign: $SUITE on a1 and a2"
docker exec gf-coord gpufleet run --agent a1 --agent a2 --suite "$SUITE" >/tmp/gf-docker-run.log 2>&1 &
RUN=$!
for _ in $(seq 300); do [ "$(stored)" -ge 4 ] && break; sleep 1; done
[ "$(stored)" -ge 4 ] || fail "no results"
log "docker kill a1; a2 off the network for $CUT_S s"
docker kill gf-a1 >/dev/null
docker network disconnect gf-net gf-a2
sleep 2
docker start gf-a1 >/dev/null
sleep "$CUT_S"
docker network connect gf-net gf-a2
set +e
wait "$RUN"
rc=$?
set -e
tail -3 /tmp/gf-docker-run.log
[ "$rc" -le 1 ] || fail "gpufleet run exited $rc"
docker exec gf-coord gpufleet campaigns --json >/tmp/gf-docker-campaigns.json
docker exec gf-coord gpufleet results --all --json >/tmp/gf-docker-results.json
python3 - <<'EOF' || fail "accounting"
import json
campaigns = json.load(open("/tmp/gf-docker-campaigns.json"))
results = json.load(open("/tmp/gf-docker-results.json"))
c = campaigns[-1]
jobs = sum(c["jobs"].values()) if isinstance(c["jobs"], dict) else c["jobs"]["total"]
run_ids = [r["run_id"] for r in results]
print(f"campaign {c['id']}: {c['state']}, jobs {jobs}, results {len(results)}")
assert len(set(run_ids)) == len(run_ids), "a result stored twice"
assert len(results) == jobs, f"{len(results)} results for {jobs} planned jobs"
silent = [r for r in results if r["status"] != "ok" and not r["message"]]
assert not silent, f"non-ok rows without a reason: {silent[:3]}"
# The slimmed images still compute: validated results on the CPU and lavapipe in agent-mesa (a1),
# and on PoCL too in agent-mesa-full (a2).
for agent, want in (("a1", {"cpu", "vulkan"}), ("a2", {"cpu", "opencl", "vulkan"})):
    ok = {r["backend"] for r in results if r["status"] == "ok" and r["agent"] == agent}
    print(f"  {agent}: ok on {sorted(ok)}")
    assert want <= ok, f"{agent}: ok results only on {sorted(ok)}, not on all of {sorted(want)}"
EOF

if [ -n "$rocm" ]; then
    log "agent-rocm: dials in as a3, the $SUITE suite on its cpu backend"
    agent a3 "$T3" agent-rocm
    for _ in $(seq 120); do [ "$(attached)" = 3 ] && break; sleep 1; done
    [ "$(attached)" = 3 ] || fail "agent-rocm (a3) did not attach"
    docker exec gf-coord gpufleet describe a3 >/tmp/gf-docker-a3.txt || fail "describe a3 through the coordinator"
    grep -q "no HIP device" /tmp/gf-docker-a3.txt || fail "a3 does not say why hip is unavailable: $(cat /tmp/gf-docker-a3.txt)"
    docker exec gf-coord gpufleet run --agent a3 --backend cpu --suite "$SUITE" >/tmp/gf-docker-a3.log 2>&1 ||
        fail "agent-rocm: gpufleet run failed: $(tail -5 /tmp/gf-docker-a3.log)"
    docker exec gf-coord gpufleet results --agent a3 --all --json >/tmp/gf-docker-a3.json
    python3 - <<'EOF' || fail "agent-rocm: results"
import json
results = json.load(open("/tmp/gf-docker-a3.json"))
bad = [(r["kernel"], r["status"], r["message"][:80]) for r in results if r["status"] != "ok"]
assert results and not bad, f"{len(bad)} of {len(results)} results not ok: {bad[:3]}"
assert {r["backend"] for r in results} == {"cpu"}, sorted({r["backend"] for r in results})
print(f"  a3 (agent-rocm): {len(results)} results on cpu, all ok")
EOF
fi
cleanup

log "compose: --profile cpu up -d gives a coordinator and two attached agents"
if docker compose version >/dev/null 2>&1; then COMPOSE=(docker compose); else COMPOSE=(docker-compose); fi
# The images just built, under the names compose.yaml uses (--no-build: no base image to pull here).
for img in coordinator agent-mesa; do docker tag "gpufleet/$img:test" "gpufleet/$img:latest"; done
PROJECT=(-p gpufleet-test -f docker/compose.yaml)
compose_down() { "${COMPOSE[@]}" "${PROJECT[@]}" --profile cpu down -v >/dev/null 2>&1 || true; }
trap 'cleanup; compose_down' EXIT
compose_down
"${COMPOSE[@]}" "${PROJECT[@]}" --profile cpu up -d --no-build >/dev/null 2>&1 || fail "compose up"
in_compose() { "${COMPOSE[@]}" "${PROJECT[@]}" exec -T coordinator gpufleet "$@"; }
for _ in $(seq 120); do
    n="$(in_compose agents list --json 2>/dev/null | python3 -c 'import json,sys; print(sum(a["attached"] for a in json.load(sys.stdin) if a["name"] in ("cpu1", "cpu2")))' 2>/dev/null || echo 0)"
    [ "$n" = 2 ] && break
    sleep 1
done
in_compose agents list
[ "$n" = 2 ] || fail "compose: cpu1 and cpu2 did not both attach"
log "compose: the $SUITE suite on both agents through the coordinator container, then /healthz"
in_compose run --suite "$SUITE" --agent cpu1 --agent cpu2 >/tmp/gf-compose-run.log 2>&1 ||
    fail "compose: gpufleet run failed: $(tail -5 /tmp/gf-compose-run.log)"
in_compose results --all --json >/tmp/gf-compose-results.json
python3 - <<'EOF' || fail "compose: results"
import json
results = json.load(open("/tmp/gf-compose-results.json"))
bad = [(r["kernel"], r["backend"], r["status"], r["message"][:80]) for r in results if r["status"] != "ok"]
assert results and not bad, f"{len(bad)} of {len(results)} results not ok: {bad[:3]}"
print(f"  compose: {len(results)} results, all ok, on {sorted({r['agent'] for r in results})}")
EOF
in_compose healthz --tls-dir /var/lib/gpufleet/tls >/dev/null || fail "compose: the coordinator's /healthz"
compose_down
if "${COMPOSE[@]}" "${PROJECT[@]}" --profile cpu ps -q 2>/dev/null | grep -q .; then fail "compose down -v left containers"; fi
if docker volume ls -q | grep -q '^gpufleet-test_'; then fail "compose down -v left volumes"; fi
log "ok: images build, describe, a dial-in fleet loses nothing, the compose cpu fleet runs $SUITE all ok"
