#include "attnscope/collectors/DeviceMemoryReporter.h"

#include <atomic>
#include <memory>

#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/profiler/orchestration/observer.h>

#include "attnscope/collectors/MemoryAccount.h"

namespace attnscope {
namespace {

namespace profiler = torch::profiler::impl;

std::atomic<uint64_t> gReports{0};

// Looks like a disabled profiler to torch: profilerEnabled() stays false and a cast to
// ProfilerStateBase is valid.
class ReporterState final : public profiler::ProfilerStateBase {
 public:
  ReporterState()
      : ProfilerStateBase(profiler::ProfilerConfig(profiler::ProfilerState::Disabled)) {}

  // PyTorch 2.x passes the totals as size_t.
  void reportMemoryUsage(void* /*ptr*/, int64_t allocSize, size_t totalAllocated,
                         size_t /*totalReserved*/, c10::Device device) override {
    if (device.is_cpu()) return;  // host memory is CpuAllocatorTracker's
    gReports.fetch_add(1, std::memory_order_relaxed);
    MemoryTargets::current().report(allocSize, static_cast<int64_t>(totalAllocated),
                                    MemoryAccount::acceleratorTag(device.index()));
  }

  bool memoryProfilingEnabled() const override { return false; }

  profiler::ActiveProfilerType profilerType() override {
    return profiler::ActiveProfilerType::NONE;
  }
};

const std::shared_ptr<ReporterState>& reporter() {
  static const auto kReporter = std::make_shared<ReporterState>();
  return kReporter;
}

}  // namespace

bool DeviceMemoryReporter::enter() {
  if (c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) != nullptr) {
    return false;  // torch.profiler holds the slot: it gets the reports
  }
  c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, reporter());
  return true;
}

void DeviceMemoryReporter::leave(bool entered) {
  if (!entered || !activeOnCurrentThread()) return;
  try {
    c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
  } catch (const c10::Error&) {
    // Something pushed other debug info above ours and left it there; ours goes with it.
  }
}

bool DeviceMemoryReporter::activeOnCurrentThread() {
  return c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) == reporter().get();
}

uint64_t DeviceMemoryReporter::reportsSeen() { return gReports.load(std::memory_order_relaxed); }

}  // namespace attnscope
