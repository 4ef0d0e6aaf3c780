// Prometheus export of the reporter (built with prometheus-cpp; ReporterNoExport.cpp otherwise):
// the rank's /metrics endpoint, rank 0's job summary, the push gateway, the file_sd file and the
// /control requests that ride on the rounds.
#include <algorithm>
#include <cstring>

#include "attnscope/core/Log.h"
#include "attnscope/reporter/Reporter.h"

namespace attnscope {
namespace detail {

void Reporter::startExport(const RoundSnapshot& snapshot) {
  identity_.job =
      !config_.job.empty() ? config_.job : defaultJobName(topology_, processArguments());
  identity_.rank = topology_.rank;
  identity_.localRank = topology_.localRank;
  identity_.worldSize = topology_.worldSize;
  identity_.node = topology_.node;
  identity_.version = snapshot.run.attnscopeVersion;
  identity_.torchVersion = snapshot.run.torchVersion;
  identity_.aggregation = aggregationName(config_.aggregation);
  if (config_.port > 0) {
    MetricsServerOptions options;
    options.bind = config_.bind;
    options.port = static_cast<int>(config_.port) + topology_.localRank;
    if (options.port > 65535) options.port = 0;  // beyond the range: the fallback picks one
    options.credentials = config_.metricsCredentials();
    options.controlToken = config_.controlToken;
    options.jobControl = topology_.rank == 0;
    options.layerDetail = config_.metricsLayers;
    options.sampleEvery = config_.sampleEvery;
    metrics_ = std::make_unique<MetricsServer>(options);
    snapshot_ = metrics_->snapshot();
    if (metrics_->serving()) {
      ATTNSCOPE_LOG(kDebug,
                    "metrics on http://" << config_.bind << ":" << metrics_->port() << "/metrics");
    }
  } else {
    snapshot_ = std::make_shared<MetricsSnapshot>();
  }
  if (!config_.pushgateway.empty()) {
    pusher_ = std::make_unique<Pusher>(config_.pushgateway, identity_.job,
                                       topology_.node + "-rank" + std::to_string(topology_.rank),
                                       config_.metricsCredentials(), snapshot_);
  }
  publishMetrics(snapshot);
}

void Reporter::publishMetrics(const RoundSnapshot& snapshot) {
  RankMetrics m;
  m.run = snapshot.run;
  m.forwardSecondsPerStep = lastMine_.forwardSeconds;
  m.backwardSecondsPerStep = lastMine_.backwardSeconds;
  m.stepSeconds = lastMine_.stepSeconds;
  m.overheadSeconds = m.run.overheadSeconds;
  m.paused = snapshot.paused;
  m.sampleEvery = snapshot.run.sampleEvery;
  m.windowCalls = windowCalls_;
  MetricsOptions options;
  options.layerDetail = metrics_ ? metrics_->control().layerDetail : config_.metricsLayers;
  options.ranksDescribed = config_.metricsRanks;
  if (metrics_) {
    m.port = metrics_->port();
    m.portFallback = metrics_->fallback();
    m.exporterErrors = metrics_->errors();
  }
  if (pusher_) {
    m.pushing = true;
    m.pushes = pusher_->pushes();
    m.pushErrors = pusher_->errors();
    m.exporterErrors += m.pushErrors;
  }
  const ClusterReport cluster = report();
  m.rounds = cluster.collectiveRounds;
  m.roundErrors = cluster.roundErrors;
  m.degraded = cluster.degraded;
  m.lastRoundSeconds = cluster.lastRoundSeconds;
  m.lastRoundBytes = cluster.lastRoundBytes;
  m.traceErrors = traceStats().errors;
  m.gpu = snapshot.gpu;
  if (m.gpu.source != GpuTiming::kOff) m.deviceStats = snapshot.deviceStats;
  identity_.aggregation = cluster.aggregation;
  snapshot_->publish(
      buildMetrics(identity_, m, cumulative_, options, detector_ ? &cluster : nullptr));
  if (pusher_) pusher_->request();
}

// After the last round: the final figures go out once more, then the port is released.
void Reporter::finishExport() {
  publishMetrics(source_.snapshot(SnapshotRequest{}));
  if (pusher_) pusher_->finish(config_.roundTimeoutSeconds);
  metrics_.reset();
}

bool Reporter::exchangeEndpoints(std::string* error) {
  constexpr size_t kHostDoubles = 8;  // 64 bytes of host name
  std::vector<double> mine(1 + kHostDoubles, 0.0);
  const std::string host = config_.bind == "0.0.0.0" ? topology_.node : config_.bind;
  mine[0] = metricsPort();
  std::memcpy(mine.data() + 1, host.data(),
              std::min(host.size(), kHostDoubles * sizeof(double) - 1));
  std::vector<double> all;
  if (!aggregator_->allGather(mine, &all, error)) return false;
  endpointsExchanged_ = true;
  if (topology_.rank != 0) return true;
  std::vector<ScrapeTarget> targets;
  for (int r = 0; r < topology_.worldSize; ++r) {
    const double* v = all.data() + r * mine.size();
    char name[kHostDoubles * sizeof(double) + 1] = {};
    std::memcpy(name, v + 1, kHostDoubles * sizeof(double));
    ScrapeTarget t;
    t.rank = r;
    t.localRank = topology_.localWorldSize > 0 ? r % topology_.localWorldSize : 0;
    t.host = name;
    t.node = name;
    t.port = static_cast<int>(v[0]);
    if (t.port > 0) targets.push_back(t);
  }
  writeTargets(targets);
  return true;
}

void Reporter::writeTargets(const std::vector<ScrapeTarget>& targets) {
  if (config_.fileSd.empty() || targets.empty()) return;  // no rank serves metrics
  std::string error;
  if (writeFileSd(config_.fileSd, targets, identity_.job, &error)) {
    ATTNSCOPE_LOG(kInfo, "Prometheus targets of " << targets.size() << " ranks written to "
                                                  << config_.fileSd);
  } else {
    ATTNSCOPE_LOG(kError, "file_sd not written: " << error);
  }
}

void Reporter::requestedControl(RankWindow* mine) {
  const ControlState control =
      metrics_ && topology_.rank == 0 ? metrics_->control() : ControlState{};
  mine->controlGeneration = control.generation;
  mine->controlPaused = control.paused;
  mine->controlSampleEvery = control.sampleEvery;
}

void Reporter::writeOwnTarget() {
  endpointsExchanged_ = true;
  if (metricsPort() <= 0) return;
  writeTargets(
      {ScrapeTarget{0, topology_.localRank, topology_.node,
                    config_.bind == "0.0.0.0" ? topology_.node : config_.bind, metricsPort()}});
}

int Reporter::metricsPort() const { return metrics_ ? metrics_->port() : 0; }

}  // namespace detail
}  // namespace attnscope
