#include "attnscope/exporters/MetricsSnapshot.h"

#include <utility>

namespace attnscope {

void MetricsSnapshot::publish(std::vector<prometheus::MetricFamily> families) {
  auto next = std::make_shared<const std::vector<prometheus::MetricFamily>>(std::move(families));
  std::lock_guard<std::mutex> lock(mutex_);
  families_ = std::move(next);
}

std::vector<prometheus::MetricFamily> MetricsSnapshot::Collect() const {
  scrapes_.fetch_add(1, std::memory_order_relaxed);
  std::shared_ptr<const std::vector<prometheus::MetricFamily>> current;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    current = families_;
  }
  return current ? *current : std::vector<prometheus::MetricFamily>{};
}

}  // namespace attnscope
