#!/bin/sh
# The dependency layer of the image builds (what cargo-chef does, in a few lines): with only the
# workspace's Cargo.toml files and Cargo.lock copied in, gives every member an empty library, a
# `fn main() {}` for each binary its manifest names and an empty build script, so that
#   sh stub-workspace.sh && cargo build --release --locked ...
# compiles every dependency (build-dependencies too) in a layer that only a manifest or lock change
# invalidates. The next layer copies the real sources over the stubs, runs this script's `touch`
# mode (sources newer than the stub artifacts, so cargo rebuilds the members) and builds again.
# Usage: sh stub-workspace.sh            (in the workspace root, after COPYing the manifests)
#        sh stub-workspace.sh touch      (after COPYing the real sources)
set -eu
members=$(sed -n '/^members *=/s/.*\[\(.*\)\].*/\1/p' Cargo.toml | tr -d '" ' | tr ',' ' ')
[ -n "$members" ] || { echo "stub-workspace.sh: no members = [...] in ./Cargo.toml" >&2; exit 1; }
for m in $members; do
    if [ "${1:-}" = touch ]; then
        # A stub build script the real sources did not replace: the member has none.
        if [ "$(cat "$m/build.rs" 2>/dev/null)" = 'fn main() {}' ]; then rm "$m/build.rs"; fi
        find "$m" -type f -exec touch {} +
        continue
    fi
    mkdir -p "$m/src"
    : >"$m/src/lib.rs"
    echo 'fn main() {}' >"$m/build.rs"
    # Binaries named by path in the manifest ([[bin]] path = "src/main.rs" and the like).
    for bin in $(sed -n 's/^path *= *"\(src\/[^"]*\.rs\)".*/\1/p' "$m/Cargo.toml"); do
        mkdir -p "$m/$(dirname "$bin")"
        echo 'fn main() {}' >"$m/$bin"
    done
done
