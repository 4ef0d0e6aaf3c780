// Questions to LibTorch whose headers are heavy, kept apart from the observer's translation unit.
#include <ATen/Context.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/csrc/profiler/orchestration/observer.h>

#include "AutogradProbe.h"

namespace attnscope {
namespace detail {

bool insideBackwardPass() { return torch::autograd::get_current_graph_task_exec_info() != nullptr; }

bool acceleratorAvailable() { return at::hasCUDA(); }

bool kinetoProfilerRunning() {
  return torch::profiler::impl::profilerType() == torch::profiler::impl::ActiveProfilerType::KINETO;
}

}  // namespace detail
}  // namespace attnscope
