// Unit tests of the run analysis on synthetic traces with known injections: the straggler rank
// and layer, no straggler without injection, missing and stopped ranks, memory outliers, and the
// reports' first lines.

#include "attnscope/analysis/RunAnalysis.h"

#include <gtest/gtest.h>

#include <fstream>

#include "TraceTestData.h"
#include "attnscope/analysis/HtmlReport.h"
#include "attnscope/analysis/JsonReport.h"
#include "attnscope/analysis/PerfettoTrace.h"

namespace attnscope {
namespace {

using analysis::Analysis;
using analysis::RankStatus;
using testdata::TempDir;

Analysis analyzeDir(const std::string& dir, std::vector<analysis::RankTrace>* tracesOut = nullptr) {
  std::vector<analysis::RankTrace> traces;
  std::vector<analysis::SkippedFile> skipped;
  std::string error;
  EXPECT_TRUE(analysis::readTraceDirectory(dir, &traces, &skipped, &error)) << error;
  Analysis a = analysis::analyzeRun(dir, traces, skipped, analysis::AnalysisOptions());
  if (tracesOut != nullptr) *tracesOut = std::move(traces);
  return a;
}

TEST(RunAnalysisTest, NamesTheInjectedRankAndLayer) {
  TempDir dir;
  for (int r = 0; r < 4; ++r) {
    testdata::writeRank(dir.path(), r, 4, 4, 10, 100, r == 2 ? 1 : -1, r == 2 ? 3 : 1);
  }
  const Analysis a = analyzeDir(dir.path());
  EXPECT_FALSE(a.anythingSkipped());
  ASSERT_EQ(a.stragglers.size(), 1u);
  const analysis::StragglerEpisode& e = a.stragglers[0];
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.layer, "layers.1.attn");
  EXPECT_NEAR(e.maxScore, 1.5, 0.05);  // 4 layers of 84 units, one of them 3 times: 504 / 336
  EXPECT_GT(e.layerShare, 0.95);
  EXPECT_EQ(e.phase, Phase::kBackward);  // backward costs twice forward here
  EXPECT_EQ(e.kind, OpKind::kLayoutCopy);  // the 7th kind costs most
  EXPECT_EQ(e.firstStep, 0u);
  EXPECT_EQ(e.lastStep, 999u);
  EXPECT_EQ(a.ranks[2].status, RankStatus::kOk);
  EXPECT_NEAR(a.ranks[2].score, 1.5, 0.05);
  // Layer table: the slow layer's per-call time is the same (3 calls per step), its time per
  // step on rank 2 three times the others'.
  for (const analysis::LayerPhaseRow& l : a.layers) {
    if (l.layer != "layers.1.attn" || l.phase != Phase::kForward) continue;
    // Rank 2's base cost is 1020 units, rank 0's 1000 (TraceTestData.h).
    EXPECT_NEAR(l.rankSecondsPerStep[2] / l.rankSecondsPerStep[0], 3.0 * 1.02, 0.01);
    EXPECT_NEAR(l.rankP50Seconds[2] / l.rankP50Seconds[0], 1.02, 0.01);
  }
  const std::string html = analysis::HtmlReport::render(a);
  EXPECT_NE(html.find("<b class=\"big\">Straggler: rank 2, layer layers.1.attn</b>"), std::string::npos);
  EXPECT_LT(html.find("Straggler: rank 2"), html.find("<svg")) << "the finding comes before the plots";
  const std::string json = analysis::JsonReport::render(a);
  EXPECT_NE(json.find("\"schema\": \"attnscope.analysis/1\""), std::string::npos);
  EXPECT_NE(json.find("\"rank\": 2, \"first_step\": 0, \"last_step\": 999"), std::string::npos) << json;
}

TEST(RunAnalysisTest, NoInjectionNoStraggler) {
  TempDir dir;
  for (int r = 0; r < 4; ++r) testdata::writeRank(dir.path(), r, 4, 4, 10, 100);
  const Analysis a = analyzeDir(dir.path());
  EXPECT_TRUE(a.stragglers.empty());
  EXPECT_TRUE(a.memoryOutliers.empty());
  for (const auto& r : a.ranks) EXPECT_NEAR(r.score, 1.0, 0.03);  // bases 1000 to 1020
  EXPECT_NE(analysis::HtmlReport::render(a).find("<b class=\"big\">No straggler</b>"), std::string::npos);
}

TEST(RunAnalysisTest, MissingSkippedAndStoppedRanksAreNamed) {
  TempDir dir;
  testdata::writeRank(dir.path(), 0, 4, 2, 10, 100);
  testdata::writeRank(dir.path(), 1, 4, 2, 3, 100, -1, 1, /*stopped=*/false);  // killed at a third
  testdata::writeRank(dir.path(), 3, 4, 2, 10, 100);
  {
    std::ofstream(dir.file("rank-3.sqlite"), std::ios::trunc) << "garbage";
  }
  const Analysis a = analyzeDir(dir.path());
  EXPECT_TRUE(a.anythingSkipped());
  ASSERT_EQ(a.ranks.size(), 4u);
  EXPECT_EQ(a.ranks[0].status, RankStatus::kOk);
  EXPECT_EQ(a.ranks[1].status, RankStatus::kStoppedEarly);
  EXPECT_EQ(a.ranks[1].reason, "no clean stop; last step 299 at +3.0 s, the run goes on to +10.0 s");
  EXPECT_EQ(a.ranks[2].status, RankStatus::kMissing);
  EXPECT_EQ(a.ranks[2].reason, "no file rank-2.sqlite in the trace directory");
  EXPECT_EQ(a.ranks[3].status, RankStatus::kSkipped);
  EXPECT_EQ(a.ranks[3].file, dir.file("rank-3.sqlite"));
  EXPECT_EQ(a.missingRanks, (std::vector<int>{2, 3}));
  const std::string html = analysis::HtmlReport::render(a);
  EXPECT_NE(html.find("rank 2 missing"), std::string::npos);
  EXPECT_NE(html.find("rank 3 skipped (" + dir.file("rank-3.sqlite")), std::string::npos);
  EXPECT_NE(html.find("Rank 1 stopped early"), std::string::npos);
}

TEST(RunAnalysisTest, MemoryOutlierIsNamed) {
  TempDir dir;
  for (int r = 0; r < 3; ++r) {
    std::string error;
    auto store = TraceStore::open(dir.path(), r, 64 << 20, &error);
    ASSERT_NE(store, nullptr) << error;
    TraceInterval in;
    in.meta = testdata::meta(r, 3);
    in.meta.emplace_back("stop_unix", "1001");
    in.layerNames = testdata::layerNames(2);
    for (uint64_t s = 0; s < 50; ++s) {
      std::vector<TraceCall> calls = testdata::stepCalls(2, 1000);
      if (r == 1) calls[2].peak = 64 << 20;  // layers.1.attn forward
      else calls[2].peak = 16 << 20;
      in.steps.push_back(testdata::encoded(s, 1000 + 0.02 * s, 20000000, calls));
    }
    ASSERT_TRUE(store->commit(in, &error)) << error;
  }
  const Analysis a = analyzeDir(dir.path());
  ASSERT_EQ(a.memoryOutliers.size(), 1u);
  EXPECT_EQ(a.memoryOutliers[0].rank, 1);
  EXPECT_EQ(a.memoryOutliers[0].layer, "layers.1.attn");
  EXPECT_EQ(a.memoryOutliers[0].phase, Phase::kForward);
  EXPECT_NEAR(a.memoryOutliers[0].ratio, 4.0, 0.01);
}

TEST(RunAnalysisTest, PerfettoTraceCarriesDistributedInfo) {
  TempDir dir;
  for (int r = 0; r < 2; ++r) testdata::writeRank(dir.path(), r, 2, 2, 2, 10);
  std::vector<analysis::RankTrace> traces;
  const Analysis a = analyzeDir(dir.path(), &traces);
  ASSERT_EQ(traces.size(), 2u);
  const std::string one = analysis::PerfettoTrace::renderRank(traces[1], a);
  EXPECT_NE(one.find("\"distributedInfo\": {\"rank\": 1, \"world_size\": 2, \"backend\": \"gloo\"}"), std::string::npos);
  EXPECT_NE(one.find("\"name\": \"step 19\""), std::string::npos);
  const std::string all = analysis::PerfettoTrace::renderAll(traces, a);
  EXPECT_NE(all.find("\"distributedInfo\": {\"world_size\": 2, \"ranks\": [0, 1]"), std::string::npos);
}

}  // namespace
}  // namespace attnscope
