// The step controller on its own, on a FakeStepHandler: the step index, sampling and pause, step
// inference from backward passes, and which global callbacks each step gets. No LibTorch.
#include "StepController.h"

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "FakeStepHandler.h"

namespace attnscope {
namespace detail {
namespace {

Config quietConfig(int64_t sampleEvery = 1, bool fusedOps = false) {
  Config c;
  c.logLevel = LogLevel::kError;
  c.sampleEvery = sampleEvery;
  c.fusedOps = fusedOps;
  return c;
}

std::vector<bool> globals(const FakeStepHandler& h) {
  std::vector<bool> out;
  for (const FakeStepHandler::Install& i : h.installs) out.push_back(i.global);
  return out;
}

std::vector<bool> fused(const FakeStepHandler& h) {
  std::vector<bool> out;
  for (const FakeStepHandler::Install& i : h.installs) out.push_back(i.fused);
  return out;
}

TEST(StepControllerTest, SamplesEveryNthStepAndTellsTheHandlerWhichStepsWereSampled) {
  FakeStepHandler handler;
  StepController steps(quietConfig(/*sampleEvery=*/3), handler);
  EXPECT_TRUE(steps.sampled());  // the first step is always sampled
  EXPECT_EQ(steps.stepIndex(), 0u);
  std::vector<bool> next;
  for (int i = 0; i < 6; ++i) {
    steps.endStep(true);
    next.push_back(steps.sampled());
  }
  EXPECT_EQ(next, (std::vector<bool>{false, false, true, false, false, true}));
  EXPECT_EQ(steps.stepIndex(), 6u);
  ASSERT_EQ(handler.ended.size(), 6u);
  std::vector<bool> endedSampled;
  for (const EndedStep& e : handler.ended) endedSampled.push_back(e.sampled);
  EXPECT_EQ(endedSampled, (std::vector<bool>{true, false, false, true, false, false}));
  EXPECT_TRUE(steps.explicitSteps());
}

TEST(StepControllerTest, PauseAndANewRateApplyFromTheNextStep) {
  FakeStepHandler handler;
  StepController steps(quietConfig(), handler);
  steps.setSampling(/*paused=*/true, 1);
  EXPECT_TRUE(steps.sampled());  // the current step keeps its decision
  EXPECT_TRUE(steps.paused());
  steps.endStep(true);
  EXPECT_FALSE(steps.sampled());
  steps.setSampling(false, 4);
  EXPECT_EQ(steps.sampleEvery(), 4);
  steps.endStep(true);  // into step 2
  EXPECT_FALSE(steps.sampled());
  steps.endStep(true);  // into step 3
  EXPECT_FALSE(steps.sampled());
  steps.endStep(true);  // into step 4
  EXPECT_TRUE(steps.sampled());
}

TEST(StepControllerTest, OnTheCallbackPathTheGlobalCallbackRunsOnSampledStepsOnly) {
  FakeStepHandler handler;
  StepController steps(quietConfig(/*sampleEvery=*/2, /*fusedOps=*/true), handler);
  steps.noteTableCall();
  steps.begin();
  for (int i = 0; i < 4; ++i) steps.endStep(true);
  steps.finish();
  // begin (step 0), steps 1..4, finish.
  EXPECT_EQ(globals(handler), (std::vector<bool>{true, false, true, false, true, false}));
  EXPECT_EQ(fused(handler), (std::vector<bool>{true, false, true, false, true, false}));
  for (const EndedStep& e : handler.ended) EXPECT_EQ(e.collectivesObserved, e.sampled);
  EXPECT_GT(handler.overheadTicks, 0u);
}

TEST(StepControllerTest, WhileStepsAreInferredTheGlobalCallbackRunsOnEveryStep) {
  FakeStepHandler handler;
  StepController steps(quietConfig(/*sampleEvery=*/2), handler);
  steps.begin();
  EXPECT_TRUE(steps.openCall());  // no backward pass yet: step 0 goes on
  EXPECT_TRUE(handler.ended.empty());
  steps.noteBackward();
  EXPECT_TRUE(steps.autoStepPending());
  handler.insideBackward = true;  // recompute inside the backward pass ends nothing
  EXPECT_TRUE(steps.openCall());
  EXPECT_TRUE(handler.ended.empty());
  handler.insideBackward = false;
  EXPECT_FALSE(steps.openCall());  // the next forward: step 0 ended, step 1 is not sampled
  EXPECT_EQ(handler.ended.size(), 1u);
  EXPECT_FALSE(steps.autoStepPending());
  EXPECT_FALSE(steps.explicitSteps());
  steps.noteBackward();
  EXPECT_TRUE(steps.openCall());                                       // step 2, sampled
  EXPECT_EQ(globals(handler), (std::vector<bool>{true, true, true}));  // to see backward passes
  steps.endStep(true);                                                 // explicit from now on
  steps.noteBackward();
  EXPECT_FALSE(steps.autoStepPending());
  steps.openCall();
  EXPECT_EQ(handler.ended.size(), 3u);
  EXPECT_EQ(globals(handler), (std::vector<bool>{true, true, true, false}));
}

TEST(StepControllerTest, FinishEndsTheLastInferredStepOnlyAndRemovesTheCallbacks) {
  FakeStepHandler inferred;
  StepController a(quietConfig(), inferred);
  a.begin();
  a.noteBackward();
  a.finish();
  EXPECT_EQ(inferred.ended.size(), 1u);
  ASSERT_EQ(inferred.installs.size(), 2u);
  EXPECT_FALSE(inferred.installs.back().global);
  EXPECT_FALSE(inferred.installs.back().fused);

  FakeStepHandler explicitSteps;
  StepController b(quietConfig(), explicitSteps);
  b.begin();
  b.endStep(true);
  b.noteBackward();
  b.finish();
  EXPECT_EQ(explicitSteps.ended.size(), 1u);  // the explicit one alone
}

TEST(StepControllerTest, OnNodeHooksTheCollectiveObserverRunsOneSampledStepInEight) {
  FakeStepHandler handler;
  StepController steps(quietConfig(/*sampleEvery=*/2), handler);
  steps.noteHookedCall();
  ASSERT_TRUE(steps.backwardByHooks());
  steps.begin();
  const uint64_t kSteps = 2 * 2 * StepController::kCollectiveEvery;
  for (uint64_t i = 0; i < kSteps; ++i) steps.endStep(true);
  uint64_t installed = 0;
  for (size_t i = 1; i < handler.installs.size(); ++i) installed += handler.installs[i].global;
  EXPECT_EQ(installed, 2u);  // 16 sampled steps, one in 8
  EXPECT_TRUE(handler.installs[2 * StepController::kCollectiveEvery].global);  // step 16
  uint64_t observed = 0;
  for (const EndedStep& e : handler.ended) observed += e.collectivesObserved;
  EXPECT_EQ(observed, 2u);  // step 0 (begin installs it) and step 16
  // A call on the table later puts backward back on the callback: every sampled step.
  steps.noteTableCall();
  EXPECT_FALSE(steps.backwardByHooks());
  steps.endStep(true);
  steps.endStep(true);
  EXPECT_FALSE(handler.installs[handler.installs.size() - 2].global);
  EXPECT_TRUE(handler.installs.back().global);
}

TEST(StepControllerTest, ABackwardMarkerIsWantedOncePerStepAndThreadWhileInferringOnHooks) {
  FakeStepHandler handler;
  StepController steps(quietConfig(), handler);
  uint64_t step = 99;
  EXPECT_FALSE(steps.wantsBackwardMarker(&step));  // on the callback path it sees the pass
  steps.noteHookedCall();
  ASSERT_TRUE(steps.wantsBackwardMarker(&step));
  EXPECT_EQ(step, 0u);
  EXPECT_TRUE(steps.wantsBackwardMarker(&step));  // until one was placed
  steps.backwardMarkerPlaced(step);
  EXPECT_FALSE(steps.wantsBackwardMarker(&step));
  std::thread other([&] {
    uint64_t s = 0;
    EXPECT_TRUE(steps.wantsBackwardMarker(&s));  // each thread places its own
  });
  other.join();
  steps.noteBackward();
  steps.openCall();  // step 1
  ASSERT_TRUE(steps.wantsBackwardMarker(&step));
  EXPECT_EQ(step, 1u);
  steps.endStep(true);
  EXPECT_FALSE(steps.wantsBackwardMarker(&step));  // explicit steps need no marker
}

TEST(StepControllerTest, ABackwardObservationIsNamedForTheSummary) {
  FakeStepHandler handler;
  StepController steps(quietConfig(), handler);
  EXPECT_STREQ(steps.backwardObservation(), "none");
  steps.noteHookedCall();
  EXPECT_STREQ(steps.backwardObservation(), "node_hooks");
  steps.noteTableCall();
  EXPECT_STREQ(steps.backwardObservation(), "node_hooks_and_callback");
  FakeStepHandler other;
  StepController table(quietConfig(), other);
  table.noteTableCall();
  EXPECT_STREQ(table.backwardObservation(), "callback");
}

TEST(StepControllerTest, ThreadsOpeningCallsAfterOneBackwardPassEndOneStep) {
  FakeStepHandler handler;
  StepController steps(quietConfig(), handler);
  constexpr int kThreads = 4;
  for (int round = 1; round <= 20; ++round) {
    steps.noteBackward();
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        ready.fetch_add(1);
        while (ready.load() < kThreads) std::this_thread::yield();
        steps.openCall();
      });
    }
    for (std::thread& t : threads) t.join();
    ASSERT_EQ(handler.ended.size(), static_cast<size_t>(round));
  }
  EXPECT_EQ(steps.stepIndex(), 20u);
}

}  // namespace
}  // namespace detail
}  // namespace attnscope
