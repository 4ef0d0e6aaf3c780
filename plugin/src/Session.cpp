#include "Session.h"

#include <torch/version.h>

#include "AutogradProbe.h"
#include "Observer.h"
#include "attnscope/attnscope.h"
#include "attnscope/collectors/Clock.h"
#include "attnscope/collectors/CpuAllocatorTracker.h"
#include "attnscope/core/Log.h"
#include "attnscope/core/UnixTime.h"
#include "attnscope/exporters/SummaryJson.h"
#include "attnscope/exporters/SummaryTable.h"

namespace attnscope {
namespace detail {
namespace {

std::atomic<Session*> gSession{nullptr};

RunInfo startInfo(const Config& config, const Topology& topology) {
  RunInfo run;
  run.rank = topology.rank;
  run.worldSize = topology.worldSize;
  run.localRank = topology.localRank;
  run.node = topology.node;
  run.attnscopeVersion = version();
  run.torchVersion = std::to_string(TORCH_VERSION_MAJOR) + "." +
                     std::to_string(TORCH_VERSION_MINOR) + "." +
                     std::to_string(TORCH_VERSION_PATCH);
  run.roofline = config.roofline;
  run.startUnixSeconds = unixNow();
  return run;
}

}  // namespace

Session* currentSession() { return gSession.load(std::memory_order_acquire); }
void setCurrentSession(Session* session) {
  setCurrentRecorder(session != nullptr ? &session->recorder() : nullptr);
  gSession.store(session, std::memory_order_release);
}

Session::Session(const Config& config, const Topology& topology)
    : topology_(topology),
      steps_(config, *this),
      recorder_(config, startInfo(config, topology), config.memory && acceleratorAvailable(),
                steps_),
      gpu_(recorder_.config(), recorder_) {}

void Session::setReporter(std::unique_ptr<Reporter> reporter) { reporter_ = std::move(reporter); }

void Session::begin() {
  TickClock::calibrate();
  Observer::beginSession();
  if (config().memory) CpuAllocatorTracker::install();
  gpu_.start();
  recorder_.setGpu(gpu_.active());
  steps_.begin();
}

void Session::stepEnded(const EndedStep& step) {
  gpu_.stepEnded();
  recorder_.endStep(step);
}

void Session::setGlobalCallbacks(bool global, bool fused) {
  Observer::setGlobalCallbacks(global, fused);
}

bool Session::insideBackwardPass() const { return detail::insideBackwardPass(); }

static void setGpuTiming(const GpuStatus& gpu, RunInfo* run) {
  run->gpuTiming = gpuTimingName(gpu.source);
  run->gpuTimingRequested = gpuTimingName(gpu.requested);
  run->gpuTimingFallback = gpu.fallbackReason;
}

RunInfo Session::runInfo() {
  RunInfo run = recorder_.runInfo();
  setGpuTiming(gpu_.status({}), &run);
  return run;
}

RoundSnapshot Session::snapshot(const SnapshotRequest& request) {
  RoundSnapshot s = recorder_.snapshot(request);
  s.gpu = gpu_.status(s.layerNames);
  if (s.gpu.source != GpuTiming::kOff) s.deviceStats = gpu_.deviceStatistics();
  return s;
}

bool Session::clusterReport(ClusterReport* out) {
  if (topology_.rank != 0) return false;
  if (reporter_) {
    *out = reporter_->report();
    return true;
  }
  if (cluster_) {
    *out = *cluster_;
    return true;
  }
  return false;
}

void Session::finish() {
  steps_.finish();
  CpuAllocatorTracker::setEnabled(false);
  const GpuStatus gpu = gpu_.status({});  // the source in use, before stop() turns it off
  gpu_.stop();
  recorder_.finish();
  // The last round (bounded by the round timeout) sees everything up to here.
  if (reporter_ && !reporter_->stop()) {
    cluster_ = std::make_unique<ClusterReport>(reporter_->report());
    reporter_.release();  // its threads still use it: left allocated, like retired sessions
  }
  RunInfo run = recorder_.runInfo();
  setGpuTiming(gpu, &run);
  const StatsTable stats = recorder_.statistics();
  ClusterReport cluster;
  const bool haveCluster = clusterReport(&cluster);
  if (!config().summaryJson.empty()) {
    const std::string path = config().summaryPathForRank(run.rank);
    std::string error;
    if (SummaryJson::write(path, run, stats, haveCluster ? &cluster : nullptr, &error)) {
      ATTNSCOPE_LOG(kDebug, "summary written to " << path);
    } else {
      ATTNSCOPE_LOG(kError, "summary not written: " << error);
    }
  }
  if (Log::enabled(LogLevel::kInfo) && !stats.layers().empty()) {
    Log::write(LogLevel::kInfo, SummaryTable::render(run, stats));
  }
}

}  // namespace detail
}  // namespace attnscope
