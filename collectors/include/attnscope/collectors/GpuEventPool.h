#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "attnscope/collectors/GpuEventApi.h"

namespace attnscope {

// Reused CUDA events, per device. Creating an event costs a driver call, so events come back
// here once the reporter has read them; the pool only grows while more events are in flight
// than ever before, up to `capacity` (then acquire() returns null and the caller skips the
// timing). Thread-safe: acquire on training/autograd threads, release on the reporter thread;
// the lock is held for a vector push or pop.
class GpuEventPool {
 public:
  GpuEventPool(GpuEventApi& api, size_t capacity) : api_(api), capacity_(capacity) {}
  ~GpuEventPool();
  GpuEventPool(const GpuEventPool&) = delete;
  GpuEventPool& operator=(const GpuEventPool&) = delete;

  // An idle event of `device`, else a new one; null when `capacity` events exist and none is
  // idle, or when creating one failed.
  GpuEventApi::Event acquire(int device);
  void release(GpuEventApi::Event event, int device);

  size_t created() const;  // events that exist (idle or in flight)
  size_t idle() const;

 private:
  struct Idle {
    GpuEventApi::Event event;
    int device;
  };
  GpuEventApi& api_;
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::vector<Idle> idle_;
  size_t created_ = 0;
};

}  // namespace attnscope
