#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "attnscope/collectors/GpuActivityApi.h"
#include "attnscope/core/GpuStatus.h"
#include "attnscope/core/OpKind.h"
#include "attnscope/core/StatsTable.h"

namespace attnscope {

// What a piece of device work belongs to: an attention call instance, its layer, the phase and
// the op kind whose op launched it.
struct DeviceKey {
  uint64_t instance = 0;
  int32_t layer = 0;
  Phase phase = Phase::kForward;
  OpKind kind = OpKind::kOther;
};

// Turns device activity records and CUDA-event spans into one device CallRecord per attention
// call and phase.
//
// Attribution is exact, not by time overlap: while an op of an attention call runs, the
// observer pushes packExternalId(key) as CUPTI's external correlation id; CUPTI then emits an
// external-correlation record (correlation id -> our id) for every CUDA API call made, and each
// kernel, memcpy and memset record carries the correlation id of the call that launched it.
// Records may arrive in either order and in different buffers: unmatched device records wait
// up to one more round for their correlation record, then count as unattributed (work outside
// attention calls has no id and ends there).
//
// A call's figures are final when its event span is in (when spans are expected) and no record
// of it arrived for `quietRounds` rounds (when kernels are expected); endRound(final=true) folds
// everything at stop. Thread-safe (one mutex): records come from CUPTI's buffer thread, spans
// and rounds from the reporter thread.
class KernelAttributor {
 public:
  struct Options {
    bool spans = false;    // CUDA-event spans are expected for every call
    bool kernels = false;  // CUPTI records are expected
    int quietRounds = 2;
    size_t maxUnmatched = size_t{1} << 18;  // device records waiting for their correlation
  };

  explicit KernelAttributor(Options options) : options_(options) {}

  // The external correlation id of a key: instance (36 bits), layer (20), phase (2), kind (6).
  static uint64_t packExternalId(const DeviceKey& key);
  static DeviceKey unpackExternalId(uint64_t id);
  // The backend a kernel belongs to, from its name.
  static AttentionBackend backendOf(const char* kernelName);

  void addRecord(const ActivityRecord& record);
  // The device time between the call's CUDA events.
  void addSpan(uint64_t instance, int32_t layer, Phase phase, int64_t ns);
  // The call's events were not timed (pool exhausted, a CUDA error): do not wait for a span.
  void spanMissing(uint64_t instance, Phase phase);
  // Ends a round; returns the calls whose figures are complete: ns is the event span when there
  // is one, else the summed device time of its records; kinds[k] hold the device time and the
  // number of records per op kind. final: everything still open is returned.
  std::vector<CallRecord> endRound(bool final);

  // Counters and per-layer kernel backends (layer ids index `backends`).
  struct Counters {
    uint64_t attributed = 0;
    uint64_t unattributed = 0;
    uint64_t late = 0;
  };
  Counters counters() const;
  std::vector<std::array<uint64_t, kNumAttentionBackends>> backends() const;
  // Options in use (the timer changes them when the source changes, e.g. a mid-run fallback).
  void setOptions(bool spans, bool kernels);

 private:
  struct Unmatched {
    uint32_t correlationId;
    uint64_t ns;
    uint64_t round;
    AttentionBackend backend;
    bool kernel;
  };
  struct Call {
    int32_t layer = 0;
    Phase phase = Phase::kForward;
    std::array<int64_t, kNumOpKinds> ns{};
    std::array<uint32_t, kNumOpKinds> records{};
    int64_t spanNs = -1;     // -1: not yet; -2: will not come
    uint64_t lastTouch = 0;  // round of the last record or span
  };
  static uint64_t callKey(uint64_t instance, Phase phase) {
    return instance * kNumPhases + static_cast<uint64_t>(phase);
  }
  void attribute(uint64_t externalId, uint64_t ns, AttentionBackend backend,
                 bool kernel);  // mutex_ held
  bool complete(const Call& c) const;
  void fold(const Call& c, std::vector<CallRecord>* out) const;

  mutable std::mutex mutex_;
  Options options_;
  uint64_t round_ = 1;
  std::unordered_map<uint32_t, std::pair<uint64_t, uint64_t>> correlation_;  // id -> (ours, round)
  std::vector<Unmatched> unmatched_;
  std::unordered_map<uint64_t, Call> calls_;
  std::unordered_map<uint64_t, uint64_t> folded_;  // call key -> round folded (late records)
  std::vector<std::array<uint64_t, kNumAttentionBackends>> backends_;
  Counters counters_;
};

}  // namespace attnscope
