#include "attnscope/core/StragglerDetector.h"

#include "attnscope/core/StragglerEpisodes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace attnscope {
namespace {

// A present rank's report: `attention` seconds per sampled step, split 1:2 forward/backward.
RankWindow window(int32_t rank, double attention, uint64_t lastStep = 0,
                  uint32_t sampledSteps = 1) {
  RankWindow w;
  w.rank = rank;
  w.present = true;
  w.lastStep = lastStep;
  w.steps = sampledSteps;
  w.sampledSteps = sampledSteps;
  w.windowSeconds = 10;
  w.forwardSeconds = attention / 3;
  w.backwardSeconds = attention - w.forwardSeconds;
  return w;
}

RankWindow absent(int32_t rank) {
  RankWindow w;
  w.rank = rank;
  return w;
}

// `n` ranks at 1.0s, except `slow` at `slowAttention`.
std::vector<RankWindow> roundOf(int n, int slow, double slowAttention, uint32_t slowSampled = 1) {
  std::vector<RankWindow> v;
  for (int r = 0; r < n; ++r) {
    v.push_back(r == slow ? window(r, slowAttention, 0, slowSampled) : window(r, 1.0));
  }
  return v;
}

void expectSameWindow(const RankWindow& a, const RankWindow& b) {
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.present, b.present);
  EXPECT_EQ(a.lastStep, b.lastStep);
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_EQ(a.sampledSteps, b.sampledSteps);
  EXPECT_EQ(a.windowSeconds, b.windowSeconds);
  EXPECT_EQ(a.forwardSeconds, b.forwardSeconds);
  EXPECT_EQ(a.backwardSeconds, b.backwardSeconds);
  EXPECT_EQ(a.stepSeconds, b.stepSeconds);
  EXPECT_EQ(a.peakBytes, b.peakBytes);
  EXPECT_EQ(a.collectiveWaitSeconds, b.collectiveWaitSeconds);
  EXPECT_EQ(a.layersChecksum, b.layersChecksum);
  EXPECT_EQ(a.numLayers, b.numLayers);
  EXPECT_EQ(a.topLayer, b.topLayer);
  EXPECT_EQ(a.topPhase, b.topPhase);
  EXPECT_EQ(a.topKind, b.topKind);
  EXPECT_EQ(a.topShare, b.topShare);
  EXPECT_EQ(a.controlGeneration, b.controlGeneration);
  EXPECT_EQ(a.controlPaused, b.controlPaused);
  EXPECT_EQ(a.controlSampleEvery, b.controlSampleEvery);
  EXPECT_EQ(a.cellLayer, b.cellLayer);
  EXPECT_EQ(a.cellPhase, b.cellPhase);
  EXPECT_EQ(a.cellKind, b.cellKind);
  EXPECT_EQ(a.cellFactor, b.cellFactor);
  EXPECT_EQ(a.cellShare, b.cellShare);
}

TEST(StragglerDetectorTest, VectorRoundTripKeepsEveryField) {
  RankWindow w;
  w.rank = 7;
  w.present = true;
  w.lastStep = (uint64_t{1} << 53) - 1;
  w.steps = 40;
  w.sampledSteps = 4;
  w.windowSeconds = 30.25;
  w.forwardSeconds = 0.0123;
  w.backwardSeconds = 0.0456;
  w.stepSeconds = 0.75;
  w.peakBytes = int64_t{3} << 40;
  w.collectiveWaitSeconds = 0.002;
  w.layersChecksum = 0xDEADBEEFu;
  w.numLayers = 48;
  w.topLayer = 17;
  w.topPhase = Phase::kRecompute;
  w.topKind = OpKind::kContextMatmul;
  w.topShare = 0.61;
  w.controlGeneration = 12;
  w.controlPaused = true;
  w.controlSampleEvery = 250;
  w.cellLayer = 3;
  w.cellPhase = Phase::kBackward;
  w.cellKind = OpKind::kSoftmax;
  w.cellFactor = 2.1;
  w.cellShare = 0.06;
  const std::vector<double> v = w.toVector();
  ASSERT_EQ(v.size(), RankWindow::kVectorSize);
  EXPECT_EQ(v[0], 7.0);   // declaration order: rank first
  EXPECT_EQ(v[1], 1.0);   // present as 1
  EXPECT_EQ(v[14], 2.0);  // topPhase as its integer value
  EXPECT_EQ(v[15], static_cast<double>(static_cast<int>(OpKind::kContextMatmul)));
  expectSameWindow(RankWindow::fromVector(v.data()), w);

  const RankWindow defaults;
  const std::vector<double> d = defaults.toVector();
  ASSERT_EQ(d.size(), RankWindow::kVectorSize);
  EXPECT_EQ(d[1], 0.0);
  expectSameWindow(RankWindow::fromVector(d.data()), defaults);
}

