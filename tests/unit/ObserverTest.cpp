// The observer on real LibTorch: ops, autograd (also on another thread and under recompute),
// the CPU allocator's reports, sampling and step inference, torch.profiler coexistence.
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_scaled_dot_product_attention_math.h>
#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>
#include <torch/nn/modules/activation.h>

#include "TorchProfiler.h"
#include "attnscope/ModuleScope.h"
#include "attnscope/MultiheadAttention.h"
#include "attnscope/attnscope.h"

namespace attnscope {
namespace {

bool acceleratorAvailableForTest() { return torch::cuda::is_available(); }

Config quietConfig() {
  Config c;
  c.logLevel = LogLevel::kWarn;
  return c;
}

const PhaseStats* findPhase(const StatsTable& stats, const std::string& layer, Phase phase) {
  for (const LayerStats& l : stats.layers()) {
    if (l.name == layer) return l.phases[static_cast<int>(phase)].get();
  }
  return nullptr;
}

const CellStats* findKind(const PhaseStats* phase, OpKind kind) {
  return phase ? phase->kinds[static_cast<int>(kind)].get() : nullptr;
}

// Unfused attention on [batch, seq, d_model] with an explicit recipe:
// linear (qkv), chunk/view/transpose (layout), bmm (score), div (scaling of the scores: softmax
// stage), softmax, bmm (context), transpose/reshape (layout), linear (output).
torch::Tensor naiveAttention(const torch::Tensor& x, const torch::Tensor& wqkv,
                             const torch::Tensor& wo, int64_t heads) {
  const int64_t b = x.size(0), s = x.size(1), d = x.size(2), dh = d / heads;
  auto qkv = torch::linear(x, wqkv).chunk(3, -1);
  auto split = [&](const torch::Tensor& t) {
    return t.reshape({b, s, heads, dh}).transpose(1, 2).reshape({b * heads, s, dh});
  };
  auto q = split(qkv[0]), k = split(qkv[1]), v = split(qkv[2]);
  auto scores = torch::bmm(q, k.transpose(1, 2)).div(std::sqrt(static_cast<double>(dh)));
  auto p = torch::softmax(scores, -1);
  auto ctx = torch::bmm(p, v).reshape({b, heads, s, dh}).transpose(1, 2).reshape({b, s, d});
  return torch::linear(ctx, wo);
}

struct Weights {
  explicit Weights(int64_t d)
      : wqkv(torch::randn({3 * d, d}).mul_(0.1).requires_grad_()),
        wo(torch::randn({d, d}).mul_(0.1).requires_grad_()) {}
  torch::Tensor wqkv, wo;
};

class ObserverTest : public ::testing::Test {
 protected:
  void TearDown() override { stop(); }
};

// Two attention layers trained for `steps` steps, a relu between them outside any call. `close`:
// each scope ends with AttentionScope::close(result) (backward on node hooks), else with its
// destructor (the global callback). `beforeBackward(i)` runs before step i's backward.
void trainTwoLayers(int steps, bool close, const std::function<void(int)>& beforeBackward = {}) {
  Weights w0(32), w1(32);
  for (int i = 0; i < steps; ++i) {
    torch::Tensor h = torch::randn({2, 16, 32});
    {
      AttentionScope scope("layers.0.attn");
      h = naiveAttention(h, w0.wqkv, w0.wo, 4);
      if (close) scope.close(&h, 1);
    }
    h = torch::relu(h) * 2;  // outside any call: not recorded, and its nodes carry no hook
    {
      AttentionScope scope("layers.1.attn");
      h = naiveAttention(h, w1.wqkv, w1.wo, 4);
      if (close) scope.close(&h, 1);
    }
    if (beforeBackward) beforeBackward(i);
    h.sum().backward();
    step();
  }
}

// Per layer: forward and backward calls equal the steps; every recipe kind has as many backward
// samples as forward ones; the recipe's top-level ops (2 linears, 2 bmm, the scaling div and the
// softmax per call) and their nodes each counted once.
void expectBackwardMirrorsForward(int steps) {
  const StatsTable stats = statistics();
  ASSERT_EQ(stats.layers().size(), 2u);
  const auto n = static_cast<uint64_t>(steps);
  for (const char* layer : {"layers.0.attn", "layers.1.attn"}) {
    const PhaseStats* fwd = findPhase(stats, layer, Phase::kForward);
    const PhaseStats* bwd = findPhase(stats, layer, Phase::kBackward);
    ASSERT_NE(fwd, nullptr) << layer;
    ASSERT_NE(bwd, nullptr) << layer;
    EXPECT_EQ(fwd->call.seconds.count(), n) << layer;
    EXPECT_EQ(bwd->call.seconds.count(), n) << layer;
    for (OpKind kind : {OpKind::kQkvProjection, OpKind::kScoreMatmul, OpKind::kSoftmax,
                        OpKind::kContextMatmul, OpKind::kOutputProjection, OpKind::kLayoutCopy}) {
      const CellStats* f = findKind(fwd, kind);
      const CellStats* b = findKind(bwd, kind);
      ASSERT_NE(f, nullptr) << layer << " forward " << opKindName(kind);
      ASSERT_NE(b, nullptr) << layer << " backward " << opKindName(kind);
      EXPECT_EQ(f->seconds.count(), b->seconds.count()) << layer << " " << opKindName(kind);
      EXPECT_GT(b->seconds.sum(), 0.0) << layer << " " << opKindName(kind);
    }
    EXPECT_EQ(findKind(fwd, OpKind::kQkvProjection)->ops, n) << layer;
    EXPECT_EQ(findKind(fwd, OpKind::kOutputProjection)->ops, n) << layer;
    for (const PhaseStats* phase : {fwd, bwd}) {
      EXPECT_EQ(findKind(phase, OpKind::kScoreMatmul)->ops, n) << layer;
      EXPECT_EQ(findKind(phase, OpKind::kContextMatmul)->ops, n) << layer;
      EXPECT_EQ(findKind(phase, OpKind::kSoftmax)->ops, 2 * n) << layer;  // the div and softmax
    }
  }
}

TEST_F(ObserverTest, BackwardCountEqualsForwardCountPerLayerAndKind) {
  start(quietConfig());
  trainTwoLayers(5, /*close=*/false);
  expectBackwardMirrorsForward(5);
}

// The same figures with backward on node hooks, and no global callback on the steps between the
// collective observer's (one in StepController::kCollectiveEvery = 8).
TEST_F(ObserverTest, ClosedScopesObserveBackwardThroughNodeHooks) {
  start(quietConfig());
  trainTwoLayers(10, /*close=*/true, [](int i) {
    // Step 0 starts with the global callback (nothing hooked yet); after it only step 8 has it.
    EXPECT_EQ(at::hasGlobalCallbacks(), i == 0 || i == 8) << "step " << i;
  });
  expectBackwardMirrorsForward(10);
  EXPECT_EQ(runInfo().backwardObservation, "node_hooks");
}

// At sample-every 2 the collective observer runs on one sampled step in 8 (step 16), not on every
// sampled step 8 or more steps after the last.
TEST_F(ObserverTest, CollectiveObserverCountsSampledSteps) {
  Config c = quietConfig();
  c.sampleEvery = 2;
  start(c);
  trainTwoLayers(20, /*close=*/true, [](int i) {
    EXPECT_EQ(at::hasGlobalCallbacks(), i == 0 || i == 16) << "step " << i;
  });
  EXPECT_EQ(runInfo().backwardObservation, "node_hooks");
}

// Closed scopes without step() calls: unsampled steps hook one node to see the backward pass, so
// steps are still inferred with no global callback on them. The run's last step has no next
// attention call to end it: stop() ends it, and the summary counts every backward pass.
TEST_F(ObserverTest, ClosedScopesInferStepsWithoutACallback) {
  const std::string path =
      testing::TempDir() + "attnscope_inferred_steps_" + std::to_string(::getpid()) + ".json";
  Config c = quietConfig();
  c.sampleEvery = 2;
  c.summaryJson = path;
  start(c);
  auto x = torch::randn({4, 8}, torch::requires_grad());
  for (int i = 0; i < 7; ++i) {
    torch::Tensor y;
    {
      AttentionScope scope("attn");
      y = torch::softmax(x, -1);
      scope.close(&y, 1);
    }
    if (i > 0) EXPECT_FALSE(at::hasGlobalCallbacks()) << "step " << i;
    y.sum().backward();
  }
  EXPECT_EQ(runInfo().stepsSeen, 6u);  // the seventh ends at stop
  EXPECT_FALSE(runInfo().explicitSteps);
  const StatsTable stats = statistics();
  EXPECT_EQ(findPhase(stats, "attn", Phase::kForward)->call.seconds.count(), 4u);   // 0, 2, 4, 6
  EXPECT_EQ(findPhase(stats, "attn", Phase::kBackward)->call.seconds.count(), 3u);  // 6 unfolded
  stop();
  std::ifstream in(path);
  const std::string summary((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ::unlink(path.c_str());
  EXPECT_NE(summary.find("\"steps_seen\": 7,"), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"step_source\": \"backward_passes\""), std::string::npos) << summary;
}

// A result without autograd history (evaluation) means no backward: the run stays on hooks.
TEST_F(ObserverTest, ClosedScopesInEvaluationKeepTheHookPath) {
  start(quietConfig());
  Weights w(16);
  for (int i = 0; i < 4; ++i) {
    auto x = torch::randn({2, 8, 16});
    torch::Tensor h;
    {
      torch::NoGradGuard evaluation;
      AttentionScope scope("attn");
      h = naiveAttention(x, w.wqkv, w.wo, 2);
      scope.close(&h, 1);
    }
    {
      AttentionScope scope("attn");
      h = naiveAttention(x, w.wqkv, w.wo, 2);
      scope.close(&h, 1);
    }
    h.sum().backward();
    step();
  }
  EXPECT_FALSE(at::hasGlobalCallbacks());
  const StatsTable stats = statistics();
  EXPECT_EQ(findPhase(stats, "attn", Phase::kForward)->call.seconds.count(), 8u);
  EXPECT_EQ(findPhase(stats, "attn", Phase::kBackward)->call.seconds.count(), 4u);
}

TEST_F(ObserverTest, OpsOutsideScopesAreNotRecorded) {
  start(quietConfig());
  auto x = torch::randn({2, 8, 16}, torch::requires_grad());
  auto outside = torch::softmax(torch::bmm(x, x.transpose(1, 2)), -1);  // not attention
  torch::Tensor h;
  {
    AttentionScope scope("attn");
    h = torch::softmax(x, -1);
  }
  auto more = torch::bmm(h, h.transpose(1, 2));  // after the scope: not attention either
  (more.sum() + outside.sum()).backward();
  step();
  const StatsTable stats = statistics();
  ASSERT_EQ(stats.layers().size(), 1u);
  const PhaseStats* fwd = findPhase(stats, "attn", Phase::kForward);
  ASSERT_NE(fwd, nullptr);
  EXPECT_EQ(fwd->call.ops, 1u);  // just the softmax
  EXPECT_EQ(findKind(fwd, OpKind::kSoftmax)->ops, 1u);
  EXPECT_EQ(findKind(fwd, OpKind::kScoreMatmul), nullptr);
}

TEST_F(ObserverTest, MultiheadAttentionWrapperRecordsItsLayer) {
  start(quietConfig());
  MultiheadAttention attn("encoder.attn", torch::nn::MultiheadAttentionOptions(32, 4));
  for (int i = 0; i < 3; ++i) {
    auto x = torch::randn({16, 2, 32});
    auto out = std::get<0>(attn->forward(x, x, x, torch::Tensor(), false));
    out.sum().backward();
    step();
  }
  const StatsTable stats = statistics();
  const PhaseStats* fwd = findPhase(stats, "encoder.attn", Phase::kForward);
  const PhaseStats* bwd = findPhase(stats, "encoder.attn", Phase::kBackward);
  ASSERT_NE(fwd, nullptr);
  ASSERT_NE(bwd, nullptr);
  EXPECT_EQ(fwd->call.seconds.count(), 3u);
  EXPECT_EQ(bwd->call.seconds.count(), 3u);
  for (OpKind kind : {OpKind::kQkvProjection, OpKind::kScoreMatmul, OpKind::kSoftmax,
                      OpKind::kContextMatmul, OpKind::kOutputProjection}) {
    EXPECT_NE(findKind(fwd, kind), nullptr) << opKindName(kind);
    EXPECT_NE(findKind(bwd, kind), nullptr) << opKindName(kind);
  }
}

TEST_F(ObserverTest, SeveralCallsOfOneLayerPerStep) {
  start(quietConfig());
  Weights w(16);
  for (int i = 0; i < 4; ++i) {
    auto h = torch::randn({2, 8, 16});
    for (int call = 0; call < 3; ++call) {  // weight-shared layer applied three times
      AttentionScope scope("shared.attn");
      h = naiveAttention(h, w.wqkv, w.wo, 2);
    }
    h.sum().backward();
    step();
  }
  const StatsTable stats = statistics();
  EXPECT_EQ(findPhase(stats, "shared.attn", Phase::kForward)->call.seconds.count(), 12u);
  EXPECT_EQ(findPhase(stats, "shared.attn", Phase::kBackward)->call.seconds.count(), 12u);
}

// A compiled layer (between the markers) whose generated kernels name themselves, as Inductor's
// cpp.enable_kernel_profile makes them (a RecordFunction "graph_<n>_" + the kernel's name): each is
// an op of the kind its name says; the graph's wrapper around them stays a wrapper; the time no op
// saw is compiled_kernels as before.
TEST_F(ObserverTest, CompiledKernelsThatNameThemselvesTakeTheirKinds) {
  start(quietConfig());
  const auto enter = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("attnscope::layer_enter", "")
                         .typed<std::vector<at::Tensor>(at::TensorList, c10::string_view)>();
  const auto exit = c10::Dispatcher::singleton()
                        .findSchemaOrThrow("attnscope::layer_exit", "")
                        .typed<std::vector<at::Tensor>(at::TensorList, c10::string_view, bool)>();
  const at::Tensor input = torch::randn({4, 8}), weight = torch::randn({8, 8});
  for (int s = 0; s < 3; ++s) {
    at::NoGradGuard noGrad;  // as in Inductor's wrapper
    std::vector<at::Tensor> x = enter.call({input}, "layers.0.attn");
    {
      RECORD_FUNCTION("## Call CompiledFxGraph ##", std::vector<c10::IValue>());
      x[0] = at::mm(x[0], weight);
      {
        RECORD_FUNCTION("graph_0_cpp_fused__softmax_eq_masked_fill_mul_2",
                        std::vector<c10::IValue>());
      }
      {
        RECORD_FUNCTION("graph_0_cpp_fused__to_copy_cat_cos_mul_neg_sin_1",
                        std::vector<c10::IValue>());
      }
      { RECORD_FUNCTION("graph_0_cpp_fused_add_mean_mul_pow_rsqrt_0", std::vector<c10::IValue>()); }
    }
    exit.call(x, "layers.0.attn", false);
    step();
  }
  const PhaseStats* forward = findPhase(statistics(), "layers.0.attn", Phase::kForward);
  ASSERT_NE(forward, nullptr);
  EXPECT_EQ(forward->call.seconds.count(), 3u);
  const auto ops = [forward](OpKind k) {
    const CellStats* cell = findKind(forward, k);
    return cell ? cell->ops : 0;
  };
  EXPECT_EQ(ops(OpKind::kQkvProjection), 3u);
  EXPECT_EQ(ops(OpKind::kSoftmax), 3u);
  EXPECT_EQ(ops(OpKind::kPositional), 3u);
  // The RMSNorm kernel (no attention kind) and the rest of each call.
  EXPECT_EQ(ops(OpKind::kCompiledKernels), 6u);
  EXPECT_EQ(ops(OpKind::kOther), 0u);
}

TEST_F(ObserverTest, NestedScopesAttributeOpsToTheInnermost) {
  start(quietConfig());
  auto x = torch::randn({4, 8}, torch::requires_grad());
  torch::Tensor y;
  {
    AttentionScope outer("block");
    auto a = torch::softmax(x, -1);  // outer
    {
      AttentionScope inner("block.attn");
      y = torch::softmax(a, -1).mul(2.0);  // inner: softmax, then mul (other after softmax)
    }
    y = y.relu();  // outer again
  }
  y.sum().backward();
  step();
  const StatsTable stats = statistics();
  const PhaseStats* outer = findPhase(stats, "block", Phase::kForward);
  const PhaseStats* inner = findPhase(stats, "block.attn", Phase::kForward);
  ASSERT_NE(outer, nullptr);
  ASSERT_NE(inner, nullptr);
  EXPECT_EQ(outer->call.ops, 2u);  // softmax, relu
  EXPECT_EQ(inner->call.ops, 2u);  // softmax, mul
  EXPECT_GE(outer->call.seconds.sum(), inner->call.seconds.sum());
  EXPECT_EQ(findPhase(stats, "block.attn", Phase::kBackward)->call.seconds.count(), 1u);
  EXPECT_EQ(findPhase(stats, "block", Phase::kBackward)->call.seconds.count(), 1u);
}

TEST_F(ObserverTest, BackwardOnAnotherThreadIsAttributed) {
  start(quietConfig());
  Weights w(16);
  auto x = torch::randn({2, 8, 16});
  torch::Tensor h;
  {
    AttentionScope scope("attn");
    h = naiveAttention(x, w.wqkv, w.wo, 2);
  }
  std::thread other([&] { h.sum().backward(); });
  other.join();
  step();
  const StatsTable stats = statistics();
  const PhaseStats* bwd = findPhase(stats, "attn", Phase::kBackward);
  ASSERT_NE(bwd, nullptr);
  EXPECT_EQ(bwd->call.seconds.count(), 1u);
  EXPECT_NE(findKind(bwd, OpKind::kSoftmax), nullptr);
  EXPECT_NE(findKind(bwd, OpKind::kQkvProjection), nullptr);
}

// Reentrant activation checkpointing, as torch.utils.checkpoint does it: forward without saving
// activations, recompute inside backward with grad enabled, backpropagate through the recompute.
// `Close`: the scopes end with AttentionScope::close(result) (the forward's result has no history,
// as the function's forward runs without grad; the recompute's nodes are hooked and run in the
// inner backward), else with their destructor.
template <bool Close>
struct CheckpointedAttention : public torch::autograd::Function<CheckpointedAttention<Close>> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               torch::Tensor wqkv, torch::Tensor wo) {
    ctx->save_for_backward({x, wqkv, wo});
    AttentionScope scope("ckpt.attn");
    torch::Tensor out = naiveAttention(x, wqkv, wo, 2);
    if (Close) scope.close(&out, 1);
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto x = saved[0].detach().requires_grad_();
    torch::AutoGradMode enable(true);
    torch::Tensor out;
    {
      AttentionScope scope("ckpt.attn");
      out = naiveAttention(x, saved[1], saved[2], 2);
      if (Close) scope.close(&out, 1);
    }
    auto g = torch::autograd::grad({out}, {x, saved[1], saved[2]}, {grads[0]});
    return {g[0], g[1], g[2]};
  }
};

template <bool Close>
void expectRecomputeCountedAsRecompute() {
  start(quietConfig());
  Weights w(16);
  for (int i = 0; i < 3; ++i) {
    auto x = torch::randn({2, 8, 16}, torch::requires_grad());
    auto y = CheckpointedAttention<Close>::apply(x, w.wqkv, w.wo);
    y.sum().backward();
    step();
  }
  const StatsTable stats = statistics();
  const PhaseStats* fwd = findPhase(stats, "ckpt.attn", Phase::kForward);
  const PhaseStats* re = findPhase(stats, "ckpt.attn", Phase::kRecompute);
  const PhaseStats* bwd = findPhase(stats, "ckpt.attn", Phase::kBackward);
  ASSERT_NE(fwd, nullptr);
  ASSERT_NE(re, nullptr);
  ASSERT_NE(bwd, nullptr);
  EXPECT_EQ(fwd->call.seconds.count(), 3u);
  EXPECT_EQ(re->call.seconds.count(), 3u);
  EXPECT_EQ(bwd->call.seconds.count(), 3u);
  EXPECT_NE(findKind(bwd, OpKind::kScoreMatmul), nullptr);
  EXPECT_EQ(runInfo().backwardObservation, Close ? "node_hooks" : "callback");
}

TEST_F(ObserverTest, CheckpointRecomputeIsCountedAsRecomputeNotForward) {
  expectRecomputeCountedAsRecompute<false>();
}

TEST_F(ObserverTest, ClosedCheckpointRecomputeIsCountedAsRecompute) {
  expectRecomputeCountedAsRecompute<true>();
}

TEST_F(ObserverTest, MemoryOfAKnownAllocationPattern) {
  start(quietConfig());
  constexpr int64_t n = 1 << 18;  // floats: 1 MiB
  constexpr int64_t mib = 4 * n;
  {
    AttentionScope scope("mem");
    auto a = torch::empty({n});      // +1 MiB (layout_copy)
    auto b = torch::empty({2 * n});  // +2 MiB, live 3 MiB above entry
    a.reset();                       // free 1 MiB: live 2 MiB
    auto c = torch::empty({n});      // +1 MiB: live 3 MiB again
    auto s = torch::softmax(torch::empty({4, n / 4}).fill_(1.0), -1);  // +1 MiB fill, +1 MiB out
  }
  step();
  const StatsTable stats = statistics();
  const PhaseStats* fwd = findPhase(stats, "mem", Phase::kForward);
  ASSERT_NE(fwd, nullptr);
  const CellStats* layout = findKind(fwd, OpKind::kLayoutCopy);
  const CellStats* softmax = findKind(fwd, OpKind::kSoftmax);
  ASSERT_NE(layout, nullptr);
  ASSERT_NE(softmax, nullptr);
  EXPECT_EQ(layout->bytes, 5 * mib);  // a, b, c, and the softmax input (empty + fill_)
  EXPECT_EQ(softmax->bytes, mib);
  // The softmax runs with b, c, its input and its output live: 5 MiB above the scope's entry.
  EXPECT_EQ(softmax->peak, 5 * mib);
  EXPECT_EQ(layout->peak, 4 * mib);
  EXPECT_EQ(fwd->call.bytes, 6 * mib);
  EXPECT_EQ(fwd->call.peak, 5 * mib);
}

TEST_F(ObserverTest, SamplingRecordsOneStepInNAndInstallsNothingOnOthers) {
  Config c = quietConfig();
  c.sampleEvery = 4;
  start(c);
  auto x = torch::randn({4, 8}, torch::requires_grad());
  int sampledSteps = 0;
  for (int i = 0; i < 12; ++i) {
    const bool sampled = i % 4 == 0;
    sampledSteps += sampled;
    {
      AttentionScope scope("attn");
      EXPECT_EQ(at::hasThreadLocalCallbacks(), sampled) << "step " << i;
      torch::softmax(x, -1).sum().backward();
    }
    EXPECT_EQ(at::hasGlobalCallbacks(), sampled) << "step " << i;
    step();
  }
  const RunInfo run = runInfo();
  EXPECT_EQ(run.stepsSeen, 12u);
  EXPECT_EQ(run.stepsSampled, static_cast<uint64_t>(sampledSteps));
  EXPECT_EQ(findPhase(statistics(), "attn", Phase::kForward)->call.seconds.count(), 3u);
}

TEST_F(ObserverTest, WithoutStepCallsABackwardPassIsAStep) {
  start(quietConfig());
  auto x = torch::randn({4, 8}, torch::requires_grad());
  for (int i = 0; i < 5; ++i) {
    torch::Tensor y;
    {
      AttentionScope scope("attn");
      y = torch::softmax(x, -1);
    }
    y.sum().backward();
  }
  // The fifth step ends at the next attention call (or at stop).
  EXPECT_EQ(runInfo().stepsSeen, 4u);
  EXPECT_FALSE(runInfo().explicitSteps);
  const StatsTable stats = statistics();
  EXPECT_EQ(findPhase(stats, "attn", Phase::kForward)->call.seconds.count(), 5u);
  EXPECT_EQ(findPhase(stats, "attn", Phase::kBackward)->call.seconds.count(), 4u);  // 5th unfolded
}

TEST_F(ObserverTest, BadConfigurationThrowsAndInstallsNothing) {
  Config c = quietConfig();
  c.sampleEvery = 0;
  EXPECT_THROW(start(c), std::invalid_argument);
  EXPECT_FALSE(isRunning());
  EXPECT_FALSE(at::hasGlobalCallbacks());
}

TEST_F(ObserverTest, NcclAggregationIsRefusedAtStartWithTheReason) {
  Config c = quietConfig();
  c.aggregation = Aggregation::kNccl;
  try {
    start(c);
    ADD_FAILURE() << "start() accepted ATTNSCOPE_AGGREGATION=nccl";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("deadlock"), std::string::npos) << what;
    EXPECT_NE(what.find("TORCH_NCCL_ASYNC_ERROR_HANDLING"), std::string::npos) << what;
    EXPECT_NE(what.find("new_group(backend=\"gloo\")"), std::string::npos) << what;
    EXPECT_EQ(what.find("nccl,"), std::string::npos) << "not among the allowed: " << what;
  }
  EXPECT_FALSE(isRunning());
}

