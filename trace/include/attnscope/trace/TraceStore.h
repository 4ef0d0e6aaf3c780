#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attnscope/core/ClusterReport.h"
#include "attnscope/core/RankWindow.h"
#include "attnscope/core/StragglerDetector.h"
#include "attnscope/trace/TraceFormat.h"

struct sqlite3;

namespace attnscope {

// One (layer, phase, op kind) of a reporting window on the roofline (docs/ROOFLINE.md): the
// window's sampled ops of that kind, their time, and what the shape formulas made of them.
struct TraceRooflineRow {
  int32_t layer = -1;
  Phase phase = Phase::kForward;
  OpKind kind = OpKind::kOther;
  uint64_t ops = 0;            // top-level ops (forward, recompute) or autograd nodes (backward)
  double seconds = 0;          // all of them
  double modelledSeconds = 0;  // those with a formula: what the rates divide by
  double flops = 0;
  double bytes = 0;      // minimum bytes moved
  double wideFlops = 0;  // flops done in float32/float64
};

// What one reporting interval adds to a rank's trace, written in one transaction.
struct TraceInterval {
  std::vector<std::string> layerNames;  // every layer name so far, in id order
  std::vector<EncodedStep> steps;       // sampled steps that ended in the interval
  bool haveWindow = false;              // the interval's window summary
  double windowStartUnix = 0;
  double windowEndUnix = 0;
  RankWindow window;
  // Rank 0 with a straggler detector: the last round's picture and every episode so far.
  bool haveRound = false;
  double roundUnix = 0;
  ClusterRound round;
  std::vector<DetectorEpisode> stragglers;
  std::vector<DetectorEpisode> hangs;
  std::vector<DetectorEpisode> cellOutliers;
  std::vector<std::pair<std::string, std::string>> meta;  // metadata to insert or replace
  // The window's roofline cells (one row per cell with ops), stored under the interval's number.
  std::vector<TraceRooflineRow> roofline;
};

// Health of one rank's trace writing, for logs and exporters.
struct TraceStoreStats {
  bool enabled = false;  // ATTNSCOPE_TRACE_DIR set
  bool open = false;     // the file is open and writable
  uint64_t commits = 0;
  uint64_t errors = 0;  // failed opens and commits (disk full, unwritable directory)
  uint64_t stepsWritten = 0;
  uint64_t stepsDropped = 0;  // steps the session's buffer could not keep until the next commit
  uint64_t stepsTrimmed = 0;  // oldest steps deleted to respect ATTNSCOPE_TRACE_MAX_MB
  double lastCommitSeconds = 0;
  double maxCommitSeconds = 0;
  int64_t fileBytes = 0;
  std::string lastError;
};

// One rank's trace file: SQLite in WAL mode (docs/ANALYSIS.md has the schema). Each commit() is one
// transaction, so a process killed at any moment leaves every earlier interval readable. The
// file is bounded by maxBytes: after a commit that passes it, the oldest step records (and rank
// 0's oldest per-round scores) are deleted, their pages reused; metadata, window summaries and
// findings are kept. Not thread-safe.
class TraceStore {
 public:
  // "rank-<rank>.sqlite"
  static std::string fileName(int rank);

  // Creates `dir` (and missing parents) and opens or creates dir/rank-<rank>.sqlite. Returns null
  // and fills `error` (naming the path) on failure.
  static std::unique_ptr<TraceStore> open(const std::string& dir, int rank, int64_t maxBytes,
                                          std::string* error);
  ~TraceStore();
  TraceStore(const TraceStore&) = delete;
  TraceStore& operator=(const TraceStore&) = delete;

  // Writes the interval in one transaction; on failure rolls back, fills `error` and returns
  // false (the store stays usable: a later commit may succeed once space is free again).
  bool commit(const TraceInterval& interval, std::string* error);

  const std::string& path() const { return path_; }
  // Main file plus write-ahead log, as on disk now.
  int64_t fileBytes() const;
  // Step records deleted so far to respect the size cap.
  uint64_t stepsTrimmed() const { return trimmed_; }

 private:
  TraceStore(sqlite3* db, std::string path, int64_t maxBytes);
  bool exec(const char* sql, std::string* error);
  bool enforceCap(std::string* error);

  sqlite3* db_;
  std::string path_;
  int64_t maxBytes_;
  uint64_t trimmed_ = 0;
  uint64_t nextRound_ = 1;
  size_t layersWritten_ = 0;
};

}  // namespace attnscope
