#pragma once

#include <string>
#include <vector>

#include "attnscope/analysis/RunAnalysis.h"
#include "attnscope/analysis/TraceReader.h"

namespace attnscope {
namespace analysis {

// Chrome trace-event JSON (opens in Perfetto and chrome://tracing; Holistic Trace Analysis reads
// `distributedInfo`): per rank a process with a slice per sampled step (its real start and end),
// counters of attention forward and backward time per layer per step, and the straggler
// episodes the analysis found. Timestamps are microseconds since the run's first step.
class PerfettoTrace {
 public:
  // One rank's trace: distributedInfo {"rank": r, "world_size": W, "backend": "..."}.
  static std::string renderRank(const RankTrace& trace, const Analysis& analysis);
  // Every rank in one file (process id = rank): distributedInfo {"world_size": W, "ranks": [...]}.
  static std::string renderAll(const std::vector<RankTrace>& traces, const Analysis& analysis);
};

}  // namespace analysis
}  // namespace attnscope
