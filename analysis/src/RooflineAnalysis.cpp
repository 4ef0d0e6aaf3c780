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

int kindIndex(OpKind k) { return static_cast<int>(k); }

// What the stages below share: each rank's row and ceilings, the layer order (the run's layers,
// then those only the roofline cells name), each cell's sums per rank row, and the sums per op
// kind over every layer and phase (and forward only).
struct RooflineInput {
  size_t numRanks = 0;
  std::map<int, size_t> rowOf;         // rank -> index in Analysis::ranks
  std::vector<Ceilings> rankCeilings;  // by row
  std::vector<std::string> layers;
  std::vector<std::vector<Sums>> cellRanks;  // per cell of RooflineAnalysis::cells, per row
  std::vector<Sums> byKind, forwardByKind;
  std::vector<std::set<std::string>> kindLayers;  // per kind: the layers it ran in
  double total = 0;                               // attention op time, all cells

  // The layers among `names`, in the run's layer order.
  std::vector<std::string> layerList(const std::set<std::string>& names) const {
    std::vector<std::string> v;
    for (const std::string& l : layers) {
      if (names.count(l) != 0) v.push_back(l);
    }
    return v;
  }
};

// Hardware and ceilings per rank; the run's ceilings are the medians of the ranks that know
// theirs.
void hardwareAndCeilings(const std::map<int, const RankTrace*>& byRank, RooflineInput* in,
                         RooflineAnalysis* out) {
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
    if (out->torchVersion.empty()) out->torchVersion = h.torchVersion;
    if (!h.timing.empty()) timings.insert(h.timing);
    if (h.ceilings.known()) {
      peakFlops.push_back(h.ceilings.peakFlopsPerSecond);
      peakBytes.push_back(h.ceilings.peakBytesPerSecond);
      sources.insert(h.ceilings.source);
      if (out->ceilings.detail.empty()) out->ceilings.detail = h.ceilings.detail;
    }
    if (auto it = in->rowOf.find(rank); it != in->rowOf.end())
      in->rankCeilings[it->second] = h.ceilings;
    out->badRows += t->badRooflineRows;
    out->present = out->present || !t->roofline.empty();
    out->hardware.push_back(std::move(h));
  }
  out->ceilingRanks = static_cast<int>(peakFlops.size());
  if (!peakFlops.empty()) {
    out->ceilings.peakFlopsPerSecond = median(peakFlops);
    out->ceilings.peakBytesPerSecond = median(peakBytes);
    out->ceilings.source = sources.size() == 1 ? *sources.begin() : "mixed";
  }
  out->timing = timings.size() > 1 ? "mixed" : (timings.empty() ? "" : *timings.begin());
}

// Every rank's cells summed by (layer name, phase, kind): over all ranks (a cell of the report,
// placed against the run's ceilings) and per rank (its fraction of its own roof). Cells with
// neither ops nor time are dropped.
void cellSums(const std::map<int, const RankTrace*>& byRank, RooflineInput* in,
              RooflineAnalysis* out) {
  std::map<std::string, int> layerIndex;
  for (size_t i = 0; i < in->layers.size(); ++i)
    layerIndex.emplace(in->layers[i], static_cast<int>(i));
  using Key = std::tuple<int, int, int>;
  std::map<Key, std::vector<Sums>> perRank;  // [row] sums
  for (const auto& [rank, t] : byRank) {
    const size_t row = in->rowOf.at(rank);
    for (const TraceRooflineRow& r : t->roofline) {
      const std::string name = t->layerName(r.layer);
      auto [it, added] = layerIndex.emplace(name, static_cast<int>(in->layers.size()));
      if (added) in->layers.push_back(name);
      auto& sums = perRank[Key(it->second, static_cast<int>(r.phase), static_cast<int>(r.kind))];
      if (sums.empty()) sums.resize(in->numRanks);
      sums[row].add(r);
    }
  }
  for (const auto& [key, sums] : perRank) {
    ReportRooflineCell c;
    c.layer = in->layers[std::get<0>(key)];
    c.phase = static_cast<Phase>(std::get<1>(key));
    c.kind = static_cast<OpKind>(std::get<2>(key));
    Sums all;
    c.rankFraction.assign(in->numRanks, kNaN);
    for (size_t r = 0; r < in->numRanks; ++r) {
      all.add(sums[r]);
      const RooflinePoint p = sums[r].point(in->rankCeilings[r]);
      if (p.bound != Bound::kUnknown) c.rankFraction[r] = p.fraction;
    }
    if (all.ops == 0 && all.seconds <= 0) continue;
    c.ops = all.ops;
    c.seconds = all.seconds;
    c.modelledSeconds = all.modelled;
    c.flops = all.flops;
    c.bytes = all.bytes;
    c.wideFlops = all.wide;
    c.point = all.point(out->ceilings);
    out->attentionSeconds += c.seconds;
    out->cells.push_back(std::move(c));
    in->cellRanks.push_back(sums);
  }
}

