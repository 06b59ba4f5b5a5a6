#!/usr/bin/env bash
# Checks what packaging/release_build.sh made in OUT_DIR: the checksums, then the tarball's
# binaries in a Debian bullseye container (glibc 2.31): both start, the agent serves and the
# coordinator describes it; then the agent's .deb in a clean bookworm container (test_deb.sh, with
# these binaries).
# Usage: packaging/test_release.sh OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath "${1:?usage: test_release.sh OUT_DIR}")
(cd "$out" && sha256sum -c --quiet SHA256SUMS) || { echo "FAIL: checksums" >&2; exit 1; }
tarball=$(ls "$out"/gpufleet-*-linux-gnu.tar.gz | head -1)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -C "$work" -xzf "$tarball"
dir=$(ls -d "$work"/gpufleet-*)
bash docker/base-images.sh bullseye >/dev/null
docker run --rm -v "$dir:/opt/gpufleet:ro" gpufleet-base/bullseye:local sh -c '
    set -e
    ldd --version | head -1
    /opt/gpufleet/gpufleet --version
    /opt/gpufleet/gpufleet-agent --version
    /opt/gpufleet/gpufleet-agent --listen 127.0.0.1:50051 >/tmp/agent.log 2>&1 &
    for i in $(seq 100); do /opt/gpufleet/gpufleet describe http://127.0.0.1:50051 >/tmp/describe.txt 2>/dev/null && break; sleep 0.2; done
    cat /tmp/describe.txt
    grep -q "cpu" /tmp/describe.txt
' >"$work/bullseye.log" 2>&1 || { cat "$work/bullseye.log" >&2; echo "FAIL: the release binaries in bullseye" >&2; exit 1; }
head -3 "$work/bullseye.log"
echo "ok: $(basename "$tarball") runs on bullseye ($(head -1 "$work/bullseye.log")): gpufleet describes gpufleet-agent"
bash packaging/test_deb.sh "$dir"
