#pragma once

// Fakes of the two GPU layers (no GPU on the CI machines): a simulated device whose streams run
// queued work back to back, CUDA-like events recorded on those streams, and a CUPTI-like
// activity layer that emits external-correlation and kernel records for each launch. They
// implement the same interfaces as the real CUDA event and CUPTI layers (GpuEventApi.h,
// GpuActivityApi.h), so GpuTimer and KernelAttributor run unchanged on top of them.

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "attnscope/collectors/GpuActivityApi.h"
#include "attnscope/collectors/GpuEventApi.h"
#include "attnscope/collectors/GpuTimer.h"

namespace attnscope {
namespace testing_gpu {

// The simulated device: per stream, the time its queued work ends; a clock the test advances.
// And CUPTI's activity buffers as NVIDIA documents them: a launch reserves its kernel (or
// memcpy/memset) record in the current buffer, then the external-correlation and API records
// of the call follow (at API exit); a kernel record is complete only once the device ran the
// kernel; a buffer is handed back (flush(0), or CUPTI's thread for a full one) only when every
// record in it is complete, so buffers can come back out of order; a forced flush hands every
// buffer back, incomplete records with zero timestamps; when more buffers than `maxBuffers`
// wait, new records are dropped and counted; a second tool (torch.profiler's Kineto, Nsight)
// that registers its own buffer callbacks receives every buffer completed from then on.
// Thread-safe (one mutex): the observer's threads launch and record, the collection thread
// queries and flushes, the test advances the clock.
class FakeGpuDevice {
 public:
  struct Record {
    ActivityRecord record;
    std::string name;
    uint64_t completeAt = 0;  // device clock at which the record is complete
    size_t bytes = 0;
  };
  struct Buffer {
    size_t capacity = 0;
    size_t used = 0;
    bool full = false;
    std::vector<Record> records;
  };
  struct Cupti {
    bool enabled = false;                   // activity kinds enabled (by attnscope)
    bool otherTool = false;                 // another tool registered its buffer callbacks
    size_t bufferBytes = size_t{64} << 10;  // the real layer's first (smallest) size
    size_t maxBuffers = 1024;               // buffers waiting to be handed back, at most
    uint64_t dropped = 0;
    uint64_t toOtherTool = 0;  // records handed to the other tool's callbacks
    std::deque<Buffer> buffers;
    std::vector<Record> completed;  // handed back, not yet read by attnscope's flush
    uint64_t deliveredBytes = 0;
  };

  static FakeGpuDevice& instance() {
    static FakeGpuDevice device;
    return device;
  }
  void reset() {
    std::lock_guard<std::recursive_mutex> lock(mutex);
    stream = GpuStream{reinterpret_cast<void*>(0x5001), 0};
    now = 1000;
    thread = 1;
    idStack.clear();
    queueEnd_.clear();
    nextCorrelation_ = 100;
    cupti = Cupti();
  }

  // The stream the "training thread" queues on; device -1 = no CUDA context yet.
  GpuStream stream{reinterpret_cast<void*>(0x5001), 0};
  uint32_t thread = 1;  // the OS thread CUPTI names in API records
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
  // Queues `ns` of work on the current stream, as a CUDA API call launching it would; returns
  // its correlation id.
  uint32_t launch(uint64_t ns, const std::string& name,
                  ActivityRecord::Kind kind = ActivityRecord::Kind::kKernel) {
    std::lock_guard<std::recursive_mutex> lock(mutex);
    const uint64_t start = queueEnd(stream.handle);
    queueEnd_[stream.handle] = start + ns;
    const uint32_t id = nextCorrelation_++;
    if (!cupti.enabled) return id;
    ActivityRecord work;
    work.kind = kind;
    work.correlationId = id;
    work.startNs = start;
    work.endNs = start + ns;
    work.streamId = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(stream.handle));
    append(Record{work, name, start + ns, kind == ActivityRecord::Kind::kKernel ? 224u : 96u});
    apiRecords(id, true);
    return id;
  }
  // A CUDA API call that queues nothing (cudaStreamIsCapturing, cudaGetLastError, ...).
  void apiCall() {
    std::lock_guard<std::recursive_mutex> lock(mutex);
    const uint32_t id = nextCorrelation_++;
    if (cupti.enabled) apiRecords(id, false);
  }
  uint64_t clock() {
    std::lock_guard<std::recursive_mutex> lock(mutex);
    return now;
  }
  void advance(uint64_t ns) {
    std::lock_guard<std::recursive_mutex> lock(mutex);
    now += ns;
    handBackFull();
  }
  void finishAll() {
    std::lock_guard<std::recursive_mutex> lock(mutex);
    for (const auto& [s, end] : queueEnd_) now = std::max(now, end);
    handBackFull();
  }
  // The latest end of the queued work, over all streams.
  uint64_t busyUntil() {
    std::lock_guard<std::recursive_mutex> lock(mutex);
    uint64_t end = now;
    for (const auto& [s, e] : queueEnd_) end = std::max(end, e);
    return end;
  }

  // cuptiActivityFlushAll: flag 0 hands back the buffers whose records are all complete,
  // forced every buffer. Returns nothing: the buffers go to the callbacks registered.
  void flushAll(bool forced) {
    std::lock_guard<std::recursive_mutex> lock(mutex);
    for (auto it = cupti.buffers.begin(); it != cupti.buffers.end();) {
      if (forced || complete(*it)) {
        handBack(*it, forced);
        it = cupti.buffers.erase(it);
      } else {
        ++it;
      }
    }
  }