TEST_F(ObserverTest, ScopesAreInertWhenNotRunningOrDisabled) {
  {
    AttentionScope scope("attn");
    EXPECT_FALSE(at::hasThreadLocalCallbacks());
  }
  Config c = quietConfig();
  c.enable = false;
  start(c);
  EXPECT_FALSE(isRunning());
  {
    AttentionScope scope("attn");
    EXPECT_FALSE(at::hasThreadLocalCallbacks());
  }
  stop();
  stop();  // idempotent
}

TEST_F(ObserverTest, LayerCapBoundsState) {
  Config c = quietConfig();
  c.maxLayers = 2;
  start(c);
  auto x = torch::randn({4, 8});
  for (const char* name : {"a", "b", "c", "d"}) {
    AttentionScope scope(name);
    torch::softmax(x, -1);
  }
  step();
  EXPECT_EQ(statistics().layers().size(), 2u);
  EXPECT_EQ(runInfo().droppedCalls, 2u);
}

// A hand-written LibTorch attention module marked with one line; the layer is its path.
struct TinyAttentionImpl : torch::nn::Module {
  TinyAttentionImpl() : w(register_parameter("w", torch::randn({48, 16}).mul_(0.1))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    ModuleScope scope(*this);
    auto qkv = torch::linear(x, w).chunk(3, -1);
    auto p = torch::softmax(torch::matmul(qkv[0], qkv[1].transpose(-2, -1)), -1);
    return torch::matmul(p, qkv[2]);
  }
  torch::Tensor w;
};
TORCH_MODULE(TinyAttention);

