#include "attnscope/collectors/KernelAttributor.h"

#include <algorithm>
#include <cstring>

#include "attnscope/core/GeneratedKernel.h"

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
  if (options_.kernels && !kernels) {
    // CUPTI was given up: calls that waited for records will not get them.
    for (auto it = calls_.begin(); it != calls_.end();) {
      if (it->second.spanNs >= 0 && spans) {
        ++it;
        continue;
      }
      if (it->second.layer >= 0) ++counters_.callsInFlight;
      it = calls_.erase(it);
    }
    correlations_.clear();
    unmatched_.clear();
  }
  options_.spans = spans;
  options_.kernels = kernels;
}

KernelAttributor::Call* KernelAttributor::callOf(uint64_t externalId) {
  const DeviceKey key = unpackExternalId(externalId);
  return openCall(key.instance, key.layer, key.phase);
}

// An API call's external id and its API record are both in: it belongs to its call.
void KernelAttributor::link(uint32_t correlationId, Correlation& c) {
  Call* call = callOf(c.externalId);
  if (call == nullptr) {
    ++counters_.late;
    return;
  }
  call->correlations.push_back(correlationId);
  bool seen = false;
  for (auto& [thread, high] : call->threads) {
    if (thread != c.thread) continue;
    high = std::max(high, correlationId);
    seen = true;
  }
  if (!seen) call->threads.emplace_back(c.thread, correlationId);
  if (c.launches && !c.gotWork) {
    ++call->pending;
    c.counted = true;
  }
}

void KernelAttributor::work(uint32_t correlationId, Correlation& c, uint64_t ns,
                            AttentionBackend backend, bool kernel, uint32_t stream,
                            OpKind generated) {
  Call* call = callOf(c.externalId);
  if (call == nullptr) {
    ++counters_.late;
    return;
  }
  if (c.counted && !c.gotWork) --call->pending;
  if (!c.api && !c.gotWork) call->correlations.push_back(correlationId);  // forgotten with it
  c.gotWork = true;
  if (!call->streamKnown) {
    call->stream = stream;
    call->streamKnown = true;
  } else if (options_.spans && stream != call->stream) {
    ++counters_.sideStream;  // not what the call's events time
    return;
  }
  const DeviceKey key = unpackExternalId(c.externalId);
  // Compiled code launches its generated kernels under the call's own id: their names tell more.
  const OpKind named =
      key.kind == OpKind::kCompiledKernels && generated != OpKind::kCount ? generated : key.kind;
  const int kind = std::min(static_cast<int>(named), kNumOpKinds - 1);
  call->ns[kind] += static_cast<int64_t>(ns);
  call->records[kind] += 1;
  ++counters_.attributed;
  if (kernel) {
    if (backends_.size() <= static_cast<size_t>(key.layer)) backends_.resize(key.layer + 1);
    backends_[key.layer][static_cast<int>(backend)] += 1;
  }
}

void KernelAttributor::addRecord(const ActivityRecord& r) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++counters_.delivered;
  if (r.kind == ActivityRecord::Kind::kApi) {
    uint32_t& high = threadHigh_[r.threadId];
    high = std::max(high, r.correlationId);
    const auto it = correlations_.find(r.correlationId);
    if (it == correlations_.end()) {
      // Its external id, if any, comes with it in the same flush; kept one round.
      correlations_[r.correlationId] =
          Correlation{0, false, true, r.launchesWork, false, false, r.threadId, round_};
      return;
    }
    Correlation& c = it->second;
    c.api = true;
    c.launches = r.launchesWork;
    c.thread = r.threadId;
    if (c.hasExternal) link(r.correlationId, c);
    return;
  }
  if (r.kind == ActivityRecord::Kind::kExternalCorrelation) {
    Correlation& c = correlations_[r.correlationId];
    if (c.hasExternal) return;
    c.externalId = r.externalId;
    c.hasExternal = true;
    c.round = round_;
    if (c.api) link(r.correlationId, c);
    return;
  }
  if (r.endNs == 0 || r.endNs < r.startNs) {
    ++counters_.inFlight;  // handed over by a forced flush before the device ran it
    return;
  }
  const uint64_t ns = r.endNs - r.startNs;
  const bool kernel = r.kind == ActivityRecord::Kind::kKernel;
  const AttentionBackend backend = kernel ? backendOf(r.name) : AttentionBackend::kMath;
  const OpKind generated = kernel ? generatedKind(r.name) : OpKind::kCount;
  const auto it = correlations_.find(r.correlationId);
  if (it != correlations_.end() && it->second.hasExternal) {
    work(r.correlationId, it->second, ns, backend, kernel, r.streamId, generated);
  } else if (it != correlations_.end() && it->second.api && it->second.round < round_) {
    ++counters_.outside;  // its API record came in an earlier flush, without an id of ours
  } else if (foldedCorrelations_.count(r.correlationId) != 0) {
    ++counters_.late;
  } else if (unmatched_.size() >= options_.maxPending) {
    ++counters_.unattributed;  // bounded: the newest waits no longer
  } else {
    unmatched_.push_back(Unmatched{r.correlationId, ns, backend, kernel, r.streamId, generated});
  }
}

OpKind KernelAttributor::generatedKind(const char* name) {
  if (name == nullptr ||
      (std::strncmp(name, "triton_", 7) != 0 && std::strncmp(name, "cpp_", 4) != 0)) {
    return OpKind::kCount;
  }
  // The same few hundred names come every step: each is read once.
  const auto it = generatedKinds_.find(name);
  if (it != generatedKinds_.end()) return it->second;
  const OpKind kind = generatedKernelKind(name);
  if (generatedKinds_.size() < kMaxGeneratedNames) generatedKinds_.emplace(name, kind);
  return kind;
}

