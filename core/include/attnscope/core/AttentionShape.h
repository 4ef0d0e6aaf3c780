#pragma once

#include <cstdint>
#include <string>

#include "attnscope/core/Export.h"

namespace attnscope {

// What one attention layer's kernel was called with, as the plugin reads it from the ops of a
// forward call (docs/ANALYSIS.md, "Attention shapes"): from `scaled_dot_product_attention`'s
// arguments, or from the score matmul, the Q/K projections and the dropout of an eager
// matmul-softmax-matmul. The trace keeps it as the metadata value of attentionShapeKey(layer);
// attnscope-replay reruns the layer's attention on these shapes. Zero sizes and empty strings are
// unknown.
struct ATTNSCOPE_API AttentionShape {
  std::string op;  // where the shapes were read: aten::scaled_dot_product_attention, aten::matmul
  std::string backend;  // the SDPA kernel that ran (flash, memory_efficient, cudnn, math), or empty
  int64_t batch = 0;
  int64_t heads = 0;    // query heads
  int64_t kvHeads = 0;  // key/value heads (fewer than heads: grouped-query attention)
  int64_t qLen = 0, kvLen = 0;
  int64_t headDim = 0;
  std::string dtype;     // float32, bfloat16, float16, float64
  int causal = -1;       // -1 unknown, 0, 1 (is_causal)
  std::string mask;      // none, tensor (an attention mask tensor was given), or empty
  double dropout = -1;   // dropout probability in force (0 in eval), -1 unknown
  uint64_t changes = 0;  // times the layer's shapes changed during the run (0: always these)

  // Batch, heads, lengths and head dim known.
  bool complete() const;
  // "sdpa (flash)", "eager (matmul-softmax-matmul)", or empty when op is unknown.
  std::string implementation() const;
  // "batch 4, heads 4 (kv 2), q 32, kv 32, head dim 16, float32, causal, dropout 0"
  std::string describeShapes() const;
  // One line of key=value pairs (no spaces inside values): the metadata value.
  std::string encode() const;
};

// The metadata key of a layer's shapes: "attention_shape.<layer>".
ATTNSCOPE_API std::string attentionShapeKey(const std::string& layer);
// Parses what encode() wrote. False (and `error`, when given, naming the key or value) on
// anything else; unknown keys are ignored (a newer writer may add some).
ATTNSCOPE_API bool parseAttentionShape(const std::string& text, AttentionShape* out,
                                       std::string* error);

}  // namespace attnscope
