#!/usr/bin/env bash
# The GPU checks, in one go, on a machine with a CUDA GPU (docs/GPU.md):
#   prints the toolchain and the GPU runtime it finds; builds attnscope against the LibTorch of
#   the installed PyTorch 2.x (with CUDA), every optional dependency that machine may lack
#   switched off (GoogleTest, Google Benchmark, MPI, Gloo's headers, prometheus-cpp), with
#   gpu_checks and the Python module; then runs
#   1. build-gpu/tests/gpu/gpu_checks: the default auto source after 10 s of steady state
#      (late, unattributed, dropped, given-up counts 0), events and kernels together (kernel time
#      <= span x 1.01), memory, backend labels, each SDPA backend forced and named, a
#      torch.profiler trace taken while attnscope runs (it keeps its GPU kernels), step-time
#      overhead for a GPU-bound and a launch-bound model, the fallback under a running profiler;
#   2. tests/gpu/hf_gpu.py under launch/attnscope-run: a transformers Llama (from a config) on the
#      GPU with the zero-code attach; its summary must name CUPTI as the source, no fallback, and
#      forward and backward calls on every attention layer.
#
#   tests/gpu/run.sh                          # defaults: 4 layers, d_model 1024, seq 1024, batch 16
#   tests/gpu/run.sh --batch 8 --steps 8      # gpu_checks flags pass through
#
# Needs: python3 with torch 2.x (CUDA; the H200 machine has 2.11+cu130 on Python 3.12),
# transformers, pybind11, CMake >= 3.18, a C++20 compiler, the CUDA toolkit's headers (nvcc, or
# PyTorch's pip nvidia/cu13; set CUDA_HOME when it is not /usr/local/cuda or on the PATH). No
# package registry: tests/gpu/prepare.sh, run on the build machine, puts SQLite into
# build-gpu-deps/, carried with the tree. Budget on 16 cores: build <= 4 min, checks <= 4 min.
# Every log and figure goes to $OUT (the device tool's folder that comes back), else
# $build/logs. ATTNSCOPE_GPU_CMAKE_ARGS adds CMake arguments. A failed build is retried once from
# an empty build folder (a folder carried from elsewhere can hold a stale cache); there is no NCCL
# part to leave out any more (docs/AGGREGATION.md).
# Exit status: 0 all passed, 1 a check failed, 77 no GPU (after the build), else the build's.
set -uo pipefail
cd "$(dirname "$0")/../.."
start=$(date +%s)
python=${PYTHON:-python3}
build=${ATTNSCOPE_GPU_BUILD_DIR:-build-gpu}
logs=${OUT:-$build/logs}
mkdir -p "$logs"
say() { echo "run.sh: $*" | tee -a "$logs/run.log"; }

# --- the toolchain and the GPU runtime --------------------------------------------------------
{
  echo "== toolchain"
  uname -a
  cmake --version | head -1
  "${CXX:-c++}" --version | head -1
  command -v nvcc >/dev/null && nvcc --version | tail -2 || echo "nvcc: not on the PATH"
  command -v ninja >/dev/null && echo "ninja $(ninja --version)" || echo "ninja: none"
  "$python" --version
  "$python" - <<'PY'
import glob, importlib, os
import torch
print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN",
      torch.backends.cudnn.version() if torch.cuda.is_available() else "-",
      "devices", torch.cuda.device_count())
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"  device {i}: {p.name}, {p.total_memory / 2**30:.1f} GiB, sm_{p.major}{p.minor}")
site = os.path.dirname(os.path.dirname(torch.__file__))
for pattern in ("nvidia/cu13/lib/libcupti.so*", "nvidia/cuda_cupti/lib/libcupti.so*",
                "nvidia/cu12/lib/libcupti.so*", "nvidia/cu13/lib/libcudart.so*",
                "nvidia/cuda_runtime/lib/libcudart.so*"):
    for f in glob.glob(os.path.join(site, pattern)):
        print("  next to torch:", os.path.relpath(f, site))
for m in ("transformers", "pybind11", "scikit_build_core"):
    try:
        print(m, importlib.import_module(m).__version__)
    except Exception as e:  # noqa: BLE001 - printed, not fatal
        print(m, "missing:", e)
PY
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || echo "nvidia-smi: none"
} 2>&1 | tee "$logs/toolchain.log"

