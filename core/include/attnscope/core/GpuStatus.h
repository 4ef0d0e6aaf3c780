#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/core/Config.h"
#include "attnscope/core/Export.h"
#include "attnscope/core/OpKind.h"

namespace attnscope {

// What the GPU collectors of one rank are doing (docs/GPU.md); a copy, read at any time
// (attnscope::gpuStatus()). Meant for the exporters: every field is a gauge or a counter.
struct GpuStatus {
  // The timing source in use: off, events, cupti or both (never auto).
  GpuTiming source = GpuTiming::kOff;
  GpuTiming requested = GpuTiming::kAuto;
  // Why the source differs from what was asked for ("CUPTI is held by another subscriber
  // (torch.profiler/Kineto, DCGM or Nsight)", "no CUDA device", ...); empty when it does not.
  std::string fallbackReason;
  // CUPTI
  uint64_t cuptiRecordsDropped = 0;    // records CUPTI could not store (its own count)
  uint64_t kernelsAttributed = 0;      // kernel, memcpy and memset records given to a layer
  uint64_t recordsUnattributed = 0;    // device records whose correlation record never came
  uint64_t recordsOutside = 0;         // device records of work outside attention calls
  uint64_t recordsLate = 0;            // records of a call that was already folded
  uint64_t recordsInFlightAtStop = 0;  // device records still running when attnscope stopped
  uint64_t callsInFlightAtStop = 0;    // calls left out at stop: work still on the device
  uint64_t recordsSideStream = 0;      // with both: records on another stream than the call's own,
                                       // left out of its cells as they are out of its span
  uint64_t callsGivenUp = 0;           // calls folded without all their records (CUPTI lost some)
  // CUDA events
  uint64_t spansResolved = 0;   // event pairs read back
  uint64_t spansDropped = 0;    // calls not timed: the event pool was exhausted
  uint64_t spansCapturing = 0;  // calls not timed: their stream was capturing a CUDA graph
  uint64_t eventErrors = 0;     // event record/query failures
  uint64_t eventsInPool = 0;    // events created (the pool's size)
  // The CUDA caching allocator of this rank's device (LibTorch with CUDA only), bytes.
  int device = -1;
  int64_t allocatedBytes = 0;
  int64_t reservedBytes = 0;
  int64_t peakAllocatedBytes = 0;
  int64_t peakReservedBytes = 0;
  // Kernels per attention backend, per layer (CUPTI only), in the order of the layer ids.
  struct LayerBackends {
    std::string layer;
    std::array<uint64_t, kNumAttentionBackends> kernels{};
    // The backend with the most fused-attention kernels, else math.
    AttentionBackend dominant() const {
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
  };
  std::vector<LayerBackends> backends;
};

}  // namespace attnscope
