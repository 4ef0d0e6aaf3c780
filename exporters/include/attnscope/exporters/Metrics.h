#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <prometheus/metric_family.h>

#include "attnscope/core/ClusterReport.h"
#include "attnscope/core/GpuStatus.h"
#include "attnscope/core/Histogram.h"
#include "attnscope/core/RunInfo.h"
#include "attnscope/core/StatsTable.h"
#include "attnscope/exporters/MetricsSnapshot.h"  // seriesCount

namespace attnscope {

// The labels that name one rank's series (docs/METRICS.md).
struct MetricsIdentity {
  std::string job;
  int rank = 0;
  int localRank = 0;
  int worldSize = 1;
  std::string node;
  std::string version;
  std::string torchVersion;
  std::string aggregation;  // backend actually in use, or "none"
};

// The rank's own state at one reporting round, next to its statistics.
struct RankMetrics {
  RunInfo run;
  double forwardSecondsPerStep = 0;  // attention time per sampled step, last window
  double backwardSecondsPerStep = 0;
  double stepSeconds = 0;      // mean step time, last window
  double overheadSeconds = 0;  // time spent in attnscope's own code on training threads
  bool paused = false;
  int64_t sampleEvery = 1;
  // Exporter and aggregation health.
  int port = 0;                 // the port actually served (0: none)
  bool portFallback = false;    // the configured port was taken
  uint64_t exporterErrors = 0;  // bind failures, push failures
  bool pushing = false;         // a push gateway is configured (the push counters exist only then)
  uint64_t pushes = 0;
  uint64_t pushErrors = 0;
  uint64_t rounds = 0;  // aggregation rounds completed on this rank
  uint64_t roundErrors = 0;
  bool degraded = false;
  double lastRoundSeconds = 0;
  uint64_t lastRoundBytes = 0;
  uint64_t traceErrors = 0;
  // GPU path (docs/GPU.md): the timing source and its health, the caching allocator, and device
  // seconds per layer, phase and op kind (empty without a GPU).
  GpuStatus gpu;
  StatsTable deviceStats;
  // Per phase, the call times of the last window that had calls: the quantiles of
  // attnscope_attention_call_seconds (a live figure, not one since start).
  std::array<LogHistogram, kNumPhases> windowCalls;
};

// The shape of what an endpoint exports (docs/METRICS.md, "Series budget").
struct MetricsOptions {
  // Per-layer series on this rank (ATTNSCOPE_METRICS_LAYERS=1, or /control layers=on): the
  // rank's families gain a `layer` label, plus the per-layer call histograms and roofline cells.
  // Off (the default): the rank's totals by phase and op kind, a count that does not grow with
  // the model's depth.
  bool layerDetail = false;
  // Rank 0: up to this many ranks, the job summary describes every rank one by one
  // (ATTNSCOPE_METRICS_RANKS); beyond, the kTopRanks highest scores, every flagged rank (straggler,
  // cell outlier, hung, missing; at most kMaxFlaggedRanks) and the scores' distribution.
  int64_t ranksDescribed = 1024;
};

constexpr int kTopRanks = 16;
constexpr int kMaxFlaggedRanks = 256;
// The quantiles of attnscope_attention_call_seconds.
constexpr std::array<double, 2> kCallQuantiles = {0.5, 0.99};

// Bucket bounds of exported latency histograms: 2^(-16 + k/2) s for k = 0..36 (15 us to 4 s,
// two per octave), each the edge of a LogHistogram bucket, so the counts are exact.
std::vector<double> exportedBucketBounds();

// Builds the metric families of one rank, and the job summary when `cluster` is given (rank 0).
std::vector<prometheus::MetricFamily> buildMetrics(const MetricsIdentity& id,
                                                   const RankMetrics& rank, const StatsTable& stats,
                                                   const MetricsOptions& options,
                                                   const ClusterReport* cluster);

// Prometheus text exposition of `families` (what /metrics serves).
std::string renderMetrics(const std::vector<prometheus::MetricFamily>& families);

}  // namespace attnscope