struct TinyModelImpl : torch::nn::Module {
  TinyModelImpl() {
    for (int i = 0; i < 2; ++i)
      blocks.push_back(register_module("blocks_" + std::to_string(i), TinyAttention()));
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& b : blocks) x = b->forward(x);
    return x;
  }
  std::vector<TinyAttention> blocks;
};
TORCH_MODULE(TinyModel);

TEST_F(ObserverTest, ModuleScopeNamesTheLayerByItsPath) {
  start(quietConfig());
  TinyModel model;
  nameModules(*model);
  for (int i = 0; i < 2; ++i) {
    model->forward(torch::randn({2, 4, 16})).sum().backward();
    step();
  }
  const StatsTable stats = statistics();
  ASSERT_EQ(stats.layers().size(), 2u);
  EXPECT_EQ(stats.layers()[0].name, "blocks_0");
  EXPECT_EQ(stats.layers()[1].name, "blocks_1");
  const PhaseStats* fwd = findPhase(stats, "blocks_1", Phase::kForward);
  ASSERT_NE(fwd, nullptr);
  EXPECT_EQ(fwd->call.seconds.count(), 2u);
  EXPECT_NE(findKind(fwd, OpKind::kSoftmax), nullptr);
  EXPECT_NE(findPhase(stats, "blocks_1", Phase::kBackward), nullptr);
  EXPECT_EQ(moduleLayerName(*model), "TinyModelImpl");  // the root was not named: its class
}

