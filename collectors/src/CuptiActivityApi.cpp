// CUPTI's activity API, opened at run time (GpuActivityApi.h).
#include "attnscope/collectors/GpuActivityApi.h"

#if ATTNSCOPE_WITH_CUDA
#include <cupti.h>
#include <cupti_activity_deprecated.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "DynamicLibrary.h"
#endif

namespace attnscope {

#if ATTNSCOPE_WITH_CUDA
namespace {

// Records are read through the newest layouts of these headers. A CUPTI library older than the
// headers (PyTorch's CUDA 12 wheels next to a CUDA 13 toolkit) writes an older version of the
// same record; every version since Kernel4/Memcpy4(5)/Memset3 keeps the fields read here at the
// same offsets, which these checks pin against the headers.
#define ATTNSCOPE_SAME_OFFSET(NEW, OLD, FIELD)                                 \
  static_assert(offsetof(NEW, FIELD) == offsetof(OLD, FIELD), #NEW "::" #FIELD \
                                                                   " moved "   \
                                                                   "since " #OLD)
using KernelRecord = CUpti_ActivityKernel10;
ATTNSCOPE_SAME_OFFSET(KernelRecord, CUpti_ActivityKernel4, start);
ATTNSCOPE_SAME_OFFSET(KernelRecord, CUpti_ActivityKernel4, end);
ATTNSCOPE_SAME_OFFSET(KernelRecord, CUpti_ActivityKernel4, deviceId);
ATTNSCOPE_SAME_OFFSET(KernelRecord, CUpti_ActivityKernel4, correlationId);
ATTNSCOPE_SAME_OFFSET(KernelRecord, CUpti_ActivityKernel4, name);
ATTNSCOPE_SAME_OFFSET(KernelRecord, CUpti_ActivityKernel9, name);
ATTNSCOPE_SAME_OFFSET(KernelRecord, CUpti_ActivityKernel4, streamId);
using MemcpyRecord = CUpti_ActivityMemcpy6;
ATTNSCOPE_SAME_OFFSET(MemcpyRecord, CUpti_ActivityMemcpy4, start);
ATTNSCOPE_SAME_OFFSET(MemcpyRecord, CUpti_ActivityMemcpy4, end);
ATTNSCOPE_SAME_OFFSET(MemcpyRecord, CUpti_ActivityMemcpy4, deviceId);
ATTNSCOPE_SAME_OFFSET(MemcpyRecord, CUpti_ActivityMemcpy4, correlationId);
ATTNSCOPE_SAME_OFFSET(MemcpyRecord, CUpti_ActivityMemcpy5, correlationId);
ATTNSCOPE_SAME_OFFSET(MemcpyRecord, CUpti_ActivityMemcpy4, streamId);
using MemsetRecord = CUpti_ActivityMemset4;
ATTNSCOPE_SAME_OFFSET(MemsetRecord, CUpti_ActivityMemset3, start);
ATTNSCOPE_SAME_OFFSET(MemsetRecord, CUpti_ActivityMemset3, end);
ATTNSCOPE_SAME_OFFSET(MemsetRecord, CUpti_ActivityMemset3, deviceId);
ATTNSCOPE_SAME_OFFSET(MemsetRecord, CUpti_ActivityMemset3, correlationId);
ATTNSCOPE_SAME_OFFSET(MemsetRecord, CUpti_ActivityMemset3, streamId);
#undef ATTNSCOPE_SAME_OFFSET

// attnscope's kind of external correlation; Kineto uses CUSTOM0 and CUSTOM1.
constexpr CUpti_ExternalCorrelationKind kExternalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2;
constexpr size_t kBufferAlign = 8;  // ACTIVITY_RECORD_ALIGNMENT

// Kernels, copies and fills are the work timed; external-correlation records map each CUDA API
// call made while an id was pushed to that id. CUPTI emits them for API activity records only,
// so the runtime and driver API kinds are enabled too; their records also tell which calls
// launched work and on which thread (KernelAttributor's completion rule).
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                         CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET,
                                         CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
                                         CUPTI_ACTIVITY_KIND_RUNTIME,
                                         CUPTI_ACTIVITY_KIND_DRIVER};
// Frequent API calls that launch nothing: not recorded while attnscope uses CUPTI (Kineto turns
// off the same kind of calls), recorded again when it stops or yields.
constexpr CUpti_CallbackId kQuietRuntime[] = {CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020,
                                              CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020,
                                              CUPTI_RUNTIME_TRACE_CBID_cudaPeekAtLastError_v3020,
                                              CUPTI_RUNTIME_TRACE_CBID_cudaStreamIsCapturing_v10000,
                                              CUPTI_RUNTIME_TRACE_CBID_cudaEventQuery_v3020};
constexpr CUpti_CallbackId kQuietDriver[] = {
    CUPTI_DRIVER_TRACE_CBID_cuCtxGetCurrent, CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxGetState,
    CUPTI_DRIVER_TRACE_CBID_cuKernelGetAttribute, CUPTI_DRIVER_TRACE_CBID_cuGetProcAddress,
    CUPTI_DRIVER_TRACE_CBID_cuGetProcAddress_v2};

struct Cupti {
  decltype(&::cuptiSubscribe) subscribe = nullptr;
  decltype(&::cuptiUnsubscribe) unsubscribe = nullptr;
  decltype(&::cuptiActivityEnable) enable = nullptr;
  decltype(&::cuptiActivityDisable) disable = nullptr;
  decltype(&::cuptiActivityRegisterCallbacks) registerCallbacks = nullptr;
  decltype(&::cuptiActivityFlushAll) flushAll = nullptr;
  decltype(&::cuptiActivityGetNextRecord) nextRecord = nullptr;
  decltype(&::cuptiActivityGetNumDroppedRecords) droppedRecords = nullptr;
  decltype(&::cuptiActivityPushExternalCorrelationId) push = nullptr;
  decltype(&::cuptiActivityPopExternalCorrelationId) pop = nullptr;
  decltype(&::cuptiGetResultString) resultString = nullptr;
  decltype(&::cuptiGetCallbackName) callbackName = nullptr;
  // Optional (CUPTI 12.5 on): per-call API records on or off.
  decltype(&::cuptiActivityEnableRuntimeApi) enableRuntimeApi = nullptr;
  decltype(&::cuptiActivityEnableDriverApi) enableDriverApi = nullptr;
};

// Buffers CUPTI completed, queued by its callback (its own thread, or the flushing one) and
// parsed by flush() on the collection thread: the callback takes one lock per buffer, never
// one per record.
struct Completed {
  uint8_t* buffer;
  size_t validSize;
  CUcontext context;
  uint32_t streamId;
};
std::mutex gQueueMutex;
std::vector<Completed> gQueue;
bool gAccepting = false;                             // an instance is started (gQueueMutex)
std::atomic<size_t> gBufferBytes{size_t{64} << 10};  // the next buffer's size

class CuptiActivityApi final : public GpuActivityApi {
 public:
  explicit CuptiActivityApi(const Cupti& api) : api_(api) {}
  ~CuptiActivityApi() override { stop(true); }
  const char* name() const override { return "cupti"; }

