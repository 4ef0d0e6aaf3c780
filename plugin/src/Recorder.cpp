#include "Recorder.h"

#include <algorithm>

#include "attnscope/attnscope.h"
#include "attnscope/collectors/Clock.h"
#include "attnscope/collectors/CpuAllocatorTracker.h"
#include "attnscope/collectors/DeviceMemoryReporter.h"
#include "attnscope/core/Log.h"
#include "attnscope/core/UnixTime.h"

namespace attnscope {
namespace detail {
namespace {

std::atomic<Recorder*> gRecorder{nullptr};

}  // namespace

Recorder* currentRecorder() { return gRecorder.load(std::memory_order_acquire); }
void setCurrentRecorder(Recorder* recorder) {
  gRecorder.store(recorder, std::memory_order_release);
}

Recorder::Recorder(const Config& config, const RunInfo& run, bool deviceMemory,
                   StepController& steps)
    : config_(config),
      deviceMemory_(deviceMemory),
      tracing_(!config.traceDir.empty()),
      steps_(steps),
      stats_(config.maxLayers),
      window_(config.maxLayers),
      trace_(nowNs()),
      run_(run) {
  windowStartNs_ = nowNs();
}

void Recorder::setMachine(const Ceilings& ceilings, const MachineInfo& machine) {
  std::lock_guard<std::mutex> lock(mutex_);
  run_.ceilings = ceilings;
  run_.machine = machine;
}

double Recorder::overheadSeconds() const {
  return static_cast<double>(TickClock::toNs(overheadTicks_.load(std::memory_order_relaxed))) *
         1e-9;
}

void Recorder::endStep(const EndedStep& step) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fold();
    if (tracing_) {  // an unsampled step only moves the trace's step clock
      trace_.endStep(run_.stepsSeen, nowNs(), trace_.pending() ? unixNow() : 0.0);
    }
    ++run_.stepsSeen;
    ++windowSteps_;
    if (run_.stepsSeen == static_cast<uint64_t>(kNothingFoundSteps))
      checkFoundLocked(run_.stepsSeen);
    if (step.sampled) {
      ++run_.stepsSampled;
      ++windowSampledSteps_;
      if (step.collectivesObserved) ++windowCollectiveSteps_;
    }
  }
  {
    std::lock_guard<std::mutex> lock(linkMutex_);
    links_.clear();
  }
}

int32_t Recorder::layerId(const char* name) {
  std::lock_guard<std::mutex> lock(mutex_);
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

void Recorder::addForwardCall(const CallRecord& record, uint64_t forwardThreadId,
                              const LinkTable::Entry* links, size_t numLinks,
                              const BackwardEstimate* backward, uint64_t instance, LinkMode mode) {
  if (mode == LinkMode::kNoBackward) numLinks = 0;
  if (numLinks > 0 && mode == LinkMode::kTable) {
    steps_.noteTableCall();
    std::lock_guard<std::mutex> lock(linkMutex_);
    links_.append(forwardThreadId, links, numLinks);
  } else if (mode == LinkMode::kHooked) {
    steps_.noteHookedCall();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.add(record);
  window_.add(record);
  if (tracing_) trace_.add(record);
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

bool Recorder::findLink(uint64_t forwardThreadId, int64_t sequenceNr, Link* out) {
  std::lock_guard<std::mutex> lock(linkMutex_);
  return links_.find(forwardThreadId, sequenceNr, out);
}

void Recorder::addBackwardNode(const Link& link, int64_t ns, const MemoryAccount& account,
                               AttentionBackend backend) {
  std::lock_guard<std::mutex> lock(mutex_);
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

void Recorder::fold() {
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
    if (tracing_) trace_.add(record);
  }
  pendingBackward_.clear();
}

void Recorder::describeLayer(const LayerOrigin& origin) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (LayerOrigin& o : run_.layerOrigins) {
    if (o.name == origin.name) {
      o = origin;
      return;
    }
  }
  if (run_.layerOrigins.size() < static_cast<size_t>(config_.maxLayers))
    run_.layerOrigins.push_back(origin);
}

void Recorder::noteCompile(double seconds, uint64_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  run_.compileSeconds += seconds;
  run_.compiles += count;
}

void Recorder::noteDiscovery(const std::string& note) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const std::string& n : run_.discoveryNotes) {
    if (n == note) return;
  }
  if (run_.discoveryNotes.size() < 64) {
    run_.discoveryNotes.push_back(note);
    ATTNSCOPE_LOG(kInfo, note);
  }
}