// Per op kind over every layer and phase, and forward only; the layers each kind ran in.
void kindSums(const RooflineAnalysis& out, RooflineInput* in) {
  in->byKind.assign(kNumOpKinds, Sums{});
  in->forwardByKind.assign(kNumOpKinds, Sums{});
  in->kindLayers.assign(kNumOpKinds, {});
  for (const ReportRooflineCell& c : out.cells) {
    Sums s;
    s.ops = c.ops;
    s.seconds = c.seconds;
    s.modelled = c.modelledSeconds;
    s.flops = c.flops;
    s.bytes = c.bytes;
    s.wide = c.wideFlops;
    in->byKind[kindIndex(c.kind)].add(s);
    if (c.phase == Phase::kForward) in->forwardByKind[kindIndex(c.kind)].add(s);
    in->kindLayers[kindIndex(c.kind)].insert(c.layer);
  }
}

// What unfused_attention suggests for this torch version: before 2.0 there is no fused kernel to
// switch to.
std::string unfusedSuggestion(const std::string& torchVersion) {
  int major = 0, minor = 0;
  const bool known = torchMajorMinor(torchVersion, &major, &minor);
  if (known && major < 2) {
    char version[32];
    std::snprintf(version, sizeof(version), "%d.%d", major, minor);
    return std::string("This torch (") + version +
           ") has no fused attention kernel for training; torch >= 2.0's "
           "torch.nn.functional.scaled_dot_product_attention (used by nn.MultiheadAttention) "
           "fuses "
           "scores, masking, softmax, dropout and context into one kernel, so the scores are not "
           "written and read back between these ops.";
  }
  return std::string(known ? "" : "(torch version unknown) ") +
         "Use torch.nn.functional.scaled_dot_product_attention: it fuses scores, "
         "masking, softmax, "
         "dropout and context into one kernel, so the scores are not written and "
         "read back between "
         "these ops.";
}