TEST(StragglerDetectorTest, ControlSampleRateFromACorruptVectorIsClamped) {
  std::vector<double> v = RankWindow().toVector();
  v[19] = 0;  // controlSampleEvery
  EXPECT_EQ(RankWindow::fromVector(v.data()).controlSampleEvery, 1);
  v[19] = 1e12;
  EXPECT_EQ(RankWindow::fromVector(v.data()).controlSampleEvery, 1000000);
}

TEST(StragglerDetectorTest, MedianOfAnOddCount) {
  StragglerDetector d(3, StragglerOptions{});
  const ClusterRound& c = d.update({window(0, 1.0), window(1, 2.0), window(2, 10.0)}, 0);
  EXPECT_DOUBLE_EQ(c.medianAttentionSeconds, 2.0);
  EXPECT_DOUBLE_EQ(c.ranks[0].score, 1.0 / 6.0);  // over the others' median, (2 + 10) / 2
  EXPECT_DOUBLE_EQ(c.ranks[2].score, 10.0 / 1.5);
}

TEST(StragglerDetectorTest, MedianOfAnEvenCountIsTheMeanOfTheMiddleTwo) {
  StragglerDetector d(4, StragglerOptions{});
  const ClusterRound& c =
      d.update({window(0, 10.0), window(1, 2.0), window(2, 1.0), window(3, 3.0)}, 0);
  EXPECT_DOUBLE_EQ(c.medianAttentionSeconds, 2.5);
  EXPECT_DOUBLE_EQ(c.ranks[0].score, 5.0);  // the others: 1, 2, 3
  EXPECT_DOUBLE_EQ(c.ranks[3].score, 1.5);  // 3 over the others' 2 (10, 2, 1)
}

TEST(StragglerDetectorTest, WithTwoRanksTheSlowRankScoresTheWholeRatio) {
  // The median of both ranks would halve the difference (3 / 2 = 1.5); the other rank's is 3.
  StragglerDetector d(2, StragglerOptions{});
  const ClusterRound& c = d.update({window(0, 1.0), window(1, 3.0)}, 0);
  EXPECT_DOUBLE_EQ(c.ranks[1].score, 3.0);
  EXPECT_DOUBLE_EQ(c.ranks[0].score, 1.0 / 3.0);
}

TEST(StragglerDetectorTest, ARankAloneHasNobodyToBeSlowerThan) {
  StragglerDetector d(2, StragglerOptions{});
  RankWindow gone = window(1, 5.0);
  gone.present = false;
  const ClusterRound& c = d.update({window(0, 2.0), gone}, 0);
  EXPECT_EQ(c.ranks[0].score, 1.0);  // neutral, as in a world of one
  EXPECT_EQ(c.ranks[0].consecutive, 0);
}

TEST(StragglerDetectorTest, EqualTimesScoreOneWhicheverCopyIsLeftOut) {
  StragglerDetector d(5, StragglerOptions{});
  const ClusterRound& c =
      d.update({window(0, 2.0), window(1, 2.0), window(2, 2.0), window(3, 1.0), window(4, 9.0)}, 0);
  for (int r = 0; r < 3; ++r) EXPECT_DOUBLE_EQ(c.ranks[r].score, 1.0) << r;  // others 1, 2, 2, 9
  EXPECT_DOUBLE_EQ(c.ranks[3].score, 0.5);                                   // others 2, 2, 2, 9
  EXPECT_DOUBLE_EQ(c.ranks[4].score, 4.5);                                   // others 1, 2, 2, 2
}

TEST(StragglerDetectorTest, MedianSkipsAbsentAndUnsampledRanks) {
  StragglerDetector d(5, StragglerOptions{});
  RankWindow gone = window(3, 100.0);
  gone.present = false;
  const ClusterRound& c = d.update(
      {window(0, 1.0), window(1, 2.0), window(2, 3.0), gone, window(4, 100.0, 0, /*sampled=*/0)},
      0);
  EXPECT_DOUBLE_EQ(c.medianAttentionSeconds, 2.0);  // over 1, 2, 3 only
  EXPECT_EQ(c.presentRanks, 4);
  EXPECT_EQ(c.expectedRanks, 5);
  EXPECT_DOUBLE_EQ(c.ranks[2].score, 2.0);  // 3 over the others' 1.5
  EXPECT_EQ(c.ranks[4].score, 0.0);         // no sampled step: no score
  EXPECT_EQ(c.ranks[3].score, 0.0);
}

