#include "attnscope/core/StatsTable.h"

#include <algorithm>

namespace attnscope {

void CellStats::merge(const CellStats& other) {
  seconds.merge(other.seconds);
  ops += other.ops;
  bytes += other.bytes;
  peak = std::max(peak, other.peak);
  flops += other.flops;
  moved += other.moved;
  wideFlops += other.wideFlops;
  modelledSeconds += other.modelledSeconds;
}

PhaseStats::PhaseStats(const PhaseStats& other) { *this = other; }

PhaseStats& PhaseStats::operator=(const PhaseStats& other) {
  if (this == &other) return *this;
  call = other.call;
  backends = other.backends;
  for (int k = 0; k < kNumOpKinds; ++k) {
    kinds[k] = other.kinds[k] ? std::make_unique<CellStats>(*other.kinds[k]) : nullptr;
  }
  return *this;
}

void PhaseStats::merge(const PhaseStats& other) {
  call.merge(other.call);
  for (int b = 0; b < kNumAttentionBackends; ++b) backends[b] += other.backends[b];
  for (int k = 0; k < kNumOpKinds; ++k) {
    if (!other.kinds[k]) continue;
    if (!kinds[k]) kinds[k] = std::make_unique<CellStats>();
    kinds[k]->merge(*other.kinds[k]);
  }
}

LayerStats::LayerStats(const LayerStats& other) { *this = other; }

LayerStats& LayerStats::operator=(const LayerStats& other) {
  if (this == &other) return *this;
  name = other.name;
  for (int p = 0; p < kNumPhases; ++p) {
    phases[p] = other.phases[p] ? std::make_unique<PhaseStats>(*other.phases[p]) : nullptr;
  }
  return *this;
}

int32_t StatsTable::layerId(const std::string& name) {
  const auto it = ids_.find(name);
  if (it != ids_.end()) return it->second;
  if (static_cast<int64_t>(layers_.size()) >= maxLayers_) return -1;
  const auto id = static_cast<int32_t>(layers_.size());
  layers_.emplace_back();
  layers_.back().name = name;
  ids_.emplace(name, id);
  return id;
}

void StatsTable::add(const CallRecord& record) {
  if (record.layer < 0 || record.layer >= static_cast<int32_t>(layers_.size())) {
    ++droppedCalls_;
    return;
  }
  auto& slot = layers_[record.layer].phases[static_cast<int>(record.phase)];
  if (!slot) slot = std::make_unique<PhaseStats>();
  PhaseStats& phase = *slot;
  phase.call.seconds.add(static_cast<double>(record.ns) * 1e-9);
  phase.call.bytes += record.bytes;
  phase.call.peak = std::max(phase.call.peak, record.peak);
  for (int b = 0; b < kNumAttentionBackends; ++b) phase.backends[b] += record.backends[b];
  for (int k = 0; k < kNumOpKinds; ++k) {
    const CallRecord::Kind& kind = record.kinds[k];
    if (kind.ops == 0) continue;
    phase.call.ops += kind.ops;
    if (!phase.kinds[k]) phase.kinds[k] = std::make_unique<CellStats>();
    CellStats& cell = *phase.kinds[k];
    cell.seconds.add(static_cast<double>(kind.ns) * 1e-9);
    cell.ops += kind.ops;
    cell.bytes += kind.bytes;
    cell.peak = std::max(cell.peak, kind.peak);
    cell.flops += kind.flops;
    cell.moved += kind.moved;
    cell.wideFlops += kind.wideFlops;
    cell.modelledSeconds += static_cast<double>(kind.modelledNs) * 1e-9;
  }
}

void StatsTable::merge(const StatsTable& other) {
  for (const LayerStats& theirs : other.layers_) {
    const int32_t id = layerId(theirs.name);
    if (id < 0) {  // beyond maxLayers here: count its calls as dropped
      for (const auto& phase : theirs.phases) {
        if (phase) droppedCalls_ += phase->call.seconds.count();
      }
      continue;
    }
    LayerStats& mine = layers_[id];
    for (int p = 0; p < kNumPhases; ++p) {
      if (!theirs.phases[p]) continue;
      if (!mine.phases[p]) mine.phases[p] = std::make_unique<PhaseStats>();
      mine.phases[p]->merge(*theirs.phases[p]);
    }
  }
  droppedCalls_ += other.droppedCalls_;
}

std::vector<std::string> StatsTable::layerNames() const {
  std::vector<std::string> names;
  names.reserve(layers_.size());
  for (const LayerStats& l : layers_) names.push_back(l.name);
  return names;
}

uint32_t StatsTable::layersChecksum() const {
  uint32_t h = 2166136261u;
  for (const LayerStats& l : layers_) {
    for (const char c : l.name) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
    h = (h ^ 0u) * 16777619u;  // separator
  }
  return h;
}

namespace {

void flattenCell(const CellStats* cell, double* out) {
  if (cell == nullptr) return;  // zeros
  const LogHistogram& h = cell->seconds;
  out[0] = static_cast<double>(h.count());
  out[1] = h.sum();
  out[2] = static_cast<double>(cell->ops);
  out[3] = static_cast<double>(cell->bytes);
  out[4] = cell->flops;
  out[5] = cell->moved;
  out[6] = cell->wideFlops;
  out[7] = cell->modelledSeconds;
  for (int b = 0; b < LogHistogram::kNumBuckets; ++b) {
    out[StatsTable::kCellHeader + b] = static_cast<double>(h.buckets()[b]);
  }
}

std::unique_ptr<CellStats> cellFromFlat(const double* in) {
  if (in[0] < 0.5) return nullptr;
  auto cell = std::make_unique<CellStats>();
  cell->seconds = LogHistogram::fromBuckets(in + StatsTable::kCellHeader, in[1]);
  cell->ops = static_cast<uint64_t>(in[2] + 0.5);
  cell->bytes = static_cast<int64_t>(in[3]);
  cell->flops = in[4];
  cell->moved = in[5];
  cell->wideFlops = in[6];
  cell->modelledSeconds = in[7];
  return cell;
}

}  // namespace

std::vector<double> StatsTable::flatten() const {
  std::vector<double> flat(layers_.size() * kCellsPerLayer * kCellDoubles, 0.0);
  double* out = flat.data();
  for (const LayerStats& layer : layers_) {
    for (int p = 0; p < kNumPhases; ++p) {
      const PhaseStats* phase = layer.phases[p].get();
      flattenCell(phase ? &phase->call : nullptr, out);
      out += kCellDoubles;
      for (int k = 0; k < kNumOpKinds; ++k) {
        flattenCell(phase ? phase->kinds[k].get() : nullptr, out);
        out += kCellDoubles;
      }
    }
  }
  return flat;
}

StatsTable StatsTable::fromFlat(const std::vector<std::string>& names,
                                const std::vector<double>& flat) {
  StatsTable table(static_cast<int64_t>(names.size()) + 1);
  if (flat.size() != names.size() * kCellsPerLayer * kCellDoubles) return table;
  const double* in = flat.data();
  for (const std::string& name : names) {
    LayerStats& layer = table.layers_[table.layerId(name)];
    for (int p = 0; p < kNumPhases; ++p) {
      auto call = cellFromFlat(in);
      in += kCellDoubles;
      std::array<std::unique_ptr<CellStats>, kNumOpKinds> kinds;
      for (int k = 0; k < kNumOpKinds; ++k, in += kCellDoubles) kinds[k] = cellFromFlat(in);
      if (!call) continue;
      auto phase = std::make_unique<PhaseStats>();
      phase->call = *call;
      phase->kinds = std::move(kinds);
      layer.phases[p] = std::move(phase);
    }
  }
  return table;
}

void StatsTable::clear() {
  layers_.clear();
  ids_.clear();
  droppedCalls_ = 0;
}

}  // namespace attnscope
