#include "attnscope/reporter/Reporter.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <thread>

#include "attnscope/core/Log.h"
#include "attnscope/core/OpKind.h"
#include "attnscope/core/StragglerEpisodes.h"
#include "attnscope/core/UnixTime.h"
#include "attnscope/reporter/InternalThread.h"

namespace attnscope {
namespace detail {
namespace {

double monotonicNow() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string toBytes(const std::vector<double>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double));
}

// This rank's scalars for the window, with its attribution of the previous window's excess and
// its cell outlier.
RankWindow scalars(const Window& w, int rank, const CellComparison& cells) {
  const Attribution& attribution = cells.attribution;
  RankWindow r;
  r.rank = rank;
  r.present = true;
  r.lastStep = w.lastStep;
  r.steps = static_cast<uint32_t>(w.steps);
  r.sampledSteps = static_cast<uint32_t>(w.sampledSteps);
  r.windowSeconds = w.seconds;
  r.stepSeconds = w.steps > 0 ? w.seconds / static_cast<double>(w.steps) : 0;
  // Typical attention time per step: per layer and phase, the median call × calls per step.
  for (const LayerStats& layer : w.stats.layers()) {
    for (int p = 0; p < kNumPhases; ++p) {
      const PhaseStats* phase = layer.phases[p].get();
      if (phase == nullptr) continue;
      const double seconds = typicalSecondsPerStep(phase->call, w.sampledSteps);
      (p == static_cast<int>(Phase::kBackward) ? r.backwardSeconds : r.forwardSeconds) += seconds;
      r.peakBytes = std::max(r.peakBytes, phase->call.peak);
    }
  }
  if (w.collectiveSteps > 0) {
    r.collectiveWaitSeconds = w.collectiveSeconds / static_cast<double>(w.collectiveSteps);
  }
  r.layersChecksum = w.stats.layersChecksum();
  r.numLayers = static_cast<uint32_t>(w.stats.layers().size());
  r.topLayer = attribution.layer;
  r.topPhase = attribution.phase;
  r.topKind = attribution.kind;
  r.topShare = attribution.share;
  r.cellLayer = cells.outlier.layer;
  r.cellPhase = cells.outlier.phase;
  r.cellKind = cells.outlier.kind;
  r.cellFactor = cells.outlier.factor;
  r.cellShare = cells.outlier.share;
  return r;
}

}  // namespace

Reporter::Reporter(RoundSource& source, const Config& config, const Topology& topology,
                   AggregatorFactory makeAggregator)
    : source_(source),
      config_(config),
      topology_(topology),
      makeAggregator_(std::move(makeAggregator)),
      cellHold_(stragglerOptions(config)),
      trace_(config, topology.rank) {
  if (topology_.rank == 0) {
    detector_ = std::make_unique<StragglerDetector>(topology_.worldSize, stragglerOptions(config));
  }
  report_.aggregation = aggregationName(config.aggregation);
  cumulative_ = StatsTable(config.maxLayers);
  startExport(source_.snapshot(SnapshotRequest{}));
  thread_ = std::thread([this] { run(); });
}

void Reporter::applyControl(uint64_t generation, bool paused, int64_t sampleEvery) {
  if (generation <= appliedControl_) return;
  appliedControl_ = generation;
  source_.applyControl(paused, sampleEvery);
}

Reporter::~Reporter() { stop(); }  // a reporter left behind is never destroyed (Session::finish)

bool Reporter::stop() {
  {
    std::lock_guard<std::mutex> lock(wakeMutex_);
    if (stopping_ && !thread_.joinable()) return !detached_;
    stopping_ = true;
  }
  wake_.notify_all();
  // The stop barrier and the last round are each bounded by the round timeout, but a store
  // whose server died can leave a c10d call spinning: give the threads twice that and a margin,
  // then leave them behind rather than hang the training process at exit.
  const auto limit = std::chrono::milliseconds(
      static_cast<int64_t>(2 * config_.roundTimeoutSeconds * 1000 + 5000));
  std::unique_lock<std::mutex> lock(wakeMutex_);
  const bool done =
      wake_.wait_for(lock, limit, [&] { return finishedThreads_ == expectedThreads_; });
  if (!done) {
    ATTNSCOPE_LOG(kError,
                  "the reporter did not finish within "
                      << limit.count()
                      << " ms (a store or collective call does not return); leaving it behind");
    if (thread_.joinable()) thread_.detach();
    if (heartbeatThread_.joinable()) heartbeatThread_.detach();
    detached_ = true;
    return false;
  }
  lock.unlock();
  if (thread_.joinable()) thread_.join();
  if (heartbeatThread_.joinable()) heartbeatThread_.join();
  return true;
}