// unfused_attention: no fused attention kernel ran, and softmax, dropout and layout copies take
// more than the unfused share of the forward attention time.
void recommendUnfused(const RooflineInput& in, const AnalysisOptions& options,
                      RooflineAnalysis* out) {
  double forward = 0;
  for (const Sums& s : in.forwardByKind) forward += s.seconds;
  const OpKind parts[] = {OpKind::kSoftmax, OpKind::kDropout, OpKind::kLayoutCopy};
  double partSeconds = 0;
  std::set<std::string> where;
  for (OpKind k : parts) {
    partSeconds += in.forwardByKind[kindIndex(k)].seconds;
    for (const ReportRooflineCell& c : out->cells) {
      if (c.kind == k && c.phase == Phase::kForward) where.insert(c.layer);
    }
  }
  const bool fused = in.byKind[kindIndex(OpKind::kFusedAttention)].ops > 0;
  if (fused || !(forward > 0) || !(partSeconds / forward > options.unfusedShare)) return;
  Recommendation r;
  r.id = "unfused_attention";
  r.title = "Unfused attention: softmax, dropout and layout copies take " +
            text::percent(partSeconds / forward) + " of the forward attention time";
  r.suggestion = unfusedSuggestion(out->torchVersion);
  for (OpKind k : parts) {
    r.evidence.emplace_back(std::string(opKindName(k)) + " share of forward",
                            text::percent(in.forwardByKind[kindIndex(k)].seconds / forward));
  }
  r.evidence.emplace_back("forward attention op time", text::seconds(forward));
  r.evidence.emplace_back("attention op time (all phases)", text::seconds(in.total));
  r.evidence.emplace_back("fused_attention ops", "0");
  r.evidence.emplace_back("torch version",
                          out->torchVersion.empty() ? "unknown" : out->torchVersion);
  r.layers = in.layerList(where);
  r.impact = partSeconds / in.total;
  out->recommendations.push_back(std::move(r));
}

// The compute-bound matmul kinds doing at least the wide share of their flops in
// float32/float64, the one with the most time first; their time in *seconds.
std::vector<OpKind> wideComputeBoundMatmuls(const RooflineInput& in, const Ceilings& ceilings,
                                            const AnalysisOptions& options, double* seconds) {
  std::vector<OpKind> kinds;
  for (int k = 0; k < kNumOpKinds; ++k) {
    const Sums& s = in.byKind[k];
    if (!isMatmul(static_cast<OpKind>(k)) || !(s.flops > 0)) continue;
    const RooflinePoint p = s.point(ceilings);
    if (p.bound == Bound::kCompute && s.wide / s.flops >= options.wideFlopsShare) {
      kinds.push_back(static_cast<OpKind>(k));
      *seconds += s.seconds;
    }
  }
  std::sort(kinds.begin(), kinds.end(), [&](OpKind x, OpKind y) {
    return in.byKind[kindIndex(x)].seconds > in.byKind[kindIndex(y)].seconds;
  });
  return kinds;
}

// lower_precision: compute-bound matmul kinds doing most of their flops in float32/float64.
void recommendLowerPrecision(const RooflineInput& in, const AnalysisOptions& options,
                             RooflineAnalysis* out) {
  if (!out->ceilings.known()) return;
  double seconds = 0;
  const std::vector<OpKind> kinds = wideComputeBoundMatmuls(in, out->ceilings, options, &seconds);
  if (kinds.empty()) return;
  const Sums& s = in.byKind[kindIndex(kinds[0])];
  const RooflinePoint p = s.point(out->ceilings);
  bool gpu = false;
  for (const RankHardware& h : out->hardware) gpu = gpu || !h.gpuName.empty();
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
  r.evidence.emplace_back("ridge", flopsPerByte(out->ceilings.ridge()));
  r.evidence.emplace_back("achieved", achievedText(p, out->ceilings));
  r.evidence.emplace_back("fraction of roof", text::percent(p.fraction));
  r.evidence.emplace_back("float32/float64 share of flops", text::percent(s.wide / s.flops));
  std::string all;
  std::set<std::string> where;
  for (OpKind k : kinds) {
    all += (all.empty() ? "" : ", ") + std::string(opKindName(k)) + " (" +
           text::percent(in.byKind[kindIndex(k)].seconds / in.total) + " of attention time)";
    where.insert(in.kindLayers[kindIndex(k)].begin(), in.kindLayers[kindIndex(k)].end());
  }
  r.evidence.emplace_back("kinds", all);
  r.evidence.emplace_back("ceilings", ceilingsText(out->ceilings));
  r.layers = in.layerList(where);
  r.impact = seconds / in.total;
  out->recommendations.push_back(std::move(r));
}

// A cell in which a rank reaches far less of its roof than the others of theirs.
struct BelowFlag {
  size_t cell;
  double fraction, others;
};