// Rotary work marked in the attention call is positional; the classifier resumes after it.
TEST_F(ObserverTest, OpKindScopeForcesTheKindOfItsOps) {
  start(quietConfig());
  auto x = torch::randn({2, 4, 8});
  {
    AttentionScope scope("layers.0.attn");
    auto q = torch::linear(x, torch::randn({8, 8}));
    {
      OpKindScope rotary(OpKind::kPositional);
      q = q * torch::randn({4, 8}) + q.flip(-1);
    }
    torch::softmax(torch::matmul(q, q.transpose(-2, -1)), -1);
  }
  OpKindScope outside(OpKind::kPositional);  // outside any call: no effect, no error
  step();
  const StatsTable table = statistics();  // the cells point into it
  const PhaseStats* fwd = findPhase(table, "layers.0.attn", Phase::kForward);
  ASSERT_NE(fwd, nullptr);
  const CellStats* positional = findKind(fwd, OpKind::kPositional);
  ASSERT_NE(positional, nullptr);
  EXPECT_EQ(positional->ops, 4u);  // mul, flip, add and the cos table's randn
  EXPECT_NE(findKind(fwd, OpKind::kQkvProjection), nullptr);
  EXPECT_NE(findKind(fwd, OpKind::kScoreMatmul), nullptr);
  EXPECT_NE(findKind(fwd, OpKind::kSoftmax), nullptr);
}

