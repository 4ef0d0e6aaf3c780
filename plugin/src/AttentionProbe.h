#pragma once

#include <cstdint>
#include <cstring>

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
  const char* dtype = "";  // float32, bfloat16, ... (a static name), empty when unknown
  int8_t causal = -1;
  int8_t mask = -1;  // 0 none, 1 a mask tensor
  bool sdpa = false;
  double dropout = -1;
  int64_t projections[3] = {0, 0, 0};  // output features of the first Q/K/V projections
  int projectionCount = 0;
  AttentionBackend backend = AttentionBackend::kCount;

  bool complete() const { return batch > 0 && heads > 0 && qLen > 0 && kvLen > 0 && headDim > 0; }
  // Same kernel shapes (what a change of shapes compares).
  bool sameShapes(const AttentionProbe& o) const {
    return batch == o.batch && heads == o.heads && kvHeads == o.kvHeads && qLen == o.qLen &&
           kvLen == o.kvLen && headDim == o.headDim && std::strcmp(dtype, o.dtype) == 0 &&
           causal == o.causal && mask == o.mask && dropout == o.dropout && sdpa == o.sdpa;
  }
  // One top-level forward op of the call (its inputs boxed), classified as `kind`
  // (AttentionProbe.cpp: the one part that needs LibTorch).
  void observe(const at::RecordFunction& fn, const char* name, OpKind kind);
  // The metadata form (strings: the reporter thread calls it).
  AttentionShape toShape() const {
    AttentionShape s;
    s.op = sdpa ? "aten::scaled_dot_product_attention" : "aten::matmul";
    if (backend != AttentionBackend::kCount) s.backend = attentionBackendName(backend);
    s.batch = batch;
    s.heads = heads;
    s.kvHeads = kvHeads > 0 ? kvHeads : heads;
    // Separate Q and K projections with fewer K features than Q: grouped-query attention,
    // whatever the kernel saw (the eager path and SDPA without enable_gqa see K and V repeated).
    if (projectionCount >= 2 && projections[0] > 0 && projections[1] > 0 &&
        projections[1] < projections[0] && projections[0] == heads * headDim &&
        projections[1] % headDim == 0) {
      s.kvHeads = projections[1] / headDim;
    }
    s.qLen = qLen;
    s.kvLen = kvLen;
    s.headDim = headDim;
    s.dtype = dtype;
    s.causal = causal;
    s.mask = mask == 1 ? "tensor" : mask == 0 ? "none" : "";
    s.dropout = dropout;
    return s;
  }
};

}  // namespace detail
}  // namespace attnscope
