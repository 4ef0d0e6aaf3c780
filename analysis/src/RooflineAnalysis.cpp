#include "RooflineAnalysis.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>
#include <tuple>

#include "Median.h"
#include "attnscope/analysis/JsonReport.h"

namespace attnscope {
namespace analysis {
namespace detail {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr size_t kMaxMetaText = 200;  // metadata strings are shown, not trusted: cut long ones

std::string metaText(const RankTrace& t, const char* key) {
  const auto it = t.meta.find(key);
  if (it == t.meta.end()) return "";
  return it->second.size() > kMaxMetaText ? it->second.substr(0, kMaxMetaText) + "..." : it->second;
}

// A rate from 1 to 1e21 per second, else 0 (absent, "0", garbage, absurd: unknown).
double metaPositive(const RankTrace& t, const char* key) {
  const auto it = t.meta.find(key);
  if (it == t.meta.end() || it->second.empty()) return 0;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end != '\0' || errno == ERANGE || !(v >= 1 && v <= 1e21))
    return 0;
  return v;
}

// "1.13.1+cpu" → (1, 13); false when it does not start with two numbers.
bool torchMajorMinor(const std::string& version, int* major, int* minor) {
  return std::sscanf(version.c_str(), "%d.%d", major, minor) == 2 && *major >= 0 && *minor >= 0;
}

bool isMatmul(OpKind k) {
  return k == OpKind::kQkvProjection || k == OpKind::kScoreMatmul || k == OpKind::kContextMatmul ||
         k == OpKind::kOutputProjection || k == OpKind::kFusedAttention;
}

struct Sums {
  uint64_t ops = 0;
  double seconds = 0, modelled = 0, flops = 0, bytes = 0, wide = 0;
  void add(const TraceRooflineRow& r) {
    ops += r.ops;
    seconds += r.seconds;
    modelled += r.modelledSeconds;
    flops += r.flops;
    bytes += r.bytes;
    wide += r.wideFlops;
  }
  void add(const Sums& s) {
    ops += s.ops;
    seconds += s.seconds;
    modelled += s.modelled;
    flops += s.flops;
    bytes += s.bytes;
    wide += s.wide;
  }
  RooflinePoint point(const Ceilings& c) const { return rooflinePoint(flops, bytes, modelled, c); }
};

std::string flopsPerByte(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), v >= 10 ? "%.0f flop/B" : "%.2f flop/B", v);
  return buf;
}

std::string ceilingsText(const Ceilings& c) {
  if (!c.known()) return "unknown";
  return text::si(c.peakFlopsPerSecond, "FLOP/s") + ", " + text::si(c.peakBytesPerSecond, "B/s") +
         (c.source.empty() ? "" : " (" + c.source + ")");
}

// What a point achieved against its roof, as shown: "3.2 GFLOP/s of 40.0 GFLOP/s" or, for data
// movement only, "2.1 GB/s of 20.0 GB/s".
std::string achievedText(const RooflinePoint& p, const Ceilings& c) {
  if (p.flops <= 0)
    return text::si(p.bytesPerSecond, "B/s") + " of " + text::si(c.peakBytesPerSecond, "B/s");
  return text::si(p.flopsPerSecond, "FLOP/s") + " of " +
         text::si(p.attainableFlopsPerSecond, "FLOP/s");
}

}  // namespace

