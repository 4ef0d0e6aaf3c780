#pragma once

#include <cstddef>

#include <ATen/record_function.h>

#include "attnscope/attnscope.h"
#include "attnscope/core/OpKind.h"

namespace attnscope {
namespace detail {

class Recorder;

// The RecordFunction callbacks and the per-thread state behind AttentionScope.
//
// Cost model (docs/ARCHITECTURE.md): ops outside attention meet no attnscope callback at all.
//  - A thread-local FUNCTION-scope callback exists only while an AttentionScope is open on the
//    thread (added at the outermost scope's entry, removed at its exit).
//  - Backward: the autograd nodes of calls closed with their results (the Python attach, the
//    MultiheadAttention wrapper) carry a pre-hook and a post-hook (NodeHooks.cpp) and no
//    callback runs for any other node. Otherwise a global BACKWARD_FUNCTION-scope callback exists
//    during sampled steps (and, until the first step() call, on every step to infer step
//    boundaries from backward passes).
//  - Collectives: the global callback's USER_SCOPE half; when backward runs on hooks it is
//    installed only on one sampled step in StepController::kCollectiveEvery sampled steps.
//  - A global FUNCTION-scope callback for fused attention ops exists only during sampled steps
//    and only with ATTNSCOPE_FUSED_OPS=1.
class Observer {
 public:
  // Opens an attention call on this thread. False when it is not recorded (layer cap reached).
  static bool enterScope(Recorder* recorder, const char* layerName, ScopeType type);
  // `backward`: a call of the layer's backward (compiled backward graphs mark it like a forward
  // call, CompiledMarkers.cpp), recorded whole at its exit as phase backward.
  static bool enterScope(Recorder* recorder, const char* layerName, ScopeType type, bool backward);
  static void exitScope();
  // Closes the call with its results (`count` tensors; `outputsGiven` false: unknown, as
  // exitScope()). From them the call's autograd nodes are found and hooked (NodeHooks.cpp): its
  // backward then needs no RecordFunction callback. Results without autograd history mean the
  // call has no backward.
  static void exitScope(const at::Tensor* outputs, size_t count, bool outputsGiven);
  // OpKindScope: the innermost open call's top-level ops are of `kind` until restored (kCount:
  // classified again). False, and nothing changed, when no call is open on this thread.
  static bool forceKind(OpKind kind, OpKind* saved);
  static void restoreKind(OpKind saved);
  // FusedOpScope: a thread-local fused-op callback that observes fused attention ops outside any
  // scope as calls of `layerName` while open (nests; the outermost name wins).
  static void beginFusedHint(const char* layerName);
  static void endFusedHint();

  // The one global callback: BACKWARD_FUNCTION (autograd nodes linked to attention calls, and
  // step inference from backward passes) and USER_SCOPE (c10d's collectives, "gloo:all_reduce",
  // "nccl:...", "mpi:...", from issue to completion, on sampled steps; attnscope's own threads are
  // skipped). One callback, not one per scope: autograd restores RecordFunction's thread-local
  // state before every node it runs, and each restore rebuilds the callback lists, dearer for
  // each installed callback (docs/PERFORMANCE.md).
  static at::RecordFunctionCallback globalCallback();
  static at::RecordFunctionCallback fusedOpCallback();
  // Installs or removes each of the two global callbacks so that exactly the wanted ones are
  // installed. The StepController decides which (through the session: at begin, at each step end
  // for the next step, and at finish).
  static void setGlobalCallbacks(bool global, bool fused);

  // A new session: every thread's shape cache (layer ids are the session's) is stale from now on.
  static void beginSession();
};

}  // namespace detail
}  // namespace attnscope
