#!/usr/bin/env bash
# Release binaries that run on older distributions: builds gpufleet and gpufleet-agent in a Debian
# bullseye root (glibc 2.31, the oldest glibc of the ROCm hosts we aim at: Ubuntu 20.04 has 2.31)
# made with debootstrap and this machine's Rust toolchain, then packs them with the docs into
# gpufleet-VERSION-ARCH-linux-gnu.tar.gz with a SHA256SUMS file, and builds the agent's and the
# coordinator's .debs from the same binaries. Fails when a binary needs a glibc symbol newer than the baseline.
# Usage: packaging/release_build.sh OUT_DIR [VERSION]   Needs root, docker, debootstrap, a Debian mirror.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:?usage: release_build.sh OUT_DIR [VERSION]}")
version=${2:-$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)}
baseline=2.31
arch=$(uname -m)
bash docker/base-images.sh bullseye >/dev/null
mkdir -p "$out"
# The build: the build stage of the images (docker/coordinator.Dockerfile, the same in every image
# that carries these binaries) on the bullseye root. The image builder's layer cache makes it one
# compile for both: when docker/test.sh or ci/release.yml built the images on this base first,
# this is a cache hit, and the other way round.
docker build -q -f docker/coordinator.Dockerfile --target build \
    --build-arg RUST_IMAGE=gpufleet-base/rust-bullseye:local -t gpufleet-build:local . >/dev/null
name="gpufleet-$version-$arch-linux-gnu"
stage=$(mktemp -d)
container=""
trap 'rm -rf "$stage"; [ -z "$container" ] || docker rm -f "$container" >/dev/null' EXIT
mkdir -p "$stage/$name"
container=$(docker create gpufleet-build:local true)
for b in gpufleet gpufleet-agent; do docker cp "$container:/out/$b" "$stage/$name/$b"; done
for b in gpufleet gpufleet-agent; do
    need=$(objdump -T "$stage/$name/$b" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -1)
    if [ "$(printf '%s\n%s\n' "$need" "$baseline" | sort -V | tail -1)" != "$baseline" ]; then
        echo "FAIL: $b needs glibc $need, newer than the baseline $baseline" >&2
        exit 1
    fi
    echo "$b: glibc >= $need" >&2
done
cp README.md docs/install.md packaging/gpufleet-agent.service packaging/agent.toml.example \
    packaging/gpufleet-coordinator.service packaging/coordinator.env.example "$stage/$name/"
tar -C "$stage" -czf "$out/$name.tar.gz" "$name"
for b in gpufleet-agent gpufleet; do bash packaging/build_deb.sh "$stage/$name/$b" "$out" "$version" >/dev/null; done
(cd "$out" && sha256sum "$name.tar.gz" gpufleet-agent_"$version"_*.deb gpufleet-coordinator_"$version"_*.deb >SHA256SUMS)
ls "$out"
