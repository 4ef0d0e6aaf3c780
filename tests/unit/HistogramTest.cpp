// Unit tests of attnscope::LogHistogram: bucket geometry, clamping, moments, the documented
// quantile error bound and merging.

#include "attnscope/core/Histogram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace attnscope {
namespace {

using H = LogHistogram;

// Exact "nearest rank" quantile of data: the ceil(q * n)-th smallest value (1-based, at least 1).
double nearestRank(std::vector<double> data, double q) {
  std::sort(data.begin(), data.end());
  const auto n = static_cast<uint64_t>(data.size());
  const uint64_t rank = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * n)));
  return data[rank - 1];
}

H histogramOf(const std::vector<double>& data) {
  H h;
  for (double v : data) h.add(v);
  return h;
}

void expectQuantilesWithinBound(const std::vector<double>& data, const std::string& what) {
  const H h = histogramOf(data);
  for (double q : {0.5, 0.9, 0.99}) {
    const double exact = nearestRank(data, q);
    const double got = h.quantile(q);
    EXPECT_LE(std::abs(got - exact) / exact, H::kRelativeError)
        << what << ": q=" << q << " exact=" << exact << " got=" << got;
  }
}

// ---------------------------------------------------------------------------------------------
// Bucket geometry

TEST(HistogramBucketTest, GeometryConstants) {
  EXPECT_EQ(H::kNumBuckets, (H::kMaxExp - H::kMinExp) * H::kSubBuckets);
  EXPECT_DOUBLE_EQ(H::bucketLower(0), std::exp2(H::kMinExp));
  EXPECT_DOUBLE_EQ(H::bucketUpper(H::kNumBuckets - 1), std::exp2(H::kMaxExp));
  // Every bucket has the same relative width 2^(1/kSubBuckets).
  for (int i = 0; i < H::kNumBuckets; ++i) {
    EXPECT_NEAR(H::bucketUpper(i) / H::bucketLower(i), std::exp2(1.0 / H::kSubBuckets), 1e-12) << i;
  }
}

TEST(HistogramBucketTest, RelativeErrorIsHalfABucketInLogSpace) {
  // The constant must be an upper bound of sqrt(2^(1/8)) - 1, the largest relative distance
  // from a bucket's edge to its geometric middle.
  const double exact = std::exp2(0.5 / H::kSubBuckets) - 1.0;
  EXPECT_GE(H::kRelativeError, exact);
  EXPECT_LT(H::kRelativeError, exact * 1.001);
}

TEST(HistogramBucketTest, ValueLandsInBucketThatContainsIt) {
  std::mt19937_64 rng(12345);
  // Log-uniform over the whole covered range.
  std::uniform_real_distribution<double> exponent(H::kMinExp, H::kMaxExp);
  for (int n = 0; n < 100000; ++n) {
    const double v = std::exp2(exponent(rng));
    const int i = H::bucketIndex(v);
    ASSERT_GE(i, 0) << v;
    ASSERT_LT(i, H::kNumBuckets) << v;
    ASSERT_LE(H::bucketLower(i), v) << "v=" << v << " bucket " << i;
    ASSERT_LT(v, H::bucketUpper(i)) << "v=" << v << " bucket " << i;
  }
}

TEST(HistogramBucketTest, BucketEdgesLandInTheirOwnBucket) {
  for (int i = 0; i < H::kNumBuckets; ++i) {
    const double lower = H::bucketLower(i);
    EXPECT_EQ(H::bucketIndex(lower), i) << "lower edge " << lower;
    const double justBelowUpper = std::nextafter(H::bucketUpper(i), 0.0);
    EXPECT_EQ(H::bucketIndex(justBelowUpper), i) << "just below upper edge " << justBelowUpper;
  }
}

