#include "attnscope/collectors/GpuEventPool.h"

namespace attnscope {

GpuEventPool::~GpuEventPool() {
  for (const Idle& i : idle_) api_.destroy(i.event, i.device);
}

GpuEventApi::Event GpuEventPool::acquire(int device) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Most processes use one device: the newest idle event is almost always the right one.
    for (size_t i = idle_.size(); i-- > 0;) {
      if (idle_[i].device != device) continue;
      GpuEventApi::Event e = idle_[i].event;
      idle_[i] = idle_.back();
      idle_.pop_back();
      return e;
    }
    if (created_ >= capacity_) return nullptr;
    ++created_;  // reserve the slot; creation happens outside the lock
  }
  GpuEventApi::Event e = api_.create(device);
  if (e == nullptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    --created_;
  }
  return e;
}

void GpuEventPool::release(GpuEventApi::Event event, int device) {
  if (event == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  idle_.push_back(Idle{event, device});
}

size_t GpuEventPool::created() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return created_;
}

size_t GpuEventPool::idle() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return idle_.size();
}

}  // namespace attnscope
