#pragma once

#include <cstdint>

#include "attnscope/core/Export.h"

namespace attnscope {

// The kind of work an aten op does inside one attention call.
enum class OpKind : uint8_t {
  kQkvProjection = 0,
  kScoreMatmul,  // Q·Kᵀ, and the scaling of Q before it
  kSoftmax,      // softmax, with the scaling and masking of the scores before it
                 // (div, masked_fill, where, mask add)
  kDropout,
  kContextMatmul,  // P·V
  kOutputProjection,
  kLayoutCopy,      // view, transpose, reshape, contiguous, copies, splits
  kFusedAttention,  // one fused kernel for the whole attention (SDPA, flash, efficient, MHA)
  kOther,
  kPositional,       // rotary / positional work on Q and K (after kOther: trace files keep the
                     // integers of the kinds before it)
  kCompiledKernels,  // inside torch.compile'd code: the time between the visible (extern) ops,
                     // spent in kernels the compiler generated (fused elementwise, softmax,
                     // rotary, layout), whose work no op name tells
  kCount
};
constexpr int kNumOpKinds = static_cast<int>(OpKind::kCount);

// The attention implementation that ran: on a GPU told by kernel names (CUPTI), on any device by
// the kernel op SDPA dispatched to (attentionBackendOfOp).
enum class AttentionBackend : uint8_t {
  kFlash =
      0,  // FlashAttention: flash kernels; the op _scaled_dot_product_flash_attention(_for_cpu)
  kMemoryEfficient,  // memory-efficient / cutlass FMHA kernels;
                     // _scaled_dot_product_efficient_attention
  kCudnn,            // cuDNN SDPA kernels; _scaled_dot_product_cudnn_attention
  kMath,             // unfused GEMMs, softmax, elementwise; _scaled_dot_product_attention_math
  kCount
};
constexpr int kNumAttentionBackends = static_cast<int>(AttentionBackend::kCount);
// "flash", "memory_efficient", "cudnn", "math".
inline const char* attentionBackendName(AttentionBackend backend) {
  switch (backend) {
    case AttentionBackend::kFlash:
      return "flash";
    case AttentionBackend::kMemoryEfficient:
      return "memory_efficient";
    case AttentionBackend::kCudnn:
      return "cudnn";
    case AttentionBackend::kMath:
      return "math";
    case AttentionBackend::kCount:
      break;
  }
  return "?";
}

// The backend of an SDPA kernel op ("aten::_scaled_dot_product_flash_attention_for_cpu" is flash,
// "aten::_scaled_dot_product_attention_math" is math, ...), or of its backward op (the same name
// ending in "_backward", which compiled backward graphs call); kCount for any other op.
ATTNSCOPE_API AttentionBackend attentionBackendOfOp(const char* opName);
// The backend of a fused kernel's autograd node ("ScaledDotProductFlashAttentionForCpuBackward0"
// is flash); kCount for any other node (the math path's nodes are the unfused ops').
ATTNSCOPE_API AttentionBackend attentionBackendOfNode(const char* nodeName);

enum class Phase : uint8_t { kForward = 0, kBackward, kRecompute, kCount };
constexpr int kNumPhases = static_cast<int>(Phase::kCount);

// "qkv_projection", "score_matmul", "softmax", "dropout", "context_matmul",
// "output_projection", "layout_copy", "fused_attention", "other", "positional",
// "compiled_kernels".
ATTNSCOPE_API const char* opKindName(OpKind kind);
// "forward", "backward", "recompute".
ATTNSCOPE_API const char* phaseName(Phase phase);

// The kind of an op inside a region that hides its layers (ScopeType::kRegion): fused attention
// kernels are kFusedAttention, softmax ops kSoftmax, every other op kOther (without the layer
// boundaries a projection's place in the recipe is unknown).
ATTNSCOPE_API OpKind regionOpKind(const char* opName);

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
  OpClassifier() = default;
  // `softmaxHidden`: the call runs compiled code, whose softmax is a generated kernel and not an
  // op: a batch matmul after the score matmul is the context matmul.
  explicit OpClassifier(bool softmaxHidden) : softmaxHidden_(softmaxHidden) {}
  // opName as RecordFunction reports it ("aten::linear"); the "aten::" prefix is optional.
  OpKind classify(const char* opName);

 private:
  bool softmaxHidden_ = false;
  enum Stage : uint8_t { kBeforeScores, kAfterScores, kAfterSoftmax, kAfterContext };
  Stage stage_ = kBeforeScores;
  // What may still follow the previous op as part of the same projection: after the weight
  // transpose, its matmul or bias add; after linear/addmm/mm or that matmul, only a bias add.
  enum Open : uint8_t { kClosed, kMatmulOrBias, kBiasOnly };
  Open projectionOpen_ = kClosed;
};

// Classifies the ops that compiled code calls in one attention call's backward, in the order they
// run: the gradient flows from the output projection back through the attention core to the
// QKV projection. Matmuls before the core's backward (a fused kernel's backward, or the softmax
// backward of an unfused recipe) are the output projection's (mm, addmm) or the context matmul's
// (bmm); after it, the score matmul's (bmm) and the QKV projection's (mm, addmm).
class ATTNSCOPE_API BackwardOpClassifier {
 public:
  OpKind classify(const char* opName);

 private:
  enum Stage : uint8_t { kBeforeCore, kAfterSoftmax, kAfterCore };
  Stage stage_ = kBeforeCore;
  uint8_t batchMatmuls_ = 0;  // before the core: the context matmul's two gradients come first
};

}  // namespace attnscope
