// GpuTimer on the fake CUDA event and CUPTI layers: the choice of source and its fallbacks,
// events at call edges and first/last backward node, resolution without waiting, and exact
// attribution of kernel time through correlation ids.
#include "attnscope/collectors/GpuTimer.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "FakeGpu.h"

namespace attnscope {
namespace {

using testing_gpu::FakeGpuActivityApi;
using testing_gpu::FakeGpuDevice;
using testing_gpu::FakeGpuEventApi;

constexpr char kHeld[] =
    "CUPTI is held by another subscriber (torch.profiler/Kineto, DCGM or Nsight)";

class GpuTimerTest : public ::testing::Test {
 protected:
  void SetUp() override { FakeGpuDevice::instance().reset(); }

  std::unique_ptr<GpuTimer> make(bool withEvents = true, bool withActivity = true,
                                 size_t poolCapacity = 64) {
    GpuTimer::Options options;
    options.eventPoolCapacity = poolCapacity;
    return std::make_unique<GpuTimer>(
        withEvents ? std::make_unique<FakeGpuEventApi>(&events_) : nullptr,
        withActivity ? std::make_unique<FakeGpuActivityApi>(&activity_) : nullptr,
        &FakeGpuDevice::currentStream, options);
  }

  // One attention call as the observer drives it: its ops launch kernels of the given lengths.
  void forwardCall(GpuTimer& t, uint64_t instance, int32_t layer,
                   const std::vector<std::pair<OpKind, uint64_t>>& ops,
                   Phase phase = Phase::kForward) {
    GpuTimer::Span span;
    t.callBegin(&span);
    const bool call = t.pushOp(DeviceKey{instance, layer, phase, OpKind::kOther});
    for (const auto& [kind, ns] : ops) {
      const bool pushed = t.pushOp(DeviceKey{instance, layer, phase, kind});
      FakeGpuDevice::instance().launch(ns, "ampere_sgemm_128x64_tn");
      t.popOp(pushed);
    }
    t.popOp(call);
    t.callEnd(&span, instance, layer, phase);
  }

  // Runs reporter rounds once the device has finished and the training thread went on (a later
  // CUDA API call of it, as training makes).
  std::vector<CallRecord> drain(GpuTimer& t, int rounds = 4) {
    FakeGpuDevice::instance().apiCall();
    FakeGpuDevice::instance().finishAll();
    std::vector<CallRecord> all;
    for (int i = 0; i < rounds; ++i) {
      std::vector<CallRecord> r = t.collect(false);
      all.insert(all.end(), r.begin(), r.end());
    }
    return all;
  }

