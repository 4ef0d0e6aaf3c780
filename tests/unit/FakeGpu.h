#pragma once

// Fakes of the two GPU layers (no GPU on the CI machines): a simulated device whose streams run
// queued work back to back, CUDA-like events recorded on those streams, and a CUPTI-like
// activity layer that emits external-correlation and kernel records for each launch. They
// implement the same interfaces as the real CUDA event and CUPTI layers (GpuEventApi.h,
// GpuActivityApi.h), so GpuTimer and KernelAttributor run unchanged on top of them.

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "attnscope/collectors/GpuActivityApi.h"
#include "attnscope/collectors/GpuEventApi.h"
#include "attnscope/collectors/GpuTimer.h"

namespace attnscope {
namespace testing_gpu {

// The simulated device: per stream, the time its queued work ends; a clock the test advances.
// Thread-safe (one mutex): the observer's threads launch and record, the collection thread
// queries and flushes, the test advances the clock.
class FakeGpuDevice {
 public:
  struct Launch {
    uint32_t correlationId;
    uint64_t startNs, endNs;
    std::string name;
    ActivityRecord::Kind kind;
    std::vector<uint64_t> externalIds;  // the pushed id stack's top at launch, if any
  };

  static FakeGpuDevice& instance() {
    static FakeGpuDevice device;
    return device;
  }
  void reset() {
    std::lock_guard<std::recursive_mutex> lock(mutex);
    stream = GpuStream{reinterpret_cast<void*>(0x5001), 0};
    now = 1000;
    idStack.clear();
    launches.clear();
    queueEnd_.clear();
    nextCorrelation_ = 100;
  }

  // The stream the "training thread" queues on; device -1 = no CUDA context yet.
  GpuStream stream{reinterpret_cast<void*>(0x5001), 0};
  static GpuStream currentStream() {
    std::lock_guard<std::recursive_mutex> lock(instance().mutex);
    return instance().stream;
  }

  uint64_t now = 1000;  // device clock, ns
  uint64_t queueEnd(void* s) {
    std::lock_guard<std::recursive_mutex> lock(mutex);
    const auto it = queueEnd_.find(s);
    return std::max(now, it == queueEnd_.end() ? 0 : it->second);
  }
  // Queues `ns` of work on the current stream, as a CUDA API call would: returns its record.
  Launch launch(uint64_t ns, const std::string& name,
                ActivityRecord::Kind kind = ActivityRecord::Kind::kKernel) {
    std::lock_guard<std::recursive_mutex> lock(mutex);
    const uint64_t start = queueEnd(stream.handle);
    queueEnd_[stream.handle] = start + ns;
    Launch l{nextCorrelation_++, start, start + ns, name, kind, {}};
    if (!idStack.empty()) l.externalIds.push_back(idStack.back());
    launches.push_back(l);
    return l;
  }
  uint64_t clock() {
    std::lock_guard<std::recursive_mutex> lock(mutex);
    return now;
  }
  void advance(uint64_t ns) {
    std::lock_guard<std::recursive_mutex> lock(mutex);
    now += ns;
  }
  void finishAll() {
    std::lock_guard<std::recursive_mutex> lock(mutex);
    for (const auto& [s, end] : queueEnd_) now = std::max(now, end);
  }

  std::recursive_mutex mutex;
  std::vector<uint64_t>
      idStack;                   // CUPTI's external id stack (tests push from one thread at a time)
  std::vector<Launch> launches;  // not yet delivered to CUPTI's buffers

 private:
  std::map<void*, uint64_t> queueEnd_;
  uint32_t nextCorrelation_ = 100;
};

// CUDA events on the fake device.
class FakeGpuEventApi final : public GpuEventApi {
 public:
  struct State {
    int created = 0;
    int destroyed = 0;
    int records = 0;
    int queries = 0;
    bool failCreate = false;
    bool failRecord = false;
    bool capturing = false;    // the stream is being captured into a CUDA graph
    std::vector<int> devices;  // device argument of every call
  };
  explicit FakeGpuEventApi(State* state) : state_(state) {}
  const char* name() const override { return "fake-events"; }

