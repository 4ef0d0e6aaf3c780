#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace attnscope {

// One device activity record, reduced to what attribution needs.
struct ActivityRecord {
  // kApi: a CUDA runtime or driver API call (CUPTI emits external-correlation records only for
  // API records, so they come anyway); it tells the call's thread and whether it queued work
  // that CUPTI records.
  enum class Kind : uint8_t { kKernel, kMemcpy, kMemset, kExternalCorrelation, kApi };
  Kind kind = Kind::kKernel;
  uint32_t correlationId = 0;  // the CUDA API call (that launched the work)
  uint64_t externalId = 0;     // kExternalCorrelation: the id attnscope pushed for that call
  uint64_t startNs = 0;        // device work: start and end timestamps (ns, CUPTI's clock);
  uint64_t endNs = 0;          // end 0: incomplete (a forced flush hands in-flight work over)
  uint32_t deviceId = 0;
  const char* name = nullptr;  // kernels: the (mangled) kernel name, valid during the sink call
  uint32_t threadId = 0;       // kApi: the calling thread
  bool launchesWork = false;   // kApi: a kernel launch, copy, fill or graph launch
  uint32_t streamId = 0;       // device work: CUPTI's id of the stream it ran on
};

// The size of the next activity buffer: CUPTI hands a buffer back only once every record in it
// is complete (or at a forced flush), so a buffer that takes seconds to fill holds its records
// back for seconds. Sized to fill in about a tenth of a second at the rate records were
// delivered, between 64 KiB and 4 MiB (Kineto's size, the top of CUPTI's advice).
size_t activityBufferBytes(double bytesPerSecond);

// The activity layer: CUPTI's activity API behind an interface, so that correlation and
// attribution are tested without a GPU (tests: FakeGpuActivityApi) and no CUPTI header reaches
// code that does not need it.
//
// start() enables kernel (concurrent), memcpy, memset, external-correlation and API records
// and registers the buffer callbacks; it holds no CUPTI subscription (a subscriber held would
// make torch.profiler's Kineto fail its own and trace CPU-only for the rest of the process): it
// only probes that no other tool (DCGM, Nsight, a Kineto that subscribed) holds one. CUPTI's
// buffer callback only queues completed buffers; flush() parses them and calls `sink` on the
// calling (collection) thread.
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
  // Disables what start() enabled. `profilerRunning`: another tool (torch.profiler) took CUPTI
  // over and is tracing; its kinds are left to it (disabling them would empty its trace).
  virtual void stop(bool profilerRunning) = 0;
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
