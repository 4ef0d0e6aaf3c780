#pragma once

#include <string>

#include "attnscope/core/ClusterReport.h"
#include "attnscope/core/RunInfo.h"
#include "attnscope/core/StatsTable.h"

namespace attnscope {

// The per-rank JSON summary (schema "attnscope.summary/1", documented in docs/SUMMARY_JSON.md).
class SummaryJson {
 public:
  // `cluster` (rank 0 with aggregation) adds the "cluster" section; null leaves it out.
  static std::string render(const RunInfo& run, const StatsTable& stats,
                            const ClusterReport* cluster = nullptr);
  // Writes atomically (temporary file, then rename). Returns false and fills `error` on failure.
  static bool write(const std::string& path, const RunInfo& run, const StatsTable& stats,
                    const ClusterReport* cluster, std::string* error);
  static bool write(const std::string& path, const RunInfo& run, const StatsTable& stats,
                    std::string* error) {
    return write(path, run, stats, nullptr, error);
  }
};

}  // namespace attnscope
