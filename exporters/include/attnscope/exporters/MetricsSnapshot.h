#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

namespace attnscope {

// The series Prometheus stores for `families`: one per value, a histogram's buckets (+Inf
// included), _sum and _count, a summary's quantiles, _sum and _count.
size_t seriesCount(const std::vector<prometheus::MetricFamily>& families);

// Figures published by the reporter thread, handed to scrapes and pushes as they are.
class MetricsSnapshot : public prometheus::Collectable {
 public:
  void publish(std::vector<prometheus::MetricFamily> families);
  std::vector<prometheus::MetricFamily> Collect() const override;
  uint64_t scrapes() const { return scrapes_.load(std::memory_order_relaxed); }
  // seriesCount() of what was published last.
  size_t series() const { return series_.load(std::memory_order_relaxed); }

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<const std::vector<prometheus::MetricFamily>> families_;
  mutable std::atomic<uint64_t> scrapes_{0};
  std::atomic<size_t> series_{0};
};

}  // namespace attnscope
