// Kept apart: torch/csrc/autograd/graph_task.h pulls in much of autograd.
#include <torch/csrc/autograd/graph_task.h>

#include "Observer.h"

namespace attnscope {
namespace detail {

bool insideBackwardPass() { return torch::autograd::get_current_graph_task_exec_info() != nullptr; }

}  // namespace detail
}  // namespace attnscope
