#!/usr/bin/env bash
# Compiles every kernels/vulkan/*.comp to spv/NAME.spv (or to the directory given as $1), so that
# builds need no shader compiler: kernels/build.rs embeds them (sources::vulkan) where glslc is missing.
#
#   glslc --target-env=vulkan1.1 -O -o spv/NAME.spv NAME.comp   (without -O where the source says so)
#
# Deterministic: no debug information, sources compiled from this directory (their #includes are
# relative to it), in name order. Each module is checked with spirv-val when it is installed. The
# compiler's version goes to spv/glslc-version.txt: check_spv.sh names it when a rebuild differs,
# since another shaderc release may emit different (equally valid) words.
#
# Run it after editing any .comp or include/*.glsl, and commit spv/ with the sources.
set -euo pipefail

cd "$(dirname "$0")"
out=${1:-spv}
mkdir -p "$out"

if ! command -v glslc >/dev/null; then
    echo "build_spv.sh: glslc not found (Debian/Ubuntu: apt-get install glslc)" >&2
    exit 2
fi
validate=1
command -v spirv-val >/dev/null || validate=0

for src in *.comp; do
    name=${src%.comp}
    # A shader marked "// build_spv: no -O" (on a line of its own) is compiled unoptimized: glslang's
    # optimizer crashes on some (the driver optimizes every module anyway).
    opt=-O
    if grep -qx '// build_spv: no -O' "$src"; then opt=; fi
    glslc --target-env=vulkan1.1 $opt -o "$out/$name.spv" "$src"
    if [ "$validate" = 1 ]; then
        spirv-val --target-env vulkan1.1 "$out/$name.spv"
    fi
done

# Modules whose source is gone would still be embedded: remove them.
for spv in "$out"/*.spv; do
    name=$(basename "$spv" .spv)
    [ -f "$name.comp" ] || rm -f "$spv"
done

version=$(glslc --version)
echo "${version%%$'\n'*}" > "$out/glslc-version.txt"
