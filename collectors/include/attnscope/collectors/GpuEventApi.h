#pragma once

#include <memory>
#include <string>

namespace attnscope {

// The event layer: what the GPU timer needs from CUDA events, behind an interface so that the
// timing logic is tested without a GPU (tests: FakeGpuEventApi) and so that no CUDA header
// reaches code that does not need it. Handles are opaque (cudaEvent_t, cudaStream_t).
//
// Thread use: create/record on the training (or autograd) thread that owns the stream; query,
// elapsed and destroy on the reporter thread. `device` is the CUDA device index the event
// and stream belong to; implementations make it current on the calling thread when needed
// (a query must never create a context on another device).
class GpuEventApi {
 public:
  using Event = void*;
  using Stream = void*;
  enum class Query { kReady, kPending, kError };

  virtual ~GpuEventApi() = default;
  virtual const char* name() const = 0;
  // A timing-capable event on `device`; null on failure.
  virtual Event create(int device) = 0;
  // Enqueues the event on `stream`; never waits for the stream.
  virtual bool record(Event event, Stream stream, int device) = 0;
  // True while `stream` is being captured into a CUDA graph: an event recorded then becomes a
  // graph node, and querying it would break the capture, so such calls are not timed.
  // Optional; layers that cannot tell say no.
  virtual bool capturing(Stream /*stream*/, int /*device*/) { return false; }
  // Whether the work before the event has completed; never waits.
  virtual Query query(Event event, int device) = 0;
  // Milliseconds between two completed events of the same device.
  virtual bool elapsedMs(Event start, Event end, int device, float* ms) = 0;
  virtual void destroy(Event event, int device) = 0;
};

// The CUDA runtime behind GpuEventApi: libcudart is opened at run time (the one LibTorch loaded,
// else libcudart.so), so libattnscope loads on machines without CUDA. Null with `reason` set when
// this build has no CUDA support or the library cannot be opened.
std::unique_ptr<GpuEventApi> createCudaEventApi(std::string* reason);

}  // namespace attnscope
