// GpuTimer and KernelAttributor driven through simulated training on the Fake device of
// FakeGpu.h, whose CUPTI behaves as NVIDIA documents it: kernels complete after a lag (the host
// runs 0.5 to 3 s ahead of the device), activity buffers come back only when every record in
// them is complete (so out of order, and records of one call in several buffers), a forced
// flush hands incomplete records over, records are dropped when buffers run out, and a second
// tool can take the buffers over. Time is simulated: a test of 12 s of training runs in
// milliseconds.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "FakeGpu.h"
#include "attnscope/collectors/GpuTimer.h"

namespace attnscope {
namespace {

using testing_gpu::FakeGpuActivityApi;
using testing_gpu::FakeGpuDevice;
using testing_gpu::FakeGpuEventApi;

constexpr uint64_t kUs = 1000;
constexpr uint64_t kMs = 1000 * kUs;
constexpr uint64_t kSecond = 1000 * kMs;
constexpr int kLayers = 4;

// One simulated training job: per step, a forward of kLayers attention calls (five ops, one
// kernel each, plus an MLP kernel outside attention after each layer), then a backward of
// three autograd nodes per layer (two kernels each) and one MLP kernel per layer. The host
// spends 20 us per CUDA API call and runs ahead of the device; once 3 s ahead it waits (a
// synchronisation, the caching allocator, CUDA's launch queue) until 0.5 s ahead. The
// collection thread's rounds run every 200 ms of the clock.
class Training {
 public:
  struct Expected {
    int32_t layer;
    Phase phase;
    int64_t ns;
    uint32_t kernels;
  };

  Training(GpuTimer& timer, uint64_t kernelScale = 1) : t_(timer), scale_(kernelScale) {}

  // Runs steps until the device clock reaches `until`.
  void runUntil(uint64_t until) {
    while (device().clock() < until) step();
  }
  void step() {
    for (int32_t layer = 0; layer < kLayers; ++layer) forward(layer);
    for (int32_t layer = kLayers; layer-- > 0;) backward(layer);
    t_.closeBackward();
    if (onStepEnd) onStepEnd();
    ++step_;
  }
  // Collection rounds until the clock reaches `until`, the host idle (it waits).
  void idleUntil(uint64_t until) {
    while (device().clock() < until) {
      device().advance(std::min<uint64_t>(nextRound_ - device().clock(), until - device().clock()));
      roundIfDue();
    }
  }

  std::vector<CallRecord> folded;
  std::map<std::pair<uint64_t, int>, Expected> expected;  // (instance, phase) -> launched
  std::function<void()> onStepEnd;
  uint64_t outsideKernels = 0;
  uint64_t attentionKernels = 0;
  uint64_t maxLeadNs = 0;
  uint64_t minLeadNs = UINT64_MAX;

 private:
  static FakeGpuDevice& device() { return FakeGpuDevice::instance(); }

