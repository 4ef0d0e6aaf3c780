#include "attnscope/exporters/MetricsSnapshot.h"

#include <utility>

namespace attnscope {

size_t seriesCount(const std::vector<prometheus::MetricFamily>& families) {
  size_t n = 0;
  for (const prometheus::MetricFamily& f : families) {
    for (const prometheus::ClientMetric& m : f.metric) {
      if (f.type == prometheus::MetricType::Histogram) {
        n += m.histogram.bucket.size() + 2;
      } else if (f.type == prometheus::MetricType::Summary) {
        n += m.summary.quantile.size() + 2;
      } else {
        n += 1;
      }
    }
  }
  return n;
}

void MetricsSnapshot::publish(std::vector<prometheus::MetricFamily> families) {
  series_.store(seriesCount(families), std::memory_order_relaxed);
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