void analyzeRoofline(const std::map<int, const RankTrace*>& byRank, const AnalysisOptions& options,
                     Analysis* a) {
  RooflineAnalysis& out = a->roofline;
  out.options = options;
  const size_t numRanks = a->ranks.size();
  std::map<int, size_t> rowOf;
  for (size_t i = 0; i < numRanks; ++i) rowOf[a->ranks[i].rank] = i;

  // Hardware and ceilings per rank; the run's ceilings are the medians of the ranks that know
  // theirs.
  std::vector<Ceilings> rankCeilings(numRanks);
  std::vector<double> peakFlops, peakBytes;
  std::set<std::string> sources, timings;
  for (const auto& [rank, t] : byRank) {
    RankHardware h;
    h.rank = rank;
    h.node = t->node;
    h.ceilings.peakFlopsPerSecond = metaPositive(*t, "peak_flops_per_second");
    h.ceilings.peakBytesPerSecond = metaPositive(*t, "peak_bytes_per_second");
    h.ceilings.source = metaText(*t, "ceiling_source");
    h.ceilings.detail = metaText(*t, "ceiling_detail");
    h.timing = metaText(*t, "timing");
    h.cpuModel = metaText(*t, "cpu_model");
    h.cpuCores = metaText(*t, "cpu_cores");
    h.torchThreads = metaText(*t, "torch_threads");
    h.blas = metaText(*t, "blas");
    h.gpuName = metaText(*t, "gpu_name");
    h.gpuDriver = metaText(*t, "gpu_driver");
    h.gpuMemoryBytes = metaText(*t, "gpu_memory_bytes");
    h.torchVersion = metaText(*t, "torch_version");
    if (out.torchVersion.empty()) out.torchVersion = h.torchVersion;
    if (!h.timing.empty()) timings.insert(h.timing);
    if (h.ceilings.known()) {
      peakFlops.push_back(h.ceilings.peakFlopsPerSecond);
      peakBytes.push_back(h.ceilings.peakBytesPerSecond);
      sources.insert(h.ceilings.source);
      if (out.ceilings.detail.empty()) out.ceilings.detail = h.ceilings.detail;
    }
    if (auto it = rowOf.find(rank); it != rowOf.end()) rankCeilings[it->second] = h.ceilings;
    out.badRows += t->badRooflineRows;
    out.present = out.present || !t->roofline.empty();
    out.hardware.push_back(std::move(h));
  }
  out.ceilingRanks = static_cast<int>(peakFlops.size());
  if (!peakFlops.empty()) {
    out.ceilings.peakFlopsPerSecond = median(peakFlops);
    out.ceilings.peakBytesPerSecond = median(peakBytes);
    out.ceilings.source = sources.size() == 1 ? *sources.begin() : "mixed";
  }
  out.timing = timings.size() > 1 ? "mixed" : (timings.empty() ? "" : *timings.begin());

  // Sum every rank's cells by (layer name, phase, kind): over all ranks, and per rank.
  std::vector<std::string> layers = a->layerNames;
  std::map<std::string, int> layerIndex;
  for (size_t i = 0; i < layers.size(); ++i) layerIndex.emplace(layers[i], static_cast<int>(i));
  using Key = std::tuple<int, int, int>;
  std::map<Key, std::vector<Sums>> perRank;  // [row] sums
  for (const auto& [rank, t] : byRank) {
    const size_t row = rowOf.at(rank);
    for (const TraceRooflineRow& r : t->roofline) {
      const std::string name = t->layerName(r.layer);
      auto [it, added] = layerIndex.emplace(name, static_cast<int>(layers.size()));
      if (added) layers.push_back(name);
      auto& sums = perRank[Key(it->second, static_cast<int>(r.phase), static_cast<int>(r.kind))];
      if (sums.empty()) sums.resize(numRanks);
      sums[row].add(r);
    }
  }
  std::vector<std::vector<Sums>> cellRanks;  // per cell, per row
  for (const auto& [key, sums] : perRank) {
    ReportRooflineCell c;
    c.layer = layers[std::get<0>(key)];
    c.phase = static_cast<Phase>(std::get<1>(key));
    c.kind = static_cast<OpKind>(std::get<2>(key));
    Sums all;
    c.rankFraction.assign(numRanks, kNaN);
    for (size_t r = 0; r < numRanks; ++r) {
      all.add(sums[r]);
      const RooflinePoint p = sums[r].point(rankCeilings[r]);
      if (p.bound != Bound::kUnknown) c.rankFraction[r] = p.fraction;
    }
    if (all.ops == 0 && all.seconds <= 0) continue;
    c.ops = all.ops;
    c.seconds = all.seconds;
    c.modelledSeconds = all.modelled;
    c.flops = all.flops;
    c.bytes = all.bytes;
    c.wideFlops = all.wide;
    c.point = all.point(out.ceilings);
    out.attentionSeconds += c.seconds;
    out.cells.push_back(std::move(c));
    cellRanks.push_back(sums);
  }
  if (out.cells.empty() || !(out.attentionSeconds > 0)) return;
  const double total = out.attentionSeconds;

  // Per op kind over every layer and phase, and forward only.
  std::vector<Sums> byKind(kNumOpKinds), forwardByKind(kNumOpKinds);
  std::vector<std::set<std::string>> kindLayers(kNumOpKinds);
  for (const ReportRooflineCell& c : out.cells) {
    Sums s;
    s.ops = c.ops;
    s.seconds = c.seconds;
    s.modelled = c.modelledSeconds;
    s.flops = c.flops;
    s.bytes = c.bytes;
    s.wide = c.wideFlops;
    byKind[static_cast<int>(c.kind)].add(s);
    if (c.phase == Phase::kForward) forwardByKind[static_cast<int>(c.kind)].add(s);
    kindLayers[static_cast<int>(c.kind)].insert(c.layer);
  }
  const auto layerList = [&](const std::set<std::string>& names) {
    std::vector<std::string> v;
    for (const std::string& l : layers) {
      if (names.count(l) != 0) v.push_back(l);
    }
    return v;
  };
  const auto kindIndex = [](OpKind k) { return static_cast<int>(k); };

  // unfused_attention.
  {
    double forward = 0;
    for (const Sums& s : forwardByKind) forward += s.seconds;
    const OpKind parts[] = {OpKind::kSoftmax, OpKind::kDropout, OpKind::kLayoutCopy};
    double partSeconds = 0;
    std::set<std::string> where;
    for (OpKind k : parts) {
      partSeconds += forwardByKind[kindIndex(k)].seconds;
      for (const ReportRooflineCell& c : out.cells) {
        if (c.kind == k && c.phase == Phase::kForward) where.insert(c.layer);
      }
    }
    const bool fused = byKind[kindIndex(OpKind::kFusedAttention)].ops > 0;
    if (!fused && forward > 0 && partSeconds / forward > options.unfusedShare) {
      Recommendation r;
      r.id = "unfused_attention";
      r.title = "Unfused attention: softmax, dropout and layout copies take " +
                text::percent(partSeconds / forward) + " of the forward attention time";
      int major = 0, minor = 0;
      const bool known = torchMajorMinor(out.torchVersion, &major, &minor);
      if (known && major < 2) {
        char version[32];
        std::snprintf(version, sizeof(version), "%d.%d", major, minor);
        r.suggestion =
            std::string("This torch (") + version +
            ") has no fused attention kernel for training; torch >= 2.0's "
            "torch.nn.functional.scaled_dot_product_attention (used by nn.MultiheadAttention) "
            "fuses "
            "scores, masking, softmax, dropout and context into one kernel, so the scores are not "
            "written and read back between these ops.";
      } else {
        r.suggestion = std::string(known ? "" : "(torch version unknown) ") +
                       "Use torch.nn.functional.scaled_dot_product_attention: it fuses scores, "
                       "masking, softmax, "
                       "dropout and context into one kernel, so the scores are not written and "
                       "read back between "
                       "these ops.";
      }
      for (OpKind k : parts) {
        r.evidence.emplace_back(std::string(opKindName(k)) + " share of forward",
                                text::percent(forwardByKind[kindIndex(k)].seconds / forward));
      }
      r.evidence.emplace_back("forward attention op time", text::seconds(forward));
      r.evidence.emplace_back("attention op time (all phases)", text::seconds(total));
      r.evidence.emplace_back("fused_attention ops", "0");
      r.evidence.emplace_back("torch version",
                              out.torchVersion.empty() ? "unknown" : out.torchVersion);
      r.layers = layerList(where);
      r.impact = partSeconds / total;
      out.recommendations.push_back(std::move(r));
    }
  }

  // lower_precision: compute-bound matmul kinds doing most of their flops in float32/float64.
  if (out.ceilings.known()) {
    std::vector<OpKind> kinds;
    double seconds = 0;
    for (int k = 0; k < kNumOpKinds; ++k) {
      const Sums& s = byKind[k];
      if (!isMatmul(static_cast<OpKind>(k)) || !(s.flops > 0)) continue;
      const RooflinePoint p = s.point(out.ceilings);
      if (p.bound == Bound::kCompute && s.wide / s.flops >= options.wideFlopsShare) {
        kinds.push_back(static_cast<OpKind>(k));
        seconds += s.seconds;
      }
    }
    if (!kinds.empty()) {
      std::sort(kinds.begin(), kinds.end(), [&](OpKind x, OpKind y) {
        return byKind[kindIndex(x)].seconds > byKind[kindIndex(y)].seconds;
      });
      const Sums& s = byKind[kindIndex(kinds[0])];
      const RooflinePoint p = s.point(out.ceilings);
      bool gpu = false;
      for (const RankHardware& h : out.hardware) gpu = gpu || !h.gpuName.empty();
      Recommendation r;
      r.id = "lower_precision";
      r.title = std::string("Compute-bound matmuls in float32: ") + opKindName(kinds[0]) +
                (kinds.size() > 1 ? " and " + std::to_string(kinds.size() - 1) + " more" : "");
      r.suggestion =
          std::string("Run them in bfloat16 or float16 under torch.autocast(device_type=\"") +
          (gpu ? "cuda" : "cpu") +
          "\", dtype=torch.bfloat16): they sit at or right of the ridge, so they are limited by "
          "the "
          "float32 compute roof, and the lower-precision units (tensor cores; AMX or AVX-512 BF16 "
          "on "
          "CPUs) have a higher one. Autocast keeps softmax and reductions in float32." +
          (gpu ? "" : " On a CPU without bfloat16 instructions this may not help: measure.");
      r.evidence.emplace_back("kind", opKindName(kinds[0]));
      r.evidence.emplace_back("bound", boundName(p.bound));
      r.evidence.emplace_back("intensity", flopsPerByte(p.intensity));
      r.evidence.emplace_back("ridge", flopsPerByte(out.ceilings.ridge()));
      r.evidence.emplace_back("achieved", achievedText(p, out.ceilings));
      r.evidence.emplace_back("fraction of roof", text::percent(p.fraction));
      r.evidence.emplace_back("float32/float64 share of flops", text::percent(s.wide / s.flops));
      std::string all;
      std::set<std::string> where;
      for (OpKind k : kinds) {
        all += (all.empty() ? "" : ", ") + std::string(opKindName(k)) + " (" +
               text::percent(byKind[kindIndex(k)].seconds / total) + " of attention time)";
        where.insert(kindLayers[kindIndex(k)].begin(), kindLayers[kindIndex(k)].end());
      }
      r.evidence.emplace_back("kinds", all);
      r.evidence.emplace_back("ceilings", ceilingsText(out.ceilings));
      r.layers = layerList(where);
      r.impact = seconds / total;
      out.recommendations.push_back(std::move(r));
    }
  }

  // rank_below_ceiling: per cell, a rank far below the others' fraction of their own roofs while
  // the others agree; one recommendation per rank, its largest such cell as the evidence.
  {
    struct Flag {
      size_t cell;
      double fraction, others;
    };
    std::vector<std::vector<Flag>> flags(numRanks);
    std::vector<int> compared(numRanks, 0);
    for (size_t i = 0; i < out.cells.size(); ++i) {
      const std::vector<double>& f = out.cells[i].rankFraction;
      std::vector<size_t> have;
      for (size_t r = 0; r < numRanks; ++r) {
        if (std::isfinite(f[r])) have.push_back(r);
      }
      if (have.size() < 2) continue;
      for (size_t r : have) {
        ++compared[r];
        std::vector<double> others;
        for (size_t o : have) {
          if (o != r) others.push_back(f[o]);
        }
        const double m = median(others);
        if (!(m > 0) || !(f[r] < options.rankFractionRatio * m)) continue;
        const bool agree = std::all_of(others.begin(), others.end(), [&](double x) {
          return x >= options.rankFractionRatio * m;
        });
        if (agree) flags[r].push_back({i, f[r], m});
      }
    }
    for (size_t r = 0; r < numRanks; ++r) {
      if (flags[r].empty()) continue;
      double seconds = 0, rankSeconds = 0;
      for (size_t i = 0; i < out.cells.size(); ++i) rankSeconds += cellRanks[i][r].seconds;
      const Flag* top = nullptr;
      std::set<std::string> where;
      for (const Flag& x : flags[r]) {
        const double s = cellRanks[x.cell][r].seconds;
        seconds += s;
        if (top == nullptr || s > cellRanks[top->cell][r].seconds) top = &x;
        where.insert(out.cells[x.cell].layer);
      }
      if (!(rankSeconds > 0) || seconds < options.rankBelowShare * rankSeconds) continue;
      const ReportRooflineCell& c = out.cells[top->cell];
      const int rank = a->ranks[r].rank;
      const std::string node = a->ranks[r].node.empty() ? "unknown" : a->ranks[r].node;
      Recommendation rec;
      rec.id = "rank_below_ceiling";
      char ratio[32];
      std::snprintf(ratio, sizeof(ratio), "%.2fx", top->fraction / top->others);
      rec.title = "Rank " + std::to_string(rank) + " reaches " + ratio +
                  " of the other ranks' fraction of the roof";
      rec.suggestion =
          "A hardware or placement problem on rank " + std::to_string(rank) + " (node " + node +
          "): thermal throttling, a shared or misconfigured node, wrong CPU/GPU affinity. The same "
          "ops with the same shapes reach a smaller fraction of its own measured ceilings than on "
          "the "
          "other ranks; check what else runs on the node, its clocks and the process's CPU and GPU "
          "binding.";
      rec.evidence.emplace_back("rank", std::to_string(rank));
      rec.evidence.emplace_back("node", node);
      rec.evidence.emplace_back("layer", c.layer);
      rec.evidence.emplace_back("phase", phaseName(c.phase));
      rec.evidence.emplace_back("kind", opKindName(c.kind));
      rec.evidence.emplace_back("its fraction of its roof", text::percent(top->fraction));
      rec.evidence.emplace_back("other ranks' median", text::percent(top->others));
      rec.evidence.emplace_back(
          "cells below", std::to_string(flags[r].size()) + " of " + std::to_string(compared[r]));
      rec.evidence.emplace_back("their share of its attention op time",
                                text::percent(seconds / rankSeconds));
      rec.evidence.emplace_back("its ceilings", ceilingsText(rankCeilings[r]));
      rec.ranks = {rank};
      rec.layers = layerList(where);
      rec.impact = seconds / total;
      out.recommendations.push_back(std::move(rec));
    }
  }

  // memory_bound_far_below: one per kind.
  if (out.ceilings.known()) {
    for (int k = 0; k < kNumOpKinds; ++k) {
      const Sums& s = byKind[k];
      const RooflinePoint p = s.point(out.ceilings);
      const double share = s.seconds / total;
      if (p.bound != Bound::kMemory || !(share > options.memoryBoundShare) ||
          !(p.fraction < options.memoryBoundFraction)) {
        continue;
      }
      const OpKind kind = static_cast<OpKind>(k);
      Recommendation r;
      r.id = "memory_bound_far_below";
      r.title = std::string("Memory-bound ") + opKindName(kind) + " at " +
                text::percent(p.fraction) + " of the bandwidth roof (" + text::percent(share) +
                " of attention time)";
      if (kind == OpKind::kLayoutCopy) {
        r.suggestion =
            "Avoid the copies: a transpose or permute followed by .contiguous() (or an op that "
            "needs "
            "contiguous input) copies the whole tensor. Reshape the projections' output to "
            "(batch, heads, seq, head_dim) once, keep tensors in the layout the next op reads, or "
            "use "
            "scaled_dot_product_attention, which takes the strided views.";
      } else if (kind == OpKind::kSoftmax || kind == OpKind::kDropout) {
        r.suggestion =
            "Fuse the elementwise ops: scaling, masking, softmax and dropout each read and write "
            "the whole "
            "scores tensor (batch x heads x seq x seq). A fused attention kernel "
            "(scaled_dot_product_attention) or torch.compile does them in one pass without writing "
            "the "
            "intermediates.";
      } else if (kind == OpKind::kQkvProjection || kind == OpKind::kScoreMatmul ||
                 kind == OpKind::kContextMatmul || kind == OpKind::kOutputProjection) {
        r.suggestion =
            "These matmuls are too small for the hardware: at this intensity the bandwidth roof "
            "allows far more, so the time goes to per-op overhead (dispatch, kernel launch, "
            "threading) rather than to data or arithmetic. Give each op more work (a larger "
            "batch, all heads in one bmm), or let one fused attention kernel "
            "(scaled_dot_product_attention) do scores, softmax and context together.";
      } else {
        r.suggestion =
            "It moves far less data per second than the memory can: fuse its elementwise work with "
            "its neighbours (torch.compile, a fused kernel) and avoid intermediate copies.";
      }
      r.evidence.emplace_back("kind", opKindName(kind));
      r.evidence.emplace_back("share of attention time", text::percent(share));
      r.evidence.emplace_back("bound", boundName(p.bound));
      r.evidence.emplace_back("achieved", achievedText(p, out.ceilings));
      r.evidence.emplace_back("fraction of roof", text::percent(p.fraction));
      if (s.ops > 0)
        r.evidence.emplace_back("time per op",
                                text::seconds(s.seconds / static_cast<double>(s.ops)));
      if (s.flops > 0) {
        r.evidence.emplace_back("intensity", flopsPerByte(p.intensity));
        r.evidence.emplace_back("ridge", flopsPerByte(out.ceilings.ridge()));
      }
      r.evidence.emplace_back("ceilings", ceilingsText(out.ceilings));
      r.layers = layerList(kindLayers[k]);
      r.impact = share;
      out.recommendations.push_back(std::move(r));
    }
  }

  std::stable_sort(
      out.recommendations.begin(), out.recommendations.end(),
      [](const Recommendation& x, const Recommendation& y) { return x.impact > y.impact; });
}

}  // namespace detail

const std::vector<RecommendationThreshold>& recommendationThresholds() {
  static const std::vector<RecommendationThreshold> kThresholds = {
      {"unfused_share", &AnalysisOptions::unfusedShare, 0, 1,
       "unfused_attention: softmax + dropout + copies above this share of forward time"},
      {"wide_flops_share", &AnalysisOptions::wideFlopsShare, 0, 1,
       "lower_precision: compute-bound matmuls with at least this share of float32/64 flops"},
      {"rank_fraction_ratio", &AnalysisOptions::rankFractionRatio, 0, 1,
       "rank_below_ceiling: a rank below this x the others' median share of the roof"},
      {"rank_below_share", &AnalysisOptions::rankBelowShare, 0, 1,
       "rank_below_ceiling: ...in cells of at least this share of its attention time"},
      {"memory_bound_share", &AnalysisOptions::memoryBoundShare, 0, 1,
       "memory_bound_far_below: a memory-bound kind above this share of attention time"},
      {"memory_bound_fraction", &AnalysisOptions::memoryBoundFraction, 0, 1,
       "memory_bound_far_below: ...reaching less than this fraction of its roof"},
  };
  return kThresholds;
}

}  // namespace analysis
}  // namespace attnscope
