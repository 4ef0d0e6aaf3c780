#pragma once

#include <time.h>

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define ATTNSCOPE_HAS_TSC 1
#else
#define ATTNSCOPE_HAS_TSC 0
#endif

namespace attnscope {

// Monotonic nanoseconds; one vDSO call (~28 ns on the build machines), no system call.
inline int64_t nowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// The per-op clock: the time-stamp counter where the CPU has an invariant one (~11 ns a read on
// the build machines, against ~28 ns for clock_gettime), nanoseconds elsewhere. Durations are
// taken on one thread and converted with TickClock::nsPerTick().
inline uint64_t ticks() {
#if ATTNSCOPE_HAS_TSC
  return __rdtsc();
#else
  return static_cast<uint64_t>(nowNs());
#endif
}

class TickClock {
 public:
  // Measures the tick rate against CLOCK_MONOTONIC once per process (~10 ms, at start()).
  static void calibrate();
  static double nsPerTick() { return nsPerTick_; }
  static int64_t toNs(uint64_t tickCount) {
    return static_cast<int64_t>(static_cast<double>(tickCount) * nsPerTick_);
  }

 private:
  static double nsPerTick_;
};

}  // namespace attnscope
