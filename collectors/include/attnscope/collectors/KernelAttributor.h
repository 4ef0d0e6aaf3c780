#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
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
// call and phase. A kernel launched under a compiled call's own id (kCompiledKernels: compiled
// code's wrapper launches the kernels Inductor generated, no op around them) takes the kind its
// name says where it says one (generatedKernelKind, core/GeneratedKernel.h).
//
// Attribution is exact, not by time overlap: while an op of an attention call runs, the
// observer pushes packExternalId(key) as CUPTI's external correlation id; CUPTI then emits an
// external-correlation record (correlation id -> our id) for every CUDA API call made, and each
// kernel, memcpy and memset record carries the correlation id of the call that launched it.
// Records arrive in any order and in different buffers, seconds after the launch when the host
// runs ahead of the device (CUPTI hands a buffer back only once all its records are complete).
//
// When a call is complete is decided by the correlation ids delivered, never by elapsed time:
// with kernels expected, a call folds once
//  - its host side has ended (hostEnded()),
//  - every API call of it that launched work (API record with launchesWork) has its device
//    record, and
//  - on every thread that made its API calls, an API record of a later call has been delivered
//    (records of one thread are buffered in order: nothing more of the call can come).
// With spans expected, its event span must be in too. A call for which nothing arrives (no API
// record, or a launch whose record CUPTI lost) is given up once `giveUpAfter` calls that ended
// on the host after it have folded (counted in callsGivenUp). Correlations are forgotten when
// their call folds; a device record whose API record came without an attnscope id is work
// outside attention (recordsOutside); one whose API record never comes counts as unattributed
// at stop or when `maxPending` records wait. With spans (`both`), a call's cells hold only the
// work on the stream of its first record, the stream its CUDA events time, so that kernel sums
// and spans compare like with like; records on other streams are counted (sideStream).
// endRound(final=true), at stop after a forced
// flush, folds what is complete and drops calls with work still in flight (callsInFlight).
// Thread-safe (one mutex): records, spans and rounds come from the collection thread, host ends
// from the training threads.
class KernelAttributor {
 public:
  struct Options {
    bool spans = false;    // CUDA-event spans are expected for every call
    bool kernels = false;  // CUPTI records are expected
    uint64_t giveUpAfter = 64;
    size_t maxPending = size_t{1} << 18;  // device records waiting for their correlation
  };

  explicit KernelAttributor(Options options) : options_(options) {}

  // The external correlation id of a key: instance (36 bits), layer (20), phase (2), kind (6).
  static uint64_t packExternalId(const DeviceKey& key);
  static DeviceKey unpackExternalId(uint64_t id);
  // The backend a kernel belongs to, from its name.
  static AttentionBackend backendOf(const char* kernelName);

  void addRecord(const ActivityRecord& record);
  // The call's host side is over: no API call of it is still to be made.
  void hostEnded(uint64_t instance, int32_t layer, Phase phase);
  // The device time between the call's CUDA events.
  void addSpan(uint64_t instance, int32_t layer, Phase phase, int64_t ns);
  // The call's events were not timed (pool exhausted, a CUDA error): do not wait for a span.
  void spanMissing(uint64_t instance, Phase phase);
  // Ends a round (one flush's records); returns the calls whose figures are complete: ns is the
  // event span when there is one, else the summed device time of its records; kinds[k] hold
  // the device time and the number of records per op kind. final: at stop, everything.
  std::vector<CallRecord> endRound(bool final);

  // Counters and per-layer kernel backends (layer ids index `backends`).
  struct Counters {
    uint64_t attributed = 0;     // device records given to a call
    uint64_t unattributed = 0;   // device records whose correlation never came
    uint64_t outside = 0;        // device records launched outside attention calls
    uint64_t late = 0;           // records of a call already folded
    uint64_t inFlight = 0;       // device records still incomplete at stop
    uint64_t callsInFlight = 0;  // calls dropped at stop with work still on the device
    uint64_t callsGivenUp = 0;   // calls folded without all their records (see above)
    uint64_t delivered = 0;      // records of any kind handed in
    uint64_t sideStream = 0;     // with spans: device records on another stream than the call's
  };
  Counters counters() const;
  std::vector<std::array<uint64_t, kNumAttentionBackends>> backends() const;
  // Options in use (the timer changes them when the source changes, e.g. a mid-run fallback):
  // when kernels stop being expected, calls that waited for them are dropped (callsInFlight).
  void setOptions(bool spans, bool kernels);

 private:
  struct Correlation {
    uint64_t externalId = 0;
    bool hasExternal = false;
    bool api = false;       // its API record came
    bool launches = false;  // ... and it launched recorded work
    bool counted = false;   // counted in its call's pending launches
    bool gotWork = false;   // a device record of it came
    uint32_t thread = 0;
    uint64_t round = 0;
  };
  struct Unmatched {
    uint32_t correlationId;
    uint64_t ns;
    AttentionBackend backend;
    bool kernel;
    uint32_t stream;
    OpKind generated;
  };
  struct Call {
    int32_t layer = -1;
    Phase phase = Phase::kForward;
    std::array<int64_t, kNumOpKinds> ns{};
    std::array<uint32_t, kNumOpKinds> records{};
    int64_t spanNs = -1;  // -1: not yet; -2: will not come
    bool hostEnded = false;
    uint64_t foldsAtEnd = 0;  // folds_ and open calls when the host side ended
    uint64_t openAtEnd = 0;
    uint32_t pending = 0;  // launches without their device record
    uint32_t stream = 0;   // the stream of its first device record
    bool streamKnown = false;
    std::vector<std::pair<uint32_t, uint32_t>> threads;  // (thread, highest correlation id)
    std::vector<uint32_t> correlations;
  };
  static uint64_t callKey(uint64_t instance, Phase phase) {
    return instance * kNumPhases + static_cast<uint64_t>(phase);
  }
  // mutex_ held:
  Call* callOf(uint64_t externalId);
  Call* openCall(uint64_t instance, int32_t layer, Phase phase);  // null once folded
  void link(uint32_t correlationId, Correlation& c);
  void work(uint32_t correlationId, Correlation& c, uint64_t ns, AttentionBackend backend,
            bool kernel, uint32_t stream, OpKind generated);
  // The kind an Inductor-generated kernel's name says (generatedKernelKind), kCount for any
  // other name; remembered per name.
  OpKind generatedKind(const char* name);
  bool sealed(const Call& c) const;
  bool complete(const Call& c) const;
  void fold(uint64_t key, Call& c, std::vector<CallRecord>* out);
  void remember(uint64_t key, const Call& c);

  mutable std::mutex mutex_;
  Options options_;
  uint64_t round_ = 1;
  uint64_t folds_ = 0;
  std::unordered_map<uint32_t, Correlation> correlations_;
  std::unordered_map<uint32_t, uint32_t> threadHigh_;  // thread -> highest API correlation id
  std::vector<Unmatched> unmatched_;
  std::unordered_map<uint64_t, Call> calls_;
  // Folded calls and their correlation ids, the newest ones (late records), bounded FIFO.
  std::unordered_set<uint64_t> folded_;
  std::deque<uint64_t> foldedOrder_;
  std::unordered_set<uint32_t> foldedCorrelations_;
  std::deque<uint32_t> foldedCorrelationOrder_;
  std::vector<std::array<uint64_t, kNumAttentionBackends>> backends_;
  static constexpr size_t kMaxGeneratedNames = 8192;
  std::unordered_map<std::string, OpKind> generatedKinds_;
  Counters counters_;
};

}  // namespace attnscope