// A region (a compiled module) classifies by name alone; a FusedOpScope names the fused op's layer.
TEST_F(ObserverTest, RegionAndFusedOpScopes) {
  start(quietConfig());
  auto x = torch::randn({2, 2, 8, 16});
  {
    AttentionScope region("Model", ScopeType::kRegion);
    auto y = torch::linear(x, torch::randn({16, 16}));
    at::scaled_dot_product_attention(y, y, y);
    torch::softmax(y, -1);
  }
  {
    torch::NoGradGuard noGrad;
    FusedOpScope fast("encoder.layers.0.self_attn");
    torch::relu(x);  // not a fused op: not observed
    at::scaled_dot_product_attention(x, x, x);
  }
  step();
  const StatsTable stats = statistics();
  ASSERT_EQ(stats.layers().size(), 2u);
  const PhaseStats* region = findPhase(stats, "Model", Phase::kForward);
  ASSERT_NE(region, nullptr);
  EXPECT_NE(findKind(region, OpKind::kFusedAttention), nullptr);
  EXPECT_NE(findKind(region, OpKind::kSoftmax), nullptr);
  EXPECT_NE(findKind(region, OpKind::kOther), nullptr);  // the linear: its place is unknown
  EXPECT_EQ(findKind(region, OpKind::kQkvProjection), nullptr);
  const PhaseStats* fast = findPhase(stats, "encoder.layers.0.self_attn", Phase::kForward);
  ASSERT_NE(fast, nullptr);
  EXPECT_EQ(fast->call.seconds.count(), 1u);
  EXPECT_NE(findKind(fast, OpKind::kFusedAttention), nullptr);
}

