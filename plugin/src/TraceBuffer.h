#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "attnscope/core/StatsTable.h"
#include "attnscope/trace/TraceFormat.h"

namespace attnscope {
namespace detail {

// The trace store feed (ATTNSCOPE_TRACE_DIR, docs/ANALYSIS.md): a sampled step's calls, one entry
// per (layer, phase), encoded into one record when the step ends; the reporter takes the encoded
// steps every round. Bounded: beyond kMaxBufferedBytes steps are counted as dropped, not kept.
// Not thread-safe: its owner (the Recorder) calls it under its own lock.
class TraceBuffer {
 public:
  static constexpr size_t kMaxBufferedBytes = 16u << 20;

  explicit TraceBuffer(int64_t startNs);

  // One call into the current step's entry for its (layer, phase): a slot lookup and an add.
  void add(const CallRecord& record);
  // Ends step `step` at `nowNs`: encodes its entries (about 50 bytes per layer and phase), or only
  // moves the step clock when the step recorded nothing (an unsampled step).
  void endStep(uint64_t step, int64_t nowNs, double unixNow);
  // Whether the current step has entries.
  bool pending() const { return !calls_.empty(); }
  // The steps encoded since the last take; `dropped`: the steps the bound made it drop since then.
  std::vector<EncodedStep> take(uint64_t* dropped);

 private:
  std::vector<TraceCall> calls_;    // the current step's (layer, phase) entries (reused)
  std::vector<int32_t> slots_;      // layer * kNumPhases + phase -> index in calls_, or -1
  std::vector<EncodedStep> steps_;  // ended, not yet taken
  size_t bufferedBytes_ = 0;
  uint64_t dropped_ = 0;
  int64_t lastStepNs_ = 0;
};

}  // namespace detail
}  // namespace attnscope