  void hostWork() {
    device().advance(20 * kUs);
    const uint64_t lead = device().busyUntil() - device().clock();
    if (lead > 3 * kSecond) idleUntil(device().busyUntil() - kSecond / 2);
    roundIfDue();
  }
  void roundIfDue() {
    if (device().clock() < nextRound_) return;
    if (device().clock() > 2 * kSecond) {  // past the start, when the host first gets ahead
      const uint64_t lead = device().busyUntil() - device().clock();
      maxLeadNs = std::max(maxLeadNs, lead);
      minLeadNs = std::min(minLeadNs, lead);
    }
    nextRound_ = device().clock() + 200 * kMs;
    const std::vector<CallRecord> r = t_.collect(false);
    folded.insert(folded.end(), r.begin(), r.end());
  }
  void launch(uint64_t ns, const char* name, bool attention) {
    device().launch(ns * scale_, name);
    (attention ? attentionKernels : outsideKernels) += 1;
    hostWork();
  }
  void forward(int32_t layer) {
    const uint64_t instance = ++instance_;
    GpuTimer::Span span;
    t_.callBegin(&span);
    const bool call = t_.pushOp(DeviceKey{instance, layer, Phase::kForward, OpKind::kOther});
    Expected& e = expected[{instance, static_cast<int>(Phase::kForward)}];
    e = Expected{layer, Phase::kForward, 0, 0};
    const std::pair<OpKind, uint64_t> ops[] = {{OpKind::kQkvProjection, 300 * kUs},
                                               {OpKind::kScoreMatmul, 200 * kUs},
                                               {OpKind::kSoftmax, 100 * kUs},
                                               {OpKind::kContextMatmul, 200 * kUs},
                                               {OpKind::kOutputProjection, 150 * kUs}};
    for (const auto& [kind, ns] : ops) {
      const bool pushed = t_.pushOp(DeviceKey{instance, layer, Phase::kForward, kind});
      device().apiCall();  // cudaStreamIsCapturing, cudaGetDevice...: no work
      launch(ns, "ampere_sgemm_128x64_tn", true);
      e.ns += static_cast<int64_t>(ns * scale_);
      e.kernels += 1;
      t_.popOp(pushed);
    }
    t_.popOp(call);
    t_.callEnd(&span, instance, layer, Phase::kForward);
    forwardInstance_[layer] = instance;
    launch(500 * kUs, "mlp_gemm", false);
  }
  void backward(int32_t layer) {
    launch(400 * kUs, "mlp_gemm_backward", false);
    const uint64_t instance = forwardInstance_[layer];
    Expected& e = expected[{instance, static_cast<int>(Phase::kBackward)}];
    e = Expected{layer, Phase::kBackward, 0, 0};
    for (int node = 0; node < 3; ++node) {
      t_.nodeBegin(instance, layer);
      const bool pushed =
          t_.pushOp(DeviceKey{instance, layer, Phase::kBackward, OpKind::kScoreMatmul});
      for (int k = 0; k < 2; ++k) {
        launch(250 * kUs, "ampere_sgemm_64x64_nn", true);
        e.ns += static_cast<int64_t>(250 * kUs * scale_);
        e.kernels += 1;
      }
      t_.popOp(pushed);
      t_.nodeEnd(instance);
    }
  }

  GpuTimer& t_;
  uint64_t scale_;
  uint64_t instance_ = 0;
  uint64_t step_ = 0;
  uint64_t nextRound_ = 0;
  std::map<int32_t, uint64_t> forwardInstance_;
};

class GpuTrainingSimulationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeGpuDevice::instance().reset();
    // Buffers of the size the CUPTI layer asks for at this simulation's record rate (about
    // 300 kB/s).
    FakeGpuDevice::instance().cupti.bufferBytes = activityBufferBytes(300e3);
  }

  std::unique_ptr<GpuTimer> make() {
    return std::make_unique<GpuTimer>(std::make_unique<FakeGpuEventApi>(&events_),
                                      std::make_unique<FakeGpuActivityApi>(&activity_),
                                      &FakeGpuDevice::currentStream, GpuTimer::Options());
  }

  // Every folded call's kernel time is exactly what it launched, each call folds once.
  static void expectExact(const Training& run, const char* what) {
    std::map<std::pair<int32_t, int>, int> seen;
    for (const CallRecord& c : run.folded) {
      int64_t sum = 0;
      uint32_t kernels = 0;
      for (const CallRecord::Kind& k : c.kinds) {
        sum += k.ns;
        kernels += k.ops;
      }
      // Find the call by its figures: per (layer, phase) every call launches the same work.
      bool found = false;
      for (const auto& [key, e] : run.expected) {
        if (e.layer == c.layer && e.phase == c.phase) {
          EXPECT_EQ(sum, e.ns) << what << ": layer " << c.layer << " phase "
                               << static_cast<int>(c.phase);
          EXPECT_EQ(kernels, e.kernels) << what;
          found = true;
          break;
        }
      }
      EXPECT_TRUE(found) << what;
      ++seen[{c.layer, static_cast<int>(c.phase)}];
    }
  }

