// The observer's GPU hooks end to end, on real LibTorch ops, autograd and torch.profiler, with
// only the GPU replaced by the Fake layers (there is none in CI): every top-level op and backward
// node of an attention call pushes its (call, layer, phase, op kind); the kernel launched under it
// (the fake launches one per id) lands in that cell of deviceStatistics(); the CUDA-event span of
// each call covers exactly its kernels; the fallback choices work through start().
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/nn/modules/activation.h>

#include "FakeGpu.h"
#include "GpuTesting.h"
#include "TorchProfiler.h"
#include "attnscope/MultiheadAttention.h"
#include "attnscope/attnscope.h"

namespace attnscope {
namespace {

using testing_gpu::FakeGpuActivityApi;
using testing_gpu::FakeGpuDevice;
using testing_gpu::FakeGpuEventApi;

constexpr uint64_t kKernelNs = 1000;

class GpuWiringTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeGpuDevice::instance().reset();
    events_ = FakeGpuEventApi::State();
    activity_ = FakeGpuActivityApi::State();
    activity_.kernelPerPopNs = kKernelNs;
    detail::setGpuLayersForTesting([this] {
      detail::GpuLayers layers;
      layers.events = std::make_unique<FakeGpuEventApi>(&events_);
      layers.activity = std::make_unique<FakeGpuActivityApi>(&activity_);
      layers.stream = &FakeGpuDevice::currentStream;
      return layers;
    });
  }
  void TearDown() override {
    stop();
    detail::setGpuLayersForTesting({});
  }

  static Config config(GpuTiming timing) {
    Config c;
    c.logLevel = LogLevel::kError;
    c.gpuTiming = timing;
    return c;
  }

  // Two MultiheadAttention layers, `steps` training steps.
  static void train(int steps) {
    torch::manual_seed(0);
    MultiheadAttention a("layers.0.attn", torch::nn::MultiheadAttentionOptions(32, 4));
    MultiheadAttention b("layers.1.attn", torch::nn::MultiheadAttentionOptions(32, 4));
    for (int s = 0; s < steps; ++s) {
      auto x = torch::randn({8, 2, 32});
      auto y = std::get<0>(a->forward(x, x, x, torch::Tensor(), false));
      auto z = std::get<0>(b->forward(y, y, y, torch::Tensor(), false));
      z.sum().backward();
      step();
    }
  }