TEST(HistogramBucketTest, PowersOfTwoStartABucket) {
  for (int e = H::kMinExp; e < H::kMaxExp; ++e) {
    const int i = H::bucketIndex(std::exp2(e));
    EXPECT_EQ(i, (e - H::kMinExp) * H::kSubBuckets) << "2^" << e;
    EXPECT_EQ(H::bucketLower(i), std::exp2(e)) << "2^" << e;
  }
}

TEST(HistogramBucketTest, UnderflowClampsToFirstBucket) {
  EXPECT_EQ(H::bucketIndex(0.0), 0);
  EXPECT_EQ(H::bucketIndex(-1.0), 0);
  EXPECT_EQ(H::bucketIndex(std::numeric_limits<double>::quiet_NaN()), 0);
  EXPECT_EQ(H::bucketIndex(std::numeric_limits<double>::denorm_min()), 0);
  EXPECT_EQ(H::bucketIndex(1e-12), 0);
  EXPECT_EQ(H::bucketIndex(std::exp2(H::kMinExp) * 0.999), 0);
}

TEST(HistogramBucketTest, OverflowClampsToLastBucket) {
  const int last = H::kNumBuckets - 1;
  EXPECT_EQ(H::bucketIndex(std::exp2(H::kMaxExp)), last);
  EXPECT_EQ(H::bucketIndex(1e6), last);
  EXPECT_EQ(H::bucketIndex(std::numeric_limits<double>::max()), last);
  EXPECT_EQ(H::bucketIndex(std::numeric_limits<double>::infinity()), last);
  EXPECT_EQ(H::bucketIndex(std::nextafter(std::exp2(H::kMaxExp), 0.0)), last);
}

TEST(HistogramBucketTest, AddCountsOutOfRangeValuesInEdgeBuckets) {
  H h;
  h.add(1e-12);
  h.add(0.0);
  h.add(1e5);
  EXPECT_EQ(h.buckets()[0], 2u);
  EXPECT_EQ(h.buckets()[H::kNumBuckets - 1], 1u);
  EXPECT_EQ(h.count(), 3u);
  EXPECT_EQ(h.min(), 0.0);
  EXPECT_EQ(h.max(), 1e5);
  // Out-of-range values read back as the middle of the edge bucket they were clamped into.
  const int last = H::kNumBuckets - 1;
  EXPECT_DOUBLE_EQ(h.quantile(0.0), std::sqrt(H::bucketLower(0) * H::bucketUpper(0)));
  EXPECT_DOUBLE_EQ(h.quantile(1.0), std::sqrt(H::bucketLower(last) * H::bucketUpper(last)));
}

// ---------------------------------------------------------------------------------------------
// count / sum / min / max / mean

TEST(HistogramMomentsTest, EmptyHistogram) {
  const H h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.sum(), 0.0);
  EXPECT_EQ(h.min(), 0.0);
  EXPECT_EQ(h.max(), 0.0);
  EXPECT_EQ(h.mean(), 0.0);
  for (double q : {0.0, 0.5, 0.9, 0.99, 1.0}) EXPECT_EQ(h.quantile(q), 0.0) << q;
  for (uint64_t b : h.buckets()) ASSERT_EQ(b, 0u);
}

TEST(HistogramMomentsTest, CountSumMinMaxMean) {
  H h;
  for (double v : {0.004, 0.001, 0.002, 0.003}) h.add(v);
  EXPECT_EQ(h.count(), 4u);
  EXPECT_DOUBLE_EQ(h.sum(), 0.010);
  EXPECT_EQ(h.min(), 0.001);
  EXPECT_EQ(h.max(), 0.004);
  EXPECT_DOUBLE_EQ(h.mean(), 0.0025);
  uint64_t total = 0;
  for (uint64_t b : h.buckets()) total += b;
  EXPECT_EQ(total, 4u);
  EXPECT_EQ(h.buckets()[H::bucketIndex(0.003)], 1u);
}

