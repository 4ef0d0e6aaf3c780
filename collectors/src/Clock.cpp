#include "attnscope/collectors/Clock.h"

#include <mutex>
#include <thread>

namespace attnscope {

double TickClock::nsPerTick_ = 1.0;

void TickClock::calibrate() {
#if ATTNSCOPE_HAS_TSC
  static std::once_flag once;
  std::call_once(once, [] {
    const int64_t ns0 = nowNs();
    const uint64_t t0 = ticks();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const int64_t ns1 = nowNs();
    const uint64_t t1 = ticks();
    if (t1 > t0 && ns1 > ns0)
      nsPerTick_ = static_cast<double>(ns1 - ns0) / static_cast<double>(t1 - t0);
  });
#endif
}

}  // namespace attnscope
