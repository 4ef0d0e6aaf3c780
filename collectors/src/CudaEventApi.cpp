// CUDA events through the CUDA runtime, opened at run time (GpuEventApi.h).
#include "attnscope/collectors/GpuEventApi.h"

#if ATTNSCOPE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "DynamicLibrary.h"
#endif

namespace attnscope {

#if ATTNSCOPE_WITH_CUDA
namespace {

// The entry points used, typed from the toolkit's own declarations.
struct Cudart {
  decltype(&::cudaEventCreateWithFlags) eventCreateWithFlags = nullptr;
  decltype(&::cudaEventRecord) eventRecord = nullptr;
  decltype(&::cudaEventQuery) eventQuery = nullptr;
  decltype(&::cudaEventElapsedTime) eventElapsedTime = nullptr;
  decltype(&::cudaEventDestroy) eventDestroy = nullptr;
  decltype(&::cudaGetDevice) getDevice = nullptr;
  decltype(&::cudaSetDevice) setDevice = nullptr;
  decltype(&::cudaGetLastError) getLastError = nullptr;
  decltype(&::cudaStreamIsCapturing) streamIsCapturing = nullptr;
  decltype(&::cudaThreadExchangeStreamCaptureMode) exchangeCaptureMode = nullptr;
};

class CudaEventApi final : public GpuEventApi {
 public:
  explicit CudaEventApi(const Cudart& rt) : rt_(rt) {}
  const char* name() const override { return "cuda-runtime"; }

  Event create(int device) override {
    int current = -1;
    if (rt_.getDevice(&current) != cudaSuccess) return fail(nullptr);
    if (current != device && rt_.setDevice(device) != cudaSuccess) return fail(nullptr);
    cudaEvent_t e = nullptr;
    // Timing events (no cudaEventDisableTiming); default flags: a query never blocks.
    const cudaError_t err = rt_.eventCreateWithFlags(&e, cudaEventDefault);
    if (current != device) rt_.setDevice(current);
    return err == cudaSuccess ? static_cast<Event>(e) : fail(nullptr);
  }

  bool record(Event event, Stream stream, int /*device*/) override {
    // The stream belongs to the calling thread's current device, where the event was created.
    if (rt_.eventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)) ==
        cudaSuccess) {
      return true;
    }
    return fail(false);
  }

  bool capturing(Stream stream, int /*device*/) override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (rt_.streamIsCapturing(static_cast<cudaStream_t>(stream), &status) != cudaSuccess) {
      return fail(true);  // cannot tell: do not time
    }
    return status != cudaStreamCaptureStatusNone;
  }

  Query query(Event event, int device) override {
    if (!useDevice(device)) return Query::kError;
    const cudaError_t err = rt_.eventQuery(static_cast<cudaEvent_t>(event));
    if (err == cudaSuccess) return Query::kReady;
    rt_.getLastError();  // cudaErrorNotReady is recorded as the thread's last error
    return err == cudaErrorNotReady ? Query::kPending : Query::kError;
  }

  bool elapsedMs(Event start, Event end, int device, float* ms) override {
    if (!useDevice(device)) return false;
    if (rt_.eventElapsedTime(ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)) ==
        cudaSuccess) {
      return true;
    }
    return fail(false);
  }

  void destroy(Event event, int device) override {
    if (useDevice(device)) rt_.eventDestroy(static_cast<cudaEvent_t>(event));
  }

 private:
  // A failed call leaves its error as the thread's last error, where LibTorch's next launch
  // check would take it for its own: clear it.
  template <typename T>
  T fail(T value) {
    rt_.getLastError();
    return value;
  }
  // The reporter thread makes the events' device current once, so that no call creates a
  // context on another device; and it relaxes its stream-capture mode once, so that its queries
  // are not refused (and do not invalidate) while the training thread captures a CUDA graph in
  // the default, global mode (events recorded inside a capture are never queried: see
  // capturing()).
  bool useDevice(int device) {
    thread_local int tDevice = -1;
    thread_local bool tRelaxed = false;
    if (!tRelaxed) {
      cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
      if (rt_.exchangeCaptureMode(&mode) != cudaSuccess) return fail(false);
      tRelaxed = true;
    }
    if (tDevice == device) return true;
    if (rt_.setDevice(device) != cudaSuccess) return fail(false);
    tDevice = device;
    return true;
  }

  Cudart rt_;
};

}  // namespace

std::unique_ptr<GpuEventApi> createCudaEventApi(std::string* reason) {
  // The runtime LibTorch loaded (PyTorch wheels: libcudart.so.12 or .13), else the toolkit's.
  static detail::DynamicLibrary lib(
      {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"}, [] {
        std::vector<std::string> names = {ATTNSCOPE_CUDART_PATH, "libcudart.so", "libcudart.so.13",
                                          "libcudart.so.12"};
        for (const std::string& p :
             detail::torchRelativePaths(detail::loadedLibraryDir("libc10.so"), "cuda_runtime",
                                        "libcudart.so.13", "libcudart.so.12")) {
          names.push_back(p);
        }
        return names;
      }());
  if (!lib.ok()) {
    *reason = "the CUDA runtime (libcudart) cannot be opened: " + lib.error();
    return nullptr;
  }
  Cudart rt;
  if (!lib.bind(&rt.eventCreateWithFlags, "cudaEventCreateWithFlags") ||
      !lib.bind(&rt.eventRecord, "cudaEventRecord") ||
      !lib.bind(&rt.eventQuery, "cudaEventQuery") ||
      !lib.bind(&rt.eventElapsedTime, "cudaEventElapsedTime") ||
      !lib.bind(&rt.eventDestroy, "cudaEventDestroy") ||
      !lib.bind(&rt.getDevice, "cudaGetDevice") || !lib.bind(&rt.setDevice, "cudaSetDevice") ||
      !lib.bind(&rt.getLastError, "cudaGetLastError") ||
      !lib.bind(&rt.streamIsCapturing, "cudaStreamIsCapturing") ||
      !lib.bind(&rt.exchangeCaptureMode, "cudaThreadExchangeStreamCaptureMode")) {
    *reason = lib.error();
    return nullptr;
  }
  return std::make_unique<CudaEventApi>(rt);
}

#else

std::unique_ptr<GpuEventApi> createCudaEventApi(std::string* reason) {
  *reason = "this build has no CUDA support (ATTNSCOPE_WITH_CUDA=OFF)";
  return nullptr;
}

#endif

}  // namespace attnscope
