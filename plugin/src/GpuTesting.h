#pragma once

#include <functional>
#include <memory>

#include "attnscope/collectors/GpuActivityApi.h"
#include "attnscope/collectors/GpuEventApi.h"
#include "attnscope/collectors/GpuTimer.h"
#include "attnscope/core/Export.h"

namespace attnscope {
namespace detail {

// The GPU layers a session uses, when a test hands them in instead of CUDA's.
struct GpuLayers {
  std::unique_ptr<GpuEventApi> events;
  std::unique_ptr<GpuActivityApi> activity;
  CurrentStreamFn stream = nullptr;
};

// Tests only (GpuWiringTest, on Fake layers: there is no GPU in CI): sessions started from now
// on take their GPU layers from `factory`, as if a CUDA device were present. An empty function
// restores the real ones.
ATTNSCOPE_API void setGpuLayersForTesting(std::function<GpuLayers()> factory);

}  // namespace detail
}  // namespace attnscope