// Per rank row: the cells in which it is below the rank fraction ratio of the others' median
// fraction of their own roofs while the others agree, and (*compared) how many cells it was
// compared in.
std::vector<std::vector<BelowFlag>> cellsBelowOthers(const RooflineAnalysis& out,
                                                     const RooflineInput& in,
                                                     const AnalysisOptions& options,
                                                     std::vector<int>* compared) {
  std::vector<std::vector<BelowFlag>> flags(in.numRanks);
  compared->assign(in.numRanks, 0);
  for (size_t i = 0; i < out.cells.size(); ++i) {
    const std::vector<double>& f = out.cells[i].rankFraction;
    std::vector<size_t> have;
    for (size_t r = 0; r < in.numRanks; ++r) {
      if (std::isfinite(f[r])) have.push_back(r);
    }
    if (have.size() < 2) continue;
    for (size_t r : have) {
      ++(*compared)[r];
      std::vector<double> others;
      for (size_t o : have) {
        if (o != r) others.push_back(f[o]);
      }
      const double m = median(others);
      if (!(m > 0) || !(f[r] < options.rankFractionRatio * m)) continue;
      const bool agree = std::all_of(others.begin(), others.end(),
                                     [&](double x) { return x >= options.rankFractionRatio * m; });
      if (agree) flags[r].push_back({i, f[r], m});
    }
  }
  return flags;
}

// rank_below_ceiling: per cell, a rank far below the others' fraction of their own roofs while
// the others agree; one recommendation per rank whose such cells hold at least the rank-below
// share of its attention op time, its largest such cell as the evidence.
void recommendRankBelowCeiling(const Analysis& a, const RooflineInput& in,
                               const AnalysisOptions& options, RooflineAnalysis* out) {
  std::vector<int> compared;
  const std::vector<std::vector<BelowFlag>> flags = cellsBelowOthers(*out, in, options, &compared);
  for (size_t r = 0; r < in.numRanks; ++r) {
    if (flags[r].empty()) continue;
    double seconds = 0, rankSeconds = 0;
    for (size_t i = 0; i < out->cells.size(); ++i) rankSeconds += in.cellRanks[i][r].seconds;
    const BelowFlag* top = nullptr;
    std::set<std::string> where;
    for (const BelowFlag& x : flags[r]) {
      const double s = in.cellRanks[x.cell][r].seconds;
      seconds += s;
      if (top == nullptr || s > in.cellRanks[top->cell][r].seconds) top = &x;
      where.insert(out->cells[x.cell].layer);
    }
    if (!(rankSeconds > 0) || seconds < options.rankBelowShare * rankSeconds) continue;
    const ReportRooflineCell& c = out->cells[top->cell];
    const int rank = a.ranks[r].rank;
    const std::string node = a.ranks[r].node.empty() ? "unknown" : a.ranks[r].node;
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
    rec.evidence.emplace_back("its ceilings", ceilingsText(in.rankCeilings[r]));
    rec.ranks = {rank};
    rec.layers = in.layerList(where);
    rec.impact = seconds / in.total;
    out->recommendations.push_back(std::move(rec));
  }
}

