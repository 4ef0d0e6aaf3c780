// Unit tests of attnscope::OpClassifier and the op kind / phase names: real attention recipes,
// op by op, classified the way the recipe's stages say.

#include "attnscope/core/OpKind.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace attnscope {
namespace {

using Step = std::pair<const char*, OpKind>;

// Runs ops through one classifier and checks each kind, naming the op's position on failure.
void expectSequence(const std::vector<Step>& steps) {
  OpClassifier classifier;
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_STREQ(opKindName(classifier.classify(steps[i].first)), opKindName(steps[i].second))
        << "op #" << i << " " << steps[i].first;
  }
}

std::vector<OpKind> classifyAll(const std::vector<const char*>& ops) {
  OpClassifier classifier;
  std::vector<OpKind> kinds;
  for (const char* op : ops) kinds.push_back(classifier.classify(op));
  return kinds;
}

// ---------------------------------------------------------------------------------------------
// LibTorch 1.13 C++ torch::nn::MultiheadAttention, self-attention, top-level ops only.
// F::multi_head_attention_forward: torch::equal(query, key), torch::equal(key, value); the
// in-projection F::linear on 3-D input = t(weight), matmul, add_(bias); chunk(3); q *= scaling;
// q.view().transpose() (q is already contiguous, so contiguous() dispatches nothing);
// k.contiguous().view().transpose(); v.contiguous().view().transpose(); bmm(q, k.transpose());
// softmax; dropout; bmm(p, v); transpose().contiguous().view(); out-projection t, matmul, add_.
const std::vector<Step> kMha113SelfAttention = {
    {"aten::equal", OpKind::kOther},
    {"aten::equal", OpKind::kOther},
    {"aten::t", OpKind::kQkvProjection},
    {"aten::matmul", OpKind::kQkvProjection},
    {"aten::add_", OpKind::kQkvProjection},
    {"aten::chunk", OpKind::kLayoutCopy},
    {"aten::mul", OpKind::kScoreMatmul},  // q * scaling, before the scores
    // q: view, transpose; k: contiguous, view, transpose; v: contiguous, view, transpose;
    // then k.transpose(1, 2) for the bmm. That is 9 layout ops (not 8).
    {"aten::view", OpKind::kLayoutCopy},
    {"aten::transpose", OpKind::kLayoutCopy},
    {"aten::contiguous", OpKind::kLayoutCopy},
    {"aten::view", OpKind::kLayoutCopy},
    {"aten::transpose", OpKind::kLayoutCopy},
    {"aten::contiguous", OpKind::kLayoutCopy},
    {"aten::view", OpKind::kLayoutCopy},
    {"aten::transpose", OpKind::kLayoutCopy},
    {"aten::transpose", OpKind::kLayoutCopy},
    {"aten::bmm", OpKind::kScoreMatmul},
    {"aten::softmax", OpKind::kSoftmax},
    {"aten::dropout", OpKind::kDropout},
    {"aten::bmm", OpKind::kContextMatmul},
    {"aten::transpose", OpKind::kLayoutCopy},
    {"aten::contiguous", OpKind::kLayoutCopy},
    {"aten::view", OpKind::kLayoutCopy},
    {"aten::t", OpKind::kOutputProjection},
    {"aten::matmul", OpKind::kOutputProjection},
    {"aten::add_", OpKind::kOutputProjection},
};

TEST(OpClassifierTest, LibTorch113MultiheadAttentionSelfAttention) {
  ASSERT_EQ(kMha113SelfAttention.size(), 26u);
  expectSequence(kMha113SelfAttention);
}

