// The reporter on Fakes (FakeRoundSource for the session, FakeAggregator over a FakeGroup and a
// FakeKeyValueStore for the rest of the job): collective rounds, degraded rounds through the store,
// a rank going missing and coming back, straggler episodes, control generations and trace commits.
// No LibTorch is linked (ctest ReporterTest.links_no_libtorch checks the binary). Every wait is
// for a condition, bounded by a deadline; nothing depends on how fast a round runs.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>

#include <unistd.h>

#include "FakeAggregator.h"
#include "FakeRoundSource.h"
#include "attnscope/reporter/Reporter.h"

namespace attnscope {
namespace detail {
namespace {

template <class Predicate>
bool eventually(Predicate done, std::chrono::seconds deadline = std::chrono::seconds(60)) {
  const auto end = std::chrono::steady_clock::now() + deadline;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

Config testConfig() {
  Config c;
  c.intervalSeconds = 0.1;  // the smallest allowed
  c.roundTimeoutSeconds = 1;
  c.port = 0;  // no /metrics endpoint
  c.aggregation = Aggregation::kGloo;
  c.stragglerThreshold = 1.2;
  c.stragglerWindows = 2;
  return c;
}

Topology world(int rank, int size) {
  Topology t;
  t.rank = rank;
  t.worldSize = size;
  t.localWorldSize = size;
  t.node = "testhost";
  return t;
}

AggregatorFactory fake(const std::shared_ptr<FakeGroup>& group) {
  return [group](std::string*) { return std::make_unique<FakeAggregator>(group); };
}

std::string windowBytes(const RankWindow& w) {
  const std::vector<double> v = w.toVector();
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double));
}

std::string beatAt(double offsetSeconds) {
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return std::to_string(now + offsetSeconds);
}

uint64_t forwardCalls(const StatsTable& t) {
  if (t.layers().empty() || !t.layers()[0].phases[0]) return 0;
  return t.layers()[0].phases[0]->call.seconds.count();
}

TEST(ReporterTest, CollectiveRoundsMergeEveryRanksStatistics) {
  FakeRoundSource source;
  auto group = std::make_shared<FakeGroup>(0, 2);
  Reporter reporter(source, testConfig(), world(0, 2), fake(group));
  ASSERT_TRUE(eventually([&] { return group->windowGathers() >= 3; }));
  ASSERT_TRUE(reporter.stop());
  const ClusterReport report = reporter.report();
  EXPECT_EQ(report.aggregation, "fake");
  EXPECT_FALSE(report.degraded);
  EXPECT_EQ(report.roundErrors, 0u);
  // Every window went through one all-gather and, the layers agreeing, one all-reduce.
  EXPECT_EQ(source.windows(), group->windowGathers());
  EXPECT_EQ(group->reduces(), group->windowGathers());
  EXPECT_EQ(report.collectiveRounds, static_cast<uint64_t>(group->windowGathers()));
  EXPECT_EQ(report.rounds, report.collectiveRounds);
  // Both ranks' calls of every round: 2 ranks x calls per window x rounds.
  EXPECT_EQ(forwardCalls(report.stats),
            2u * static_cast<uint64_t>(source.callsPerWindow) * report.collectiveRounds);
  EXPECT_EQ(report.last.presentRanks, 2);
  EXPECT_TRUE(report.stragglers.empty());
  EXPECT_TRUE(report.hangs.empty());
}

TEST(ReporterTest, StragglerEpisodeOpensAndCloses) {
  FakeRoundSource source;
  auto group = std::make_shared<FakeGroup>(0, 3);
  // Rank 1 takes three times as long in the first six rounds.
  group->peerWindow = [](const RankWindow& mine, int r, int round) {
    RankWindow w = mine;
    if (r == 1 && round < 6) w.forwardSeconds *= 3;
    return w;
  };
  Reporter reporter(source, testConfig(), world(0, 3), fake(group));
  ASSERT_TRUE(eventually([&] { return group->windowGathers() >= 10; }));
  ASSERT_TRUE(reporter.stop());
  const ClusterReport report = reporter.report();
  ASSERT_EQ(report.stragglers.size(), 1u);
  const DetectorEpisode& f = report.stragglers[0];
  EXPECT_EQ(f.rank, 1);
  // A straggler from the second slow window (ATTNSCOPE_STRAGGLER_WINDOWS=2) until the third window
  // back at 1x (ATTNSCOPE_STRAGGLER_EXIT_WINDOWS, default 3): rounds 7 and 8 keep it, 9 ends it.
  EXPECT_EQ(f.firstRound, 2u);
  EXPECT_EQ(f.lastRound, 8u);
  EXPECT_DOUBLE_EQ(f.maxScore, 3.0);
  EXPECT_NE(f.description.find("rank 1"), std::string::npos) << f.description;
  EXPECT_FALSE(report.last.ranks[1].straggler);
  EXPECT_TRUE(report.hangs.empty());
}

// A rank's cell goes out with the window it was found in: each window is compared with the other
// ranks' of the window before. Here the fake all-reduce makes the others' window equal to this
// rank's, so the first slow window (3x) is the only one that differs from the others' before it;
// a cell that travelled one window behind (compared within its window, sent with the next) would
// never show.
TEST(ReporterTest, ACellGoesOutWithTheWindowItWasFoundIn) {
  FakeRoundSource source;
  source.slowFrom = 3;
  auto group = std::make_shared<FakeGroup>(0, 4);
  std::mutex mutex;
  std::vector<RankWindow> sent;  // rank 0's window of each all-gather
  group->peerWindow = [&](const RankWindow& mine, int r, int) {
    if (r == 1) {
      std::lock_guard<std::mutex> lock(mutex);
      sent.push_back(mine);
    }
    return mine;
  };
  Reporter reporter(source, testConfig(), world(0, 4), fake(group));
  ASSERT_TRUE(eventually([&] { return group->windowGathers() >= 6; }));
  ASSERT_TRUE(reporter.stop());
  std::lock_guard<std::mutex> lock(mutex);
  int named = 0;
  for (const RankWindow& w : sent) {
    if (w.sampledSteps == 0) continue;
    const uint64_t window = w.lastStep / source.stepsPerWindow - 1;  // 0-based
    if (window == 3) {
      ++named;
      EXPECT_EQ(w.cellLayer, 0);
      EXPECT_EQ(w.cellPhase, Phase::kForward);
      EXPECT_EQ(w.cellKind, OpKind::kSoftmax);
      EXPECT_NEAR(w.cellFactor, 3.0, 3.0 * 2 * LogHistogram::kRelativeError);
      EXPECT_EQ(w.topLayer, 0);
    } else {
      EXPECT_EQ(w.cellLayer, -1) << "window " << window;
    }
  }
  EXPECT_EQ(named, 1);
}

TEST(ReporterTest, ControlGenerationsAreAppliedOnceEach) {
  FakeRoundSource source;
  auto group = std::make_shared<FakeGroup>(1, 2);
  // Rank 0 carries /control's requests in its window: generation 1, then 2, each for rounds.
  group->peerWindow = [](const RankWindow& mine, int r, int round) {
    RankWindow w = mine;
    if (r != 0) return w;
    w.controlGeneration = round < 3 ? 1 : 2;
    w.controlPaused = round < 3;
    w.controlSampleEvery = round < 3 ? 4 : 2;
    return w;
  };
  Reporter reporter(source, testConfig(), world(1, 2), fake(group));
  ASSERT_TRUE(eventually([&] { return group->windowGathers() >= 6; }));
  ASSERT_TRUE(reporter.stop());
  const std::vector<std::pair<bool, int64_t>> expected = {{true, 4}, {false, 2}};
  EXPECT_EQ(source.applied(), expected);
}

TEST(ReporterTest, FailedCollectiveDegradesToRoundsThroughTheStore) {
  FakeRoundSource source;
  auto group = std::make_shared<FakeGroup>(0, 2);
  group->store = std::make_shared<FakeKeyValueStore>();
  group->failAtWindowGather = 2;
  RankWindow peer;
  peer.rank = 1;
  peer.present = true;
  peer.steps = peer.sampledSteps = 4;
  peer.forwardSeconds = 0.002;  // like this rank's: 8 calls of 1 ms over 4 steps
  group->store->setPeerKey("w/1", windowBytes(peer));
  // Dated an hour ahead: alive in every round, however long a round takes.
  group->store->setPeerKey("hb/1", beatAt(3600));
  Reporter reporter(source, testConfig(), world(0, 2), fake(group));

  ASSERT_TRUE(eventually([&] { return reporter.report().rounds >= 5; }));
  ClusterReport report = reporter.report();
  EXPECT_TRUE(report.degraded);
  EXPECT_GE(report.roundErrors, 1u);
  EXPECT_EQ(report.lastError, group->failure);
  EXPECT_EQ(report.collectiveRounds, 2u);
  EXPECT_EQ(group->windowGathers(), 3);  // none after the failed one
  EXPECT_GE(group->store->sets("w/0"), 1);
  EXPECT_GE(group->store->sets("hb/0"), 1);
  EXPECT_TRUE(report.last.ranks[1].present);
  EXPECT_TRUE(report.hangs.empty());

  // Rank 1's heartbeat an hour old: missing from the next round on, a hang episode opens.
  group->store->setPeerKey("hb/1", beatAt(-3600));
  ASSERT_TRUE(eventually([&] { return reporter.report().last.ranks[1].missing; }));
  report = reporter.report();
  ASSERT_EQ(report.hangs.size(), 1u);
  EXPECT_EQ(report.hangs[0].rank, 1);
  EXPECT_EQ(report.last.missing, std::vector<int32_t>{1});

  // Back: present again, the episode ends at the last round it was missing.
  group->store->setPeerKey("hb/1", beatAt(3600));
  ASSERT_TRUE(eventually([&] {
    const ClusterReport r = reporter.report();
    return r.last.ranks[1].present && r.rounds > r.hangs.at(0).lastRound + 1;
  }));
  ASSERT_TRUE(reporter.stop());
  report = reporter.report();
  ASSERT_EQ(report.hangs.size(), 1u);
  EXPECT_LT(report.hangs[0].lastRound, report.rounds);
  EXPECT_FALSE(report.last.ranks[1].missing);
}

TEST(ReporterTest, WithoutAStoreRoundsStopAfterAFailure) {
  FakeRoundSource source;
  auto group = std::make_shared<FakeGroup>(0, 2);  // no store, as MPI
  group->failAtWindowGather = 1;
  Reporter reporter(source, testConfig(), world(0, 2), fake(group));
  ASSERT_TRUE(eventually([&] { return reporter.report().degraded; }));
  const uint64_t rounds = reporter.report().rounds;
  const int windows = source.windows();
  // The reporter goes on taking windows (the per-rank figures), but no round concludes.
  ASSERT_TRUE(eventually([&] { return source.windows() >= windows + 3; }));
  ASSERT_TRUE(reporter.stop());
  const ClusterReport report = reporter.report();
  EXPECT_EQ(report.rounds, rounds);
  EXPECT_EQ(report.collectiveRounds, 1u);
  EXPECT_EQ(group->windowGathers(), 2);
}

TEST(ReporterTest, TraceIsCommittedBeforeACollectiveThatDoesNotReturn) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("attnscope-reporter-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  FakeRoundSource source;
  for (uint64_t step = 0; step < 3; ++step) source.queueTraceStep(step);
  auto group = std::make_shared<FakeGroup>(0, 2);
  group->holdAtWindowGather = 0;  // the first round's all-gather waits on a peer
  Config config = testConfig();
  config.traceDir = dir.string();
  Reporter reporter(source, config, world(0, 2), fake(group));
  ASSERT_TRUE(eventually([&] { return group->holding(); }));
  TraceStoreStats stats = reporter.traceStats();
  EXPECT_TRUE(stats.open);
  EXPECT_EQ(stats.commits, 2u);  // the metadata at start, then the round's window and steps
  EXPECT_EQ(stats.stepsWritten, 3u);
  EXPECT_EQ(stats.errors, 0u);

  source.queueTraceStep(3);
  source.queueTraceStep(4);
  group->release();
  ASSERT_TRUE(reporter.stop());
  stats = reporter.traceStats();
  EXPECT_EQ(stats.stepsWritten, 5u);
  EXPECT_EQ(stats.errors, 0u);
  EXPECT_GT(stats.fileBytes, 0);
  EXPECT_TRUE(std::filesystem::exists(dir / TraceStore::fileName(0)));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace detail
}  // namespace attnscope
