// Attribution of a rank's excess, and the flat layout the cross-rank all-reduce sums.
#include "attnscope/core/Attribution.h"

#include <gtest/gtest.h>

#include "attnscope/core/StatsTable.h"

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

TEST(AttributionTest, NamesTheCellWithTheLargestExcess) {
  // This rank: softmax in layer b's backward takes 3 ms per step more than the cluster mean,
  // layer a's qkv 1 ms more.
  const StatsTable mine = table({call(0, Phase::kForward, OpKind::kQkvProjection, 2000000),
                                 call(1, Phase::kBackward, OpKind::kSoftmax, 4000000)});
  // Cluster (4 ranks, this one included): sums over 4 sampled steps.
  const StatsTable cluster = table({call(0, Phase::kForward, OpKind::kQkvProjection, 4000000),
                                    call(1, Phase::kBackward, OpKind::kSoftmax, 4000000)});
  const Attribution a = attributeExcess(mine, 1, cluster, 4);
  EXPECT_EQ(a.layer, 1);
  EXPECT_EQ(a.phase, Phase::kBackward);
  EXPECT_EQ(a.kind, OpKind::kSoftmax);
  // Medians come from the histogram (within 4.43% of the value): 3 ms of 4 ms excess, about.
  EXPECT_NEAR(a.share, 3.0 / 4.0, 0.05);
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
  StatsTable cluster;  // the typical rank: 1 ms everywhere, 40 calls per layer over 4 ranks
  cluster.layerId("a");
  cluster.layerId("b");
  for (int i = 0; i < 40; ++i) {
    cluster.add(call(0, Phase::kForward, OpKind::kSoftmax, 1000000));
    cluster.add(call(1, Phase::kForward, OpKind::kSoftmax, 1000000));
  }
  const Attribution a = attributeExcess(mine, 10, cluster, 40);
  EXPECT_EQ(a.layer, 1);
  EXPECT_GT(a.share, 0.9);
}

TEST(AttributionTest, NoExcessNoAttribution) {
  const StatsTable mine = table({call(0, Phase::kForward, OpKind::kSoftmax, 1000000)});
  const StatsTable cluster = table({call(0, Phase::kForward, OpKind::kSoftmax, 4000000)});
  EXPECT_EQ(attributeExcess(mine, 1, cluster, 4).layer, -1);
  EXPECT_EQ(attributeExcess(mine, 0, cluster, 4).layer, -1);
}

}  // namespace
}  // namespace attnscope
