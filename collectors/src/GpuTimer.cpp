#include "attnscope/collectors/GpuTimer.h"

#include <utility>

#include "attnscope/core/Log.h"

namespace attnscope {

GpuTimer::GpuTimer(std::unique_ptr<GpuEventApi> events, std::unique_ptr<GpuActivityApi> activity,
                   CurrentStreamFn currentStream, Options options)
    : events_(std::move(events)),
      activity_(std::move(activity)),
      currentStream_(currentStream),
      options_(options),
      attributor_(KernelAttributor::Options{}) {
  if (events_) pool_ = std::make_unique<GpuEventPool>(*events_, options_.eventPoolCapacity);
}

GpuTimer::~GpuTimer() { stop(); }

void GpuTimer::fallBack(GpuTiming to, const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(statusMutex_);
    fallbackReason_ = reason;
  }
  source_.store(to);
  attributor_.setOptions(to == GpuTiming::kEvents || to == GpuTiming::kBoth,
                         to == GpuTiming::kCupti || to == GpuTiming::kBoth);
  ATTNSCOPE_LOG(kWarn, "GPU timing: " << gpuTimingName(to) << " (" << reason << ")");
}

void GpuTimer::start(GpuTiming requested, bool profilerRunning, const std::string& unavailable) {
  {
    std::lock_guard<std::mutex> lock(statusMutex_);
    requested_ = requested;
  }
  if (requested == GpuTiming::kOff) return;
  if (!unavailable.empty()) {
    std::lock_guard<std::mutex> lock(statusMutex_);
    fallbackReason_ = unavailable;  // off; not worth a warning on a machine without a GPU
    ATTNSCOPE_LOG(kDebug, "GPU timing off: " << unavailable);
    return;
  }
  const GpuTiming eventsOrOff = events_ ? GpuTiming::kEvents : GpuTiming::kOff;
  if (requested == GpuTiming::kEvents) {
    if (!events_) {
      fallBack(GpuTiming::kOff, "the CUDA event layer is not available");
    } else {
      source_.store(GpuTiming::kEvents);
      attributor_.setOptions(true, false);
    }
    return;
  }
  // auto, cupti, both
  std::string reason;
  if (profilerRunning) {
    reason = "torch.profiler (Kineto) is running and holds CUPTI";
  } else if (!activity_) {
    reason = "CUPTI is not available";
  } else if (activity_->start([this](const ActivityRecord& r) { attributor_.addRecord(r); },
                              &reason)) {
    cuptiStarted_ = true;
    const GpuTiming s =
        requested == GpuTiming::kBoth && events_ ? GpuTiming::kBoth : GpuTiming::kCupti;
    if (requested == GpuTiming::kBoth && s != GpuTiming::kBoth) {
      fallBack(s, "the CUDA event layer is not available; CUPTI only");
      return;
    }
    attributor_.setOptions(s == GpuTiming::kBoth, true);
    source_.store(s);
    ATTNSCOPE_LOG(kDebug, "GPU timing: " << gpuTimingName(s));
    return;
  }
  fallBack(eventsOrOff, reason + (eventsOrOff == GpuTiming::kEvents ? "; using CUDA events" : ""));
}

void GpuTimer::yieldCupti(const std::string& reason) {
  if (!usesCupti()) return;
  // CUPTI is left as it is until stop(): disabling activity kinds now would disable Kineto's.
  cuptiYielded_.store(true);
  fallBack(events_ ? GpuTiming::kEvents : GpuTiming::kOff,
           reason + (events_ ? "; using CUDA events from now on" : ""));
}

void GpuTimer::profilerStarted() {
  yieldCupti("torch.profiler started while attnscope used CUPTI");
}

void GpuTimer::stop(bool profilerRunning) {
  if (cuptiStarted_ && activity_) activity_->stop(profilerRunning);
  cuptiStarted_ = false;
  source_.store(GpuTiming::kOff);
}

// --- training / autograd threads ---------------------------------------------------------------