void Reporter::markFinished() {
  {
    std::lock_guard<std::mutex> lock(wakeMutex_);
    ++finishedThreads_;
  }
  wake_.notify_all();
}

ClusterReport Reporter::report() {
  std::lock_guard<std::mutex> lock(reportMutex_);
  return report_;
}

void Reporter::fail(const std::string& error) {
  std::lock_guard<std::mutex> lock(reportMutex_);
  ++report_.roundErrors;
  if (!report_.degraded) {
    ATTNSCOPE_LOG(kError, "aggregation failed, continuing without collectives: " << error);
    if (aggregator_ && aggregator_->store() == nullptr) {
      ATTNSCOPE_LOG(kWarn, "no rounds through a store from now on ("
                               << aggregator_->name() << "): " << aggregator_->noStoreReason());
    }
  }
  report_.degraded = true;
  report_.lastError = error;
}

void Reporter::run() {
  markInternalThread();
  trace_.open();  // before the aggregator's set-up, which may take up to the round timeout
  {
    // The metadata at once: a rank killed early still leaves a valid file.
    RoundSnapshot first = source_.snapshot(SnapshotRequest{false, trace_.isOpen()});
    writeTrace(first, /*last=*/false);
  }
  std::string error;
  aggregator_ = makeAggregator_ ? makeAggregator_(&error) : nullptr;
  {
    std::lock_guard<std::mutex> lock(reportMutex_);
    report_.aggregation = aggregator_ ? aggregator_->name() : "none";
    if (!aggregator_ && config_.aggregation != Aggregation::kNone) {
      report_.lastError = error;
      ++report_.roundErrors;
      ATTNSCOPE_LOG(kError, "aggregation (" << aggregationName(config_.aggregation)
                                            << ") unavailable, per-rank figures only: " << error);
    }
  }
  if (aggregator_ && aggregator_->store() != nullptr) {
    store_.store(aggregator_->store());
    std::lock_guard<std::mutex> lock(wakeMutex_);  // stop() reads both under this lock
    ++expectedThreads_;
    heartbeatThread_ = std::thread([this] { heartbeats(); });
  }
  const auto interval =
      std::chrono::milliseconds(static_cast<int64_t>(config_.intervalSeconds * 1000));
  while (true) {
    bool last = false;
    {
      std::unique_lock<std::mutex> lock(wakeMutex_);
      wake_.wait_for(lock, interval, [this] { return stopping_; });
      last = stopping_;
    }
    roundCommitted_ = false;
    try {
      if (last) {
        finalRound();
      } else if (!peersStopping()) {
        enterRegularRound();
        round(/*collectives=*/true);
      }
    } catch (const std::exception& e) {
      // Collectives report their own failures; what escapes is the store's.
      loseStore(e.what());
    }
    // round() committed this rank's steps before its collectives; rank 0 adds the round's
    // findings, the last round closes the file.
    const bool commit = last || detector_ || !roundCommitted_;
    RoundSnapshot after = source_.snapshot(SnapshotRequest{false, commit && trace_.isOpen()});
    if (commit) writeTrace(after, last);
    if (last) break;
    publishMetrics(after);
  }
  finishExport();
  aggregator_.reset();  // MPI finalises here, on the thread that initialised it
  markFinished();
}

void Reporter::writeTrace(RoundSnapshot& snapshot, bool last) {
  if (!trace_.isOpen()) return;
  if (!detector_) {
    trace_.commit(snapshot, nullptr, last);
    return;
  }
  ClusterReport episodes;  // the round and the episodes: what the trace keeps of rank 0's report
  {
    std::lock_guard<std::mutex> lock(reportMutex_);
    episodes.rounds = report_.rounds;
    episodes.last = report_.last;
    episodes.stragglers = report_.stragglers;
    episodes.hangs = report_.hangs;
    episodes.cellOutliers = report_.cellOutliers;
  }
  trace_.commit(snapshot, &episodes, last);
}

void Reporter::heartbeats() {
  markInternalThread();
  const auto interval =
      std::chrono::milliseconds(static_cast<int64_t>(config_.intervalSeconds * 1000));
  const std::string key = "hb/" + std::to_string(topology_.rank);
  while (true) {
    KeyValueStore* store = store_.load();
    if (store == nullptr) break;
    try {
      store->set(key, std::to_string(unixNow()));
    } catch (const std::exception& e) {
      loseStore(std::string("heartbeat: ") + e.what());
      break;
    }
    std::unique_lock<std::mutex> lock(wakeMutex_);
    if (wake_.wait_for(lock, interval, [this] { return stopping_; })) break;
  }
  markFinished();
}

