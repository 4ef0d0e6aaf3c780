#include "CudaTorch.h"

#if ATTNSCOPE_TORCH_CUDA
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <array>
#include <atomic>
#endif

namespace attnscope {
namespace detail {

#if ATTNSCOPE_TORCH_CUDA
namespace {

constexpr int kMaxDevices = 64;
// Devices known to have a primary context: once LibTorch created it, it stays.
std::array<std::atomic<bool>, kMaxDevices> gHasContext{};

bool hasContext(int device) {
  if (device < 0 || device >= kMaxDevices) return false;
  if (gHasContext[device].load(std::memory_order_relaxed)) return true;
  if (!at::detail::getCUDAHooks().hasPrimaryContext(static_cast<c10::DeviceIndex>(device)))
    return false;
  gHasContext[device].store(true, std::memory_order_relaxed);
  return true;
}

GpuStream currentStream() {
  const int device = c10::cuda::current_device();
  if (!hasContext(device)) return GpuStream{};
  const c10::cuda::CUDAStream s =
      c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device));
  return GpuStream{static_cast<void*>(s.stream()), device};
}

}  // namespace

CurrentStreamFn torchCurrentStreamFn() { return &currentStream; }

bool torchAllocatorStats(int device, GpuStatus* status) {
  if (!hasContext(device)) return false;
  // StatType::AGGREGATE is index 0 in every LibTorch version (the enum moved namespaces in 2.5).
  const auto stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  status->device = device;
  status->allocatedBytes = stats.allocated_bytes[0].current;
  status->peakAllocatedBytes = stats.allocated_bytes[0].peak;
  status->reservedBytes = stats.reserved_bytes[0].current;
  status->peakReservedBytes = stats.reserved_bytes[0].peak;
  return true;
}

#else

CurrentStreamFn torchCurrentStreamFn() { return nullptr; }
bool torchAllocatorStats(int, GpuStatus*) { return false; }

#endif

}  // namespace detail
}  // namespace attnscope
