// The recorder and its trace buffer on their own, without the observer or LibTorch ops: sampling
// and step accounting, forward→backward folding, windows, the layer cap, the nothing-found check,
// the live sample-every, and the trace buffer's encoding and bound.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "FakeStepHandler.h"
#include "Recorder.h"
#include "TraceBuffer.h"
#include "attnscope/attnscope.h"
#include "attnscope/trace/TraceFormat.h"

namespace attnscope {
namespace detail {
namespace {

Config quietConfig() {
  Config c;
  c.logLevel = LogLevel::kError;
  return c;
}

CallRecord forwardCall(int32_t layer, int64_t ns, OpKind kind) {
  CallRecord r;
  r.layer = layer;
  r.phase = Phase::kForward;
  r.ns = ns;
  r.kinds[static_cast<int>(kind)].ns = ns;
  r.kinds[static_cast<int>(kind)].ops = 1;
  return r;
}

// A recorder with its step controller, steps ended as the session ends them.
struct Recording {
  explicit Recording(const Config& config)
      : steps(config, handler), recorder(config, RunInfo(), false, steps) {
    handler.onStepEnded = [this](const EndedStep& step) { recorder.endStep(step); };
  }
  // Ends a step; returns whether the next one is sampled.
  bool endStep(bool explicitCall) {
    steps.endStep(explicitCall);
    return steps.sampled();
  }
  FakeStepHandler handler;
  StepController steps;
  Recorder recorder;
};

const PhaseStats* phaseOf(const StatsTable& stats, const std::string& layer, Phase phase) {
  for (const LayerStats& l : stats.layers()) {
    if (l.name == layer) return l.phases[static_cast<int>(phase)].get();
  }
  return nullptr;
}

TEST(RecorderTest, SamplesEveryNthStepAndCountsSampledSteps) {
  Config config = quietConfig();
  config.sampleEvery = 3;
  Recording rec(config);
  Recorder& recorder = rec.recorder;
  EXPECT_TRUE(rec.steps.sampled());  // the first step is always sampled
  std::vector<bool> next;
  for (int i = 0; i < 6; ++i) next.push_back(rec.endStep(true));
  EXPECT_EQ(next, (std::vector<bool>{false, false, true, false, false, true}));
  const RunInfo run = recorder.runInfo();
  EXPECT_EQ(run.stepsSeen, 6u);
  EXPECT_EQ(run.stepsSampled, 2u);  // steps 0 and 3
  EXPECT_EQ(run.sampleEvery, 3);
  EXPECT_TRUE(run.explicitSteps);
  EXPECT_EQ(rec.steps.stepIndex(), 6u);
}

TEST(RecorderTest, ControlPausesAndChangesTheLiveRateItsReadersShow) {
  Recording rec(quietConfig());
  Recorder& recorder = rec.recorder;
  rec.steps.setSampling(/*paused=*/true, 1);
  EXPECT_FALSE(rec.endStep(true));
  EXPECT_TRUE(recorder.snapshot(SnapshotRequest{}).paused);
  rec.steps.setSampling(false, 4);
  EXPECT_FALSE(rec.endStep(true));  // step 2
  EXPECT_FALSE(rec.endStep(true));  // step 3
  EXPECT_TRUE(rec.endStep(true));   // step 4
  EXPECT_EQ(recorder.runInfo().sampleEvery, 4);
  EXPECT_EQ(recorder.snapshot(SnapshotRequest{}).run.sampleEvery, 4);
}

TEST(RecorderTest, StepsAreInferredFromBackwardUntilAnExplicitStep) {
  Recording rec(quietConfig());
  Recorder& recorder = rec.recorder;
  EXPECT_FALSE(rec.steps.autoStepPending());
  rec.steps.noteBackward();
  EXPECT_TRUE(rec.steps.autoStepPending());
  rec.endStep(false);
  EXPECT_FALSE(rec.steps.autoStepPending());
  EXPECT_FALSE(recorder.runInfo().explicitSteps);
  rec.endStep(true);
  rec.steps.noteBackward();
  EXPECT_FALSE(rec.steps.autoStepPending());  // explicit steps from now on
}

TEST(RecorderTest, BackwardNodesLinkedToACallFoldIntoOneBackwardCallAtTheStepEnd) {
  Recording rec(quietConfig());
  Recorder& recorder = rec.recorder;
  const int32_t layer = recorder.layerId("layers.0.attn");
  ASSERT_EQ(layer, 0);
  const uint64_t instance = recorder.newInstance();
  const LinkTable::Entry links[] = {{7, Link{instance, layer, OpKind::kScoreMatmul, false}},
                                    {9, Link{instance, layer, OpKind::kSoftmax, false}}};
  recorder.addForwardCall(forwardCall(layer, 1000, OpKind::kScoreMatmul), /*thread=*/1, links, 2,
                          nullptr, instance);
  Link found;
  ASSERT_TRUE(recorder.findLink(1, 9, &found));
  EXPECT_EQ(found.kind, OpKind::kSoftmax);
  EXPECT_FALSE(recorder.findLink(2, 9, &found));  // another forward thread
  MemoryAccount account;
  recorder.addBackwardNode(links[0].second, 300, account);
  recorder.addBackwardNode(links[1].second, 200, account);
  EXPECT_EQ(phaseOf(recorder.statistics(), "layers.0.attn", Phase::kBackward), nullptr);
  rec.endStep(true);
  const StatsTable stats = recorder.statistics();
  const PhaseStats* backward = phaseOf(stats, "layers.0.attn", Phase::kBackward);
  ASSERT_NE(backward, nullptr);
  EXPECT_EQ(backward->call.seconds.count(), 1u);  // one call
  EXPECT_EQ(backward->call.ops, 2u);              // of two nodes
  ASSERT_NE(backward->kinds[static_cast<int>(OpKind::kSoftmax)], nullptr);
  EXPECT_EQ(backward->kinds[static_cast<int>(OpKind::kSoftmax)]->ops, 1u);
  EXPECT_FALSE(recorder.findLink(1, 9, &found));  // the step end cleared the links
}

TEST(RecorderTest, AnEstimateWithoutTimedNodesMakesNoBackwardCall) {
  Recording rec(quietConfig());
  Recorder& recorder = rec.recorder;
  const int32_t layer = recorder.layerId("l");
  const uint64_t instance = recorder.newInstance();
  const LinkTable::Entry link{3, Link{instance, layer, OpKind::kQkvProjection, true}};
  std::array<BackwardEstimate, kNumOpKinds> estimate{};
  estimate[static_cast<int>(OpKind::kQkvProjection)] = BackwardEstimate{1, 1, 4e6, 1e5, 4e6};
  recorder.addForwardCall(forwardCall(layer, 1000, OpKind::kQkvProjection), 1, &link, 1,
                          estimate.data(), instance);
  rec.endStep(true);  // evaluation: forward only
  EXPECT_EQ(phaseOf(recorder.statistics(), "l", Phase::kBackward), nullptr);
  EXPECT_NE(phaseOf(recorder.statistics(), "l", Phase::kForward), nullptr);
}

TEST(RecorderTest, AWindowIsHandedOverOnceAndANewOneStarts) {
  Recording rec(quietConfig());
  Recorder& recorder = rec.recorder;
  const int32_t layer = recorder.layerId("a");
  recorder.addForwardCall(forwardCall(layer, 500, OpKind::kSoftmax), 1, nullptr, 0, nullptr, 1);
  recorder.addCollectiveTime(2'000'000'000);
  rec.endStep(true);
  rec.endStep(true);
  RoundSnapshot first = recorder.snapshot(SnapshotRequest{/*endWindow=*/true, false});
  EXPECT_EQ(first.window.steps, 2u);
  EXPECT_EQ(first.window.sampledSteps, 2u);
  EXPECT_EQ(first.window.lastStep, 2u);
  EXPECT_DOUBLE_EQ(first.window.collectiveSeconds, 2.0);
  ASSERT_EQ(first.window.stats.layers().size(), 1u);
  EXPECT_EQ(first.layerNames, std::vector<std::string>{"a"});
  RoundSnapshot second = recorder.snapshot(SnapshotRequest{true, false});
  EXPECT_EQ(second.window.steps, 0u);
  EXPECT_DOUBLE_EQ(second.window.collectiveSeconds, 0.0);
  // The new window keeps the layer ids aligned with the run's table, with no calls yet.
  ASSERT_EQ(second.window.stats.layers().size(), 1u);
  EXPECT_EQ(phaseOf(second.window.stats, "a", Phase::kForward), nullptr);
  EXPECT_NE(phaseOf(recorder.statistics(), "a", Phase::kForward), nullptr);
}

TEST(RecorderTest, LayersBeyondTheCapAreCountedNotRecorded) {
  Config config = quietConfig();
  config.maxLayers = 2;
  Recording rec(config);
  Recorder& recorder = rec.recorder;
  EXPECT_EQ(recorder.layerId("a"), 0);
  EXPECT_EQ(recorder.layerId("b"), 1);
  EXPECT_EQ(recorder.layerId("c"), -1);
  EXPECT_EQ(recorder.layerId("d"), -1);
  EXPECT_EQ(recorder.layerId("a"), 0);
  EXPECT_EQ(recorder.runInfo().droppedCalls, 2u);
  EXPECT_EQ(recorder.layerNamesFrom(1), std::vector<std::string>{"b"});
}

TEST(RecorderTest, NothingFoundIsSetAfterTheStepsWithNoCallAndAtFinishOfAShortRun) {
  Recording rec(quietConfig());
  Recorder& recorder = rec.recorder;
  for (int i = 0; i + 1 < kNothingFoundSteps; ++i) rec.endStep(true);
  EXPECT_FALSE(recorder.runInfo().nothingFound);
  rec.endStep(true);
  EXPECT_TRUE(recorder.runInfo().nothingFound);

  Recording shortRec(quietConfig());
  Recorder& shortRun = shortRec.recorder;
  shortRec.endStep(true);
  shortRun.finish();
  EXPECT_TRUE(shortRun.runInfo().nothingFound);
  EXPECT_GT(shortRun.runInfo().stopUnixSeconds, 0.0);

  Recording foundRec(quietConfig());
  Recorder& found = foundRec.recorder;
  found.addForwardCall(forwardCall(found.layerId("x"), 1, OpKind::kOther), 1, nullptr, 0, nullptr,
                       1);
  for (int i = 0; i < kNothingFoundSteps; ++i) foundRec.endStep(true);
  found.finish();
  EXPECT_FALSE(found.runInfo().nothingFound);
}

TEST(RecorderTest, TracingEncodesSampledStepsForTheReporterToTake) {
  Config config = quietConfig();
  config.traceDir = "/unused";  // tracing on; the recorder writes nothing itself
  config.sampleEvery = 2;
  Recording rec(config);
  Recorder& recorder = rec.recorder;
  const int32_t layer = recorder.layerId("a");
  recorder.addForwardCall(forwardCall(layer, 100, OpKind::kSoftmax), 1, nullptr, 0, nullptr, 1);
  recorder.addForwardCall(forwardCall(layer, 300, OpKind::kSoftmax), 1, nullptr, 0, nullptr, 2);
  rec.endStep(true);  // step 0, sampled: one record
  rec.endStep(true);  // step 1, not sampled: nothing recorded, nothing encoded
  RoundSnapshot s = recorder.snapshot(SnapshotRequest{false, /*takeTraceSteps=*/true});
  ASSERT_EQ(s.traceSteps.size(), 1u);
  EXPECT_EQ(s.traceSteps[0].step, 0u);
  std::vector<TraceCall> calls;
  std::string error;
  const EncodedStep& e = s.traceSteps[0];
  ASSERT_TRUE(traceformat::decodeCalls(reinterpret_cast<const uint8_t*>(e.data.data()),
                                       e.data.size(), &calls, &error))
      << error;
  ASSERT_EQ(calls.size(), 1u);  // one entry per (layer, phase)
  EXPECT_EQ(calls[0].calls, 2u);
  EXPECT_EQ(calls[0].ns, 400);
  EXPECT_TRUE(recorder.snapshot(SnapshotRequest{false, true}).traceSteps.empty());
}

TEST(TraceBufferTest, AnUnsampledStepMovesTheStepClockOnly) {
  TraceBuffer buffer(/*startNs=*/1000);
  buffer.endStep(0, 5000, 1.0);  // nothing recorded
  EXPECT_FALSE(buffer.pending());
  buffer.add(forwardCall(2, 50, OpKind::kOther));
  EXPECT_TRUE(buffer.pending());
  buffer.endStep(1, 12000, 2.0);
  uint64_t dropped = 99;
  const std::vector<EncodedStep> steps = buffer.take(&dropped);
  EXPECT_EQ(dropped, 0u);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].step, 1u);
  EXPECT_EQ(steps[0].stepNs, 7000);  // since the unsampled step's end, not since start
  EXPECT_DOUBLE_EQ(steps[0].endUnix, 2.0);
}

TEST(TraceBufferTest, StepsBeyondTheBoundAreCountedAsDroppedUntilTaken) {
  TraceBuffer buffer(0);
  uint64_t step = 0;
  const auto addStep = [&] {
    for (int32_t layer = 0; layer < 64; ++layer) buffer.add(forwardCall(layer, 1, OpKind::kOther));
    buffer.endStep(step, static_cast<int64_t>(step + 1), 0.0);
    ++step;
  };
  uint64_t dropped = 0;
  addStep();
  const std::vector<EncodedStep> one = buffer.take(&dropped);
  ASSERT_EQ(one.size(), 1u);
  const size_t perStep = one[0].data.size() + sizeof(EncodedStep);  // every step encodes alike
  // Steps are kept while the buffered bytes are within the bound, so the one that passes it is
  // the last kept; every later step until the take is dropped.
  const size_t keptSteps = TraceBuffer::kMaxBufferedBytes / perStep + 1;
  for (size_t i = 0; i < keptSteps + 5; ++i) addStep();
  const std::vector<EncodedStep> steps = buffer.take(&dropped);
  EXPECT_EQ(steps.size(), keptSteps);
  EXPECT_EQ(dropped, 5u);
  EXPECT_EQ(steps.front().step, 1u);
  EXPECT_EQ(steps.back().step, keptSteps);
  uint64_t again = 7;
  EXPECT_TRUE(buffer.take(&again).empty());
  EXPECT_EQ(again, 0u);  // the count restarts after a take
  addStep();             // and the bound too
  EXPECT_EQ(buffer.take(&again).size(), 1u);
}

}  // namespace
}  // namespace detail
}  // namespace attnscope
