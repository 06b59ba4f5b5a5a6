#!/usr/bin/env bash
# Builds llama.cpp's `llama-bench` (Vulkan, static, portable) from the source distribution of PyPI's
# `llama-cpp-python` (it carries `vendor/llama.cpp`), and vendors the pure-Python `gguf` writer, so
# that a GPU host with no compiler and no network can run bench/llm_vs_llamacpp.py (issue 53, point 8).
#
# Why from PyPI: the registries are the only sources this workplace reaches; the sdist pins one
# llama.cpp commit, and the `gguf` package vendored here is that commit's own `gguf-py`, so the
# writer and the reader agree.
#
# Output (default .llamacpp/, ignored by git):
#   vulkan/llama-bench                 static except libvulkan.so.1 (found through LD_LIBRARY_PATH), stripped
#   cpu/llama-bench                    (--cpu) a CPU-only build for this machine
#   carry/                             all a GPU host needs (about 13 MiB): carry this folder alone
#     llama-bench-vulkan.tar.xz        vulkan/llama-bench, packed
#     py/                              gguf (+ pyyaml, tqdm) for sys.path; numpy comes from the host
#     VERSION                          the llama-cpp-python version and the llama.cpp commit
#   src/, build-*/, toolchain/         the sdist, the CMake builds, trixie's headers and glslc
#
# The portable build: GGML_NATIVE=OFF with AVX2/FMA/F16C on (every x86-64 GPU host of ours has them),
# no OpenMP (no libgomp on a bare host), libstdc++ and libgcc linked statically.
#
# Why a toolchain from Debian trixie: this llama.cpp needs Vulkan headers newer than bookworm's
# (1.3.239 lacks VK_EXT_layer_settings), and bookworm's glslc (shaderc 2023.2) knows no
# GL_KHR_cooperative_matrix / GL_NV_cooperative_matrix2, without which llama.cpp builds no tensor-core
# matmul shaders and its prefill on an NVIDIA GPU would be a straw man. So trixie's libvulkan-dev,
# spirv-headers and glslc (with its libshaderc1 and trixie's libc to run it) are downloaded with
# apt-get under a private state folder (no system package is installed or changed) and unpacked into
# DIR/toolchain; glslc runs through trixie's own dynamic loader. --system-toolchain uses the
# system's instead (an up-to-date distribution's will do).
set -euo pipefail

version=0.3.36
out=.llamacpp
jobs=2
want_vulkan=1
want_cpu=0
want_py=1
system_toolchain=0

usage() {
    cat <<EOF
usage: bench/build_llamacpp.sh [--version V] [--out DIR] [--jobs N] [--cpu] [--no-vulkan] [--no-py]
                               [--system-toolchain]

Builds llama.cpp's llama-bench from llama-cpp-python==V's sdist (default $version) into DIR
(default $out): DIR/vulkan/llama-bench, packed as DIR/carry/llama-bench-vulkan.tar.xz, and
DIR/carry/py with the gguf package (DIR/carry is what a GPU host needs); with --cpu also a CPU-only
DIR/cpu/llama-bench. Builds under nice -n 19 with -j N (default $jobs).
The Vulkan headers, SPIR-V headers and glslc come from Debian trixie (downloaded with apt-get under
DIR/toolchain, nothing installed) unless --system-toolchain. Needs: pip, cmake, a C++ compiler,
apt-get and dpkg-deb (Debian), libvulkan-dev (the loader to link), xz:
  apt-get install -y cmake g++ libvulkan-dev xz-utils
EOF
}

while [ $# -gt 0 ]; do
    case "$1" in
        --version) version="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --jobs) jobs="$2"; shift 2 ;;
        --cpu) want_cpu=1; shift ;;
        --no-vulkan) want_vulkan=0; shift ;;
        --no-py) want_py=0; shift ;;
        --system-toolchain) system_toolchain=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "build_llamacpp.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

die() { echo "build_llamacpp.sh: $*" >&2; exit 1; }