TEST(OpClassifierTest, LibTorch113MultiheadAttentionKindCounts) {
  std::vector<const char*> ops;
  for (const Step& s : kMha113SelfAttention) ops.push_back(s.first);
  int counts[kNumOpKinds] = {};
  for (OpKind k : classifyAll(ops)) ++counts[static_cast<int>(k)];
  EXPECT_EQ(counts[static_cast<int>(OpKind::kOther)], 2);
  EXPECT_EQ(counts[static_cast<int>(OpKind::kQkvProjection)], 3);
  EXPECT_EQ(counts[static_cast<int>(OpKind::kScoreMatmul)], 2);
  EXPECT_EQ(counts[static_cast<int>(OpKind::kLayoutCopy)], 13);
  EXPECT_EQ(counts[static_cast<int>(OpKind::kSoftmax)], 1);
  EXPECT_EQ(counts[static_cast<int>(OpKind::kDropout)], 1);
  EXPECT_EQ(counts[static_cast<int>(OpKind::kContextMatmul)], 1);
  EXPECT_EQ(counts[static_cast<int>(OpKind::kOutputProjection)], 3);
  EXPECT_EQ(counts[static_cast<int>(OpKind::kFusedAttention)], 0);
}

TEST(OpClassifierTest, EachCallNeedsItsOwnClassifier) {
  // Two MHA calls through one classifier: the second call's in-projection is seen after the
  // first call's context matmul, so it counts as an output projection. The observer keeps one
  // classifier per call; this pins down why.
  OpClassifier classifier;
  for (const Step& s : kMha113SelfAttention) classifier.classify(s.first);
  EXPECT_EQ(classifier.classify("aten::t"), OpKind::kOutputProjection);
  OpClassifier fresh;
  EXPECT_EQ(fresh.classify("aten::t"), OpKind::kQkvProjection);
}

// ---------------------------------------------------------------------------------------------
// A recipe written with aten::linear (bias included in the op, no separate add).
// The classifier's rules: an elementwise op (mul/div/add/sub) is a score-stage scaling only
// before the score matmul; after the score matmul and before the softmax it is in the softmax
// stage (scaling of the scores or mask addition), so the div of `(q @ kᵀ) / sqrt(d)` counts as
// softmax. masked_fill is masking: softmax.

TEST(OpClassifierTest, LinearRecipe) {
  expectSequence({
      {"aten::linear", OpKind::kQkvProjection},  // q
      {"aten::linear", OpKind::kQkvProjection},  // k
      {"aten::linear", OpKind::kQkvProjection},  // v
      {"aten::matmul", OpKind::kScoreMatmul},    // q @ kᵀ: a linear includes its bias, so a
                                                 // matmul after it starts the scores
      {"aten::div", OpKind::kSoftmax},           // scores / sqrt(d): after the score matmul
      {"aten::masked_fill", OpKind::kSoftmax},
      {"aten::softmax", OpKind::kSoftmax},
      {"aten::dropout", OpKind::kDropout},
      {"aten::matmul", OpKind::kContextMatmul},
      {"aten::linear", OpKind::kOutputProjection},
  });
}

TEST(OpClassifierTest, EinsumScoresRightAfterLinearProjections) {
  // q, k, v = linear(x) ×3; einsum("bqd,bkd->bqk", q, k) needs no transpose, so the score
  // einsum directly follows the last projection.
  expectSequence({
      {"aten::linear", OpKind::kQkvProjection},
      {"aten::linear", OpKind::kQkvProjection},
      {"aten::linear", OpKind::kQkvProjection},
      {"aten::einsum", OpKind::kScoreMatmul},
      {"aten::softmax", OpKind::kSoftmax},
      {"aten::einsum", OpKind::kContextMatmul},
      {"aten::linear", OpKind::kOutputProjection},
  });
}