  std::recursive_mutex mutex;
  std::vector<uint64_t> idStack;  // CUPTI's external id stack (one thread at a time)
  Cupti cupti;

 private:
  void apiRecords(uint32_t id, bool launches) {
    if (!idStack.empty()) {
      ActivityRecord e;
      e.kind = ActivityRecord::Kind::kExternalCorrelation;
      e.correlationId = id;
      e.externalId = idStack.back();
      append(Record{e, "", 0, 24});
    }
    ActivityRecord a;
    a.kind = ActivityRecord::Kind::kApi;
    a.correlationId = id;
    a.threadId = thread;
    a.launchesWork = launches;
    append(Record{a, "", 0, 48});
  }
  void append(const Record& r) {
    if (cupti.buffers.empty() || cupti.buffers.back().full ||
        cupti.buffers.back().used + r.bytes > cupti.buffers.back().capacity) {
      if (!cupti.buffers.empty()) cupti.buffers.back().full = true;
      if (cupti.buffers.size() >= cupti.maxBuffers) {
        ++cupti.dropped;  // no buffer to write into
        return;
      }
      Buffer b;
      b.capacity = cupti.bufferBytes;
      cupti.buffers.push_back(std::move(b));
    }
    Buffer& b = cupti.buffers.back();
    b.used += r.bytes;
    b.records.push_back(r);
  }
  bool complete(const Buffer& b) const {
    for (const Record& r : b.records)
      if (r.completeAt > now) return false;
    return true;
  }
  // CUPTI's own thread hands back full buffers once complete.
  void handBackFull() {
    for (auto it = cupti.buffers.begin(); it != cupti.buffers.end();) {
      if (it->full && complete(*it)) {
        handBack(*it, false);
        it = cupti.buffers.erase(it);
      } else {
        ++it;
      }
    }
  }
  void handBack(Buffer& b, bool forced) {
    if (cupti.otherTool) {
      cupti.toOtherTool += b.records.size();
      return;
    }
    for (Record& r : b.records) {
      if (forced && r.completeAt > now) r.record.startNs = r.record.endNs = 0;  // incomplete
      cupti.completed.push_back(r);
    }
    cupti.deliveredBytes += b.used;
  }

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
    // The threads that queried, read back or destroyed events (where a real layer makes the
    // event's device current and relaxes the capture mode).
    std::vector<std::thread::id> threads;
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
    noteThread();
    ++state_->queries;
    auto* ev = static_cast<FakeEvent*>(e);
    if (!ev->recorded) return Query::kError;
    return ev->at <= FakeGpuDevice::instance().clock() ? Query::kReady : Query::kPending;
  }
  bool elapsedMs(Event a, Event b, int device, float* ms) override {
    state_->devices.push_back(device);
    noteThread();
    auto* x = static_cast<FakeEvent*>(a);
    auto* y = static_cast<FakeEvent*>(b);
    const uint64_t now = FakeGpuDevice::instance().clock();
    if (!x->recorded || !y->recorded || x->at > now || y->at > now) return false;
    *ms = static_cast<float>(static_cast<double>(y->at - x->at) / 1e6);
    return true;
  }
  void noteThread() {
    std::lock_guard<std::recursive_mutex> lock(FakeGpuDevice::instance().mutex);
    state_->threads.push_back(std::this_thread::get_id());
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

// CUPTI's activity layer on the fake device: start() enables the kinds, flush() calls
// cuptiActivityFlushAll and reads the buffers handed back on the calling thread, as the real
// layer does.
class FakeGpuActivityApi final : public GpuActivityApi {
 public:
  struct State {
    bool started = false;
    bool stopped = false;
    bool stoppedWithProfiler = false;  // stop(profilerRunning = true)
    int startCalls = 0;
    std::string failReason;     // non-empty: start() fails with it
    bool kernelsFirst = false;  // in a flush, device records before correlation records
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
    FakeGpuDevice& d = FakeGpuDevice::instance();
    std::lock_guard<std::recursive_mutex> lock(d.mutex);
    d.cupti.enabled = true;
    state_->started = true;
    return true;
  }
  void flush(bool forced) override {
    FakeGpuDevice& d = FakeGpuDevice::instance();
    std::vector<FakeGpuDevice::Record> records;
    {
      std::lock_guard<std::recursive_mutex> lock(d.mutex);
      d.flushAll(forced);
      records.swap(d.cupti.completed);
    }
    if (state_->kernelsFirst) {
      std::stable_partition(records.begin(), records.end(), [](const FakeGpuDevice::Record& r) {
        return r.record.kind != ActivityRecord::Kind::kExternalCorrelation &&
               r.record.kind != ActivityRecord::Kind::kApi;
      });
    }
    for (FakeGpuDevice::Record& r : records) {
      r.record.name = r.name.empty() ? nullptr : r.name.c_str();  // valid during the sink call
      sink_(r.record);
    }
  }
  void stop(bool profilerRunning) override {
    state_->stopped = true;
    state_->stoppedWithProfiler = profilerRunning;
    FakeGpuDevice& d = FakeGpuDevice::instance();
    std::lock_guard<std::recursive_mutex> lock(d.mutex);
    if (!profilerRunning) d.cupti.enabled = false;
  }
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
  uint64_t droppedRecords() override {
    FakeGpuDevice& d = FakeGpuDevice::instance();
    std::lock_guard<std::recursive_mutex> lock(d.mutex);
    return d.cupti.dropped;
  }

  // Records straight into the sink (attribution tests without a device).
  void deliver(const ActivityRecord& r) { sink_(r); }

 private:
  State* state_;
  Sink sink_;
};

}  // namespace testing_gpu
}  // namespace attnscope