  bool start(Sink sink, std::string* reason) override {
    // Probe, then release at once: another subscriber (DCGM, Nsight, a Kineto that subscribed
    // earlier) means CUPTI is not ours to use; holding one would break Kineto's later.
    CUpti_SubscriberHandle probe = nullptr;
    CUptiResult r = api_.subscribe(&probe, &CuptiActivityApi::onCallback, nullptr);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
      *reason = "CUPTI is held by another subscriber (torch.profiler/Kineto, DCGM or Nsight)";
      return false;
    }
    if (r != CUPTI_SUCCESS) {
      *reason = "CUPTI failed to initialise: " + text(r);
      return false;
    }
    api_.unsubscribe(probe);
    {
      std::lock_guard<std::mutex> lock(gQueueMutex);
      if (gAccepting) {
        *reason = "CUPTI is already used by another attnscope session";
        return false;
      }
      gAccepting = true;
    }
    sink_ = std::move(sink);
    // Registered at every start: a profiler that ran in between registered its own.
    r = api_.registerCallbacks(&CuptiActivityApi::onBufferRequested,
                               &CuptiActivityApi::onBufferCompleted);
    size_t enabled = 0;
    for (; r == CUPTI_SUCCESS && enabled < sizeof(kKinds) / sizeof(kKinds[0]); ++enabled) {
      r = api_.enable(kKinds[enabled]);
      if (r != CUPTI_SUCCESS) break;
    }
    if (r != CUPTI_SUCCESS) {
      for (size_t i = 0; i < enabled; ++i) api_.disable(kKinds[i]);
      std::lock_guard<std::mutex> lock(gQueueMutex);
      gAccepting = false;
      *reason = "CUPTI activity API unavailable: " + text(r);
      return false;
    }
    quiet(0);
    started_ = kindsOn_ = quieted_ = true;
    last_ = std::chrono::steady_clock::now();
    return true;
  }

