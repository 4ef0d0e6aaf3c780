#pragma once

#include <cstdint>

#include "attnscope/core/AttentionShape.h"
#include "attnscope/core/OpKind.h"

namespace at {
struct RecordFunction;
}

namespace attnscope {
namespace detail {

// What the top-level ops of one forward attention call tell about its kernel's shapes, filled on
// the calls that read their ops' arguments (the roofline's reads: one sampled call in 8 per
// layer). Plain fields, no allocation: it lives in the observer's frame on the training thread.
struct AttentionProbe {
  int64_t batch = 0, heads = 0, kvHeads = 0, qLen = 0, kvLen = 0, headDim = 0;
  int8_t dtype = -1;  // c10::ScalarType, -1 unknown
  int8_t causal = -1;
  int8_t mask = -1;  // 0 none, 1 a mask tensor
  bool sdpa = false;
  double dropout = -1;
  int64_t projections[3] = {0, 0, 0};  // output features of the first Q/K/V projections
  int projectionCount = 0;
  AttentionBackend backend = AttentionBackend::kCount;

  bool complete() const { return batch > 0 && heads > 0 && qLen > 0 && kvLen > 0 && headDim > 0; }
  // Same kernel shapes (what a change of shapes compares).
  bool sameShapes(const AttentionProbe& o) const;
  // One top-level forward op of the call (its inputs boxed), classified as `kind`.
  void observe(const at::RecordFunction& fn, const char* name, OpKind kind);
  // The metadata form (strings: the reporter thread calls it).
  AttentionShape toShape() const;
};

}  // namespace detail
}  // namespace attnscope
