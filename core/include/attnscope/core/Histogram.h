#pragma once

#include <array>
#include <cstdint>
#include <limits>

#include "attnscope/core/Export.h"

namespace attnscope {

// A fixed log-scale histogram of positive values (seconds). Bucket i covers
// [2^(i/kSubBuckets + kMinExp), 2^((i+1)/kSubBuckets + kMinExp)), so every bucket has the same
// relative width (a factor of 2^(1/8) ~ 1.09) and a quantile read back as the geometric middle of
// its bucket is within kRelativeError of a value of the right rank. Two histograms merge by adding
// their vectors, so cross-rank aggregation is one all-reduce of a fixed-size vector.
// Values below 2^kMinExp (7.5 ns) land in the first bucket, above 2^kMaxExp (8192 s) in the last.
class ATTNSCOPE_API LogHistogram {
 public:
  static constexpr int kSubBuckets = 8;
  static constexpr int kMinExp = -27;
  static constexpr int kMaxExp = 13;
  static constexpr int kNumBuckets = (kMaxExp - kMinExp) * kSubBuckets;
  // sqrt(2^(1/8)) - 1 = 0.0442737..., rounded up: the largest relative distance from a bucket's
  // edge to its geometric middle.
  static constexpr double kRelativeError = 0.0442738;

  void add(double value);
  void merge(const LogHistogram& other);
  void clear();

  // Value at quantile q in [0, 1], clamped to [min, max]; 0 when empty.
  double quantile(double q) const;

  uint64_t count() const { return count_; }
  double sum() const { return sum_; }
  double min() const { return count_ ? min_ : 0.0; }
  double max() const { return count_ ? max_ : 0.0; }
  double mean() const { return count_ ? sum_ / static_cast<double>(count_) : 0.0; }
  const std::array<uint64_t, kNumBuckets>& buckets() const { return buckets_; }

  // Rebuilds a histogram from bucket counts and a sum (as produced by a cross-rank all-reduce);
  // min and max become the edges of the outermost non-empty buckets.
  static LogHistogram fromBuckets(const double* counts, double sum);

  static int bucketIndex(double value);
  static double bucketLower(int index);
  static double bucketUpper(int index) { return bucketLower(index + 1); }

 private:
  std::array<uint64_t, kNumBuckets> buckets_{};
  uint64_t count_ = 0;
  double sum_ = 0.0;
  double min_ = std::numeric_limits<double>::infinity();
  double max_ = 0.0;
};

}  // namespace attnscope
