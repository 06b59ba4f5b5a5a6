#!/usr/bin/env bash
# Builds the gpufleet images from docker/*.Dockerfile as PREFIX/NAME:TAG (coordinator, agent-mesa,
# agent-mesa-full on agent-mesa's binary, agent-nvidia, and agent-rocm unless SKIP_ROCM is set);
# agent-rocm compiles nothing itself: it takes the hip agent from agent-rocm-build (built first,
# and pushed with a release), or, with HIP_AGENT_BIN=PATH, from that binary, a hip agent already
# built and tested on this machine (.ci/run: no second compile of the agent in the image builder);
# with --push, pushes each. Prints each image's build time. Base images are
# the Dockerfiles' defaults (the upstream images a registry has) unless LOCAL_BASES=1, which passes
# the local ones docker/base-images.sh makes (no registry: docker/test.sh). docker/test.sh and
# ci/release.yml both build through this script.
# Usage: docker/build_images.sh PREFIX TAG [--push|--list]   (--list: the names it builds, one a line)
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${1:?usage: build_images.sh PREFIX TAG [--push|--list]}
tag=${2:?usage: build_images.sh PREFIX TAG [--push|--list]}
mode=${3:-}
names=(coordinator agent-mesa agent-mesa-full agent-nvidia)
if [ -z "${SKIP_ROCM:-}" ]; then
    [ -z "${HIP_AGENT_BIN:-}" ] && names+=(agent-rocm-build)
    names+=(agent-rocm)
fi
if [ "$mode" = --list ]; then
    printf '%s\n' "${names[@]}"
    exit 0
fi
bases=()
rocm=()
if [ "$mode" = --push ]; then
    # A release: the images are labelled with its version (TAG without a leading v).
    bases=(--build-arg "VERSION=${tag#v}")
    rocm=(--build-arg "VERSION=${tag#v}")
fi
if [ "${LOCAL_BASES:-}" = 1 ]; then
    bash docker/base-images.sh >/dev/null
    bash docker/base-images.sh bullseye >/dev/null
    # The build stage on the release build's base (packaging/release_build.sh), so the two share it.
    bases+=(--build-arg RUST_IMAGE=gpufleet-base/rust-bullseye:local --build-arg RUNTIME_IMAGE=gpufleet-base/bookworm:local)
    # Debian's ROCm 5.2 standing in for AMD's image: its HIP under /usr, clang-19, three targets.
    rocm+=(--build-arg RUST_IMAGE=gpufleet-base/rust-bullseye:local --build-arg ROCM_IMAGE=gpufleet-base/rocm:local
        --build-arg HIP_PATH=/usr --build-arg GPUFLEET_HIP_CLANG=clang-19
        --build-arg GPUFLEET_HIP_TARGETS=gfx803,gfx1010,gfx942)
fi
if [ -n "${HIP_AGENT_BIN:-}" ] && [ -z "${SKIP_ROCM:-}" ]; then
    # The prebuilt hip agent as the image agent-rocm copies it from (/out/gpufleet-agent), stripped.
    [ -x "$HIP_AGENT_BIN" ] || { echo "build_images.sh: HIP_AGENT_BIN=$HIP_AGENT_BIN is not an executable" >&2; exit 2; }
    ctx="$(mktemp -d /tmp/gpufleet-hip-agent.XXXXXX)"
    strip -o "$ctx/gpufleet-agent" "$HIP_AGENT_BIN"
    printf 'FROM scratch\nCOPY gpufleet-agent /out/gpufleet-agent\n' >"$ctx/Dockerfile"
    docker build -q -t gpufleet-base/hip-agent:local "$ctx" >/dev/null
    rm -rf "$ctx"
    rocm+=(--build-arg AGENT_BUILD_IMAGE=gpufleet-base/hip-agent:local)
else
    rocm+=(--build-arg "AGENT_BUILD_IMAGE=$prefix/agent-rocm-build:$tag")
fi
for name in "${names[@]}"; do
    echo "[images $(date +%T)] building $prefix/$name:$tag"
    start=$SECONDS
    case "$name" in
    agent-rocm | agent-rocm-build) args=("${rocm[@]}") ;;
    agent-mesa-full) args=("${bases[@]}" --build-arg "AGENT_IMAGE=$prefix/agent-mesa:$tag") ;;
    *) args=("${bases[@]}") ;;
    esac
    docker build -q -f "docker/$name.Dockerfile" "${args[@]}" -t "$prefix/$name:$tag" . >/dev/null
    echo "[images $(date +%T)] built $prefix/$name:$tag in $((SECONDS - start)) s"
    if [ "$mode" = --push ]; then
        docker push -q "$prefix/$name:$tag"
    fi
done
