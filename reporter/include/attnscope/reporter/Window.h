#pragma once

#include <cstdint>

#include "attnscope/core/StatsTable.h"

namespace attnscope {
namespace detail {

// What one rank did between two reporting rounds.
struct Window {
  StatsTable stats;    // the window's calls only (same layer ids as the session's table)
  uint64_t steps = 0;  // steps ended in the window
  uint64_t sampledSteps = 0;
  uint64_t lastStep = 0;         // steps ended since start
  double seconds = 0;            // wall time covered
  double collectiveSeconds = 0;  // time in the job's own collectives (collectiveSteps)
  uint64_t collectiveSteps = 0;  // sampled steps the collective observer ran through
};

}  // namespace detail
}  // namespace attnscope
