#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/record_function.h>

#include "Reporter.h"
#include "RoundSource.h"
#include "Window.h"
#include "attnscope/collectors/GpuTimer.h"
#include "attnscope/collectors/MemoryAccount.h"
#include "attnscope/core/ClusterReport.h"
#include "attnscope/core/Config.h"
#include "attnscope/core/GpuStatus.h"
#include "attnscope/core/LinkTable.h"
#include "attnscope/core/RunInfo.h"
#include "attnscope/core/StatsTable.h"
#include "attnscope/core/Topology.h"
#include "attnscope/exporters/TraceFormat.h"

namespace attnscope {
namespace detail {

// The backward work one attention call's forward ops of one kind imply (roofline): the formulas'
// backward cost of the ops whose inputs require grad. Added to the call's pending backward record,
// where it counts only for kinds whose autograd nodes were timed.
struct BackwardEstimate {
  uint32_t ops = 0;          // top-level forward ops whose inputs require grad
  uint32_t modelledOps = 0;  // of them, with a formula
  double flops = 0;
  double moved = 0;
  double wideFlops = 0;
};

// One start()..stop() of the plugin on this rank: configuration, step and sampling state, the
// forward→backward link table and the statistics. The observer's callbacks call into it.
class Session final : public RoundSource {
 public:
  Session(const Config& config, const Topology& topology);
  ~Session() override;

  // RoundSource (the reporter thread): the round's window, trace steps, run info and GPU status
  // under one lock; rank 0's /control.
  RoundSnapshot snapshot(const SnapshotRequest& request) override;
  void applyControl(bool paused, int64_t sampleEvery) override { setSampling(paused, sampleEvery); }

  const Config& config() const { return config_; }
  // Whether accelerator allocator reports are taken (ATTNSCOPE_MEMORY and a CUDA device).
  bool deviceMemory() const { return deviceMemory_; }
  bool sampled() const { return sampled_.load(std::memory_order_relaxed); }
  // Roofline: whether forward ops' shapes are read (ATTNSCOPE_ROOFLINE).
  bool roofline() const { return config_.roofline; }
  // Shape reads of top-level ops and how many of them found changed shapes (cache misses).
  void addShapeCounts(uint64_t reads, uint64_t changes) {
    shapeReads_.fetch_add(reads, std::memory_order_relaxed);
    shapeChanges_.fetch_add(changes, std::memory_order_relaxed);
  }
  // The ceilings (calibrated or configured at begin()) and the machine: set before any step.
  void setMachine(const Ceilings& ceilings, const MachineInfo& machine);

  // Steps are inferred from backward passes until the first step() call.
  bool autoStepPending() const {
    return !explicitSteps_.load(std::memory_order_relaxed) &&
           backwardSeen_.load(std::memory_order_relaxed);
  }
  void noteBackward() {
    if (!backwardSeen_.load(std::memory_order_relaxed)) backwardSeen_.store(true);
  }
  // Ends the current step: folds its backward records, clears the link table, decides whether
  // the next step is sampled and installs or removes the global callbacks accordingly.
  void step(bool explicitCall);

  // Index of the current step (steps ended so far).
  uint64_t stepIndex() const { return stepIndex_.load(std::memory_order_relaxed); }

  int32_t layerId(const char* name);
  uint64_t newInstance() { return nextInstance_.fetch_add(1, std::memory_order_relaxed); }

  // `backward` (roofline on: kNumOpKinds entries, else null) goes to the call instance's pending
  // backward record.
  void addForwardCall(const CallRecord& record, uint64_t forwardThreadId,
                      const LinkTable::Entry* links, size_t numLinks,
                      const BackwardEstimate* backward, uint64_t instance);
  bool findLink(uint64_t forwardThreadId, int64_t sequenceNr, Link* out);
  // `backend`: the fused kernel the node belongs to, kCount when it is not one.
  void addBackwardNode(const Link& link, int64_t ns, const MemoryAccount& account,
                       AttentionBackend backend = AttentionBackend::kCount);

  // Installs the callbacks for the first step. Called once by start().
  void begin();
  // Removes the global callbacks, folds what is pending and writes the outputs.
  void finish();

  StatsTable statistics();
  std::vector<std::string> layerNames();
  // Discovery (docs/DISCOVERY.md): how a layer was found, a note on what is hidden, and the
  // nothing-found check after `steps` training steps (warns once).
  void describeLayer(const LayerOrigin& origin);
  void noteDiscovery(const std::string& note);
  void checkFound(uint64_t steps);
  RunInfo runInfo();
  const Topology& topology() const { return topology_; }