  Event create(int device) override {
    state_->devices.push_back(device);
    if (state_->failCreate) return nullptr;
    ++state_->created;
    events_.push_back(std::make_unique<FakeEvent>());
    return events_.back().get();
  }
  bool record(Event e, Stream s, int device) override {
    state_->devices.push_back(device);
    if (state_->failRecord) return false;
    ++state_->records;
    auto* ev = static_cast<FakeEvent*>(e);
    ev->recorded = true;
    ev->at = FakeGpuDevice::instance().queueEnd(s);
    return true;
  }
  bool capturing(Stream, int) override { return state_->capturing; }
  Query query(Event e, int device) override {
    state_->devices.push_back(device);
    ++state_->queries;
    auto* ev = static_cast<FakeEvent*>(e);
    if (!ev->recorded) return Query::kError;
    return ev->at <= FakeGpuDevice::instance().clock() ? Query::kReady : Query::kPending;
  }
  bool elapsedMs(Event a, Event b, int device, float* ms) override {
    state_->devices.push_back(device);
    auto* x = static_cast<FakeEvent*>(a);
    auto* y = static_cast<FakeEvent*>(b);
    const uint64_t now = FakeGpuDevice::instance().clock();
    if (!x->recorded || !y->recorded || x->at > now || y->at > now) return false;
    *ms = static_cast<float>(static_cast<double>(y->at - x->at) / 1e6);
    return true;
  }
  void destroy(Event, int device) override {
    state_->devices.push_back(device);
    ++state_->destroyed;
  }

 private:
  struct FakeEvent {
    bool recorded = false;
    uint64_t at = 0;
  };
  State* state_;
  std::vector<std::unique_ptr<FakeEvent>> events_;
};

// CUPTI's activity layer on the fake device.
class FakeGpuActivityApi final : public GpuActivityApi {
 public:
  struct State {
    bool started = false;
    bool stopped = false;
    int startCalls = 0;
    std::string failReason;     // non-empty: start() fails with it
    bool kernelsFirst = false;  // deliver device records before their correlation records
    uint64_t dropped = 0;
    int pushes = 0;
    int pops = 0;
    uint64_t kernelPerPopNs = 0;
  };
  explicit FakeGpuActivityApi(State* state) : state_(state) {}
  const char* name() const override { return "fake-cupti"; }

  bool start(Sink sink, std::string* reason) override {
    ++state_->startCalls;
    if (!state_->failReason.empty()) {
      *reason = state_->failReason;
      return false;
    }
    sink_ = std::move(sink);
    state_->started = true;
    return true;
  }
  // Delivers the records of every launch whose work has completed (forced: all launches).
  void flush(bool forced) override {
    FakeGpuDevice& d = FakeGpuDevice::instance();
    std::unique_lock<std::recursive_mutex> lock(d.mutex);
    std::vector<FakeGpuDevice::Launch> later;
    std::vector<ActivityRecord> correlations, work;
    for (const auto& l : d.launches) {
      if (!forced && l.endNs > d.now) {
        later.push_back(l);
        continue;
      }
      for (uint64_t id : l.externalIds) {
        correlations.push_back(ActivityRecord{ActivityRecord::Kind::kExternalCorrelation,
                                              l.correlationId, id, 0, 0, 0, nullptr});
      }
      work.push_back(ActivityRecord{l.kind, l.correlationId, 0, l.startNs, l.endNs, 0, nullptr});
      names_.push_back(l.name);
    }
    // Names stay valid while the sink runs, as CUPTI's do.
    for (size_t i = 0; i < work.size(); ++i)
      work[i].name = names_[names_.size() - work.size() + i].c_str();
    d.launches.swap(later);
    lock.unlock();
    if (state_->kernelsFirst) {
      for (const auto& r : work) sink_(r);
      for (const auto& r : correlations) sink_(r);
    } else {
      for (const auto& r : correlations) sink_(r);
      for (const auto& r : work) sink_(r);
    }
  }
  void stop() override { state_->stopped = true; }
  void pushExternalId(uint64_t id) override {
    FakeGpuDevice& d = FakeGpuDevice::instance();
    std::lock_guard<std::recursive_mutex> lock(d.mutex);
    ++state_->pushes;
    d.idStack.push_back(id);
  }
  // With kernelPerPopNs set, the work under each id is one kernel of that length, launched just
  // before the id is popped (as an op's kernels are launched before its end).
  void popExternalId() override {
    FakeGpuDevice& d = FakeGpuDevice::instance();
    std::lock_guard<std::recursive_mutex> lock(d.mutex);
    ++state_->pops;
    if (state_->kernelPerPopNs > 0) d.launch(state_->kernelPerPopNs, "fake_kernel");
    if (!d.idStack.empty()) d.idStack.pop_back();
  }
  uint64_t droppedRecords() override { return state_->dropped; }

  // Records straight into the sink (attribution tests without a device).
  void deliver(const ActivityRecord& r) { sink_(r); }

 private:
  State* state_;
  Sink sink_;
  std::vector<std::string> names_;
};

}  // namespace testing_gpu
}  // namespace attnscope