KernelAttributor::Call* KernelAttributor::openCall(uint64_t instance, int32_t layer, Phase phase) {
  const uint64_t k = callKey(instance & kInstanceMask, phase);
  if (folded_.count(k) != 0) return nullptr;
  Call& c = calls_[k];
  c.layer = layer;
  c.phase = phase;
  return &c;
}

void KernelAttributor::hostEnded(uint64_t instance, int32_t layer, Phase phase) {
  std::lock_guard<std::mutex> lock(mutex_);
  Call* c = openCall(instance, layer, phase);
  if (c == nullptr) return;
  c->hostEnded = true;
  c->foldsAtEnd = folds_;
  c->openAtEnd = calls_.size();
}

void KernelAttributor::addSpan(uint64_t instance, int32_t layer, Phase phase, int64_t ns) {
  std::lock_guard<std::mutex> lock(mutex_);
  Call* c = openCall(instance, layer, phase);
  if (c != nullptr) c->spanNs = ns;
}

void KernelAttributor::spanMissing(uint64_t instance, Phase phase) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t k = callKey(instance & kInstanceMask, phase);
  if (folded_.count(k) != 0) return;
  Call& c = calls_[k];  // layer stays -1 until a record or the host end names it
  c.phase = phase;
  if (c.spanNs == -1) c.spanNs = -2;
}

bool KernelAttributor::sealed(const Call& c) const {
  if (c.threads.empty()) return false;
  for (const auto& [thread, high] : c.threads) {
    const auto it = threadHigh_.find(thread);
    if (it == threadHigh_.end() || it->second <= high) return false;
  }
  return true;
}

bool KernelAttributor::complete(const Call& c) const {
  if (options_.spans && c.spanNs == -1) return false;
  if (options_.kernels && !(c.hostEnded && c.pending == 0 && sealed(c))) return false;
  return true;
}

void KernelAttributor::remember(uint64_t key, const Call& c) {
  constexpr size_t kCalls = size_t{1} << 16;
  constexpr size_t kCorrelations = size_t{1} << 18;
  folded_.insert(key);
  foldedOrder_.push_back(key);
  if (foldedOrder_.size() > kCalls) {
    folded_.erase(foldedOrder_.front());
    foldedOrder_.pop_front();
  }
  for (const uint32_t id : c.correlations) {
    correlations_.erase(id);
    foldedCorrelations_.insert(id);
    foldedCorrelationOrder_.push_back(id);
  }
  while (foldedCorrelationOrder_.size() > kCorrelations) {
    foldedCorrelations_.erase(foldedCorrelationOrder_.front());
    foldedCorrelationOrder_.pop_front();
  }
}

void KernelAttributor::fold(uint64_t key, Call& c, std::vector<CallRecord>* out) {
  remember(key, c);
  ++folds_;
  if (c.layer < 0) return;
  int64_t sum = 0;
  uint32_t records = 0;
  CallRecord r;
  r.layer = c.layer;
  r.phase = c.phase;
  for (int k = 0; k < kNumOpKinds; ++k) {
    r.kinds[k].ns = c.ns[k];
    r.kinds[k].ops = c.records[k];
    sum += c.ns[k];
    records += c.records[k];
  }
  if (c.spanNs < 0 && records == 0) return;  // nothing ran on the device for it
  r.ns = c.spanNs >= 0 ? c.spanNs : sum;
  out->push_back(r);
}

std::vector<CallRecord> KernelAttributor::endRound(bool final) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Device records that came before their correlation: matched now, outside attention (their
  // API record came without an id of ours), or still waiting.
  std::vector<Unmatched> still;
  for (const Unmatched& u : unmatched_) {
    const auto it = correlations_.find(u.correlationId);
    if (it != correlations_.end() && it->second.hasExternal) {
      work(u.correlationId, it->second, u.ns, u.backend, u.kernel, u.stream, u.generated);
    } else if (it != correlations_.end() && it->second.api) {
      ++counters_.outside;
    } else if (foldedCorrelations_.count(u.correlationId) != 0) {
      ++counters_.late;
    } else if (final) {
      ++counters_.unattributed;
    } else {
      still.push_back(u);
    }
  }
  unmatched_.swap(still);
  // API calls outside attention: their external id would have come in the same flush.
  for (auto it = correlations_.begin(); it != correlations_.end();) {
    const Correlation& c = it->second;
    const bool outside = c.api && !c.hasExternal && (!c.launches || c.round < round_);
    it = outside || final ? correlations_.erase(it) : std::next(it);
  }
  std::vector<CallRecord> out;
  for (auto it = calls_.begin(); it != calls_.end();) {
    Call& c = it->second;
    bool done = complete(c);
    if (!done && options_.kernels && c.hostEnded &&
        folds_ - c.foldsAtEnd >= c.openAtEnd + options_.giveUpAfter &&
        (!options_.spans || c.spanNs != -1)) {
      ++counters_.callsGivenUp;  // calls that ended after it folded: nothing more will come
      done = true;
    }
    if (!done && final) {
      if (options_.kernels && c.pending > 0) {
        if (c.layer >= 0) ++counters_.callsInFlight;
        remember(it->first, c);
        it = calls_.erase(it);
        continue;
      }
      done = true;
    }
    if (done) {
      fold(it->first, c, &out);
      it = calls_.erase(it);
    } else {
      ++it;
    }
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

size_t activityBufferBytes(double bytesPerSecond) {
  constexpr size_t kMin = size_t{64} << 10;
  constexpr size_t kMax = size_t{4} << 20;
  size_t bytes = kMin;
  while (bytes < kMax && static_cast<double>(bytes) < bytesPerSecond / 10) bytes *= 2;
  return bytes;
}

}  // namespace attnscope