  // Time the job's own collectives took (the collective observer, training or comm threads).
  void addCollectiveTime(int64_t ns) { collectiveNs_.fetch_add(ns, std::memory_order_relaxed); }
  // Runtime control (rank 0's /control, applied at a round): pause recording or change the rate.
  void setSampling(bool paused, int64_t sampleEvery);
  bool paused() const { return paused_.load(std::memory_order_relaxed); }
  int64_t sampleEvery() const { return sampleEvery_.load(std::memory_order_relaxed); }
  // attnscope's own time on the training threads (TSC ticks; per-op callbacks are timed one in
  // kOverheadSampling and scaled).
  void addOverheadTicks(uint64_t t) { overheadTicks_.fetch_add(t, std::memory_order_relaxed); }
  double overheadSeconds() const;
  static constexpr uint32_t kOverheadSampling = 16;
  // Rank 0's cross-rank picture, when a reporter runs.
  bool clusterReport(ClusterReport* out);
  void setReporter(std::unique_ptr<Reporter> reporter);

  // --- GPU (docs/GPU.md) ----------------------------------------------------------------------
  // The device timer while device timing is on, else null (the observer's callbacks test it).
  GpuTimer* gpu() const { return gpuActive_ ? gpu_.get() : nullptr; }
  // Device seconds per layer, phase and op kind (same layer names as statistics()).
  StatsTable deviceStatistics();
  GpuStatus gpuStatus();

  // ---- Trace store feed (ATTNSCOPE_TRACE_DIR, docs/ANALYSIS.md): snapshot() takes the steps ----

 private:
  // statsMutex_ held: one call into the current step's entry for its (layer, phase); the end of a
  // sampled step encodes the entries into one record.
  void traceCall(const CallRecord& record);
  void traceStepEnd(uint64_t step);
  const bool tracing_;
  std::vector<TraceCall> traceCalls_;    // the current step's (layer, phase) entries (reused)
  std::vector<int32_t> traceSlots_;      // layer * kNumPhases + phase -> index in traceCalls_
  std::vector<EncodedStep> traceSteps_;  // ended, not yet taken by the reporter
  size_t traceBufferedBytes_ = 0;
  uint64_t traceDropped_ = 0;
  int64_t traceLastStepNs_ = 0;
  // ---- end of the trace store feed ----

  // statsMutex_ held: the parts of snapshot() and of the public readers. takeWindowLocked() hands
  // the finished window over and starts a new one; takeTraceStepsLocked() the sampled steps
  // encoded since the last take, with the steps the bounded buffer could not keep.
  Window takeWindowLocked();
  RunInfo runInfoLocked();
  std::vector<EncodedStep> takeTraceStepsLocked(uint64_t* dropped);
  GpuStatus gpuStatusLocked(GpuStatus timer);

  void fold();                                   // statsMutex_ held
  void checkFoundLocked(uint64_t steps);         // statsMutex_ held
  void updateGlobalCallbacks(bool sampledStep);  // callbackMutex_ held

  const Config config_;
  const Topology topology_;
  const bool deviceMemory_;
  std::atomic<bool> sampled_{true};
  std::atomic<bool> explicitSteps_{false};
  std::atomic<bool> backwardSeen_{false};
  std::atomic<uint64_t> nextInstance_{1};
  std::atomic<uint64_t> stepIndex_{0};
  std::atomic<bool> paused_{false};
  std::atomic<int64_t> sampleEvery_{1};
  std::atomic<uint64_t> overheadTicks_{0};
  std::atomic<uint64_t> shapeReads_{0};
  std::atomic<uint64_t> shapeChanges_{0};

  std::mutex callbackMutex_;
  at::CallbackHandle globalHandle_ = 0;  // Observer::globalCallback(): backward nodes, collectives
  at::CallbackHandle fusedHandle_ = 0;

  std::mutex linkMutex_;
  LinkTable links_;

  std::mutex statsMutex_;
  StatsTable stats_;
  StatsTable window_;
  uint64_t windowSteps_ = 0;
  uint64_t windowSampledSteps_ = 0;
  int64_t windowStartNs_ = 0;
  std::atomic<int64_t> collectiveNs_{0};
  std::unique_ptr<Reporter> reporter_;
  std::unique_ptr<ClusterReport> cluster_;  // kept when the reporter had to be left behind
  struct PendingBackward {
    CallRecord record;
    std::array<BackwardEstimate, kNumOpKinds> estimate{};
    bool estimated = false;
  };
  std::unordered_map<uint64_t, PendingBackward> pendingBackward_;
  RunInfo run_;

  // --- GPU (docs/GPU.md) ---
  void startGpu();  // begin(): chooses the source, starts the collection thread
  void gpuLoop();   // the collection thread: reads events and CUPTI buffers every 200 ms
  void stopGpu();   // finish(): last collection without waiting for the device
  void addDeviceCalls(const std::vector<CallRecord>& calls);
  std::unique_ptr<GpuTimer> gpu_;
  bool gpuActive_ = false;
  StatsTable deviceStats_;  // statsMutex_
  GpuStatus allocator_;     // statsMutex_: the caching allocator's figures, last read
  std::mutex gpuWakeMutex_;
  std::condition_variable gpuWake_;
  bool gpuStopping_ = false;
  std::thread gpuThread_;
};

// The running session, or null. Sessions are never freed while the process runs (a stopped
// one is retired), so a callback that loaded the pointer can keep using it.
Session* currentSession();
void setCurrentSession(Session* session);

}  // namespace detail
}  // namespace attnscope
