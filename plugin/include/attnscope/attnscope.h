#pragma once

// attnscope: per-layer attention timings and memory for LibTorch training.
//
//   attnscope::start();                       // reads ATTNSCOPE_* (throws std::invalid_argument)
//   for (...) {
//     { attnscope::AttentionScope scope("layers.3.attn"); out = attention(x); }
//     loss.backward();
//     attnscope::step();                      // optional: without it one backward pass is a step
//   }
//   attnscope::stop();                        // writes ATTNSCOPE_SUMMARY_JSON
//
// No LibTorch header is included here.

#include <string>

#include "attnscope/core/ClusterReport.h"
#include "attnscope/core/Config.h"
#include "attnscope/core/Export.h"
#include "attnscope/core/GpuStatus.h"
#include "attnscope/core/RunInfo.h"
#include "attnscope/core/StatsTable.h"

namespace attnscope {

// Version of this library, "MAJOR.MINOR.PATCH".
ATTNSCOPE_API const char* version();

// Starts observing with `config` (config.validate() first). Call before the training loop,
// on the training thread. Calling start() while running restarts with the new configuration.
// \throw std::invalid_argument for a bad configuration (nothing is installed then).
ATTNSCOPE_API void start(const Config& config);
// start(Config::fromEnvironment()).
// \throw std::invalid_argument naming the bad ATTNSCOPE_* variable, its value and what is allowed.
ATTNSCOPE_API void start();

// Ends observing: removes every callback, writes the summary JSON and (log level info) a table
// on stderr. Safe to call when not running. Never throws; an unwritable summary is logged.
ATTNSCOPE_API void stop();

// Marks the end of a training step. Cheap (one mutex, a fold of the step's backward records).
ATTNSCOPE_API void step();

ATTNSCOPE_API bool isRunning();

// A copy of this rank's statistics so far, and the run description.
ATTNSCOPE_API StatsTable statistics();
ATTNSCOPE_API RunInfo runInfo();
// The summary JSON document for this rank so far (the same text stop() writes).
ATTNSCOPE_API std::string summaryJson();
// Rank 0's cross-rank picture so far (aggregation, per-rank scores, stragglers, hangs, missing
// ranks, every rank's statistics merged). False on other ranks and when not running.
ATTNSCOPE_API bool clusterReport(ClusterReport* out);

// GPU (docs/GPU.md). Device seconds per layer, phase and op kind: one sample per attention call;
// the call cell is the CUDA-event span when events run, else the summed kernel time; op kinds
// come from CUPTI. Empty on CPU-only runs and when ATTNSCOPE_GPU_TIMING=off. Figures lag the
// training by a few hundred milliseconds (they are read back without synchronising).
ATTNSCOPE_API StatsTable deviceStatistics();
// Which GPU timing source runs, why it fell back, CUPTI/event counters, the caching allocator's
// figures and the attention backend per layer.
ATTNSCOPE_API GpuStatus gpuStatus();

// Marks one attention call. Every aten op that runs on this thread while the scope is open is
// timed and classified, its autograd nodes are attributed to the same layer in backward, and
// allocator reports are attributed to the op. On unsampled steps (or when not running) the
// constructor only reads an atomic flag.
class ATTNSCOPE_API AttentionScope {
 public:
  explicit AttentionScope(const char* layerName);
  explicit AttentionScope(const std::string& layerName) : AttentionScope(layerName.c_str()) {}
  ~AttentionScope();
  AttentionScope(const AttentionScope&) = delete;
  AttentionScope& operator=(const AttentionScope&) = delete;

 private:
  bool active_ = false;
};

}  // namespace attnscope