need() {
    command -v "$1" >/dev/null || die "'$1' not found: $2"
}
need python3 "install Python 3"
need cmake "apt-get install -y cmake"
need c++ "apt-get install -y g++"
need strip "apt-get install -y binutils"
if [ "$want_vulkan" = 1 ]; then
    need xz "apt-get install -y xz-utils"
    compgen -G "/usr/lib/*/libvulkan.so" >/dev/null || die "no Vulkan loader to link: apt-get install -y libvulkan-dev"
    if [ "$system_toolchain" = 1 ]; then
        need glslc "apt-get install -y glslc"
        [ -f /usr/include/vulkan/vulkan.h ] || die "no Vulkan headers: apt-get install -y libvulkan-dev"
        compgen -G "/usr/share/cmake/SPIRV-Headers/SPIRV-HeadersConfig.cmake" >/dev/null \
            || compgen -G "/usr/lib/*/cmake/SPIRV-Headers/SPIRV-HeadersConfig.cmake" >/dev/null || die \
            "no SPIR-V headers' CMake package: apt-get install -y spirv-headers"
    else
        need apt-get "the trixie toolchain needs Debian's apt-get (or pass --system-toolchain)"
        need dpkg-deb "the trixie toolchain needs dpkg-deb (or pass --system-toolchain)"
    fi
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
src="$out/src/llama_cpp_python-$version"
if [ ! -d "$src/vendor/llama.cpp" ]; then
    echo "== downloading llama-cpp-python==$version (sdist)" >&2
    mkdir -p "$out/src"
    # --no-binary for this package alone: its build backend's own dependencies (cmake, ninja) may
    # come as wheels, which pip needs to read the sdist's metadata.
    python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python -d "$out/src" \
        "llama-cpp-python==$version" || die "pip could not download llama-cpp-python==$version"
    tar -xzf "$out/src/llama_cpp_python-$version.tar.gz" -C "$out/src" \
        || die "could not unpack $out/src/llama_cpp_python-$version.tar.gz"
    [ -d "$src/vendor/llama.cpp" ] || die "$src has no vendor/llama.cpp"
fi
llama="$src/vendor/llama.cpp"

