#include "attnscope/core/Histogram.h"

#include <algorithm>
#include <cmath>

namespace attnscope {

int LogHistogram::bucketIndex(double value) {
  if (!(value > 0.0)) return 0;  // zero, negative and NaN go to the first bucket
  const double scaled = (std::log2(value) - kMinExp) * kSubBuckets;
  if (scaled <= 0.0) return 0;
  if (scaled >= kNumBuckets) return kNumBuckets - 1;
  int index = static_cast<int>(scaled);
  // log2 rounds: a value within an ulp or two of an edge can land one bucket off. Settle it
  // against the edges that bucketLower() reports.
  if (index > 0 && value < bucketLower(index)) {
    --index;
  } else if (index + 1 < kNumBuckets && value >= bucketLower(index + 1)) {
    ++index;
  }
  return index;
}

double LogHistogram::bucketLower(int index) {
  return std::exp2(static_cast<double>(index) / kSubBuckets + kMinExp);
}

void LogHistogram::add(double value) {
  ++buckets_[bucketIndex(value)];
  ++count_;
  sum_ += value;
  min_ = std::min(min_, value);
  max_ = std::max(max_, value);
}

void LogHistogram::merge(const LogHistogram& other) {
  for (int i = 0; i < kNumBuckets; ++i) buckets_[i] += other.buckets_[i];
  count_ += other.count_;
  sum_ += other.sum_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
}

LogHistogram LogHistogram::fromBuckets(const double* counts, double sum) {
  LogHistogram h;
  int first = -1, last = -1;
  for (int i = 0; i < kNumBuckets; ++i) {
    const auto n = static_cast<uint64_t>(counts[i] + 0.5);
    if (n == 0) continue;
    h.buckets_[i] = n;
    h.count_ += n;
    if (first < 0) first = i;
    last = i;
  }
  if (h.count_ > 0) {
    h.sum_ = sum;
    h.min_ = bucketLower(first);
    h.max_ = bucketUpper(last);
  }
  return h;
}

void LogHistogram::clear() { *this = LogHistogram(); }

double LogHistogram::quantile(double q) const {
  if (count_ == 0) return 0.0;
  q = std::clamp(q, 0.0, 1.0);
  // Rank of the wanted value, 1-based, as in the "nearest rank" definition.
  const uint64_t rank = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * count_)));
  uint64_t seen = 0;
  for (int i = 0; i < kNumBuckets; ++i) {
    seen += buckets_[i];
    if (seen >= rank) {
      const double mid = std::sqrt(bucketLower(i) * bucketUpper(i));
      return std::clamp(mid, min_, max_);
    }
  }
  return max_;
}

}  // namespace attnscope
