// Attribution of a rank's excess, and the flat layout the cross-rank all-reduce sums.
#include "attnscope/core/Attribution.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "attnscope/core/StatsTable.h"
#include "attnscope/core/StragglerDetector.h"
#include "attnscope/core/StragglerEpisodes.h"

namespace attnscope {
namespace {

CallRecord call(int32_t layer, Phase phase, OpKind kind, int64_t ns, int64_t bytes = 0) {
  CallRecord r;
  r.layer = layer;
  r.phase = phase;
  r.ns = ns;
  r.bytes = bytes;
  r.kinds[static_cast<int>(kind)].ns = ns;
  r.kinds[static_cast<int>(kind)].ops = 2;
  r.kinds[static_cast<int>(kind)].bytes = bytes;
  return r;
}

StatsTable table(const std::vector<CallRecord>& records) {
  StatsTable t;
  t.layerId("a");
  t.layerId("b");
  for (const auto& r : records) t.add(r);
  return t;
}

TEST(FlattenTest, SummedVectorsRebuildTheMergedTable) {
  const StatsTable x = table({call(0, Phase::kForward, OpKind::kSoftmax, 1000000, 64),
                              call(1, Phase::kBackward, OpKind::kScoreMatmul, 5000000, 128)});
  const StatsTable y = table({call(0, Phase::kForward, OpKind::kSoftmax, 3000000, 32)});
  std::vector<double> sum = x.flatten();
  const std::vector<double> other = y.flatten();
  ASSERT_EQ(sum.size(), 2 * StatsTable::kCellsPerLayer * StatsTable::kCellDoubles);
  ASSERT_EQ(sum.size(), other.size());
  for (size_t i = 0; i < sum.size(); ++i) sum[i] += other[i];
  const StatsTable merged = StatsTable::fromFlat({"a", "b"}, sum);
  StatsTable expected = x;
  expected.merge(y);
  ASSERT_EQ(merged.layers().size(), 2u);
  for (int l = 0; l < 2; ++l) {
    for (int p = 0; p < kNumPhases; ++p) {
      const PhaseStats* m = merged.layers()[l].phases[p].get();
      const PhaseStats* e = expected.layers()[l].phases[p].get();
      ASSERT_EQ(m == nullptr, e == nullptr) << l << " " << p;
      if (m == nullptr) continue;
      EXPECT_EQ(m->call.seconds.count(), e->call.seconds.count());
      EXPECT_DOUBLE_EQ(m->call.seconds.sum(), e->call.seconds.sum());
      EXPECT_EQ(m->call.seconds.buckets(), e->call.seconds.buckets());
      for (int k = 0; k < kNumOpKinds; ++k) {
        ASSERT_EQ(m->kinds[k] == nullptr, e->kinds[k] == nullptr);
        if (!m->kinds[k]) continue;
        EXPECT_EQ(m->kinds[k]->ops, e->kinds[k]->ops);
        EXPECT_EQ(m->kinds[k]->bytes, e->kinds[k]->bytes);
        EXPECT_EQ(m->kinds[k]->seconds.count(), e->kinds[k]->seconds.count());
      }
    }
  }
}

TEST(FlattenTest, ChecksumFollowsNamesAndOrder) {
  StatsTable ab, ba, ab2;
  ab.layerId("a");
  ab.layerId("b");
  ba.layerId("b");
  ba.layerId("a");
  ab2.layerId("a");
  ab2.layerId("b");
  EXPECT_EQ(ab.layersChecksum(), ab2.layersChecksum());
  EXPECT_NE(ab.layersChecksum(), ba.layersChecksum());
}

// compareCells with the default outlier limits (ATTNSCOPE_CELL_OUTLIER_FACTOR, _MIN_SHARE).
CellComparison compare(const StatsTable& mine, uint64_t mySteps, const StatsTable& others,
                       uint64_t otherSteps) {
  return compareCells(mine, mySteps, others, otherSteps, {1.5, 0.05});
}

TEST(AttributionTest, NamesTheCellWithTheLargestExcess) {
  // This rank: softmax in layer b's backward takes 3 ms per step more than the other ranks,
  // layer a's qkv 1 ms more.
  const StatsTable mine = table({call(0, Phase::kForward, OpKind::kQkvProjection, 2000000),
                                 call(1, Phase::kBackward, OpKind::kSoftmax, 4000000)});
  // The other 3 ranks: sums over 3 sampled steps, 1 ms per step in each cell.
  const StatsTable others = table({call(0, Phase::kForward, OpKind::kQkvProjection, 3000000),
                                   call(1, Phase::kBackward, OpKind::kSoftmax, 3000000)});
  const CellComparison c = compare(mine, 1, others, 3);
  const Attribution& a = c.attribution;
  EXPECT_EQ(a.layer, 1);
  EXPECT_EQ(a.phase, Phase::kBackward);
  EXPECT_EQ(a.kind, OpKind::kSoftmax);
  // Medians come from the histogram (within 4.43% of the value): 3 ms of 4 ms excess, about.
  EXPECT_NEAR(a.share, 3.0 / 4.0, 0.05);
  // Both cells are outliers (2x and 4x); the one with the larger excess is named.
  EXPECT_EQ(c.outlier.layer, 1);
  EXPECT_EQ(c.outlier.kind, OpKind::kSoftmax);
  EXPECT_NEAR(c.outlier.factor, 4.0, 0.4);
  EXPECT_NEAR(c.outlier.share, 3.0 / 4.0, 0.05);  // of the layer's backward time
}

TEST(AttributionTest, CellOutlierOnARankThatIsNotSlowOverall) {
  // Layer a's qkv takes 10 ms per step everywhere; layer b's backward softmax 2 ms here and 1 ms on
  // the others: the rank is 9% slower overall, the cell 2x.
  const StatsTable mine = table({call(0, Phase::kForward, OpKind::kQkvProjection, 10000000),
                                 call(1, Phase::kBackward, OpKind::kSoftmax, 2000000)});
  const StatsTable others = table({call(0, Phase::kForward, OpKind::kQkvProjection, 30000000),
                                   call(1, Phase::kBackward, OpKind::kSoftmax, 3000000)});
  const CellComparison c = compare(mine, 1, others, 3);
  EXPECT_EQ(c.outlier.layer, 1);
  EXPECT_EQ(c.outlier.phase, Phase::kBackward);
  EXPECT_EQ(c.outlier.kind, OpKind::kSoftmax);
  EXPECT_NEAR(c.outlier.factor, 2.0, 0.2);
  EXPECT_NEAR(c.outlier.share, 1.0 / 2.0, 0.05);  // of layer b's backward time
  // Named last window, a smaller outlier stays named while it is one (no taking turns).
  const StatsTable twoSlow = table({call(0, Phase::kForward, OpKind::kQkvProjection, 20000000),
                                    call(1, Phase::kBackward, OpKind::kSoftmax, 2000000)});
  EXPECT_EQ(compare(twoSlow, 1, others, 3).outlier.layer, 0);  // qkv: 10 ms excess
  const CellOutlierCell softmax{1, Phase::kBackward, OpKind::kSoftmax, 2, 0.5};
  EXPECT_EQ(compareCells(twoSlow, 1, others, 3, {1.5, 0.05}, softmax).outlier.layer, 1);
  // Above either limit it is not one.
  EXPECT_EQ(compareCells(mine, 1, others, 3, {2.5, 0.02}).outlier.layer, -1);
  EXPECT_EQ(compareCells(mine, 1, others, 3, {1.5, 0.6}).outlier.layer, -1);
}

// A cell the detector holds needs only the exit limits: half the factor's excess, half the share,
// one standard error. Only the held cell: another at the same factor needs the full limits.
TEST(AttributionTest, AHeldCellStaysAnOutlierAtTheExitLimits) {
  const CellOutlierLimits limits{1.3, 0.02, 3};
  EXPECT_DOUBLE_EQ(limits.exit().factor, 1.15);
  EXPECT_DOUBLE_EQ(limits.exit().minShare, 0.01);
  EXPECT_DOUBLE_EQ(limits.exit().sigmas, 1.0);
  EXPECT_DOUBLE_EQ(CellOutlierLimits({1.3, 0.02, 0.5}).exit().sigmas, 0.5);
  // Layer a's softmax and layer b's qkv both 1.22x the others' (one call each; no spread).
  const StatsTable mine = table({call(0, Phase::kForward, OpKind::kSoftmax, 1220000),
                                 call(1, Phase::kForward, OpKind::kQkvProjection, 1220000)});
  const StatsTable others = table({call(0, Phase::kForward, OpKind::kSoftmax, 3000000),
                                   call(1, Phase::kForward, OpKind::kQkvProjection, 3000000)});
  const CellOutlierCell softmax{0, Phase::kForward, OpKind::kSoftmax};
  EXPECT_EQ(compareCells(mine, 1, others, 3, limits).outlier.layer, -1);
  EXPECT_EQ(compareCells(mine, 1, others, 3, limits, softmax).outlier.layer, -1);  // named only
  const CellComparison held = compareCells(mine, 1, others, 3, limits, softmax, true);
  EXPECT_EQ(held.outlier.layer, 0);
  EXPECT_EQ(held.outlier.kind, OpKind::kSoftmax);
  EXPECT_NEAR(held.outlier.factor, 1.22, 1.22 * 2 * LogHistogram::kRelativeError);
  // Under the exit factor it lets go.
  const StatsTable near = table({call(0, Phase::kForward, OpKind::kSoftmax, 1100000)});
  EXPECT_EQ(compareCells(near, 1, others, 3, limits, softmax, true).outlier.layer, -1);
}

TEST(AttributionTest, OneSlowCallDoesNotOutweighEveryCallBeingSlow) {
  // Layer a: 10 calls of 1 ms, one of them hit by a 30 ms preemption. Layer b: every call 1.5 ms.
  StatsTable mine;
  mine.layerId("a");
  mine.layerId("b");
  for (int i = 0; i < 10; ++i) {
    mine.add(call(0, Phase::kForward, OpKind::kSoftmax, i == 0 ? 30000000 : 1000000));
    mine.add(call(1, Phase::kForward, OpKind::kSoftmax, 1500000));
  }
  StatsTable others;  // the typical rank: 1 ms everywhere, 30 calls per layer over 3 ranks
  others.layerId("a");
  others.layerId("b");
  for (int i = 0; i < 30; ++i) {
    others.add(call(0, Phase::kForward, OpKind::kSoftmax, 1000000));
    others.add(call(1, Phase::kForward, OpKind::kSoftmax, 1000000));
  }
  const CellComparison c = compare(mine, 10, others, 30);
  EXPECT_EQ(c.attribution.layer, 1);
  EXPECT_GT(c.attribution.share, 0.9);
}

// The live side of an oversubscribed host: this rank's softmax calls are preempted (4x) in 52
// of 100, the other ranks' in 48% of theirs. The median per call jumps to the slow mode here only
// and named a 4x cell outlier (it does with Typical::kMedian); the faster half's mean is 1.12x,
// below the 1.3 factor. A cell slower in every call (2x), preempted as often, is named at its 2x
// and the same 12%: (48 x 2 + 2 x 8) / 50 = 2.24.
TEST(AttributionTest, HalfPreemptedCellIsNoOutlierAndASlowCellKeepsItsFactor) {
  const auto build = [](int hits, int calls, int64_t base) {
    StatsTable t;
    t.layerId("a");
    t.layerId("b");
    for (int i = 0; i < calls; ++i) {
      t.add(call(0, Phase::kForward, OpKind::kSoftmax, (i * 37 % calls) < hits ? 4 * base : base));
      t.add(call(1, Phase::kForward, OpKind::kQkvProjection, 10000000));
    }
    return t;
  };
  const StatsTable mine = build(52, 100, 1000000), others = build(144, 300, 1000000);
  EXPECT_EQ(
      compareCells(mine, 100, others, 300, {1.3, 0.02}, {}, false, Typical::kMedian).outlier.layer,
      0);
  EXPECT_EQ(compareCells(mine, 100, others, 300, {1.3, 0.02}).outlier.layer, -1);
  const StatsTable slow = build(52, 100, 2000000);
  const CellComparison c = compareCells(slow, 100, others, 300, {1.3, 0.02});
  ASSERT_EQ(c.outlier.layer, 0);
  EXPECT_EQ(c.outlier.kind, OpKind::kSoftmax);
  EXPECT_NEAR(c.outlier.factor, 2.24, 2.24 * 2 * LogHistogram::kRelativeError);
}

TEST(AttributionTest, NoExcessNoAttribution) {
  const StatsTable mine = table({call(0, Phase::kForward, OpKind::kSoftmax, 1000000)});
  const StatsTable others = table({call(0, Phase::kForward, OpKind::kSoftmax, 3000000)});
  EXPECT_EQ(compare(mine, 1, others, 3).attribution.layer, -1);
  EXPECT_EQ(compare(mine, 0, others, 3).attribution.layer, -1);
  EXPECT_EQ(compare(mine, 1, others, 0).outlier.layer, -1);  // alone: nobody to compare with
}

LogHistogram histogramOf(const std::vector<double>& values) {
  LogHistogram h;
  for (double v : values) h.add(v);
  return h;
}

// The mean of the faster half: within the bucket error of the exact lower-half mean, and continuous
// where the median jumps. Half fast (1 ms) and half slow (4 ms) calls: moving two calls from one
// mode to the other moves the median 4x, the faster half's mean by 6%.
TEST(LowerMeanTest, FasterHalfIsContinuousWhereTheMedianJumps) {
  const double e = LogHistogram::kRelativeError;
  const auto mixture = [](int slow) {
    std::vector<double> v;
    for (int i = 0; i < 100; ++i) v.push_back(i < slow ? 4e-3 : 1e-3);
    return histogramOf(v);
  };
  const LogHistogram below = mixture(49), above = mixture(51);
  EXPECT_NEAR(below.quantile(0.5), 1e-3, 1e-3 * e);
  EXPECT_NEAR(above.quantile(0.5), 4e-3, 4e-3 * e);
  EXPECT_NEAR(lowerMean(below, 0.5), 1e-3, 1e-3 * e);
  // The faster 50 calls: 49 at 1 ms and one at 4 ms.
  EXPECT_NEAR(lowerMean(above, 0.5), (49 * 1e-3 + 4e-3) / 50, 1.06e-3 * e);
  EXPECT_NEAR(typicalSecondsPerCall(above, Typical::kMedian), 4e-3, 4e-3 * e);
  EXPECT_NEAR(typicalSecondsPerCall(above), lowerMean(above, 0.5), 1e-12);
  EXPECT_DOUBLE_EQ(typicalSecondsPerCall(above, Typical::kMean), above.mean());
  // Every call 5x slower: the faster half moves 5x.
  std::vector<double> slow, fast;
  for (int i = 0; i < 60; ++i) {
    fast.push_back(1e-3 * (1 + 0.01 * i));
    slow.push_back(5e-3 * (1 + 0.01 * i));
  }
  EXPECT_NEAR(lowerMean(histogramOf(slow), 0.5) / lowerMean(histogramOf(fast), 0.5), 5.0, 0.5);
}

TEST(LowerMeanTest, EdgeCases) {
  EXPECT_EQ(lowerMean(LogHistogram(), 0.5), 0.0);
  // One value: itself (clamped to min and max), whatever the fraction.
  EXPECT_DOUBLE_EQ(lowerMean(histogramOf({0.3}), 0.5), 0.3);
  EXPECT_DOUBLE_EQ(lowerMean(histogramOf({0.3}), 0.0), 0.3);
  // The whole distribution: the mean within the bucket error.
  const LogHistogram h = histogramOf({1.0, 2.0, 3.0, 10.0});
  EXPECT_NEAR(lowerMean(h, 1.0), h.mean(), h.mean() * LogHistogram::kRelativeError);
  EXPECT_NEAR(lowerMean(h, 0.5), 1.5, 1.5 * LogHistogram::kRelativeError);
  // Exact values: the same definition, the straddling value in part.
  EXPECT_TRUE(std::isnan(lowerMean(std::vector<double>{}, 0.5)));
  EXPECT_DOUBLE_EQ(lowerMean(std::vector<double>{10.0, 3.0, 2.0, 1.0}, 0.5), 1.5);
  EXPECT_DOUBLE_EQ(lowerMean(std::vector<double>{3.0, 1.0, 2.0}, 0.5), (1.0 + 0.5 * 2.0) / 1.5);
  EXPECT_DOUBLE_EQ(lowerMean(std::vector<double>{7.0}, 0.5), 7.0);
}

// Windows of calls with the example's spread (lognormal, sigma 0.27, docs/AGGREGATION.md): the
// standard error lowerMeanEstimate gives from one window against the spread of the faster half's
// mean over 2,000 windows, at 20 calls (a 1 s window) and 200 (10 s).
TEST(LowerMeanTest, StandardErrorIsTheSpreadOfRepeatedWindows) {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> calls(std::log(1e-4), 0.27);
  for (int n : {20, 200}) {
    std::vector<double> means, errors;
    for (int w = 0; w < 2000; ++w) {
      LogHistogram h;
      for (int i = 0; i < n; ++i) h.add(calls(rng));
      const Estimate e = lowerMeanEstimate(h, kFastHalf);
      EXPECT_DOUBLE_EQ(e.value, lowerMean(h, kFastHalf));
      means.push_back(e.value);
      errors.push_back(e.standardError);
    }
    double mean = 0, squares = 0;
    for (double m : means) mean += m / means.size();
    for (double m : means) squares += (m - mean) * (m - mean) / (means.size() - 1);
    std::sort(errors.begin(), errors.end());
    const double spread = std::sqrt(squares), typicalError = errors[errors.size() / 2];
    EXPECT_NEAR(typicalError / spread, 1.0, 0.2) << n << " calls: spread " << spread / mean;
  }
  // Identical calls: only the bucket's width is uncertain; few calls: the plain mean's error.
  const Estimate same = lowerMeanEstimate(histogramOf(std::vector<double>(50, 1e-3)), kFastHalf);
  EXPECT_GT(same.standardError, 0.0);
  EXPECT_LT(same.standardError, 1e-3 * LogHistogram::kRelativeError / std::sqrt(25.0));
  const Estimate few = lowerMeanEstimate(histogramOf({1e-3, 2e-3, 4e-3}), kFastHalf);
  EXPECT_NEAR(few.standardError, 0.88e-3, 0.88e-3 * 2 * LogHistogram::kRelativeError);
  EXPECT_EQ(lowerMeanEstimate(LogHistogram(), kFastHalf).standardError, 0.0);
}

// Calls spread exactly as the example's (lognormal, sigma 0.27): the n quantiles at (i + 1/2) / n.
std::vector<double> lognormalQuantiles(int n, double median) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) {
    const double p = (i + 0.5) / n;
    double lo = -10, hi = 10;  // Phi^-1(p) by bisection
    for (int k = 0; k < 100; ++k) {
      const double mid = (lo + hi) / 2;
      (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
    }
    v.push_back(median * std::exp(0.27 * lo));
  }
  return v;
}

// A window of `steps` steps: layer a's softmax spread as the example's around factor x 100 us, and
// a steady 200 us qkv projection.
StatsTable lognormalWindow(int steps, double factor) {
  StatsTable t;
  t.layerId("a");
  t.layerId("b");
  for (double s : lognormalQuantiles(steps, factor * 1e-4)) {
    t.add(call(0, Phase::kForward, OpKind::kSoftmax, static_cast<int64_t>(s * 1e9)));
    t.add(call(0, Phase::kForward, OpKind::kQkvProjection, 200000));
  }
  return t;
}

// The evidence limit: a cell 1.15x the others' in every call is an outlier at 2,000 calls a window
// and is not at 20, where the spread of a window's faster-half mean (7%) is half the difference;
// the factor alone (sigmas 0) names it at both. Without the evidence limit the fixed factor
// decides alone, as before.
TEST(AttributionTest, ASmallFactorNeedsEvidence) {
  const CellOutlierLimits evidence{1.1, 0.02, 3}, factorOnly{1.1, 0.02, 0};
  for (int steps : {20, 2000}) {
    const StatsTable mine = lognormalWindow(steps, 1.15), others = lognormalWindow(63 * steps, 1.0);
    const CellComparison withEvidence = compareCells(mine, steps, others, 63 * steps, evidence);
    const CellComparison without = compareCells(mine, steps, others, 63 * steps, factorOnly);
    ASSERT_EQ(without.outlier.layer, 0) << steps;
    EXPECT_EQ(without.outlier.kind, OpKind::kSoftmax);
    EXPECT_NEAR(without.outlier.factor, 1.15, 1.15 * LogHistogram::kRelativeError);
    if (steps == 20) {
      EXPECT_EQ(withEvidence.outlier.layer, -1) << "sigmas " << without.outlier.sigmas;
      EXPECT_NEAR(without.outlier.sigmas, 0.15 / 0.07, 0.6);
    } else {
      ASSERT_EQ(withEvidence.outlier.layer, 0);
      EXPECT_GT(withEvidence.outlier.sigmas, 10.0);
    }
  }
  // This rank's error is never read below what the others' spread implies: the same 20 calls, all
  // in one bucket here (no spread of their own), against the others' spread.
  const double theirs = lowerMean(histogramOf(lognormalQuantiles(63 * 20, 1e-4)), kFastHalf);
  StatsTable steady;
  steady.layerId("a");
  steady.layerId("b");
  for (int i = 0; i < 20; ++i) {
    steady.add(
        call(0, Phase::kForward, OpKind::kSoftmax, static_cast<int64_t>(1.15 * theirs * 1e9)));
    steady.add(call(0, Phase::kForward, OpKind::kQkvProjection, 200000));
  }
  EXPECT_EQ(
      compareCells(steady, 20, lognormalWindow(63 * 20, 1.0), 63 * 20, factorOnly).outlier.layer,
      0);
  EXPECT_EQ(
      compareCells(steady, 20, lognormalWindow(63 * 20, 1.0), 63 * 20, evidence).outlier.layer, -1);
}

// One rank's cell against 63 others', window by window at the defaults (1 s windows of the example:
// 20 calls), as the reporter compares and rank 0's detector flags: the cell episodes.
std::vector<DetectorEpisode> cellEpisodes(const std::vector<double>& factors) {
  const Config config;
  const StragglerOptions options = stragglerOptions(config);
  CellHold hold(options);
  StragglerDetector detector(2, options);
  std::vector<DetectorEpisode> stragglers, hangs, cells;
  const StatsTable others = lognormalWindow(63 * 20, 1.0);
  for (size_t i = 0; i < factors.size(); ++i) {
    const CellComparison c = compareCells(lognormalWindow(20, factors[i]), 20, others, 63 * 20,
                                          cellOutlierLimits(config), hold.keep(), hold.held());
    std::vector<RankWindow> round(2);
    for (int r = 0; r < 2; ++r) {
      RankWindow& w = round[static_cast<size_t>(r)];
      w.rank = r;
      w.present = true;
      w.steps = w.sampledSteps = 20;
      w.lastStep = 20 * (i + 1);
      w.forwardSeconds = 1e-3;
    }
    round[0].cellLayer = c.outlier.layer;
    round[0].cellPhase = c.outlier.phase;
    round[0].cellKind = c.outlier.kind;
    round[0].cellFactor = c.outlier.factor;
    round[0].cellShare = c.outlier.share;
    hold.observe(round[0]);
    updateEpisodes(detector.update(round, static_cast<double>(i)), {"a", "b"}, &stragglers, &hangs,
                   &cells);
  }
  return cells;
}

// A 1.6x cell whose evidence sags for three windows (1.25x: under the 1.3 factor, over the exit
// limits) is one episode. Held at the entry limits it ended after three windows and a second
// episode began: the split real processes showed (docs/AGGREGATION.md). Three healthy windows
// still end it.
TEST(AttributionTest, ASagUnderTheEntryLimitsKeepsOneCellEpisode) {
  const std::vector<DetectorEpisode> sag =
      cellEpisodes({1, 1.6, 1.6, 1.6, 1.6, 1.25, 1.25, 1.25, 1.6, 1.6, 1.6, 1.6});
  ASSERT_EQ(sag.size(), 1u);
  EXPECT_EQ(sag[0].layer, "a");
  EXPECT_EQ(sag[0].kind, OpKind::kSoftmax);
  EXPECT_EQ(sag[0].lastRound, 12u);
  EXPECT_EQ(cellEpisodes({1, 1.6, 1.6, 1.6, 1.6, 1, 1, 1, 1.6, 1.6, 1.6, 1.6}).size(), 2u);
  // Entering still takes the full limits: 1.25x from the start is never one.
  EXPECT_TRUE(cellEpisodes(std::vector<double>(12, 1.25)).empty());
}
}  // namespace
}  // namespace attnscope