TEST(HistogramMomentsTest, SingleValueQuantilesAreExact) {
  H h;
  h.add(0.0123);
  for (double q : {0.0, 0.5, 0.99, 1.0}) EXPECT_EQ(h.quantile(q), 0.0123) << q;
}

TEST(HistogramMomentsTest, QuantileIsClampedToMinAndMax) {
  // lowest: in the top half of its bucket (the middle is below it); highest: on a lower edge
  // (the middle is above it). Both quantile ends read back exactly.
  const double lowest = std::nextafter(H::bucketUpper(100), 0.0);
  const double highest = H::bucketLower(200);
  H h;
  for (double v : {lowest, 0.5 * (lowest + highest), highest}) h.add(v);
  EXPECT_LT(std::sqrt(H::bucketLower(100) * H::bucketUpper(100)), lowest);
  EXPECT_GT(std::sqrt(H::bucketLower(200) * H::bucketUpper(200)), highest);
  EXPECT_EQ(h.quantile(0.0), lowest);
  EXPECT_EQ(h.quantile(1.0), highest);
  // q outside [0, 1] is clamped.
  EXPECT_EQ(h.quantile(-1.0), lowest);
  EXPECT_EQ(h.quantile(2.0), highest);
}

TEST(HistogramMomentsTest, ClearResets) {
  H h;
  h.add(1.0);
  h.add(2.0);
  h.clear();
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.sum(), 0.0);
  EXPECT_EQ(h.min(), 0.0);
  EXPECT_EQ(h.max(), 0.0);
  EXPECT_EQ(h.quantile(0.5), 0.0);
  for (uint64_t b : h.buckets()) ASSERT_EQ(b, 0u);
  h.add(0.5);
  EXPECT_EQ(h.min(), 0.5);
  EXPECT_EQ(h.max(), 0.5);
}

// ---------------------------------------------------------------------------------------------
// Quantile error bound

TEST(HistogramQuantileTest, UniformWithinRelativeError) {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> dist(1e-6, 1e-2);
  std::vector<double> data(20000);
  for (double& v : data) v = dist(rng);
  expectQuantilesWithinBound(data, "uniform");
}

TEST(HistogramQuantileTest, LogNormalWithinRelativeError) {
  std::mt19937_64 rng(2);
  std::lognormal_distribution<double> dist(std::log(1e-4), 1.5);
  std::vector<double> data(20000);
  for (double& v : data) v = dist(rng);
  expectQuantilesWithinBound(data, "log-normal");
}

TEST(HistogramQuantileTest, BimodalWithinRelativeError) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> fast(2e-4, 2e-5);
  std::normal_distribution<double> slow(5e-2, 5e-3);
  std::bernoulli_distribution isSlow(0.15);
  std::vector<double> data(20000);
  for (double& v : data) v = std::max(1e-7, isSlow(rng) ? slow(rng) : fast(rng));
  expectQuantilesWithinBound(data, "bimodal");
}

TEST(HistogramQuantileTest, ManyQuantilesOfLogUniformWithinRelativeError) {
  std::mt19937_64 rng(4);
  std::uniform_real_distribution<double> exponent(-20.0, 5.0);
  std::vector<double> data(10007);
  for (double& v : data) v = std::exp2(exponent(rng));
  const H h = histogramOf(data);
  for (int i = 1; i <= 100; ++i) {
    const double q = i / 100.0;
    const double exact = nearestRank(data, q);
    EXPECT_LE(std::abs(h.quantile(q) - exact) / exact, H::kRelativeError) << "q=" << q;
  }
}

TEST(HistogramQuantileTest, ValuesOnBucketLowerEdgesWithinRelativeError) {
  // A value on a bucket's lower edge is the farthest from the bucket's geometric middle.
  std::vector<double> data;
  for (int i = 0; i < 600; ++i) data.push_back(0.5);  // 2^-1: a bucket edge
  for (int i = 0; i < 400; ++i) data.push_back(2.0);
  const H h = histogramOf(data);
  const double got = h.quantile(0.5);
  EXPECT_GT(got, 0.5);  // the bucket middle, not clamped
  EXPECT_LE(std::abs(got - 0.5) / 0.5, H::kRelativeError) << "got " << got;
}

