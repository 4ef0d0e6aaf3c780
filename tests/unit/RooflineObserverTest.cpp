// The roofline on real LibTorch ops: shapes are read on sampled steps only and re-evaluated only
// when they change; the formulas' flops land in the right (layer, phase, kind) cells, backward
// included; a pure copy classifies memory-bound and a large matmul compute-bound against the
// ceilings calibrated at start.
#include <cmath>
#include <string>

#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/types.h>

#include "attnscope/attnscope.h"
#include "attnscope/core/Roofline.h"
#include "attnscope/core/RooflineCells.h"

namespace attnscope {
namespace {

Config quietConfig() {
  Config c;
  c.logLevel = LogLevel::kWarn;
  c.port = 0;
  return c;
}

const CellStats* findKind(const StatsTable& stats, const std::string& layer, Phase phase,
                          OpKind kind) {
  for (const LayerStats& l : stats.layers()) {
    if (l.name != layer || !l.phases[static_cast<int>(phase)]) continue;
    return l.phases[static_cast<int>(phase)]->kinds[static_cast<int>(kind)].get();
  }
  return nullptr;
}

// q·kᵀ, softmax, ·v on [heads, seq, 16]: three top-level ops per call.
torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  return torch::bmm(torch::softmax(torch::bmm(q, k.transpose(1, 2)), -1), v);
}

class RooflineObserverTest : public ::testing::Test {
 protected:
  void TearDown() override { stop(); }
};

TEST_F(RooflineObserverTest, ShapesAreReadOnSampledStepsOnlyAndEvaluatedWhenTheyChange) {
  Config c = quietConfig();
  c.sampleEvery = 3;
  start(c);
  std::vector<uint64_t> reads, changes;
  int64_t seq = 32;
  for (int step = 0; step < 12; ++step) {
    if (step == 9) seq = 48;  // new shapes from step 9 (a sampled step)
    auto q = torch::randn({4, seq, 16});
    {
      AttentionScope scope("attn");
      attention(q, q, q);
    }
    attnscope::step();
    const RunInfo run = runInfo();
    reads.push_back(run.shapeReads);
    changes.push_back(run.shapeChanges);
  }
  // bmm, transpose, softmax, bmm: four top-level ops per call.
  const uint64_t perCall = 4;
  for (int step = 0; step < 12; ++step) {
    const uint64_t before = step == 0 ? 0 : reads[step - 1];
    const bool sampled = step % 3 == 0;
    EXPECT_EQ(reads[step] - before, sampled ? perCall : 0u) << "step " << step;
    const uint64_t changedBefore = step == 0 ? 0 : changes[step - 1];
    const bool changed = step == 0 || step == 9;
    EXPECT_EQ(changes[step] - changedBefore, changed ? perCall : 0u) << "step " << step;
  }
}

TEST_F(RooflineObserverTest, NothingIsReadWithRooflineOff) {
  Config c = quietConfig();
  c.roofline = false;
  start(c);
  auto q = torch::randn({2, 16, 16});
  for (int step = 0; step < 3; ++step) {
    AttentionScope scope("attn");
    attention(q, q, q);
  }
  attnscope::step();
  const RunInfo run = runInfo();
  EXPECT_EQ(run.shapeReads, 0u);
  EXPECT_FALSE(run.ceilings.known());
  const StatsTable stats = statistics();  // findKind points into it: keep it alive
  const CellStats* score = findKind(stats, "attn", Phase::kForward, OpKind::kScoreMatmul);
  ASSERT_NE(score, nullptr);
  EXPECT_EQ(score->flops, 0.0);
  EXPECT_EQ(score->modelledSeconds, 0.0);
}

TEST_F(RooflineObserverTest, FlopsOfForwardAndBackwardMatchTheFormulas) {
  start(quietConfig());
  const int64_t heads = 4, seq = 64, d = 16;
  const int steps = 3;
  for (int step = 0; step < steps; ++step) {
    auto q = torch::randn({heads, seq, d}, torch::requires_grad());
    torch::Tensor out;
    {
      AttentionScope scope("attn");
      out = attention(q, q, q);
    }
    out.sum().backward();
    attnscope::step();
  }
  {  // evaluation: no backward runs, so none is estimated
    torch::NoGradGuard noGrad;
    AttentionScope scope("eval");
    auto q = torch::randn({heads, seq, d});
    attention(q, q, q);
  }
  attnscope::step();
  const StatsTable stats = statistics();
  const double scoreFlops = 2.0 * heads * seq * d * seq;  // q[h,s,d] · kᵀ[h,d,s]
  const CellStats* fwd = findKind(stats, "attn", Phase::kForward, OpKind::kScoreMatmul);
  const CellStats* bwd = findKind(stats, "attn", Phase::kBackward, OpKind::kScoreMatmul);
  ASSERT_NE(fwd, nullptr);
  ASSERT_NE(bwd, nullptr);
  EXPECT_DOUBLE_EQ(fwd->flops, steps * scoreFlops);
  // The gradients of both bmm operands: two matmuls of the same size.
  EXPECT_DOUBLE_EQ(bwd->flops, steps * 2 * scoreFlops);
  EXPECT_DOUBLE_EQ(fwd->wideFlops, fwd->flops);  // float32
  EXPECT_GT(fwd->modelledSeconds, 0.0);
  EXPECT_LE(fwd->modelledSeconds, fwd->seconds.sum() * (1 + 1e-9));
  EXPECT_GT(bwd->modelledSeconds, 0.0);
  const CellStats* softmax = findKind(stats, "attn", Phase::kForward, OpKind::kSoftmax);
  ASSERT_NE(softmax, nullptr);
  EXPECT_GT(softmax->moved, 0.0);
  EXPECT_EQ(findKind(stats, "eval", Phase::kBackward, OpKind::kScoreMatmul), nullptr);
  const CellStats* evalFwd = findKind(stats, "eval", Phase::kForward, OpKind::kScoreMatmul);
  ASSERT_NE(evalFwd, nullptr);
  EXPECT_DOUBLE_EQ(evalFwd->flops, scoreFlops);
}

// A naive attention's whole forward (q·kᵀ, the scaling, softmax, ·v), every op kind of the phase
// summed, is the hand count: two bmm of 2·heads·seq²·head_dim FLOPs each, the scaling's division
// and the softmax's 1 + 5 FLOPs per score, whatever the heads and lengths.
TEST_F(RooflineObserverTest, NaiveAttentionForwardIsTheHandCount) {
  start(quietConfig());
  const int64_t dModel = 64;
  const int calls = 2;
  for (int call = 0; call < calls; ++call) {
    for (int64_t heads : {2, 4}) {
      for (int64_t seq : {128, 256, 512}) {
        const int64_t dh = dModel / heads;
        auto q = torch::randn({heads, seq, dh}, torch::requires_grad());
        auto k = torch::randn({heads, seq, dh}, torch::requires_grad());
        auto v = torch::randn({heads, seq, dh}, torch::requires_grad());
        {  // with autograd history, as in training; the backward is not what is counted here
          AttentionScope scope("h" + std::to_string(heads) + "/s" + std::to_string(seq));
          auto scores = torch::bmm(q, k.transpose(1, 2)) / std::sqrt(static_cast<double>(dh));
          torch::bmm(torch::softmax(scores, -1), v);
        }
        attnscope::step();
      }
    }
  }
  const StatsTable stats = statistics();
  for (int64_t heads : {2, 4}) {
    for (int64_t seq : {128, 256, 512}) {
      const std::string name = "h" + std::to_string(heads) + "/s" + std::to_string(seq);
      double flops = 0;
      for (const LayerStats& l : stats.layers()) {
        if (l.name != name || !l.phases[static_cast<int>(Phase::kForward)]) continue;
        for (const auto& kind : l.phases[static_cast<int>(Phase::kForward)]->kinds) {
          if (kind) flops += kind->flops;
        }
      }
      const double scores = static_cast<double>(heads * seq * seq);
      EXPECT_DOUBLE_EQ(flops, calls * (4 * scores * (dModel / heads) + 6 * scores)) << name;
    }
  }
}

// Calls closed with their results read their ops' arguments on one call in 8 per layer and
// phase; the others reuse the read's costs, checked at the call's end against the shapes of its
// autograd nodes. Fixed shapes: the flops are the formulas' on every call, with an eighth of the
// reads. New shapes on a reusing call: that call's roofline figures are dropped (its time is
// still recorded), the next call reads, and the counts follow the new shapes from there.
TEST_F(RooflineObserverTest, ClosedCallsReadOneCallInEightAndDropACallWhoseShapesChanged) {
  start(quietConfig());
  const int64_t heads = 4, d = 16;
  const auto step = [&](int64_t seq) {
    auto q = torch::randn({heads, seq, d}, torch::requires_grad());
    AttentionScope scope("attn");
    torch::Tensor out = attention(q, q, q);
    scope.close(&out, 1);
    out.sum().backward();
    attnscope::step();
  };
  const auto scoreFlops = [&](int64_t seq) { return 2.0 * heads * seq * d * seq; };
  const auto forwardFlops = [&] {
    const StatsTable now = statistics();
    const CellStats* c = findKind(now, "attn", Phase::kForward, OpKind::kScoreMatmul);
    return c == nullptr ? -1.0 : c->flops;
  };
  const auto backwardFlops = [&] {
    const StatsTable now = statistics();
    const CellStats* c = findKind(now, "attn", Phase::kBackward, OpKind::kScoreMatmul);
    return c == nullptr ? -1.0 : c->flops;
  };
  const uint64_t perCall = 4;  // bmm, transpose, softmax, bmm
  for (int i = 0; i < 10; ++i) step(32);
  // Calls 0 and 8 read; all ten counted.
  EXPECT_EQ(runInfo().shapeReads, 2 * perCall);
  EXPECT_DOUBLE_EQ(forwardFlops(), 10 * scoreFlops(32));
  EXPECT_DOUBLE_EQ(backwardFlops(), 10 * 2 * scoreFlops(32));
  // statistics() returns a copy: the cells are read from a table kept alive, not a temporary.
  StatsTable stats = statistics();
  const CellStats* fwd = findKind(stats, "attn", Phase::kForward, OpKind::kScoreMatmul);
  ASSERT_NE(fwd, nullptr);
  const uint64_t opsBefore = fwd->ops;
  step(48);  // reuses the seq-32 costs: its node shapes differ, so its figures are dropped
  EXPECT_EQ(runInfo().shapeReads, 2 * perCall);
  EXPECT_DOUBLE_EQ(forwardFlops(), 10 * scoreFlops(32));
  EXPECT_DOUBLE_EQ(backwardFlops(), 10 * 2 * scoreFlops(32));
  stats = statistics();
  fwd = findKind(stats, "attn", Phase::kForward, OpKind::kScoreMatmul);
  ASSERT_NE(fwd, nullptr);
  EXPECT_EQ(fwd->ops, opsBefore + 1);  // the call itself is still timed
  step(48);                            // reads the new shapes
  step(48);                            // reuses them
  EXPECT_EQ(runInfo().shapeReads, 3 * perCall);
  EXPECT_DOUBLE_EQ(forwardFlops(), 10 * scoreFlops(32) + 2 * scoreFlops(48));
  EXPECT_DOUBLE_EQ(backwardFlops(), 10 * 2 * scoreFlops(32) + 2 * 2 * scoreFlops(48));
  stats = statistics();
  fwd = findKind(stats, "attn", Phase::kForward, OpKind::kScoreMatmul);
  const CellStats* bwd = findKind(stats, "attn", Phase::kBackward, OpKind::kScoreMatmul);
  ASSERT_NE(fwd, nullptr);
  ASSERT_NE(bwd, nullptr);
  EXPECT_LE(fwd->modelledSeconds, fwd->seconds.sum() * (1 + 1e-9));
  EXPECT_LE(bwd->modelledSeconds, bwd->seconds.sum() * (1 + 1e-9));
}

// A scope closed by its destructor has no autograd nodes to check a reuse against: every call
// reads (as ShapesAreReadOnSampledStepsOnlyAndEvaluatedWhenTheyChange counts), and so does a
// closed call whose results have no history (evaluation).
TEST_F(RooflineObserverTest, ClosedCallsWithoutHistoryReadEveryCall) {
  start(quietConfig());
  torch::NoGradGuard noGrad;
  for (int i = 0; i < 3; ++i) {
    auto q = torch::randn({4, 32, 16});
    AttentionScope scope("eval");
    torch::Tensor out = attention(q, q, q);
    scope.close(&out, 1);
    attnscope::step();
  }
  EXPECT_EQ(runInfo().shapeReads, 3 * 4u);
  const StatsTable stats = statistics();
  const CellStats* fwd = findKind(stats, "eval", Phase::kForward, OpKind::kScoreMatmul);
  ASSERT_NE(fwd, nullptr);
  EXPECT_DOUBLE_EQ(fwd->flops, 3 * 2.0 * 4 * 32 * 16 * 32);
}

// Attention written with einsum (as many model codebases do): the equation and the operands'
// shapes are read from the real call, and the scores and context cells get the matmul counts.
TEST_F(RooflineObserverTest, EinsumAttentionIsCountedFromItsEquation) {
  start(quietConfig());
  const int64_t batch = 2, heads = 4, seq = 32, d = 16;
  auto q = torch::randn({batch, heads, seq, d}, torch::requires_grad());
  torch::Tensor out;
  {
    AttentionScope scope("attn");
    auto scores = torch::einsum("bhqd,bhkd->bhqk", {q, q});
    out = torch::einsum("bhqk,bhkd->bhqd", {torch::softmax(scores, -1), q});
  }
  out.sum().backward();
  attnscope::step();
  const StatsTable stats = statistics();
  const double matmulFlops = 2.0 * batch * heads * seq * seq * d;  // both einsums: same index space
  const CellStats* score = findKind(stats, "attn", Phase::kForward, OpKind::kScoreMatmul);
  const CellStats* context = findKind(stats, "attn", Phase::kForward, OpKind::kContextMatmul);
  ASSERT_NE(score, nullptr);
  ASSERT_NE(context, nullptr);
  EXPECT_DOUBLE_EQ(score->flops, matmulFlops);
  EXPECT_DOUBLE_EQ(context->flops, matmulFlops);
  const double qBytes = 4.0 * batch * heads * seq * d, sBytes = 4.0 * batch * heads * seq * seq;
  EXPECT_DOUBLE_EQ(score->moved, qBytes + qBytes + sBytes);
  EXPECT_DOUBLE_EQ(context->moved, sBytes + qBytes + qBytes);
  EXPECT_GT(score->modelledSeconds, 0.0);
  const CellStats* scoreBwd = findKind(stats, "attn", Phase::kBackward, OpKind::kScoreMatmul);
  ASSERT_NE(scoreBwd, nullptr);
  EXPECT_DOUBLE_EQ(scoreBwd->flops, 2 * matmulFlops);
}

// A pure copy and a large matmul, each in a layer of its own, against the calibrated ceilings.
TEST_F(RooflineObserverTest, CopyIsMemoryBoundAndLargeMatmulComputeBound) {
  start(quietConfig());
  const RunInfo run = runInfo();
  ASSERT_TRUE(run.ceilings.known());
  EXPECT_EQ(run.ceilings.source, "calibration");
  EXPECT_FALSE(run.machine.cpuModel.empty());
  EXPECT_GT(run.machine.cpuCores, 0);
  auto src = torch::rand({16 << 20});  // 64 MiB
  auto dst = torch::empty({16 << 20});
  auto a = torch::randn({768, 768});
  for (int step = 0; step < 3; ++step) {
    {
      AttentionScope scope("copy");
      dst.copy_(src);
    }
    {
      AttentionScope scope("matmul");
      torch::mm(a, a);
    }
    attnscope::step();
  }
  const StatsTable stats = statistics();
  const std::vector<RooflineCell> cells = rooflineCells(stats, nullptr, runInfo().ceilings);
  const RooflineCell* copy = nullptr;
  const RooflineCell* mm = nullptr;
  for (const RooflineCell& c : cells) {
    const std::string& layer = stats.layers()[c.layer].name;
    if (layer == "copy" && c.kind == OpKind::kLayoutCopy) copy = &c;
    if (layer == "matmul" && c.kind == OpKind::kQkvProjection)
      mm = &c;  // a projection-like op first
  }
  ASSERT_NE(copy, nullptr);
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(copy->flops, 0.0);
  EXPECT_DOUBLE_EQ(copy->bytes, 3 * 2.0 * (16 << 20) * 4);  // read and write 64 MiB, 3 times
  EXPECT_EQ(copy->point.bound, Bound::kMemory);
  EXPECT_GT(copy->point.fraction, 0.0);
  EXPECT_DOUBLE_EQ(mm->flops, 3 * 2.0 * 768 * 768 * 768);
  EXPECT_EQ(mm->point.bound, Bound::kCompute);
  EXPECT_GT(mm->point.intensity, run.ceilings.ridge());
  EXPECT_GT(mm->point.fraction, 0.0);
}

}  // namespace
}  // namespace attnscope