void Recorder::checkFound(uint64_t steps) {
  std::lock_guard<std::mutex> lock(mutex_);
  checkFoundLocked(steps);
}

void Recorder::checkFoundLocked(uint64_t steps) {
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

Window Recorder::takeWindowLocked() {
  Window w;
  w.stats = std::move(window_);
  window_ = StatsTable(config_.maxLayers);
  for (const LayerStats& l : stats_.layers()) window_.layerId(l.name);  // keep the ids aligned
  const int64_t now = nowNs();
  w.steps = windowSteps_;
  w.sampledSteps = windowSampledSteps_;
  w.lastStep = run_.stepsSeen;
  w.seconds = static_cast<double>(now - windowStartNs_) * 1e-9;
  // A window with sampled steps but none the collective observer ran through (backward on hooks
  // times collectives one sampled step in kCollectiveEvery) repeats the last window that had one.
  if (windowCollectiveSteps_ > 0) {
    lastCollectiveSeconds_ = static_cast<double>(collectiveNs_.exchange(0)) * 1e-9;
    lastCollectiveSteps_ = windowCollectiveSteps_;
  }
  if (windowSampledSteps_ > 0) {
    w.collectiveSeconds = lastCollectiveSeconds_;
    w.collectiveSteps = lastCollectiveSteps_;
  }
  windowSteps_ = windowSampledSteps_ = windowCollectiveSteps_ = 0;
  windowStartNs_ = now;
  return w;
}

void Recorder::noteAttentionShape(int32_t layer, const AttentionProbe& probe) {
  if (layer < 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (static_cast<size_t>(layer) >= shapes_.size()) shapes_.resize(static_cast<size_t>(layer) + 1);
  LayerShape& s = shapes_[static_cast<size_t>(layer)];
  if (s.seen && !s.probe.sameShapes(probe)) ++s.changes;
  s.probe = probe;
  s.seen = true;
}

RoundSnapshot Recorder::snapshot(const SnapshotRequest& request) {
  RoundSnapshot s;
  std::lock_guard<std::mutex> lock(mutex_);  // one lock: the parts agree with each other
  if (request.endWindow) s.window = takeWindowLocked();
  if (request.takeTraceSteps) s.traceSteps = trace_.take(&s.traceDropped);
  s.run = runInfoLocked();
  s.layerNames = stats_.layerNames();
  for (size_t id = 0; id < shapes_.size() && id < s.layerNames.size(); ++id) {
    if (!shapes_[id].seen) continue;
    AttentionShape shape = shapes_[id].probe.toShape();
    shape.changes = shapes_[id].changes;
    s.attentionShapes.emplace_back(s.layerNames[id], shape.encode());
  }
  s.paused = steps_.paused();
  return s;
}

StatsTable Recorder::statistics() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

RunInfo Recorder::runInfo() {
  std::lock_guard<std::mutex> lock(mutex_);
  return runInfoLocked();
}

std::vector<std::string> Recorder::layerNames() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_.layerNames();
}

std::vector<std::string> Recorder::layerNamesFrom(size_t first) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> names;
  const std::vector<LayerStats>& layers = stats_.layers();
  for (size_t i = first; i < layers.size(); ++i) names.push_back(layers[i].name);
  return names;
}

RunInfo Recorder::runInfoLocked() {
  RunInfo run = run_;
  run.sampleEvery = steps_.sampleEvery();  // the live rate's one owner
  run.explicitSteps = steps_.explicitSteps();
  run.memoryReports = CpuAllocatorTracker::allocationsSeen() + DeviceMemoryReporter::reportsSeen();
  run.droppedCalls += stats_.droppedCalls();
  run.overheadSeconds = overheadSeconds();
  run.shapeReads = shapeReads_.load(std::memory_order_relaxed);
  run.shapeChanges = shapeChanges_.load(std::memory_order_relaxed);
  run.layersSeen = stats_.layers().size();
  run.backwardObservation = steps_.backwardObservation();
  return run;
}

void Recorder::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  fold();  // backward records of a step that step() did not end
  if (tracing_ && trace_.pending()) trace_.endStep(run_.stepsSeen, nowNs(), unixNow());
  // A run that ends having seen no attention call says so, however few steps it ran.
  checkFoundLocked(std::max<uint64_t>(run_.stepsSeen, kNothingFoundSteps));
  run_.stopUnixSeconds = unixNow();
}

}  // namespace detail
}  // namespace attnscope