TEST(StragglerDetectorTest, ZeroMedianGivesZeroScores) {
  StragglerDetector d(3, StragglerOptions{});
  const ClusterRound& c = d.update({window(0, 0.0), window(1, 0.0), window(2, 5.0)}, 0);
  EXPECT_EQ(c.medianAttentionSeconds, 0.0);
  EXPECT_EQ(c.ranks[2].score, 0.0);
  EXPECT_EQ(c.ranks[2].consecutive, 0);
}

TEST(StragglerDetectorTest, BecomesAStragglerExactlyOnTheThirdSlowWindow) {
  StragglerOptions o;
  o.threshold = 1.2;
  o.windows = 3;
  StragglerDetector d(4, o);
  for (int i = 1; i <= 2; ++i) {
    const ClusterRound& c = d.update(roundOf(4, 2, 1.5), i);
    EXPECT_DOUBLE_EQ(c.ranks[2].score, 1.5);
    EXPECT_EQ(c.ranks[2].consecutive, i);
    EXPECT_FALSE(c.ranks[2].straggler) << "window " << i;
    EXPECT_TRUE(c.stragglers.empty());
  }
  const ClusterRound& c = d.update(roundOf(4, 2, 1.5), 3);
  EXPECT_EQ(c.round, 3u);
  EXPECT_EQ(c.ranks[2].consecutive, 3);
  EXPECT_TRUE(c.ranks[2].straggler);
  EXPECT_EQ(c.stragglers, std::vector<int32_t>{2});
  for (int r : {0, 1, 3}) EXPECT_FALSE(c.ranks[r].straggler);
  EXPECT_EQ(&d.last(), &c);
}

TEST(StragglerDetectorTest, AWindowAtOrBelowTheThresholdResetsTheCount) {
  StragglerDetector d(4, StragglerOptions{});
  d.update(roundOf(4, 1, 1.5), 1);
  d.update(roundOf(4, 1, 1.5), 2);
  EXPECT_EQ(d.update(roundOf(4, 1, 1.1), 3).ranks[1].consecutive, 0);
  const ClusterRound& c = d.update(roundOf(4, 1, 1.5), 4);
  EXPECT_EQ(c.ranks[1].consecutive, 1);
  EXPECT_FALSE(c.ranks[1].straggler);
  d.update(roundOf(4, 1, 1.5), 5);
  EXPECT_EQ(d.update(roundOf(4, 1, 1.2), 6).ranks[1].consecutive, 0);  // exactly at: resets too
  d.update(roundOf(4, 1, 1.5), 7);
  d.update(roundOf(4, 1, 1.5), 8);
  EXPECT_TRUE(d.update(roundOf(4, 1, 1.5), 9).ranks[1].straggler);
  const ClusterRound& back = d.update(roundOf(4, 1, 1.0), 10);
  EXPECT_FALSE(back.ranks[1].straggler);  // recovers at once
  EXPECT_TRUE(back.stragglers.empty());
}

// The defaults of ATTNSCOPE_STRAGGLER_EXIT_THRESHOLD (halfway: 1.1) and _EXIT_WINDOWS (3).
StragglerOptions withHysteresis() {
  StragglerOptions o;
  o.exitThreshold = 1.1;
  o.exitWindows = 3;
  return o;
}

TEST(StragglerDetectorTest, HysteresisKeepsOneEpisodeThroughADip) {
  StragglerDetector d(4, withHysteresis());
  for (int i = 1; i <= 3; ++i) d.update(roundOf(4, 1, 1.5), i);
  ASSERT_TRUE(d.last().ranks[1].straggler);
  // One window at 1.0, two between the thresholds: still one straggler, the count of windows at
  // or below the exit threshold reset by the windows above it.
  EXPECT_TRUE(d.update(roundOf(4, 1, 1.0), 4).ranks[1].straggler);
  EXPECT_EQ(d.last().ranks[1].below, 1);
  EXPECT_TRUE(d.update(roundOf(4, 1, 1.15), 5).ranks[1].straggler);
  EXPECT_EQ(d.last().ranks[1].below, 0);
  EXPECT_TRUE(d.update(roundOf(4, 1, 1.15), 6).ranks[1].straggler);
  EXPECT_EQ(d.last().ranks[1].consecutive, 6);  // windows since it became one... and before
  // Three windows at or below 1.1 end it, on the third.
  EXPECT_TRUE(d.update(roundOf(4, 1, 1.1), 7).ranks[1].straggler);
  EXPECT_TRUE(d.update(roundOf(4, 1, 1.0), 8).ranks[1].straggler);
  const ClusterRound& over = d.update(roundOf(4, 1, 1.05), 9);
  EXPECT_FALSE(over.ranks[1].straggler);
  EXPECT_EQ(over.ranks[1].consecutive, 0);
  // Becoming one again takes the full entry count.
  d.update(roundOf(4, 1, 1.5), 10);
  EXPECT_FALSE(d.update(roundOf(4, 1, 1.5), 11).ranks[1].straggler);
  EXPECT_TRUE(d.update(roundOf(4, 1, 1.5), 12).ranks[1].straggler);
}

