// Unit tests of the run analysis on synthetic traces with known injections: the straggler rank
// and layer, no straggler without injection, missing and stopped ranks, memory outliers, the
// roofline points and each recommendation (triggered by a trace built for it, not by one without
// its evidence), and the reports' first lines.

#include "attnscope/analysis/RunAnalysis.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "TraceTestData.h"
#include "attnscope/analysis/HtmlReport.h"
#include "attnscope/analysis/JsonReport.h"
#include "attnscope/analysis/PerfettoTrace.h"

namespace attnscope {
namespace {

using analysis::Analysis;
using analysis::RankOutcome;
using testdata::TempDir;

Analysis analyzeDir(const std::string& dir, std::vector<analysis::RankTrace>* tracesOut = nullptr,
                    const analysis::AnalysisOptions& options = analysis::AnalysisOptions()) {
  std::vector<analysis::RankTrace> traces;
  std::vector<analysis::SkippedFile> skipped;
  std::string error;
  EXPECT_TRUE(analysis::readTraceDirectory(dir, &traces, &skipped, &error)) << error;
  Analysis a = analysis::analyzeRun(dir, traces, skipped, options);
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
  EXPECT_EQ(e.phase, Phase::kBackward);    // backward costs twice forward here
  EXPECT_EQ(e.kind, OpKind::kLayoutCopy);  // the 7th kind costs most
  EXPECT_EQ(e.firstStep, 0u);
  EXPECT_EQ(e.lastStep, 999u);
  EXPECT_EQ(a.ranks[2].status, RankOutcome::kOk);
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
  EXPECT_NE(html.find("<b class=\"big\">Straggler: rank 2, layer layers.1.attn</b>"),
            std::string::npos);
  EXPECT_LT(html.find("Straggler: rank 2"), html.find("<svg"))
      << "the finding comes before the plots";
  const std::string json = analysis::JsonReport::render(a);
  EXPECT_NE(json.find("\"schema\": \"attnscope.analysis/1\""), std::string::npos);
  EXPECT_NE(json.find("\"rank\": 2, \"first_step\": 0, \"last_step\": 999"), std::string::npos)
      << json;
}

TEST(RunAnalysisTest, NoInjectionNoStraggler) {
  TempDir dir;
  for (int r = 0; r < 4; ++r) testdata::writeRank(dir.path(), r, 4, 4, 10, 100);
  const Analysis a = analyzeDir(dir.path());
  EXPECT_TRUE(a.stragglers.empty());
  EXPECT_TRUE(a.memoryOutliers.empty());
  for (const auto& r : a.ranks) EXPECT_NEAR(r.score, 1.0, 0.03);  // bases 1000 to 1020
  EXPECT_NE(analysis::HtmlReport::render(a).find("<b class=\"big\">No straggler</b>"),
            std::string::npos);
}

TEST(RunAnalysisTest, MissingSkippedAndStoppedRanksAreNamed) {
  TempDir dir;
  testdata::writeRank(dir.path(), 0, 4, 2, 10, 100);
  testdata::writeRank(dir.path(), 1, 4, 2, 3, 100, -1, 1, /*stopped=*/false);  // killed at a third
  testdata::writeRank(dir.path(), 3, 4, 2, 10, 100);
  { std::ofstream(dir.file("rank-3.sqlite"), std::ios::trunc) << "garbage"; }
  const Analysis a = analyzeDir(dir.path());
  EXPECT_TRUE(a.anythingSkipped());
  ASSERT_EQ(a.ranks.size(), 4u);
  EXPECT_EQ(a.ranks[0].status, RankOutcome::kOk);
  EXPECT_EQ(a.ranks[1].status, RankOutcome::kStoppedEarly);
  EXPECT_EQ(a.ranks[1].reason,
            "no clean stop; last step 299 at +3.0 s, the run goes on to +10.0 s");
  EXPECT_EQ(a.ranks[2].status, RankOutcome::kMissing);
  EXPECT_EQ(a.ranks[2].reason, "no file rank-2.sqlite in the trace directory");
  EXPECT_EQ(a.ranks[3].status, RankOutcome::kSkipped);
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
      if (r == 1)
        calls[2].peak = 64 << 20;  // layers.1.attn forward
      else
        calls[2].peak = 16 << 20;
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

// One op kind of one layer 2.1x slower on one rank moves the rank's attention time by under 5%:
// no straggler, but the cell is named with its factor, and nothing else is.
TEST(RunAnalysisTest, CellOutlierOnANonStragglerRank) {
  TempDir dir;
  const int layoutCopy = static_cast<int>(OpKind::kLayoutCopy);
  for (int r = 0; r < 4; ++r) {
    std::string error;
    auto store = TraceStore::open(dir.path(), r, 64 << 20, &error);
    ASSERT_NE(store, nullptr) << error;
    TraceInterval in;
    in.meta = testdata::meta(r, 4);
    in.meta.emplace_back("stop_unix", "1010");
    in.layerNames = testdata::layerNames(4);
    for (uint64_t s = 0; s < 200; ++s) {
      std::vector<TraceCall> calls = testdata::stepCalls(4, 1000 + 10 * (r % 3));
      if (r == 1) {
        TraceCall& c = calls[2 * 2 + 1];  // layers.2.attn backward
        const int64_t extra = c.kinds[layoutCopy].ns * 11 / 10;
        c.kinds[layoutCopy].ns += extra;
        c.ns += extra;
      }
      in.steps.push_back(testdata::encoded(s, 1000 + 0.05 * (s + 1), 50000000, calls));
    }
    ASSERT_TRUE(store->commit(in, &error)) << error;
  }
  const Analysis a = analyzeDir(dir.path());
  EXPECT_TRUE(a.stragglers.empty());
  EXPECT_LT(a.ranks[1].score, 1.06);
  ASSERT_EQ(a.cellOutliers.size(), 1u);
  EXPECT_EQ(a.cellOutliersFound, 1u);
  const analysis::CellOutlier& c = a.cellOutliers[0];
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.layer, "layers.2.attn");
  EXPECT_EQ(c.phase, Phase::kBackward);
  EXPECT_EQ(c.kind, OpKind::kLayoutCopy);
  // Rank 1's cell: 14 + 15.4 units of 1010 ns; the others' 14 units of 1000, 1020, 1000 ns.
  EXPECT_NEAR(c.factor, 29.4 * 1010 / 14000, 0.005);
  EXPECT_EQ(c.otherRanks, 3);
  EXPECT_EQ(c.steps, 200u);
  EXPECT_EQ(c.stepsAbove, 200u);
  EXPECT_FALSE(c.rankIsStraggler);
  // Of the rank's layers.2.attn backward time: 56 + 15.4 units of 1010 ns.
  EXPECT_NEAR(c.excessShare, (29.4 * 1010 - 14000) / (71.4 * 1010), 0.001);
  const std::string json = analysis::JsonReport::render(a);
  EXPECT_NE(json.find("\"cell_outliers\": [\n    {\"rank\": 1, \"layer\": \"layers.2.attn\", "
                      "\"phase\": \"backward\", \"op_kind\": \"layout_copy\""),
            std::string::npos)
      << json;
  EXPECT_NE(analysis::HtmlReport::render(a).find(
                "<b>Cell outlier: rank 1, layers.2.attn backward layout_copy</b>"),
            std::string::npos);

  // A stricter factor leaves it out; the default share floor keeps the ranks' 2% spread out.
  analysis::AnalysisOptions strict;
  strict.cellFactor = 2.5;
  std::vector<analysis::RankTrace> traces;
  std::vector<analysis::SkippedFile> skipped;
  std::string error;
  ASSERT_TRUE(analysis::readTraceDirectory(dir.path(), &traces, &skipped, &error)) << error;
  EXPECT_TRUE(analysis::analyzeRun(dir.path(), traces, skipped, strict).cellOutliers.empty());
}

// An oversubscribed host: one cell of every rank is preempted (4x) in about half of the steps,
// rank 1 in 52% of them, the others in 48%. A median per rank jumps to the slow mode on rank 1
// only and made it a 4x "cell outlier"; the mean of the faster half moves by 12% and names
// nothing. (Fails with Typical::kMedian: the report's statistic before it became the live one.)
TEST(RunAnalysisTest, BimodalPreemptionIsNoCellOutlier) {
  TempDir dir;
  const int qkv = static_cast<int>(OpKind::kQkvProjection);
  for (int r = 0; r < 4; ++r) {
    std::string error;
    auto store = TraceStore::open(dir.path(), r, 64 << 20, &error);
    ASSERT_NE(store, nullptr) << error;
    TraceInterval in;
    in.meta = testdata::meta(r, 4);
    in.meta.emplace_back("stop_unix", "1010");
    in.layerNames = testdata::layerNames(4);
    const int hitPercent = r == 1 ? 52 : 48;
    for (uint64_t s = 0; s < 200; ++s) {
      std::vector<TraceCall> calls = testdata::stepCalls(4, 1000);
      if (static_cast<int>((s * 37 + static_cast<uint64_t>(r) * 11) % 100) < hitPercent) {
        TraceCall& c = calls[1 * 2 + 1];  // layers.1.attn backward
        const int64_t extra = c.kinds[qkv].ns * 3;
        c.kinds[qkv].ns += extra;
        c.ns += extra;
      }
      in.steps.push_back(testdata::encoded(s, 1000 + 0.05 * (s + 1), 50000000, calls));
    }
    ASSERT_TRUE(store->commit(in, &error)) << error;
  }
  const Analysis a = analyzeDir(dir.path());
  EXPECT_EQ(a.detection, "steps");  // no windows: the steps path
  EXPECT_TRUE(a.cellOutliers.empty())
      << a.cellOutliers.size() << " cell outliers, the first on rank " << a.cellOutliers[0].rank
      << " at " << a.cellOutliers[0].factor;
  EXPECT_TRUE(a.stragglers.empty());
}

// Windows recorded by every rank: the report replays the live detector over them. Rank 1's
// windows name a cell from the second window to the ninth, with factors 2.85 to 3.2: one cell
// outlier, from the window that started its run to the end (the tenth window is within the exit
// hysteresis), with the median of the factors and the largest (what the live finding keeps); the
// scores are the median of the replayed rounds.
TEST(RunAnalysisTest, ReplaysTheLiveDetectorFromTheRanksWindows) {
  TempDir dir;
  testdata::WindowedRun run;
  run.intervals = 10;
  run.fill = [](int r, int i, RankWindow* w) {
    // Rank 2 is 1.1x the others throughout: below the threshold.
    w->forwardSeconds = (r == 2 ? 1.1 : 1.0) * 1e-3;
    w->backwardSeconds = (r == 2 ? 1.1 : 1.0) * 2e-3;
    if (r == 1 && i >= 1 && i <= 8) {
      w->cellLayer = 1;
      w->cellPhase = Phase::kBackward;
      w->cellKind = OpKind::kSoftmax;
      w->cellFactor = 2.8 + 0.05 * i;  // 2.85 .. 3.2
      w->cellShare = 0.2;
    }
  };
  testdata::writeWindows(dir.path(), run);
  const Analysis a = analyzeDir(dir.path());
  EXPECT_EQ(a.detection, "live_rounds");
  EXPECT_EQ(a.rounds, 10u);
  EXPECT_TRUE(a.stragglers.empty());
  ASSERT_EQ(a.cellOutliers.size(), 1u);
  const analysis::CellOutlier& c = a.cellOutliers[0];
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.layer, "layers.1.attn");
  EXPECT_EQ(c.phase, Phase::kBackward);
  EXPECT_EQ(c.kind, OpKind::kSoftmax);
  EXPECT_DOUBLE_EQ(c.maxFactor, 3.2);
  EXPECT_NEAR(c.factor, (3.0 + 3.05) / 2, 1e-9);  // the median of the eight windows' factors
  EXPECT_EQ(c.windows, 9);                        // windows 2 to 10
  EXPECT_EQ(c.otherRanks, 2);
  EXPECT_EQ(c.steps, 180u);
  // Rank 2 over the median of ranks 0 and 1; ranks 0 and 1 over the median of the other two.
  EXPECT_NEAR(a.ranks[2].score, 1.1, 1e-9);
  EXPECT_NEAR(a.ranks[0].score, 1.0 / 1.05, 1e-9);
  const std::string json = analysis::JsonReport::render(a);
  EXPECT_NE(json.find("\"detection\": \"live_rounds\""), std::string::npos);
  EXPECT_NE(json.find("\"windows\": 9, \"max_factor\": 3.2"), std::string::npos) << json;
}

// A run whose live detector used ATTNSCOPE_CELL_OUTLIER_FACTOR=1.1 named a 1.2x cell on rank 1;
// the report keeps it (it applied its own 1.3 before, and lost the cell), unless a stricter
// --cell-factor is given.
TEST(RunAnalysisTest, TheCellFactorIsTheRunsOwnUnlessOneIsGiven) {
  TempDir dir;
  testdata::WindowedRun run;
  run.intervals = 6;
  run.config = "{\"aggregation\": \"gloo\", \"cell_outlier_factor\": 1.1}";
  run.fill = [](int r, int i, RankWindow* w) {
    w->forwardSeconds = 1e-3;
    w->backwardSeconds = 2e-3;
    if (r == 1 && i >= 1) {
      w->cellLayer = 0;
      w->cellPhase = Phase::kForward;
      w->cellKind = OpKind::kSoftmax;
      w->cellFactor = 1.2;
      w->cellShare = 0.05;
    }
  };
  testdata::writeWindows(dir.path(), run);
  const Analysis a = analyzeDir(dir.path());
  ASSERT_EQ(a.cellOutliers.size(), 1u);
  EXPECT_EQ(a.cellOutliers[0].rank, 1);
  EXPECT_DOUBLE_EQ(a.cellOutliers[0].maxFactor, 1.2);
  analysis::AnalysisOptions strict;
  strict.cellFactor = 1.3;
  EXPECT_TRUE(analyzeDir(dir.path(), nullptr, strict).cellOutliers.empty());
}

// A run at ATTNSCOPE_STRAGGLER_THRESHOLD=1.5 and _WINDOWS=4 whose rank 1 is 1.3x slower: live,
// not a straggler. The report replayed its detector at 1.2 and 3 windows and named rank 1.
TEST(RunAnalysisTest, TheStragglerOptionsAreTheRunsOwnUnlessGiven) {
  TempDir dir;
  testdata::WindowedRun run;
  run.intervals = 8;
  run.config =
      "{\"aggregation\": \"gloo\", \"straggler_threshold\": 1.5, "
      "\"straggler_windows\": 4, \"cell_outlier_min_share\": 0.1}";
  run.callNs = [](int r, int i) -> int64_t { return r == 1 && i < 3 ? 1300 : 1000; };
  run.fill = [](int r, int, RankWindow* w) {
    if (r != 2) return;
    w->cellLayer = 0;
    w->cellPhase = Phase::kForward;
    w->cellKind = OpKind::kSoftmax;
    w->cellFactor = 1.5;
    w->cellShare = 0.05;  // under the run's share, over the default 0.02
  };
  testdata::writeWindows(dir.path(), run);
  const Analysis a = analyzeDir(dir.path());
  EXPECT_DOUBLE_EQ(a.threshold, 1.5);
  EXPECT_TRUE(a.stragglers.empty());
  EXPECT_TRUE(a.cellOutliers.empty());

  analysis::AnalysisOptions given;
  given.threshold = 1.2;
  given.cellMinShare = 0.02;
  Analysis loose = analyzeDir(dir.path(), nullptr, given);
  EXPECT_TRUE(loose.stragglers.empty());  // 3 windows above 1.2, the run's 4 needed
  ASSERT_EQ(loose.cellOutliers.size(), 1u);
  EXPECT_EQ(loose.cellOutliers[0].rank, 2);
  given.minBins = 3;
  loose = analyzeDir(dir.path(), nullptr, given);
  ASSERT_EQ(loose.stragglers.size(), 1u);
  EXPECT_EQ(loose.stragglers[0].rank, 1);
}

// A straggler whose slowdown sags between the exit threshold and the threshold for a few windows
// (1.5x, then 1.15x for 6 s, then 1.5x again) is one episode, as the live detector's hysteresis
// keeps it; scored in time bins of its own, the report split it in two.
TEST(RunAnalysisTest, ASagBetweenTheThresholdsKeepsOneStragglerEpisode) {
  TempDir dir;
  constexpr int kIntervals = 24, kSteps = 20;
  testdata::WindowedRun run;
  run.intervals = kIntervals;
  run.steps = kSteps;
  run.stepSeconds = 0.05;
  run.callNs = [](int r, int i) -> int64_t {
    return r != 1 ? 1000 : (i >= 10 && i < 16 ? 1150 : 1500);
  };
  testdata::writeWindows(dir.path(), run);
  const Analysis a = analyzeDir(dir.path());
  ASSERT_EQ(a.stragglers.size(), 1u);
  const analysis::StragglerEpisode& e = a.stragglers[0];
  EXPECT_EQ(e.rank, 1);
  EXPECT_NEAR(e.maxScore, 1.5, 1e-6);
  // From the run's first window to its last.
  EXPECT_LE(e.startUnix, 1001.0 + 1e-6);
  EXPECT_GE(e.endUnix, 1000.0 + 0.05 * kIntervals * kSteps - 1e-6);
}

TEST(RunAnalysisTest, PerfettoTraceCarriesDistributedInfo) {
  TempDir dir;
  for (int r = 0; r < 2; ++r) testdata::writeRank(dir.path(), r, 2, 2, 2, 10);
  std::vector<analysis::RankTrace> traces;
  const Analysis a = analyzeDir(dir.path(), &traces);
  ASSERT_EQ(traces.size(), 2u);
  const std::string one = analysis::PerfettoTrace::renderRank(traces[1], a);
  EXPECT_NE(
      one.find("\"distributedInfo\": {\"rank\": 1, \"world_size\": 2, \"backend\": \"gloo\"}"),
      std::string::npos);
  EXPECT_NE(one.find("\"name\": \"step 19\""), std::string::npos);
  const std::string all = analysis::PerfettoTrace::renderAll(traces, a);
  EXPECT_NE(all.find("\"distributedInfo\": {\"world_size\": 2, \"ranks\": [0, 1]"),
            std::string::npos);
}

// ---- Roofline ---------------------------------------------------------------------------------

using testdata::rooflineRow;
constexpr Phase kFwd = Phase::kForward;
constexpr Phase kBwd = Phase::kBackward;

// One rank's trace in memory: two layers, the given roofline cells, ceilings 100 GFLOP/s and
// 10 GB/s (ridge 10 flop/B) unless told otherwise.
analysis::RankTrace rooflineRank(int rank, int world, std::vector<TraceRooflineRow> rows,
                                 const std::string& torch = "2.1.0", double peakFlops = 1e11,
                                 double peakBytes = 1e10) {
  analysis::RankTrace t;
  t.path = "rank-" + std::to_string(rank) + ".sqlite";
  t.rank = rank;
  t.worldSize = world;
  t.node = "node" + std::to_string(rank);
  t.intervalSeconds = 1;
  t.startUnix = 1000;
  t.stopUnix = 1010;
  t.layers = testdata::layerNames(2);
  t.meta = {{"format", "attnscope.trace/1"},
            {"torch_version", torch},
            {"peak_flops_per_second", peakFlops > 0 ? std::to_string(peakFlops) : "0"},
            {"peak_bytes_per_second", std::to_string(peakBytes)},
            {"ceiling_source", "calibration"},
            {"ceiling_detail", "float32 mm 1024x1024, best of 5"},
            {"timing", "host"},
            {"cpu_model", "Test CPU @ 2.0GHz"},
            {"cpu_cores", "2"},
            {"torch_threads", "1"},
            {"blas", "libopenblas.so.0 (pthread)"}};
  for (const TraceRooflineRow& r : rows) {
    t.roofline.push_back(r);
    t.rooflineIntervals.push_back(1);
  }
  return t;
}

Analysis analyzeTraces(const std::vector<analysis::RankTrace>& traces,
                       const analysis::AnalysisOptions& options = analysis::AnalysisOptions()) {
  return analysis::analyzeRun("mem", traces, {}, options);
}

const analysis::Recommendation* findRecommendation(const Analysis& a, const std::string& id) {
  for (const analysis::Recommendation& r : a.roofline.recommendations) {
    if (r.id == id) return &r;
  }
  return nullptr;
}

std::string evidence(const analysis::Recommendation& r, const std::string& key) {
  for (const auto& [k, v] : r.evidence) {
    if (k == key) return v;
  }
  return "<no " + key + ">";
}

std::string ids(const Analysis& a) {
  std::string out;
  for (const analysis::Recommendation& r : a.roofline.recommendations) out += r.id + " ";
  return out;
}

const analysis::ReportRooflineCell* findCell(const Analysis& a, const std::string& layer, Phase p,
                                             OpKind k) {
  for (const analysis::ReportRooflineCell& c : a.roofline.cells) {
    if (c.layer == layer && c.phase == p && c.kind == k) return &c;
  }
  return nullptr;
}

// A forward of unfused attention in which each kind takes the given seconds; every kind sits at
// 60% of its roof (100 GFLOP/s, 10 GB/s), matmuls compute-bound in bfloat16 (wide flops 0).
std::vector<TraceRooflineRow> attentionRows(int layer, double qkv, double score, double softmax,
                                            double dropout, double context, double output,
                                            double layout) {
  std::vector<TraceRooflineRow> rows;
  const auto matmul = [&](OpKind k, double s) {  // intensity 50: compute-bound, 6e10 flop/s
    if (s > 0) rows.push_back(rooflineRow(layer, kFwd, k, 10, s, 6e10 * s, 6e10 * s / 50, 0));
  };
  const auto elementwise = [&](OpKind k,
                               double s) {  // intensity 0.5: memory-bound, 3e9 flop/s = 60%
    if (s > 0) rows.push_back(rooflineRow(layer, kFwd, k, 10, s, 3e9 * s, 6e9 * s, 3e9 * s));
  };
  matmul(OpKind::kQkvProjection, qkv);
  matmul(OpKind::kScoreMatmul, score);
  elementwise(OpKind::kSoftmax, softmax);
  elementwise(OpKind::kDropout, dropout);
  matmul(OpKind::kContextMatmul, context);
  matmul(OpKind::kOutputProjection, output);
  if (layout > 0)
    rows.push_back(rooflineRow(layer, kFwd, OpKind::kLayoutCopy, 10, layout, 0, 6e9 * layout));
  return rows;
}

TEST(RunAnalysisTest, RooflinePointsMergeRanksAndWindowsAndClassify) {
  std::vector<analysis::RankTrace> traces;
  // Rank 0: score_matmul in two windows, 2e9 flop and 1e8 bytes in 0.05 s (0.04 s of it modelled);
  // rank 1: the same work in 0.1 s. Softmax memory-bound, a layout copy that moves data only.
  traces.push_back(
      rooflineRank(0, 2,
                   {rooflineRow(1, kFwd, OpKind::kScoreMatmul, 3, 0.03, 1e9, 5e7, 1e9, 0.02),
                    rooflineRow(1, kFwd, OpKind::kScoreMatmul, 3, 0.02, 1e9, 5e7, 1e9, 0.02),
                    rooflineRow(1, kFwd, OpKind::kSoftmax, 3, 0.1, 1e8, 4e8),
                    rooflineRow(0, kBwd, OpKind::kLayoutCopy, 5, 0.05, 0, 1e8)}));
  traces.push_back(rooflineRank(1, 2,
                                {rooflineRow(1, kFwd, OpKind::kScoreMatmul, 6, 0.1, 2e9, 1e8, 2e9),
                                 rooflineRow(1, kFwd, OpKind::kSoftmax, 3, 0.1, 1e8, 4e8),
                                 rooflineRow(0, kBwd, OpKind::kLayoutCopy, 5, 0.05, 0, 1e8)}));
  const Analysis a = analyzeTraces(traces);
  ASSERT_TRUE(a.roofline.present);
  EXPECT_EQ(a.roofline.ceilingRanks, 2);
  EXPECT_DOUBLE_EQ(a.roofline.ceilings.peakFlopsPerSecond, 1e11);
  EXPECT_DOUBLE_EQ(a.roofline.ceilings.ridge(), 10);
  EXPECT_EQ(a.roofline.ceilings.source, "calibration");
  EXPECT_EQ(a.roofline.timing, "host");
  ASSERT_EQ(a.roofline.hardware.size(), 2u);
  EXPECT_EQ(a.roofline.hardware[1].node, "node1");
  EXPECT_EQ(a.roofline.hardware[1].blas, "libopenblas.so.0 (pthread)");
  ASSERT_EQ(a.roofline.cells.size(), 3u);
  // Ordered by layer, phase, kind.
  EXPECT_EQ(a.roofline.cells[0].layer, "layers.0.attn");
  EXPECT_EQ(a.roofline.cells[1].kind, OpKind::kScoreMatmul);
  EXPECT_NEAR(a.roofline.attentionSeconds, 0.05 + 0.1 + 0.2 + 0.1, 1e-12);

  const analysis::ReportRooflineCell* score =
      findCell(a, "layers.1.attn", kFwd, OpKind::kScoreMatmul);
  ASSERT_NE(score, nullptr);
  EXPECT_EQ(score->ops, 12u);
  EXPECT_DOUBLE_EQ(score->flops, 4e9);
  EXPECT_DOUBLE_EQ(score->seconds, 0.15);
  EXPECT_DOUBLE_EQ(score->modelledSeconds, 0.14);
  EXPECT_EQ(score->point.bound, Bound::kCompute);  // 20 flop/B, ridge 10
  EXPECT_NEAR(score->point.intensity, 20, 1e-9);
  EXPECT_NEAR(score->point.fraction, 4e9 / 0.14 / 1e11, 1e-9);  // the rates divide by modelled time
  ASSERT_EQ(score->rankFraction.size(), 2u);
  EXPECT_NEAR(score->rankFraction[0], 2e9 / 0.04 / 1e11, 1e-9);
  EXPECT_NEAR(score->rankFraction[1], 2e9 / 0.1 / 1e11, 1e-9);

  const analysis::ReportRooflineCell* softmax =
      findCell(a, "layers.1.attn", kFwd, OpKind::kSoftmax);
  ASSERT_NE(softmax, nullptr);
  EXPECT_EQ(softmax->point.bound, Bound::kMemory);  // 0.25 flop/B
  EXPECT_NEAR(softmax->point.fraction, (2e8 / 0.2) / (0.25 * 1e10), 1e-9);

  const analysis::ReportRooflineCell* copy =
      findCell(a, "layers.0.attn", kBwd, OpKind::kLayoutCopy);
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(copy->point.bound, Bound::kMemory);
  EXPECT_NEAR(copy->point.fraction, (2e8 / 0.1) / 1e10,
              1e-9);  // bytes per second over the bandwidth
}

TEST(RunAnalysisTest, RunCeilingsAreTheMedianOfTheRanksThatHaveThem) {
  std::vector<analysis::RankTrace> traces;
  const auto rows = attentionRows(0, 0.1, 0.1, 0.1, 0, 0.1, 0.1, 0);
  traces.push_back(rooflineRank(0, 3, rows, "2.1.0", 1e11, 1e10));
  traces.push_back(rooflineRank(1, 3, rows, "2.1.0", 2e11, 3e10));
  traces.push_back(rooflineRank(2, 3, rows, "2.1.0", 0, 0));  // unknown: left out
  const Analysis a = analyzeTraces(traces);
  EXPECT_EQ(a.roofline.ceilingRanks, 2);
  EXPECT_DOUBLE_EQ(a.roofline.ceilings.peakFlopsPerSecond, 1.5e11);
  EXPECT_DOUBLE_EQ(a.roofline.ceilings.peakBytesPerSecond, 2e10);
  EXPECT_FALSE(a.roofline.hardware[2].ceilings.known());
  for (const analysis::ReportRooflineCell& c : a.roofline.cells) {
    EXPECT_TRUE(std::isnan(c.rankFraction[2])) << "a rank without ceilings has no fraction";
    EXPECT_TRUE(std::isfinite(c.rankFraction[0]));
  }
}

TEST(RunAnalysisTest, UnfusedAttentionIsRecommendedWithTheTorchVersionsFusedKernel) {
  // softmax + dropout + layout copies: 0.4 of 1.0 s forward (above 30%).
  const auto rows = attentionRows(0, 0.2, 0.1, 0.2, 0.1, 0.1, 0.2, 0.1);
  {
    const Analysis a = analyzeTraces(
        {rooflineRank(0, 2, rows, "1.13.1+cpu"), rooflineRank(1, 2, rows, "1.13.1+cpu")});
    const analysis::Recommendation* r = findRecommendation(a, "unfused_attention");
    ASSERT_NE(r, nullptr);
    EXPECT_NE(
        r->suggestion.find(
            "This torch (1.13) has no fused attention kernel for training; torch >= 2.0's "
            "torch.nn.functional.scaled_dot_product_attention (used by nn.MultiheadAttention) "
            "fuses scores, masking, softmax, dropout and context"),
        std::string::npos)
        << r->suggestion;
    EXPECT_EQ(evidence(*r, "softmax share of forward"), "20%");
    EXPECT_EQ(evidence(*r, "dropout share of forward"), "10%");
    EXPECT_EQ(evidence(*r, "layout_copy share of forward"), "10%");
    EXPECT_EQ(evidence(*r, "forward attention op time"), "2.00 s");
    EXPECT_EQ(evidence(*r, "torch version"), "1.13.1+cpu");
    EXPECT_NEAR(r->impact, 0.4, 1e-9);
    EXPECT_EQ(r->layers, std::vector<std::string>{"layers.0.attn"});
  }
  {
    const Analysis a = analyzeTraces({rooflineRank(0, 1, rows, "2.1.0")});
    const analysis::Recommendation* r = findRecommendation(a, "unfused_attention");
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->suggestion.rfind("Use torch.nn.functional.scaled_dot_product_attention", 0), 0u)
        << r->suggestion;
  }
  // Not without the evidence: the same parts at 20% of forward...
  {
    const Analysis a =
        analyzeTraces({rooflineRank(0, 1, attentionRows(0, 0.3, 0.1, 0.1, 0.05, 0.1, 0.3, 0.05))});
    EXPECT_EQ(findRecommendation(a, "unfused_attention"), nullptr);
  }
  // ...or a fused attention kernel that ran.
  {
    auto fused = rows;
    fused.push_back(rooflineRow(1, kFwd, OpKind::kFusedAttention, 10, 0.1, 6e9, 6e9 / 50, 0));
    const Analysis a = analyzeTraces({rooflineRank(0, 1, fused)});
    EXPECT_EQ(findRecommendation(a, "unfused_attention"), nullptr);
  }
}

