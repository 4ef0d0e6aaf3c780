// Unit tests of the run-against-run comparison on synthetic traces with known differences: a
// slowed layer is named slower and listed first, a run against itself is the same everywhere,
// runs of different world sizes compare by the per-rank median, runs of different models are
// refused, and the metadata's differences (versions, implementation and shapes per layer) are
// named. Also the attention-shape metadata format the plugin writes and the readers parse.

#include "attnscope/analysis/RunComparison.h"

#include <gtest/gtest.h>

#include <cmath>

#include "TraceTestData.h"
#include "attnscope/core/AttentionShape.h"

namespace attnscope {
namespace {

using analysis::ComparedCell;
using analysis::RankTrace;
using analysis::RunComparison;
using analysis::Verdict;

// A rank of `steps` sampled steps of testdata::stepCalls(layers, base), each step's times scaled
// by a deterministic jitter of up to ±`jitter` (0.1: 10%), layer `slowLayer` by `slowFactor`.
RankTrace rank(int r, int world, int layers, int steps, int64_t baseNs, double jitter = 0.1,
               int slowLayer = -1, double slowFactor = 1, uint32_t seed = 1) {
  RankTrace t;
  t.rank = r;
  t.worldSize = world;
  t.layers = testdata::layerNames(layers);
  t.meta = {{"torch_version", "2.13.0"}, {"attnscope_version", "0.1.0"}, {"cpu_model", "cpu A"}};
  uint32_t state = seed * 2654435761u + static_cast<uint32_t>(r);
  for (int s = 0; s < steps; ++s) {
    TraceStep step;
    step.step = static_cast<uint64_t>(s);
    step.calls = testdata::stepCalls(layers, baseNs);
    for (TraceCall& c : step.calls) {
      state = state * 1664525u + 1013904223u;
      double f = 1 + jitter * ((state >> 8) / double(1 << 24) * 2 - 1);
      if (c.layer == slowLayer) f *= slowFactor;
      c.ns = 0;
      for (auto& k : c.kinds) {
        k.ns = static_cast<int64_t>(static_cast<double>(k.ns) * f);
        c.ns += k.ns;
      }
    }
    t.steps.push_back(step);
  }
  return t;
}

bool compare(const std::vector<RankTrace>& b, const std::vector<RankTrace>& c, RunComparison* out,
             std::string* error = nullptr) {
  std::string ignored;
  return analysis::compareRuns("/runs/base", b, {}, "/runs/cur", c, {},
                               analysis::ComparisonOptions(), out,
                               error != nullptr ? error : &ignored);
}

const ComparedCell* find(const RunComparison& r, const std::string& layer, Phase phase,
                         OpKind kind = OpKind::kCount) {
  for (const ComparedCell& c : r.cells) {
    if (c.layer == layer && c.phase == phase && c.kind == kind) return &c;
  }
  return nullptr;
}

TEST(RunComparisonTest, SlowedLayerIsSlowerAndListedFirst) {
  const std::vector<RankTrace> base = {rank(0, 2, 3, 60, 1000), rank(1, 2, 3, 60, 1000)};
  const std::vector<RankTrace> cur = {rank(0, 2, 3, 60, 1000, 0.1, 1, 1.5, 7),
                                      rank(1, 2, 3, 60, 1000, 0.1, 1, 1.5, 7)};
  RunComparison r;
  ASSERT_TRUE(compare(base, cur, &r));
  // The all-layers totals first (forward, backward), then the largest regression: layer 1's
  // backward (twice the forward's time, both 1.5x).
  ASSERT_GT(r.cells.size(), 3u);
  EXPECT_EQ(r.cells[0].layer, ComparedCell::kAllLayers);
  EXPECT_EQ(r.cells[1].layer, ComparedCell::kAllLayers);
  EXPECT_EQ(r.cells[2].layer, "layers.1.attn");
  EXPECT_EQ(r.cells[2].phase, Phase::kBackward);
  EXPECT_EQ(r.cells[2].kind, OpKind::kCount);
  EXPECT_EQ(r.cells[2].verdict, Verdict::kSlower);
  for (Phase p : {Phase::kForward, Phase::kBackward}) {
    const ComparedCell* slow = find(r, "layers.1.attn", p);
    ASSERT_NE(slow, nullptr);
    EXPECT_EQ(slow->verdict, Verdict::kSlower);
    EXPECT_NEAR(slow->ratio, 1.5, 0.1);
    EXPECT_LT(slow->ratioLow, slow->ratio);
    EXPECT_GT(slow->ratioHigh, slow->ratio);
    EXPECT_GT(slow->ratioLow, 1.2);
    for (const char* other : {"layers.0.attn", "layers.2.attn"}) {
      const ComparedCell* same = find(r, other, p);
      ASSERT_NE(same, nullptr);
      EXPECT_EQ(same->verdict, Verdict::kSame) << other << " " << same->ratio;
      EXPECT_LE(same->ratioLow, 1.0);
      EXPECT_GE(same->ratioHigh, 1.0);
    }
  }
  // Every op kind of the slowed layer is slower too; no cell is faster.
  EXPECT_EQ(find(r, "layers.1.attn", Phase::kForward, OpKind::kSoftmax)->verdict, Verdict::kSlower);
  EXPECT_EQ(r.count(Verdict::kFaster), 0u);
  const ComparedCell* total = find(r, ComparedCell::kAllLayers, Phase::kForward);
  ASSERT_NE(total, nullptr);
  EXPECT_NEAR(total->ratio, (1 + 1.5 + 1) / 3.0, 0.05);
  EXPECT_TRUE(r.differences.empty()) << r.differences[0].what;
  const std::string text = analysis::renderComparisonText(r);
  EXPECT_NE(text.find("  slower: layers.1.attn backward 1.5"), std::string::npos) << text;
  const std::string json = analysis::renderComparisonJson(r);
  EXPECT_NE(json.find("\"schema\": \"attnscope.comparison/1\""), std::string::npos);
  EXPECT_NE(
      json.find("\"layer\": \"layers.1.attn\", \"phase\": \"backward\", \"op_kind\": \"all\""),
      std::string::npos);
  const std::string html = analysis::renderComparisonHtml(r);
  EXPECT_NE(html.find("<tr class=\"slower\"><td class=\"l\">layers.1.attn</td>"),
            std::string::npos);
}

TEST(RunComparisonTest, FasterLayerIsFaster) {
  const std::vector<RankTrace> base = {rank(0, 1, 2, 40, 1000, 0.1, 0, 2.0)};
  const std::vector<RankTrace> cur = {rank(0, 1, 2, 40, 1000, 0.1, -1, 1, 3)};
  RunComparison r;
  ASSERT_TRUE(compare(base, cur, &r));
  const ComparedCell* fast = find(r, "layers.0.attn", Phase::kForward);
  ASSERT_NE(fast, nullptr);
  EXPECT_EQ(fast->verdict, Verdict::kFaster);
  EXPECT_NEAR(fast->ratio, 0.5, 0.05);
  EXPECT_LT(fast->ratioHigh, 1.0);
  EXPECT_EQ(r.cells[2].verdict, Verdict::kFaster) << "no regression: savings come first";
}

TEST(RunComparisonTest, RunAgainstItselfIsSameEverywhere) {
  const std::vector<RankTrace> run = {rank(0, 2, 4, 30, 1000, 0.3), rank(1, 2, 4, 30, 1000, 0.3)};
  RunComparison r;
  ASSERT_TRUE(compare(run, run, &r));
  EXPECT_GT(r.cells.size(), 4u * 2 * 8);
  for (const ComparedCell& c : r.cells) {
    EXPECT_EQ(c.verdict, Verdict::kSame) << c.layer << " " << c.ratio;
    EXPECT_DOUBLE_EQ(c.ratio, 1.0);
    EXPECT_LE(c.ratioLow, 1.0);
    EXPECT_GE(c.ratioHigh, 1.0);
  }
  EXPECT_TRUE(r.differences.empty());
}

TEST(RunComparisonTest, WorldSizesCompareByPerRankMedian) {
  // Two ranks against four: one rank of four twice as slow does not move the per-rank median.
  const std::vector<RankTrace> base = {rank(0, 2, 2, 40, 1000), rank(1, 2, 2, 40, 1000)};
  std::vector<RankTrace> cur;
  for (int r = 0; r < 4; ++r) cur.push_back(rank(r, 4, 2, 40, 1000, 0.1, r == 3 ? 0 : -1, 2.0, 5));
  RunComparison r;
  ASSERT_TRUE(compare(base, cur, &r));
  EXPECT_EQ(r.current.worldSize, 4);
  EXPECT_EQ(r.baseline.worldSize, 2);
  ASSERT_FALSE(r.differences.empty());
  EXPECT_EQ(r.differences[0].what, "world size");
  EXPECT_EQ(r.differences[0].baseline, "2");
  EXPECT_EQ(r.differences[0].current, "4");
  const ComparedCell* c = find(r, "layers.0.attn", Phase::kForward);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->verdict, Verdict::kSame) << c->ratio;
  EXPECT_EQ(c->currentSteps, 160u);
}

TEST(RunComparisonTest, RunsOfDifferentModelsAreRefused) {
  const std::vector<RankTrace> base = {rank(0, 1, 2, 10, 1000)};
  std::vector<RankTrace> cur = {rank(0, 1, 2, 10, 1000)};
  cur[0].layers = {"model.layers.0.self_attn", "model.layers.1.self_attn"};
  RunComparison r;
  std::string error;
  EXPECT_FALSE(compare(base, cur, &r, &error));
  EXPECT_EQ(error,
            "the runs share no attention layer (different models?): baseline /runs/base has "
            "layers.0.attn, layers.1.attn; /runs/cur has model.layers.0.self_attn, "
            "model.layers.1.self_attn; compare runs of the same model");
  EXPECT_FALSE(analysis::compareRuns("/runs/base", {}, {}, "/runs/cur", cur, {},
                                     analysis::ComparisonOptions(), &r, &error));
  EXPECT_EQ(error, "no readable rank file (rank-<r>.sqlite) in /runs/base");
}

TEST(RunComparisonTest, MetadataDifferencesAndLayersInOneRunAreNamed) {
  std::vector<RankTrace> base = {rank(0, 1, 3, 20, 1000)};
  std::vector<RankTrace> cur = {rank(0, 1, 2, 20, 1000)};
  AttentionShape eager;
  eager.op = "aten::matmul";
  eager.batch = 4;
  eager.heads = eager.kvHeads = 4;
  eager.qLen = eager.kvLen = 64;
  eager.headDim = 16;
  eager.dtype = "float32";
  AttentionShape sdpa = eager;
  sdpa.op = "aten::scaled_dot_product_attention";
  sdpa.backend = "flash";
  sdpa.causal = 1;
  sdpa.dtype = "bfloat16";
  base[0].meta[attentionShapeKey("layers.0.attn")] = eager.encode();
  cur[0].meta[attentionShapeKey("layers.0.attn")] = sdpa.encode();
  cur[0].meta["torch_version"] = "2.14.0";
  RunComparison r;
  ASSERT_TRUE(compare(base, cur, &r));
  EXPECT_EQ(r.onlyBaseline, std::vector<std::string>{"layers.2.attn"});
  EXPECT_TRUE(r.onlyCurrent.empty());
  const auto has = [&](const std::string& layer, const std::string& what, const std::string& b,
                       const std::string& c) {
    for (const analysis::RunDifference& d : r.differences) {
      if (d.layer == layer && d.what == what && d.baseline == b && d.current == c) return true;
    }
    return false;
  };
  EXPECT_TRUE(has("", "torch version", "2.13.0", "2.14.0"));
  EXPECT_TRUE(
      has("layers.0.attn", "implementation", "eager (matmul-softmax-matmul)", "sdpa (flash)"));
  EXPECT_TRUE(has("layers.0.attn", "dtype", "float32", "bfloat16"));
  // Without recorded shapes the implementation comes from the op kinds (all unfused here).
  EXPECT_FALSE(has("layers.1.attn", "implementation", "", ""));
  EXPECT_EQ(r.current.implementation[1], "eager (matmul-softmax-matmul)");
  const std::string text = analysis::renderComparisonText(r);
  EXPECT_NE(text.find("  only in baseline: layers.2.attn\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  differs: layers.0.attn implementation: sdpa (flash) (baseline eager "
                      "(matmul-softmax-matmul))\n"),
            std::string::npos)
      << text;
}

TEST(AttentionShapeTest, RoundTripsAndRefusesMalformedValues) {
  AttentionShape s;
  s.op = "aten::scaled_dot_product_attention";
  s.backend = "flash";
  s.batch = 4;
  s.heads = 8;
  s.kvHeads = 2;
  s.qLen = 128;
  s.kvLen = 256;
  s.headDim = 64;
  s.dtype = "bfloat16";
  s.causal = 1;
  s.mask = "none";
  s.dropout = 0.1;
  s.changes = 3;
  AttentionShape back;
  std::string error;
  ASSERT_TRUE(parseAttentionShape(s.encode() + " future_key=1", &back, &error)) << error;
  EXPECT_EQ(back.encode(), s.encode());
  EXPECT_EQ(back.describeShapes(),
            "batch 4, heads 8 (kv 2), q 128, kv 256, head dim 64, bfloat16, causal, dropout 0.1");
  EXPECT_EQ(back.implementation(), "sdpa (flash)");
  EXPECT_FALSE(parseAttentionShape("batch=-1", &back, &error));
  EXPECT_EQ(error, "attention shape \"batch=-1\": batch=\"-1\" is out of range or malformed");
  EXPECT_FALSE(parseAttentionShape("dropout=2", &back, &error));
  EXPECT_FALSE(parseAttentionShape("garbage", &back, &error));
  EXPECT_EQ(error, "attention shape \"garbage\": \"garbage\" is not key=value");
  EXPECT_FALSE(parseAttentionShape("", &back, &error));
}

}  // namespace
}  // namespace attnscope