TEST(OpClassifierTest, LinearRecipeWithLayoutOps) {
  expectSequence({
      {"aten::linear", OpKind::kQkvProjection},
      {"aten::view", OpKind::kLayoutCopy},
      {"aten::transpose", OpKind::kLayoutCopy},
      {"aten::linear", OpKind::kQkvProjection},
      {"aten::view", OpKind::kLayoutCopy},
      {"aten::transpose", OpKind::kLayoutCopy},
      {"aten::linear", OpKind::kQkvProjection},
      {"aten::view", OpKind::kLayoutCopy},
      {"aten::transpose", OpKind::kLayoutCopy},
      {"aten::transpose", OpKind::kLayoutCopy},
      {"aten::matmul", OpKind::kScoreMatmul},
      {"aten::add", OpKind::kSoftmax},  // additive mask
      {"aten::softmax", OpKind::kSoftmax},
      {"aten::matmul", OpKind::kContextMatmul},
      {"aten::transpose", OpKind::kLayoutCopy},
      {"aten::reshape", OpKind::kLayoutCopy},
      {"aten::linear", OpKind::kOutputProjection},
  });
}

TEST(OpClassifierTest, ScalingOfQueryBeforeScoresIsScoreMatmul) {
  expectSequence({
      {"aten::linear", OpKind::kQkvProjection},
      {"aten::chunk", OpKind::kLayoutCopy},
      {"aten::div", OpKind::kScoreMatmul},  // q / sqrt(d), before the scores
      {"aten::bmm", OpKind::kScoreMatmul},
      {"aten::softmax", OpKind::kSoftmax},
      {"aten::bmm", OpKind::kContextMatmul},
  });
}

TEST(OpClassifierTest, BiasAddAfterLinearBelongsToTheProjection) {
  expectSequence({
      {"aten::linear", OpKind::kQkvProjection},
      {"aten::add", OpKind::kQkvProjection},  // a bias added separately
      {"aten::mul", OpKind::kScoreMatmul},    // not a bias: the projection is closed
  });
}

TEST(OpClassifierTest, TwoDimensionalLinearAsAddmm) {
  // F::linear on 2-D input with bias: t(weight), addmm.
  expectSequence({
      {"aten::t", OpKind::kQkvProjection},
      {"aten::addmm", OpKind::kQkvProjection},
      {"aten::chunk", OpKind::kLayoutCopy},
      {"aten::bmm", OpKind::kScoreMatmul},
      {"aten::softmax", OpKind::kSoftmax},
      {"aten::bmm", OpKind::kContextMatmul},
      {"aten::t", OpKind::kOutputProjection},
      {"aten::addmm", OpKind::kOutputProjection},
  });
}

TEST(OpClassifierTest, UnfusedLinearWithoutBiasThenScores) {
  // t, matmul (no bias) for q, k, v, then the score matmul right after the last projection.
  expectSequence({
      {"aten::t", OpKind::kQkvProjection},
      {"aten::matmul", OpKind::kQkvProjection},
      {"aten::t", OpKind::kQkvProjection},
      {"aten::matmul", OpKind::kQkvProjection},
      {"aten::t", OpKind::kQkvProjection},
      {"aten::matmul", OpKind::kQkvProjection},
      {"aten::matmul", OpKind::kScoreMatmul},  // the projection's matmul came already
      {"aten::softmax", OpKind::kSoftmax},
      {"aten::matmul", OpKind::kContextMatmul},
  });
}

TEST(OpClassifierTest, MaskOpsAreSoftmaxStage) {
  expectSequence({
      {"aten::bmm", OpKind::kScoreMatmul},
      {"aten::tril", OpKind::kSoftmax},
      {"aten::logical_not", OpKind::kSoftmax},
      {"aten::masked_fill_", OpKind::kSoftmax},
      {"aten::where", OpKind::kSoftmax},
      {"aten::_softmax", OpKind::kSoftmax},
      {"aten::native_dropout", OpKind::kDropout},
      {"aten::bmm", OpKind::kContextMatmul},
      {"aten::mul", OpKind::kOther},  // elementwise after the context: no attention stage
  });
}

TEST(OpClassifierTest, BaddbmmAndEinsumAreMatmuls) {
  expectSequence({
      {"aten::baddbmm", OpKind::kScoreMatmul},
      {"aten::softmax", OpKind::kSoftmax},
      {"aten::einsum", OpKind::kContextMatmul},
  });
}

