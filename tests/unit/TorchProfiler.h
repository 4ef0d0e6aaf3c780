#pragma once

// Starts and stops torch.profiler (Kineto, CPU activities) from C++ as Python's profiler does:
// PyTorch 2.x needs prepareProfiler before enableProfiler (Kineto's session is set up there;
// enableProfiler alone crashes in kineto::startTrace).
#include <torch/csrc/autograd/profiler_kineto.h>

namespace attnscope {

inline void startTorchProfiler(bool profileMemory = false) {
  namespace prof = torch::profiler::impl;
  const prof::ProfilerConfig config(prof::ProfilerState::KINETO, /*report_input_shapes=*/false,
                                    profileMemory);
  const std::set<prof::ActivityType> activities{prof::ActivityType::CPU};
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
}

}  // namespace attnscope
