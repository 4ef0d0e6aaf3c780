#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace attnscope {

// One device activity record, reduced to what attribution needs.
struct ActivityRecord {
  enum class Kind : uint8_t { kKernel, kMemcpy, kMemset, kExternalCorrelation };
  Kind kind = Kind::kKernel;
  uint32_t correlationId = 0;  // the CUDA API call that launched the work
  uint64_t externalId = 0;     // kExternalCorrelation: the id attnscope pushed for that call
  uint64_t startNs = 0;        // device work: start and end timestamps (ns, CUPTI's clock)
  uint64_t endNs = 0;
  uint32_t deviceId = 0;
  const char* name = nullptr;  // kernels: the (mangled) kernel name, valid during the sink call
};

// The activity layer: CUPTI's activity API behind an interface, so that correlation and
// attribution are tested without a GPU (tests: FakeGpuActivityApi) and no CUPTI header reaches
// code that does not need it.
//
// start() subscribes and enables kernel (concurrent), memcpy, memset and external-correlation
// records; the records reach `sink` on the thread that completes a buffer (CUPTI's own thread,
// or the one calling flush()). CUPTI allows one subscriber per process: when torch.profiler
// (Kineto), DCGM or Nsight holds it, start() fails with the reason and attnscope falls back to
// CUDA events.
class GpuActivityApi {
 public:
  using Sink = std::function<void(const ActivityRecord&)>;

  virtual ~GpuActivityApi() = default;
  virtual const char* name() const = 0;
  // \return false with `reason` set when the activity API cannot be used.
  virtual bool start(Sink sink, std::string* reason) = 0;
  // Delivers completed buffers to the sink; `forced` also delivers incomplete ones (at stop).
  // Never synchronises the device.
  virtual void flush(bool forced) = 0;
  virtual void stop() = 0;
  // Work launched on the calling thread until the matching pop carries `id` (nested: innermost).
  virtual void pushExternalId(uint64_t id) = 0;
  virtual void popExternalId() = 0;
  // Records CUPTI dropped because its buffers were full, since start().
  virtual uint64_t droppedRecords() = 0;
};

// CUPTI behind GpuActivityApi: libcupti is opened at run time (the one already loaded by
// LibTorch/Kineto when there is one, else libcupti.so, else the toolkit's found at build time).
// Null with `reason` set when this build has no CUDA support or the library cannot be opened.
std::unique_ptr<GpuActivityApi> createCuptiActivityApi(std::string* reason);

}  // namespace attnscope