  FakeGpuEventApi::State events_;
  FakeGpuActivityApi::State activity_;
};

TEST_F(GpuTrainingSimulationTest, EveryKernelIsAttributedWhileTheHostRunsSecondsAhead) {
  auto t = make();
  t->start(GpuTiming::kAuto, false, "");
  ASSERT_EQ(t->source(), GpuTiming::kCupti);
  Training run(*t, /*kernelScale=*/4);
  run.runUntil(12 * kSecond);
  // The host was 0.5 to 3 s ahead of the device the whole time, as in real training.
  EXPECT_GE(run.minLeadNs, kSecond / 2 - 20 * kUs);
  EXPECT_LE(run.maxLeadNs, 3 * kSecond + 2 * kMs);
  EXPECT_GT(run.maxLeadNs, 2 * kSecond);
  const size_t calls = run.expected.size();
  // Training goes on while the device catches up with what was launched so far.
  const uint64_t launchedBy = FakeGpuDevice::instance().busyUntil();
  run.runUntil(launchedBy + kSecond);
  ASSERT_GE(run.folded.size(), calls) << "every call launched in the first 12 s folded";
  expectExact(run, "steady state");
  const GpuStatus s = t->status();
  EXPECT_EQ(s.recordsLate, 0u);
  EXPECT_EQ(s.recordsUnattributed, 0u);
  EXPECT_EQ(s.callsGivenUp, 0u);
  EXPECT_EQ(s.cuptiRecordsDropped, 0u);
  EXPECT_GT(s.recordsOutside, 0u) << "the MLP kernels, outside attention";
  uint64_t foldedKernels = 0;
  for (const CallRecord& c : run.folded)
    for (const CallRecord::Kind& k : c.kinds) foldedKernels += k.ops;
  EXPECT_GE(s.kernelsAttributed, foldedKernels);
  EXPECT_LT(s.kernelsAttributed - foldedKernels, 2u * kLayers * 11)
      << "only the kernels of the last step's calls, still open, are not folded yet";
}

TEST_F(GpuTrainingSimulationTest, EventsAndKernelsAgreeCallForCallInBothMode) {
  auto t = make();
  t->start(GpuTiming::kBoth, false, "");
  ASSERT_EQ(t->source(), GpuTiming::kBoth);
  Training run(*t, 4);
  run.runUntil(10 * kSecond);
  run.runUntil(FakeGpuDevice::instance().busyUntil() + kSecond);
  ASSERT_GT(run.folded.size(), 100u);
  expectExact(run, "both");
  for (const CallRecord& c : run.folded) {
    int64_t sum = 0;
    for (const CallRecord::Kind& k : c.kinds) sum += k.ns;
    if (c.phase == Phase::kForward) EXPECT_NEAR(c.ns, sum, 1000) << "span = kernels back to back";
  }
  EXPECT_EQ(t->status().recordsLate, 0u);
  EXPECT_EQ(t->status().recordsUnattributed, 0u);
}

TEST_F(GpuTrainingSimulationTest, StopWithRecordsInFlightFoldsOnlyWhatRan) {
  auto t = make();
  t->start(GpuTiming::kAuto, false, "");
  Training run(*t, 4);
  run.runUntil(10 * kSecond);
  ASSERT_GT(FakeGpuDevice::instance().busyUntil() - FakeGpuDevice::instance().clock(), kSecond / 2)
      << "the device is still behind";
  const std::vector<CallRecord> last = t->collect(/*final=*/true);
  run.folded.insert(run.folded.end(), last.begin(), last.end());
  t->stop();
  expectExact(run, "at stop");
  const GpuStatus s = t->status();
  EXPECT_GT(s.callsInFlightAtStop, 0u) << "calls still on the device are left out, counted";
  EXPECT_GT(s.recordsInFlightAtStop, 0u);
  EXPECT_EQ(s.recordsLate, 0u);
  EXPECT_EQ(s.recordsUnattributed, 0u);
  EXPECT_EQ(run.folded.size() + s.callsInFlightAtStop, run.expected.size())
      << "every call either folded whole or counted as in flight";
  EXPECT_FALSE(FakeGpuDevice::instance().cupti.enabled) << "CUPTI given back";
}

