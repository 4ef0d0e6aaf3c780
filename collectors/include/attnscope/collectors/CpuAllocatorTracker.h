#pragma once

#include <cstdint>

namespace attnscope {

// Host memory attribution. Wraps LibTorch's CPU allocator (c10::SetCPUAllocator at the highest
// priority) and, while the calling thread has MemoryTargets (inside an attention call or a
// tracked autograd node), remembers each block it hands out so that its free is seen wherever
// it happens. Outside those regions an allocation costs one virtual call and a thread-local
// read more than before; nothing is remembered.
//
// Why not c10's allocator reports in the PROFILER_STATE debug-info slot: that slot belongs to
// torch.profiler, which refuses to start while anything occupies it and static_casts whatever it
// finds there; and c10's CPU allocator keeps a size table only while a reporter is enabled, so
// toggling one per region makes it warn about and leak the blocks it did not see. The wrapper
// has neither problem and works while torch.profiler runs.
class CpuAllocatorTracker {
 public:
  // Installs the wrapper once per process (idempotent) and enables it.
  static void install();
  static void setEnabled(bool enabled);
  // Allocations seen inside regions since process start.
  static uint64_t allocationsSeen();
};

}  // namespace attnscope
