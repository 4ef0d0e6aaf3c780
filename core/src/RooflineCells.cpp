#include "attnscope/core/RooflineCells.h"

namespace attnscope {
namespace {

const CellStats* deviceCell(const StatsTable* device, const std::string& layer, int phase,
                            int kind) {
  if (device == nullptr) return nullptr;
  for (const LayerStats& l :
       device->layers()) {  // few layers; the exporters call this per interval
    if (l.name != layer) continue;
    const PhaseStats* p = l.phases[phase].get();
    return p != nullptr ? p->kinds[kind].get() : nullptr;
  }
  return nullptr;
}

}  // namespace

std::vector<RooflineCell> rooflineCells(const StatsTable& stats, const StatsTable* device,
                                        const Ceilings& ceilings) {
  std::vector<RooflineCell> cells;
  const auto& layers = stats.layers();
  for (size_t l = 0; l < layers.size(); ++l) {
    for (int p = 0; p < kNumPhases; ++p) {
      const PhaseStats* phase = layers[l].phases[p].get();
      if (phase == nullptr) continue;
      for (int k = 0; k < kNumOpKinds; ++k) {
        const CellStats* c = phase->kinds[k].get();
        if (c == nullptr || c->ops == 0) continue;
        RooflineCell cell;
        cell.layer = static_cast<int32_t>(l);
        cell.phase = static_cast<Phase>(p);
        cell.kind = static_cast<OpKind>(k);
        cell.ops = c->ops;
        cell.seconds = c->seconds.sum();
        cell.modelledSeconds = c->modelledSeconds;
        if (const CellStats* d = deviceCell(device, layers[l].name, p, k)) {
          const double share = cell.seconds > 0 ? cell.modelledSeconds / cell.seconds : 0;
          cell.seconds = d->seconds.sum();
          cell.modelledSeconds = cell.seconds * share;
        }
        cell.flops = c->flops;
        cell.bytes = c->moved;
        cell.wideFlops = c->wideFlops;
        cell.point = rooflinePoint(cell.flops, cell.bytes, cell.modelledSeconds, ceilings);
        cells.push_back(cell);
      }
    }
  }
  return cells;
}

}  // namespace attnscope
