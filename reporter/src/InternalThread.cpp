#include "attnscope/reporter/InternalThread.h"

namespace attnscope {
namespace detail {
namespace {
thread_local bool tInternalThread = false;
}  // namespace

void markInternalThread() { tInternalThread = true; }
bool isInternalThread() { return tInternalThread; }

}  // namespace detail
}  // namespace attnscope