TEST(RunAnalysisTest, LowerPrecisionIsRecommendedForComputeBoundFloat32Matmuls) {
  // Softmax etc. small, so only the matmuls matter; qkv in float32, compute-bound.
  auto rows = attentionRows(0, 0, 0.1, 0.02, 0, 0.1, 0.1, 0);
  rows.push_back(
      rooflineRow(0, kFwd, OpKind::kQkvProjection, 10, 0.3, 1.8e10, 1.8e10 / 50, 1.8e10));
  rows.push_back(
      rooflineRow(0, kBwd, OpKind::kQkvProjection, 10, 0.3, 1.8e10, 1.8e10 / 50, 1.2e10));
  {
    const Analysis a = analyzeTraces({rooflineRank(0, 1, rows)});
    const analysis::Recommendation* r = findRecommendation(a, "lower_precision");
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(evidence(*r, "kind"), "qkv_projection");
    EXPECT_EQ(evidence(*r, "bound"), "compute");
    EXPECT_EQ(evidence(*r, "intensity"), "50 flop/B");
    EXPECT_EQ(evidence(*r, "ridge"), "10 flop/B");
    EXPECT_EQ(evidence(*r, "fraction of roof"), "60%");
    EXPECT_EQ(evidence(*r, "float32/float64 share of flops"), "83%");
    EXPECT_EQ(evidence(*r, "achieved"), "60.0 GFLOP/s of 100 GFLOP/s");
    EXPECT_NE(r->suggestion.find(R"(torch.autocast(device_type="cpu", dtype=torch.bfloat16))"),
              std::string::npos);
    EXPECT_NEAR(r->impact, 0.6 / 0.92, 1e-9);
  }
  // Not when the float32 share is below half...
  {
    auto low = rows;
    low[low.size() - 2].wideFlops = 0.2e10;
    low[low.size() - 1].wideFlops = 0.2e10;
    EXPECT_EQ(findRecommendation(analyzeTraces({rooflineRank(0, 1, low)}), "lower_precision"),
              nullptr);
  }
  // ...nor when the float32 matmul is memory-bound (intensity 5, ridge 10).
  {
    auto memory = rows;
    memory[memory.size() - 2].bytes = 1.8e10 / 5;
    memory[memory.size() - 1].bytes = 1.8e10 / 5;
    const Analysis a = analyzeTraces({rooflineRank(0, 1, memory)});
    ASSERT_EQ(findCell(a, "layers.0.attn", kFwd, OpKind::kQkvProjection)->point.bound,
              Bound::kMemory);
    EXPECT_EQ(findRecommendation(a, "lower_precision"), nullptr);
  }
}

