#pragma once

#include <cstdint>

#include "attnscope/collectors/MemoryAccount.h"

namespace attnscope {

// Receives every allocation and free the c10 allocators report (CPU, and CUDA through the
// caching allocator) on threads where it is installed, and feeds the thread's MemoryTargets.
//
// It is installed as the thread's PROFILER_STATE debug info, the slot c10 reports allocations to.
// torch.profiler uses the same slot and static_casts whatever it finds there to its own state,
// so attnscope presents itself as a disabled profiler state: a torch.profiler started later
// pushes its own state on top (it then receives the reports until it stops, and attnscope's
// memory figures for those calls read zero), and attnscope never installs itself above a running
// torch.profiler (it retries at the next attention call on that thread).
// Autograd and at::launch threads inherit the installation through ThreadLocalState.
class MemoryReporter {
 public:
  // Process-wide switch; reports are ignored while disabled. Installation is permanent per
  // thread, so stop() just disables.
  static void setEnabled(bool enabled);
  static bool enabled();

  // Installs the reporter on the calling thread unless it is already there. Returns false when
  // another profiler state holds the slot (torch.profiler running on this thread).
  static bool installOnCurrentThread();
  // True when the allocator's reports on this thread reach attnscope right now.
  static bool activeOnCurrentThread();

  // The calling thread's targets (thread-local).
  static MemoryTargets& targets();

  // Reports received since process start (all threads); a cheap relaxed counter.
  static uint64_t reportsSeen();
};

}  // namespace attnscope
