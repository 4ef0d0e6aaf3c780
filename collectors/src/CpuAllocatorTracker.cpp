#include "attnscope/collectors/CpuAllocatorTracker.h"

#include <atomic>
#include <limits>
#include <mutex>
#include <unordered_map>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include "attnscope/collectors/MemoryAccount.h"

namespace attnscope {
namespace {

std::atomic<bool> gEnabled{false};
std::atomic<int64_t> gLive{0};
std::atomic<uint64_t> gAllocations{0};

struct Block {
  void* innerContext;
  c10::DeleterFnPtr innerDeleter;
  int64_t bytes;
};

// Remembered blocks by data pointer. Sharded so that frees on several threads rarely meet.
class BlockTable {
 public:
  void insert(void* data, const Block& block) {
    Shard& s = shard(data);
    std::lock_guard<std::mutex> lock(s.mutex);
    s.blocks[data] = block;
  }
  bool take(void* data, Block* out) {
    Shard& s = shard(data);
    std::lock_guard<std::mutex> lock(s.mutex);
    const auto it = s.blocks.find(data);
    if (it == s.blocks.end()) return false;
    *out = it->second;
    s.blocks.erase(it);
    return true;
  }

 private:
  struct Shard {
    std::mutex mutex;
    std::unordered_map<void*, Block> blocks;
  };
  Shard& shard(void* p) { return shards_[(reinterpret_cast<uintptr_t>(p) >> 6) % kShards]; }
  static constexpr size_t kShards = 16;
  Shard shards_[kShards];
};

BlockTable& blocks() {
  static auto* table = new BlockTable();  // never destroyed: frees may come during exit
  return *table;
}

c10::Allocator* gInner = nullptr;

void trackedDelete(void* data) {
  Block block{};
  if (!blocks().take(data, &block)) {
    // A block handed out untracked through raw_allocate: the inner allocator's raw deleter.
    gInner->raw_deleter()(data);
    return;
  }
  const int64_t live = gLive.fetch_sub(block.bytes, std::memory_order_relaxed) - block.bytes;
  MemoryTargets& targets = MemoryTargets::current();
  if (targets.any()) targets.report(-block.bytes, live, 0);
  block.innerDeleter(block.innerContext);
}

class TrackingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {  // not const since PyTorch 2.x
    c10::DataPtr inner = gInner->allocate(n);
    MemoryTargets& targets = MemoryTargets::current();
    if (n == 0 || !targets.any() || !gEnabled.load(std::memory_order_relaxed) ||
        inner.get_deleter() == nullptr) {
      return inner;
    }
    void* data = inner.get();
    const c10::Device device = inner.device();
    const c10::DeleterFnPtr innerDeleter = inner.get_deleter();
    void* innerContext = inner.release_context();
    const auto bytes = static_cast<int64_t>(n);
    blocks().insert(data, Block{innerContext, innerDeleter, bytes});
    gAllocations.fetch_add(1, std::memory_order_relaxed);
    const int64_t live = gLive.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    targets.report(bytes, live, 0);
    // Context == data keeps Allocator::raw_allocate's contract.
    return c10::DataPtr(data, data, &trackedDelete, device);
  }

  c10::DeleterFnPtr raw_deleter() const override { return &trackedDelete; }

#if defined(TORCH_VERSION_MAJOR) && \
    (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3))
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    gInner->copy_data(dest, src, count);
  }
#endif
};

}  // namespace

void CpuAllocatorTracker::install() {
  static std::once_flag once;
  std::call_once(once, [] {
    gInner = c10::GetCPUAllocator();
    static TrackingAllocator tracker;
    c10::SetCPUAllocator(&tracker, std::numeric_limits<uint8_t>::max());
  });
  gEnabled.store(true);
}

void CpuAllocatorTracker::setEnabled(bool enabled) { gEnabled.store(enabled); }
uint64_t CpuAllocatorTracker::allocationsSeen() {
  return gAllocations.load(std::memory_order_relaxed);
}

}  // namespace attnscope
