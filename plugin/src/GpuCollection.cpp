#include "GpuCollection.h"

#include <chrono>
#include <functional>
#include <utility>

#include "AutogradProbe.h"
#include "CudaTorch.h"
#include "GpuTesting.h"
#include "Recorder.h"
#include "attnscope/core/Log.h"
#include "attnscope/reporter/InternalThread.h"

namespace attnscope {
namespace detail {
namespace {

GpuStream noStream() { return GpuStream{}; }

std::mutex gTestingMutex;
std::function<GpuLayers()>& testingLayers() {
  static std::function<GpuLayers()> factory;
  return factory;
}

}  // namespace

void setGpuLayersForTesting(std::function<GpuLayers()> factory) {
  std::lock_guard<std::mutex> lock(gTestingMutex);
  testingLayers() = std::move(factory);
}

GpuCollection::GpuCollection(const Config& config, Recorder& recorder)
    : config_(config), recorder_(recorder), deviceStats_(config.maxLayers) {}

GpuCollection::~GpuCollection() {
  // Sessions are retired, not destroyed, once started; this covers a start() that failed after
  // begin(): a joinable thread must not be destroyed.
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(wakeMutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
}

void GpuCollection::start() {
  if (config_.gpuTiming == GpuTiming::kOff) return;
  {
    std::lock_guard<std::mutex> lock(gTestingMutex);
    if (testingLayers()) {
      GpuLayers layers = testingLayers()();
      stream_ = layers.stream;
      timer_ = std::make_unique<GpuTimer>(std::move(layers.events), std::move(layers.activity),
                                          layers.stream, GpuTimer::Options());
    }
  }
  if (timer_) {
    timer_->start(config_.gpuTiming, kinetoProfilerRunning(), "");
  } else {
    std::string unavailable;
    const CurrentStreamFn stream = torchCurrentStreamFn();
    if (stream == nullptr) {
      unavailable = "LibTorch was built without CUDA";
    } else if (!acceleratorAvailable()) {
      unavailable = "no CUDA device visible to LibTorch";
    }
    std::unique_ptr<GpuEventApi> events;
    std::unique_ptr<GpuActivityApi> activity;
    if (unavailable.empty()) {
      std::string eventsWhy, activityWhy;
      events = createCudaEventApi(&eventsWhy);
      if (config_.gpuTiming != GpuTiming::kEvents) activity = createCuptiActivityApi(&activityWhy);
      if (!events) ATTNSCOPE_LOG(kWarn, "CUDA events unavailable: " << eventsWhy);
      if (!activity && !activityWhy.empty())
        ATTNSCOPE_LOG(kInfo, "CUPTI unavailable: " << activityWhy);
    }
    stream_ = stream != nullptr ? stream : &noStream;
    timer_ = std::make_unique<GpuTimer>(std::move(events), std::move(activity), stream_,
                                        GpuTimer::Options());
    timer_->start(config_.gpuTiming, unavailable.empty() && kinetoProfilerRunning(), unavailable);
  }
  active_ = timer_->source() != GpuTiming::kOff;
  if (active_) thread_ = std::thread([this] { loop(); });
}

void GpuCollection::stepEnded() {
  if (!active_) return;
  timer_->closeBackward();  // the step's backward spans are complete on the host
  const int device = stream_().device;
  if (device >= 0) timer_->noteDevice(device);
  if (timer_->usesCupti() && kinetoProfilerRunning()) timer_->profilerStarted();
}

void GpuCollection::loop() {
  markInternalThread();
  while (true) {
    {
      std::unique_lock<std::mutex> lock(wakeMutex_);
      if (wake_.wait_for(lock, std::chrono::milliseconds(200), [this] { return stopping_; })) {
        break;
      }
    }
    try {
      addDeviceCalls(timer_->collect(false));
      const int device = timer_->lastDevice();
      GpuStatus memory;
      if (device >= 0 && torchAllocatorStats(device, &memory)) {
        std::lock_guard<std::mutex> lock(statsMutex_);
        allocator_ = memory;
      }
    } catch (const std::exception& e) {
      ATTNSCOPE_LOG(kError, "GPU collection failed, device timing stops: " << e.what());
      break;
    }
  }
  // The final collection and CUPTI's release run here, on attnscope's thread.
  bool profilerRunning;
  {
    std::lock_guard<std::mutex> lock(wakeMutex_);
    profilerRunning = profilerAtStop_;
  }
  try {
    addDeviceCalls(timer_->collect(/*final=*/true));  // what the device has finished by now
  } catch (const std::exception& e) {
    ATTNSCOPE_LOG(kError, "GPU collection at stop failed: " << e.what());
  }
  timer_->stop(profilerRunning);
}

void GpuCollection::stop() {
  if (!active_) return;
  const bool profilerRunning = kinetoProfilerRunning();  // the profiler's state is per thread
  {
    std::lock_guard<std::mutex> lock(wakeMutex_);
    stopping_ = true;
    profilerAtStop_ = profilerRunning;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void GpuCollection::addDeviceCalls(const std::vector<CallRecord>& calls) {
  if (calls.empty()) return;
  // Only this thread adds layers to the table (the collection thread, or stop() after joining
  // it), so its size read here still holds below; the recorder's lock is never held with ours.
  size_t known;
  {
    std::lock_guard<std::mutex> lock(statsMutex_);
    known = deviceStats_.layers().size();
  }
  const std::vector<std::string> newer = recorder_.layerNamesFrom(known);  // ids stay aligned
  std::lock_guard<std::mutex> lock(statsMutex_);
  for (const std::string& name : newer) deviceStats_.layerId(name);
  for (const CallRecord& c : calls) deviceStats_.add(c);
}

StatsTable GpuCollection::deviceStatistics() {
  std::lock_guard<std::mutex> lock(statsMutex_);
  return deviceStats_;
}

GpuStatus GpuCollection::status(const std::vector<std::string>& layerNames) {
  GpuStatus s = timer_ ? timer_->status() : GpuStatus();  // the timer has a lock of its own
  if (!timer_) s.requested = config_.gpuTiming;
  {
    std::lock_guard<std::mutex> lock(statsMutex_);
    s.device = allocator_.device >= 0 ? allocator_.device : (timer_ ? timer_->lastDevice() : -1);
    s.allocatedBytes = allocator_.allocatedBytes;
    s.reservedBytes = allocator_.reservedBytes;
    s.peakAllocatedBytes = allocator_.peakAllocatedBytes;
    s.peakReservedBytes = allocator_.peakReservedBytes;
  }
  // The timer's list is indexed by layer id: name it, keep the layers that ran kernels.
  std::vector<GpuStatus::LayerBackends> named;
  for (size_t id = 0; id < s.backends.size() && id < layerNames.size(); ++id) {
    uint64_t kernels = 0;
    for (const uint64_t k : s.backends[id].kernels) kernels += k;
    if (kernels == 0) continue;
    named.push_back(s.backends[id]);
    named.back().layer = layerNames[id];
  }
  s.backends = std::move(named);
  return s;
}

}  // namespace detail
}  // namespace attnscope