  void flush(bool forced) override {
    if (!started_) return;
    api_.flushAll(forced ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
    std::vector<Completed> done;
    {
      std::lock_guard<std::mutex> lock(gQueueMutex);
      done.swap(gQueue);
    }
    size_t bytes = 0;
    for (const Completed& c : done) {
      bytes += c.validSize;
      read(c);
      std::free(c.buffer);
    }
    // The next buffers fill in about a tenth of a second at this rate.
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    if (seconds > 0) gBufferBytes.store(activityBufferBytes(static_cast<double>(bytes) / seconds));
  }

  void stop(bool profilerRunning) override {
    if (quieted_) quiet(1);  // the profiler's trace gets every API record again
    quieted_ = false;
    if (kindsOn_ && !profilerRunning) {
      for (const CUpti_ActivityKind k : kKinds) api_.disable(k);
      kindsOn_ = false;
    }
    if (!started_) return;
    started_ = false;
    std::vector<Completed> done;
    {
      std::lock_guard<std::mutex> lock(gQueueMutex);
      gAccepting = false;  // buffers completed from now on are freed by the callback
      done.swap(gQueue);
    }
    for (const Completed& c : done) std::free(c.buffer);
  }

  void pushExternalId(uint64_t id) override { api_.push(kExternalKind, id); }
  void popExternalId() override {
    uint64_t id = 0;
    api_.pop(kExternalKind, &id);
  }
  uint64_t droppedRecords() override { return dropped_.load(std::memory_order_relaxed); }

 private:
  std::string text(CUptiResult r) {
    const char* s = nullptr;
    if (api_.resultString(r, &s) != CUPTI_SUCCESS || s == nullptr)
      return "error " + std::to_string(r);
    return s;
  }

  void quiet(uint8_t enable) {
    if (api_.enableRuntimeApi != nullptr) {
      for (const CUpti_CallbackId id : kQuietRuntime) api_.enableRuntimeApi(id, enable);
    }
    if (api_.enableDriverApi != nullptr) {
      for (const CUpti_CallbackId id : kQuietDriver) api_.enableDriverApi(id, enable);
    }
  }

  // Whether an API call queues device work that CUPTI records (kernel and graph launches,
  // copies, fills), from its name; cached per callback id.
  bool launchesWork(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
    std::vector<int8_t>& known = domain == CUPTI_CB_DOMAIN_RUNTIME_API ? runtime_ : driver_;
    if (cbid >= known.size()) known.resize(cbid + 1, -1);
    if (known[cbid] < 0) {
      const char* n = nullptr;
      bool launches = false;
      if (api_.callbackName(domain, cbid, &n) == CUPTI_SUCCESS && n != nullptr) {
        const std::string name(n);
        launches = (name.find("Launch") != std::string::npos &&
                    name.find("HostFunc") == std::string::npos) ||
                   name.rfind("cudaMemcpy", 0) == 0 || name.rfind("cudaMemset", 0) == 0 ||
                   name.rfind("cuMemcpy", 0) == 0 || name.rfind("cuMemset", 0) == 0;
      }
      known[cbid] = launches ? 1 : 0;
    }
    return known[cbid] == 1;
  }

  static void CUPTIAPI onCallback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

  static void CUPTIAPI onBufferRequested(uint8_t** buffer, size_t* size, size_t* maxNumRecords) {
    const size_t bytes = gBufferBytes.load();
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, bytes));
    *size = *buffer != nullptr ? bytes : 0;
    *maxNumRecords = 0;  // as many as fit
  }

  static void CUPTIAPI onBufferCompleted(CUcontext context, uint32_t streamId, uint8_t* buffer,
                                         size_t /*size*/, size_t validSize) {
    {
      std::lock_guard<std::mutex> lock(gQueueMutex);
      if (gAccepting) {
        gQueue.push_back(Completed{buffer, validSize, context, streamId});
        return;
      }
    }
    std::free(buffer);
  }

  // The fields of a kernel, memcpy or memset record that attribution reads.
  template <typename Record>
  static void work(const Record& r, ActivityRecord::Kind kind, ActivityRecord* out) {
    out->kind = kind;
    out->correlationId = r.correlationId;
    out->startNs = r.start;
    out->endNs = r.end;
    out->deviceId = r.deviceId;
    out->streamId = r.streamId;
  }

