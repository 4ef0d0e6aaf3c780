#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "attnscope/collectors/GpuTimer.h"
#include "attnscope/core/Config.h"
#include "attnscope/core/GpuStatus.h"
#include "attnscope/core/StatsTable.h"

namespace attnscope {
namespace detail {

class Recorder;

// Device timing (docs/GPU.md) and its one owner: the GPU timer (CUDA events, CUPTI), the
// collection thread that reads them every 200 ms, the device-seconds table (same layer ids as the
// recorder's) and the caching allocator's last figures. The test seam (GpuTesting.h) hands in
// Fake layers. statsMutex_ guards the table and the allocator figures, wakeMutex_ the thread's
// stop flag.
class GpuCollection {
 public:
  GpuCollection(const Config& config, Recorder& recorder);
  ~GpuCollection();  // joins the thread when start() ran and stop() did not

  // Chooses the source (the test seam's layers, CUDA's, or none, saying why) and starts the
  // collection thread when device timing runs.
  void start();
  // The timer while device timing runs, else null.
  GpuTimer* active() const { return active_ ? timer_.get() : nullptr; }
  // A step ended (training thread): its backward spans are complete on the host; notes the
  // device in use (for the allocator's figures, whatever the source) and whether torch.profiler
  // started.
  void stepEnded();
  // Stops the thread, which collects what the device has finished (waiting for nothing) and
  // gives CUPTI back before it ends: the caller's thread (the training thread) is left as it
  // was, no device set, no capture mode changed.
  void stop();

  StatsTable deviceStatistics();
  // The timer's and the allocator's status, the timer's per-layer backends named by `layerNames`
  // (the recorder's, by layer id).
  GpuStatus status(const std::vector<std::string>& layerNames);

 private:
  void loop();
  void addDeviceCalls(const std::vector<CallRecord>& calls);

  const Config& config_;
  Recorder& recorder_;
  std::unique_ptr<GpuTimer> timer_;
  CurrentStreamFn stream_ = nullptr;
  bool active_ = false;
  std::mutex statsMutex_;
  StatsTable deviceStats_;
  GpuStatus allocator_;  // the caching allocator's figures, last read
  std::mutex wakeMutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool profilerAtStop_ = false;  // torch.profiler was running on the thread that stopped us
  std::thread thread_;
};

}  // namespace detail
}  // namespace attnscope