TEST(HistogramQuantileTest, QuantilesAreMonotonic) {
  std::mt19937_64 rng(5);
  std::lognormal_distribution<double> dist(std::log(1e-3), 1.0);
  H h;
  for (int i = 0; i < 10000; ++i) h.add(dist(rng));
  double previous = 0.0;
  for (int i = 0; i <= 1000; ++i) {
    const double v = h.quantile(i / 1000.0);
    EXPECT_GE(v, previous) << "q=" << i / 1000.0;
    EXPECT_GE(v, h.min());
    EXPECT_LE(v, h.max());
    previous = v;
  }
}

// ---------------------------------------------------------------------------------------------
// Merge

// Multiples of 2^-30 s (~1 ns) below 2^-3 s: sums of 10^4 of them are exact in a double, so the
// merged sum must equal the sum of the concatenation exactly, whatever the order.
std::vector<double> dyadicSample(uint64_t seed, int n, int64_t maxUnits) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> units(1, maxUnits);
  std::vector<double> data(n);
  for (double& v : data) v = std::ldexp(static_cast<double>(units(rng)), -30);
  return data;
}

void expectSameHistogram(const H& a, const H& b) {
  EXPECT_EQ(a.buckets(), b.buckets());
  EXPECT_EQ(a.count(), b.count());
  EXPECT_EQ(a.sum(), b.sum());
  EXPECT_EQ(a.min(), b.min());
  EXPECT_EQ(a.max(), b.max());
  for (double q : {0.5, 0.9, 0.99}) EXPECT_EQ(a.quantile(q), b.quantile(q)) << q;
}

TEST(HistogramMergeTest, MergeEqualsHistogramOfConcatenation) {
  const std::vector<double> a = dyadicSample(10, 10000, int64_t{1} << 20);
  const std::vector<double> b = dyadicSample(11, 12000, int64_t{1} << 26);
  std::vector<double> all = a;
  all.insert(all.end(), b.begin(), b.end());

  H merged = histogramOf(a);
  merged.merge(histogramOf(b));
  const H whole = histogramOf(all);
  expectSameHistogram(merged, whole);
  EXPECT_EQ(merged.count(), 22000u);
}

TEST(HistogramMergeTest, MergeIsCommutative) {
  const std::vector<double> a = dyadicSample(20, 5000, int64_t{1} << 24);
  const std::vector<double> b = dyadicSample(21, 3000, int64_t{1} << 16);
  H ab = histogramOf(a);
  ab.merge(histogramOf(b));
  H ba = histogramOf(b);
  ba.merge(histogramOf(a));
  expectSameHistogram(ab, ba);
}

TEST(HistogramMergeTest, MergeIntoEmptyCopies) {
  const H source = histogramOf({0.25, 0.5, 3.0});
  H target;
  target.merge(source);
  expectSameHistogram(target, source);
  EXPECT_EQ(target.min(), 0.25);
  EXPECT_EQ(target.max(), 3.0);
}

TEST(HistogramMergeTest, MergeOfEmptyChangesNothing) {
  H target = histogramOf({0.25, 0.5, 3.0});
  const H before = target;
  target.merge(H());
  expectSameHistogram(target, before);
  EXPECT_EQ(target.min(), 0.25);  // the empty histogram's +inf min does not leak
  EXPECT_EQ(target.max(), 3.0);
}

TEST(HistogramMergeTest, MergeOfTwoEmptiesIsEmpty) {
  H h;
  h.merge(H());
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.min(), 0.0);
  EXPECT_EQ(h.max(), 0.0);
  EXPECT_EQ(h.quantile(0.5), 0.0);
}

}  // namespace
}  // namespace attnscope
