#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "AttentionProbe.h"
#include "StepController.h"
#include "TraceBuffer.h"
#include "attnscope/collectors/MemoryAccount.h"
#include "attnscope/core/Config.h"
#include "attnscope/core/LinkTable.h"
#include "attnscope/core/RunInfo.h"
#include "attnscope/core/StatsTable.h"
#include "attnscope/reporter/RoundSource.h"
#include "attnscope/reporter/Window.h"

namespace attnscope {

class GpuTimer;

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

// How a finished forward call's backward is observed (Recorder::addForwardCall).
enum class LinkMode : uint8_t {
  kTable,       // its links go to the link table: the global callback's backward half finds them
  kHooked,      // its autograd nodes carry attnscope's hooks (NodeHooks.cpp): no table entry
  kNoBackward,  // its results have no autograd history: no backward will run for it
};

// What the training threads record on this rank, and the one owner of it: the statistics since
// start and of the current window, the forward→backward link table, the backward records pending
// until their step ends, the trace buffer and the run's information. Which step is sampled is
// the StepController's (steps()), which also ends the steps. The observer's callbacks write into
// it; the reporter reads it through Session::snapshot(). Needs no LibTorch.
//
// Locks: mutex_ guards the tables, the window, the pending records, the trace buffer and the run
// information; linkMutex_ the link table. Counters are atomics.
class Recorder {
 public:
  // `deviceMemory`: accelerator allocator reports are taken (ATTNSCOPE_MEMORY and a CUDA device).
  // `steps` outlives the recorder.
  Recorder(const Config& config, const RunInfo& run, bool deviceMemory, StepController& steps);

  const Config& config() const { return config_; }
  bool deviceMemory() const { return deviceMemory_; }
  // Roofline: whether forward ops' shapes are read (ATTNSCOPE_ROOFLINE).
  bool roofline() const { return config_.roofline; }
  // The device timer while device timing runs, else null (the observer's callbacks test it). Set
  // once before the callbacks are installed.
  GpuTimer* gpu() const { return gpu_; }
  void setGpu(GpuTimer* gpu) { gpu_ = gpu; }
  // The ceilings (calibrated or configured at start) and the machine: set before any step.
  void setMachine(const Ceilings& ceilings, const MachineInfo& machine);

  // Which steps are sampled and how backward is observed: the step controller decides, the
  // callbacks ask it through the recorder they loaded.
  StepController& steps() const { return steps_; }
  // Ends the current step's records (the step controller, at each boundary): folds its backward
  // records, ends its trace record, clears the link table and counts the step.
  void endStep(const EndedStep& step);

  // --- calls ---
  // The id of layer `name`, or -1 when ATTNSCOPE_MAX_LAYERS is reached (warned once).
  int32_t layerId(const char* name);
  uint64_t newInstance() { return nextInstance_.fetch_add(1, std::memory_order_relaxed); }
  // A finished forward (or recompute) call with the links its ops made. `backward` (roofline on:
  // kNumOpKinds entries, else null) goes to the call instance's pending backward record.
  void addForwardCall(const CallRecord& record, uint64_t forwardThreadId,
                      const LinkTable::Entry* links, size_t numLinks,
                      const BackwardEstimate* backward, uint64_t instance,
                      LinkMode mode = LinkMode::kTable);
  bool findLink(uint64_t forwardThreadId, int64_t sequenceNr, Link* out);
  // `backend`: the fused kernel the node belongs to, kCount when it is not one.
  void addBackwardNode(const Link& link, int64_t ns, const MemoryAccount& account,
                       AttentionBackend backend = AttentionBackend::kCount);

