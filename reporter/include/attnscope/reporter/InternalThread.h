#pragma once

namespace attnscope {
namespace detail {

// attnscope's own threads (the reporter, its heartbeat, the GPU collection) mark themselves, so
// that the collectives they issue are never counted as the training job's. Torch-free: the
// reporter marks its threads without knowing the observer; the observer's collective callback
// reads the mark (one thread-local load, on sampled steps only).
void markInternalThread();
bool isInternalThread();

}  // namespace detail
}  // namespace attnscope
