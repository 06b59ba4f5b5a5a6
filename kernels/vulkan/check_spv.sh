#!/usr/bin/env bash
# Fails (exit 1, naming the file) when a committed kernels/vulkan/spv/*.spv is not what its source
# compiles to, or when a .comp has no committed module or a module no source; CI runs it so the
# embedded SPIR-V never drifts from the GLSL next to it. Rebuilds into a temporary directory with
# build_spv.sh and compares byte for byte. Exit 2: the compiler is missing.
set -euo pipefail

cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

./build_spv.sh "$tmp"

status=0
for built in "$tmp"/*.spv; do
    name=$(basename "$built")
    if [ ! -f "spv/$name" ]; then
        echo "check_spv.sh: kernels/vulkan/spv/$name is missing (source ${name%.spv}.comp)" >&2
        status=1
    elif ! cmp -s "$built" "spv/$name"; then
        echo "check_spv.sh: kernels/vulkan/spv/$name differs from what ${name%.spv}.comp compiles to" >&2
        status=1
    fi
done
for committed in spv/*.spv; do
    [ -e "$committed" ] || continue
    name=$(basename "$committed")
    if [ ! -f "$tmp/$name" ]; then
        echo "check_spv.sh: kernels/vulkan/$committed has no source ${name%.spv}.comp" >&2
        status=1
    fi
done

if [ "$status" != 0 ]; then
    echo "check_spv.sh: run kernels/vulkan/build_spv.sh and commit kernels/vulkan/spv/" >&2
    committed_version=$(cat spv/glslc-version.txt 2>/dev/null || echo unknown)
    built_version=$(cat "$tmp/glslc-version.txt")
    if [ "$committed_version" != "$built_version" ]; then
        echo "check_spv.sh: note: spv/ was built with '$committed_version', this is '$built_version'" >&2
    fi
fi
exit "$status"
