#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "attnscope/core/OpKind.h"

namespace attnscope {

// What one rank reports about one window (the time between two reporting rounds). A few scalars,
// gathered from every rank each round; the layout is fixed (toVector/fromVector) so that the
// all-gather's size never depends on the model.
struct RankWindow {
  int32_t rank = -1;
  bool present = false;              // false: the rank did not answer this round
  uint64_t lastStep = 0;             // steps ended so far on the rank
  uint32_t steps = 0;                // steps ended in this window
  uint32_t sampledSteps = 0;         // of which sampled
  double windowSeconds = 0;          // wall time the window covers
  double forwardSeconds = 0;         // attention forward (+ recompute) time per sampled step
  double backwardSeconds = 0;        // attention backward time per sampled step
  double stepSeconds = 0;            // mean step time in the window (0 when no step ended)
  int64_t peakBytes = 0;             // largest attention peak in the window
  double collectiveWaitSeconds = 0;  // time in the job's own collectives per step
  uint32_t layersChecksum = 0;       // of the layer names in registration order
  uint32_t numLayers = 0;
  // The rank's own attribution of its excess over the cluster mean (previous window): the
  // (layer, phase, op kind) cell with the largest excess, and its share of the summed excess.
  int32_t topLayer = -1;
  Phase topPhase = Phase::kForward;
  OpKind topKind = OpKind::kOther;
  double topShare = 0;
  // The rank's own cell outlier (previous window): a (layer, phase, op kind) at cellFactor × the
  // other ranks' typical time for it, cellShare of the rank's time in that layer and phase in
  // excess.
  int32_t cellLayer = -1;
  Phase cellPhase = Phase::kForward;
  OpKind cellKind = OpKind::kOther;
  double cellFactor = 0;
  double cellShare = 0;
  // Runtime control, meaningful in rank 0's window: every rank applies the newest generation.
  uint64_t controlGeneration = 0;
  bool controlPaused = false;
  int64_t controlSampleEvery = 1;

  double attentionSeconds() const { return forwardSeconds + backwardSeconds; }

  static constexpr size_t kVectorSize = 25;
  std::vector<double> toVector() const;
  static RankWindow fromVector(const double* v);  // kVectorSize values
};

}  // namespace attnscope
