#pragma once

// The session as the step controller sees it (StepHandler), for StepControllerTest and
// RecorderTest: every ended step and every callback installation is recorded, the step's end is
// handed on to `onStepEnded` when set (RecorderTest: the recorder folds it), and whether the
// calling thread is inside a backward pass is what the test says. No LibTorch.

#include <cstdint>
#include <functional>
#include <vector>

#include "StepController.h"

namespace attnscope {
namespace detail {

class FakeStepHandler final : public StepHandler {
 public:
  struct Install {
    bool global;
    bool fused;
  };

  std::vector<EndedStep> ended;
  std::vector<Install> installs;
  bool insideBackward = false;
  uint64_t overheadTicks = 0;
  std::function<void(const EndedStep&)> onStepEnded;

  void stepEnded(const EndedStep& step) override {
    ended.push_back(step);
    if (onStepEnded) onStepEnded(step);
  }
  void setGlobalCallbacks(bool global, bool fused) override {
    installs.push_back(Install{global, fused});
  }
  bool insideBackwardPass() const override { return insideBackward; }
  void addOverheadTicks(uint64_t ticks) override { overheadTicks += ticks; }
};

}  // namespace detail
}  // namespace attnscope
