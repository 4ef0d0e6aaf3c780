#include "attnscope/exporters/SummaryTable.h"

#include <algorithm>

#include <cstdio>
#include <sstream>

namespace attnscope {
namespace {

std::string fmtSeconds(double s) {
  char buf[32];
  if (s >= 1.0) {
    std::snprintf(buf, sizeof(buf), "%.2fs", s);
  } else if (s >= 1e-3) {
    std::snprintf(buf, sizeof(buf), "%.2fms", s * 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1fus", s * 1e6);
  }
  return buf;
}

std::string fmtBytes(int64_t b) {
  char buf[32];
  if (b >= (1 << 20)) {
    std::snprintf(buf, sizeof(buf), "%.1fMiB", b / 1048576.0);
  } else if (b >= 1024) {
    std::snprintf(buf, sizeof(buf), "%.1fKiB", b / 1024.0);
  } else {
    std::snprintf(buf, sizeof(buf), "%lldB", static_cast<long long>(b));
  }
  return buf;
}

// The op kind with the largest total time in a phase, with its share of the summed op time.
std::string topKind(const PhaseStats& phase) {
  int best = -1;
  double bestSum = 0, all = 0;
  for (int k = 0; k < kNumOpKinds; ++k) {
    if (!phase.kinds[k]) continue;
    const double s = phase.kinds[k]->seconds.sum();
    all += s;
    if (best < 0 || s > bestSum) {
      best = k;
      bestSum = s;
    }
  }
  if (best < 0 || all <= 0) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s %.0f%%", opKindName(static_cast<OpKind>(best)),
                100.0 * bestSum / all);
  return buf;
}

}  // namespace

std::string SummaryTable::render(const RunInfo& run, const StatsTable& stats) {
  std::ostringstream out;
  char line[512];
  out << "attention per layer (rank " << run.rank << ", " << run.stepsSampled << " of "
      << run.stepsSeen << " steps sampled)\n";
  if (run.compiles > 0) {
    std::snprintf(line, sizeof(line),
                  "torch.compile: %llu compilations, %.3f s (apart: no call counts them)\n",
                  static_cast<unsigned long long>(run.compiles), run.compileSeconds);
    out << line;
  }
  // The layer column fits the longest name (24 to 64 characters; longer names are cut).
  int width = 24;
  for (const LayerStats& layer : stats.layers())
    width = std::max(width, static_cast<int>(layer.name.size()));
  width = std::min(width, 64);
  std::snprintf(line, sizeof(line), "%-*s %6s %9s %9s %9s %9s %10s  %s\n", width, "layer", "calls",
                "fwd p50", "fwd p99", "bwd p50", "bwd p99", "fwd peak", "top fwd / bwd kind");
  out << line;
  for (const LayerStats& layer : stats.layers()) {
    const PhaseStats* fwd = layer.phases[static_cast<int>(Phase::kForward)].get();
    const PhaseStats* bwd = layer.phases[static_cast<int>(Phase::kBackward)].get();
    const auto q = [](const PhaseStats* p, double x) {
      return p ? fmtSeconds(p->call.seconds.quantile(x)) : std::string("-");
    };
    std::snprintf(line, sizeof(line), "%-*.*s %6llu %9s %9s %9s %9s %10s  %s / %s\n", width, width,
                  layer.name.c_str(),
                  static_cast<unsigned long long>(fwd ? fwd->call.seconds.count() : 0),
                  q(fwd, 0.5).c_str(), q(fwd, 0.99).c_str(), q(bwd, 0.5).c_str(),
                  q(bwd, 0.99).c_str(), fwd ? fmtBytes(fwd->call.peak).c_str() : "-",
                  fwd ? topKind(*fwd).c_str() : "-", bwd ? topKind(*bwd).c_str() : "-");
    out << line;
  }
  return out.str();
}

}  // namespace attnscope