# --- the build ------------------------------------------------------------------------------
torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
prefix="$torch_prefix"
if [ -d build-gpu-deps/usr ]; then prefix="$prefix;$PWD/build-gpu-deps/usr"; fi  # tests/gpu/prepare.sh
cuda_args=()
if [ -n "${CUDA_HOME:-}" ]; then cuda_args+=("-DCUDAToolkit_ROOT=$CUDA_HOME" "-DCUDA_TOOLKIT_ROOT_DIR=$CUDA_HOME"); fi
configure_and_build() {
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
    -DATTNSCOPE_PYTHON="$(command -v "$python")" \
    -DATTNSCOPE_BUILD_TESTS=OFF -DATTNSCOPE_BUILD_BENCH=OFF -DATTNSCOPE_BUILD_EXAMPLES=OFF \
    -DATTNSCOPE_WITH_MPI=OFF -DATTNSCOPE_BUILD_GPU_TESTS=ON \
    ${cuda_args[@]+"${cuda_args[@]}"} ${ATTNSCOPE_GPU_CMAKE_ARGS:-} &&
  cmake --build "$build" -j"$(nproc)" --target gpu_checks _attnscope
}
if ! configure_and_build >"$logs/build.log" 2>&1; then
  say "build failed ($(grep -m1 -E 'error|Error' "$logs/build.log")); once more from an empty $build"
  mv "$logs/build.log" "$logs/build-first.log"
  rm -rf "$build"
  mkdir -p "$logs"
  if ! configure_and_build >"$logs/build.log" 2>&1; then
    tail -40 "$logs/build.log"
    say "build failed again; see $logs/build.log"
    exit 2
  fi
fi
grep -E "^-- attnscope:" "$logs/build.log" | tee -a "$logs/run.log"
say "built in $(( $(date +%s) - start )) s"

# --- 1. gpu_checks ------------------------------------------------------------------------------
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
rc=0
checks_start=$(date +%s)
timeout 270 "$build/tests/gpu/gpu_checks" "$@" 2>&1 | tee "$logs/gpu_checks.log"
rc=${PIPESTATUS[0]}
say "gpu_checks exit status $rc in $(( $(date +%s) - checks_start )) s"
grep -E '^(CHECK|FIGURE)' "$logs/gpu_checks.log" > "$logs/figures.txt" || true
if [ "$rc" = 77 ]; then
  say "no CUDA device: nothing checked; $(( $(date +%s) - start )) s in all"
  exit 77
fi
# A check line printed as PASS is the only pass: a crash or a timeout fails the run.
if [ "$rc" = 0 ] && grep -q '^CHECK .* FAIL ' "$logs/gpu_checks.log"; then rc=1; fi
if [ "$rc" = 0 ] && ! grep -q '^CHECK ' "$logs/gpu_checks.log"; then rc=1; fi

# --- 2. a transformers model under attnscope-run -------------------------------------------------
free_port() { "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
hf_dir="$logs/hf"
rm -rf "$hf_dir"
hf_start=$(date +%s)
ATTNSCOPE_PYTHONPATH="$PWD/$build/python" PYTHON="$python" timeout 150 "$python" launch/attnscope-run \
  --run-dir "$hf_dir" --job gpu --port "$(free_port)" --bind 127.0.0.1 --interval 1 \
  --nproc_per_node 1 --master_port "$(free_port)" tests/gpu/hf_gpu.py --seconds 10 \
  >"$logs/hf_gpu.log" 2>&1
hf_rc=$?
tail -5 "$logs/hf_gpu.log"
say "hf_gpu exit status $hf_rc in $(( $(date +%s) - hf_start )) s"
"$python" - "$hf_dir" "$hf_rc" <<'PY' | tee -a "$logs/figures.txt"
import glob, json, sys
run_dir, rc = sys.argv[1], int(sys.argv[2])
failed = 0
def check(name, ok, detail):
    global failed
    print(f"CHECK {name:<34} {'PASS' if ok else 'FAIL'}  {detail}")
    failed += not ok
check("hf_attnscope_run_exit_0", rc == 0, f"exit status {rc}")
paths = sorted(glob.glob(f"{run_dir}/summary-*.json"))
s = json.load(open(paths[0])) if paths else {}
t = s.get("run", {}).get("gpu_timing", {})
check("hf_gpu_timing_cupti", t.get("source") == "cupti" and not t.get("fallback_reason"),
      f"{t} in {paths[0] if paths else 'no summary'}")
layers = s.get("layers", [])
both = [l["name"] for l in layers
        if l.get("phases", {}).get("forward", {}).get("calls", 0) > 0
        and l.get("phases", {}).get("backward", {}).get("calls", 0) > 0]
check("hf_layers_forward_backward", len(layers) == 4 and len(both) == 4,
      f"{len(both)} of {len(layers)} layers with forward and backward calls: {both}")
sys.exit(1 if failed else 0)
PY
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
say "$(grep -c '^CHECK .* PASS ' "$logs/figures.txt") checks passed, $(grep -c '^CHECK .* FAIL ' "$logs/figures.txt") failed; exit $rc; $(( $(date +%s) - start )) s in all"
exit "$rc"