// What memory_bound_far_below suggests for a kind: what makes that kind slow when it is.
std::string memoryBoundSuggestion(OpKind kind) {
  if (kind == OpKind::kLayoutCopy) {
    return "Avoid the copies: a transpose or permute followed by .contiguous() (or an op that "
           "needs "
           "contiguous input) copies the whole tensor. Reshape the projections' output to "
           "(batch, heads, seq, head_dim) once, keep tensors in the layout the next op reads, or "
           "use "
           "scaled_dot_product_attention, which takes the strided views.";
  }
  if (kind == OpKind::kSoftmax || kind == OpKind::kDropout) {
    return "Fuse the elementwise ops: scaling, masking, softmax and dropout each read and write "
           "the whole "
           "scores tensor (batch x heads x seq x seq). A fused attention kernel "
           "(scaled_dot_product_attention) or torch.compile does them in one pass without writing "
           "the "
           "intermediates.";
  }
  if (kind == OpKind::kQkvProjection || kind == OpKind::kScoreMatmul ||
      kind == OpKind::kContextMatmul || kind == OpKind::kOutputProjection) {
    return "These matmuls are too small for the hardware: at this intensity the bandwidth roof "
           "allows far more, so the time goes to per-op overhead (dispatch, kernel launch, "
           "threading) rather than to data or arithmetic. Give each op more work (a larger "
           "batch, all heads in one bmm), or let one fused attention kernel "
           "(scaled_dot_product_attention) do scores, softmax and context together.";
  }
  return "It moves far less data per second than the memory can: fuse its elementwise work with "
         "its neighbours (torch.compile, a fused kernel) and avoid intermediate copies.";
}

// memory_bound_far_below: one per memory-bound kind above the memory-bound share of attention
// time that reaches less than the memory-bound fraction of its roof.
void recommendMemoryBound(const RooflineInput& in, const AnalysisOptions& options,
                          RooflineAnalysis* out) {
  if (!out->ceilings.known()) return;
  for (int k = 0; k < kNumOpKinds; ++k) {
    const Sums& s = in.byKind[k];
    const RooflinePoint p = s.point(out->ceilings);
    const double share = s.seconds / in.total;
    if (p.bound != Bound::kMemory || !(share > options.memoryBoundShare) ||
        !(p.fraction < options.memoryBoundFraction)) {
      continue;
    }
    const OpKind kind = static_cast<OpKind>(k);
    Recommendation r;
    r.id = "memory_bound_far_below";
    r.title = std::string("Memory-bound ") + opKindName(kind) + " at " + text::percent(p.fraction) +
              " of the bandwidth roof (" + text::percent(share) + " of attention time)";
    r.suggestion = memoryBoundSuggestion(kind);
    r.evidence.emplace_back("kind", opKindName(kind));
    r.evidence.emplace_back("share of attention time", text::percent(share));
    r.evidence.emplace_back("bound", boundName(p.bound));
    r.evidence.emplace_back("achieved", achievedText(p, out->ceilings));
    r.evidence.emplace_back("fraction of roof", text::percent(p.fraction));
    if (s.ops > 0)
      r.evidence.emplace_back("time per op", text::seconds(s.seconds / static_cast<double>(s.ops)));
    if (s.flops > 0) {
      r.evidence.emplace_back("intensity", flopsPerByte(p.intensity));
      r.evidence.emplace_back("ridge", flopsPerByte(out->ceilings.ridge()));
    }
    r.evidence.emplace_back("ceilings", ceilingsText(out->ceilings));
    r.layers = in.layerList(in.kindLayers[k]);
    r.impact = share;
    out->recommendations.push_back(std::move(r));
  }
}

}  // namespace

void analyzeRoofline(const std::map<int, const RankTrace*>& byRank, const AnalysisOptions& options,
                     Analysis* a) {
  RooflineAnalysis& out = a->roofline;
  out.options = options;
  RooflineInput in;
  in.numRanks = a->ranks.size();
  for (size_t i = 0; i < in.numRanks; ++i) in.rowOf[a->ranks[i].rank] = i;
  in.rankCeilings.resize(in.numRanks);
  in.layers = a->layerNames;
  hardwareAndCeilings(byRank, &in, &out);
  cellSums(byRank, &in, &out);
  if (out.cells.empty() || !(out.attentionSeconds > 0)) return;
  in.total = out.attentionSeconds;
  kindSums(out, &in);
  recommendUnfused(in, options, &out);
  recommendLowerPrecision(in, options, &out);
  recommendRankBelowCeiling(*a, in, options, &out);
  recommendMemoryBound(in, options, &out);
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