// ---------------------------------------------------------------------------------------------
// Fused attention

TEST(OpClassifierTest, FusedOpsAreFusedAttention) {
  for (const char* op :
       {"aten::scaled_dot_product_attention", "aten::_native_multi_head_attention",
        "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_attention_math",
        "aten::_flash_attention_forward", "aten::_transformer_encoder_layer_fwd"}) {
    OpClassifier classifier;
    EXPECT_EQ(classifier.classify(op), OpKind::kFusedAttention) << op;
    EXPECT_TRUE(isFusedAttentionOp(op)) << op;
  }
}

TEST(OpClassifierTest, FusedRecipeAroundSdpa) {
  expectSequence({
      {"aten::linear", OpKind::kQkvProjection},
      {"aten::view", OpKind::kLayoutCopy},
      {"aten::transpose", OpKind::kLayoutCopy},
      {"aten::scaled_dot_product_attention", OpKind::kFusedAttention},
      {"aten::transpose", OpKind::kLayoutCopy},
      {"aten::reshape", OpKind::kLayoutCopy},
      {"aten::linear", OpKind::kOutputProjection},  // after the fused attention
  });
}

TEST(OpClassifierTest, NonFusedOpsAreNotFused) {
  for (const char* op :
       {"aten::bmm", "aten::softmax", "aten::linear", "aten::view", "aten::scaled_dot_product",
        "scaled_dot_product_attention_x", "aten::unknown_op", "", "aten::"}) {
    EXPECT_FALSE(isFusedAttentionOp(op)) << op;
  }
  EXPECT_FALSE(isFusedAttentionOp(nullptr));
}

// ---------------------------------------------------------------------------------------------
// Names

TEST(OpClassifierTest, UnknownOpsAreOther) {
  OpClassifier classifier;
  for (const char* op : {"aten::gelu", "aten::layer_norm", "aten::equal", "custom::attention",
                         "aten::Bmm", "", "aten::"}) {
    EXPECT_EQ(classifier.classify(op), OpKind::kOther) << op;
  }
  EXPECT_EQ(classifier.classify(nullptr), OpKind::kOther);
}

TEST(OpClassifierTest, UnknownOpsDoNotChangeTheStage) {
  expectSequence({
      {"aten::linear", OpKind::kQkvProjection},
      {"aten::gelu", OpKind::kOther},
      {"aten::bmm", OpKind::kScoreMatmul},
      {"aten::gelu", OpKind::kOther},
      {"aten::softmax", OpKind::kSoftmax},
      {"aten::bmm", OpKind::kContextMatmul},
  });
}

TEST(OpClassifierTest, OtherNamespaceIsNotStripped) {
  // Only "aten::" is optional; another namespace makes the name unknown.
  OpClassifier classifier;
  EXPECT_EQ(classifier.classify("prim::view"), OpKind::kOther);
  EXPECT_FALSE(isFusedAttentionOp("custom::scaled_dot_product_attention"));
}

TEST(OpClassifierTest, NamesWithoutAtenPrefix) {
  expectSequence({
      {"equal", OpKind::kOther},
      {"t", OpKind::kQkvProjection},
      {"matmul", OpKind::kQkvProjection},
      {"add_", OpKind::kQkvProjection},
      {"chunk", OpKind::kLayoutCopy},
      {"mul", OpKind::kScoreMatmul},
      {"bmm", OpKind::kScoreMatmul},
      {"softmax", OpKind::kSoftmax},
      {"dropout", OpKind::kDropout},
      {"bmm", OpKind::kContextMatmul},
      {"view", OpKind::kLayoutCopy},
      {"linear", OpKind::kOutputProjection},
  });
  EXPECT_TRUE(isFusedAttentionOp("scaled_dot_product_attention"));
  EXPECT_TRUE(isFusedAttentionOp("_native_multi_head_attention"));
  OpClassifier classifier;
  EXPECT_EQ(classifier.classify("_native_multi_head_attention"), OpKind::kFusedAttention);
}

