#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "attnscope/collectors/GpuActivityApi.h"
#include "attnscope/collectors/GpuEventApi.h"
#include "attnscope/collectors/GpuEventPool.h"
#include "attnscope/collectors/KernelAttributor.h"
#include "attnscope/core/Config.h"
#include "attnscope/core/GpuStatus.h"
#include "attnscope/core/StatsTable.h"

namespace attnscope {

// The stream work is being queued on by the calling thread (LibTorch's current CUDA stream)
// and its device; handle null means the legacy default stream.
struct GpuStream {
  void* handle = nullptr;
  int device = -1;  // -1: no CUDA device in use on this thread
};
using CurrentStreamFn = GpuStream (*)();

// Device time per attention call, layer, phase and op kind (docs/GPU.md). Two sources behind
// small interfaces: CUDA events (GpuEventApi) around each call, and CUPTI activity records
// (GpuActivityApi) attributed through external correlation ids (KernelAttributor).
//
// Training and autograd threads only record events and push/pop correlation ids; the reporter
// thread reads events back with a non-blocking query and takes CUPTI's buffers; nothing here
// ever synchronises a stream or the device.
class GpuTimer {
 public:
  struct Options {
    size_t eventPoolCapacity = 8192;  // events in flight at most (2 per call and phase)
    // CUPTI counts as silent (gone to another tool, or never delivering) when this many
    // attention calls ended on the host since it last delivered a record. CUDA lets a stream
    // queue about a thousand launches ahead of the device, so a working CUPTI delivers well
    // within this many calls.
    uint64_t silentAfterCalls = 4096;
  };

  GpuTimer(std::unique_ptr<GpuEventApi> events, std::unique_ptr<GpuActivityApi> activity,
           CurrentStreamFn currentStream, Options options);
  ~GpuTimer();

  // Chooses the source and starts CUPTI when it is used:
  //  off                      -> off
  //  device unusable          -> off ("unavailable" says why)
  //  events                   -> events (off when the event layer is missing)
  //  auto, cupti, both        -> CUPTI (both: plus events) when torch.profiler is not running
  //                              and CUPTI's activity API can be taken; else events, with the
  //                              reason logged once and kept in status().fallbackReason.
  void start(GpuTiming requested, bool profilerRunning, const std::string& unavailable);
  // Gives CUPTI back (disables what attnscope enabled, unless `profilerRunning`: torch.profiler
  // took it over and its trace needs those kinds). Call after the final collect().
  void stop(bool profilerRunning = false);
  GpuTiming source() const { return source_.load(std::memory_order_relaxed); }
  bool usesEvents() const {
    const GpuTiming s = source();
    return s == GpuTiming::kEvents || s == GpuTiming::kBoth;
  }
  bool usesCupti() const {
    const GpuTiming s = source();
    return s == GpuTiming::kCupti || s == GpuTiming::kBoth;
  }
  // torch.profiler began while attnscope used CUPTI: its records now go to Kineto, so attnscope
  // stops pushing ids and times calls with events from here on (logged once).
  void profilerStarted();

  // --- training / autograd threads --------------------------------------------------------
  // Forward and recompute calls: events at the scope's edges on the current stream.
  struct Span {
    GpuEventApi::Event start = nullptr;
    GpuEventApi::Event end = nullptr;
    int device = -1;
  };
  void callBegin(Span* span);
  void callEnd(Span* span, uint64_t instance, int32_t layer, Phase phase);
  // CUPTI: the id of the running op (or node); returns whether it was pushed (pop only then).
  bool pushOp(const DeviceKey& key);
  void popOp(bool pushed);
  // Backward: the first node of a call instance records its start event, every node's end
  // records the end event again, so that the span runs from the first node to the last.
  void nodeBegin(uint64_t instance, int32_t layer);
  void nodeEnd(uint64_t instance);
  // Step boundary: the step's backward spans are complete on the host; hand them to the reporter.
  void closeBackward();

  // --- reporter thread ----------------------------------------------------------------------
  // Reads back completed events, takes CUPTI's completed buffers, and returns the device
  // records of the calls that are complete. final (at stop): everything, without waiting.
  std::vector<CallRecord> collect(bool final);
  // Counters, source and fallback; backends[i] are layer id i's (names left empty).
  GpuStatus status() const;
  // The device of the last call timed with events, or noted at a step's end (-1: none yet).
  int lastDevice() const { return lastDevice_.load(std::memory_order_relaxed); }
  void noteDevice(int device) {
    if (lastDevice_.load(std::memory_order_relaxed) != device) lastDevice_.store(device);
  }

 private:
  struct Pending {
    Span span;
    uint64_t instance;
    int32_t layer;
    Phase phase;
  };
  void fallBack(GpuTiming to, const std::string& reason);
  // Leaves CUPTI for events from the next call on (a profiler took it, or it went silent).
  void yieldCupti(const std::string& reason);
  void queue(const Pending& p);

  std::unique_ptr<GpuEventApi> events_;
  std::unique_ptr<GpuActivityApi> activity_;
  std::unique_ptr<GpuEventPool> pool_;
  CurrentStreamFn currentStream_;
  Options options_;
  KernelAttributor attributor_;
  std::atomic<GpuTiming> source_{GpuTiming::kOff};
  std::atomic<bool> cuptiStarted_{false};
  std::atomic<bool> cuptiYielded_{false};  // torch.profiler took over CUPTI: never stop it
  std::atomic<int> lastDevice_{-1};

  mutable std::mutex statusMutex_;
  GpuTiming requested_ = GpuTiming::kAuto;
  std::string fallbackReason_;

  std::mutex pendingMutex_;
  std::vector<Pending> pending_;

  std::mutex backwardMutex_;
  std::unordered_map<uint64_t, Pending> backward_;       // open backward spans by call instance
  std::unordered_map<uint64_t, int32_t> backwardCalls_;  // CUPTI: open backward calls' layers

  std::atomic<uint64_t> hostEnds_{0};  // attention calls ended on the host (CUPTI)
  uint64_t deliveredSeen_ = 0;         // collection thread: records delivered so far
  uint64_t hostEndsAtDelivery_ = 0;    // ... and hostEnds_ when the last came

  std::atomic<uint64_t> spansResolved_{0};
  std::atomic<uint64_t> spansDropped_{0};
  std::atomic<uint64_t> spansCapturing_{0};
  std::atomic<uint64_t> eventErrors_{0};
};

}  // namespace attnscope
