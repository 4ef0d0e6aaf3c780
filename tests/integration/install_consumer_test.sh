#!/usr/bin/env bash
# find_package(attnscope) works from an install tree: install, then build and run a tiny consumer.
set -euo pipefail
build="$1"
src="$2"
python="$3"  # the Python whose torch attnscope was built against: find_dependency(Torch) needs it
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
torch_prefix=$("$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src/tests/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix;$torch_prefix" >/dev/null
cmake --build "$work/consumer" -j2 >/dev/null
out=$("$work/consumer/consumer")
echo "$out"
echo "$out" | grep -q '^attnscope [0-9]*\.[0-9]*\.[0-9]* layers=1 forward_calls=2$'