TEST(StragglerDetectorTest, WithoutHysteresisOneDipEndsTheEpisode) {
  StragglerOptions o;  // exit threshold = threshold, one exit window: the detector before 1.1
  StragglerDetector d(4, o);
  for (int i = 1; i <= 3; ++i) d.update(roundOf(4, 1, 1.5), i);
  EXPECT_FALSE(d.update(roundOf(4, 1, 1.15), 4).ranks[1].straggler);
}

TEST(StragglerDetectorTest, ACellOutlierIsFlaggedAfterTheSameCellInWindowsRounds) {
  StragglerDetector d(4, withHysteresis());
  const auto round = [](int32_t layer, OpKind kind) {
    std::vector<RankWindow> v = roundOf(4, -1, 1.0);
    v[2].cellLayer = layer;
    v[2].cellKind = kind;
    v[2].cellFactor = 2.1;
    v[2].cellShare = 0.06;
    return v;
  };
  d.update(round(1, OpKind::kSoftmax), 1);
  d.update(round(1, OpKind::kSoftmax), 2);
  // Another cell restarts the count; the rank is never a straggler (score 1).
  EXPECT_EQ(d.update(round(1, OpKind::kDropout), 3).ranks[2].cellConsecutive, 1);
  d.update(round(1, OpKind::kSoftmax), 4);
  d.update(round(1, OpKind::kSoftmax), 5);
  const ClusterRound& c = d.update(round(1, OpKind::kSoftmax), 6);
  EXPECT_TRUE(c.ranks[2].cellOutlier);
  EXPECT_FALSE(c.ranks[2].straggler);
  for (int r : {0, 1, 3}) EXPECT_FALSE(c.ranks[r].cellOutlier);
  EXPECT_EQ(StragglerDetector::describeCell(c.ranks[2], {"a", "b"}),
            "rank 2: cell outlier b forward softmax, 2.10x the other ranks' time for it (+6% on "
            "the layer's forward time) for 3 windows");
  // Hysteresis: two windows without it (or naming another cell) keep it; the third clears it.
  EXPECT_TRUE(d.update(round(-1, OpKind::kOther), 7).ranks[2].cellOutlier);
  const ClusterRound& other = d.update(round(0, OpKind::kDropout), 8);
  EXPECT_TRUE(other.ranks[2].cellOutlier);
  EXPECT_EQ(other.ranks[2].cellKind, OpKind::kSoftmax);  // the flagged cell, not the window's
  EXPECT_TRUE(d.update(round(1, OpKind::kSoftmax), 9).ranks[2].cellOutlier);  // named again
  for (int i = 10; i < 12; ++i)
    EXPECT_TRUE(d.update(round(-1, OpKind::kOther), i).ranks[2].cellOutlier);
  const ClusterRound& gone = d.update(round(-1, OpKind::kOther), 12);
  EXPECT_FALSE(gone.ranks[2].cellOutlier);
  EXPECT_EQ(gone.ranks[2].cellLayer, -1);
}

