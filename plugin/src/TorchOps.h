#pragma once

#include <c10/util/intrusive_ptr.h>

namespace c10d {
class ProcessGroup;
}

namespace attnscope {
namespace detail {

// The group handed in through the dispatcher op attnscope::hand_in_group (TorchOps.cpp), which
// the next start() takes for its collectives; null when none is waiting.
c10::intrusive_ptr<c10d::ProcessGroup> takeHandedInGroup();

}  // namespace detail
}  // namespace attnscope
