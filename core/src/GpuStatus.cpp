#include "attnscope/core/GpuStatus.h"

namespace attnscope {

const char* attentionBackendName(AttentionBackend backend) {
  switch (backend) {
    case AttentionBackend::kFlash: return "flash";
    case AttentionBackend::kMemoryEfficient: return "memory_efficient";
    case AttentionBackend::kCudnn: return "cudnn";
    case AttentionBackend::kMath: return "math";
    case AttentionBackend::kCount: break;
  }
  return "?";
}

AttentionBackend GpuStatus::LayerBackends::dominant() const {
  AttentionBackend best = AttentionBackend::kMath;
  uint64_t most = 0;
  for (AttentionBackend b : {AttentionBackend::kFlash, AttentionBackend::kMemoryEfficient,
                             AttentionBackend::kCudnn}) {
    if (kernels[static_cast<int>(b)] > most) {
      most = kernels[static_cast<int>(b)];
      best = b;
    }
  }
  return best;
}

}  // namespace attnscope