  FakeGpuEventApi::State events_;
  FakeGpuActivityApi::State activity_;
};

// --- the choice of source ---------------------------------------------------------------------

TEST_F(GpuTimerTest, OffWhenAskedOff) {
  auto t = make();
  t->start(GpuTiming::kOff, false, "");
  EXPECT_EQ(t->source(), GpuTiming::kOff);
  EXPECT_EQ(activity_.startCalls, 0);
  EXPECT_EQ(t->status().fallbackReason, "");
}

TEST_F(GpuTimerTest, OffWithTheReasonWhenTheDeviceIsUnusable) {
  auto t = make();
  t->start(GpuTiming::kAuto, false, "no CUDA device visible to LibTorch");
  EXPECT_EQ(t->source(), GpuTiming::kOff);
  EXPECT_EQ(activity_.startCalls, 0);
  EXPECT_EQ(t->status().fallbackReason, "no CUDA device visible to LibTorch");
}

TEST_F(GpuTimerTest, AutoTakesCuptiWhenItCanBeHeld) {
  auto t = make();
  t->start(GpuTiming::kAuto, false, "");
  EXPECT_EQ(t->source(), GpuTiming::kCupti);
  EXPECT_TRUE(activity_.started);
  EXPECT_TRUE(t->usesCupti());
  EXPECT_FALSE(t->usesEvents());
  EXPECT_EQ(t->status().fallbackReason, "");
}

TEST_F(GpuTimerTest, AutoFallsBackToEventsWhenAnotherSubscriberHoldsCupti) {
  activity_.failReason = kHeld;
  auto t = make();
  t->start(GpuTiming::kAuto, false, "");
  EXPECT_EQ(t->source(), GpuTiming::kEvents);
  const GpuStatus s = t->status();
  EXPECT_EQ(s.source, GpuTiming::kEvents);
  EXPECT_EQ(s.requested, GpuTiming::kAuto);
  EXPECT_EQ(s.fallbackReason, std::string(kHeld) + "; using CUDA events");
}

TEST_F(GpuTimerTest, CuptiRequestedStillFallsBackRatherThanFail) {
  activity_.failReason = kHeld;
  auto t = make();
  t->start(GpuTiming::kCupti, false, "");
  EXPECT_EQ(t->source(), GpuTiming::kEvents);
}

TEST_F(GpuTimerTest, RunningProfilerMeansEventsWithoutTouchingCupti) {
  auto t = make();
  t->start(GpuTiming::kAuto, /*profilerRunning=*/true, "");
  EXPECT_EQ(t->source(), GpuTiming::kEvents);
  EXPECT_EQ(activity_.startCalls, 0) << "Kineto's buffers must not be taken over";
  EXPECT_EQ(t->status().fallbackReason,
            "torch.profiler (Kineto) is running and holds CUPTI; using CUDA events");
}

TEST_F(GpuTimerTest, NoCuptiLibraryMeansEvents) {
  auto t = make(true, false);
  t->start(GpuTiming::kAuto, false, "");
  EXPECT_EQ(t->source(), GpuTiming::kEvents);
  EXPECT_EQ(t->status().fallbackReason, "CUPTI is not available; using CUDA events");
}

TEST_F(GpuTimerTest, NeitherLayerMeansOff) {
  auto t = make(false, false);
  t->start(GpuTiming::kAuto, false, "");
  EXPECT_EQ(t->source(), GpuTiming::kOff);
  EXPECT_EQ(t->status().fallbackReason, "CUPTI is not available");
}

TEST_F(GpuTimerTest, EventsAndBothAsRequested) {
  auto events = make();
  events->start(GpuTiming::kEvents, false, "");
  EXPECT_EQ(events->source(), GpuTiming::kEvents);
  EXPECT_EQ(activity_.startCalls, 0);
  auto both = make();
  both->start(GpuTiming::kBoth, false, "");
  EXPECT_EQ(both->source(), GpuTiming::kBoth);
  EXPECT_TRUE(both->usesEvents());
  EXPECT_TRUE(both->usesCupti());
}

TEST_F(GpuTimerTest, BothWithoutTheEventLayerIsCuptiWithTheReason) {
  auto t = make(/*withEvents=*/false, true);
  t->start(GpuTiming::kBoth, false, "");
  EXPECT_EQ(t->source(), GpuTiming::kCupti);
  EXPECT_EQ(t->status().fallbackReason, "the CUDA event layer is not available; CUPTI only");
  forwardCall(*t, 1, 0, {{OpKind::kSoftmax, 100}});
  const std::vector<CallRecord> calls = drain(*t);
  ASSERT_EQ(calls.size(), 1u) << "calls fold on kernels alone: no span is awaited";
  EXPECT_EQ(calls[0].ns, 100);
}

TEST_F(GpuTimerTest, ProfilerStartedMidRunSwitchesToEventsAndLeavesCuptiToIt) {
  auto t = make();
  t->start(GpuTiming::kAuto, false, "");
  ASSERT_EQ(t->source(), GpuTiming::kCupti);
  t->profilerStarted();
  EXPECT_EQ(t->source(), GpuTiming::kEvents);
  EXPECT_EQ(t->status().fallbackReason,
            "torch.profiler started while attnscope used CUPTI; using CUDA events from now on");
  const int pushes = activity_.pushes;
  forwardCall(*t, 1, 0, {{OpKind::kSoftmax, 100}});
  EXPECT_EQ(activity_.pushes, pushes) << "no more ids pushed";
  t->stop(/*profilerRunning=*/true);
  EXPECT_TRUE(FakeGpuDevice::instance().cupti.enabled)
      << "disabling CUPTI's kinds now would empty the profiler's trace";
}

TEST_F(GpuTimerTest, CuptiIsGivenBackAtStopOnceTheProfilerThatTookItIsDone) {
  auto t = make();
  t->start(GpuTiming::kAuto, false, "");
  t->profilerStarted();
  t->stop(/*profilerRunning=*/false);
  EXPECT_TRUE(activity_.stopped) << "what attnscope enabled stays enabled for the process";
  EXPECT_FALSE(FakeGpuDevice::instance().cupti.enabled);
}

// --- CUDA events --------------------------------------------------------------------------------

TEST_F(GpuTimerTest, ForwardSpanIsReadBackOnlyOnceTheDeviceGotThere) {
  auto t = make();
  t->start(GpuTiming::kEvents, false, "");
  FakeGpuDevice& d = FakeGpuDevice::instance();
  d.launch(5000, "earlier work");  // the call's kernels queue behind it
  forwardCall(*t, 1, 3, {{OpKind::kQkvProjection, 300}, {OpKind::kSoftmax, 200}});
  EXPECT_TRUE(t->collect(false).empty()) << "device still busy: nothing waited for";
  EXPECT_EQ(t->status().spansResolved, 0u);
  d.advance(5000 + 500);
  const std::vector<CallRecord> calls = t->collect(false);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].layer, 3);
  EXPECT_EQ(calls[0].phase, Phase::kForward);
  EXPECT_NEAR(calls[0].ns, 500, 1);
  EXPECT_EQ(t->status().spansResolved, 1u);
  EXPECT_EQ(activity_.pushes, 0) << "events only: no correlation ids";
}

