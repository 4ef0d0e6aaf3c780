#pragma once

#include <cstdint>

namespace attnscope {

// Accelerator memory attribution: a c10::MemoryReportingInfoBase that the CUDA caching allocator
// reports every allocation and free to, through the thread's PROFILER_STATE debug-info slot.
//
// That slot is torch.profiler's: it refuses to start while the slot is occupied and static_casts
// what it finds there. So the reporter occupies it only for the length of an attention call or a
// tracked autograd node (enter/leave), presents itself as a disabled profiler state, and steps
// aside when torch.profiler already holds the slot (torch.profiler then gets the reports, as it
// expects; attnscope's device figures for that region read zero). Its memoryProfilingEnabled()
// is false, so c10's CPU allocator never reports through it (host memory comes from
// CpuAllocatorTracker).
class DeviceMemoryReporter {
 public:
  // Occupies the slot on this thread unless it is taken; returns whether it did.
  static bool enter();
  // Frees the slot if enter() returned true.
  static void leave(bool entered);
  // True while the reporter occupies the slot on this thread.
  static bool activeOnCurrentThread();
  // Accelerator reports received since process start.
  static uint64_t reportsSeen();
};

}  // namespace attnscope