# trixie_toolchain DIR: trixie's Vulkan and SPIR-V headers and a glslc wrapper under DIR.
trixie_toolchain() {
    local tc=$1
    if [ -x "$tc/glslc" ] && [ -f "$tc/root/usr/include/vulkan/vulkan.h" ]; then return; fi
    echo "== downloading Debian trixie's libvulkan-dev, spirv-headers, glslc into $tc (private apt state)" >&2
    rm -rf "$tc"
    mkdir -p "$tc/apt/lists/partial" "$tc/apt/cache/archives/partial" "$tc/apt/sources" "$tc/debs" "$tc/root"
    printf '%s\n' "Types: deb" "URIs: http://deb.debian.org/debian" "Suites: trixie" "Components: main" \
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" >"$tc/apt/sources/trixie.sources"
    local apt=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$tc/apt/sources"
               -o "Dir::State::Lists=$tc/apt/lists" -o "Dir::Cache=$tc/apt/cache" -o Dir::State::status=/dev/null
               -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
    apt-get "${apt[@]}" update -qq >"$tc/apt.log" 2>&1 || { cat "$tc/apt.log" >&2; die "apt-get update (trixie) failed"; }
    (cd "$tc/debs" && apt-get "${apt[@]}" download glslc libshaderc1 libvulkan-dev spirv-headers libc6 libstdc++6 \
        libgcc-s1 >>"$tc/apt.log" 2>&1) || { cat "$tc/apt.log" >&2; die "apt-get download (trixie) failed"; }
    for deb in "$tc"/debs/*.deb; do dpkg-deb -x "$deb" "$tc/root"; done
    local lib="$tc/root/usr/lib/x86_64-linux-gnu"
    printf '%s\n' "#!/bin/sh" "# trixie's glslc, run by trixie's dynamic loader on trixie's libc (bench/build_llamacpp.sh)." \
        "exec \"$lib/ld-linux-x86-64.so.2\" --library-path \"$lib\" \"$tc/root/usr/bin/glslc\" \"\$@\"" >"$tc/glslc"
    chmod +x "$tc/glslc"
    "$tc/glslc" --version >/dev/null || die "trixie's glslc does not run: see $tc/glslc"
    rm -rf "$tc/apt/cache" "$tc/debs" "$tc/apt/lists"
}

# Options both builds share: static, release, portable, only what llama-bench needs.
common=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF
        -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_OPENMP=OFF
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON
        "-DCMAKE_EXE_LINKER_FLAGS=-static-libstdc++ -static-libgcc")

build() { # build NAME CMAKE-ARGS...: DIR/NAME/llama-bench
    local name=$1; shift
    local dir="$out/build-$name"
    echo "== configuring $name ($dir)" >&2
    nice -n 19 cmake -S "$llama" -B "$dir" "${common[@]}" "$@" >"$out/cmake-$name.log" 2>&1 \
        || die "cmake configure of $name failed; see $out/cmake-$name.log"
    echo "== building llama-bench ($name, -j$jobs; log $out/build-$name.log)" >&2
    nice -n 19 cmake --build "$dir" --target llama-bench -j "$jobs" >"$out/build-$name.log" 2>&1 \
        || { tail -30 "$out/build-$name.log" >&2; die "build of $name failed; see $out/build-$name.log"; }
    mkdir -p "$out/$name"
    cp "$dir/bin/llama-bench" "$out/$name/llama-bench"
    strip "$out/$name/llama-bench"
    echo "== $out/$name/llama-bench: $(du -h "$out/$name/llama-bench" | cut -f1); needs:" >&2
    ldd "$out/$name/llama-bench" | sed 's/^/   /' >&2 || true
}

if [ "$want_vulkan" = 1 ]; then
    vk=(-DGGML_VULKAN=ON)
    if [ "$system_toolchain" = 0 ]; then
        trixie_toolchain "$out/toolchain"
        vk+=("-DVulkan_INCLUDE_DIR=$out/toolchain/root/usr/include" "-DVulkan_GLSLC_EXECUTABLE=$out/toolchain/glslc"
             "-DSPIRV-Headers_DIR=$out/toolchain/root/usr/share/cmake/SPIRV-Headers")
    fi
    build vulkan "${vk[@]}"
    grep -E "supported by glslc" "$out/cmake-vulkan.log" | sed 's/^/   /' >&2 || true
    mkdir -p "$out/carry"
    tar -C "$out" -cJf "$out/carry/llama-bench-vulkan.tar.xz" vulkan/llama-bench
    echo "== $out/carry/llama-bench-vulkan.tar.xz: $(du -h "$out/carry/llama-bench-vulkan.tar.xz" | cut -f1)" >&2
fi
if [ "$want_cpu" = 1 ]; then
    build cpu
fi

if [ "$want_py" = 1 ]; then
    echo "== vendoring gguf (llama.cpp's own gguf-py), pyyaml, tqdm into $out/carry/py" >&2
    rm -rf "$out/carry/py"
    # pyyaml falls back to pure Python where its compiled part does not match the host's Python.
    python3 -m pip install --quiet --no-deps --target "$out/carry/py" "$llama/gguf-py" pyyaml tqdm \
        || die "pip could not install gguf from $llama/gguf-py"
    rm -rf "$out/carry/py/bin"
    if python3 -c "import numpy" 2>/dev/null; then
        python3 -c "import sys; sys.path.insert(0, '$out/carry/py'); import gguf; print('   gguf', gguf.__file__)" >&2 \
            || die "the vendored gguf does not import"
    else
        echo "   (no numpy in this python3: the vendored gguf was not test-imported)" >&2
    fi
fi

# The sdist's changelog names the llama.cpp commit it vendors.
commit=$(grep -m1 -o 'llama.cpp@[0-9a-f]*' "$src/CHANGELOG.md" 2>/dev/null || echo 'llama.cpp@?')
mkdir -p "$out/carry"
echo "llama-cpp-python $version ($commit)" >"$out/carry/VERSION"
echo "== done: $(cat "$out/carry/VERSION"); carry $out/carry ($(du -sh "$out/carry" | cut -f1))" >&2