TEST(RunAnalysisTest, RankBelowItsCeilingIsNamedWithItsNode) {
  // Three ranks with the same shapes; rank 2's score matmul takes 2.5x as long: 24% of its roof
  // against 60% on the others (below 0.7 x 60%).
  const auto rows = attentionRows(0, 0.1, 0.1, 0.02, 0, 0.1, 0.1, 0);
  auto slow = rows;
  for (TraceRooflineRow& r : slow) {
    if (r.kind == OpKind::kScoreMatmul) r.seconds = r.modelledSeconds = 0.25;
  }
  {
    const Analysis a = analyzeTraces(
        {rooflineRank(0, 3, rows), rooflineRank(1, 3, rows), rooflineRank(2, 3, slow)});
    ASSERT_EQ(a.roofline.recommendations.size(), 1u) << ids(a);
    const analysis::Recommendation& r = a.roofline.recommendations[0];
    EXPECT_EQ(r.id, "rank_below_ceiling");
    EXPECT_EQ(r.ranks, std::vector<int>{2});
    EXPECT_EQ(evidence(r, "rank"), "2");
    EXPECT_EQ(evidence(r, "node"), "node2");
    EXPECT_EQ(evidence(r, "layer"), "layers.0.attn");
    EXPECT_EQ(evidence(r, "kind"), "score_matmul");
    EXPECT_EQ(evidence(r, "its fraction of its roof"), "24%");
    EXPECT_EQ(evidence(r, "other ranks' median"), "60%");
    EXPECT_EQ(evidence(r, "cells below"), "1 of 5");
    EXPECT_NE(r.suggestion.find(
                  "A hardware or placement problem on rank 2 (node node2): thermal throttling"),
              std::string::npos);
  }
  // Not at 0.75 of the others (45% of its roof against 60%)...
  {
    auto mild = rows;
    for (TraceRooflineRow& r : mild) {
      if (r.kind == OpKind::kScoreMatmul) r.seconds = r.modelledSeconds = 0.1 / 0.75;
    }
    const Analysis a = analyzeTraces(
        {rooflineRank(0, 3, rows), rooflineRank(1, 3, rows), rooflineRank(2, 3, mild)});
    EXPECT_EQ(findRecommendation(a, "rank_below_ceiling"), nullptr);
  }
  // ...nor when the other ranks disagree (two slow ranks of three: nobody to blame).
  {
    const Analysis a = analyzeTraces(
        {rooflineRank(0, 3, rows), rooflineRank(1, 3, slow), rooflineRank(2, 3, slow)});
    EXPECT_EQ(findRecommendation(a, "rank_below_ceiling"), nullptr);
  }
  // ...nor with one rank.
  EXPECT_EQ(findRecommendation(analyzeTraces({rooflineRank(0, 1, slow)}), "rank_below_ceiling"),
            nullptr);
}

