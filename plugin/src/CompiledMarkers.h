#pragma once

namespace attnscope {
namespace detail {

class Recorder;

// The recorder an attention call opened now records into, or null (not running, unsampled step).
// A backward pass ends an inferred step at the next attention call, unless that call is an
// activation-checkpointing recompute inside the backward pass itself. (Api.cpp; the compiled
// code's markers, CompiledMarkers.cpp, open their calls through it too.)
Recorder* scopeRecorder();

}  // namespace detail
}  // namespace attnscope