// Once a rank has begun to stop, the others hold their regular rounds: every rank's last round
// must meet the others' last rounds, not a regular one.
bool Reporter::peersStopping() {
  KeyValueStore* store = store_.load();
  if (store == nullptr || !aggregator_ || !aggregator_->healthy()) return false;
  return store->add("stopping", 0) > 0;
}

// Every rank announces a regular round before its collectives ("enter/<n>"): a rank that has
// begun to stop meanwhile sees it and joins that round instead of waiting in the stop barrier
// while the other waits in the round's collective (both would wait out the round timeout).
void Reporter::enterRegularRound() {
  KeyValueStore* store = store_.load();
  if (store == nullptr || !aggregator_ || !aggregator_->healthy()) return;
  store->add("enter/" + std::to_string(enteredRounds_), 1);
  // Every rank entered the previous round before this one can complete: its key is done with.
  if (topology_.rank == 0 && enteredRounds_ > 0)
    store->deleteKey("enter/" + std::to_string(enteredRounds_ - 1));
  ++enteredRounds_;
}

void Reporter::loseStore(const std::string& why) {
  if (store_.exchange(nullptr) != nullptr) fail("store unreachable, per-rank figures only: " + why);
}

// The last round: a barrier through the store (every rank has called stop), then one more round,
// so that every rank's final window reaches rank 0. Bounded by the round timeout; a rank that never
// arrives (dead, or still training) leaves the others to stop without it.
void Reporter::finalRound() {
  KeyValueStore* store = store_.load();
  if (store != nullptr && aggregator_ && aggregator_->healthy()) {
    const auto deadline =
        std::chrono::steady_clock::now() +
        std::chrono::milliseconds(static_cast<int64_t>(config_.roundTimeoutSeconds * 1000));
    int64_t stopped = store->add("stopping", 1);
    while (stopped < topology_.worldSize && std::chrono::steady_clock::now() < deadline) {
      // A peer that had not yet seen "stopping" entered a regular round: meet it there.
      if (store->add("enter/" + std::to_string(enteredRounds_), 0) > 0) {
        ++enteredRounds_;
        round(/*collectives=*/true);
        if (!aggregator_->healthy()) return;
        continue;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      stopped = store->add("stopping", 0);
    }
    if (stopped < topology_.worldSize) {
      fail("only " + std::to_string(stopped) + " of " + std::to_string(topology_.worldSize) +
           " ranks stopped within the round timeout; the last window goes through the store");
      round(/*collectives=*/false);
      return;
    }
  }
  round(/*collectives=*/true);
}

void Reporter::round(bool collectives) {
  RoundSnapshot snap = source_.snapshot(SnapshotRequest{true, trace_.isOpen()});
  const Window& w = snap.window;
  cumulative_.merge(w.stats);
  keepWindowCalls(w.stats);
  // This window's cells against the others' of the window before, when the layers are the same.
  cells_ = lastOthersSampled_ > 0 && lastOthers_.layerNames() == w.stats.layerNames()
               ? compareCells(w.stats, w.sampledSteps, lastOthers_, lastOthersSampled_,
                              cellOutlierLimits(config_), cellHold_.keep(), cellHold_.held())
               : CellComparison{};
  lastOthersSampled_ = 0;
  RankWindow mine = scalars(w, topology_.rank, cells_);
  cellHold_.observe(mine);
  if (mine.sampledSteps > 0 || w.steps > 0) lastMine_ = mine;
  // Trace store: committed before the collectives, which may wait on peers.
  trace_.setWindow(mine, w.stats);
  writeTrace(snap, /*last=*/false);
  roundCommitted_ = true;
  requestedControl(&mine);
  if (!aggregator_) {
    // Per-rank figures only: rank 0 still serves its own control requests.
    applyControl(mine.controlGeneration, mine.controlPaused, mine.controlSampleEvery);
    if (!endpointsExchanged_ && topology_.worldSize == 1) writeOwnTarget();
    return;
  }
  if (!collectives || !aggregator_->healthy()) {
    roundDegraded(mine, snap.layerNames);
    return;
  }
  std::string error;
  if (!endpointsExchanged_ && !exchangeEndpoints(&error)) {
    fail(error);
    roundDegraded(mine, snap.layerNames);
    return;
  }
  std::vector<double> all;
  const auto roundStart = std::chrono::steady_clock::now();
  uint64_t bytes = RankWindow::kVectorSize * sizeof(double);
  if (!aggregator_->allGather(mine.toVector(), &all, &error)) {
    fail(error);
    roundDegraded(mine, snap.layerNames);
    return;
  }
  std::vector<RankWindow> windows;
  uint64_t clusterSampled = 0;
  bool agree = true;
  for (int r = 0; r < topology_.worldSize; ++r) {
    windows.push_back(RankWindow::fromVector(all.data() + r * RankWindow::kVectorSize));
    windows.back().present = true;
    clusterSampled += windows.back().sampledSteps;
    if (r == 0) {
      applyControl(windows[0].controlGeneration, windows[0].controlPaused,
                   windows[0].controlSampleEvery);
    }
    agree = agree && windows.back().numLayers == mine.numLayers &&
            windows.back().layersChecksum == mine.layersChecksum;
  }
  const std::vector<std::string> names = w.stats.layerNames();
  if (agree && mine.numLayers > 0) {
    std::vector<double> flat = w.stats.flatten();
    if (!aggregator_->allReduceSum(&flat, &error)) {
      fail(error);
      roundDegraded(mine, snap.layerNames);
      return;
    }
    bytes += flat.size() * sizeof(double);
    const StatsTable cluster = StatsTable::fromFlat(names, flat);
    // The other ranks' sum: the all-reduced sum less this rank's own (every figure is a sum).
    std::vector<double> others = w.stats.flatten();
    for (size_t i = 0; i < others.size() && i < flat.size(); ++i) others[i] = flat[i] - others[i];
    lastOthers_ = StatsTable::fromFlat(names, others);
    lastOthersSampled_ = clusterSampled - w.sampledSteps;
    std::lock_guard<std::mutex> lock(reportMutex_);
    report_.stats.merge(cluster);
  } else if (!agree) {
    std::lock_guard<std::mutex> lock(reportMutex_);
    if (report_.layersAgree) {
      ATTNSCOPE_LOG(kWarn,
                    "ranks registered different attention layer names; cross-rank "
                    "statistics are not merged (straggler detection goes on)");
    }
    report_.layersAgree = false;
  }
  {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - roundStart).count();
    std::lock_guard<std::mutex> lock(reportMutex_);
    report_.lastRoundSeconds = seconds;
    report_.maxRoundSeconds = std::max(report_.maxRoundSeconds, seconds);
    report_.sumRoundSeconds += seconds;
    ++report_.collectiveRounds;
    report_.lastRoundBytes = bytes;
  }
  conclude(windows, names);
}

