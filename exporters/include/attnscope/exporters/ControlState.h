#pragma once

#include <cstdint>

namespace attnscope {

// What /control has been asked for. Rank 0's job-wide state (pause, sample rate) rides on the
// next aggregation round to every rank; a rank's layer detail applies to its own endpoint at the
// next reporting interval.
struct ControlState {
  uint64_t generation = 0;  // bumped by every accepted job-wide request
  bool paused = false;
  int64_t sampleEvery = 1;
  bool layerDetail = false;  // per-layer series on this rank (layers=on|off)
};

}  // namespace attnscope
