#pragma once

#include "attnscope/collectors/GpuTimer.h"
#include "attnscope/core/GpuStatus.h"

namespace attnscope {
namespace detail {

// What the GPU collectors need from LibTorch's CUDA side (c10_cuda), kept in one translation
// unit that is compiled with CUDA headers only when LibTorch has CUDA (ATTNSCOPE_TORCH_CUDA).

// The calling thread's current CUDA stream and device, or device -1 while the device has no
// CUDA context yet (attnscope must never be the one to create it). Null without CUDA LibTorch.
CurrentStreamFn torchCurrentStreamFn();

// Fills device, allocated/reserved bytes and their peaks from LibTorch's caching allocator for
// the device this process uses; false without CUDA LibTorch or before CUDA is initialised.
bool torchAllocatorStats(int device, GpuStatus* status);

}  // namespace detail
}  // namespace attnscope