  // --- attnscope's own cost and the job's collectives ---
  // Time the job's own collectives took (the collective observer, training or comm threads).
  void addCollectiveTime(int64_t ns) { collectiveNs_.fetch_add(ns, std::memory_order_relaxed); }
  // attnscope's own time on the training threads (TSC ticks; per-op callbacks are timed one in
  // kOverheadSampling and scaled).
  void addOverheadTicks(uint64_t t) { overheadTicks_.fetch_add(t, std::memory_order_relaxed); }
  static constexpr uint32_t kOverheadSampling = 16;
  // Shape reads of top-level ops and how many of them found changed shapes (cache misses).
  void addShapeCounts(uint64_t reads, uint64_t changes) {
    shapeReads_.fetch_add(reads, std::memory_order_relaxed);
    shapeChanges_.fetch_add(changes, std::memory_order_relaxed);
  }

  // The kernel shapes a forward call of `layer` read (AttentionProbe): kept per layer, with the
  // number of times they changed, for the trace's metadata (RoundSnapshot::attentionShapes).
  void noteAttentionShape(int32_t layer, const AttentionProbe& probe);

  // --- discovery (docs/DISCOVERY.md) ---
  // How a layer was found, a note on what is hidden, and the nothing-found check after `steps`
  // training steps (warns once).
  void describeLayer(const LayerOrigin& origin);
  void noteDiscovery(const std::string& note);
  // `seconds` spent in `count` more torch.compile compilations.
  void noteCompile(double seconds, uint64_t count);
  void checkFound(uint64_t steps);

  // --- readers ---
  // The reporter's round: the window (ended and restarted when asked), the trace steps (taken
  // when asked), run info, layer names and the paused flag, under one lock. GPU parts are left
  // to the GPU collection.
  RoundSnapshot snapshot(const SnapshotRequest& request);
  StatsTable statistics();
  RunInfo runInfo();
  std::vector<std::string> layerNames();
  // Layer names from id `first` on (the GPU collection aligns its device table with them).
  std::vector<std::string> layerNamesFrom(size_t first);
  // At stop: folds what no step ended, ends the trace's last step, runs the nothing-found check
  // however few steps ran, and stamps the stop time.
  void finish();

 private:
  // mutex_ held.
  void fold();
  void checkFoundLocked(uint64_t steps);
  Window takeWindowLocked();
  RunInfo runInfoLocked();
  double overheadSeconds() const;

  const Config config_;
  const bool deviceMemory_;
  const bool tracing_;
  StepController& steps_;
  GpuTimer* gpu_ = nullptr;
  std::atomic<uint64_t> nextInstance_{1};
  std::atomic<uint64_t> overheadTicks_{0};
  std::atomic<uint64_t> shapeReads_{0};
  std::atomic<uint64_t> shapeChanges_{0};
  std::atomic<int64_t> collectiveNs_{0};

  std::mutex linkMutex_;
  LinkTable links_;

  std::mutex mutex_;
  StatsTable stats_;
  StatsTable window_;
  uint64_t windowSteps_ = 0;
  uint64_t windowSampledSteps_ = 0;
  uint64_t windowCollectiveSteps_ = 0;  // sampled steps the collective observer ran through
  double lastCollectiveSeconds_ = 0;    // of the last window with such a step
  uint64_t lastCollectiveSteps_ = 0;
  int64_t windowStartNs_ = 0;
  struct PendingBackward {
    CallRecord record;
    std::array<BackwardEstimate, kNumOpKinds> estimate{};
    bool estimated = false;
  };
  std::unordered_map<uint64_t, PendingBackward> pendingBackward_;
  struct LayerShape {
    AttentionProbe probe;
    bool seen = false;
    uint64_t changes = 0;
  };
  std::vector<LayerShape> shapes_;  // by layer id
  TraceBuffer trace_;
  RunInfo run_;
};

// The recorder of the running session, or null: what the observer's callbacks record into.
// Recorders belong to sessions, which are never freed while the process runs (a stopped one is
// retired), so a callback that loaded the pointer can keep using it.
Recorder* currentRecorder();
void setCurrentRecorder(Recorder* recorder);

}  // namespace detail
}  // namespace attnscope