TEST(OpKindNameTest, EveryKindHasItsDocumentedName) {
  EXPECT_STREQ(opKindName(OpKind::kQkvProjection), "qkv_projection");
  EXPECT_STREQ(opKindName(OpKind::kScoreMatmul), "score_matmul");
  EXPECT_STREQ(opKindName(OpKind::kSoftmax), "softmax");
  EXPECT_STREQ(opKindName(OpKind::kDropout), "dropout");
  EXPECT_STREQ(opKindName(OpKind::kContextMatmul), "context_matmul");
  EXPECT_STREQ(opKindName(OpKind::kOutputProjection), "output_projection");
  EXPECT_STREQ(opKindName(OpKind::kLayoutCopy), "layout_copy");
  EXPECT_STREQ(opKindName(OpKind::kFusedAttention), "fused_attention");
  EXPECT_STREQ(opKindName(OpKind::kOther), "other");
  EXPECT_STREQ(opKindName(OpKind::kPositional), "positional");
  EXPECT_STREQ(opKindName(OpKind::kCompiledKernels), "compiled_kernels");
  EXPECT_STREQ(opKindName(OpKind::kCount), "?");
  EXPECT_EQ(kNumOpKinds, 11);
  // Trace files store kinds as integers: the kinds before positional keep theirs.
  EXPECT_EQ(static_cast<int>(OpKind::kOther), 8);
  EXPECT_EQ(static_cast<int>(OpKind::kPositional), 9);
  EXPECT_EQ(static_cast<int>(OpKind::kCompiledKernels), 10);
}

// Llama-style attention with complex rotary embeddings written by hand (no Python marking): the
// complex views and products are positional work, the score and context matmuls keep their kinds.
TEST(OpClassifierTest, ComplexRotaryIsPositional) {
  expectSequence({{"aten::linear", OpKind::kQkvProjection},
                  {"aten::view", OpKind::kLayoutCopy},
                  {"aten::view_as_complex", OpKind::kPositional},
                  {"aten::view_as_real", OpKind::kPositional},
                  {"aten::neg", OpKind::kPositional},
                  {"aten::transpose", OpKind::kLayoutCopy},
                  {"aten::matmul", OpKind::kScoreMatmul},
                  {"aten::softmax", OpKind::kSoftmax},
                  {"aten::matmul", OpKind::kContextMatmul},
                  {"aten::linear", OpKind::kOutputProjection}});
}

// A compiled region hides the layer boundaries: only the attention kernel and softmax are told.
TEST(OpClassifierTest, RegionKindsAreByNameAlone) {
  EXPECT_EQ(regionOpKind("aten::_scaled_dot_product_flash_attention_for_cpu"),
            OpKind::kFusedAttention);
  EXPECT_EQ(regionOpKind("aten::_softmax"), OpKind::kSoftmax);
  EXPECT_EQ(regionOpKind("aten::mm"), OpKind::kOther);
  EXPECT_EQ(regionOpKind("aten::addmm"), OpKind::kOther);
  EXPECT_EQ(regionOpKind("aten::bmm"), OpKind::kOther);
  EXPECT_EQ(regionOpKind(nullptr), OpKind::kOther);
}

