#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

namespace attnscope {

// Figures published by the reporter thread, handed to scrapes and pushes as they are.
class MetricsSnapshot : public prometheus::Collectable {
 public:
  void publish(std::vector<prometheus::MetricFamily> families);
  std::vector<prometheus::MetricFamily> Collect() const override;
  uint64_t scrapes() const { return scrapes_.load(std::memory_order_relaxed); }

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<const std::vector<prometheus::MetricFamily>> families_;
  mutable std::atomic<uint64_t> scrapes_{0};
};

}  // namespace attnscope
