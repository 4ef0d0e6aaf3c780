#include "StepController.h"

#include "attnscope/collectors/Clock.h"
#include "attnscope/core/Log.h"

namespace attnscope {
namespace detail {
namespace {

// The step whose backward-pass marker this thread placed (wantsBackwardMarker).
thread_local uint64_t tMarkedStep = ~0ULL;

}  // namespace

StepController::StepController(const Config& config, StepHandler& handler)
    : handler_(handler), fusedOps_(config.fusedOps) {
  sampleEvery_.store(config.sampleEvery);
}

const char* StepController::backwardObservation() const {
  const bool hooked = hookedCalls_.load(std::memory_order_relaxed);
  const bool table = tableCalls_.load(std::memory_order_relaxed);
  return hooked && table ? "node_hooks_and_callback"
         : hooked        ? "node_hooks"
         : table         ? "callback"
                         : "none";
}

void StepController::setSampling(bool paused, int64_t sampleEvery) {
  if (paused != paused_.load() || sampleEvery != sampleEvery_.load()) {
    ATTNSCOPE_LOG(kInfo, "control: " << (paused ? "recording paused" : "recording")
                                     << ", sample every " << sampleEvery << " from the next step");
  }
  sampleEvery_.store(sampleEvery);
  paused_.store(paused);
}

void StepController::begin() {
  std::lock_guard<std::mutex> lock(mutex_);
  handler_.setGlobalCallbacks(/*global=*/true, /*fused=*/fusedOps_);
}

void StepController::endLocked(bool explicitCall) {
  if (explicitCall) explicitSteps_.store(true);
  backwardSeen_.store(false);
  handler_.stepEnded(EndedStep{sampled_.load(), collectivesObserved_});
  const uint64_t next = stepIndex_.fetch_add(1) + 1;
  sampled_.store(!paused_.load(std::memory_order_relaxed) &&
                 next % static_cast<uint64_t>(sampleEvery_.load(std::memory_order_relaxed)) == 0);
}

void StepController::endStep(bool explicitCall) {
  const uint64_t t0 = ticks();
  std::lock_guard<std::mutex> lock(mutex_);
  if (!explicitCall && !autoStepPending()) return;  // another thread's call ended it
  endLocked(explicitCall);
  const bool nextSampled = sampled();
  bool global = false;
  if (backwardByHooks()) {
    // At sample-every 10, one step in 80 rather than every sampled step.
    if (nextSampled && ++sampledSinceCollective_ >= kCollectiveEvery) {
      global = true;
      sampledSinceCollective_ = 0;
    }
  } else {
    // Backward nodes on sampled steps; backward passes on every step while steps are inferred.
    // The collective half checks for a sampled step itself.
    global = nextSampled || !explicitSteps();
  }
  collectivesObserved_ = global;
  handler_.setGlobalCallbacks(global, fusedOps_ && nextSampled);
  handler_.addOverheadTicks(ticks() - t0);
}

void StepController::endInferredStep() {
  if (!handler_.insideBackwardPass()) endStep(/*explicitCall=*/false);
}

bool StepController::wantsBackwardMarker(uint64_t* step) const {
  if (explicitSteps() || !backwardByHooks()) return false;
  *step = stepIndex();
  return tMarkedStep != *step;
}

void StepController::backwardMarkerPlaced(uint64_t step) { tMarkedStep = step; }

void StepController::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  // A step inferred from backward passes ends at the next step's first attention call; the run's
  // last step has none, so it ends here (the summary's steps_seen counts it).
  if (autoStepPending()) endLocked(/*explicitCall=*/false);
  handler_.setGlobalCallbacks(false, false);
}

}  // namespace detail
}  // namespace attnscope
