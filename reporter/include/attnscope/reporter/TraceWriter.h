#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "attnscope/core/ClusterReport.h"
#include "attnscope/core/Config.h"
#include "attnscope/core/RankWindow.h"
#include "attnscope/reporter/RoundSource.h"
#include "attnscope/trace/TraceStore.h"

namespace attnscope {
namespace detail {

// This rank's trace store (ATTNSCOPE_TRACE_DIR, docs/ANALYSIS.md), written by the reporter
// thread: every round the recorder's sampled steps and this rank's window, committed before the
// round's collectives (which may wait on slow or dead peers); on rank 0 the detector's round and
// episodes after them. A failure is logged once and counted; training never waits on it.
// stats() may be called from any thread.
class TraceWriter {
 public:
  TraceWriter(const Config& config, int rank);
  // Opens the file (a failure is logged and counted). Nothing is written when it is not open.
  void open();
  bool isOpen() const { return store_ != nullptr; }
  // The round's window, for the next commit; its roofline cells when ATTNSCOPE_ROOFLINE is on
  // (`stats`: the window's statistics, with the recorder's layer ids).
  void setWindow(const RankWindow& window, const StatsTable& stats);
  // One commit: `snapshot`'s trace steps (moved out), its run metadata, the pending window, and
  // rank 0's round and episodes (`cluster`, null on other ranks). `last` closes the file.
  void commit(RoundSnapshot& snapshot, const ClusterReport* cluster, bool last);
  TraceStoreStats stats();

 private:
  const Config config_;
  const int rank_;
  std::unique_ptr<TraceStore> store_;
  bool haveWindow_ = false;  // setWindow() since the last commit
  RankWindow window_;
  std::vector<TraceRooflineRow> roofline_;  // the window's roofline cells (host times)
  uint64_t commits_ = 0;                    // attempted, the metadata goes with the first
  std::mutex statsMutex_;                   // guards stats_ (read by exporters' threads)
  TraceStoreStats stats_;
};

}  // namespace detail
}  // namespace attnscope
