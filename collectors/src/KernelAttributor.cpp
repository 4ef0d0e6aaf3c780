#include "attnscope/collectors/KernelAttributor.h"

#include <algorithm>
#include <cstring>

namespace attnscope {
namespace {

constexpr int kKindBits = 6;
constexpr int kPhaseBits = 2;
constexpr int kLayerBits = 20;
constexpr int kInstanceBits = 64 - kKindBits - kPhaseBits - kLayerBits;  // 36
constexpr uint64_t kInstanceMask = (uint64_t{1} << kInstanceBits) - 1;

bool contains(const char* haystack, const char* needle) {
  return std::strstr(haystack, needle) != nullptr;
}

}  // namespace

uint64_t KernelAttributor::packExternalId(const DeviceKey& key) {
  return ((key.instance & kInstanceMask) << (kLayerBits + kPhaseBits + kKindBits)) |
         ((static_cast<uint64_t>(key.layer) & ((1u << kLayerBits) - 1))
          << (kPhaseBits + kKindBits)) |
         (static_cast<uint64_t>(key.phase) << kKindBits) | static_cast<uint64_t>(key.kind);
}

DeviceKey KernelAttributor::unpackExternalId(uint64_t id) {
  DeviceKey key;
  key.kind = static_cast<OpKind>(id & ((1u << kKindBits) - 1));
  key.phase = static_cast<Phase>((id >> kKindBits) & ((1u << kPhaseBits) - 1));
  key.layer = static_cast<int32_t>((id >> (kPhaseBits + kKindBits)) & ((1u << kLayerBits) - 1));
  key.instance = id >> (kLayerBits + kPhaseBits + kKindBits);
  return key;
}

AttentionBackend KernelAttributor::backendOf(const char* name) {
  if (name == nullptr) return AttentionBackend::kMath;
  // cuDNN's SDPA kernels ("cudnn_generated_fort_native_sdpa_...") first: their names can
  // mention flash as well.
  if (contains(name, "cudnn") || contains(name, "CUDNN")) return AttentionBackend::kCudnn;
  if (contains(name, "flash_fwd") || contains(name, "flash_bwd") || contains(name, "flash::") ||
      contains(name, "5flash") || contains(name, "FlashAttn")) {
    return AttentionBackend::kFlash;
  }
  if (contains(name, "fmha_cutlass") || contains(name, "AttentionKernel") ||
      contains(name, "AttentionBackwardKernel") || contains(name, "efficient_attention") ||
      contains(name, "mem_efficient")) {
    return AttentionBackend::kMemoryEfficient;
  }
  return AttentionBackend::kMath;
}

void KernelAttributor::setOptions(bool spans, bool kernels) {
  std::lock_guard<std::mutex> lock(mutex_);
  options_.spans = spans;
  options_.kernels = kernels;
}

void KernelAttributor::addRecord(const ActivityRecord& r) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (r.kind == ActivityRecord::Kind::kExternalCorrelation) {
    correlation_[r.correlationId] = {r.externalId, round_};
    return;
  }
  const uint64_t ns = r.endNs > r.startNs ? r.endNs - r.startNs : 0;
  const bool kernel = r.kind == ActivityRecord::Kind::kKernel;
  const AttentionBackend backend = kernel ? backendOf(r.name) : AttentionBackend::kMath;
  const auto it = correlation_.find(r.correlationId);
  if (it != correlation_.end()) {
    attribute(it->second.first, ns, backend, kernel);
    return;
  }
  if (unmatched_.size() >= options_.maxUnmatched) {
    ++counters_.unattributed;  // bounded: the newest waits no longer
    return;
  }
  unmatched_.push_back(Unmatched{r.correlationId, ns, round_, backend, kernel});
}