  // Lets the training thread go on (one more CUDA API call), the device finish and the
  // collection thread (every 200 ms) fold every call.
  static StatsTable deviceTableWith(uint64_t callsPerCell, const std::vector<Phase>& phases) {
    FakeGpuDevice::instance().apiCall();
    FakeGpuDevice::instance().finishAll();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    StatsTable t;
    while (std::chrono::steady_clock::now() < deadline) {
      t = deviceStatistics();
      bool all = t.layers().size() == 2;
      for (const LayerStats& l : t.layers()) {
        for (Phase p : phases) {
          const PhaseStats* ph = l.phases[static_cast<int>(p)].get();
          all = all && ph != nullptr && ph->call.seconds.count() == callsPerCell;
        }
      }
      if (all) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return t;
  }

  // The layers handed in outlive the test: a stopped session is retired, not destroyed, and its
  // timer (and the fakes in it) goes at exit. Their states therefore live as long as the process.
  static FakeGpuEventApi::State& eventsState() {
    static FakeGpuEventApi::State state;
    return state;
  }
  static FakeGpuActivityApi::State& activityState() {
    static FakeGpuActivityApi::State state;
    return state;
  }
  FakeGpuEventApi::State& events_ = eventsState();
  FakeGpuActivityApi::State& activity_ = activityState();
};

const PhaseStats* phaseOf(const StatsTable& t, const std::string& layer, Phase p) {
  for (const LayerStats& l : t.layers()) {
    if (l.name == layer) return l.phases[static_cast<int>(p)].get();
  }
  return nullptr;
}

TEST_F(GpuWiringTest, DeviceTableMatchesTheHostTableOpForOp) {
  start(config(GpuTiming::kBoth));
  ASSERT_EQ(gpuStatus().source, GpuTiming::kBoth);
  train(3);
  const StatsTable device = deviceTableWith(3, {Phase::kForward, Phase::kBackward});
  const StatsTable host = statistics();
  ASSERT_EQ(device.layerNames(), host.layerNames());
  for (const std::string layer : {"layers.0.attn", "layers.1.attn"}) {
    for (Phase p : {Phase::kForward, Phase::kBackward}) {
      const PhaseStats* d = phaseOf(device, layer, p);
      const PhaseStats* h = phaseOf(host, layer, p);
      ASSERT_NE(d, nullptr) << layer << " " << phaseName(p);
      ASSERT_NE(h, nullptr) << layer << " " << phaseName(p);
      EXPECT_EQ(d->call.seconds.count(), 3u) << layer << " " << phaseName(p);
      double kernels = 0;
      for (int k = 0; k < kNumOpKinds; ++k) {
        const uint64_t hostOps = h->kinds[k] ? h->kinds[k]->ops : 0;
        const uint64_t deviceOps = d->kinds[k] ? d->kinds[k]->ops : 0;
        // Forward: one kernel per top-level op, plus one per call under the call's own id.
        const uint64_t expected =
            hostOps + (p == Phase::kForward && static_cast<OpKind>(k) == OpKind::kOther ? 3 : 0);
        EXPECT_EQ(deviceOps, expected)
            << layer << " " << phaseName(p) << " " << opKindName(static_cast<OpKind>(k));
        if (d->kinds[k]) {
          kernels += d->kinds[k]->seconds.sum();
          EXPECT_NEAR(d->kinds[k]->seconds.sum(), deviceOps * kKernelNs * 1e-9, 1e-12);
        }
      }
      // The event span of each call covers exactly its kernels: they ran back to back.
      EXPECT_NEAR(d->call.seconds.sum(), kernels, kernels * 1e-3) << layer << " " << phaseName(p);
    }
  }
  const GpuStatus s = gpuStatus();
  EXPECT_EQ(activity_.pushes, activity_.pops);
  EXPECT_EQ(s.recordsLate, 0u);
  EXPECT_GT(s.spansResolved, 0u);
  ASSERT_EQ(s.backends.size(), 2u);
  EXPECT_EQ(s.backends[0].layer, "layers.0.attn");
  EXPECT_EQ(s.backends[0].dominant(), AttentionBackend::kMath);
}

TEST_F(GpuWiringTest, AnotherSubscriberMeansCudaEventsThroughStart) {
  activity_.failReason =
      "CUPTI is held by another subscriber (torch.profiler/Kineto, DCGM or Nsight)";
  start(config(GpuTiming::kAuto));
  const GpuStatus s = gpuStatus();
  EXPECT_EQ(s.source, GpuTiming::kEvents);
  EXPECT_EQ(s.fallbackReason,
            "CUPTI is held by another subscriber (torch.profiler/Kineto, DCGM or Nsight); using "
            "CUDA events");
  train(2);
  const StatsTable device = deviceTableWith(2, {Phase::kForward, Phase::kBackward});
  const PhaseStats* fwd = phaseOf(device, "layers.1.attn", Phase::kForward);
  ASSERT_NE(fwd, nullptr);
  EXPECT_EQ(fwd->call.seconds.count(), 2u);
  for (const auto& k : fwd->kinds) EXPECT_EQ(k, nullptr) << "no op kinds without CUPTI";
  EXPECT_EQ(activity_.pushes, 0);
  // Every call of both layers, forward and backward, was timed by a pair of events.
  EXPECT_EQ(gpuStatus().spansResolved, 2u * 2u * 2u);
  EXPECT_EQ(gpuStatus().eventsInPool, static_cast<uint64_t>(events_.created));
}

TEST_F(GpuWiringTest, TorchProfilerRunningAtStartMeansCudaEventsAndCuptiUntouched) {
  namespace prof = torch::profiler::impl;
  startTorchProfiler();
  start(config(GpuTiming::kAuto));
  const GpuStatus s = gpuStatus();
  torch::autograd::profiler::disableProfiler();
  EXPECT_EQ(s.source, GpuTiming::kEvents);
  EXPECT_EQ(s.fallbackReason,
            "torch.profiler (Kineto) is running and holds CUPTI; using CUDA events");
  EXPECT_EQ(activity_.startCalls, 0);
}

TEST_F(GpuWiringTest, TorchProfilerStartedLaterSwitchesToEventsAtTheNextStep) {
  namespace prof = torch::profiler::impl;
  start(config(GpuTiming::kAuto));
  ASSERT_EQ(gpuStatus().source, GpuTiming::kCupti);
  train(1);
  startTorchProfiler();
  step();
  const GpuStatus s = gpuStatus();
  torch::autograd::profiler::disableProfiler();
  EXPECT_EQ(s.source, GpuTiming::kEvents);
  EXPECT_EQ(s.fallbackReason,
            "torch.profiler started while attnscope used CUPTI; using CUDA events from now on");
  startTorchProfiler();
  stop();  // while the profiler still traces
  torch::autograd::profiler::disableProfiler();
  EXPECT_TRUE(activity_.stoppedWithProfiler) << "stop() saw the profiler of its caller's thread";
  EXPECT_TRUE(FakeGpuDevice::instance().cupti.enabled) << "its kinds are left to the profiler";
}

TEST_F(GpuWiringTest, CuptiIsGivenBackAtStopOnceTheProfilerIsDone) {
  start(config(GpuTiming::kAuto));
  train(1);
  startTorchProfiler();
  step();
  torch::autograd::profiler::disableProfiler();
  stop();
  EXPECT_TRUE(activity_.stopped);
  EXPECT_FALSE(activity_.stoppedWithProfiler);
  EXPECT_FALSE(FakeGpuDevice::instance().cupti.enabled) << "nothing left enabled by attnscope";
}

TEST_F(GpuWiringTest, TheDeviceInUseIsKnownUnderCuptiToo) {
  start(config(GpuTiming::kAuto));
  ASSERT_EQ(gpuStatus().source, GpuTiming::kCupti);
  train(1);
  EXPECT_EQ(gpuStatus().device, 0) << "the allocator's figures are read for this device";
}

TEST_F(GpuWiringTest, StopCollectsOnAttnscopesThreadNotTheCallers) {
  start(config(GpuTiming::kBoth));
  train(2);
  size_t before;  // the device's clock stands still: every span is still pending at stop
  {
    std::lock_guard<std::recursive_mutex> lock(FakeGpuDevice::instance().mutex);
    before = events_.threads.size();
  }
  stop();
  ASSERT_GT(events_.threads.size(), before) << "the final collection read events back";
  for (size_t i = before; i < events_.threads.size(); ++i) {
    const std::thread::id id = events_.threads[i];
    EXPECT_NE(id, std::this_thread::get_id())
        << "the training thread's current device and capture mode are not attnscope's to change";
  }
}

TEST_F(GpuWiringTest, UnsampledStepsTouchNoGpuLayer) {
  Config c = config(GpuTiming::kBoth);
  c.sampleEvery = 2;
  start(c);
  train(1);  // step 0: sampled
  const int pushes = activity_.pushes, records = events_.records;
  EXPECT_GT(pushes, 0);
  train(1);  // step 1: not sampled
  EXPECT_EQ(activity_.pushes, pushes);
  EXPECT_EQ(events_.records, records);
}

// A compiled layer on a GPU: between its markers compiled code calls its extern ops (each under
// its own id) and launches the kernels Inductor generated straight from its wrapper, under the
// call's own id. Those take the kind their names say (names as Inductor generates them), the
// rest compiled_kernels; none is other.
TEST_F(GpuWiringTest, CompiledLayersKernelsTakeTheKindTheirNamesSay) {
  start(config(GpuTiming::kCupti));
  ASSERT_EQ(gpuStatus().source, GpuTiming::kCupti);
  using Marker = std::vector<at::Tensor>(at::TensorList, c10::string_view);
  using ExitMarker = std::vector<at::Tensor>(at::TensorList, c10::string_view, bool);
  const auto enter =
      c10::Dispatcher::singleton().findSchemaOrThrow("attnscope::layer_enter", "").typed<Marker>();
  const auto exit = c10::Dispatcher::singleton()
                        .findSchemaOrThrow("attnscope::layer_exit", "")
                        .typed<ExitMarker>();
  const std::vector<std::pair<const char*, uint64_t>> generated = {
      {"triton_poi_fused_clone_1", 100},
      {"triton_per_fused__softmax_add_eq_masked_fill_mul_14", 200},
      {"triton_poi_fused_add_cat_cos_mul_neg_sin_slice_unsqueeze_view_50", 300},
      {"triton_poi_fused_native_dropout_backward_0", 400},
      {"triton_per_fused_add_mean_mul_pow_rsqrt_3", 500},  // an RMSNorm: no kind of attention's
  };
  constexpr int kSteps = 2;
  for (int s = 0; s < kSteps; ++s) {
    at::NoGradGuard noGrad;  // as in Inductor's wrapper
    for (const std::string layer : {"layers.0.attn", "layers.1.attn"}) {
      const at::Tensor input = torch::randn({4, 8}), weight = torch::randn({8, 8});
      std::vector<at::Tensor> x = enter.call({input}, layer);
      x[0] = at::mm(x[0], weight);  // an extern op: its kernel (the fake's) is its kind's
      for (const auto& [name, ns] : generated) FakeGpuDevice::instance().launch(ns, name);
      exit.call(x, layer, false);
    }
    step();
  }
  const StatsTable device = deviceTableWith(kSteps, {Phase::kForward});
  for (const std::string layer : {"layers.0.attn", "layers.1.attn"}) {
    const PhaseStats* d = phaseOf(device, layer, Phase::kForward);
    ASSERT_NE(d, nullptr) << layer;
    const auto seconds = [d](OpKind k) {
      const auto& cell = d->kinds[static_cast<int>(k)];
      return cell ? cell->seconds.sum() : 0.0;
    };
    EXPECT_NEAR(seconds(OpKind::kLayoutCopy), kSteps * 100e-9, 1e-12) << layer;
    EXPECT_NEAR(seconds(OpKind::kSoftmax), kSteps * 200e-9, 1e-12) << layer;
    EXPECT_NEAR(seconds(OpKind::kPositional), kSteps * 300e-9, 1e-12) << layer;
    EXPECT_NEAR(seconds(OpKind::kDropout), kSteps * 400e-9, 1e-12) << layer;
    // The RMSNorm, and the fake's one kernel per id popped: the call's own at its exit.
    EXPECT_NEAR(seconds(OpKind::kCompiledKernels), kSteps * (500 + kKernelNs) * 1e-9, 1e-12)
        << layer;
    EXPECT_NEAR(seconds(OpKind::kQkvProjection), kSteps * kKernelNs * 1e-9, 1e-12) << layer;
    EXPECT_EQ(seconds(OpKind::kOther), 0.0) << layer;
  }
}

}  // namespace
}  // namespace attnscope
