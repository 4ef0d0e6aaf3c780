#!/usr/bin/env bash
# The CUDA variant compiles against a PyTorch CUDA wheel (ATTNSCOPE_TORCH_CUDA_VERSION, default
# 2.14.1, the top of the supported range; the GPU machine's 2.11.0 is CudaCompile.torch_2_11_0),
# with cupti.h and the CUDA runtime headers of the very releases that wheel requires (its
# cuda-toolkit pin, e.g. 13.0.2 for 2.11.0: CUPTI 13.0.85, whose record layouts differ from
# 13.2's), CUDA 13 layout nvidia/cu13/include. Compile-only (this machine has no GPU): every
# translation unit that includes CUDA or CUPTI headers is checked with -fsyntax-only in C++20 with
# the CUDA paths on (ATTNSCOPE_TORCH_CUDA, ATTNSCOPE_WITH_CUDA). ATTNSCOPE_CUDA_COMPILE_ALL=1 adds
# every other translation unit that includes LibTorch (about 4 more minutes on 2 cores). Nothing
# is installed: `pip download` takes the wheels and only their headers are unpacked, into WORK
# (kept between runs; one WORK per torch version).
#
#   tests/cuda_compile/check.sh SOURCE_DIR [WORK_DIR]
# Needs: pip (the checkout's .venv) with the wheels reachable (torch, cuda-toolkit,
# nvidia-cuda-cupti, nvidia-cuda-runtime, nvidia-cuda-cccl, nvidia-cuda-crt), unzip, g++. Exit 0
# when all compile.
set -euo pipefail
src=$(cd "$1" && pwd)
work=${2:-$src/build-cuda-compile}
python=${ATTNSCOPE_PYTHON:-$src/.venv/bin/python}
torch_cuda=${ATTNSCOPE_TORCH_CUDA_VERSION:-2.14.1}
start=$(date +%s)
mkdir -p "$work/wheels" "$work/tree"

