#include "attnscope/analysis/RunComparison.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <tuple>

#include "Median.h"
#include "attnscope/analysis/JsonReport.h"
#include "attnscope/core/AttentionShape.h"

namespace attnscope {
namespace analysis {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int kAllKinds = kNumOpKinds;  // the whole call
constexpr double kMaxDraws = 2e8;       // bootstrap work bound (about 10 s here)
constexpr int kMinResamples = 200;

// Per rank (index into the run's traces): one value per sampled step that ran the cell.
struct CellSeries {
  std::vector<std::vector<double>> seconds;
  std::vector<std::vector<double>> peak;
};

using CellKey = std::tuple<std::string, int, int>;  // layer, phase, kind (kAllKinds: the call)

struct RunSeries {
  std::vector<std::string> layers;  // first-seen order
  std::map<CellKey, CellSeries> cells;
  std::map<std::string, std::array<bool, kNumOpKinds>> kindsSeen;  // forward op kinds per layer
  std::map<std::string, std::vector<std::vector<double>>> forwardCalls;  // per layer, rank, step
};

// Every rank's steps as per-cell series. Within a step a layer's calls are already summed; a kind
// that did not run in a step in which its layer and phase ran counts as 0 there.
RunSeries seriesOf(const std::vector<RankTrace>& traces) {
  RunSeries run;
  const size_t ranks = traces.size();
  const auto cell = [&](const std::string& layer, int phase, int kind) -> CellSeries& {
    CellSeries& c = run.cells[CellKey(layer, phase, kind)];
    if (c.seconds.empty()) {
      c.seconds.resize(ranks);
      c.peak.resize(ranks);
    }
    return c;
  };
  for (size_t r = 0; r < ranks; ++r) {
    const RankTrace& t = traces[r];
    // The kinds each (layer, phase) ran on this rank, so that steps without one count 0.
    std::map<std::pair<int32_t, int>, std::array<bool, kNumOpKinds>> kinds;
    for (const TraceStep& s : t.steps) {
      for (const TraceCall& c : s.calls) {
        auto& seen = kinds[{c.layer, static_cast<int>(c.phase)}];
        for (int k = 0; k < kNumOpKinds; ++k) seen[k] = seen[k] || c.kinds[k].ns > 0;
      }
    }
    for (const auto& [key, seen] : kinds) {
      const std::string name = t.layerName(key.first);
      if (std::find(run.layers.begin(), run.layers.end(), name) == run.layers.end())
        run.layers.push_back(name);
      if (key.second == static_cast<int>(Phase::kForward)) {
        auto& all = run.kindsSeen[name];
        for (int k = 0; k < kNumOpKinds; ++k) all[k] = all[k] || seen[k];
      }
    }
    for (const TraceStep& s : t.steps) {
      std::array<double, kNumPhases> phaseTotal{};
      std::array<bool, kNumPhases> phaseRan{};
      for (const TraceCall& c : s.calls) {
        const std::string name = t.layerName(c.layer);
        const int phase = static_cast<int>(c.phase);
        CellSeries& whole = cell(name, phase, kAllKinds);
        whole.seconds[r].push_back(static_cast<double>(c.ns) * 1e-9);
        whole.peak[r].push_back(static_cast<double>(c.peak));
        phaseTotal[phase] += static_cast<double>(c.ns) * 1e-9;
        if (c.phase == Phase::kForward) {
          auto& calls = run.forwardCalls[name];
          calls.resize(ranks);
          calls[r].push_back(static_cast<double>(c.calls));
        }
        phaseRan[phase] = true;
        const auto& seen = kinds[{c.layer, phase}];
        for (int k = 0; k < kNumOpKinds; ++k) {
          if (!seen[k]) continue;
          CellSeries& kc = cell(name, phase, k);
          kc.seconds[r].push_back(static_cast<double>(c.kinds[k].ns) * 1e-9);
          kc.peak[r].push_back(static_cast<double>(c.kinds[k].peak));
        }
      }
      for (int p = 0; p < kNumPhases; ++p) {
        if (!phaseRan[p]) continue;
        CellSeries& total = cell(ComparedCell::kAllLayers, p, kAllKinds);
        total.seconds[r].push_back(phaseTotal[p]);
      }
    }
  }
  return run;
}

// The median over ranks of each rank's median (ranks without values left out); NaN when none.
double rankMedian(const std::vector<std::vector<double>>& perRank) {
  std::vector<double> medians;
  for (const std::vector<double>& v : perRank) {
    if (!v.empty()) medians.push_back(detail::median(v));
  }
  return detail::median(medians);
}

uint64_t countOf(const std::vector<std::vector<double>>& perRank) {
  uint64_t n = 0;
  for (const std::vector<double>& v : perRank) n += v.size();
  return n;
}

// The same statistic on steps drawn with replacement within each rank.
double resampledRankMedian(const std::vector<std::vector<double>>& perRank, std::mt19937_64& rng,
                           std::vector<double>* scratch) {
  std::vector<double> medians;
  medians.reserve(perRank.size());
  for (const std::vector<double>& v : perRank) {
    if (v.empty()) continue;
    scratch->resize(v.size());
    std::uniform_int_distribution<size_t> pick(0, v.size() - 1);
    for (double& x : *scratch) x = v[pick(rng)];
    medians.push_back(detail::median(*scratch));
  }
  return detail::median(medians);
}

// Percentile interval of current/baseline over resamples.
void bootstrapRatio(const CellSeries& base, const CellSeries& cur, const ComparisonOptions& o,
                    uint64_t seed, double* low, double* high) {
  std::mt19937_64 rng(seed);
  std::vector<double> ratios;
  ratios.reserve(static_cast<size_t>(o.resamples));
  std::vector<double> scratch;
  for (int i = 0; i < o.resamples; ++i) {
    const double b = resampledRankMedian(base.seconds, rng, &scratch);
    const double c = resampledRankMedian(cur.seconds, rng, &scratch);
    if (b > 0 && std::isfinite(c)) ratios.push_back(c / b);
  }
  if (ratios.empty()) {
    *low = *high = kNaN;
    return;
  }
  std::sort(ratios.begin(), ratios.end());
  const double tail = (1 - o.confidence) / 2;
  const auto at = [&](double q) {
    const size_t i = static_cast<size_t>(std::floor(q * static_cast<double>(ratios.size() - 1)));
    return ratios[std::min(i, ratios.size() - 1)];
  };
  *low = at(tail);
  *high = at(1 - tail);
}

Verdict verdictOf(const ComparedCell& c, const ComparisonOptions& o) {
  if (!(c.baselineSeconds > 0))
    return c.currentSeconds > 0 ? Verdict::kOnlyCurrent : Verdict::kSame;
  if (!(c.currentSeconds > 0)) return Verdict::kOnlyBaseline;
  if (c.ratioLow > 1 && c.ratio >= 1 + o.minChange) return Verdict::kSlower;
  if (c.ratioHigh < 1 && c.ratio <= 1 / (1 + o.minChange)) return Verdict::kFaster;
  return Verdict::kSame;
}

std::string metaOf(const std::vector<RankTrace>& traces, const std::string& key) {
  for (const RankTrace& t : traces) {
    const auto it = t.meta.find(key);
    if (it != t.meta.end() && !it->second.empty()) return it->second;
  }
  return "";
}

// The implementation a layer ran: the SDPA backend the plugin recorded, else what its forward op
// kinds say.
std::string implementationOf(const std::vector<RankTrace>& traces, const RunSeries& series,
                             const std::string& layer) {
  AttentionShape shape;
  const std::string recorded = metaOf(traces, attentionShapeKey(layer));
  if (!recorded.empty() && parseAttentionShape(recorded, &shape, nullptr) &&
      !shape.implementation().empty()) {
    return shape.implementation();
  }
  const auto it = series.kindsSeen.find(layer);
  if (it == series.kindsSeen.end()) return "unknown";
  const auto& k = it->second;
  if (k[static_cast<int>(OpKind::kFusedAttention)]) return "fused attention";
  if (k[static_cast<int>(OpKind::kScoreMatmul)] || k[static_cast<int>(OpKind::kSoftmax)])
    return "eager (matmul-softmax-matmul)";
  return "unknown";
}

std::string shapesOf(const std::vector<RankTrace>& traces, const std::string& layer) {
  AttentionShape shape;
  const std::string recorded = metaOf(traces, attentionShapeKey(layer));
  if (recorded.empty() || !parseAttentionShape(recorded, &shape, nullptr)) return "";
  return shape.describeShapes();
}

ComparedRun describeRun(const std::string& dir, const std::vector<RankTrace>& traces,
                        const std::vector<SkippedFile>& skipped, const RunSeries& series) {
  ComparedRun run;
  run.dir = dir;
  run.skipped = skipped;
  run.ranks = static_cast<int>(traces.size());
  for (const RankTrace& t : traces) {
    run.worldSize = std::max({run.worldSize, t.worldSize, t.rank + 1});
    run.steps += t.steps.size();
  }
  run.layers = series.layers;
  for (const std::string& layer : run.layers) {
    run.implementation.push_back(implementationOf(traces, series, layer));
    run.shapes.push_back(shapesOf(traces, layer));
  }
  return run;
}

// Hardware, versions and sampling from the metadata; then per common layer its implementation
// and shapes.
void findDifferences(const std::vector<RankTrace>& baseline, const std::vector<RankTrace>& current,
                     RunComparison* c) {
  const auto differ = [c](const std::string& layer, const std::string& what, const std::string& b,
                          const std::string& cur) {
    if (b != cur)
      c->differences.push_back(
          {layer, what, b.empty() ? "(not stated)" : b, cur.empty() ? "(not stated)" : cur});
  };
  static const std::pair<const char*, const char*> kRunKeys[] = {
      {"gpu_name", "GPU"},
      {"gpu_driver", "GPU driver"},
      {"gpu_memory_bytes", "GPU memory bytes"},
      {"cpu_model", "CPU"},
      {"cpu_cores", "CPU cores"},
      {"torch_threads", "torch threads"},
      {"blas", "BLAS"},
      {"torch_version", "torch version"},
      {"attnscope_version", "attnscope version"},
      {"sample_every", "sample every"},
      {"timing", "timing"}};
  differ("", "world size", std::to_string(c->baseline.worldSize),
         std::to_string(c->current.worldSize));
  for (const auto& [key, what] : kRunKeys)
    differ("", what, metaOf(baseline, key), metaOf(current, key));
  for (size_t i = 0; i < c->baseline.layers.size(); ++i) {
    const std::string& layer = c->baseline.layers[i];
    const auto it = std::find(c->current.layers.begin(), c->current.layers.end(), layer);
    if (it == c->current.layers.end()) continue;
    const size_t j = static_cast<size_t>(it - c->current.layers.begin());
    differ(layer, "implementation", c->baseline.implementation[i], c->current.implementation[j]);
    AttentionShape b, cur;
    const bool haveB = parseAttentionShape(metaOf(baseline, attentionShapeKey(layer)), &b, nullptr);
    const bool haveC =
        parseAttentionShape(metaOf(current, attentionShapeKey(layer)), &cur, nullptr);
    if (haveB && haveC) {
      differ(layer, "dtype", b.dtype, cur.dtype);
      differ(layer, "shapes", b.describeShapes(), cur.describeShapes());
    }
  }
}

}  // namespace

const char* verdictName(Verdict v) {
  switch (v) {
    case Verdict::kFaster:
      return "faster";
    case Verdict::kSlower:
      return "slower";
    case Verdict::kSame:
      return "same within noise";
    case Verdict::kOnlyBaseline:
      return "only in baseline";
    case Verdict::kOnlyCurrent:
      return "only in current";
  }
  return "?";
}

size_t RunComparison::count(Verdict v) const {
  return static_cast<size_t>(std::count_if(cells.begin(), cells.end(),
                                           [v](const ComparedCell& c) { return c.verdict == v; }));
}

bool compareRuns(const std::string& baselineDir, const std::vector<RankTrace>& baseline,
                 const std::vector<SkippedFile>& baselineSkipped, const std::string& currentDir,
                 const std::vector<RankTrace>& current,
                 const std::vector<SkippedFile>& currentSkipped, const ComparisonOptions& options,
                 RunComparison* out, std::string* error) {
  if (baseline.empty() || current.empty()) {
    *error = "no readable rank file (rank-<r>.sqlite) in " +
             (baseline.empty() ? baselineDir : currentDir);
    return false;
  }
  const RunSeries b = seriesOf(baseline);
  const RunSeries c = seriesOf(current);
  RunComparison& r = *out;
  r = RunComparison();
  r.options = options;
  r.baseline = describeRun(baselineDir, baseline, baselineSkipped, b);
  r.current = describeRun(currentDir, current, currentSkipped, c);
  for (const std::string& l : b.layers) {
    if (std::find(c.layers.begin(), c.layers.end(), l) == c.layers.end())
      r.onlyBaseline.push_back(l);
  }
  for (const std::string& l : c.layers) {
    if (std::find(b.layers.begin(), b.layers.end(), l) == b.layers.end())
      r.onlyCurrent.push_back(l);
  }
  if (r.onlyBaseline.size() == b.layers.size()) {
    const auto list = [](const std::vector<std::string>& v) {
      std::string s;
      for (size_t i = 0; i < v.size() && i < 4; ++i) s += (i > 0 ? ", " : "") + v[i];
      if (v.size() > 4) s += ", ... (" + std::to_string(v.size()) + " layers)";
      return v.empty() ? std::string("no attention layer") : s;
    };
    *error = "the runs share no attention layer (different models?): baseline " + baselineDir +
             " has " + list(b.layers) + "; " + currentDir + " has " + list(c.layers) +
             "; compare runs of the same model";
    return false;
  }
  findDifferences(baseline, current, &r);
  // Cells in layer order (common layers and the all-layers total), phase, kind.
  std::vector<std::string> order = {ComparedCell::kAllLayers};
  for (const std::string& l : b.layers) {
    if (std::find(c.layers.begin(), c.layers.end(), l) != c.layers.end()) order.push_back(l);
  }
  const CellSeries empty;
  uint64_t seed = options.seed;
  struct Pending {
    size_t cell;
    const CellSeries* baseline;
    const CellSeries* current;
  };
  std::vector<Pending> toResample;
  double draws = 0;  // steps drawn per resample, all cells
  for (const std::string& layer : order) {
    for (int phase = 0; phase < kNumPhases; ++phase) {
      for (int kind = kAllKinds; kind >= 0; --kind) {  // the whole call first
        const CellKey key(layer, phase, kind);
        const auto bi = b.cells.find(key);
        const auto ci = c.cells.find(key);
        if (bi == b.cells.end() && ci == c.cells.end()) continue;
        const CellSeries& bs = bi != b.cells.end() ? bi->second : empty;
        const CellSeries& cs = ci != c.cells.end() ? ci->second : empty;
        ComparedCell cell;
        cell.layer = layer;
        cell.phase = static_cast<Phase>(phase);
        cell.kind = static_cast<OpKind>(kind);
        cell.baselineSeconds = bs.seconds.empty() ? 0 : rankMedian(bs.seconds);
        cell.currentSeconds = cs.seconds.empty() ? 0 : rankMedian(cs.seconds);
        if (!std::isfinite(cell.baselineSeconds)) cell.baselineSeconds = 0;
        if (!std::isfinite(cell.currentSeconds)) cell.currentSeconds = 0;
        cell.baselineSteps = countOf(bs.seconds);
        cell.currentSteps = countOf(cs.seconds);
        const double bp = bs.peak.empty() ? kNaN : rankMedian(bs.peak);
        const double cp = cs.peak.empty() ? kNaN : rankMedian(cs.peak);
        cell.baselinePeak = std::isfinite(bp) ? static_cast<int64_t>(bp) : 0;
        cell.currentPeak = std::isfinite(cp) ? static_cast<int64_t>(cp) : 0;
        cell.peakRatio = cell.baselinePeak > 0 && cell.currentPeak > 0
                             ? static_cast<double>(cell.currentPeak) / cell.baselinePeak
                             : kNaN;
        cell.ratio = kNaN;
        cell.ratioLow = cell.ratioHigh = kNaN;
        if (cell.baselineSeconds == 0 && cell.currentSeconds == 0) continue;
        if (cell.baselineSeconds > 0 && cell.currentSeconds > 0) {
          cell.ratio = cell.currentSeconds / cell.baselineSeconds;
          toResample.push_back({r.cells.size(), &bs, &cs});
          draws += static_cast<double>(cell.baselineSteps + cell.currentSteps);
        }
        r.cells.push_back(cell);
      }
    }
  }
  // The bootstrap draws every step of both runs per cell and resample: its work is bounded to
  // kMaxDraws by taking fewer resamples (not below kMinResamples) on long runs of many layers.
  if (draws > 0) {
    r.options.resamples =
        static_cast<int>(std::max<double>(std::min(options.resamples, kMinResamples),
                                          std::min<double>(options.resamples, kMaxDraws / draws)));
  }
  for (const Pending& p : toResample) {
    ComparedCell& cell = r.cells[p.cell];
    bootstrapRatio(*p.baseline, *p.current, r.options, seed++, &cell.ratioLow, &cell.ratioHigh);
  }
  for (ComparedCell& cell : r.cells) cell.verdict = verdictOf(cell, options);
  // The all-layers totals first (the headline), then regressions (the largest added time first),
  // then savings (the largest first), then the rest in the order above.
  const auto rankOf = [](const ComparedCell& c) {
    if (c.layer == ComparedCell::kAllLayers) return -1;
    return c.verdict == Verdict::kSlower ? 0 : c.verdict == Verdict::kFaster ? 1 : 2;
  };
  std::stable_sort(r.cells.begin(), r.cells.end(),
                   [&](const ComparedCell& x, const ComparedCell& y) {
                     const int rx = rankOf(x), ry = rankOf(y);
                     if (rx != ry) return rx < ry;
                     if (rx == 0) return x.deltaSeconds() > y.deltaSeconds();
                     if (rx == 1) return x.deltaSeconds() < y.deltaSeconds();
                     return false;
                   });
  return true;
}

std::string renderLayersJson(const std::string& dir, const std::vector<RankTrace>& traces,
                             const std::vector<SkippedFile>& skipped) {
  const RunSeries series = seriesOf(traces);
  const ComparedRun run = describeRun(dir, traces, skipped, series);
  const auto medianMeta = [&](const char* key) {
    std::vector<double> values;
    for (const RankTrace& t : traces) {
      const auto it = t.meta.find(key);
      if (it == t.meta.end()) continue;
      char* end = nullptr;
      const double v = std::strtod(it->second.c_str(), &end);
      if (!it->second.empty() && *end == '\0' && std::isfinite(v) && v > 0) values.push_back(v);
    }
    return values.empty() ? kNaN : detail::median(values);
  };
  std::string device = metaOf(traces, "gpu_name");
  if (device.empty()) device = metaOf(traces, "cpu_model");
  std::ostringstream o;
  o << "{\n  \"schema\": \"attnscope.layers/1\",\n  \"trace_dir\": " << text::jsonString(dir)
    << ",\n  \"world_size\": " << run.worldSize << ", \"ranks\": " << run.ranks
    << ", \"sampled_steps\": " << run.steps
    << ",\n  \"steps_seen\": " << text::jsonNumber(medianMeta("steps_seen"))
    << ", \"sample_every\": " << text::jsonNumber(medianMeta("sample_every"))
    << ", \"torch_threads\": " << text::jsonNumber(medianMeta("torch_threads"))
    << ",\n  \"torch_version\": " << text::jsonString(metaOf(traces, "torch_version"))
    << ", \"attnscope_version\": " << text::jsonString(metaOf(traces, "attnscope_version"))
    << ", \"device\": " << text::jsonString(device)
    << ", \"timing\": " << text::jsonString(metaOf(traces, "timing"))
    << ",\n  \"peak_flops_per_second\": " << text::jsonNumber(medianMeta("peak_flops_per_second"))
    << ", \"peak_bytes_per_second\": " << text::jsonNumber(medianMeta("peak_bytes_per_second"))
    << ",\n  \"skipped_files\": [";
  for (size_t i = 0; i < skipped.size(); ++i) {
    o << (i ? ", " : "") << "{\"file\": " << text::jsonString(skipped[i].path)
      << ", \"reason\": " << text::jsonString(skipped[i].reason) << "}";
  }
  o << "],\n  \"layers\": [";
  for (size_t i = 0; i < run.layers.size(); ++i) {
    const std::string& layer = run.layers[i];
    o << (i ? ",\n    " : "\n    ") << "{\"layer\": " << text::jsonString(layer)
      << ", \"implementation\": " << text::jsonString(run.implementation[i]);
    const auto calls = series.forwardCalls.find(layer);
    o << ", \"calls_per_step\": "
      << text::jsonNumber(calls == series.forwardCalls.end() ? kNaN : rankMedian(calls->second))
      << ", \"shape\": ";
    AttentionShape s;
    if (parseAttentionShape(metaOf(traces, attentionShapeKey(layer)), &s, nullptr) &&
        s.complete()) {
      o << "{\"op\": " << text::jsonString(s.op) << ", \"backend\": " << text::jsonString(s.backend)
        << ", \"batch\": " << s.batch << ", \"heads\": " << s.heads
        << ", \"kv_heads\": " << s.kvHeads << ", \"q_len\": " << s.qLen
        << ", \"kv_len\": " << s.kvLen << ", \"head_dim\": " << s.headDim
        << ", \"dtype\": " << text::jsonString(s.dtype) << ", \"causal\": "
        << (s.causal < 0 ? "null"
            : s.causal   ? "true"
                         : "false")
        << ", \"mask\": " << text::jsonString(s.mask)
        << ", \"dropout\": " << (s.dropout < 0 ? "null" : text::jsonNumber(s.dropout))
        << ", \"changes\": " << s.changes << "}";
    } else {
      o << "null";
    }
    for (const char* what : {"seconds_per_step", "peak_bytes"}) {
      o << ", \"" << what << "\": {";
      bool firstPhase = true;
      for (int phase = 0; phase < kNumPhases; ++phase) {
        bool firstKind = true;
        for (int kind = kAllKinds; kind >= 0; --kind) {
          const auto it = series.cells.find(CellKey(layer, phase, kind));
          if (it == series.cells.end()) continue;
          const double v =
              rankMedian(std::string(what) == "peak_bytes" ? it->second.peak : it->second.seconds);
          if (firstKind)
            o << (firstPhase ? "" : ", ") << "\"" << phaseName(static_cast<Phase>(phase))
              << "\": {";
          o << (firstKind ? "" : ", ") << "\""
            << (kind == kAllKinds ? "all" : opKindName(static_cast<OpKind>(kind)))
            << "\": " << text::jsonNumber(v);
          firstKind = false;
          firstPhase = false;
        }
        if (!firstKind) o << "}";
      }
      o << "}";
    }
    o << "}";
  }
  o << "]\n}\n";
  return o.str();
}

}  // namespace analysis
}  // namespace attnscope
