#pragma once

#include <time.h>

#include <cstdint>

namespace attnscope {

// Monotonic nanoseconds; one vDSO call (~20 ns), no system call, safe on any thread.
inline int64_t nowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

}  // namespace attnscope