// Compiled code (Inductor on a CPU, the hand-written GPT): the softmax and masking are a generated
// kernel between the two extern batch matmuls, so the second one is the context matmul.
TEST(OpClassifierTest, CompiledForwardWithHiddenSoftmax) {
  OpClassifier classifier(/*softmaxHidden=*/true);
  const std::vector<std::pair<const char*, OpKind>> steps = {
      {"aten::addmm", OpKind::kQkvProjection},   {"aten::bmm", OpKind::kScoreMatmul},
      {"aten::randint", OpKind::kDropout},       {"aten::random_", OpKind::kDropout},
      {"aten::bmm", OpKind::kContextMatmul},     {"aten::resolve_conj", OpKind::kLayoutCopy},
      {"aten::addmm", OpKind::kOutputProjection}};
  for (const auto& [op, kind] : steps)
    EXPECT_STREQ(opKindName(classifier.classify(op)), opKindName(kind)) << op;
  // Eager keeps telling a second score matmul from the context matmul by the softmax between.
  EXPECT_EQ(classifyAll({"aten::bmm", "aten::bmm"}),
            (std::vector<OpKind>{OpKind::kScoreMatmul, OpKind::kScoreMatmul}));
}

// A compiled backward graph's extern ops, in the gradient's order.
TEST(BackwardOpClassifierTest, UnfusedRecipeInGradientOrder) {
  BackwardOpClassifier classifier;
  const std::vector<std::pair<const char*, OpKind>> steps = {
      {"aten::mm", OpKind::kOutputProjection}, {"aten::mm", OpKind::kOutputProjection},
      {"aten::bmm", OpKind::kContextMatmul},   {"aten::bmm", OpKind::kContextMatmul},
      {"aten::bmm", OpKind::kScoreMatmul},     {"aten::bmm", OpKind::kScoreMatmul},
      {"aten::mm", OpKind::kQkvProjection},    {"aten::mm", OpKind::kQkvProjection},
      {"aten::view", OpKind::kLayoutCopy},     {"aten::frobnicate", OpKind::kOther}};
  for (const auto& [op, kind] : steps)
    EXPECT_STREQ(opKindName(classifier.classify(op)), opKindName(kind)) << op;
}

TEST(BackwardOpClassifierTest, FusedKernelBackwardSplitsTheProjections) {
  BackwardOpClassifier classifier;
  EXPECT_EQ(classifier.classify("aten::mm"), OpKind::kOutputProjection);
  EXPECT_EQ(classifier.classify("aten::_scaled_dot_product_flash_attention_for_cpu_backward"),
            OpKind::kFusedAttention);
  EXPECT_EQ(classifier.classify("aten::mm"), OpKind::kQkvProjection);
  BackwardOpClassifier unfused;
  EXPECT_EQ(unfused.classify("aten::bmm"), OpKind::kContextMatmul);
  EXPECT_EQ(unfused.classify("aten::_softmax_backward_data"), OpKind::kSoftmax);
  EXPECT_EQ(unfused.classify("aten::bmm"), OpKind::kScoreMatmul);
  EXPECT_EQ(attentionBackendOfOp("aten::_scaled_dot_product_flash_attention_for_cpu_backward"),
            AttentionBackend::kFlash);
  EXPECT_EQ(attentionBackendOfOp("aten::_scaled_dot_product_efficient_attention_backward"),
            AttentionBackend::kMemoryEfficient);
  EXPECT_EQ(attentionBackendOfOp("aten::_scaled_dot_product_flash_attention_for_cpu_backwards"),
            AttentionBackend::kCount);
}

TEST(OpKindNameTest, KindNamesAreDistinct) {
  for (int a = 0; a < kNumOpKinds; ++a) {
    for (int b = a + 1; b < kNumOpKinds; ++b) {
      EXPECT_STRNE(opKindName(static_cast<OpKind>(a)), opKindName(static_cast<OpKind>(b)));
    }
  }
}

TEST(OpKindNameTest, EveryPhaseHasItsDocumentedName) {
  EXPECT_STREQ(phaseName(Phase::kForward), "forward");
  EXPECT_STREQ(phaseName(Phase::kBackward), "backward");
  EXPECT_STREQ(phaseName(Phase::kRecompute), "recompute");
  EXPECT_STREQ(phaseName(Phase::kCount), "?");
  EXPECT_EQ(kNumPhases, 3);
}

}  // namespace
}  // namespace attnscope
