#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "attnscope/core/Config.h"

namespace attnscope {
namespace detail {

// What the recorder is told of a step that ended (Recorder::endStep).
struct EndedStep {
  bool sampled = false;
  // The collective observer ran through it: the window's per-step collective time divides by
  // the steps it ran.
  bool collectivesObserved = false;
};

// The work a step boundary hands out, and the questions the step controller asks of LibTorch.
// The session implements it over the recorder, the GPU collection and the observer; the unit test
// with a fake.
class StepHandler {
 public:
  virtual ~StepHandler() = default;
  // A step ended: fold what it recorded. Called under the controller's lock, once per step.
  virtual void stepEnded(const EndedStep& step) = 0;
  // Installs exactly these of the observer's global RecordFunction callbacks: the backward and
  // collective one, and the fused-op one.
  virtual void setGlobalCallbacks(bool global, bool fused) = 0;
  // Whether the calling thread runs an autograd graph task (a call opened there is recompute,
  // not the next step's forward).
  virtual bool insideBackwardPass() const = 0;
  // attnscope's own time at a step boundary (TSC ticks).
  virtual void addOverheadTicks(uint64_t ticks) = 0;
};

// The one owner of step and sampling decisions on this rank (docs/ARCHITECTURE.md, "Steps and
// sampling"): the step index, whether the current step is sampled (sample-every and pause, which
// rank 0's /control changes at run time), step inference (until the first explicit step() call,
// a backward pass followed by an attention call ends a step) and which global RecordFunction
// callbacks run on each step. Steps end here alone; the handler does the work a boundary implies.
// Needs no LibTorch.
//
// The callbacks read sampled(), stepIndex() and call noteBackward(): relaxed atomics, no lock.
// Boundaries (endStep, openCall when it ends an inferred step, finish) take the controller's lock.
class StepController {
 public:
  // Sample-every and the fused-op callback from `config`; `handler` outlives the controller.
  StepController(const Config& config, StepHandler& handler);

  // --- read by the callbacks and scopes ---
  bool sampled() const { return sampled_.load(std::memory_order_relaxed); }
  // Index of the current step (steps ended so far).
  uint64_t stepIndex() const { return stepIndex_.load(std::memory_order_relaxed); }
  // A backward pass ran (the backward callback, a node hook, a compiled backward marker).
  void noteBackward() {
    if (!backwardSeen_.load(std::memory_order_relaxed)) backwardSeen_.store(true);
  }
  bool explicitSteps() const { return explicitSteps_.load(std::memory_order_relaxed); }
  // Steps are inferred from backward passes until the first explicit step() call: a backward pass
  // was noted since the last boundary, so the next attention call ends the step.
  bool autoStepPending() const {
    return !explicitSteps_.load(std::memory_order_relaxed) &&
           backwardSeen_.load(std::memory_order_relaxed);
  }

  // --- how backward is observed (Recorder::addForwardCall) ---
  void noteHookedCall() {
    if (!hookedCalls_.load(std::memory_order_relaxed)) hookedCalls_.store(true);
  }
  void noteTableCall() {
    if (!tableCalls_.load(std::memory_order_relaxed)) tableCalls_.store(true);
  }
  // True once calls were hooked and none has needed the link table since start: backward then
  // needs no RecordFunction callback, and the global callback is left out but for collectives.
  bool backwardByHooks() const {
    return hookedCalls_.load(std::memory_order_relaxed) &&
           !tableCalls_.load(std::memory_order_relaxed);
  }
  // The summary's discovery.backward: node_hooks, callback, node_hooks_and_callback or none.
  const char* backwardObservation() const;

  // --- runtime control (rank 0's /control, applied at a round) ---
  // Pauses recording or changes the rate from the next step. The live sample-every's one owner.
  void setSampling(bool paused, int64_t sampleEvery);
  bool paused() const { return paused_.load(std::memory_order_relaxed); }
  int64_t sampleEvery() const { return sampleEvery_.load(std::memory_order_relaxed); }

  // --- boundaries ---
  // Installs the callbacks of the first step (sampled). Once, at the session's begin().
  void begin();
  // Ends the current step (an explicit step() call, or `explicitCall` false: one inferred from a
  // backward pass, ended unless another thread ended it first), decides whether the next one is
  // sampled and installs its callbacks: on a sampled step the global callback times backward
  // nodes and collectives; while steps are inferred it runs on every step to see backward passes;
  // with backward on node hooks it only times collectives, on one sampled step in
  // kCollectiveEvery.
  void endStep(bool explicitCall);
  // An attention call opens on this thread: ends the step a backward pass implied (not inside a
  // backward pass: recompute), then returns whether the call is recorded (the step is sampled).
  bool openCall() {
    if (autoStepPending()) endInferredStep();  // out of line: the scope's fast path stays inline
    return sampled();
  }
  // An unsampled call closed with its results, while steps are inferred from backward passes and
  // backward runs on node hooks (no callback sees the pass): whether its result's node should get
  // a hook that notes the backward pass, at most one per step and thread. When true, `*step` is
  // what backwardMarkerPlaced() takes once a hook was placed.
  bool wantsBackwardMarker(uint64_t* step) const;
  void backwardMarkerPlaced(uint64_t step);
  // At stop: ends the run's last inferred step (it has no next attention call), removes the
  // callbacks.
  void finish();

  // With backward on hooks the global callback would only time collectives, and its mere
  // presence makes every autograd node's thread-local restore dearer: it is installed on one
  // sampled step in this many sampled steps.
  static constexpr uint64_t kCollectiveEvery = 8;

 private:
  void endInferredStep();
  // mutex_ held: the handler folds the step, the next step's sampling is decided.
  void endLocked(bool explicitCall);

  StepHandler& handler_;
  const bool fusedOps_;
  std::atomic<bool> sampled_{true};  // the first step is always sampled
  std::atomic<uint64_t> stepIndex_{0};
  std::atomic<bool> explicitSteps_{false};
  std::atomic<bool> backwardSeen_{false};
  std::atomic<bool> paused_{false};
  std::atomic<int64_t> sampleEvery_{1};
  std::atomic<bool> hookedCalls_{false};
  std::atomic<bool> tableCalls_{false};

  std::mutex mutex_;
  bool collectivesObserved_ = true;      // through the current step (begin installs the callback)
  uint64_t sampledSinceCollective_ = 0;  // sampled steps since the collective observer's (hooks)
};

}  // namespace detail
}  // namespace attnscope
