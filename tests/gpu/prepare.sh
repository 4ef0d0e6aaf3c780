#!/usr/bin/env bash
# Run on the build machine (Debian, with a package registry) before a GPU run: puts what the GPU
# machine may lack into build-gpu-deps/, a git-ignored folder that travels with the tree
# (device tool: carry ["build-gpu-deps"]). Today that is SQLite (the trace store needs its
# headers and library): Debian's libsqlite3-dev and libsqlite3-0, unpacked with dpkg -x.
# tests/gpu/run.sh adds build-gpu-deps/usr to CMake's search path when it is there.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build-gpu-deps
rm -rf "$out" && mkdir -p "$out/debs"
(cd "$out/debs" && apt-get download libsqlite3-dev libsqlite3-0 >/dev/null)
for deb in "$out"/debs/*.deb; do dpkg -x "$deb" "$out"; done
rm -rf "$out/debs"
# The .so link of -dev points into the same tree; CMake's FindSQLite3 needs include/ and lib/.
ls "$out/usr/include/sqlite3.h" "$out"/usr/lib/*/libsqlite3.so >/dev/null
echo "prepare.sh: $(du -sh "$out" | cut -f1) in $out; carry it: run(command='tests/gpu/run.sh', carry=['$out'])"
