#pragma once

#include <chrono>

namespace attnscope {

// Wall-clock seconds since the Unix epoch, for times that leave the process (summaries, traces,
// heartbeats, the ceilings' cache). Durations use the monotonic clocks of collectors/Clock.h.
inline double unixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace attnscope