void Reporter::keepWindowCalls(const StatsTable& window) {
  std::array<LogHistogram, kNumPhases> calls;
  for (const LayerStats& layer : window.layers()) {
    for (int p = 0; p < kNumPhases; ++p) {
      if (layer.phases[p]) calls[p].merge(layer.phases[p]->call.seconds);
    }
  }
  for (int p = 0; p < kNumPhases; ++p) {
    if (calls[p].count() > 0) windowCalls_[p] = calls[p];
  }
}

void Reporter::roundDegraded(RankWindow mine, const std::vector<std::string>& names) {
  KeyValueStore* store = store_.load();
  if (store == nullptr) return;
  try {
    store->set("w/" + std::to_string(topology_.rank), toBytes(mine.toVector()));
    if (topology_.rank != 0) return;
    // A rank is alive while its heartbeat (written every interval) is younger than 1.5 intervals:
    // a dead rank is reported at most 1.5 intervals after its last beat plus one round.
    const double now = unixNow();
    std::vector<RankWindow> windows(topology_.worldSize);
    for (int r = 0; r < topology_.worldSize; ++r) {
      const std::string hb = "hb/" + std::to_string(r), wk = "w/" + std::to_string(r);
      if (!store->check(hb)) continue;
      const double beat = std::stod(store->get(hb));
      if (now - beat > 1.5 * config_.intervalSeconds + 0.1) continue;
      if (r == topology_.rank) {
        windows[r] = mine;
      } else if (store->check(wk)) {
        const std::string bytes = store->get(wk);
        if (bytes.size() != RankWindow::kVectorSize * sizeof(double)) continue;
        std::vector<double> v(RankWindow::kVectorSize);
        std::memcpy(v.data(), bytes.data(), bytes.size());
        windows[r] = RankWindow::fromVector(v.data());
      } else {
        windows[r].rank = r;
      }
      windows[r].present = true;
    }
    conclude(windows, names);
  } catch (const std::exception& e) {
    loseStore(e.what());
  }
}

void Reporter::conclude(const std::vector<RankWindow>& windows,
                        const std::vector<std::string>& names) {
  if (!detector_) return;
  const ClusterRound& r = detector_->update(windows, monotonicNow());
  std::lock_guard<std::mutex> lock(reportMutex_);
  report_.rounds = r.round;
  report_.last = r;
  report_.layerNames = names;
  updateEpisodes(r, names, &report_.stragglers, &report_.hangs, &report_.cellOutliers);
}

}  // namespace detail
}  // namespace attnscope
