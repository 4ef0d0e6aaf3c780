#pragma once

// attnscope: per-layer attention timings and memory for LibTorch training.
//
//   attnscope::start();                       // reads ATTNSCOPE_* (throws std::invalid_argument)
//   for (...) {
//     { attnscope::AttentionScope scope("layers.3.attn"); out = attention(x); }
//     loss.backward();
//     attnscope::step();                      // optional: without it one backward pass is a step
//   }
//   attnscope::stop();                        // writes ATTNSCOPE_SUMMARY_JSON
//
// No LibTorch header is included here.

#include <cstddef>
#include <string>

#include "attnscope/core/ClusterReport.h"
#include "attnscope/core/Config.h"
#include "attnscope/core/Export.h"
#include "attnscope/core/GpuStatus.h"
#include "attnscope/core/OpKind.h"
#include "attnscope/core/RunInfo.h"
#include "attnscope/core/StatsTable.h"

namespace at {
class Tensor;
}

namespace attnscope {

// Version of this library, "MAJOR.MINOR.PATCH".
ATTNSCOPE_API const char* version();

// Starts observing with `config` (config.validate() first). Call before the training loop,
// on the training thread. Calling start() while running restarts with the new configuration.
// \throw std::invalid_argument for a bad configuration (nothing is installed then).
ATTNSCOPE_API void start(const Config& config);
// start(Config::fromEnvironment()).
// \throw std::invalid_argument naming the bad ATTNSCOPE_* variable, its value and what is allowed.
ATTNSCOPE_API void start();

// Ends observing: removes every callback, writes the summary JSON and (log level info) a table
// on stderr. Safe to call when not running. Never throws; an unwritable summary is logged.
ATTNSCOPE_API void stop();

// Marks the end of a training step. Cheap (one mutex, a fold of the step's backward records).
ATTNSCOPE_API void step();

ATTNSCOPE_API bool isRunning();

// A copy of this rank's statistics so far, and the run description.
ATTNSCOPE_API StatsTable statistics();
ATTNSCOPE_API RunInfo runInfo();
// The summary JSON document for this rank so far (the same text stop() writes).
ATTNSCOPE_API std::string summaryJson();
// Rank 0's cross-rank picture so far (aggregation, per-rank scores, stragglers, hangs, missing
// ranks, every rank's statistics merged). False on other ranks and when not running.
ATTNSCOPE_API bool clusterReport(ClusterReport* out);

// GPU (docs/GPU.md). Device seconds per layer, phase and op kind: one sample per attention call;
// the call cell is the CUDA-event span when events run, else the summed kernel time; op kinds
// come from CUPTI. Empty on CPU-only runs and when ATTNSCOPE_GPU_TIMING=off. Figures lag the
// training by a few hundred milliseconds (they are read back without synchronising).
ATTNSCOPE_API StatsTable deviceStatistics();
// Which GPU timing source runs, why it fell back, CUPTI/event counters, the caching allocator's
// figures and the attention backend per layer.
ATTNSCOPE_API GpuStatus gpuStatus();

// What a scope marks (docs/DISCOVERY.md).
enum class ScopeType : uint8_t {
  kLayer,     // one attention layer's call: ops classified by their place in the attention recipe
  kRegion,    // a region that hides its layers (a torch.compile'd module): fused attention kernels
              // are fused_attention, softmax ops softmax, every other op "other"
  kCompiled,  // one layer's call inside compiled code, between the markers the compiler kept
              // (docs/DISCOVERY.md): the ops it calls (extern kernels) are classified by their
              // place in the recipe, the time between them is compiled_kernels
};

// Marks one attention call. Every aten op that runs on this thread while the scope is open is
// timed and classified, its autograd nodes are attributed to the same layer in backward, and
// allocator reports are attributed to the op. On unsampled steps (or when not running) the
// constructor only reads an atomic flag.
class ATTNSCOPE_API AttentionScope {
 public:
  explicit AttentionScope(const char* layerName);
  explicit AttentionScope(const std::string& layerName) : AttentionScope(layerName.c_str()) {}
  AttentionScope(const char* layerName, ScopeType type);
  // For a name that costs something to make (ModuleScope's lookup): `nameOf(arg)` runs only when
  // the scope is recorded, never on unsampled steps or when attnscope is not running.
  AttentionScope(std::string (*nameOf)(const void* arg), const void* arg, ScopeType type);
  ~AttentionScope();
  AttentionScope(const AttentionScope&) = delete;
  AttentionScope& operator=(const AttentionScope&) = delete;

  // Ends the call now with its results (the destructor then does nothing). Its backward is then
  // observed through hooks on the autograd nodes the call's own ops made, found from `outputs`,
  // so that no callback runs for the rest of the backward pass (docs/PERFORMANCE.md); a scope
  // closed by its destructor alone is observed through a RecordFunction callback on every node.
  //   attnscope::AttentionScope scope("layers.0.attn");
  //   at::Tensor out = attention(x);
  //   scope.close(&out, 1);
  void close(const at::Tensor* outputs, size_t count);

 private:
  bool active_ = false;
};

// Inside an AttentionScope: the top-level ops that run while this is open are of `kind` rather
// than what the classifier infers from their place in the recipe, e.g. rotary embedding work:
//   { attnscope::OpKindScope rotary(attnscope::OpKind::kPositional); q = rope(q); k = rope(k); }
// Outside any scope, or on unsampled steps, it does nothing.
class ATTNSCOPE_API OpKindScope {
 public:
  explicit OpKindScope(OpKind kind);
  ~OpKindScope();
  OpKindScope(const OpKindScope&) = delete;
  OpKindScope& operator=(const OpKindScope&) = delete;

 private:
  bool active_ = false;
  OpKind saved_ = OpKind::kCount;
};

// While open, a fused attention op that runs on this thread outside any AttentionScope (such as
// torch's TransformerEncoderLayer fast path, _transformer_encoder_layer_fwd) is observed as one
// call of layer `layerName`. Ops other than fused attention kernels are not observed.
class ATTNSCOPE_API FusedOpScope {
 public:
  explicit FusedOpScope(const char* layerName);
  ~FusedOpScope();
  FusedOpScope(const FusedOpScope&) = delete;
  FusedOpScope& operator=(const FusedOpScope&) = delete;

 private:
  bool active_ = false;
};

// Discovery (docs/DISCOVERY.md). How a layer was found, for the summary's "discovery" section:
// the Python attach reports its rule for every layer; programs that mark layers may too.
ATTNSCOPE_API void describeLayer(const std::string& layerName, const std::string& rule,
                                 const std::string& source);
// One sentence on what attnscope cannot see in this run (listed once in the summary).
ATTNSCOPE_API void noteDiscovery(const std::string& note);
// `seconds` spent in `count` more torch.compile compilations (the Python attach times Dynamo's
// compiles): reported apart (summary discovery.compile_seconds, attnscope_compile_seconds_total),
// never as a call.
ATTNSCOPE_API void noteCompile(double seconds, uint64_t count);
// Training steps done so far, for programs whose steps attnscope cannot tell (no scope has
// opened, so no step ends). After kNothingFoundSteps steps with no attention call seen it warns
// once: a log line naming how to mark attention, the metric attnscope_nothing_found, the
// summary's discovery.nothing_found. The Python attach calls it from an optimizer step hook.
ATTNSCOPE_API void noteSteps(uint64_t steps);

// Steps after which a run that has seen no attention call warns once (log, metric, summary).
constexpr int kNothingFoundSteps = 3;

}  // namespace attnscope