void KernelAttributor::attribute(uint64_t externalId, uint64_t ns, AttentionBackend backend,
                                 bool kernel) {
  const DeviceKey key = unpackExternalId(externalId);
  const uint64_t k = callKey(key.instance, key.phase);
  if (folded_.count(k) != 0) {
    ++counters_.late;
    return;
  }
  Call& c = calls_[k];
  c.layer = key.layer;
  c.phase = key.phase;
  const int kind = std::min(static_cast<int>(key.kind), kNumOpKinds - 1);
  c.ns[kind] += static_cast<int64_t>(ns);
  c.records[kind] += 1;
  c.lastTouch = round_;
  ++counters_.attributed;
  if (kernel) {
    if (backends_.size() <= static_cast<size_t>(key.layer)) backends_.resize(key.layer + 1);
    backends_[key.layer][static_cast<int>(backend)] += 1;
  }
}

void KernelAttributor::addSpan(uint64_t instance, int32_t layer, Phase phase, int64_t ns) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t k = callKey(instance & kInstanceMask, phase);
  if (folded_.count(k) != 0) return;
  Call& c = calls_[k];
  c.layer = layer;
  c.phase = phase;
  c.spanNs = ns;
  c.lastTouch = round_;
}

void KernelAttributor::spanMissing(uint64_t instance, Phase phase) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = calls_.find(callKey(instance & kInstanceMask, phase));
  if (it != calls_.end()) {
    if (it->second.spanNs == -1) it->second.spanNs = -2;
    return;
  }
  // No record yet: remember that no span will come.
  Call& c = calls_[callKey(instance & kInstanceMask, phase)];
  c.phase = phase;
  c.layer = -1;  // set by the first record; a call with neither is dropped at fold
  c.spanNs = -2;
  c.lastTouch = round_;
}

bool KernelAttributor::complete(const Call& c) const {
  if (options_.spans && c.spanNs == -1) return false;
  if (options_.kernels && c.lastTouch + static_cast<uint64_t>(options_.quietRounds) > round_)
    return false;
  return true;
}

void KernelAttributor::fold(const Call& c, std::vector<CallRecord>* out) const {
  if (c.layer < 0) return;
  CallRecord r;
  r.layer = c.layer;
  r.phase = c.phase;
  int64_t sum = 0;
  for (int k = 0; k < kNumOpKinds; ++k) {
    r.kinds[k].ns = c.ns[k];
    r.kinds[k].ops = c.records[k];
    sum += c.ns[k];
  }
  r.ns = c.spanNs >= 0 ? c.spanNs : sum;
  out->push_back(r);
}

std::vector<CallRecord> KernelAttributor::endRound(bool final) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Records that waited for their correlation record: matched now, or given up after a round.
  std::vector<Unmatched> still;
  for (const Unmatched& u : unmatched_) {
    const auto it = correlation_.find(u.correlationId);
    if (it != correlation_.end()) {
      attribute(it->second.first, u.ns, u.backend, u.kernel);
    } else if (!final && u.round == round_) {
      still.push_back(u);
    } else {
      ++counters_.unattributed;
    }
  }
  unmatched_.swap(still);
  std::vector<CallRecord> out;
  for (auto it = calls_.begin(); it != calls_.end();) {
    if (final || complete(it->second)) {
      fold(it->second, &out);
      folded_[it->first] = round_;
      it = calls_.erase(it);
    } else {
      ++it;
    }
  }
  // Forget correlations and folded calls that can no longer matter (a launch's records arrive
  // within a round or two of it).
  const uint64_t keep = static_cast<uint64_t>(options_.quietRounds) + 2;
  for (auto it = correlation_.begin(); it != correlation_.end();) {
    it = it->second.second + keep < round_ ? correlation_.erase(it) : std::next(it);
  }
  for (auto it = folded_.begin(); it != folded_.end();) {
    it = it->second + keep < round_ ? folded_.erase(it) : std::next(it);
  }
  ++round_;
  return out;
}

KernelAttributor::Counters KernelAttributor::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

std::vector<std::array<uint64_t, kNumAttentionBackends>> KernelAttributor::backends() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return backends_;
}

}  // namespace attnscope
