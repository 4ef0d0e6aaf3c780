#include "Session.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include <torch/version.h>

#include "CudaTorch.h"
#include "GpuTesting.h"
#include "InternalThread.h"
#include "Observer.h"
#include "attnscope/attnscope.h"
#include "attnscope/collectors/Clock.h"
#include "attnscope/collectors/CpuAllocatorTracker.h"
#include "attnscope/collectors/DeviceMemoryReporter.h"
#include "attnscope/core/Log.h"
#include "attnscope/exporters/SummaryJson.h"
#include "attnscope/exporters/SummaryTable.h"

namespace attnscope {
namespace detail {
namespace {

std::atomic<Session*> gSession{nullptr};

double unixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

Session* currentSession() { return gSession.load(std::memory_order_acquire); }
void setCurrentSession(Session* session) { gSession.store(session, std::memory_order_release); }

Session::Session(const Config& config, const Topology& topology)
    : tracing_(!config.traceDir.empty()),
      config_(config),
      topology_(topology),
      deviceMemory_(config.memory && acceleratorAvailable()),
      stats_(config.maxLayers),
      window_(config.maxLayers),
      deviceStats_(config.maxLayers) {
  run_.rank = topology.rank;
  run_.worldSize = topology.worldSize;
  run_.localRank = topology.localRank;
  run_.node = topology.node;
  run_.attnscopeVersion = version();
  run_.torchVersion = std::to_string(TORCH_VERSION_MAJOR) + "." +
                      std::to_string(TORCH_VERSION_MINOR) + "." +
                      std::to_string(TORCH_VERSION_PATCH);
  run_.roofline = config.roofline;
  run_.startUnixSeconds = unixNow();
  windowStartNs_ = nowNs();
  sampleEvery_.store(config.sampleEvery);
  traceLastStepNs_ = windowStartNs_;
  if (tracing_) traceCalls_.reserve(64);
}

void Session::setMachine(const Ceilings& ceilings, const MachineInfo& machine) {
  std::lock_guard<std::mutex> lock(statsMutex_);
  run_.ceilings = ceilings;
  run_.machine = machine;
}

void Session::setSampling(bool paused, int64_t sampleEvery) {
  if (paused != paused_.load() || sampleEvery != sampleEvery_.load()) {
    ATTNSCOPE_LOG(kInfo, "control: " << (paused ? "recording paused" : "recording")
                                     << ", sample every " << sampleEvery << " from the next step");
  }
  sampleEvery_.store(sampleEvery);
  paused_.store(paused);
}

double Session::overheadSeconds() const {
  return static_cast<double>(TickClock::toNs(overheadTicks_.load(std::memory_order_relaxed))) *
         1e-9;
}

Session::~Session() {
  // Sessions are retired, not destroyed, once started; this covers a start() that failed after
  // begin(): a joinable thread must not be destroyed.
  if (gpuThread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(gpuWakeMutex_);
      gpuStopping_ = true;
    }
    gpuWake_.notify_all();
    gpuThread_.join();
  }
}

void Session::setReporter(std::unique_ptr<Reporter> reporter) { reporter_ = std::move(reporter); }

Window Session::takeWindowLocked() {
  Window w;
  w.stats = std::move(window_);
  window_ = StatsTable(config_.maxLayers);
  for (const LayerStats& l : stats_.layers()) window_.layerId(l.name);  // keep the ids aligned
  const int64_t now = nowNs();
  w.steps = windowSteps_;
  w.sampledSteps = windowSampledSteps_;
  w.lastStep = run_.stepsSeen;
  w.seconds = static_cast<double>(now - windowStartNs_) * 1e-9;
  w.collectiveSeconds = static_cast<double>(collectiveNs_.exchange(0)) * 1e-9;
  windowSteps_ = windowSampledSteps_ = 0;
  windowStartNs_ = now;
  return w;
}

RoundSnapshot Session::snapshot(const SnapshotRequest& request) {
  RoundSnapshot s;
  GpuStatus device = gpu_ ? gpu_->status() : GpuStatus();  // the timer has a lock of its own
  std::lock_guard<std::mutex> lock(statsMutex_);  // one lock: the parts agree with each other
  if (request.endWindow) s.window = takeWindowLocked();
  if (request.takeTraceSteps) s.traceSteps = takeTraceStepsLocked(&s.traceDropped);
  s.run = runInfoLocked();
  s.layerNames = stats_.layerNames();
  s.paused = paused();
  s.gpu = gpuStatusLocked(std::move(device));
  if (s.gpu.source != GpuTiming::kOff) s.deviceStats = deviceStats_;
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

void Session::begin() {
  TickClock::calibrate();
  if (config_.memory) CpuAllocatorTracker::install();
  startGpu();
  std::lock_guard<std::mutex> lock(callbackMutex_);
  updateGlobalCallbacks(true);
}

void Session::updateGlobalCallbacks(bool sampledStep) {
  // Until step() is called, step boundaries are inferred from backward passes, which needs the
  // global callback (backward nodes, collectives) on every step; its collective half checks for a
  // sampled step itself.
  const bool wantGlobal = sampledStep || !explicitSteps_.load();
  if (wantGlobal && globalHandle_ == 0) {
    globalHandle_ = at::addGlobalCallback(Observer::globalCallback());
  } else if (!wantGlobal && globalHandle_ != 0) {
    at::removeCallback(globalHandle_);
    globalHandle_ = 0;
  }
  const bool wantFused = config_.fusedOps && sampledStep;
  if (wantFused && fusedHandle_ == 0) {
    fusedHandle_ = at::addGlobalCallback(Observer::fusedOpCallback());
  } else if (!wantFused && fusedHandle_ != 0) {
    at::removeCallback(fusedHandle_);
    fusedHandle_ = 0;
  }
}

void Session::step(bool explicitCall) {
  const uint64_t t0 = ticks();
  if (explicitCall) explicitSteps_.store(true);
  backwardSeen_.store(false);
  if (gpuActive_) {
    gpu_->closeBackward();  // the step's backward spans are complete on the host
    if (gpu_->usesCupti() && kinetoProfilerRunning()) gpu_->profilerStarted();
  }
  {
    std::lock_guard<std::mutex> lock(statsMutex_);
    fold();
    if (tracing_) traceStepEnd(run_.stepsSeen);  // an unsampled step only moves the clock
    ++run_.stepsSeen;
    ++windowSteps_;
    if (run_.stepsSeen == static_cast<uint64_t>(kNothingFoundSteps))
      checkFoundLocked(run_.stepsSeen);
    if (sampled_.load()) {
      ++run_.stepsSampled;
      ++windowSampledSteps_;
    }
  }
  {
    std::lock_guard<std::mutex> lock(linkMutex_);
    links_.clear();
  }
  const uint64_t next = stepIndex_.fetch_add(1) + 1;
  const bool nextSampled =
      !paused_.load(std::memory_order_relaxed) &&
      next % static_cast<uint64_t>(sampleEvery_.load(std::memory_order_relaxed)) == 0;
  sampled_.store(nextSampled);
  {
    std::lock_guard<std::mutex> lock(callbackMutex_);
    updateGlobalCallbacks(nextSampled);
  }
  addOverheadTicks(ticks() - t0);
}

int32_t Session::layerId(const char* name) {
  std::lock_guard<std::mutex> lock(statsMutex_);
  const int32_t id = stats_.layerId(name);
  if (id >= 0) window_.layerId(name);
  if (id < 0) {
    if (run_.droppedCalls++ == 0) {
      ATTNSCOPE_LOG(kWarn, "more than " << config_.maxLayers
                                        << " attention layer names (ATTNSCOPE_MAX_LAYERS); \""
                                        << name
                                        << "\" and later new names are counted, not recorded");
    }
  }
  return id;
}

void Session::addForwardCall(const CallRecord& record, uint64_t forwardThreadId,
                             const LinkTable::Entry* links, size_t numLinks,
                             const BackwardEstimate* backward, uint64_t instance) {
  if (numLinks > 0) {
    std::lock_guard<std::mutex> lock(linkMutex_);
    links_.append(forwardThreadId, links, numLinks);
  }
  std::lock_guard<std::mutex> lock(statsMutex_);
  stats_.add(record);
  window_.add(record);
  if (tracing_) traceCall(record);
  if (backward != nullptr && numLinks > 0) {
    bool any = false;
    for (int k = 0; k < kNumOpKinds && !any; ++k) any = backward[k].ops > 0;
    if (any) {
      PendingBackward& p = pendingBackward_[instance];
      p.record.layer = record.layer;
      p.record.phase = Phase::kBackward;
      std::copy(backward, backward + kNumOpKinds, p.estimate.begin());
      p.estimated = true;
    }
  }
}

bool Session::findLink(uint64_t forwardThreadId, int64_t sequenceNr, Link* out) {
  std::lock_guard<std::mutex> lock(linkMutex_);
  return links_.find(forwardThreadId, sequenceNr, out);
}

void Session::addBackwardNode(const Link& link, int64_t ns, const MemoryAccount& account,
                              AttentionBackend backend) {
  std::lock_guard<std::mutex> lock(statsMutex_);
  CallRecord& r = pendingBackward_[link.instance].record;
  if (backend != AttentionBackend::kCount) r.backends[static_cast<int>(backend)] += 1;
  r.layer = link.layer;
  r.phase = Phase::kBackward;
  r.ns += ns;
  r.bytes += account.bytes;
  const int64_t peak = account.peakAbove(account.base);
  r.peak = std::max(r.peak, peak);
  CallRecord::Kind& k = r.kinds[static_cast<int>(link.kind)];
  k.ns += ns;
  k.ops += 1;
  k.bytes += account.bytes;
  k.peak = std::max(k.peak, peak);
  if (link.modelled) k.modelledNs += ns;
}

void Session::fold() {
  for (auto& [instance, pending] : pendingBackward_) {
    CallRecord& record = pending.record;
    bool timed = false;
    for (int k = 0; k < kNumOpKinds; ++k) {
      CallRecord::Kind& kind = record.kinds[k];
      if (kind.ops == 0) continue;  // no node of this kind ran: its estimate does not count
      timed = true;
      const BackwardEstimate& e = pending.estimate[k];
      if (!pending.estimated || e.modelledOps == 0 || kind.modelledNs == 0) {
        kind.modelledNs = 0;  // no formula's work to divide by this time
        continue;
      }
      kind.flops = e.flops;
      kind.moved = e.moved;
      kind.wideFlops = e.wideFlops;
    }
    if (!timed) continue;  // forward without backward (evaluation): no backward call
    stats_.add(record);
    window_.add(record);
    if (tracing_) traceCall(record);
  }
  pendingBackward_.clear();
}

std::vector<std::string> Session::layerNames() {
  std::lock_guard<std::mutex> lock(statsMutex_);
  return stats_.layerNames();
}

void Session::describeLayer(const LayerOrigin& origin) {
  std::lock_guard<std::mutex> lock(statsMutex_);
  for (LayerOrigin& o : run_.layerOrigins) {
    if (o.name == origin.name) {
      o = origin;
      return;
    }
  }
  if (run_.layerOrigins.size() < static_cast<size_t>(config_.maxLayers))
    run_.layerOrigins.push_back(origin);
}

void Session::noteDiscovery(const std::string& note) {
  std::lock_guard<std::mutex> lock(statsMutex_);
  for (const std::string& n : run_.discoveryNotes) {
    if (n == note) return;
  }
  if (run_.discoveryNotes.size() < 64) {
    run_.discoveryNotes.push_back(note);
    ATTNSCOPE_LOG(kInfo, note);
  }
}

void Session::checkFound(uint64_t steps) {
  std::lock_guard<std::mutex> lock(statsMutex_);
  checkFoundLocked(steps);
}

void Session::checkFoundLocked(uint64_t steps) {
  if (run_.nothingFound || steps < static_cast<uint64_t>(kNothingFoundSteps)) return;
  if (!stats_.layers().empty() || stats_.droppedCalls() > 0) return;
  run_.nothingFound = true;
  ATTNSCOPE_LOG(
      kWarn,
      "no attention layer seen in "
          << steps
          << " training steps: nothing is observed. "
             "Mark attention by hand: in Python `with attnscope.attention(\"layers.0.attn\"):` "
             "around "
             "a layer's call, or under attnscope-run ATTNSCOPE_ATTENTION_MODULES=<regex> naming "
             "the "
             "modules' class or path; in C++ `attnscope::AttentionScope scope(\"layers.0.attn\");` "
             "or `attnscope::ModuleScope scope(*this);` in the module's forward "
             "(docs/DISCOVERY.md)");
}

StatsTable Session::statistics() {
  std::lock_guard<std::mutex> lock(statsMutex_);
  return stats_;
}

RunInfo Session::runInfo() {
  std::lock_guard<std::mutex> lock(statsMutex_);
  return runInfoLocked();
}

RunInfo Session::runInfoLocked() {
  RunInfo run = run_;
  run.sampleEvery = sampleEvery_.load(std::memory_order_relaxed);  // the live rate's one owner
  run.explicitSteps = explicitSteps_.load();
  run.memoryReports = CpuAllocatorTracker::allocationsSeen() + DeviceMemoryReporter::reportsSeen();
  run.droppedCalls += stats_.droppedCalls();
  run.overheadSeconds = overheadSeconds();
  run.shapeReads = shapeReads_.load(std::memory_order_relaxed);
  run.shapeChanges = shapeChanges_.load(std::memory_order_relaxed);
  run.layersSeen = stats_.layers().size();
  return run;
}

void Session::finish() {
  {
    std::lock_guard<std::mutex> lock(callbackMutex_);
    if (globalHandle_ != 0) at::removeCallback(globalHandle_);
    if (fusedHandle_ != 0) at::removeCallback(fusedHandle_);
    globalHandle_ = fusedHandle_ = 0;
  }
  CpuAllocatorTracker::setEnabled(false);
  stopGpu();
  {
    std::lock_guard<std::mutex> lock(statsMutex_);
    fold();  // backward records of a step that step() did not end
    if (tracing_ && !traceCalls_.empty()) traceStepEnd(run_.stepsSeen);
    // A run that ends having seen no attention call says so, however few steps it ran.
    checkFoundLocked(std::max<uint64_t>(run_.stepsSeen, kNothingFoundSteps));
    run_.stopUnixSeconds = unixNow();
  }
  // The last round (bounded by the round timeout) sees everything up to here.
  if (reporter_ && !reporter_->stop()) {
    cluster_ = std::make_unique<ClusterReport>(reporter_->report());
    reporter_.release();  // its threads still use it: left allocated, like retired sessions
  }
  const RunInfo run = runInfo();
  const StatsTable stats = statistics();
  ClusterReport cluster;
  const bool haveCluster = clusterReport(&cluster);
  if (!config_.summaryJson.empty()) {
    const std::string path = config_.summaryPathForRank(run.rank);
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

// ---- Trace store feed ----------------------------------------------------------------------
// Runs on sampled steps only, under statsMutex_: per call a slot lookup and an add into a
// reused entry; per step one encode (about 50 bytes per layer and phase) into a buffer the
// reporter drains every interval. Bounded: beyond kMaxTraceBufferBytes steps are counted, not kept.
namespace {
constexpr size_t kMaxTraceBufferBytes = 16u << 20;
}  // namespace

void Session::traceCall(const CallRecord& record) {
  if (record.layer < 0) return;
  const size_t slot =
      static_cast<size_t>(record.layer) * kNumPhases + static_cast<size_t>(record.phase);
  if (slot >= traceSlots_.size()) traceSlots_.resize(slot + 1, -1);  // once per new layer
  int32_t& index = traceSlots_[slot];
  if (index < 0) {
    index = static_cast<int32_t>(traceCalls_.size());
    traceCalls_.emplace_back();
    traceCalls_.back().layer = record.layer;
    traceCalls_.back().phase = record.phase;
  }
  traceCalls_[index].add(record);
}

void Session::traceStepEnd(uint64_t step) {
  const int64_t now = nowNs();
  if (!traceCalls_.empty()) {
    if (traceBufferedBytes_ > kMaxTraceBufferBytes) {
      ++traceDropped_;
    } else {
      EncodedStep s;
      s.step = step;
      s.endUnix = unixNow();
      s.stepNs = now - traceLastStepNs_;
      s.data.reserve(2 + traceCalls_.size() * 32);
      traceformat::encodeCalls(traceCalls_, &s.data);
      traceBufferedBytes_ += s.data.size() + sizeof(EncodedStep);
      traceSteps_.push_back(std::move(s));
    }
    for (const TraceCall& c : traceCalls_) {
      traceSlots_[static_cast<size_t>(c.layer) * kNumPhases + static_cast<size_t>(c.phase)] = -1;
    }
    traceCalls_.clear();
  }
  traceLastStepNs_ = now;
}

std::vector<EncodedStep> Session::takeTraceStepsLocked(uint64_t* dropped) {
  std::vector<EncodedStep> steps;
  steps.swap(traceSteps_);
  traceBufferedBytes_ = 0;
  *dropped = traceDropped_;
  traceDropped_ = 0;
  return steps;
}

// --- GPU (docs/GPU.md) ------------------------------------------------------------------------

namespace {
GpuStream noStream() { return GpuStream{}; }

std::mutex gTestingMutex;
std::function<GpuLayers()>& testingLayers() {
  static std::function<GpuLayers()> factory;
  return factory;
}
}  // namespace

void setGpuLayersForTesting(std::function<GpuLayers()> factory) {
  std::lock_guard<std::mutex> lock(gTestingMutex);
  testingLayers() = std::move(factory);
}

void Session::startGpu() {
  if (config_.gpuTiming == GpuTiming::kOff) return;
  {
    std::lock_guard<std::mutex> lock(gTestingMutex);
    if (testingLayers()) {
      GpuLayers layers = testingLayers()();
      gpu_ = std::make_unique<GpuTimer>(std::move(layers.events), std::move(layers.activity),
                                        layers.stream, GpuTimer::Options());
    }
  }
  if (gpu_) {
    gpu_->start(config_.gpuTiming, kinetoProfilerRunning(), "");
    gpuActive_ = gpu_->source() != GpuTiming::kOff;
    if (gpuActive_) gpuThread_ = std::thread([this] { gpuLoop(); });
    return;
  }
  std::string unavailable;
  const CurrentStreamFn stream = torchCurrentStreamFn();
  if (stream == nullptr) {
    unavailable = "LibTorch was built without CUDA";
  } else if (!acceleratorAvailable()) {
    unavailable = "no CUDA device visible to LibTorch";
  }
  std::unique_ptr<GpuEventApi> events;
  std::unique_ptr<GpuActivityApi> activity;
  if (unavailable.empty()) {
    std::string eventsWhy, activityWhy;
    events = createCudaEventApi(&eventsWhy);
    if (config_.gpuTiming != GpuTiming::kEvents) activity = createCuptiActivityApi(&activityWhy);
    if (!events) ATTNSCOPE_LOG(kWarn, "CUDA events unavailable: " << eventsWhy);
    if (!activity && !activityWhy.empty())
      ATTNSCOPE_LOG(kInfo, "CUPTI unavailable: " << activityWhy);
  }
  gpu_ = std::make_unique<GpuTimer>(std::move(events), std::move(activity),
                                    stream != nullptr ? stream : &noStream, GpuTimer::Options());
  gpu_->start(config_.gpuTiming, unavailable.empty() && kinetoProfilerRunning(), unavailable);
  gpuActive_ = gpu_->source() != GpuTiming::kOff;
  if (gpuActive_) gpuThread_ = std::thread([this] { gpuLoop(); });
}

void Session::gpuLoop() {
  markInternalThread();
  while (true) {
    {
      std::unique_lock<std::mutex> lock(gpuWakeMutex_);
      if (gpuWake_.wait_for(lock, std::chrono::milliseconds(200),
                            [this] { return gpuStopping_; })) {
        return;
      }
    }
    try {
      addDeviceCalls(gpu_->collect(false));
      const int device = gpu_->lastDevice();
      GpuStatus memory;
      if (device >= 0 && torchAllocatorStats(device, &memory)) {
        std::lock_guard<std::mutex> lock(statsMutex_);
        allocator_ = memory;
      }
    } catch (const std::exception& e) {
      ATTNSCOPE_LOG(kError, "GPU collection failed, device timing stops: " << e.what());
      return;
    }
  }
}

void Session::stopGpu() {
  if (!gpuActive_) return;
  {
    std::lock_guard<std::mutex> lock(gpuWakeMutex_);
    gpuStopping_ = true;
  }
  gpuWake_.notify_all();
  if (gpuThread_.joinable()) gpuThread_.join();
  try {
    // What the device has finished by now; nothing is waited for.
    addDeviceCalls(gpu_->collect(/*final=*/true));
  } catch (const std::exception& e) {
    ATTNSCOPE_LOG(kError, "GPU collection at stop failed: " << e.what());
  }
  gpu_->stop();
}

void Session::addDeviceCalls(const std::vector<CallRecord>& calls) {
  if (calls.empty()) return;
  std::lock_guard<std::mutex> lock(statsMutex_);
  const std::vector<LayerStats>& layers = stats_.layers();
  for (size_t i = deviceStats_.layers().size(); i < layers.size(); ++i)
    deviceStats_.layerId(layers[i].name);
  for (const CallRecord& c : calls) deviceStats_.add(c);
}

StatsTable Session::deviceStatistics() {
  std::lock_guard<std::mutex> lock(statsMutex_);
  return deviceStats_;
}

GpuStatus Session::gpuStatus() {
  GpuStatus device = gpu_ ? gpu_->status() : GpuStatus();
  std::lock_guard<std::mutex> lock(statsMutex_);
  return gpuStatusLocked(std::move(device));
}

GpuStatus Session::gpuStatusLocked(GpuStatus s) {
  if (!gpu_) s.requested = config_.gpuTiming;
  s.device = allocator_.device;
  s.allocatedBytes = allocator_.allocatedBytes;
  s.reservedBytes = allocator_.reservedBytes;
  s.peakAllocatedBytes = allocator_.peakAllocatedBytes;
  s.peakReservedBytes = allocator_.peakReservedBytes;
  // The timer's list is indexed by layer id: name it, keep the layers that ran kernels.
  const std::vector<LayerStats>& layers = stats_.layers();
  std::vector<GpuStatus::LayerBackends> named;
  for (size_t id = 0; id < s.backends.size() && id < layers.size(); ++id) {
    uint64_t kernels = 0;
    for (const uint64_t k : s.backends[id].kernels) kernels += k;
    if (kernels == 0) continue;
    named.push_back(s.backends[id]);
    named.back().layer = layers[id].name;
  }
  s.backends = std::move(named);
  return s;
}

}  // namespace detail
}  // namespace attnscope
