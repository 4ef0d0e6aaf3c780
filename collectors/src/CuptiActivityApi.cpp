// CUPTI's activity API, opened at run time (GpuActivityApi.h).
#include "attnscope/collectors/GpuActivityApi.h"

#if ATTNSCOPE_WITH_CUDA
#include <cupti.h>
#include <cupti_activity_deprecated.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <mutex>

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
using MemcpyRecord = CUpti_ActivityMemcpy6;
ATTNSCOPE_SAME_OFFSET(MemcpyRecord, CUpti_ActivityMemcpy4, start);
ATTNSCOPE_SAME_OFFSET(MemcpyRecord, CUpti_ActivityMemcpy4, end);
ATTNSCOPE_SAME_OFFSET(MemcpyRecord, CUpti_ActivityMemcpy4, deviceId);
ATTNSCOPE_SAME_OFFSET(MemcpyRecord, CUpti_ActivityMemcpy4, correlationId);
ATTNSCOPE_SAME_OFFSET(MemcpyRecord, CUpti_ActivityMemcpy5, correlationId);
using MemsetRecord = CUpti_ActivityMemset4;
ATTNSCOPE_SAME_OFFSET(MemsetRecord, CUpti_ActivityMemset3, start);
ATTNSCOPE_SAME_OFFSET(MemsetRecord, CUpti_ActivityMemset3, end);
ATTNSCOPE_SAME_OFFSET(MemsetRecord, CUpti_ActivityMemset3, deviceId);
ATTNSCOPE_SAME_OFFSET(MemsetRecord, CUpti_ActivityMemset3, correlationId);
#undef ATTNSCOPE_SAME_OFFSET

// attnscope's kind of external correlation; Kineto uses CUSTOM0 and CUSTOM1.
constexpr CUpti_ExternalCorrelationKind kExternalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2;
constexpr size_t kBufferBytes = 4u << 20;
constexpr size_t kBufferAlign = 8;  // ACTIVITY_RECORD_ALIGNMENT

// Kernels, copies and fills are the work timed; external-correlation records map each CUDA API
// call made while an id was pushed to that id. They are emitted for API activity records, so the
// runtime and driver API kinds are enabled too (their records are skipped).
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                         CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET,
                                         CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
                                         CUPTI_ACTIVITY_KIND_RUNTIME,
                                         CUPTI_ACTIVITY_KIND_DRIVER};

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
};

class CuptiActivityApi;
// CUPTI's buffer callbacks carry no user pointer: the one started instance.
std::atomic<CuptiActivityApi*> gActive{nullptr};

class CuptiActivityApi final : public GpuActivityApi {
 public:
  explicit CuptiActivityApi(const Cupti& api) : api_(api) {}
  const char* name() const override { return "cupti"; }

  bool start(Sink sink, std::string* reason) override {
    CUptiResult r = api_.subscribe(&subscriber_, &CuptiActivityApi::onCallback, nullptr);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
      *reason = "CUPTI is held by another subscriber (torch.profiler/Kineto, DCGM or Nsight)";
      return false;
    }
    if (r != CUPTI_SUCCESS) {
      *reason = "cuptiSubscribe failed: " + text(r);
      return false;
    }
    sink_ = std::move(sink);
    CuptiActivityApi* expected = nullptr;
    if (!gActive.compare_exchange_strong(expected, this)) {
      api_.unsubscribe(subscriber_);
      *reason = "CUPTI is already used by another attnscope session";
      return false;
    }
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
      api_.unsubscribe(subscriber_);
      gActive.store(nullptr);
      *reason = "CUPTI activity API unavailable: " + text(r);
      return false;
    }
    started_ = true;
    return true;
  }

  void flush(bool forced) override {
    if (started_) api_.flushAll(forced ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
  }

  void stop() override {
    if (!started_) return;
    for (const CUpti_ActivityKind k : kKinds) api_.disable(k);
    api_.flushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    api_.unsubscribe(subscriber_);
    gActive.store(nullptr);
    started_ = false;
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

  // A subscriber with no callbacks enabled: held only so that CUPTI reports a second one.
  static void CUPTIAPI onCallback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

  static void CUPTIAPI onBufferRequested(uint8_t** buffer, size_t* size, size_t* maxNumRecords) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferBytes));
    *size = *buffer != nullptr ? kBufferBytes : 0;
    *maxNumRecords = 0;  // as many as fit
  }

  static void CUPTIAPI onBufferCompleted(CUcontext context, uint32_t streamId, uint8_t* buffer,
                                         size_t /*size*/, size_t validSize) {
    CuptiActivityApi* self = gActive.load();
    if (self != nullptr && validSize > 0) self->read(context, streamId, buffer, validSize);
    std::free(buffer);
  }

  // CUPTI's buffer thread (or the flushing thread).
  void read(CUcontext context, uint32_t streamId, uint8_t* buffer, size_t validSize) {
    CUpti_Activity* record = nullptr;
    ActivityRecord out;
    while (api_.nextRecord(buffer, validSize, &record) == CUPTI_SUCCESS) {
      switch (record->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          const auto* k = reinterpret_cast<const KernelRecord*>(record);
          out = ActivityRecord{ActivityRecord::Kind::kKernel,
                               k->correlationId,
                               0,
                               k->start,
                               k->end,
                               k->deviceId,
                               k->name};
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto* m = reinterpret_cast<const MemcpyRecord*>(record);
          out = ActivityRecord{ActivityRecord::Kind::kMemcpy,
                               m->correlationId,
                               0,
                               m->start,
                               m->end,
                               m->deviceId,
                               nullptr};
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          const auto* m = reinterpret_cast<const MemsetRecord*>(record);
          out = ActivityRecord{ActivityRecord::Kind::kMemset,
                               m->correlationId,
                               0,
                               m->start,
                               m->end,
                               m->deviceId,
                               nullptr};
          break;
        }
        case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
          const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
          if (e->externalKind != kExternalKind) continue;
          out = ActivityRecord{ActivityRecord::Kind::kExternalCorrelation,
                               e->correlationId,
                               e->externalId,
                               0,
                               0,
                               0,
                               nullptr};
          break;
        }
        default:
          continue;  // runtime and driver API records
      }
      sink_(out);
    }
    size_t dropped = 0;
    if (api_.droppedRecords(context, streamId, &dropped) == CUPTI_SUCCESS && dropped > 0) {
      dropped_.fetch_add(dropped, std::memory_order_relaxed);
    }
  }

  Cupti api_;
  Sink sink_;
  CUpti_SubscriberHandle subscriber_ = nullptr;
  bool started_ = false;
  std::atomic<uint64_t> dropped_{0};
};

}  // namespace

std::unique_ptr<GpuActivityApi> createCuptiActivityApi(std::string* reason) {
  // The CUPTI LibTorch (Kineto) loaded, so that a subscriber it holds is seen; else the one next
  // to the runtime, else the toolkit's found at build time.
  static detail::DynamicLibrary lib(
      {"libcupti.so.13", "libcupti.so.12", "libcupti.so.11.8", "libcupti.so"},
      {"libcupti.so", "libcupti.so.13", "libcupti.so.12", ATTNSCOPE_CUPTI_PATH});
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
      !lib.bind(&api.resultString, "cuptiGetResultString")) {
    *reason = lib.error();
    return nullptr;
  }
  return std::make_unique<CuptiActivityApi>(api);
}

#else

std::unique_ptr<GpuActivityApi> createCuptiActivityApi(std::string* reason) {
  *reason = "this build has no CUDA support (ATTNSCOPE_WITH_CUDA=OFF)";
  return nullptr;
}

#endif

}  // namespace attnscope
