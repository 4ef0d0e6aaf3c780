#pragma once

#include <cstdint>

#include "attnscope/collectors/MemoryAccount.h"
#include "attnscope/core/LinkTable.h"
#include "attnscope/core/OpKind.h"

namespace attnscope {

class GpuTimer;

namespace detail {

class Recorder;

// One autograd node of an attention call while it runs in backward: what the global callback's
// BACKWARD_FUNCTION half and the node hooks (NodeHooks.cpp) share. begin() points the thread's
// allocator reports at the node and starts its clock; end() records it into the call's pending
// backward record (Recorder::addBackwardNode). No LibTorch: both callers keep their own.
struct NodeTiming {
  Recorder* recorder = nullptr;
  Link link;
  AttentionBackend backend = AttentionBackend::kCount;  // a fused kernel's node: its backend
  uint64_t t0 = 0;                                      // ticks
  MemoryAccount account;
  MemoryAccount* savedOp = nullptr;
  bool deviceReporter = false;
  uint64_t startTicks = 0;  // begin()'s own time, when this node is a timed one (else 0)
  GpuTimer* gpu = nullptr;  // GPU: first/last node events and the node's correlation id
  bool gpuPushed = false;

  // `entry`: ticks at the caller's entry when this callback is a timed one, else 0.
  void begin(Recorder* r, const Link& l, AttentionBackend b, uint64_t entry);
  void end();
};

// Whether this node's callback or hook is one of the timed ones (one in
// Recorder::kOverheadSampling, counted per thread).
bool nodeTimed();

}  // namespace detail
}  // namespace attnscope
