#!/usr/bin/env bash
# A Python user's install, in a fresh venv: `pip install torch==2.13.0`, then `pip install SOURCE`
# (scikit-build-core builds libattnscope against that venv's torch). Then, from outside the
# source tree: `import attnscope`, `attnscope-analyze` on PATH, and the README's command
#   attnscope-run --nproc_per_node 2 examples/train_transformer.py --steps 20
# writes two summaries with per-layer forward and backward figures and a cross-rank section.
#   tests/integration/pip_install_test.sh SOURCE_DIR PYTHON [WORK_DIR]
# PYTHON: a Python to make the venv with (its base interpreter is used). Takes minutes: the
# plugin is compiled once more, against the fresh venv's torch.
set -euo pipefail
src=$(cd "$1" && pwd)
base=$("$2" -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')
work=${3:-$(mktemp -d)}
torch_version=${ATTNSCOPE_TORCH:-2.13.0}
start=$(date +%s)
rm -rf "$work/venv" "$work/run"
"$base" -m venv "$work/venv"
py="$work/venv/bin/python"
"$py" -m pip install -q "torch==$torch_version"
echo "pip_install_test: torch installed in $(( $(date +%s) - start )) s"
"$py" -m pip install -q "$src"
echo "pip_install_test: attnscope installed in $(( $(date +%s) - start )) s"
cd "$work"
export PATH="$work/venv/bin:$PATH" OMP_NUM_THREADS=1
unset PYTHONPATH ATTNSCOPE_PYTHONPATH
"$py" -c 'import attnscope, torch; print("import attnscope", attnscope.version(), "torch", torch.__version__, attnscope.__file__)'
case "$("$py" -c 'import attnscope; print(attnscope.__file__)')" in
  "$work/venv/"*) ;; *) echo "attnscope imported from outside the venv"; exit 1 ;;
esac
command -v attnscope-analyze attnscope-run attnscope-torchrun attnscope-replay
attnscope-replay --help > "$work/replay-help.txt"
grep -q "attnscope-replay RUN_DIR" "$work/replay-help.txt"
attnscope-analyze --help >/dev/null 2>&1 || [ $? -eq 2 ]
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
attnscope-run --run-dir "$work/run" --port 0 --interval 1 --nproc_per_node 2 --master_port "$port" \
  "$src/examples/train_transformer.py" --steps 20
"$py" - "$work/run" "$torch_version" <<'PY'
import json, os, sys
run, want = sys.argv[1], sys.argv[2]
for rank in (0, 1):
    s = json.load(open(os.path.join(run, f"summary-{rank}.json")))
    assert s["run"]["rank"] == rank and s["run"]["world_size"] == 2, s["run"]
    assert s["run"]["torch_version"] == want, s["run"]["torch_version"]
    assert s["layers"], f"rank {rank}: no layers"
    for layer in s["layers"]:
        fwd, bwd = layer["phases"]["forward"], layer["phases"].get("backward")
        assert fwd["calls"] > 0 and bwd and bwd["calls"] > 0, (rank, layer["name"], sorted(layer["phases"]))
cluster = json.load(open(os.path.join(run, "summary-0.json")))["cluster"]
assert cluster["aggregation"] == "gloo" and cluster["rounds"] > 0 and cluster["present_ranks"] == 2, cluster
print("pip install: 2 summaries,", len(s["layers"]), "layers each, forward and backward;",
      cluster["rounds"], "cross-rank rounds over", cluster["aggregation"])
PY
echo "pip_install_test: passed in $(( $(date +%s) - start )) s"