TEST_F(GpuTimerTest, BackwardSpanRunsFromTheFirstNodeToTheLastOfTheCall) {
  auto t = make();
  t->start(GpuTiming::kEvents, false, "");
  FakeGpuDevice& d = FakeGpuDevice::instance();
  // Backward of call 7 (layer 1): three nodes; other work before and after.
  d.launch(1000, "loss backward");
  for (uint64_t ns : {100, 200, 300}) {
    t->nodeBegin(7, 1);
    d.launch(ns, "node");
    t->nodeEnd(7);
  }
  d.launch(4000, "mlp backward");
  t->closeBackward();
  const std::vector<CallRecord> calls = drain(*t);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].phase, Phase::kBackward);
  EXPECT_EQ(calls[0].layer, 1);
  EXPECT_NEAR(calls[0].ns, 600, 1);
}

TEST_F(GpuTimerTest, EventsAreReusedAcrossSteps) {
  auto t = make();
  t->start(GpuTiming::kEvents, false, "");
  for (uint64_t step = 0; step < 50; ++step) {
    forwardCall(*t, step + 1, 0, {{OpKind::kSoftmax, 100}});
    drain(*t, 1);
  }
  EXPECT_EQ(events_.created, 2);
  EXPECT_EQ(t->status().eventsInPool, 2u);
  EXPECT_EQ(t->status().spansResolved, 50u);
}

TEST_F(GpuTimerTest, ExhaustedPoolSkipsTimingAndCountsIt) {
  auto t = make(true, true, /*poolCapacity=*/4);
  t->start(GpuTiming::kEvents, false, "");
  for (uint64_t i = 1; i <= 3; ++i) forwardCall(*t, i, 0, {{OpKind::kSoftmax, 100}});
  EXPECT_EQ(t->status().spansDropped, 1u);
  EXPECT_EQ(drain(*t).size(), 2u);
}

TEST_F(GpuTimerTest, NoEventsBeforeTheDeviceHasAContext) {
  auto t = make();
  t->start(GpuTiming::kEvents, false, "");
  FakeGpuDevice::instance().stream.device = -1;
  forwardCall(*t, 1, 0, {{OpKind::kSoftmax, 100}});
  EXPECT_EQ(events_.created, 0);
  EXPECT_TRUE(drain(*t).empty());
}

TEST_F(GpuTimerTest, RecordFailureIsCountedAndTheCallSkipped) {
  auto t = make();
  t->start(GpuTiming::kEvents, false, "");
  events_.failRecord = true;
  forwardCall(*t, 1, 0, {{OpKind::kSoftmax, 100}});
  EXPECT_EQ(t->status().eventErrors, 1u);
  events_.failRecord = false;
  forwardCall(*t, 2, 0, {{OpKind::kSoftmax, 100}});
  EXPECT_EQ(drain(*t).size(), 1u);
}

TEST_F(GpuTimerTest, CallsUnderGraphCaptureAreNotTimed) {
  auto t = make();
  t->start(GpuTiming::kEvents, false, "");
  events_.capturing = true;
  forwardCall(*t, 1, 0, {{OpKind::kSoftmax, 100}});
  EXPECT_EQ(events_.records, 0) << "an event recorded in a capture could never be queried";
  EXPECT_EQ(t->status().spansCapturing, 1u);
  events_.capturing = false;
  forwardCall(*t, 2, 0, {{OpKind::kSoftmax, 100}});
  EXPECT_EQ(drain(*t).size(), 1u);
}

TEST_F(GpuTimerTest, FinalCollectDoesNotWaitForTheDevice) {
  auto t = make();
  t->start(GpuTiming::kEvents, false, "");
  forwardCall(*t, 1, 0, {{OpKind::kSoftmax, 100}});
  const std::vector<CallRecord> calls = t->collect(/*final=*/true);  // device never advanced
  EXPECT_TRUE(calls.empty()) << "an unfinished span is dropped, not waited for";
  EXPECT_EQ(t->status().spansResolved, 0u);
}

// --- CUPTI attribution ------------------------------------------------------------------------

