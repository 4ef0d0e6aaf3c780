#include "Reporter.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "InternalThread.h"
#include "Session.h"
#include "attnscope/core/Log.h"
#include "attnscope/core/OpKind.h"
#include "attnscope/core/RooflineCells.h"

namespace attnscope {
namespace detail {
namespace {

double unixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double monotonicNow() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<uint8_t> toBytes(const std::vector<double>& v) {
  std::vector<uint8_t> bytes(v.size() * sizeof(double));
  std::memcpy(bytes.data(), v.data(), bytes.size());
  return bytes;
}

std::vector<uint8_t> toBytes(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

// This rank's scalars for the window, with its attribution of the previous window's excess.
RankWindow scalars(const Window& w, int rank, const Attribution& attribution) {
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
  if (w.sampledSteps > 0) {
    r.collectiveWaitSeconds = w.collectiveSeconds / static_cast<double>(w.sampledSteps);
  }
  r.layersChecksum = w.stats.layersChecksum();
  r.numLayers = static_cast<uint32_t>(w.stats.layers().size());
  r.topLayer = attribution.layer;
  r.topPhase = attribution.phase;
  r.topKind = attribution.kind;
  r.topShare = attribution.share;
  return r;
}

}  // namespace

namespace {

// The episode of `rank` that was still going in the previous round, if any.
StragglerFinding* ongoingEpisode(std::vector<StragglerFinding>& episodes, int32_t rank,
                                 uint64_t round) {
  for (StragglerFinding& f : episodes) {
    if (f.rank == rank && f.lastRound + 1 == round) return &f;
  }
  return nullptr;
}

// While `active`, extends the rank's ongoing episode to this round, or opens (and logs) a new
// one. Returns the episode, or null when not active.
StragglerFinding* extendEpisode(std::vector<StragglerFinding>* episodes, const RankStatus& s,
                                bool active, uint64_t round,
                                const std::vector<std::string>& names) {
  if (!active) return nullptr;
  StragglerFinding* f = ongoingEpisode(*episodes, s.rank, round);
  const std::string description = StragglerDetector::describe(s, names);
  if (f == nullptr) {
    episodes->emplace_back();
    f = &episodes->back();
    f->rank = s.rank;
    f->firstRound = round;
    ATTNSCOPE_LOG(kWarn, description);
  }
  f->lastRound = round;
  f->description = description;
  return f;
}

}  // namespace

Reporter::Reporter(Session& session, const Config& config, const Topology& topology,
                   StoreSource source)
    : session_(session), config_(config), topology_(topology), source_(std::move(source)) {
  if (topology_.rank == 0) {
    StragglerOptions options;
    options.threshold = config.stragglerThreshold;
    options.windows = static_cast<int>(config.stragglerWindows);
    options.hangSeconds = config.hangSeconds;
    options.minSampledSteps = 3;
    detector_ = std::make_unique<StragglerDetector>(topology_.worldSize, options);
  }
  report_.aggregation = aggregationName(config.aggregation);
  cumulative_ = StatsTable(config.maxLayers);
  startExport();
  thread_ = std::thread([this] { run(); });
}

void Reporter::applyControl(uint64_t generation, bool paused, int64_t sampleEvery) {
  if (generation <= appliedControl_) return;
  appliedControl_ = generation;
  session_.setSampling(paused, sampleEvery);
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
  }
  report_.degraded = true;
  report_.lastError = error;
}

void Reporter::run() {
  markInternalThread();
  openTrace();  // before the aggregator's set-up, which may take up to the round timeout
  const auto timeout =
      std::chrono::milliseconds(static_cast<int64_t>(config_.roundTimeoutSeconds * 1000));
  std::string error;
  aggregator_ = createAggregator(config_.aggregation, topology_, source_, timeout,
                                 static_cast<int>(config_.storePort), &error);
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
    traceWritten_ = false;
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
    if (last || detector_ || !traceWritten_) writeTrace(last);
    if (last) break;
    publishMetrics();
  }
  finishExport();
  aggregator_.reset();  // MPI finalises here, on the thread that initialised it
  markFinished();
}

void Reporter::heartbeats() {
  markInternalThread();
  const auto interval =
      std::chrono::milliseconds(static_cast<int64_t>(config_.intervalSeconds * 1000));
  const std::string key = "hb/" + std::to_string(topology_.rank);
  while (true) {
    c10d::Store* store = store_.load();
    if (store == nullptr) break;
    try {
      store->set(key, toBytes(std::to_string(unixNow())));
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
  c10d::Store* store = store_.load();
  if (store == nullptr || !aggregator_ || !aggregator_->healthy()) return false;
  return store->add("stopping", 0) > 0;
}

// Every rank announces a regular round before its collectives ("enter/<n>"): a rank that has
// begun to stop meanwhile sees it and joins that round instead of waiting in the stop barrier
// while the other waits in the round's collective (both would wait out the round timeout).
void Reporter::enterRegularRound() {
  c10d::Store* store = store_.load();
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
  c10d::Store* store = store_.load();
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
  Window w = session_.takeWindow();
  cumulative_.merge(w.stats);
  RankWindow mine = scalars(w, topology_.rank, pendingAttribution_);
  if (mine.sampledSteps > 0 || w.steps > 0) lastMine_ = mine;
  traceWindow_ = mine;  // trace store: committed before the collectives, which may wait on peers
  traceHaveWindow_ = true;
  if (trace_ && config_.roofline) {
    traceRoofline_.clear();
    for (const RooflineCell& c : rooflineCells(w.stats, nullptr, Ceilings{})) {
      TraceRooflineRow row;
      row.layer = c.layer;  // the window keeps the session's layer ids
      row.phase = c.phase;
      row.kind = c.kind;
      row.ops = c.ops;
      row.seconds = c.seconds;
      row.modelledSeconds = c.modelledSeconds;
      row.flops = c.flops;
      row.bytes = c.bytes;
      row.wideFlops = c.wideFlops;
      traceRoofline_.push_back(row);
    }
  }
  writeTrace(/*last=*/false);
  traceWritten_ = true;
  requestedControl(&mine);
  if (!aggregator_) {
    // Per-rank figures only: rank 0 still serves its own control requests.
    applyControl(mine.controlGeneration, mine.controlPaused, mine.controlSampleEvery);
    if (!endpointsExchanged_ && topology_.worldSize == 1) writeOwnTarget();
    return;
  }
  if (!collectives || !aggregator_->healthy()) {
    roundDegraded(mine);
    return;
  }
  std::string error;
  if (!endpointsExchanged_ && !exchangeEndpoints(&error)) {
    fail(error);
    roundDegraded(mine);
    return;
  }
  std::vector<double> all;
  const auto roundStart = std::chrono::steady_clock::now();
  uint64_t bytes = RankWindow::kVectorSize * sizeof(double);
  if (!aggregator_->allGather(mine.toVector(), &all, &error)) {
    fail(error);
    roundDegraded(mine);
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
      roundDegraded(mine);
      return;
    }
    bytes += flat.size() * sizeof(double);
    const StatsTable cluster = StatsTable::fromFlat(names, flat);
    pendingAttribution_ = attributeExcess(w.stats, w.sampledSteps, cluster, clusterSampled);
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

void Reporter::roundDegraded(RankWindow mine) {
  c10d::Store* store = store_.load();
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
      if (!store->check({hb})) continue;
      const std::vector<uint8_t> hbBytes = store->get(hb);
      const double beat = std::stod(std::string(hbBytes.begin(), hbBytes.end()));
      if (now - beat > 1.5 * config_.intervalSeconds + 0.1) continue;
      if (r == topology_.rank) {
        windows[r] = mine;
      } else if (store->check({wk})) {
        const std::vector<uint8_t> bytes = store->get(wk);
        if (bytes.size() != RankWindow::kVectorSize * sizeof(double)) continue;
        std::vector<double> v(RankWindow::kVectorSize);
        std::memcpy(v.data(), bytes.data(), bytes.size());
        windows[r] = RankWindow::fromVector(v.data());
      } else {
        windows[r].rank = r;
      }
      windows[r].present = true;
    }
    conclude(windows, session_.layerNames());
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
  for (const RankStatus& s : r.ranks) {
    // Straggler episodes: logged when they begin, extended while they last.
    const bool wasStraggler = ongoingEpisode(report_.stragglers, s.rank, r.round) != nullptr;
    if (StragglerFinding* f = extendEpisode(&report_.stragglers, s, s.straggler, r.round, names)) {
      f->maxScore = std::max(f->maxScore, s.score);
      if (s.window.topLayer >= 0) {
        f->layer = static_cast<size_t>(s.window.topLayer) < names.size()
                       ? names[s.window.topLayer]
                       : "layer " + std::to_string(s.window.topLayer);
        f->phase = s.window.topPhase;
        f->kind = s.window.topKind;
        f->share = s.window.topShare;
      }
    } else if (wasStraggler) {
      ATTNSCOPE_LOG(kInfo, "rank " << s.rank << " is no longer a straggler");
    }
    // Hangs and missing ranks, the same way.
    extendEpisode(&report_.hangs, s, s.hung || s.missing, r.round, names);
  }
}

// ---- Trace store ------------------------------------------------------------------------------
namespace {

std::string configJson(const Config& c) {
  std::ostringstream out;
  out << "{\"sample_every\": " << c.sampleEvery << ", \"interval_s\": " << c.intervalSeconds
      << ", \"memory\": " << (c.memory ? "true" : "false")
      << ", \"fused_ops\": " << (c.fusedOps ? "true" : "false") << ", \"aggregation\": \""
      << aggregationName(c.aggregation) << "\", \"straggler_threshold\": " << c.stragglerThreshold
      << ", \"straggler_windows\": " << c.stragglerWindows << ", \"hang_s\": " << c.hangSeconds
      << ", \"trace_max_mb\": " << c.traceMaxMb << "}";
  return out.str();
}

std::string number(double v) {
  std::ostringstream out;
  out.precision(17);
  out << v;
  return out.str();
}

}  // namespace

TraceStoreStats Reporter::traceStats() {
  std::lock_guard<std::mutex> lock(traceMutex_);
  return traceStats_;
}

void Reporter::openTrace() {
  if (config_.traceDir.empty()) return;
  std::string error;
  trace_ = TraceStore::open(config_.traceDir, topology_.rank, config_.traceMaxMb << 20, &error);
  {
    std::lock_guard<std::mutex> lock(traceMutex_);
    traceStats_.enabled = true;
    traceStats_.open = trace_ != nullptr;
    if (!trace_) {
      ++traceStats_.errors;
      traceStats_.lastError = error;
      ATTNSCOPE_LOG(kError, "trace store unavailable, training goes on without it: " << error);
      return;
    }
  }
  writeTrace(
      /*last=*/false);  // the metadata at once: a rank killed early still leaves a valid file
}

void Reporter::writeTrace(bool last) {
  if (!trace_) return;
  try {
    TraceInterval in;
    uint64_t dropped = 0;
    in.steps = session_.takeTraceSteps(&dropped);
    in.layerNames = session_.layerNames();
    const double now = unixNow();
    const RunInfo run = session_.runInfo();
    if (traceHaveWindow_) {
      in.haveWindow = true;
      in.window = traceWindow_;
      in.windowEndUnix = now;
      in.windowStartUnix = now - traceWindow_.windowSeconds;
      in.roofline = std::move(traceRoofline_);
      traceRoofline_.clear();
      traceHaveWindow_ = false;
    }
    if (traceRoundsWritten_ == 0) {
      in.meta = {{"format", "attnscope.trace/1"},
                 {"rank", std::to_string(run.rank)},
                 {"world_size", std::to_string(run.worldSize)},
                 {"local_rank", std::to_string(run.localRank)},
                 {"node", run.node},
                 {"attnscope_version", run.attnscopeVersion},
                 {"torch_version", run.torchVersion},
                 {"interval_s", number(config_.intervalSeconds)},
                 {"start_unix", number(run.startUnixSeconds)},
                 {"config", configJson(config_)}};
      const Ceilings& c = run.ceilings;
      const MachineInfo& m = run.machine;
      in.meta.insert(in.meta.end(), {{"roofline", config_.roofline ? "1" : "0"},
                                     {"peak_flops_per_second", number(c.peakFlopsPerSecond)},
                                     {"peak_bytes_per_second", number(c.peakBytesPerSecond)},
                                     {"ceiling_source", c.source},
                                     {"ceiling_detail", c.detail},
                                     {"timing", "host"},
                                     {"cpu_model", m.cpuModel},
                                     {"cpu_cores", std::to_string(m.cpuCores)},
                                     {"torch_threads", std::to_string(m.threads)},
                                     {"blas", m.blas}});
      if (!m.gpuName.empty()) {
        in.meta.insert(in.meta.end(), {{"gpu_name", m.gpuName},
                                       {"gpu_driver", m.gpuDriver},
                                       {"gpu_memory_bytes", std::to_string(m.gpuMemoryBytes)}});
      }
    }
    // The live sample rate (rank 0's /control may change it); "config" keeps the one at start.
    in.meta.emplace_back("sample_every", std::to_string(run.sampleEvery));
    in.meta.emplace_back("last_commit_unix", number(now));
    in.meta.emplace_back("steps_seen", std::to_string(run.stepsSeen));
    if (last)
      in.meta.emplace_back("stop_unix",
                           number(run.stopUnixSeconds > 0 ? run.stopUnixSeconds : now));
    if (detector_) {
      std::lock_guard<std::mutex> lock(reportMutex_);
      if (report_.rounds > 0) {
        in.haveRound = true;
        in.round = report_.last;
        in.roundUnix = now;
      }
      in.stragglers = report_.stragglers;
      in.hangs = report_.hangs;
    }
    std::string error;
    const auto began = std::chrono::steady_clock::now();
    const bool ok = trace_->commit(in, &error);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    ++traceRoundsWritten_;
    std::lock_guard<std::mutex> lock(traceMutex_);
    traceStats_.stepsDropped += dropped;
    traceStats_.lastCommitSeconds = seconds;
    traceStats_.maxCommitSeconds = std::max(traceStats_.maxCommitSeconds, seconds);
    traceStats_.fileBytes = trace_->fileBytes();
    traceStats_.stepsTrimmed = trace_->stepsTrimmed();
    if (ok) {
      ++traceStats_.commits;
      traceStats_.stepsWritten += in.steps.size();
    } else {
      if (traceStats_.errors++ == 0) {
        ATTNSCOPE_LOG(kError, "trace store write failed, training goes on ("
                                  << error << "); later failures are counted, not logged");
      }
      traceStats_.lastError = error;
    }
    if (last) {
      ATTNSCOPE_LOG(kDebug, "trace: " << traceStats_.stepsWritten << " steps in " << trace_->path()
                                      << " (" << traceStats_.fileBytes << " bytes, "
                                      << traceStats_.commits << " commits, longest "
                                      << traceStats_.maxCommitSeconds * 1e3 << " ms, "
                                      << traceStats_.errors << " errors, "
                                      << traceStats_.stepsDropped << " dropped)");
      trace_.reset();  // closes the file: the write-ahead log is folded into it
    }
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(traceMutex_);
    ++traceStats_.errors;
    traceStats_.lastError = e.what();
  }
}

}  // namespace detail
}  // namespace attnscope