TEST(RunAnalysisTest, MemoryBoundKindFarBelowItsRoofIsRecommended) {
  // Layout copies: 20% of attention time at 10% of the bandwidth (1 GB/s of 10 GB/s).
  auto rows = attentionRows(0, 0.3, 0.1, 0.05, 0, 0.1, 0.25, 0);
  rows.push_back(rooflineRow(1, kBwd, OpKind::kLayoutCopy, 10, 0.15, 0, 1.5e8));
  rows.push_back(rooflineRow(0, kFwd, OpKind::kLayoutCopy, 10, 0.05, 0, 0.5e8));
  {
    const Analysis a = analyzeTraces({rooflineRank(0, 1, rows)});
    ASSERT_EQ(a.roofline.recommendations.size(), 1u) << ids(a);
    const analysis::Recommendation& r = a.roofline.recommendations[0];
    EXPECT_EQ(r.id, "memory_bound_far_below");
    EXPECT_EQ(evidence(r, "kind"), "layout_copy");
    EXPECT_EQ(evidence(r, "share of attention time"), "20%");
    EXPECT_EQ(evidence(r, "bound"), "memory");
    EXPECT_EQ(evidence(r, "achieved"), "1.00 GB/s of 10.0 GB/s");
    EXPECT_EQ(evidence(r, "fraction of roof"), "10%");
    EXPECT_EQ(r.layers, (std::vector<std::string>{"layers.0.attn", "layers.1.attn"}));
    EXPECT_NE(r.suggestion.find(".contiguous()"), std::string::npos);
  }
  // Not at 30% of the bandwidth...
  {
    auto fast = rows;
    fast[fast.size() - 2].bytes *= 3;
    fast[fast.size() - 1].bytes *= 3;
    EXPECT_EQ(
        findRecommendation(analyzeTraces({rooflineRank(0, 1, fast)}), "memory_bound_far_below"),
        nullptr);
  }
  // ...nor at 5% of the attention time.
  {
    auto small = rows;
    small.pop_back();
    small.back().seconds = small.back().modelledSeconds = 0.04;
    small.back().bytes = 0.4e8;
    EXPECT_EQ(
        findRecommendation(analyzeTraces({rooflineRank(0, 1, small)}), "memory_bound_far_below"),
        nullptr);
  }
}