// No attention call in kNothingFoundSteps steps: the run says so, in the run description too.
TEST_F(ObserverTest, NothingFoundAfterStepsIsReported) {
  start(quietConfig());
  auto w = torch::randn({8, 8}, torch::requires_grad());
  for (int i = 0; i < kNothingFoundSteps - 1; ++i) {
    torch::matmul(torch::randn({2, 8}), w).sum().backward();
    step();
  }
  EXPECT_FALSE(runInfo().nothingFound);
  step();
  EXPECT_TRUE(runInfo().nothingFound);
  EXPECT_EQ(runInfo().layersSeen, 0u);
  describeLayer("x", "include", "X");
  noteDiscovery("a note");
  noteDiscovery("a note");
  const RunInfo run = runInfo();
  ASSERT_EQ(run.layerOrigins.size(), 1u);
  EXPECT_EQ(run.layerOrigins[0].rule, "include");
  EXPECT_EQ(run.discoveryNotes.size(), 1u);
  EXPECT_NE(summaryJson().find("\"nothing_found\": true"), std::string::npos);
}

TEST_F(ObserverTest, FusedAttentionOpsAreFoundWithoutAScope) {
  Config c = quietConfig();
  c.fusedOps = true;
  start(c);
  const int64_t d = 16, heads = 2;
  auto x = torch::randn({2, 8, d});
  auto wqkv = torch::randn({3 * d, d}), bqkv = torch::zeros({3 * d});
  auto wo = torch::randn({d, d}), bo = torch::zeros({d});
  {
    torch::NoGradGuard noGrad;  // the 1.13 fused kernel is inference-only
    for (int call = 0; call < 2; ++call) {
      at::_native_multi_head_attention(x, x, x, d, heads, wqkv, bqkv, wo, bo);
    }
  }
  step();
  const StatsTable stats = statistics();
  ASSERT_EQ(stats.layers().size(), 2u);
  EXPECT_EQ(stats.layers()[0].name, "_native_multi_head_attention.0");
  EXPECT_EQ(stats.layers()[1].name, "_native_multi_head_attention.1");
  const PhaseStats* fwd = findPhase(stats, "_native_multi_head_attention.0", Phase::kForward);
  ASSERT_NE(fwd, nullptr);
  EXPECT_EQ(fwd->call.seconds.count(), 1u);
  EXPECT_GT(fwd->call.ops, 0u);  // its inner kernels, classified
}

