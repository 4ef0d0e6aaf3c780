#pragma once

#include <cstdint>

namespace attnscope {

// Bytes allocated and the peak of live bytes seen by one op, autograd node or attention call,
// fed from the allocators' reports on the current thread. The first report
// fixes the device the account follows (reports of other devices are ignored) and its base:
// the live bytes just before that first allocation; except that the first accelerator report
// replaces a host account (on a GPU the call's tensors live on the device; a host scalar
// allocated first must not hide them).
struct MemoryAccount {
  static constexpr int8_t kNoDevice = -1;
  static constexpr int8_t kHost = 0;
  // Accelerator reports are tagged 1 + the device index (cuda:0 is 1).
  static int8_t acceleratorTag(int deviceIndex) {
    return static_cast<int8_t>(1 + (deviceIndex < 0 ? 0 : (deviceIndex > 126 ? 126 : deviceIndex)));
  }

  int8_t device = kNoDevice;  // 0: host, 1 + index: accelerator
  int64_t base = 0;           // live bytes before the first allocation seen
  int64_t bytes = 0;          // bytes allocated (frees not subtracted)
  int64_t peakLive = 0;       // highest live bytes seen (absolute)

  void reset() { *this = MemoryAccount(); }
  bool seen() const { return device != kNoDevice; }

  // alloc_size is negative for a free; totalAllocated is the allocator's live bytes after it.
  void report(int64_t allocSize, int64_t totalAllocated, int8_t dev) {
    if (device == kNoDevice || (device == kHost && dev > kHost)) {
      bytes = 0;
      device = dev;
      base = totalAllocated - allocSize;
      peakLive = base;
    }
    if (dev != device) return;
    if (allocSize > 0) bytes += allocSize;
    if (totalAllocated > peakLive) peakLive = totalAllocated;
  }

  // Peak live bytes above `reference` (the base of the enclosing call); 0 when nothing was seen.
  int64_t peakAbove(int64_t reference) const {
    return seen() && peakLive > reference ? peakLive - reference : 0;
  }
};

// The accounts the allocator reports on this thread go to (null: none). The observer points them
// at the current op (or autograd node) and attention call; CpuAllocatorTracker and
// DeviceMemoryReporter feed them.
struct MemoryTargets {
  MemoryAccount* op = nullptr;
  MemoryAccount* call = nullptr;

  bool any() const { return op != nullptr || call != nullptr; }
  void report(int64_t allocSize, int64_t totalAllocated, int8_t dev) {
    if (op != nullptr) op->report(allocSize, totalAllocated, dev);
    if (call != nullptr) call->report(allocSize, totalAllocated, dev);
  }

  // The calling thread's targets: 16 bytes of initial-exec TLS (a single %fs-relative access;
  // small enough for the static TLS surplus glibc keeps for dlopen'ed libraries, such as the
  // Python module).
  static MemoryTargets& current() {
    static __thread MemoryTargets targets __attribute__((tls_model("initial-exec")));
    return targets;
  }
};

}  // namespace attnscope
