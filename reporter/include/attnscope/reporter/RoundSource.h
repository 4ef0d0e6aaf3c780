#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attnscope/core/GpuStatus.h"
#include "attnscope/core/RunInfo.h"
#include "attnscope/core/StatsTable.h"
#include "attnscope/reporter/Window.h"
#include "attnscope/trace/TraceFormat.h"

namespace attnscope {
namespace detail {

// What the reporter asks of a snapshot: ending the window and taking the trace steps are moves
// (the rank's recorder starts afresh); the rest is read.
struct SnapshotRequest {
  bool endWindow = false;       // hand over the finished window and start a new one
  bool takeTraceSteps = false;  // hand over the sampled steps encoded since the last take
};

// One reporting round's view of this rank, taken under one lock so its parts agree.
struct RoundSnapshot {
  Window window;                        // SnapshotRequest::endWindow only
  std::vector<EncodedStep> traceSteps;  // SnapshotRequest::takeTraceSteps only
  uint64_t traceDropped = 0;            // steps the trace buffer could not keep since the last take
  std::vector<std::string> layerNames;  // by layer id
  // Per layer whose forward calls read their kernel's shapes: its name and
  // AttentionShape::encode().
  std::vector<std::pair<std::string, std::string>> attentionShapes;
  RunInfo run;
  bool paused = false;  // the live rate is run.sampleEvery
  GpuStatus gpu;
  StatsTable deviceStats;  // device seconds per layer; empty unless device timing runs
};

// The reporter's one window on the training side (the session, or a Fake in unit tests), so the
// reporter builds and is tested without LibTorch. Called from the reporter thread only.
class RoundSource {
 public:
  virtual ~RoundSource() = default;
  virtual RoundSnapshot snapshot(const SnapshotRequest& request) = 0;
  // Rank 0's /control, applied at a round: pause recording or change the rate from the next step.
  virtual void applyControl(bool paused, int64_t sampleEvery) = 0;
};

}  // namespace detail
}  // namespace attnscope