// PyTorch 2.x's CPU SDPA: the flash kernel when dropout is 0, the math path otherwise; both are
// one fused_attention op whose backend is named from the kernel op SDPA dispatches to, and the
// flash kernel's own autograd node names it in backward. The math kernel called by its own name
// is math too; a naive matmul-softmax-matmul names no backend.
TEST_F(ObserverTest, SdpaBackendsAreNamedInForwardAndBackward) {
  start(quietConfig());
  auto q = torch::randn({2, 4, 16, 8}, torch::requires_grad());
  auto k = torch::randn({2, 4, 16, 8}, torch::requires_grad());
  auto v = torch::randn({2, 4, 16, 8}, torch::requires_grad());
  for (int call = 0; call < 3; ++call) {
    torch::Tensor out;
    {
      AttentionScope scope("flash");
      out = at::scaled_dot_product_attention(q, k, v, {}, /*dropout_p=*/0.0, /*is_causal=*/true);
    }
    {
      AttentionScope scope("math");
      out = out + at::scaled_dot_product_attention(q, k, v, {}, /*dropout_p=*/0.5);
    }
    {  // the math path called by its own name, and a naive attention: no SDPA, no backend
      AttentionScope scope("math_called");
      out = out + std::get<0>(at::_scaled_dot_product_attention_math(q, k, v));
    }
    {
      AttentionScope scope("naive");
      out = out + torch::matmul(torch::softmax(torch::matmul(q, k.transpose(-2, -1)), -1), v);
    }
    out.sum().backward();
    step();
  }
  const StatsTable stats = statistics();
  const PhaseStats* flash = findPhase(stats, "flash", Phase::kForward);
  const PhaseStats* math = findPhase(stats, "math", Phase::kForward);
  ASSERT_NE(flash, nullptr);
  ASSERT_NE(math, nullptr);
  const auto idx = [](AttentionBackend b) { return static_cast<int>(b); };
  EXPECT_EQ(flash->backends[idx(AttentionBackend::kFlash)], 3u);
  EXPECT_EQ(flash->backends[idx(AttentionBackend::kMath)], 0u);
  EXPECT_EQ(math->backends[idx(AttentionBackend::kMath)], 3u);
  EXPECT_EQ(math->backends[idx(AttentionBackend::kFlash)], 0u);
  const PhaseStats* mathCalled = findPhase(stats, "math_called", Phase::kForward);
  const PhaseStats* naive = findPhase(stats, "naive", Phase::kForward);
  ASSERT_NE(mathCalled, nullptr);
  ASSERT_NE(naive, nullptr);
  EXPECT_EQ(mathCalled->backends[idx(AttentionBackend::kMath)], 3u);
  EXPECT_EQ(mathCalled->backends[idx(AttentionBackend::kFlash)], 0u);
  for (int b = 0; b < kNumAttentionBackends; ++b) EXPECT_EQ(naive->backends[b], 0u) << b;
  ASSERT_NE(findKind(flash, OpKind::kFusedAttention), nullptr);
  EXPECT_EQ(findKind(flash, OpKind::kFusedAttention)->ops, 3u);
  ASSERT_NE(findKind(math, OpKind::kFusedAttention), nullptr);
  const PhaseStats* flashBwd = findPhase(stats, "flash", Phase::kBackward);
  ASSERT_NE(flashBwd, nullptr);
  EXPECT_EQ(flashBwd->backends[idx(AttentionBackend::kFlash)], 3u);
  ASSERT_NE(findKind(flashBwd, OpKind::kFusedAttention), nullptr);
  // The math path's backward runs the unfused ops' nodes, still charged to the fused kind.
  const PhaseStats* mathBwd = findPhase(stats, "math", Phase::kBackward);
  ASSERT_NE(mathBwd, nullptr);
  ASSERT_NE(findKind(mathBwd, OpKind::kFusedAttention), nullptr);
  EXPECT_GT(findKind(mathBwd, OpKind::kFusedAttention)->ops, 0u);
}

// Meta and nested tensors reach RecordFunction in 2.x; their sizes are not real work (meta) or
// not readable (nested): the shape read skips them, nothing throws, and no FLOPs are estimated.
TEST_F(ObserverTest, MetaAndNestedTensorsAreObservedWithoutCostEstimates) {
  Config c = quietConfig();
  c.roofline = true;
  c.peakFlops = 1e10;
  c.peakBandwidth = 1e10;
  start(c);
  {
    AttentionScope scope("meta");
    auto q = torch::randn({2, 4, 16, 8}, torch::device(torch::kMeta));
    auto s = torch::matmul(q, q.transpose(-2, -1));
    auto p = torch::softmax(s, -1);
    auto o = torch::matmul(p, q);  // (SDPA's CPU math path has no meta kernel in 2.13)
    EXPECT_EQ(p.sizes(), (std::vector<int64_t>{2, 4, 16, 16}));
    EXPECT_TRUE(o.is_meta());
  }
  {
    AttentionScope scope("nested");
    auto nt = at::_nested_tensor_from_tensor_list({torch::randn({3, 8}), torch::randn({5, 8})});
    auto w = torch::randn({8, 8});
    auto y = torch::softmax(at::linear(nt, w), -1);
    EXPECT_TRUE(y.is_nested());
  }
  {
    AttentionScope scope("real");
    auto q = torch::randn({2, 4, 16, 8});
    auto s = torch::matmul(q, q.transpose(-2, -1));
  }
  step();
  const StatsTable stats = statistics();
  for (const char* name : {"meta", "nested"}) {
    const PhaseStats* fwd = findPhase(stats, name, Phase::kForward);
    ASSERT_NE(fwd, nullptr) << name;
    EXPECT_EQ(fwd->call.seconds.count(), 1u) << name;
    EXPECT_GT(fwd->call.ops, 0u) << name;
    for (int k = 0; k < kNumOpKinds; ++k) {
      if (fwd->kinds[k])
        EXPECT_EQ(fwd->kinds[k]->flops, 0.0) << name << " " << opKindName(static_cast<OpKind>(k));
    }
  }
  // The real matmul is still modelled: 2 * batch * heads * 16 * 16 * 8 flops.
  const PhaseStats* real = findPhase(stats, "real", Phase::kForward);
  ASSERT_NE(real, nullptr);
  double flops = 0;
  for (int k = 0; k < kNumOpKinds; ++k) flops += real->kinds[k] ? real->kinds[k]->flops : 0.0;
  EXPECT_EQ(flops, 2.0 * 2 * 4 * 16 * 16 * 8);
}