TEST_F(GpuTrainingSimulationTest, AProfilerTakingCuptiMidRunMeansEventsFromTheNextStep) {
  auto t = make();
  t->start(GpuTiming::kAuto, false, "");
  Training run(*t, 4);
  bool profiling = false;
  run.onStepEnd = [&] {
    // torch.profiler starts at 5 s: Kineto registers its buffer callbacks; GpuCollection sees it
    // at the step boundary.
    if (!profiling && FakeGpuDevice::instance().clock() >= 5 * kSecond) {
      profiling = true;
      FakeGpuDevice::instance().cupti.otherTool = true;
      t->profilerStarted();
    }
  };
  run.runUntil(12 * kSecond);
  const size_t beforeDrain = run.folded.size();
  run.runUntil(FakeGpuDevice::instance().busyUntil() + kSecond);
  EXPECT_GT(run.folded.size(), beforeDrain);
  const GpuStatus s = t->status();
  EXPECT_EQ(s.source, GpuTiming::kEvents);
  EXPECT_EQ(s.fallbackReason,
            "torch.profiler started while attnscope used CUPTI; using CUDA events from now on");
  EXPECT_EQ(s.recordsLate, 0u);
  EXPECT_EQ(s.recordsUnattributed, 0u);
  // Calls timed by CUPTI before the switch are exact; after it, spans time them.
  size_t spans = 0;
  for (const CallRecord& c : run.folded) {
    uint32_t ops = 0;
    for (const CallRecord::Kind& k : c.kinds) ops += k.ops;
    if (ops == 0) ++spans;
  }
  EXPECT_GT(spans, 100u);
  EXPECT_GT(FakeGpuDevice::instance().cupti.toOtherTool, 0u) << "the profiler got its records";
  t->stop(/*profilerRunning=*/true);
  EXPECT_TRUE(FakeGpuDevice::instance().cupti.enabled) << "left to the profiler's trace";
}

TEST_F(GpuTrainingSimulationTest, ACuptiThatStopsDeliveringFallsBackToEventsOnItsOwn) {
  auto t = make();
  t->start(GpuTiming::kAuto, false, "");
  Training run(*t, 4);
  run.onStepEnd = [&] {
    // Nsight (or any tool but torch.profiler, which attnscope would see) takes the buffers.
    if (FakeGpuDevice::instance().clock() >= 3 * kSecond)
      FakeGpuDevice::instance().cupti.otherTool = true;
  };
  run.runUntil(70 * kSecond);  // over 4096 attention calls after it went silent
  const GpuStatus s = t->status();
  EXPECT_EQ(s.source, GpuTiming::kEvents);
  EXPECT_EQ(s.fallbackReason.rfind("CUPTI delivered no records for ", 0), 0u) << s.fallbackReason;
  EXPECT_EQ(s.recordsLate, 0u);
  EXPECT_GT(s.spansResolved, 0u) << "training is still timed";
}

TEST_F(GpuTrainingSimulationTest, DroppedRecordsAreCountedAndHoldNothingBack) {
  auto t = make();
  t->start(GpuTiming::kAuto, false, "");
  FakeGpuDevice::instance().cupti.maxBuffers = 12;  // 12 x 64 KiB: less than 3 s of records
  Training run(*t, 4);
  run.runUntil(12 * kSecond);
  run.runUntil(FakeGpuDevice::instance().busyUntil() + kSecond);
  const GpuStatus s = t->status();
  EXPECT_GT(s.cuptiRecordsDropped, 0u);
  EXPECT_GT(run.folded.size(), 100u) << "calls after the drops still fold";
  EXPECT_EQ(s.recordsLate, 0u);
}

}  // namespace
}  // namespace attnscope