marker() { printf '%s/tree/.%s' "$work" "$(printf '%s' "$1" | tr -c 'A-Za-z0-9.' _)"; }
unpack() {  # unpack WHEEL_SPEC PATTERN...: its METADATA's requirements go to $(marker SPEC).requires
  local spec=$1; shift
  local marker; marker=$(marker "$spec")
  [ -f "$marker" ] && return 0
  "$python" -m pip download -q --no-deps "$spec" -d "$work/wheels"
  local name=${spec%%=*}; name=${name//-/_}
  local file; file=$(ls "$work/wheels/${name}"-*.whl | head -1)
  unzip -q -o "$file" "$@" -d "$work/tree"
  unzip -p "$file" '*.dist-info/METADATA' | grep '^Requires-Dist:' > "$marker.requires" || true
  rm -f "$file"  # only the headers are kept
  touch "$marker"
}
# The pin of an NVIDIA component (e.g. nvidia-cuda-cupti) in a requirement list: "==13.0.85.*".
pin() { sed -n "s/^Requires-Dist: $1 *\(==[^;]*\).*/\1/p" "$2" | head -1 | tr -d ' '; }
unpack "torch==$torch_cuda" 'torch/include/*'
requires="$(marker "torch==$torch_cuda").requires"
# Wheels since 2.10 require cuda-toolkit==X (whose extras pin each component); older ones pin the
# components themselves.
toolkit_pin=$(pin 'cuda-toolkit\[[^]]*\]' "$requires")
if [ -n "$toolkit_pin" ]; then
  unpack "cuda-toolkit$toolkit_pin"
  requires="$(marker "cuda-toolkit$toolkit_pin").requires"
fi
cupti_pin=$(pin nvidia-cuda-cupti "$requires")
echo "check.sh: torch $torch_cuda requires cuda-toolkit${toolkit_pin:-?}, nvidia-cuda-cupti${cupti_pin:-?}"
unpack "nvidia-cuda-cupti$cupti_pin" 'nvidia/cu13/include/*'
# The CUDA runtime headers CUPTI's wheel was made with (the same cuda-toolkit release:
# nvidia-cuda-runtime, with cccl and crt for the headers it includes); a local toolkit of another
# 13.x release may lack declarations that CUPTI's generated headers use.
if unpack "nvidia-cuda-runtime$(pin nvidia-cuda-runtime "$requires")" 'nvidia/cu13/include/*' \
   && unpack "nvidia-cuda-cccl$(pin nvidia-cuda-cccl "$requires")" 'nvidia/cu13/include/*' \
   && unpack "nvidia-cuda-crt$(pin nvidia-cuda-crt "$requires")" 'nvidia/cu13/include/*'; then
  cuda_include=$work/tree/nvidia/cu13/include
else
  cuda_include=${CUDAToolkit_ROOT:-/usr/local/cuda}/include
  echo "check.sh: no nvidia-cuda-runtime wheel; using $cuda_include" >&2
fi
# ATen's CUDA headers may include cuBLAS, cuSPARSE and cuSOLVER headers, libraries attnscope
# never calls: a local toolkit's serve, after the wheels'
# (so the runtime's come from the wheel); without one, those wheels' headers are unpacked too.
toolkit=${CUDAToolkit_ROOT:-/usr/local/cuda}/include
if [ ! -f "$toolkit/cusparse.h" ]; then
  unpack nvidia-cublas 'nvidia/cu13/include/*'
  unpack nvidia-cusparse 'nvidia/cu13/include/*'
  unpack nvidia-cusolver 'nvidia/cu13/include/*'
  toolkit=$work/tree/nvidia/cu13/include
fi
t=$work/tree
grep -q "TORCH_VERSION_MINOR $(echo "$torch_cuda" | cut -d. -f2)" "$t/torch/include/torch/headeronly/version.h" \
  || { echo "check.sh: the unpacked headers are not torch $torch_cuda" >&2; exit 1; }
grep -q "define USE_CUDA\|C10_CUDA" "$t/torch/include/c10/cuda/impl/cuda_cmake_macros.h" \
  || { echo "check.sh: torch $torch_cuda's headers are not a CUDA build" >&2; exit 1; }
echo "check.sh: headers of torch $torch_cuda (CUDA), CUPTI unpacked in $(( $(date +%s) - start )) s"

flags=(-std=c++20 -fsyntax-only -fPIC -Wall -Wextra -Wno-unused-parameter
  -DATTNSCOPE_VERSION='"0"' -DATTNSCOPE_WITH_PROMETHEUS=0 -DATTNSCOPE_WITH_MPI=0
  -DATTNSCOPE_TORCH_CUDA=1 -DUSE_CUDA
  -DATTNSCOPE_WITH_CUDA=1 -DATTNSCOPE_CUDART_PATH='""' -DATTNSCOPE_CUPTI_PATH='""'
  -I"$src/core/include" -I"$src/collectors/include" -I"$src/exporters/include" -I"$src/trace/include"
  -I"$src/reporter/include" -I"$src/plugin/include"
  -I"$src/plugin/src" -I"$src/examples"
  -isystem "$t/torch/include" -isystem "$t/torch/include/torch/csrc/api/include"
  -isystem "$t/nvidia/cu13/include" -isystem "$cuda_include"
  -idirafter "$toolkit")
# The CUDA and CUPTI translation units (and, when asked, every other one that includes LibTorch).
units=(collectors/src/CudaEventApi.cpp collectors/src/CuptiActivityApi.cpp plugin/src/CudaTorch.cpp
       plugin/src/C10dAggregator.cpp tests/gpu/gpu_checks.cpp)
for f in plugin/src/*.cpp collectors/src/*.cpp examples/*.cpp; do
  [ "${ATTNSCOPE_CUDA_COMPILE_ALL:-0}" = 1 ] || break
  case " ${units[*]} " in *" $f "*) ;; *) grep -q '#include <\(torch\|ATen\|c10\)/' "$src/$f" && units+=("$f") ;; esac
done
# Exporter-free: the Prometheus half of the reporter needs prometheus-cpp, not LibTorch's CUDA side.
failed=0
printf '%s\n' "${units[@]}" | grep -v 'ReporterExport.cpp' | \
  xargs -P "$(nproc)" -I{} sh -c 'g++ "$@" "'"$src"'/{}" 2>"'"$work"'/$(basename {}).log" && echo "  ok   {}" || { echo "  FAIL {}"; cat "'"$work"'/$(basename {}).log" | head -40; exit 1; }' _ "${flags[@]}" \
  || failed=1
echo "check.sh: ${#units[@]} translation units against torch $torch_cuda (CUDA) in $(( $(date +%s) - start )) s"
exit "$failed"
