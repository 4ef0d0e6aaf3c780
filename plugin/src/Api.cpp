// The public entry points of attnscope.h.
#include <memory>
#include <mutex>
#include <vector>

#include "AggregatorFactory.h"
#include "AutogradProbe.h"
#include "CompiledMarkers.h"
#include "Machine.h"
#include "NodeHooks.h"
#include "Observer.h"
#include "Session.h"
#include "TorchOps.h"
#include "attnscope/Distributed.h"
#include "attnscope/attnscope.h"
#include "attnscope/core/Log.h"
#include "attnscope/exporters/SummaryJson.h"

namespace attnscope {
namespace {

std::mutex gLifecycleMutex;
// Stopped sessions stay allocated: a callback on another thread may still hold the pointer.
std::vector<std::unique_ptr<detail::Session>>& retired() {
  static std::vector<std::unique_ptr<detail::Session>> sessions;
  return sessions;
}
std::unique_ptr<detail::Session>& active() {
  static std::unique_ptr<detail::Session> session;
  return session;
}

void stopLocked() {
  auto& session = active();
  if (!session) return;
  detail::setCurrentSession(nullptr);
  session->finish();
  retired().push_back(std::move(session));
}

}  // namespace

const char* version() { return ATTNSCOPE_VERSION; }

void start(const Config& config, const DistributedOptions& distributed) {
  config.validate();
  Topology topology = Topology::fromEnvironment();
  if (distributed.processGroup) {
    topology.rank = distributed.processGroup->getRank();
    topology.worldSize = distributed.processGroup->getSize();
  }
  if (distributed.worldSize > 0) topology.worldSize = distributed.worldSize;
  if (distributed.rank >= 0) topology.rank = distributed.rank;
  if (topology.rank >= topology.worldSize) {
    throw std::invalid_argument("rank " + std::to_string(topology.rank) +
                                " is outside the world of " + std::to_string(topology.worldSize) +
                                "; allowed: 0 to " + std::to_string(topology.worldSize - 1));
  }
  if (!detail::aggregationAvailable(config.aggregation)) {
    throw std::invalid_argument(detail::aggregationUnavailableMessage(config.aggregation));
  }
  std::lock_guard<std::mutex> lock(gLifecycleMutex);
  stopLocked();
  detail::Log::setLevel(config.logLevel);
  if (!config.enable) {
    ATTNSCOPE_LOG(kDebug, "disabled (ATTNSCOPE_ENABLE=0)");
    return;
  }
  detail::Log::setRank(topology.rank);
  auto session = std::make_unique<detail::Session>(config, topology);
  // Before any callback is installed: the calibration's own ops are not the job's.
  const bool deviceTiming = config.gpuTiming != GpuTiming::kOff && detail::acceleratorAvailable();
  const MachineInfo machine = detail::describeMachine(topology.localRank);
  session->recorder().setMachine(
      config.roofline ? detail::machineCeilings(config, deviceTiming, machine) : Ceilings{},
      machine);
  session->begin();
  detail::StoreSource source{distributed.store, distributed.aggregationGroup};
  if (!source.group) source.group = detail::takeHandedInGroup();
  session->setReporter(std::make_unique<detail::Reporter>(
      *session, config, topology, detail::aggregatorFactory(config, topology, std::move(source))));
  detail::setCurrentSession(session.get());
  active() = std::move(session);
}

void start(const Config& config) { start(config, DistributedOptions{}); }

void start() { start(Config::fromEnvironment()); }

bool clusterReport(ClusterReport* out) {
  detail::Session* s = detail::currentSession();
  return s != nullptr && s->clusterReport(out);
}

void stop() {
  std::lock_guard<std::mutex> lock(gLifecycleMutex);
  try {
    stopLocked();
  } catch (const std::exception& e) {
    ATTNSCOPE_LOG(kError, "stop failed: " << e.what());
  }
}

void step() {
  detail::Session* s = detail::currentSession();
  if (s != nullptr) s->steps().endStep(/*explicitCall=*/true);
}

bool isRunning() { return detail::currentSession() != nullptr; }

StatsTable statistics() {
  detail::Session* s = detail::currentSession();
  return s != nullptr ? s->recorder().statistics() : StatsTable();
}

RunInfo runInfo() {
  detail::Session* s = detail::currentSession();
  return s != nullptr ? s->recorder().runInfo() : RunInfo();
}

std::string summaryJson() {
  detail::Session* s = detail::currentSession();
  if (s == nullptr) return SummaryJson::render(RunInfo(), StatsTable());
  ClusterReport cluster;
  const bool haveCluster = s->clusterReport(&cluster);
  return SummaryJson::render(s->runInfo(), s->recorder().statistics(),
                             haveCluster ? &cluster : nullptr);
}

AttentionScope::AttentionScope(const char* layerName)
    : AttentionScope(layerName, ScopeType::kLayer) {}

namespace detail {
Recorder* scopeRecorder() {
  Session* s = currentSession();
  if (s == nullptr) return nullptr;
  return s->steps().openCall() ? &s->recorder() : nullptr;
}
}  // namespace detail

AttentionScope::AttentionScope(const char* layerName, ScopeType type) {
  if (detail::Recorder* r = detail::scopeRecorder())
    active_ = detail::Observer::enterScope(r, layerName, type);
}

AttentionScope::AttentionScope(std::string (*nameOf)(const void* arg), const void* arg,
                               ScopeType type) {
  if (detail::Recorder* r = detail::scopeRecorder()) {
    active_ = detail::Observer::enterScope(r, nameOf(arg).c_str(), type);
  }
}

AttentionScope::~AttentionScope() {
  if (active_) detail::Observer::exitScope();
}

void AttentionScope::close(const at::Tensor* outputs, size_t count) {
  if (active_) {
    active_ = false;
    detail::Observer::exitScope(outputs, count, /*outputsGiven=*/true);
    return;
  }
  // Unsampled: while steps are inferred from backward passes and backward runs on node hooks, no
  // callback sees a backward pass, so the step's first call with history hooks its result's node.
  detail::Session* s = detail::currentSession();
  uint64_t step = 0;
  if (s == nullptr || count == 0 || !s->steps().wantsBackwardMarker(&step)) return;
  for (size_t i = 0; i < count; ++i) {
    if (detail::hookBackwardSeen(&s->recorder(), outputs[i])) {
      s->steps().backwardMarkerPlaced(step);
      return;
    }
  }
}

OpKindScope::OpKindScope(OpKind kind) {
  detail::Recorder* r = detail::currentRecorder();
  if (r == nullptr || !r->steps().sampled()) return;
  active_ = detail::Observer::forceKind(kind, &saved_);
}

OpKindScope::~OpKindScope() {
  if (active_) detail::Observer::restoreKind(saved_);
}

FusedOpScope::FusedOpScope(const char* layerName) {
  detail::Session* s = detail::currentSession();
  if (s == nullptr || !s->steps().openCall()) return;
  detail::Observer::beginFusedHint(layerName);
  active_ = true;
}

FusedOpScope::~FusedOpScope() {
  if (active_) detail::Observer::endFusedHint();
}

void describeLayer(const std::string& layerName, const std::string& rule,
                   const std::string& source) {
  if (detail::Recorder* r = detail::currentRecorder())
    r->describeLayer(LayerOrigin{layerName, rule, source});
}

void noteDiscovery(const std::string& note) {
  if (detail::Recorder* r = detail::currentRecorder()) r->noteDiscovery(note);
}

void noteCompile(double seconds, uint64_t count) {
  if (detail::Recorder* r = detail::currentRecorder()) r->noteCompile(seconds, count);
}

void noteSteps(uint64_t steps) {
  if (detail::Recorder* r = detail::currentRecorder()) r->checkFound(steps);
}

// --- GPU (docs/GPU.md) ------------------------------------------------------------------------

StatsTable deviceStatistics() {
  detail::Session* s = detail::currentSession();
  return s != nullptr ? s->gpu().deviceStatistics() : StatsTable();
}

GpuStatus gpuStatus() {
  detail::Session* s = detail::currentSession();
  return s != nullptr ? s->gpu().status(s->recorder().layerNames()) : GpuStatus();
}

}  // namespace attnscope
