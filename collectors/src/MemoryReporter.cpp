#include "attnscope/collectors/MemoryReporter.h"

#include <atomic>
#include <memory>

#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/profiler/orchestration/observer.h>

namespace attnscope {
namespace {

std::atomic<bool> gEnabled{false};
std::atomic<uint64_t> gReports{0};
thread_local MemoryTargets tTargets;

namespace profiler = torch::profiler::impl;

// Looks like a disabled profiler to torch (config().disabled() is true and profilerEnabled()
// stays false), so torch.profiler can still be started on top of it.
class ReporterState final : public profiler::ProfilerStateBase {
 public:
  ReporterState() : ProfilerStateBase(profiler::ProfilerConfig(profiler::ProfilerState::Disabled)) {}

  void reportMemoryUsage(void* /*ptr*/, int64_t allocSize, int64_t totalAllocated,
                         int64_t /*totalReserved*/, c10::Device device) override {
    if (!gEnabled.load(std::memory_order_relaxed)) return;
    gReports.fetch_add(1, std::memory_order_relaxed);
    const int8_t dev = device.is_cpu() ? 0 : 1;
    MemoryTargets& t = tTargets;
    if (t.op != nullptr) t.op->report(allocSize, totalAllocated, dev);
    if (t.call != nullptr) t.call->report(allocSize, totalAllocated, dev);
  }

  bool memoryProfilingEnabled() const override {
    // Must stay true for the whole session: c10's CPU allocator only tracks block sizes while it
    // is true, and toggling it would make frees of blocks it did not see unaccountable.
    return gEnabled.load(std::memory_order_relaxed);
  }

  profiler::ActiveProfilerType profilerType() override { return profiler::ActiveProfilerType::NONE; }
};

const std::shared_ptr<ReporterState>& reporter() {
  static const auto kReporter = std::make_shared<ReporterState>();
  return kReporter;
}

}  // namespace

void MemoryReporter::setEnabled(bool enabled) { gEnabled.store(enabled); }
bool MemoryReporter::enabled() { return gEnabled.load(std::memory_order_relaxed); }

bool MemoryReporter::installOnCurrentThread() {
  c10::DebugInfoBase* current = c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE);
  if (current == reporter().get()) return true;
  if (current != nullptr) return false;  // torch.profiler (or another observer) holds the slot
  c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, reporter());
  return true;
}

bool MemoryReporter::activeOnCurrentThread() {
  return c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) == reporter().get();
}

MemoryTargets& MemoryReporter::targets() { return tTargets; }

uint64_t MemoryReporter::reportsSeen() { return gReports.load(std::memory_order_relaxed); }

}  // namespace attnscope
