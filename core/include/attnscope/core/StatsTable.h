#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "attnscope/core/Export.h"
#include "attnscope/core/Histogram.h"
#include "attnscope/core/OpKind.h"

namespace attnscope {

// What one attention call (one layer, one phase) cost, broken down by op kind. Built on the
// training thread (forward) or from backward nodes, then added to a StatsTable in one go.
struct CallRecord {
  struct Kind {
    int64_t ns = 0;     // summed time of the ops of this kind
    uint32_t ops = 0;   // how many top-level ops (forward) or autograd nodes (backward)
    int64_t bytes = 0;  // bytes allocated while they ran
    int64_t peak = 0;   // peak live bytes above the call's base while they ran
    // Roofline (docs/ROOFLINE.md): what the shape formulas made of these ops, and the time of
    // the ops that have a formula (the rates divide by it).
    double flops = 0;
    double moved = 0;      // minimum bytes moved
    double wideFlops = 0;  // flops in float32/float64
    int64_t modelledNs = 0;
  };
  int32_t layer = -1;
  Phase phase = Phase::kForward;
  int64_t ns = 0;  // the whole call: scope wall time (forward), summed nodes (backward)
  int64_t bytes = 0;
  int64_t peak = 0;
  std::array<Kind, kNumOpKinds> kinds{};
  // Fused-attention ops (forward) or their autograd nodes (backward) per backend.
  std::array<uint32_t, kNumAttentionBackends> backends{};
};

// Statistics of one (layer, phase, op kind) cell, or of the whole call when kind is "all".
struct CellStats {
  LogHistogram seconds;  // one sample per call in which the kind ran
  uint64_t ops = 0;
  int64_t bytes = 0;  // bytes allocated, summed over calls
  int64_t peak = 0;   // largest peak live bytes above the call's base
  // Roofline (op-kind cells only): summed flops, minimum bytes moved, float32/64 flops, and the
  // seconds of the ops that have a formula.
  double flops = 0;
  double moved = 0;
  double wideFlops = 0;
  double modelledSeconds = 0;

  void merge(const CellStats& other);
};

struct PhaseStats {
  CellStats call;                                             // the whole attention call
  std::array<std::unique_ptr<CellStats>, kNumOpKinds> kinds;  // null until the kind runs
  // Fused-attention ops per backend that ran (flash, memory_efficient, cudnn, math). Per rank: not
  // in flatten(), so the cluster's merged table has none.
  std::array<uint64_t, kNumAttentionBackends> backends{};

  PhaseStats() = default;
  PhaseStats(const PhaseStats& other);
  PhaseStats& operator=(const PhaseStats& other);
  void merge(const PhaseStats& other);
};

struct LayerStats {
  std::string name;
  std::array<std::unique_ptr<PhaseStats>, kNumPhases> phases;  // null until the phase runs

  LayerStats() = default;
  LayerStats(const LayerStats& other);
  LayerStats& operator=(const LayerStats& other);
};

// Per-layer statistics of one rank. Memory is bounded by maxLayers × phases × op kinds
// (histograms are allocated when a cell is first used) and does not grow with the step count.
// Not thread-safe: the owner serialises access.
class ATTNSCOPE_API StatsTable {
 public:
  StatsTable() = default;
  explicit StatsTable(int64_t maxLayers) : maxLayers_(maxLayers) {}

  // Id of a layer name, registering it on first use; -1 once maxLayers names are known.
  int32_t layerId(const std::string& name);
  void add(const CallRecord& record);
  // Adds another table's statistics, matching layers by name.
  void merge(const StatsTable& other);
  void clear();

  const std::vector<LayerStats>& layers() const { return layers_; }
  std::vector<std::string> layerNames() const;
  // FNV-1a of the layer names in registration order: ranks whose checksums and layer counts
  // agree lay out flatten() identically.
  uint32_t layersChecksum() const;

  // A fixed layout of every summable figure, for a cross-rank all-reduce (sum): per layer, per
  // phase, per cell (the whole call, then each op kind): count, seconds sum, ops, bytes, flops,
  // bytes moved, wide flops, modelled seconds, then the histogram's bucket counts. Peaks and exact
  // min/max do not sum and are left out.
  static constexpr size_t kCellHeader = 8;
  static constexpr size_t kCellDoubles = kCellHeader + LogHistogram::kNumBuckets;
  static constexpr size_t kCellsPerLayer = kNumPhases * (1 + kNumOpKinds);
  std::vector<double> flatten() const;
  // The inverse for summed vectors: a table with these layer names and the summed figures.
  static StatsTable fromFlat(const std::vector<std::string>& names,
                             const std::vector<double>& flat);
  // Calls of unknown layers (beyond maxLayers) that were counted but not recorded.
  uint64_t droppedCalls() const { return droppedCalls_; }

 private:
  int64_t maxLayers_ = 1024;
  std::vector<LayerStats> layers_;
  std::unordered_map<std::string, int32_t> ids_;
  uint64_t droppedCalls_ = 0;
};

}  // namespace attnscope