TEST(RunAnalysisTest, RecommendationsAreSortedByImpactAndReportedInHtmlAndJson) {
  // Unfused attention (softmax, dropout, copies: 0.4 of 0.95 s) and lower precision for the float32
  // projections (qkv and output: 0.35 of 0.95 s), on two layers and two ranks.
  auto rows = attentionRows(0, 0.2, 0.1, 0.2, 0.1, 0.1, 0.15, 0.1);
  for (TraceRooflineRow& r : rows) {
    if (r.kind == OpKind::kQkvProjection || r.kind == OpKind::kOutputProjection)
      r.wideFlops = r.flops;
  }
  auto second = rows;
  for (TraceRooflineRow& r : second) r.layer = 1;
  rows.insert(rows.end(), second.begin(), second.end());
  const Analysis a =
      analyzeTraces({rooflineRank(0, 2, rows, "1.13.1"), rooflineRank(1, 2, rows, "1.13.1")});
  ASSERT_EQ(a.roofline.recommendations.size(), 2u) << ids(a);
  EXPECT_EQ(a.roofline.recommendations[0].id, "unfused_attention");
  EXPECT_NEAR(a.roofline.recommendations[0].impact, 0.4 / 0.95, 1e-9);
  EXPECT_EQ(a.roofline.recommendations[1].id, "lower_precision");
  EXPECT_NEAR(a.roofline.recommendations[1].impact, 0.35 / 0.95, 1e-9);

  const std::string html = analysis::HtmlReport::render(a);
  // One roofline plot per kind that computes (6 here; layout_copy moves data only: table only).
  size_t plots = 0;
  for (size_t pos = html.find(R"(<svg class="roofline")"); pos != std::string::npos;
       pos = html.find(R"(<svg class="roofline")", pos + 1)) {
    ++plots;
  }
  EXPECT_EQ(plots, 6u);
  EXPECT_NE(html.find(R"(<svg class="roofline" data-kind="softmax")"), std::string::npos);
  EXPECT_EQ(html.find(R"(data-kind="layout_copy")"), std::string::npos);
  // Per plot: one point per (layer, phase): 2 layers, forward only.
  const size_t soft = html.find(R"(data-kind="softmax")");
  const size_t softEnd = html.find("</svg>", soft);
  size_t points = 0;
  for (size_t pos = html.find(R"(class="roofline-point")", soft); pos < softEnd;
       pos = html.find(R"(class="roofline-point")", pos + 1)) {
    ++points;
  }
  EXPECT_EQ(points, 2u);
  EXPECT_NE(html.find("<title>layers.1.attn forward softmax"), std::string::npos);
  EXPECT_NE(html.find("<h2>Roofline</h2>"), std::string::npos);
  EXPECT_NE(html.find("Recommendations"), std::string::npos);
  EXPECT_NE(html.find(R"(class="recommendation" id="rec-unfused_attention")"), std::string::npos);
  EXPECT_LT(html.find("rec-unfused_attention"), html.find("rec-lower_precision"));
  EXPECT_NE(html.find("Test CPU @ 2.0GHz"), std::string::npos);

  const std::string json = analysis::JsonReport::render(a);
  EXPECT_NE(json.find(R"("roofline": {)"), std::string::npos);
  EXPECT_NE(json.find(R"("peak_flops_per_second": 1e+11)"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("id": "unfused_attention")"), std::string::npos);
  EXPECT_LT(json.find(R"("id": "unfused_attention")"), json.find(R"("id": "lower_precision")"));
  EXPECT_NE(json.find(R"("softmax share of forward": "21%")"), std::string::npos);
  EXPECT_NE(
      json.find(R"({"layer": "layers.0.attn", "phase": "forward", "kind": "softmax", "ops": 20)"),
      std::string::npos)
      << json;
}

TEST(RunAnalysisTest, AbsurdRooflineFiguresAreReportedWithoutHangingOrInfinities) {
  // Finite values the reader lets through, whose rates overflow, and absurd ceilings.
  auto t = rooflineRank(0, 1,
                        {rooflineRow(0, kFwd, OpKind::kSoftmax, 1, 1e-300, 1e300, 1e-300),
                         rooflineRow(0, kBwd, OpKind::kSoftmax, 1, 1e-3, 1e6, 1e6)},
                        "x.y", 1e-300, 1e300);
  Analysis a = analyzeTraces({t});
  EXPECT_FALSE(a.roofline.ceilings.known()) << "ceilings outside 1 to 1e21 per second are unknown";
  std::string html = analysis::HtmlReport::render(a);
  EXPECT_NE(html.find(R"(data-kind="softmax")"), std::string::npos);
  t.meta["peak_flops_per_second"] = "1e21";
  t.meta["peak_bytes_per_second"] = "1";
  a = analyzeTraces({t});
  ASSERT_TRUE(a.roofline.ceilings.known());
  html = analysis::HtmlReport::render(a);
  EXPECT_NE(html.find("class=\"roof-compute\""), std::string::npos);
  EXPECT_EQ(analysis::JsonReport::render(a).find("inf"), std::string::npos);
}

TEST(RunAnalysisTest, TracesWithoutRooflineSayItInOneLine) {
  TempDir dir;
  for (int r = 0; r < 2; ++r) testdata::writeRank(dir.path(), r, 2, 2, 2, 10);
  const Analysis a = analyzeDir(dir.path());
  EXPECT_FALSE(a.roofline.present);
  EXPECT_TRUE(a.roofline.cells.empty());
  EXPECT_TRUE(a.roofline.recommendations.empty());
  const std::string html = analysis::HtmlReport::render(a);
  EXPECT_NE(html.find(R"(<p id="roofline-none">No roofline data in these traces)"),
            std::string::npos);
  EXPECT_EQ(html.find(R"(<svg class="roofline")"), std::string::npos);
  EXPECT_NE(analysis::JsonReport::render(a).find(R"("roofline": {"present": false)"),
            std::string::npos);
}

}  // namespace
}  // namespace attnscope
