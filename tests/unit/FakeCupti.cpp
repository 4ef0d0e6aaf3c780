// A fake libcupti.so.13 for CuptiLayerTest: the part of CUPTI's C API that attnscope's activity
// layer (collectors/src/CuptiActivityApi.cpp) calls, with CUPTI's documented behaviour where the
// layer depends on it: one subscriber at a time (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
// for a second), activity kinds and per-API records enabled process-wide, buffers asked for
// through the registered callback and handed back through the other one from CUPTI's own thread,
// records read with cuptiActivityGetNextRecord. The test reads and drives it through
// fakeCupti(). Records are kept in fixed-size slots (real CUPTI packs them; the reader does not
// depend on it).
#include <cupti.h>

#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "FakeCupti.h"

namespace {

constexpr size_t kSlot = 512;  // >= sizeof every record kind written here, 8-aligned
static_assert(sizeof(CUpti_ActivityKernel10) <= kSlot, "kernel record slot");

FakeCuptiState gState;
std::mutex gMutex;
CUpti_BuffersCallbackRequestFunc gRequest = nullptr;
CUpti_BuffersCallbackCompleteFunc gComplete = nullptr;

// Per-API records on (enable) or off.
CUptiResult setQuiet(std::set<uint32_t>* quiet, CUpti_CallbackId cbid, uint8_t enable) {
  std::lock_guard<std::mutex> lock(gMutex);
  if (enable) {
    quiet->erase(cbid);
  } else {
    quiet->insert(cbid);
  }
  return CUPTI_SUCCESS;
}

}  // namespace

extern "C" {

FakeCuptiState* fakeCupti() { return &gState; }

CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc, void*) {
  std::lock_guard<std::mutex> lock(gMutex);
  if (gState.failInit) return CUPTI_ERROR_NOT_INITIALIZED;
  if (gState.subscribers > 0) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  ++gState.subscribers;
  ++gState.subscribeCalls;
  *subscriber = reinterpret_cast<CUpti_SubscriberHandle>(0x1);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle) {
  std::lock_guard<std::mutex> lock(gMutex);
  if (gState.subscribers > 0) --gState.subscribers;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind) {
  std::lock_guard<std::mutex> lock(gMutex);
  gState.kinds.insert(static_cast<int>(kind));
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind) {
  std::lock_guard<std::mutex> lock(gMutex);
  gState.kinds.erase(static_cast<int>(kind));
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityEnableRuntimeApi(CUpti_CallbackId cbid, uint8_t enable) {
  return setQuiet(&gState.quietRuntime, cbid, enable);
}

CUptiResult CUPTIAPI cuptiActivityEnableDriverApi(CUpti_CallbackId cbid, uint8_t enable) {
  return setQuiet(&gState.quietDriver, cbid, enable);
}

CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                                    CUpti_BuffersCallbackCompleteFunc complete) {
  std::lock_guard<std::mutex> lock(gMutex);
  gRequest = request;
  gComplete = complete;
  return CUPTI_SUCCESS;
}

// Hands the queued records back in one buffer, from a thread of CUPTI's own.
CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t) {
  std::vector<std::vector<uint8_t>> records;
  CUpti_BuffersCallbackRequestFunc request;
  CUpti_BuffersCallbackCompleteFunc complete;
  {
    std::lock_guard<std::mutex> lock(gMutex);
    records.swap(gState.queued);
    request = gRequest;
    complete = gComplete;
  }
  if (records.empty() || request == nullptr) return CUPTI_SUCCESS;
  std::thread cuptiThread([&] {
    uint8_t* buffer = nullptr;
    size_t size = 0, maxRecords = 0;
    request(&buffer, &size, &maxRecords);
    gState.bufferBytes = size;
    if (buffer == nullptr || size < records.size() * kSlot) return;
    for (size_t i = 0; i < records.size(); ++i) {
      std::memcpy(buffer + i * kSlot, records[i].data(), records[i].size());
    }
    complete(nullptr, 0, buffer, size, records.size() * kSlot);
  });
  cuptiThread.join();
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t* buffer, size_t validBufferSizeBytes,
                                                CUpti_Activity** record) {
  uint8_t* next = *record == nullptr ? buffer : reinterpret_cast<uint8_t*>(*record) + kSlot;
  if (next + kSlot > buffer + validBufferSizeBytes) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = reinterpret_cast<CUpti_Activity*>(next);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  *dropped = 0;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind,
                                                            uint64_t) {
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind,
                                                           uint64_t*) {
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char** str) {
  *str = result == CUPTI_ERROR_NOT_INITIALIZED ? "CUPTI_ERROR_NOT_INITIALIZED" : "CUPTI_ERROR";
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetCallbackName(CUpti_CallbackDomain domain, uint32_t cbid,
                                          const char** name) {
  static const std::map<uint32_t, const char*> runtime = {
      {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, "cudaLaunchKernel"},
      {CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, "cudaMemcpyAsync"},
      {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchHostFunc_v10000, "cudaLaunchHostFunc"},
      {CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, "cudaMalloc"}};
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API) return CUPTI_ERROR_INVALID_PARAMETER;
  const auto it = runtime.find(cbid);
  if (it == runtime.end()) return CUPTI_ERROR_INVALID_PARAMETER;
  *name = it->second;
  return CUPTI_SUCCESS;
}

}  // extern "C"
