#!/usr/bin/env bash
# The GPU checks, in one go, on a machine with a CUDA GPU (docs/GPU.md):
#   builds attnscope against the LibTorch of the installed PyTorch 2.x (with CUDA), with every
#   optional dependency that machine may lack switched off (GoogleTest, Google Benchmark, MPI,
#   Gloo's headers, prometheus-cpp), then runs build-gpu/tests/gpu/gpu_checks:
#   per-layer kernel times (forward, backward), CUPTI sums vs CUDA-event spans (5%), device
#   memory per layer, attention backends, an nccl aggregation round (a world of one), step-time
#   overhead on vs off, and the fallback to CUDA events under a running torch.profiler.
#
#   tests/gpu/run.sh                          # defaults: 4 layers, d_model 1024, seq 1024, batch 16
#   tests/gpu/run.sh --batch 8 --steps 8      # gpu_checks flags pass through
#
# Needs: python3 with torch 2.x (CUDA; the H200 machine has 2.11+cu130 on Python 3.12), CMake >=
# 3.18, a C++20 compiler, the CUDA toolkit (nvcc; set CUDA_HOME when it is not /usr/local/cuda or
# on the PATH). No package registry: tests/gpu/prepare.sh, run on the build machine, puts SQLite
# into build-gpu-deps/, carried with the tree. Budget: build < 5 min, checks < 5 min.
# ATTNSCOPE_GPU_CMAKE_ARGS adds CMake arguments (e.g. "-DATTNSCOPE_WITH_NCCL=OFF").
# Exit status: gpu_checks' (0 all passed, 1 a check failed, 77 no GPU), or the build's.
set -euo pipefail
cd "$(dirname "$0")/../.."
start=$(date +%s)
python=${PYTHON:-python3}
build=${ATTNSCOPE_GPU_BUILD_DIR:-build-gpu}

torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
"$python" -c 'import torch; print("run.sh: torch", torch.__version__, "CUDA", torch.version.cuda, "devices", torch.cuda.device_count())'
command -v nvidia-smi >/dev/null && nvidia-smi -L || true

cuda_args=()
prefix="$torch_prefix"
if [ -d build-gpu-deps/usr ]; then prefix="$prefix;$PWD/build-gpu-deps/usr"; fi  # tests/gpu/prepare.sh
if [ -n "${CUDA_HOME:-}" ]; then cuda_args+=("-DCUDAToolkit_ROOT=$CUDA_HOME" "-DCUDA_TOOLKIT_ROOT_DIR=$CUDA_HOME"); fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" -DATTNSCOPE_PYTHON="$(command -v "$python")" \
  -DATTNSCOPE_BUILD_TESTS=OFF -DATTNSCOPE_BUILD_BENCH=OFF -DATTNSCOPE_BUILD_EXAMPLES=OFF \
  -DATTNSCOPE_WITH_MPI=OFF -DATTNSCOPE_BUILD_GPU_TESTS=ON -DATTNSCOPE_WITH_CUDA=ON \
  ${cuda_args[@]+"${cuda_args[@]}"} ${ATTNSCOPE_GPU_CMAKE_ARGS:-}
cmake --build "$build" -j"$(nproc)" --target gpu_checks
echo "run.sh: built in $(( $(date +%s) - start )) s"

# The nccl aggregation round: a world of one, on attnscope's own TCPStore (rank 0 serves it).
free_port() { "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
export MASTER_ADDR=127.0.0.1 MASTER_PORT="$(free_port)" RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1
export ATTNSCOPE_STORE_PORT="$(free_port)" ATTNSCOPE_AGGREGATION=nccl ATTNSCOPE_ROUND_TIMEOUT_S=60
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}

rc=0
timeout 330 "$build/tests/gpu/gpu_checks" "$@" || rc=$?
echo "run.sh: gpu_checks exit status $rc; $(( $(date +%s) - start )) s in all"
exit "$rc"