void GpuTimer::callBegin(Span* span) {
  if (!usesEvents()) return;
  const GpuStream s = currentStream_();
  if (s.device < 0) return;
  if (events_->capturing(s.handle, s.device)) {
    spansCapturing_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (lastDevice_.load(std::memory_order_relaxed) != s.device) lastDevice_.store(s.device);
  span->device = s.device;
  span->start = pool_->acquire(s.device);
  span->end = span->start != nullptr ? pool_->acquire(s.device) : nullptr;
  bool ok = span->end != nullptr;
  if (!ok) {
    spansDropped_.fetch_add(1, std::memory_order_relaxed);  // pool exhausted
  } else if (!events_->record(span->start, s.handle, s.device)) {
    eventErrors_.fetch_add(1, std::memory_order_relaxed);
    ok = false;
  }
  if (!ok) {
    pool_->release(span->start, s.device);
    pool_->release(span->end, s.device);
    *span = Span();
  }
}

void GpuTimer::callEnd(Span* span, uint64_t instance, int32_t layer, Phase phase) {
  if (usesCupti()) {
    attributor_.hostEnded(instance, layer, phase);
    hostEnds_.fetch_add(1, std::memory_order_relaxed);
  }
  if (span->start == nullptr) {
    if (usesEvents()) attributor_.spanMissing(instance, phase);
    return;
  }
  const GpuStream s = currentStream_();
  if (s.device != span->device || events_->capturing(s.handle, s.device) ||
      !events_->record(span->end, s.handle, s.device)) {
    // The call moved to another device or into a graph capture, or CUDA failed: not timed.
    eventErrors_.fetch_add(1, std::memory_order_relaxed);
    attributor_.spanMissing(instance, phase);
    pool_->release(span->start, span->device);
    pool_->release(span->end, span->device);
    *span = Span();
    return;
  }
  queue(Pending{*span, instance, layer, phase});
  *span = Span();
}

void GpuTimer::queue(const Pending& p) {
  std::lock_guard<std::mutex> lock(pendingMutex_);
  pending_.push_back(p);
}

bool GpuTimer::pushOp(const DeviceKey& key) {
  if (!usesCupti()) return false;
  activity_->pushExternalId(KernelAttributor::packExternalId(key));
  return true;
}

void GpuTimer::popOp(bool pushed) {
  if (pushed) activity_->popExternalId();
}

void GpuTimer::nodeBegin(uint64_t instance, int32_t layer) {
  if (usesCupti()) {
    std::lock_guard<std::mutex> lock(backwardMutex_);
    backwardCalls_.emplace(instance, layer);
  }
  if (!usesEvents()) return;
  std::lock_guard<std::mutex> lock(backwardMutex_);
  if (backward_.count(instance) != 0) return;
  Pending& p = backward_[instance];
  p.instance = instance;
  p.layer = layer;
  p.phase = Phase::kBackward;
  callBegin(&p.span);  // a dropped span stays in the map with null events: counted once
}

void GpuTimer::nodeEnd(uint64_t instance) {
  if (!usesEvents()) return;
  std::lock_guard<std::mutex> lock(backwardMutex_);
  const auto it = backward_.find(instance);
  if (it == backward_.end() || it->second.span.end == nullptr) return;
  Span& span = it->second.span;
  const GpuStream s = currentStream_();
  if (s.device != span.device || events_->capturing(s.handle, s.device) ||
      !events_->record(span.end, s.handle, s.device)) {
    eventErrors_.fetch_add(1, std::memory_order_relaxed);
    pool_->release(span.start, span.device);
    pool_->release(span.end, span.device);
    span = Span();
  }
}

void GpuTimer::closeBackward() {
  std::unordered_map<uint64_t, Pending> closed;
  std::unordered_map<uint64_t, int32_t> calls;
  {
    std::lock_guard<std::mutex> lock(backwardMutex_);
    closed.swap(backward_);
    calls.swap(backwardCalls_);
  }
  for (const auto& [instance, layer] : calls) {
    attributor_.hostEnded(instance, layer, Phase::kBackward);
    hostEnds_.fetch_add(1, std::memory_order_relaxed);
  }
  if (closed.empty()) return;
  std::lock_guard<std::mutex> lock(pendingMutex_);
  for (auto& [instance, p] : closed) {
    if (p.span.start == nullptr) {
      attributor_.spanMissing(instance, Phase::kBackward);
      continue;
    }
    pending_.push_back(p);
  }
}

// --- reporter thread -----------------------------------------------------------------------------

std::vector<CallRecord> GpuTimer::collect(bool final) {
  if (final) closeBackward();
  std::vector<Pending> pending;
  {
    std::lock_guard<std::mutex> lock(pendingMutex_);
    pending.swap(pending_);
  }
  std::vector<Pending> still;
  for (const Pending& p : pending) {
    const GpuEventApi::Query q = events_->query(p.span.end, p.span.device);
    if (q == GpuEventApi::Query::kPending && !final) {
      still.push_back(p);
      continue;
    }
    float ms = 0;
    if (q == GpuEventApi::Query::kReady &&
        events_->elapsedMs(p.span.start, p.span.end, p.span.device, &ms)) {
      attributor_.addSpan(p.instance, p.layer, p.phase, static_cast<int64_t>(ms * 1e6));
      spansResolved_.fetch_add(1, std::memory_order_relaxed);
    } else {
      if (q == GpuEventApi::Query::kError) eventErrors_.fetch_add(1, std::memory_order_relaxed);
      attributor_.spanMissing(p.instance, p.phase);
    }
    // An event still pending at stop may be reused or destroyed: CUDA releases it when done.
    pool_->release(p.span.start, p.span.device);
    pool_->release(p.span.end, p.span.device);
  }
  if (!still.empty()) {
    std::lock_guard<std::mutex> lock(pendingMutex_);
    pending_.insert(pending_.begin(), still.begin(), still.end());
  }
  if (cuptiStarted_ && !cuptiYielded_) {
    activity_->flush(final);
    // A CUPTI that delivers nothing while attention calls keep ending has gone to another tool
    // (or never worked here, as under some sandboxes): events from now on.
    const uint64_t delivered = attributor_.counters().delivered;
    const uint64_t ends = hostEnds_.load(std::memory_order_relaxed);
    if (delivered != deliveredSeen_) {
      deliveredSeen_ = delivered;
      hostEndsAtDelivery_ = ends;
    } else if (!final && ends - hostEndsAtDelivery_ >= options_.silentAfterCalls) {
      yieldCupti("CUPTI delivered no records for " + std::to_string(ends - hostEndsAtDelivery_) +
                 " attention calls");
    }
  }
  return attributor_.endRound(final);
}

GpuStatus GpuTimer::status() const {
  GpuStatus s;
  s.source = source();
  {
    std::lock_guard<std::mutex> lock(statusMutex_);
    s.requested = requested_;
    s.fallbackReason = fallbackReason_;
  }
  if (cuptiStarted_ && activity_) s.cuptiRecordsDropped = activity_->droppedRecords();
  const KernelAttributor::Counters c = attributor_.counters();
  s.kernelsAttributed = c.attributed;
  s.recordsUnattributed = c.unattributed;
  s.recordsLate = c.late;
  s.recordsOutside = c.outside;
  s.recordsInFlightAtStop = c.inFlight;
  s.callsInFlightAtStop = c.callsInFlight;
  s.callsGivenUp = c.callsGivenUp;
  s.recordsSideStream = c.sideStream;
  s.spansResolved = spansResolved_.load();
  s.spansDropped = spansDropped_.load();
  s.spansCapturing = spansCapturing_.load();
  s.eventErrors = eventErrors_.load();
  s.eventsInPool = pool_ ? pool_->created() : 0;
  const auto backends = attributor_.backends();
  for (size_t l = 0; l < backends.size(); ++l) {
    GpuStatus::LayerBackends b;  // index = layer id; the session fills in the names
    b.kernels = backends[l];
    s.backends.push_back(b);
  }
  return s;
}

}  // namespace attnscope