TEST_F(GpuTimerTest, KernelTimeIsAttributedPerOpKindExactly) {
  auto t = make();
  t->start(GpuTiming::kCupti, false, "");
  forwardCall(*t, 11, 2,
              {{OpKind::kQkvProjection, 300},
               {OpKind::kScoreMatmul, 120},
               {OpKind::kSoftmax, 40},
               {OpKind::kContextMatmul, 110},
               {OpKind::kOutputProjection, 90}});
  FakeGpuDevice::instance().launch(7000, "work outside attention");
  const std::vector<CallRecord> calls = drain(*t);
  ASSERT_EQ(calls.size(), 1u);
  const CallRecord& c = calls[0];
  EXPECT_EQ(c.layer, 2);
  EXPECT_EQ(c.kinds[static_cast<int>(OpKind::kQkvProjection)].ns, 300);
  EXPECT_EQ(c.kinds[static_cast<int>(OpKind::kScoreMatmul)].ns, 120);
  EXPECT_EQ(c.kinds[static_cast<int>(OpKind::kSoftmax)].ns, 40);
  EXPECT_EQ(c.kinds[static_cast<int>(OpKind::kContextMatmul)].ns, 110);
  EXPECT_EQ(c.kinds[static_cast<int>(OpKind::kOutputProjection)].ns, 90);
  EXPECT_EQ(c.ns, 660);
  EXPECT_EQ(activity_.pushes, activity_.pops);
  EXPECT_TRUE(FakeGpuDevice::instance().idStack.empty());
  EXPECT_EQ(t->status().kernelsAttributed, 5u);
  EXPECT_EQ(t->status().recordsOutside, 1u) << "the kernel launched outside attention";
  EXPECT_EQ(t->status().recordsUnattributed, 0u);
}

TEST_F(GpuTimerTest, RecordsInEitherOrderAttributeTheSame) {
  activity_.kernelsFirst = true;
  auto t = make();
  t->start(GpuTiming::kCupti, false, "");
  forwardCall(*t, 5, 0, {{OpKind::kSoftmax, 70}, {OpKind::kDropout, 30}});
  const std::vector<CallRecord> calls = drain(*t);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].kinds[static_cast<int>(OpKind::kSoftmax)].ns, 70);
  EXPECT_EQ(calls[0].kinds[static_cast<int>(OpKind::kDropout)].ns, 30);
}

TEST_F(GpuTimerTest, BackwardNodesCarryTheirForwardCallsLayerAndKind) {
  auto t = make();
  t->start(GpuTiming::kCupti, false, "");
  for (const auto& [kind, ns] :
       std::vector<std::pair<OpKind, uint64_t>>{{OpKind::kOutputProjection, 200},
                                                {OpKind::kSoftmax, 50},
                                                {OpKind::kQkvProjection, 400}}) {
    t->nodeBegin(21, 4);
    const bool pushed = t->pushOp(DeviceKey{21, 4, Phase::kBackward, kind});
    FakeGpuDevice::instance().launch(ns, "node kernel");
    t->popOp(pushed);
    t->nodeEnd(21);
  }
  t->closeBackward();
  const std::vector<CallRecord> calls = drain(*t);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].phase, Phase::kBackward);
  EXPECT_EQ(calls[0].layer, 4);
  EXPECT_EQ(calls[0].kinds[static_cast<int>(OpKind::kQkvProjection)].ns, 400);
  EXPECT_EQ(calls[0].ns, 650);
}

TEST_F(GpuTimerTest, BothSourcesAgreeWhenKernelsRunBackToBack) {
  auto t = make();
  t->start(GpuTiming::kBoth, false, "");
  FakeGpuDevice& d = FakeGpuDevice::instance();
  d.launch(2000, "earlier work");  // the device is behind the host, as on a busy GPU
  forwardCall(*t, 1, 0, {{OpKind::kQkvProjection, 300}, {OpKind::kSoftmax, 100}});
  forwardCall(*t, 2, 1, {{OpKind::kQkvProjection, 310}, {OpKind::kContextMatmul, 90}});
  const std::vector<CallRecord> calls = drain(*t);
  ASSERT_EQ(calls.size(), 2u);
  for (const CallRecord& c : calls) {
    int64_t kernels = 0;
    for (const CallRecord::Kind& k : c.kinds) kernels += k.ns;
    EXPECT_EQ(kernels, 400);
    EXPECT_NEAR(static_cast<double>(c.ns), static_cast<double>(kernels), 1.0)
        << "the event span of call on layer " << c.layer;
  }
}

TEST_F(GpuTimerTest, DroppedRecordsAreReported) {
  auto t = make();
  t->start(GpuTiming::kCupti, false, "");
  FakeGpuDevice::instance().cupti.dropped = 17;
  EXPECT_EQ(t->status().cuptiRecordsDropped, 17u);
  t->stop();
  EXPECT_TRUE(activity_.stopped);
  EXPECT_EQ(t->source(), GpuTiming::kOff);
}

}  // namespace
}  // namespace attnscope