// A rank's CellHold, fed its own windows, holds exactly what rank 0's detector holds for it: the
// cell named in `windows` scored windows in a row, until `exitWindows` scored misses; windows too
// short to score leave both alone.
TEST(StragglerDetectorTest, ARanksCellHoldMirrorsTheDetector) {
  StragglerOptions options;
  options.windows = 3;
  options.exitWindows = 3;
  options.minSampledSteps = 3;
  StragglerDetector detector(2, options);
  CellHold hold(options);
  std::mt19937 random(7);
  int heldRounds = 0, changes = 0;
  bool wasHeld = false;
  int pick = 0;  // none, or one of three cells: it changes now and then, and is named 3 times in 4
  for (int i = 0; i < 400; ++i) {
    std::vector<RankWindow> round = {window(0, 1.0, i + 1, 20), window(1, 1.0, i + 1, 20)};
    RankWindow& mine = round[0];
    if (random() % 10 == 0) mine.sampledSteps = mine.steps = 1;  // unscored
    if (random() % 8 == 0) pick = static_cast<int>(random() % 4);
    if (pick > 0 && random() % 4 != 0) {
      mine.cellLayer = pick;
      mine.cellKind = pick == 3 ? OpKind::kSoftmax : OpKind::kQkvProjection;
      mine.cellFactor = 1.5;
    }
    hold.observe(mine);
    const RankStatus& s = detector.update(round, i).ranks[0];
    ASSERT_EQ(hold.held(), s.cellActive) << "round " << i;
    if (s.cellActive) {
      ++heldRounds;
      EXPECT_EQ(hold.keep().layer, s.cellLayer);
      EXPECT_EQ(hold.keep().kind, s.cellKind);
    } else {
      EXPECT_EQ(hold.keep().layer, mine.cellLayer);
    }
    changes += s.cellActive != wasHeld;
    wasHeld = s.cellActive;
  }
  // The sequence exercised both sides, several times.
  EXPECT_GT(heldRounds, 20);
  EXPECT_GT(changes, 6);
}

TEST(StragglerDetectorTest, AWindowWithoutASampledStepLeavesTheCountAlone) {
  StragglerDetector d(4, StragglerOptions{});
  d.update(roundOf(4, 0, 1.5), 1);
  d.update(roundOf(4, 0, 1.5), 2);
  const ClusterRound& unsampled = d.update(roundOf(4, 0, 0.1, /*sampled=*/0), 3);
  EXPECT_EQ(unsampled.ranks[0].consecutive, 2);
  EXPECT_EQ(unsampled.ranks[0].score, 0.0);
  EXPECT_FALSE(unsampled.ranks[0].straggler);
  std::vector<RankWindow> gone = roundOf(4, 0, 1.5);
  gone[0] = absent(0);
  EXPECT_EQ(d.update(gone, 4).ranks[0].consecutive, 2);  // an absent window neither
  const ClusterRound& c = d.update(roundOf(4, 0, 1.5), 5);
  EXPECT_EQ(c.ranks[0].consecutive, 3);
  EXPECT_TRUE(c.ranks[0].straggler);
}

TEST(StragglerDetectorTest, NoStragglerAmongEightRanksWithTenPercentNoise) {
  StragglerDetector d(8, StragglerOptions{});
  std::mt19937 rng(20240521);
  std::uniform_real_distribution<double> noise(0.9, 1.1);
  double maxScore = 0;
  for (int i = 1; i <= 500; ++i) {
    std::vector<RankWindow> v;
    for (int r = 0; r < 8; ++r) v.push_back(window(r, 0.05 * noise(rng), i));
    const ClusterRound& c = d.update(v, i);
    ASSERT_TRUE(c.stragglers.empty()) << "window " << i;
    ASSERT_TRUE(c.hung.empty()) << "window " << i;
    for (const RankStatus& s : c.ranks) {
      ASSERT_LT(s.consecutive, 3);
      maxScore = std::max(maxScore, s.score);
    }
  }
  EXPECT_EQ(d.last().round, 500u);
  EXPECT_GT(maxScore, 1.05);  // the noise did reach the scores
}

