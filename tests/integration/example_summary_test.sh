#!/usr/bin/env bash
# The README's first-run promise: the example writes a per-rank summary with every layer, one
# forward and one backward call per step, the op kinds of attention, and memory figures.
set -euo pipefail
example="$1"
python="${2:-python3}"  # the Python whose torch the example was built against
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

ATTNSCOPE_SUMMARY_JSON="$out/s-{rank}.json" ATTNSCOPE_LOG_LEVEL=info \
  "$example" --layers 4 --steps 20 --d-model 64 --heads 4 --seq 32 --batch 4 --quiet 2> "$out/stderr"

test -f "$out/s-0.json" || { echo "no summary at $out/s-0.json"; exit 1; }
grep -q "attention per layer" "$out/stderr" || { echo "no table on stderr"; cat "$out/stderr"; exit 1; }

"$python" - "$out/s-0.json" <<'PY'
import json, sys
import torch
s = json.load(open(sys.argv[1]))
assert s["schema"] == "attnscope.summary/1", s["schema"]
run = s["run"]
assert run["rank"] == 0 and run["world_size"] == 1, run
assert run["steps_seen"] == 20 and run["steps_sampled"] == 20, run
assert run["torch_version"] == torch.__version__.split("+")[0], (run["torch_version"], torch.__version__)
layers = s["layers"]
assert [l["name"] for l in layers] == [f"layers.{i}.attn" for i in range(4)], [l["name"] for l in layers]
for l in layers:
    fwd, bwd = l["phases"]["forward"], l["phases"]["backward"]
    assert fwd["calls"] == 20 and bwd["calls"] == 20, (l["name"], fwd["calls"], bwd["calls"])
    for kind in ("qkv_projection", "score_matmul", "softmax", "context_matmul", "output_projection"):
        for phase in (fwd, bwd):
            c = phase["op_kinds"][kind]
            assert c["count"] == 20 and c["total_seconds"] > 0, (l["name"], kind, c)
            assert c["p50_seconds"] <= c["p90_seconds"] <= c["p99_seconds"] <= c["max_seconds"], c
    assert fwd["call"]["bytes_allocated"] > 0 and fwd["call"]["peak_bytes"] > 0, fwd["call"]
    assert fwd["op_kinds"]["qkv_projection"]["bytes_allocated"] > 0
    assert fwd["op_kinds"]["qkv_projection"]["peak_bytes"] > 0
    assert bwd["call"]["bytes_allocated"] > 0 and bwd["call"]["peak_bytes"] > 0, bwd["call"]
print("summary ok:", len(layers), "layers")
PY
