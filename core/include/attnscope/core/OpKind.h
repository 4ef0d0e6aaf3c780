#pragma once

#include <cstdint>

#include "attnscope/core/Export.h"

namespace attnscope {

// The kind of work an aten op does inside one attention call.
enum class OpKind : uint8_t {
  kQkvProjection = 0,
  kScoreMatmul,       // Q·Kᵀ, and the scaling of Q before it
  kSoftmax,           // softmax, with the scaling and masking of the scores before it
                      // (div, masked_fill, where, mask add)
  kDropout,
  kContextMatmul,     // P·V
  kOutputProjection,
  kLayoutCopy,        // view, transpose, reshape, contiguous, copies, splits
  kFusedAttention,    // one fused kernel for the whole attention (SDPA, flash, efficient, MHA)
  kOther,
  kCount
};
constexpr int kNumOpKinds = static_cast<int>(OpKind::kCount);

enum class Phase : uint8_t { kForward = 0, kBackward, kRecompute, kCount };
constexpr int kNumPhases = static_cast<int>(Phase::kCount);

// "qkv_projection", "score_matmul", "softmax", "dropout", "context_matmul",
// "output_projection", "layout_copy", "fused_attention", "other".
ATTNSCOPE_API const char* opKindName(OpKind kind);
// "forward", "backward", "recompute".
ATTNSCOPE_API const char* phaseName(Phase phase);

// True for op names of fused attention kernels ("aten::scaled_dot_product_attention", ...).
ATTNSCOPE_API bool isFusedAttentionOp(const char* opName);

// Classifies the top-level aten ops of one attention call, in the order they run. The op name
// alone is ambiguous (a linear is the QKV projection before the scores and the output
// projection after the context matmul; a bmm is the score matmul before the softmax and the
// context matmul after it), so the classifier keeps where in the attention recipe it is. An
// unfused linear (t, matmul, add_) is recognised by its weight transpose: the ops that follow a
// projection op up to its bias add belong to the same projection.
// One instance per attention call; cheap to construct.
class ATTNSCOPE_API OpClassifier {
 public:
  // opName as RecordFunction reports it ("aten::linear"); the "aten::" prefix is optional.
  OpKind classify(const char* opName);

 private:
  enum Stage : uint8_t { kBeforeScores, kAfterScores, kAfterSoftmax, kAfterContext };
  Stage stage_ = kBeforeScores;
  // What may still follow the previous op as part of the same projection: after the weight
  // transpose, its matmul or bias add; after linear/addmm/mm or that matmul, only a bias add.
  enum Open : uint8_t { kClosed, kMatmulOrBias, kBiasOnly };
  Open projectionOpen_ = kClosed;
};

}  // namespace attnscope
