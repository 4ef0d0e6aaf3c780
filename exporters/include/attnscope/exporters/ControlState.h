#pragma once

#include <cstdint>

namespace attnscope {

// What rank 0's /control endpoint has been asked for; ranks apply it at the next round.
struct ControlState {
  uint64_t generation = 0;  // bumped by every accepted request
  bool paused = false;
  int64_t sampleEvery = 1;
};

}  // namespace attnscope
