// attnscope's dispatcher ops: how Python hands a c10d ProcessGroup to the C++ side without sharing
// pybind11 types with torch (the pip wheel's torch and attnscope's module are built apart).
//
//   group = torch.distributed.new_group(backend="gloo")       # same order on every rank
//   torch.ops.attnscope.hand_in_group(group.boxed())          # a ScriptObject of the c10d class
//
// ProcessGroup.boxed() wraps the group's intrusive_ptr in an IValue of TorchScript class
// __torch__.torch.classes.c10d.ProcessGroup, which LibTorch registers; the op below receives that
// same intrusive_ptr. c10d's own functional collectives pass groups this way.
#include "TorchOps.h"

#include <mutex>
#include <utility>

#include <torch/library.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "attnscope/core/Log.h"

namespace attnscope {
namespace detail {
namespace {

std::mutex gHandedInMutex;
c10::intrusive_ptr<c10d::ProcessGroup>& handedIn() {
  static c10::intrusive_ptr<c10d::ProcessGroup> group;
  return group;
}

void handInGroup(const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  std::lock_guard<std::mutex> lock(gHandedInMutex);
  handedIn() = group;
  ATTNSCOPE_LOG(kDebug, "aggregation group handed in: " << group->getBackendName() << ", rank "
                                                        << group->getRank() << " of "
                                                        << group->getSize());
}

}  // namespace

c10::intrusive_ptr<c10d::ProcessGroup> takeHandedInGroup() {
  std::lock_guard<std::mutex> lock(gHandedInMutex);
  return std::exchange(handedIn(), nullptr);
}

}  // namespace detail
}  // namespace attnscope

TORCH_LIBRARY(attnscope, m) {
  m.def("hand_in_group(__torch__.torch.classes.c10d.ProcessGroup group) -> ()",
        &attnscope::detail::handInGroup);
}