TEST(StragglerDetectorTest, MissingRanksAndTheirReturn) {
  StragglerDetector d(3, StragglerOptions{});
  ClusterRound c = d.update({window(0, 1.0, 10), window(1, 1.0, 10), absent(2)}, 1);
  EXPECT_EQ(c.presentRanks, 2);
  EXPECT_EQ(c.expectedRanks, 3);
  EXPECT_TRUE(c.ranks[2].missing);
  EXPECT_EQ(c.ranks[2].missingSinceRound, 1u);  // never seen: missing since the first round
  EXPECT_EQ(c.missing, std::vector<int32_t>{2});

  c = d.update({window(0, 1.0, 20), window(1, 1.0, 20), window(2, 1.0, 20)}, 2);
  EXPECT_TRUE(c.missing.empty());
  EXPECT_FALSE(c.ranks[2].missing);
  EXPECT_EQ(c.ranks[2].missingSinceRound, 0u);

  c = d.update({window(0, 1.0, 30), absent(1), window(2, 1.0, 30)}, 3);
  EXPECT_FALSE(c.ranks[1].present);
  EXPECT_TRUE(c.ranks[1].missing);
  EXPECT_EQ(c.ranks[1].missingSinceRound, 3u);
  EXPECT_EQ(c.missing, std::vector<int32_t>{1});
  // The last report received is kept, not the absent one.
  EXPECT_TRUE(c.ranks[1].window.present);
  EXPECT_EQ(c.ranks[1].window.lastStep, 20u);
  EXPECT_EQ(c.ranks[1].lastStep, 20u);

  c = d.update({window(0, 1.0, 40), absent(1), absent(2)}, 4);
  EXPECT_EQ(c.ranks[1].missingSinceRound, 3u);  // kept while it stays missing
  EXPECT_EQ(c.ranks[2].missingSinceRound, 4u);
  EXPECT_EQ(c.missing, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(c.presentRanks, 1);

  c = d.update({window(0, 1.0, 50), window(1, 1.0, 50), window(2, 1.0, 50)}, 5);
  EXPECT_FALSE(c.ranks[1].missing);
  EXPECT_EQ(c.ranks[1].missingSinceRound, 0u);
  EXPECT_EQ(c.ranks[1].window.lastStep, 50u);
  EXPECT_TRUE(c.missing.empty());

  c = d.update({window(0, 1.0, 60), absent(1), window(2, 1.0, 60)}, 6);
  EXPECT_EQ(c.ranks[1].missingSinceRound, 6u);  // a new absence starts anew
}

TEST(StragglerDetectorTest, AShortReportListCountsTheRestAsMissing) {
  StragglerDetector d(3, StragglerOptions{});
  const ClusterRound& c = d.update({window(0, 1.0)}, 0);
  EXPECT_EQ(c.ranks.size(), 3u);
  EXPECT_EQ(c.presentRanks, 1);
  EXPECT_EQ(c.missing, (std::vector<int32_t>{1, 2}));
}

TEST(StragglerDetectorTest, AStalledRankIsHungOnlyAfterHangSecondsWhileOthersMove) {
  StragglerOptions o;
  o.hangSeconds = 300;
  StragglerDetector d(3, o);
  auto at = [](uint64_t step0, uint64_t step1, uint64_t step2) {
    return std::vector<RankWindow>{window(0, 1.0, step0), window(1, 1.0, step1),
                                   window(2, 1.0, step2)};
  };
  d.update(at(100, 100, 100), 1000);
  for (int i = 1; i <= 4; ++i) {  // t = 1060 .. 1240: rank 1 stays at step 100
    const ClusterRound& c = d.update(at(100 + i, 100, 100 + i), 1000 + 60 * i);
    EXPECT_FALSE(c.ranks[1].hung) << "t=" << 1000 + 60 * i;
    EXPECT_DOUBLE_EQ(c.ranks[1].stalledSeconds, 60.0 * i);
    EXPECT_EQ(c.ranks[0].stalledSeconds, 0.0);
  }
  ClusterRound c = d.update(at(110, 100, 110), 1299);
  EXPECT_FALSE(c.ranks[1].hung);
  c = d.update(at(111, 100, 111), 1300);
  EXPECT_TRUE(c.ranks[1].hung);
  EXPECT_DOUBLE_EQ(c.ranks[1].stalledSeconds, 300.0);
  EXPECT_EQ(c.ranks[1].lastStep, 100u);
  EXPECT_EQ(c.hung, std::vector<int32_t>{1});
  EXPECT_FALSE(c.ranks[0].hung);
  EXPECT_FALSE(c.ranks[2].hung);

  c = d.update(at(112, 101, 112), 1360);  // moves again
  EXPECT_FALSE(c.ranks[1].hung);
  EXPECT_EQ(c.ranks[1].stalledSeconds, 0.0);
  EXPECT_TRUE(c.hung.empty());
}

TEST(StragglerDetectorTest, NobodyIsHungWhenEveryRankIsStalled) {
  StragglerOptions o;
  o.hangSeconds = 300;
  StragglerDetector d(3, o);
  auto at = [](uint64_t step) {
    return std::vector<RankWindow>{window(0, 1.0, step), window(1, 1.0, step),
                                   window(2, 1.0, step)};
  };
  // Stalled from the start.
  d.update(at(5), 0);
  ClusterRound c = d.update(at(5), 1000);
  EXPECT_TRUE(c.hung.empty());
  EXPECT_DOUBLE_EQ(c.ranks[0].stalledSeconds, 1000.0);
  // Moving together, then stalled together (a collective hang).
  d.update(at(6), 1100);
  c = d.update(at(6), 2000);
  EXPECT_TRUE(c.hung.empty());
  for (const RankStatus& s : c.ranks) {
    EXPECT_FALSE(s.hung);
    EXPECT_DOUBLE_EQ(s.stalledSeconds, 900.0);
  }
}

TEST(StragglerDetectorTest, DescribesAStragglerWithItsAttribution) {
  StragglerDetector d(5, StragglerOptions{});
  std::vector<RankWindow> v = roundOf(5, 3, 1.42);
  v[3].topLayer = 5;
  v[3].topPhase = Phase::kBackward;
  v[3].topKind = OpKind::kSoftmax;
  v[3].topShare = 0.6149;
  for (int i = 1; i <= 3; ++i) d.update(v, i);
  const RankStatus& s = d.last().ranks[3];
  ASSERT_TRUE(s.straggler);
  const std::vector<std::string> names = {"layers.0.attn", "layers.1.attn", "layers.2.attn",
                                          "layers.3.attn", "layers.4.attn", "layers.5.attn"};
  EXPECT_EQ(StragglerDetector::describe(s, names),
            "rank 3: 1.42x the other ranks' median attention time for 3 windows; layers.5.attn "
            "backward softmax is "
            "61% of the excess");
  EXPECT_EQ(StragglerDetector::describe(s, {}),
            "rank 3: 1.42x the other ranks' median attention time for 3 windows; layer 5 backward "
            "softmax is 61% of "
            "the excess");
  EXPECT_EQ(StragglerDetector::describe(s, {"a", "b"}),  // too short: the id
            "rank 3: 1.42x the other ranks' median attention time for 3 windows; layer 5 backward "
            "softmax is 61% of "
            "the excess");
}

TEST(StragglerDetectorTest, DescribesAStragglerWithoutAttribution) {
  StragglerDetector d(5, StragglerOptions{});
  for (int i = 1; i <= 4; ++i) d.update(roundOf(5, 3, 1.42), i);
  const RankStatus& s = d.last().ranks[3];
  ASSERT_TRUE(s.straggler);
  ASSERT_EQ(s.window.topLayer, -1);
  EXPECT_EQ(
      StragglerDetector::describe(s, {"layers.0.attn"}),
      "rank 3: 1.42x the other ranks' median attention time for 4 windows; no attribution yet");
}

TEST(StragglerDetectorTest, DescribesAHungRank) {
  RankStatus s;
  s.rank = 3;
  s.present = true;
  s.hung = true;
  s.lastStep = 120;
  s.stalledSeconds = 42;
  EXPECT_EQ(StragglerDetector::describe(s, {}),
            "rank 3: step counter stalled at 120 for 42s while other ranks advance");
  s.straggler = true;  // hung wins over straggler
  s.consecutive = 3;
  s.score = 2;
  EXPECT_EQ(StragglerDetector::describe(s, {}),
            "rank 3: step counter stalled at 120 for 42s while other ranks advance");
}

TEST(StragglerDetectorTest, DescribesAMissingRank) {
  StragglerDetector d(4, StragglerOptions{});
  for (int i = 1; i <= 6; ++i) d.update(roundOf(4, -1, 1.0), i);
  std::vector<RankWindow> v = roundOf(4, -1, 1.0);
  v[3] = absent(3);
  d.update(v, 7);
  d.update(v, 8);
  const RankStatus& s = d.last().ranks[3];
  ASSERT_TRUE(s.missing);
  EXPECT_EQ(StragglerDetector::describe(s, {}), "rank 3: missing since round 7");
}

TEST(StragglerDetectorTest, AWorldOfOneNeverHasAStraggler) {
  StragglerDetector d(1, StragglerOptions{});
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> attention(0.001, 10.0);
  for (int i = 1; i <= 100; ++i) {
    const ClusterRound& c = d.update({window(0, attention(rng), i)}, i);
    ASSERT_TRUE(c.stragglers.empty());
    ASSERT_FALSE(c.ranks[0].straggler);
    ASSERT_TRUE(c.hung.empty());
    EXPECT_DOUBLE_EQ(c.ranks[0].score, 1.0);
  }
}

// Rank 3 of 4 slow in layer 1 (forward softmax) window after window; `top` names the layer its
// window attributes the excess to, `sampled` its sampled steps.
std::vector<RankWindow> slowLayerRound(int32_t top, uint32_t sampled = 10) {
  std::vector<RankWindow> v;
  for (int r = 0; r < 4; ++r) v.push_back(window(r, r == 3 ? 1.75 : 1.0, 0, 10));
  v[3].sampledSteps = sampled;
  v[3].topLayer = top;
  v[3].topPhase = Phase::kForward;
  v[3].topKind = OpKind::kSoftmax;
  v[3].topShare = 0.2;
  return v;
}

StragglerOptions asTheReporterSets() {
  StragglerOptions o;
  o.minSampledSteps = 3;
  return o;
}

const std::vector<std::string> kFourLayers = {"layers.0.attn", "layers.1.attn", "layers.2.attn",
                                              "layers.3.attn"};

TEST(StragglerEpisodesTest, AShortLastWindowDoesNotMoveTheAttribution) {
  // A job's last window holds the steps since the last round: a step or two, in which a preempted
  // op of any layer is the top of the excess. It is not scored, and names nothing for the episode.
  StragglerDetector d(4, asTheReporterSets());
  std::vector<DetectorEpisode> stragglers, hangs, cells;
  for (int i = 1; i <= 5; ++i) {
    updateEpisodes(d.update(slowLayerRound(1), i), kFourLayers, &stragglers, &hangs, &cells);
  }
  const ClusterRound& last = d.update(slowLayerRound(2, /*sampled=*/1), 6);
  ASSERT_TRUE(last.ranks[3].straggler);  // the episode goes on through the last round
  EXPECT_FALSE(last.ranks[3].scored);
  updateEpisodes(last, kFourLayers, &stragglers, &hangs, &cells);
  ASSERT_EQ(stragglers.size(), 1u);
  EXPECT_EQ(stragglers[0].lastRound, 6u);
  EXPECT_EQ(stragglers[0].layer, "layers.1.attn");
  EXPECT_NE(stragglers[0].description.find("layers.1.attn forward softmax"), std::string::npos)
      << stragglers[0].description;
  // Nor its score of 0 (nothing to score).
  EXPECT_NE(stragglers[0].description.find("1.75x"), std::string::npos)
      << stragglers[0].description;
}

TEST(StragglerEpisodesTest, TheLayerMostWindowsNamedIsTheEpisodes) {
  // Under load one full window now and then names another layer (a rank preempted in it): the
  // episode names the layer most of its windows named, whichever window came last.
  StragglerDetector d(4, asTheReporterSets());
  std::vector<DetectorEpisode> stragglers, hangs, cells;
  const int32_t tops[] = {1, 1, 1, 3, 1, 1, 2};
  uint64_t round = 0;
  for (int32_t top : tops) {
    updateEpisodes(d.update(slowLayerRound(top), ++round), kFourLayers, &stragglers, &hangs,
                   &cells);
  }
  ASSERT_EQ(stragglers.size(), 1u);
  EXPECT_EQ(stragglers[0].layer, "layers.1.attn");
  EXPECT_NE(stragglers[0].description.find("layers.1.attn"), std::string::npos);
  EXPECT_EQ(stragglers[0].description.find("layers.2.attn"), std::string::npos);
  // Enough windows naming another layer move it there.
  for (int i = 0; i < 6; ++i) {
    updateEpisodes(d.update(slowLayerRound(2), ++round), kFourLayers, &stragglers, &hangs, &cells);
  }
  ASSERT_EQ(stragglers.size(), 1u);
  EXPECT_EQ(stragglers[0].layer, "layers.2.attn");
}

TEST(StragglerEpisodesTest, TheLeadingVoteIsTheLayerFirstThenItsCell) {
  // A whole layer slowed spreads its windows over its cells; one cell of another layer named
  // more often than any single one of them does not win.
  std::vector<AttributionVote> votes = {
      {1, Phase::kForward, OpKind::kSoftmax, 3, 0.2, 10},
      {1, Phase::kBackward, OpKind::kScoreMatmul, 3, 0.2, 11},
      {1, Phase::kForward, OpKind::kQkvProjection, 2, 0.2, 9},
      {2, Phase::kForward, OpKind::kSoftmax, 4, 0.3, 12},
  };
  const AttributionVote* v = leadingVote(votes);
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->layer, 1);
  // Equal counts in the layer: the cell named last.
  EXPECT_EQ(v->phase, Phase::kBackward);
  EXPECT_EQ(v->kind, OpKind::kScoreMatmul);
  // Equal layers: the one named last.
  votes.push_back({2, Phase::kBackward, OpKind::kSoftmax, 4, 0.1, 13});
  EXPECT_EQ(leadingVote(votes)->layer, 2);
  EXPECT_EQ(leadingVote({}), nullptr);
}

}  // namespace
}  // namespace attnscope
