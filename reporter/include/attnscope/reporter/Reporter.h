#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "attnscope/core/Attribution.h"
#include "attnscope/core/ClusterReport.h"
#include "attnscope/core/Config.h"
#include "attnscope/core/StragglerDetector.h"
#include "attnscope/core/Topology.h"
#include "attnscope/reporter/Aggregator.h"
#include "attnscope/reporter/RoundSource.h"
#include "attnscope/reporter/TraceWriter.h"
#if ATTNSCOPE_WITH_PROMETHEUS
#include "attnscope/exporters/FileSd.h"
#include "attnscope/exporters/Metrics.h"
#include "attnscope/exporters/MetricsServer.h"
#include "attnscope/exporters/MetricsSnapshot.h"
#include "attnscope/exporters/Pusher.h"
#endif

namespace attnscope {
namespace detail {

// The reporter thread of one rank: every ATTNSCOPE_INTERVAL_S it takes one snapshot of the rank
// (RoundSource: the finished window, the trace steps, run info) and runs one aggregation round
// (all-gather of each rank's RankWindow, all-reduce of the window's statistics), then rank 0
// updates the straggler detector, the episodes and the ClusterReport. A second thread writes this
// rank's heartbeat to the aggregator's store every interval, so that when the collectives fail (a
// rank died) the others still see who is alive and rounds go on through the store (degraded).
// The training thread never waits for either. Torch-free: the session is a RoundSource, the
// backends are Aggregators (Fakes of both in tests/unit/ReporterTest.cpp).
class Reporter {
 public:
  Reporter(RoundSource& source, const Config& config, const Topology& topology,
           AggregatorFactory makeAggregator);
  ~Reporter();
  // Runs a last round (bounded by the round timeout) and joins the threads. False when they did
  // not finish in time and were left behind (the caller must then keep this object alive).
  bool stop();
  ClusterReport report();
  // The port this rank's /metrics endpoint serves (0: none, or a build without prometheus-cpp).
  int metricsPort() const;
  // Health of this rank's trace store (ATTNSCOPE_TRACE_DIR).
  TraceStoreStats traceStats() { return trace_.stats(); }

 private:
  // Prometheus export: the rank's figures (and rank 0's job summary) for scrapes and pushes.
  void startExport(const RoundSnapshot& snapshot);
  void publishMetrics(const RoundSnapshot& snapshot);
  void finishExport();
  // Once, at the first collective round: every rank's scrape endpoint, for rank 0's file_sd file.
  bool exchangeEndpoints(std::string* error);
  // A world of one without collectives: its own endpoint into the file_sd file.
  void writeOwnTarget();
  // Rank 0: what /control has been asked for, into the window it gathers to every rank.
  void requestedControl(RankWindow* mine);
  void applyControl(uint64_t generation, bool paused, int64_t sampleEvery);
#if ATTNSCOPE_WITH_PROMETHEUS
  void writeTargets(const std::vector<ScrapeTarget>& targets);
#endif

  void run();
  void heartbeats();
  void markFinished();
  // One round; without collectives (they failed, or peers are gone) through the store only.
  void round(bool collectives);
  void finalRound();
  bool peersStopping();
  // Marks regular round number enteredRounds_ as entered in the store (a stopping rank joins it).
  void enterRegularRound();
  void roundDegraded(RankWindow mine, const std::vector<std::string>& names);
  void conclude(const std::vector<RankWindow>& windows, const std::vector<std::string>& names);
  // Keeps, per phase, the window's call times when it had calls.
  void keepWindowCalls(const StatsTable& window);
  void fail(const std::string& error);
  // A trace commit of the source's newest trace steps (rank 0: with the round and episodes).
  void writeTrace(RoundSnapshot& snapshot, bool last);

  RoundSource& source_;
  const Config config_;
  const Topology topology_;
  AggregatorFactory makeAggregator_;
  std::unique_ptr<Aggregator> aggregator_;
  // The aggregator's store, for heartbeats, the stop barrier and degraded rounds; null once any
  // call on it failed: a store whose server died can make later calls spin, so it is never touched
  // again.
  std::atomic<KeyValueStore*> store_{nullptr};
  void loseStore(const std::string& why);
  std::unique_ptr<StragglerDetector> detector_;
  // The other ranks' sum of the window before (the all-reduced sum less this rank's), which this
  // rank's window is compared with before its scalars go out: the cell found travels with the
  // window it was found in (docs/AGGREGATION.md: the baseline is one window older). Empty after a
  // round without the all-reduce.
  StatsTable lastOthers_;
  uint64_t lastOthersSampled_ = 0;
  CellComparison cells_;  // this rank's window against lastOthers_'
  CellHold cellHold_;     // the detector's hold on this rank's cell outlier, mirrored

#if ATTNSCOPE_WITH_PROMETHEUS
  std::unique_ptr<MetricsServer> metrics_;
  std::shared_ptr<MetricsSnapshot> snapshot_;
  std::unique_ptr<Pusher> pusher_;
  MetricsIdentity identity_;
#endif
  StatsTable cumulative_;  // this rank's statistics, the windows merged (reporter thread)
  RankWindow lastMine_;    // this rank's last window scalars
  // Per phase, the call times of the last window with calls (the exported summary's quantiles).
  std::array<LogHistogram, kNumPhases> windowCalls_;
  uint64_t appliedControl_ = 0;  // newest control generation applied
  bool endpointsExchanged_ = false;
  uint64_t enteredRounds_ = 0;   // regular rounds with collectives this rank entered
  bool roundCommitted_ = false;  // round() committed the trace in this iteration

  std::mutex reportMutex_;  // guards report_ (read by report() from any thread)
  ClusterReport report_;

  std::mutex wakeMutex_;  // guards the stop handshake below
  std::condition_variable wake_;
  bool stopping_ = false;
  int expectedThreads_ = 1;  // the reporter, and the heartbeat thread once it starts
  int finishedThreads_ = 0;
  bool detached_ = false;
  std::thread thread_;
  std::thread heartbeatThread_;

  TraceWriter trace_;
};

}  // namespace detail
}  // namespace attnscope
