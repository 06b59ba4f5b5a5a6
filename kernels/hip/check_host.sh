#!/usr/bin/env bash
# Runs the HIP kernels on the CPU (host_check.cpp) against f64 references: catches indexing,
# barrier and arithmetic mistakes in kernels/hip without an AMD GPU. Needs clang++ 15 or later
# (C++20 <barrier>, _Float16 on x86-64). Usage: kernels/hip/check_host.sh [clang++]
set -euo pipefail
cd "$(dirname "$0")"
CXX="${1:-}"
if [ -z "$CXX" ]; then
    for c in clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++; do
        if command -v "$c" >/dev/null 2>&1; then CXX="$c"; break; fi
    done
fi
[ -n "$CXX" ] || { echo "check_host.sh: no clang++ found (apt-get install clang-19)" >&2; exit 1; }
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
"$CXX" -std=c++20 -O1 -pthread -Wno-unknown-attributes -Wno-ignored-attributes -Wno-keyword-macro \
    -x c++ host_check.cpp -o "$out/host_check"
"$out/host_check"
