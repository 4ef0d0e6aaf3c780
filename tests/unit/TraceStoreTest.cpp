// Unit tests of the per-rank trace store: what is written reads back, bytes per step, the size
// cap, a writer killed mid-commit, and write failures (unwritable directory, file size limit).

#include "attnscope/trace/TraceStore.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "TraceTestData.h"
#include "attnscope/analysis/TraceReader.h"

namespace attnscope {
namespace {

using testdata::TempDir;

int64_t fileSize(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : 0;
}

TEST(TraceStoreTest, WhatIsCommittedReadsBack) {
  TempDir dir;
  testdata::writeRank(dir.path(), 1, 4, 3, /*intervals=*/3, /*steps=*/50);
  analysis::RankTrace t;
  std::string error;
  ASSERT_TRUE(analysis::readRankTrace(dir.file("rank-1.sqlite"), &t, &error)) << error;
  EXPECT_EQ(t.rank, 1);
  EXPECT_EQ(t.worldSize, 4);
  EXPECT_EQ(t.node, "testhost");
  EXPECT_EQ(t.intervalSeconds, 1.0);
  EXPECT_GT(t.stopUnix, 1000.0);
  EXPECT_EQ(t.layers, testdata::layerNames(3));
  ASSERT_EQ(t.steps.size(), 150u);
  EXPECT_EQ(t.steps.front().step, 0u);
  EXPECT_EQ(t.steps.back().step, 149u);
  EXPECT_DOUBLE_EQ(t.steps[10].endUnix, 1000.0 + 0.11);
  EXPECT_EQ(t.steps[10].stepNs, 10000000);
  const std::vector<TraceCall> expected = testdata::stepCalls(3, 1010);
  ASSERT_EQ(t.steps[10].calls.size(), expected.size());
  EXPECT_NEAR(t.steps[10].calls[3].ns, expected[3].ns, expected[3].ns * 4e-4);
  ASSERT_EQ(t.windows.size(), 3u);
  EXPECT_EQ(t.windows[2].interval, 3u);
  EXPECT_EQ(t.windows[2].window.lastStep, 150u);
  EXPECT_EQ(t.badSteps, 0u);
}

TEST(TraceStoreTest, RooflineRowsAndHardwareMetaReadBackUnderTheWindowsInterval) {
  TempDir dir;
  std::string error;
  auto store = TraceStore::open(dir.path(), 0, 64 << 20, &error);
  ASSERT_NE(store, nullptr) << error;
  TraceInterval in;
  in.meta = testdata::meta(0, 1);
  for (const auto& kv : std::vector<std::pair<std::string, std::string>>{
           {"peak_flops_per_second", "1.25e+11"},
           {"peak_bytes_per_second", "2e+10"},
           {"ceiling_source", "calibration"},
           {"ceiling_detail", "float32 mm 1024x1024, best of 5"},
           {"timing", "host"},
           {"cpu_model", "Test CPU"},
           {"cpu_cores", "2"},
           {"torch_threads", "1"},
           {"blas", "libopenblas.so.0 (pthread)"}}) {
    in.meta.push_back(kv);
  }
  in.layerNames = testdata::layerNames(2);
  in.haveWindow = true;
  in.roofline.push_back(
      testdata::rooflineRow(0, Phase::kForward, OpKind::kScoreMatmul, 12, 0.5, 3e9, 1e8, 2e9, 0.4));
  in.roofline.push_back(
      testdata::rooflineRow(1, Phase::kBackward, OpKind::kLayoutCopy, 7, 0.25, 0, 5e7));
  ASSERT_TRUE(store->commit(in, &error)) << error;  // interval 1
  in.meta.clear();
  in.roofline = {testdata::rooflineRow(0, Phase::kRecompute, OpKind::kSoftmax, 3, 0.125, 1e6, 4e6)};
  ASSERT_TRUE(store->commit(in, &error)) << error;  // interval 2
  store.reset();
  analysis::RankTrace t;
  ASSERT_TRUE(analysis::readRankTrace(dir.file("rank-0.sqlite"), &t, &error)) << error;
  ASSERT_EQ(t.windows.size(), 2u);
  ASSERT_EQ(t.roofline.size(), 3u);
  ASSERT_EQ(t.rooflineIntervals, (std::vector<uint64_t>{1, 1, 2}));
  EXPECT_EQ(t.windows[1].interval, 2u);
  const TraceRooflineRow& a = t.roofline[0];
  EXPECT_EQ(a.layer, 0);
  EXPECT_EQ(a.phase, Phase::kForward);
  EXPECT_EQ(a.kind, OpKind::kScoreMatmul);
  EXPECT_EQ(a.ops, 12u);
  EXPECT_DOUBLE_EQ(a.seconds, 0.5);
  EXPECT_DOUBLE_EQ(a.modelledSeconds, 0.4);
  EXPECT_DOUBLE_EQ(a.flops, 3e9);
  EXPECT_DOUBLE_EQ(a.bytes, 1e8);
  EXPECT_DOUBLE_EQ(a.wideFlops, 2e9);
  EXPECT_EQ(t.roofline[1].kind, OpKind::kLayoutCopy);
  EXPECT_EQ(t.roofline[1].phase, Phase::kBackward);
  EXPECT_EQ(t.roofline[1].flops, 0.0);
  EXPECT_EQ(t.roofline[2].phase, Phase::kRecompute);
  EXPECT_EQ(t.badRooflineRows, 0u);
  EXPECT_EQ(t.meta["peak_flops_per_second"], "1.25e+11");
  EXPECT_EQ(t.meta["ceiling_source"], "calibration");
  EXPECT_EQ(t.meta["blas"], "libopenblas.so.0 (pthread)");
}

TEST(TraceStoreTest, FindingsAndRoundsOfRankZeroAreKept) {
  TempDir dir;
  std::string error;
  auto store = TraceStore::open(dir.path(), 0, 64 << 20, &error);
  ASSERT_NE(store, nullptr) << error;
  TraceInterval in;
  in.meta = testdata::meta(0, 2);
  in.haveRound = true;
  in.roundUnix = 1001;
  in.round.round = 7;
  in.round.ranks.resize(2);
  in.round.ranks[1].rank = 1;
  in.round.ranks[1].present = true;
  in.round.ranks[1].score = 1.6;
  in.round.ranks[1].straggler = true;
  DetectorEpisode f;
  f.rank = 1;
  f.firstRound = 5;
  f.lastRound = 7;
  f.maxScore = 1.6;
  f.layer = "layers.1.attn";
  f.kind = OpKind::kSoftmax;
  f.description = "rank 1: 1.60x median attention time";
  in.stragglers.push_back(f);
  DetectorEpisode cell = f;  // the same rank's cell outlier, from round 6
  cell.firstRound = 6;
  cell.maxScore = 2.1;
  cell.phase = Phase::kBackward;
  cell.description = "rank 1: cell outlier layers.1.attn backward softmax";
  in.cellOutliers.push_back(cell);
  ASSERT_TRUE(store->commit(in, &error)) << error;
  in.stragglers[0].lastRound = 9;  // the episode goes on: the same row is updated
  ASSERT_TRUE(store->commit(in, &error)) << error;
  store.reset();
  analysis::RankTrace t;
  ASSERT_TRUE(analysis::readRankTrace(dir.file("rank-0.sqlite"), &t, &error)) << error;
  ASSERT_EQ(t.findings.size(), 2u);  // by first round
  EXPECT_EQ(t.findings[1].kind, "cell_outlier");
  EXPECT_EQ(t.findings[1].phase, "backward");
  EXPECT_EQ(t.findings[1].opKind, "softmax");
  EXPECT_DOUBLE_EQ(t.findings[1].maxScore, 2.1);
  EXPECT_EQ(t.findings[0].kind, "straggler");
  EXPECT_EQ(t.findings[0].lastRound, 9u);
  EXPECT_EQ(t.findings[0].layer, "layers.1.attn");
  EXPECT_EQ(t.findings[0].phase, "forward");
  EXPECT_EQ(t.findings[0].opKind, "softmax");
  ASSERT_EQ(t.rounds.size(), 2u);
  EXPECT_EQ(t.rounds[1].round, 7u);
  EXPECT_DOUBLE_EQ(t.rounds[1].score, 1.6);
  EXPECT_TRUE(t.rounds[1].straggler);
}

// The figure docs/ANALYSIS.md quotes: a 4-layer model, forward and backward, 7 op kinds each.
TEST(TraceStoreTest, BytesPerSampledStepStayWithin64PerLayerPhase) {
  TempDir dir;
  const int layers = 4, steps = 4000;
  testdata::writeRank(dir.path(), 0, 1, layers, /*intervals=*/40, steps / 40);
  const double bytes = static_cast<double>(fileSize(dir.file("rank-0.sqlite")));
  const double perLayerPhase = bytes / steps / (layers * 2);
  std::printf(
      "trace store: %.0f bytes for %d steps of %d layer-phases: %.1f bytes per layer-phase per "
      "step\n",
      bytes, steps, layers * 2, perLayerPhase);
  RecordProperty("bytes_per_layer_phase", std::to_string(perLayerPhase));
  EXPECT_LE(perLayerPhase, 64.0);
  EXPECT_GE(perLayerPhase, 44.0) << "below the record's own size: the file cannot hold every step";
}

TEST(TraceStoreTest, SizeCapKeepsTheNewestStepsAndEveryWindow) {
  TempDir dir;
  std::string error;
  const int64_t cap = 1 << 20;
  auto store = TraceStore::open(dir.path(), 0, cap, &error);
  ASSERT_NE(store, nullptr) << error;
  uint64_t step = 0;
  const int intervals = 100, perInterval = 100;  // ~4 MB of step records
  for (int i = 0; i < intervals; ++i) {
    TraceInterval in;
    in.layerNames = testdata::layerNames(4);
    if (i == 0) in.meta = testdata::meta(0, 1);
    for (int s = 0; s < perInterval; ++s, ++step) {
      in.steps.push_back(
          testdata::encoded(step, 1000 + step * 0.01, 10000000, testdata::stepCalls(4, 1000)));
    }
    in.haveWindow = true;
    ASSERT_TRUE(store->commit(in, &error)) << error;
    // The main file stays near the cap; the write-ahead log adds up to a quarter of it.
    EXPECT_LE(store->fileBytes(), cap * 3 / 2) << "after interval " << i;
  }
  EXPECT_GT(store->stepsTrimmed(), 0u);
  store.reset();
  EXPECT_LE(fileSize(dir.file("rank-0.sqlite")), cap * 11 / 10);
  analysis::RankTrace t;
  ASSERT_TRUE(analysis::readRankTrace(dir.file("rank-0.sqlite"), &t, &error)) << error;
  EXPECT_EQ(t.windows.size(), static_cast<size_t>(intervals));
  ASSERT_FALSE(t.steps.empty());
  EXPECT_EQ(t.steps.back().step, step - 1);
  EXPECT_GT(t.steps.front().step, 0u);
  EXPECT_EQ(t.steps.size(), t.steps.back().step - t.steps.front().step + 1)
      << "kept steps are contiguous";
  EXPECT_GT(t.steps.size(), 1000u) << "the cap should still hold a good share of steps";
}

// Rank 0's per-round scores grow with the world size: past the cap the oldest rounds go, the newest
// round, every window and the findings stay.
TEST(TraceStoreTest, SizeCapTrimsRankZeroRoundsButKeepsTheNewestAndEveryWindow) {
  TempDir dir;
  std::string error;
  const int64_t cap = 1 << 20;
  auto store = TraceStore::open(dir.path(), 0, cap, &error);
  ASSERT_NE(store, nullptr) << error;
  const int world = 256, intervals = 200;  // ~12 KB of scores per round, ~2.5 MB in all
  for (int i = 1; i <= intervals; ++i) {
    TraceInterval in;
    if (i == 1) in.meta = testdata::meta(0, world);
    in.haveWindow = true;
    in.haveRound = true;
    in.round.round = static_cast<uint64_t>(i);
    in.round.ranks.resize(world);
    for (int r = 0; r < world; ++r) {
      in.round.ranks[r].rank = r;
      in.round.ranks[r].present = true;
      in.round.ranks[r].score = 1.0 + r * 1e-3;
    }
    DetectorEpisode f;
    f.rank = 7;
    f.firstRound = 1;
    f.lastRound = static_cast<uint64_t>(i);
    in.stragglers.push_back(f);
    ASSERT_TRUE(store->commit(in, &error)) << error;
  }
  store.reset();
  EXPECT_LE(fileSize(dir.file("rank-0.sqlite")), cap * 11 / 10);
  analysis::RankTrace t;
  ASSERT_TRUE(analysis::readRankTrace(dir.file("rank-0.sqlite"), &t, &error)) << error;
  EXPECT_EQ(t.windows.size(), static_cast<size_t>(intervals));
  ASSERT_FALSE(t.rounds.empty());
  EXPECT_EQ(t.rounds.back().round, static_cast<uint64_t>(intervals));
  EXPECT_GT(t.rounds.front().round, 1u) << "the oldest rounds should have been trimmed";
  EXPECT_EQ(t.rounds.size() % world, 0u) << "a round is kept or dropped whole";
  ASSERT_EQ(t.findings.size(), 1u);
  EXPECT_EQ(t.findings[0].lastRound, static_cast<uint64_t>(intervals));
}

// A writer killed while a commit is in progress: every earlier interval reads back whole, the
// interrupted one not at all (or whole, if its commit finished first).
TEST(TraceStoreTest, WriterKilledMidCommitLosesAtMostTheOpenInterval) {
  TempDir dir;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const int small = 20, large = 200000;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::string error;
    auto store = TraceStore::open(dir.path(), 3, int64_t{1} << 30, &error);
    if (!store) ::_exit(1);
    uint64_t step = 0;
    for (int i = 0; i < 6; ++i) {
      TraceInterval in;
      in.layerNames = testdata::layerNames(2);
      if (i == 0) in.meta = testdata::meta(3, 4);
      const int n = i == 5 ? large : small;
      for (int s = 0; s < n; ++s, ++step) {
        in.steps.push_back(
            testdata::encoded(step, 1000 + step * 0.01, 1000, testdata::stepCalls(2, 1000)));
      }
      in.haveWindow = true;
      if (i == 5) (void)!::write(ready[1], "x", 1);  // the parent kills us during this commit
      if (!store->commit(in, &error)) ::_exit(2);
    }
    ::_exit(0);
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::usleep(20000);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the writer finished before the kill; status " << status;
  analysis::RankTrace t;
  std::string error;
  ASSERT_TRUE(analysis::readRankTrace(dir.file("rank-3.sqlite"), &t, &error)) << error;
  EXPECT_EQ(t.stopUnix, 0.0) << "no clean stop recorded";
  if (t.windows.size() == 5) {
    EXPECT_EQ(t.steps.size(), static_cast<size_t>(5 * small));
  } else {
    EXPECT_EQ(t.windows.size(), 6u);
    EXPECT_EQ(t.steps.size(), static_cast<size_t>(5 * small + large));
  }
  std::printf("killed writer: %zu intervals, %zu steps read back\n", t.windows.size(),
              t.steps.size());
}

TEST(TraceStoreTest, DirectoryThatCannotBeCreatedIsAnError) {
  TempDir dir;
  const std::string file = dir.file("plain");
  std::ofstream(file) << "x";
  std::string error;
  EXPECT_EQ(TraceStore::open(file + "/traces", 0, 1 << 20, &error), nullptr);
  EXPECT_EQ(error, "cannot create directory " + file + "/traces: Not a directory");
  EXPECT_EQ(TraceStore::open(file, 0, 1 << 20, &error), nullptr);
  EXPECT_EQ(error, file + " is not a directory");
}

TEST(TraceStoreTest, MissingDirectoriesAreCreated) {
  TempDir dir;
  std::string error;
  auto store = TraceStore::open(dir.path() + "/a/b/c", 2, 1 << 20, &error);
  ASSERT_NE(store, nullptr) << error;
  EXPECT_EQ(store->path(), dir.path() + "/a/b/c/rank-2.sqlite");
}

// A full disk, made with the file size limit: the commit fails with an error, the store stays
// usable, and commits succeed again once there is room.
TEST(TraceStoreTest, WriteFailureIsReportedAndTheStoreRecovers) {
  TempDir dir;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    std::string error;
    auto store = TraceStore::open(dir.path(), 0, 1 << 30, &error);
    if (!store) ::_exit(10);
    const auto interval = [](uint64_t first, int n) {
      TraceInterval in;
      if (first == 0) in.meta = testdata::meta(0, 1);
      in.layerNames = testdata::layerNames(4);
      for (int s = 0; s < n; ++s) {
        in.steps.push_back(testdata::encoded(first + s, 1000, 1000, testdata::stepCalls(4, 1000)));
      }
      in.haveWindow = true;
      return in;
    };
    if (!store->commit(interval(0, 10), &error)) ::_exit(11);
    rlimit limit{};
    ::getrlimit(RLIMIT_FSIZE, &limit);
    const rlimit small{static_cast<rlim_t>(store->fileBytes() + 8192), limit.rlim_max};
    ::setrlimit(RLIMIT_FSIZE, &small);
    if (store->commit(interval(10, 5000), &error)) ::_exit(12);  // ~2 MB cannot fit
    if (error.find("rank-0.sqlite") == std::string::npos) ::_exit(13);
    std::fprintf(stderr, "commit failed as expected: %s\n", error.c_str());
    ::setrlimit(RLIMIT_FSIZE, &limit);
    if (!store->commit(interval(10, 5000), &error)) ::_exit(14);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see the child's exit code in the test";
  analysis::RankTrace t;
  std::string error;
  ASSERT_TRUE(analysis::readRankTrace(dir.file("rank-0.sqlite"), &t, &error)) << error;
  EXPECT_EQ(t.windows.size(), 2u) << "the failed interval was rolled back, the retry committed";
  EXPECT_EQ(t.steps.size(), 5010u);
}

}  // namespace
}  // namespace attnscope