  // The collection thread.
  void read(const Completed& c) {
    CUpti_Activity* record = nullptr;
    ActivityRecord out;
    while (c.validSize > 0 && api_.nextRecord(c.buffer, c.validSize, &record) == CUPTI_SUCCESS) {
      out = ActivityRecord();
      switch (record->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          const auto* k = reinterpret_cast<const KernelRecord*>(record);
          work(*k, ActivityRecord::Kind::kKernel, &out);
          out.name = k->name;
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY:
          work(*reinterpret_cast<const MemcpyRecord*>(record), ActivityRecord::Kind::kMemcpy, &out);
          break;
        case CUPTI_ACTIVITY_KIND_MEMSET:
          work(*reinterpret_cast<const MemsetRecord*>(record), ActivityRecord::Kind::kMemset, &out);
          break;
        case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
          const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
          if (e->externalKind != kExternalKind) continue;
          out.kind = ActivityRecord::Kind::kExternalCorrelation;
          out.correlationId = e->correlationId;
          out.externalId = e->externalId;
          break;
        }
        case CUPTI_ACTIVITY_KIND_RUNTIME:
        case CUPTI_ACTIVITY_KIND_DRIVER: {
          const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(record);
          out.kind = ActivityRecord::Kind::kApi;
          out.correlationId = a->correlationId;
          out.threadId = a->threadId;
          out.launchesWork =
              launchesWork(record->kind == CUPTI_ACTIVITY_KIND_RUNTIME ? CUPTI_CB_DOMAIN_RUNTIME_API
                                                                       : CUPTI_CB_DOMAIN_DRIVER_API,
                           a->cbid);
          break;
        }
        default:
          continue;
      }
      sink_(out);
    }
    size_t dropped = 0;
    if (api_.droppedRecords(c.context, c.streamId, &dropped) == CUPTI_SUCCESS && dropped > 0) {
      dropped_.fetch_add(dropped, std::memory_order_relaxed);
    }
  }

  Cupti api_;
  Sink sink_;
  bool started_ = false;
  bool kindsOn_ = false;
  bool quieted_ = false;
  std::chrono::steady_clock::time_point last_;
  std::vector<int8_t> runtime_, driver_;  // launchesWork() per callback id: -1 unknown
  std::atomic<uint64_t> dropped_{0};
};

}  // namespace

std::unique_ptr<GpuActivityApi> createCuptiActivityApi(std::string* reason) {
  // The CUPTI LibTorch (Kineto) loaded, so that a subscriber it holds is seen; else the one next
  // to the runtime, else the toolkit's found at build time.
  // Then PyTorch's own pip copy (nvidia/cu13 or nvidia/cuda_cupti next to torch), which is not
  // on the loader path and which Kineto loads only when a profiler first runs.
  static detail::DynamicLibrary lib(
      {"libcupti.so.13", "libcupti.so.12", "libcupti.so.11.8", "libcupti.so"}, [] {
        std::vector<std::string> names = {"libcupti.so", "libcupti.so.13", "libcupti.so.12"};
        for (const std::string& p :
             detail::torchRelativePaths(detail::loadedLibraryDir("libc10.so"), "cuda_cupti",
                                        "libcupti.so.13", "libcupti.so.12")) {
          names.push_back(p);
        }
        names.push_back(ATTNSCOPE_CUPTI_PATH);
        return names;
      }());
  if (!lib.ok()) {
    *reason = "CUPTI (libcupti) cannot be opened: " + lib.error();
    return nullptr;
  }
  Cupti api;
  if (!lib.bind(&api.subscribe, "cuptiSubscribe") ||
      !lib.bind(&api.unsubscribe, "cuptiUnsubscribe") ||
      !lib.bind(&api.enable, "cuptiActivityEnable") ||
      !lib.bind(&api.disable, "cuptiActivityDisable") ||
      !lib.bind(&api.registerCallbacks, "cuptiActivityRegisterCallbacks") ||
      !lib.bind(&api.flushAll, "cuptiActivityFlushAll") ||
      !lib.bind(&api.nextRecord, "cuptiActivityGetNextRecord") ||
      !lib.bind(&api.droppedRecords, "cuptiActivityGetNumDroppedRecords") ||
      !lib.bind(&api.push, "cuptiActivityPushExternalCorrelationId") ||
      !lib.bind(&api.pop, "cuptiActivityPopExternalCorrelationId") ||
      !lib.bind(&api.resultString, "cuptiGetResultString") ||
      !lib.bind(&api.callbackName, "cuptiGetCallbackName")) {
    *reason = lib.error();
    return nullptr;
  }
  lib.bind(&api.enableRuntimeApi, "cuptiActivityEnableRuntimeApi");  // optional
  lib.bind(&api.enableDriverApi, "cuptiActivityEnableDriverApi");
  return std::make_unique<CuptiActivityApi>(api);
}

#else

std::unique_ptr<GpuActivityApi> createCuptiActivityApi(std::string* reason) {
  *reason = "this build has no CUDA support (ATTNSCOPE_WITH_CUDA=OFF)";
  return nullptr;
}

#endif

}  // namespace attnscope