TEST_F(ObserverTest, CoexistsWithTorchProfilerStartedLater) {
  namespace prof = torch::profiler::impl;
  start(quietConfig());
  auto x = torch::randn({64, 64});
  {
    AttentionScope scope("attn");
    torch::softmax(x, -1);
  }
  startTorchProfiler(/*profileMemory=*/true);
  {
    AttentionScope scope("attn");
    torch::softmax(x, -1);
  }
  auto result = torch::autograd::profiler::disableProfiler();
  ASSERT_NE(result, nullptr);
  bool profilerSawSoftmax = false, profilerSawMemory = false;
  for (const auto& e : result->events()) {
    profilerSawSoftmax |= e.name() == "aten::softmax";
    profilerSawMemory |= e.name() == "[memory]";
  }
  EXPECT_TRUE(profilerSawSoftmax);
  EXPECT_TRUE(profilerSawMemory);
  {
    AttentionScope scope("attn");
    torch::softmax(x, -1);
  }
  step();
  const StatsTable table = statistics();  // the cells point into it
  const PhaseStats* fwd = findPhase(table, "attn", Phase::kForward);
  ASSERT_NE(fwd, nullptr);
  EXPECT_EQ(fwd->call.seconds.count(), 3u);
  // Host memory reached attnscope before, during and after the profiler's run.
  EXPECT_EQ(findKind(fwd, OpKind::kSoftmax)->bytes, 3 * 64 * 64 * 4);
}

TEST_F(ObserverTest, StartedUnderARunningTorchProfilerWithoutBreakingIt) {
  namespace prof = torch::profiler::impl;
  startTorchProfiler(/*profileMemory=*/true);
  start(quietConfig());
  auto x = torch::randn({64, 64});
  {
    AttentionScope scope("attn");
    torch::softmax(x, -1);
  }
  auto result = torch::autograd::profiler::disableProfiler();
  ASSERT_NE(result, nullptr);
  bool profilerSawSoftmax = false;
  for (const auto& e : result->events()) profilerSawSoftmax |= e.name() == "aten::softmax";
  EXPECT_TRUE(profilerSawSoftmax);
  {
    AttentionScope scope("attn");
    torch::softmax(x, -1);
  }
  step();
  const StatsTable table = statistics();  // the cells point into it
  const PhaseStats* fwd = findPhase(table, "attn", Phase::kForward);
  ASSERT_NE(fwd, nullptr);
  EXPECT_EQ(fwd->call.seconds.count(), 2u);
  EXPECT_EQ(findKind(fwd, OpKind::kSoftmax)->bytes, 2 * 64 * 64 * 4);
}

int64_t residentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// GPU timing on a machine without a usable GPU (the CI machines: CPU LibTorch; a CUDA LibTorch
// without a device says so too): the plugin runs, device timing is off with the reason, the
// device table stays empty, and the host figures are unaffected.
TEST_F(ObserverTest, GpuTimingIsOffWithItsReasonWhenNoDeviceIsUsable) {
  if (acceleratorAvailableForTest())
    GTEST_SKIP() << "a CUDA device is present: tests/gpu checks this path";
  start(quietConfig());
  MultiheadAttention attn("encoder.attn", torch::nn::MultiheadAttentionOptions(32, 4));
  auto x = torch::randn({16, 2, 32});
  std::get<0>(attn->forward(x, x, x, torch::Tensor(), false)).sum().backward();
  step();
  const GpuStatus gpu = gpuStatus();
  EXPECT_EQ(gpu.source, GpuTiming::kOff);
  EXPECT_EQ(gpu.requested, GpuTiming::kAuto);
  EXPECT_TRUE(gpu.fallbackReason == "LibTorch was built without CUDA" ||
              gpu.fallbackReason == "no CUDA device visible to LibTorch")
      << gpu.fallbackReason;
  EXPECT_TRUE(deviceStatistics().layers().empty());
  EXPECT_EQ(gpu.device, -1);
  ASSERT_NE(findPhase(statistics(), "encoder.attn", Phase::kBackward), nullptr);
  stop();
  Config off = quietConfig();
  off.gpuTiming = GpuTiming::kOff;
  start(off);
  EXPECT_EQ(gpuStatus().requested, GpuTiming::kOff);
  EXPECT_EQ(gpuStatus().fallbackReason, "");
}

TEST_F(ObserverTest, HundredThousandStepsKeepMemoryBounded) {
  start(quietConfig());
  auto w = torch::randn({4, 4}, torch::requires_grad());
  auto x = torch::randn({2, 4});
  auto runSteps = [&](int n) {
    for (int i = 0; i < n; ++i) {
      torch::Tensor y;
      {
        AttentionScope scope(i % 2 ? "a" : "b");
        y = torch::softmax(torch::mm(x, w), -1);
      }
      y.sum().backward();
      step();
    }
  };
  runSteps(5000);  // warm-up: every cell and histogram exists, allocator pools settled
  const int64_t before = residentBytes();
  runSteps(100000);
  const int64_t growth = residentBytes() - before;
  EXPECT_LT(growth, 1 << 20) << "resident memory grew by " << growth << " bytes";
  EXPECT_EQ(statistics().layers().size(), 2u);
  EXPECT_EQ(runInfo().stepsSeen, 105000u);
}

}  // namespace
}  // namespace attnscope
