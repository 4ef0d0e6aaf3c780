// Precision and recall of the straggler and cell-outlier detector, by simulation at 64 to 16,384
// ranks, for the three typical-time statistics side by side (Typical::kFastHalfMean, kMedian,
// kMean), all fed the same simulated windows in one run.
//
// What runs is the detector's own code: each rank's window is a real StatsTable filled with
// CallRecords; its RankWindow scalars are made as reporter/src/Reporter.cpp's scalars() makes them
// (forward / backward seconds = the sum over layers of typicalSecondsPerStep of the call cell,
// with the statistic under test); each rank compares its table with the others' (the summed table
// less its own, through flatten/fromFlat, as the reporter's all-reduce delivers it) with
// compareCells against the others' sum of the window before and sends the result with the window,
// as the reporter does; rank 0's
// StragglerDetector (options from Config's defaults) makes the rounds and updateEpisodes the
// episodes.
//
//   build/bench/detection_bench [--trials 30] [--sizes 64,1024,16384]
//       [--profiles measured,oversubscribed,heavy] [--seed 1] [--by-slowed] [--json FILE]
//       [--cell-factor F]   # ATTNSCOPE_CELL_OUTLIER_FACTOR for the run (default Config's)
//       [--cell-sigmas Z]   # ATTNSCOPE_CELL_OUTLIER_SIGMAS for the run (default Config's)
//       [--cell-min-share S]   # ATTNSCOPE_CELL_OUTLIER_MIN_SHARE for the run (default Config's)
//       [--steps-per-window N]   # 20 (a 1 s window of the example); 200 is the default 10 s
//       [--windows N]   # windows per trial (default 8, at least 8): longer injections show splits
//       [--entry-limits-only]   # a held cell judged at the entry limits (the rule before CellHold)
// prints a Markdown table (rows pooled over 1-3 slowed ranks; --by-slowed: one row per count);
// --json writes one record per condition and slowed count. Each size and profile is independent
// (its own seeds), so a full run may be split over processes by --sizes and --profiles.
//   build/bench/detection_bench --quick     # smoke run (ctest DetectionBench.quick, label bench)
//
// The model: 4 layers x forward/backward x 5 op kinds (QKV projection, score matmul, softmax,
// context matmul, output projection) with the per-call times of the example below; 8 windows
// (--windows) of 20 steps (all sampled); one call per layer and phase per step. An injection
// starts in window 1 and lasts to the end: one cell (random layer, phase and kind per slowed
// rank) or one whole layer (random) of 1, 2 or 3 random ranks runs `factor` x its body time. The
// other ranks are healthy: every finding on them is false.
//
// Noise, fitted to the example on this machine (2 cores shared with other builds, load 2-4) by
// bench/detection_noise_fit.py: examples/train_transformer --layers 4 --d-model 64 --heads 4
// --seq 32 --batch 8 --threads 1, 20 s, 1 s windows, ATTNSCOPE_TRACE_DIR set, 2 and 4 ranks over
// Gloo as tests/integration/ranks.py launches them; per-step op-kind times decoded from the
// traces' steps table (trace/src/TraceFormat.cpp's encoding), one call per layer and phase
// per step (272 steps at 2 ranks, 99 at 4).
// - Body: lognormal around each cell's median. sigma = (q50 - q16) of log time per cell: median
//   over the 120 cells 0.27 at 2 ranks (quartiles 0.19-0.36), 0.33 at 4 ranks (0.26-0.39).
// - Preemption is additive, not a factor: a hit call gains one or more scheduler slices, 4.1 ms
//   (median extra time of a hit at 2 ranks; 90% 8.2 ms, max 49 ms), 12 ms at 4 ranks (90% 24 ms,
//   max 36 ms). On ops of 40-600 us that is a stretch of 7-120x. A hit is a call more than 2x its
//   cell's median and 0.5 ms above it. Hits come at a rate per second of the op's own time, so
//   long ops are hit more often (p = 1 - exp(-lambda d)): lambda = 193/s at 2 ranks (a 1.4 ms
//   whole call hit 20% of the time, a 100 us op 2%), 259/s at 4 ranks (25%). The extra time of a
//   hit above 3 ms is Pareto: alpha 2.08 at 2 ranks, 0.74 at 4 ranks (MLE). Per window the rate
//   varied by about 25% beyond the binomial spread (call-level hit rates 10-42% per 1 s window).
// Profiles:
// - measured: every rank as at 2 ranks: sigma 0.27, lambda 193/s x lognormal(0.25) per rank and
//   window, extra 3 ms x Pareto(2.08), at most 50 ms.
// - oversubscribed: as measured, and 1 rank in 16 (chosen per trial, kept for the trial) crowded:
//   in each window every op call is hit with a probability drawn from U[0.3, 0.6], the extra time
//   as at 4 ranks (3 ms x Pareto(0.74), at most 40 ms). A deliberate stress case: per op kind the
//   example showed at most 0.6-0.75 in single 1 s windows (5 calls) of the largest op, 10-42% per
//   whole call; it is the case in which a median jumps between its two modes.
// - heavy: every rank as at 4 ranks and heavier: sigma 0.33, lambda 259/s, extra 3 ms x
//   Pareto(0.74), at most 200 ms.
//
// Scoring (per statistic, pooled over trials):
// - a finding is an episode (updateEpisodes). A straggler episode is true when its rank is slowed;
//   a cell-outlier episode when its rank is slowed and it names the injected cell (for a slowed
//   layer: any cell of that layer). Precision = true / all findings; recall = slowed ranks with a
//   true finding / slowed ranks; 95% Wilson intervals.
// - false findings per 1,000 rank-windows (all false episodes over all rank-windows scored);
//   episodes per injection (findings on a detected slowed rank: 1 is one unbroken episode);
//   latency: windows from the injection's start to the first round flagging it, that round
//   included (a straggler needs 3 windows, and so does a cell: each window is compared with the
//   others' of the window before, so the cell goes out with its own window).
// - measured factor: the injected cell's (or the slowed layer's whole forward call's) typical time
//   on the slowed rank over the others' (merged histogram), median over injected rank-windows.
// - true rank factor: how much the injection moves the rank's noise-free attention time: what the
//   straggler score can see (threshold 1.2).
//
// Cost: every rank's window is generated from (seed, trial, rank, window), so no rank's table is
// kept: pass 1 builds each window's sum and every rank's scalars; the comparisons run in a second
// pass that regenerates a rank's table. Straggler scores are exact for every rank at every size.
// Cell comparisons: at 64 ranks every rank, against each condition's exact sum. At 1,024 every
// healthy rank and at 16,384 a uniform random sample of 2,048 healthy ranks, compared once per
// trial against the sum without injections and reused by the trial's conditions (a rank's cell
// finding depends on its own windows and the others' sum only); the slowed ranks against the
// condition's exact sum. The shortcut leaves at most 3 of 1,023 others' calls in a cell
// unslowed, which moves the others' typical time by at most 0.3% x (factor - 1): far below the
// 1.3x outlier factor, so it does not bias false findings; at 16,384 the sample's false findings
// are scaled by healthy ranks / sampled ranks for precision.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnscope/core/Attribution.h"
#include "attnscope/core/ClusterReport.h"
#include "attnscope/core/Config.h"
#include "attnscope/core/Log.h"
#include "attnscope/core/RankWindow.h"
#include "attnscope/core/StatsTable.h"
#include "attnscope/core/StragglerDetector.h"
#include "attnscope/core/StragglerEpisodes.h"

namespace {

using attnscope::CellComparison;
using attnscope::ClusterRound;
using attnscope::DetectorEpisode;
using attnscope::OpKind;
using attnscope::Phase;
using attnscope::RankStatus;
using attnscope::RankWindow;
using attnscope::StatsTable;
using attnscope::Typical;

constexpr int kLayers = 4;
constexpr int kPhases = 2;  // forward, backward
constexpr int kKinds = 5;
int gWindows = 8;  // windows per trial (--windows)
// --entry-limits-only: a held cell judged at the entry limits, as before CellHold (to compare).
bool gExitLimits = true;
int gSteps = 20;  // steps per window (--steps-per-window): 20 is a 1 s window of the example
constexpr int kInjectFrom = 1;  // first slowed window
constexpr int kMaxSlowed = 3;
constexpr int kSampleAt16k = 2048;
constexpr OpKind kKindOf[kKinds] = {OpKind::kQkvProjection, OpKind::kScoreMatmul, OpKind::kSoftmax,
                                    OpKind::kContextMatmul, OpKind::kOutputProjection};
// Median per-call time of each op kind in the example (2 ranks), forward and backward.
constexpr double kBaseSeconds[kPhases][kKinds] = {{145e-6, 100e-6, 71e-6, 80e-6, 112e-6},
                                                  {215e-6, 113e-6, 41e-6, 112e-6, 103e-6}};
// The cell-outlier limits of the run: Config's defaults, or --cell-factor / --cell-sigmas.
attnscope::CellOutlierLimits gLimits = attnscope::cellOutlierLimits(attnscope::Config{});
const attnscope::StragglerOptions gOptions = attnscope::stragglerOptions(attnscope::Config{});
constexpr int kStatistics = 3;
constexpr Typical kStatistic[kStatistics] = {Typical::kFastHalfMean, Typical::kMedian,
                                             Typical::kMean};
constexpr const char* kStatisticName[kStatistics] = {"fast-half mean", "median", "mean"};

struct Profile {
  const char* name;
  double sigma;        // lognormal body
  double lambda;       // preemption hits per second of op time
  double windowSigma;  // lognormal spread of lambda per rank and window
  double delayMin;     // extra time of a hit: delayMin x Pareto(alpha), at most delayMax
  double delayAlpha;
  double delayMax;
  double crowdedShare;  // ranks crowded for the whole trial
  double crowdedLo, crowdedHi, crowdedAlpha, crowdedMax;
};

const Profile kProfiles[] = {
    {"measured", 0.27, 193, 0.25, 3e-3, 2.08, 50e-3, 0, 0, 0, 0, 0},
    {"oversubscribed", 0.27, 193, 0.25, 3e-3, 2.08, 50e-3, 1.0 / 16, 0.3, 0.6, 0.74, 40e-3},
    {"heavy", 0.33, 259, 0.25, 3e-3, 0.74, 200e-3, 0, 0, 0, 0, 0},
};

enum class Slow { kNone, kCell, kLayer };
struct Condition {
  Slow slow;
  double factor;
  int slowed;
  std::string name() const {
    char buf[64];
    if (slow == Slow::kNone) return "none";
    std::snprintf(buf, sizeof(buf), "%s %.1fx", slow == Slow::kCell ? "cell" : "layer", factor);
    return buf;
  }
};

// xoshiro256** seeded through splitmix64: fast, and the same stream on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& w : s_) {
      seed += 0x9e3779b97f4a7c15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      w = z ^ (z >> 31);
    }
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }       // [0, 1)
  double open() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }  // (0, 1)
  double normal() {  // Box-Muller, one of the pair
    return std::sqrt(-2 * std::log(open())) * std::cos(6.283185307179586 * uniform());
  }
  int below(int n) { return static_cast<int>(uniform() * n); }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t z = a * 0x9e3779b97f4a7c15ull + b + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// exp(sigma z) for a standard normal z by table: the inverse normal CDF at 2^14 equally spaced
// probabilities, interpolated (z within +-3.9; the body's tail beyond is the preemption model's).
class LognormalTable {
 public:
  explicit LognormalTable(double sigma) : factor_(kSize + 1) {
    for (int i = 0; i <= kSize; ++i) {
      const double q = (i + 0.5) / (kSize + 1);
      double lo = -10, hi = 10;  // bisection on Phi(z) = 0.5 erfc(-z / sqrt 2)
      for (int it = 0; it < 80; ++it) {
        const double mid = 0.5 * (lo + hi);
        (0.5 * std::erfc(-mid / std::sqrt(2.0)) < q ? lo : hi) = mid;
      }
      factor_[i] = std::exp(sigma * 0.5 * (lo + hi));
    }
  }
  double draw(double u) const {  // u in [0, 1)
    const double x = u * kSize;
    const int i = static_cast<int>(x);
    return factor_[i] + (x - i) * (factor_[i + 1] - factor_[i]);
  }

 private:
  static constexpr int kSize = 1 << 14;
  std::vector<double> factor_;
};

// What a slowed rank runs slower: one cell, or (kind < 0) every cell of a layer.
struct Injection {
  int layer = -1;
  int phase = 0;
  int kind = -1;
  double factor = 1;
  bool active() const { return layer >= 0; }
  bool covers(int l, int p, int k) const {
    return l == layer && (kind < 0 || (p == phase && k == kind));
  }
};

std::string layerName(int l) { return "layers." + std::to_string(l) + ".attn"; }

const std::vector<std::string>& layerNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (int l = 0; l < kLayers; ++l) n.push_back(layerName(l));
    return n;
  }();
  return names;
}

// One rank's window, from (trial seed, rank, window) alone: the same draws whatever is injected
// (3 per op call), so conditions differ only by the injection.
StatsTable rankWindow(const Profile& p, uint64_t trialSeed, int rank, int window, bool crowded,
                      const Injection& injection) {
  static const Profile* tableFor = nullptr;
  static std::unique_ptr<LognormalTable> body;
  if (tableFor != &p) {
    body = std::make_unique<LognormalTable>(p.sigma);
    tableFor = &p;
  }
  Rng rng(mix(mix(trialSeed, static_cast<uint64_t>(rank)), static_cast<uint64_t>(window)));
  const double lambda =
      p.lambda * std::exp(p.windowSigma * rng.normal() - 0.5 * p.windowSigma * p.windowSigma);
  const double crowdedHit = p.crowdedLo + (p.crowdedHi - p.crowdedLo) * rng.uniform();
  StatsTable t(kLayers);
  for (const std::string& name : layerNames()) t.layerId(name);
  for (int step = 0; step < gSteps; ++step) {
    for (int l = 0; l < kLayers; ++l) {
      for (int ph = 0; ph < kPhases; ++ph) {
        attnscope::CallRecord r;
        r.layer = l;
        r.phase = static_cast<Phase>(ph);
        for (int k = 0; k < kKinds; ++k) {
          double d = kBaseSeconds[ph][k] * body->draw(rng.uniform());
          if (injection.covers(l, ph, k)) d *= injection.factor;
          const double u = rng.uniform(), v = rng.open();
          const double hit = crowded ? crowdedHit : 1 - std::exp(-lambda * d);
          if (u < hit) {
            const double alpha = crowded ? p.crowdedAlpha : p.delayAlpha;
            const double most = crowded ? p.crowdedMax : p.delayMax;
            d += std::min(most, p.delayMin * std::pow(v, -1 / alpha));
          }
          auto& kind = r.kinds[static_cast<int>(kKindOf[k])];
          kind.ns = std::llround(d * 1e9);
          kind.ops = 1;
          r.ns += kind.ns;
        }
        t.add(r);
      }
    }
  }
  return t;
}

struct Scalars {
  float forward[kStatistics];
  float backward[kStatistics];
};

// reporter/src/Reporter.cpp's scalars(): per layer and phase, the typical call time x calls per
// step, summed into forward and backward.
Scalars scalarsOf(const StatsTable& t) {
  Scalars s{};
  for (int i = 0; i < kStatistics; ++i) {
    double fwd = 0, bwd = 0;
    for (const attnscope::LayerStats& layer : t.layers()) {
      for (int p = 0; p < attnscope::kNumPhases; ++p) {
        const attnscope::PhaseStats* phase = layer.phases[p].get();
        if (phase == nullptr) continue;
        const double seconds = attnscope::typicalSecondsPerStep(phase->call, gSteps, kStatistic[i]);
        (p == static_cast<int>(Phase::kBackward) ? bwd : fwd) += seconds;
      }
    }
    s.forward[i] = static_cast<float>(fwd);
    s.backward[i] = static_cast<float>(bwd);
  }
  return s;
}

// The injected cell's (or the slowed layer's forward call's) typical time over the others'.
double measuredFactor(const StatsTable& mine, const StatsTable& others, const Injection& inj,
                      Typical statistic) {
  const int phase = inj.kind < 0 ? 0 : inj.phase;
  const attnscope::PhaseStats* a = mine.layers()[inj.layer].phases[phase].get();
  const attnscope::PhaseStats* c = others.layers()[inj.layer].phases[phase].get();
  if (a == nullptr || c == nullptr) return 0;
  const attnscope::CellStats* ca =
      inj.kind < 0 ? &a->call : a->kinds[static_cast<int>(kKindOf[inj.kind])].get();
  const attnscope::CellStats* cc =
      inj.kind < 0 ? &c->call : c->kinds[static_cast<int>(kKindOf[inj.kind])].get();
  if (ca == nullptr || cc == nullptr) return 0;
  const double theirs = attnscope::typicalSecondsPerCall(cc->seconds, statistic);
  return theirs > 0 ? attnscope::typicalSecondsPerCall(ca->seconds, statistic) / theirs : 0;
}

// Counts of one (profile, size, condition, statistic) over its trials.
struct Tally {
  int64_t injected = 0;  // slowed ranks
  int64_t stragglerFound = 0, cellFound = 0;
  int64_t stragglerTrue = 0, stragglerFalse = 0, cellTrue = 0;
  int64_t stragglerFalseCrowded = 0;
  double cellFalse = 0;  // scaled at 16,384 (sampled healthy ranks)
  double cellFalseCrowded = 0;
  double rankWindows = 0;      // rank-windows the straggler counts cover
  double cellRankWindows = 0;  // rank-windows the cell counts cover (before scaling)
  int64_t stragglerEpisodesOnFound = 0, cellEpisodesOnFound = 0;
  std::vector<int> stragglerLatency, cellLatency;
  std::vector<double> factors;
  std::vector<double> trueRankFactors;  // per injection
};

struct Wilson {
  double p, lo, hi;
};
Wilson wilson(double k, double n) {
  if (n <= 0) return {NAN, NAN, NAN};
  const double z = 1.959963984540054, ph = k / n, z2 = z * z;
  const double centre = (ph + z2 / (2 * n)) / (1 + z2 / n);
  const double half = z * std::sqrt(ph * (1 - ph) / n + z2 / (4 * n * n)) / (1 + z2 / n);
  return {ph, std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Noise-free attention time of a rank with this injection over a healthy rank's.
double trueRankFactor(const Injection& inj) {
  double healthy = 0, slowed = 0;
  for (int l = 0; l < kLayers; ++l) {
    for (int p = 0; p < kPhases; ++p) {
      for (int k = 0; k < kKinds; ++k) {
        healthy += kBaseSeconds[p][k];
        slowed += kBaseSeconds[p][k] * (inj.covers(l, p, k) ? inj.factor : 1);
      }
    }
  }
  return slowed / healthy;
}

struct Trial {
  int ranks = 0;
  uint64_t seed = 0;
  std::vector<uint8_t> crowded;
  std::vector<int> slowed;               // kMaxSlowed distinct ranks; a condition uses the first k
  std::vector<Injection> cellOf;         // per slowed rank: its cell (factor set per condition)
  std::vector<int> layerOf;              // per slowed rank: its layer
  std::vector<int> evaluated;            // healthy ranks whose cells are compared
  double healthyScale = 1;               // healthy ranks / evaluated healthy ranks
  std::vector<std::vector<double>> sum;  // per window: flattened sum over all ranks, no injection
  std::vector<Scalars> scalars;          // [window * ranks + rank], no injection
  // Per statistic, per window, per evaluated healthy rank: its comparison (shared by conditions).
  std::vector<std::vector<std::vector<CellComparison>>> healthyCells;
  bool exactHealthy = false;  // 64 ranks: healthy comparisons redone per condition
};

bool isSlowed(const std::vector<int>& slowed, int k, int rank) {
  for (int i = 0; i < k; ++i) {
    if (slowed[i] == rank) return true;
  }
  return false;
}

void setUp(Trial* t, const Profile& p, int ranks, uint64_t seed) {
  t->ranks = ranks;
  t->seed = seed;
  Rng rng(mix(seed, 0xfeed));
  t->crowded.assign(ranks, 0);
  if (p.crowdedShare > 0) {
    const int want = std::max(1, static_cast<int>(ranks * p.crowdedShare));
    for (int c = 0; c < want;) {
      const int r = rng.below(ranks);
      if (!t->crowded[r]) t->crowded[r] = 1, ++c;
    }
  }
  t->slowed.clear();
  t->cellOf.clear();
  t->layerOf.clear();
  while (static_cast<int>(t->slowed.size()) < kMaxSlowed) {
    const int r = rng.below(ranks);
    if (std::find(t->slowed.begin(), t->slowed.end(), r) != t->slowed.end()) continue;
    t->slowed.push_back(r);
    Injection cell;
    cell.layer = rng.below(kLayers);
    cell.phase = rng.below(kPhases);
    cell.kind = rng.below(kKinds);
    t->cellOf.push_back(cell);
    t->layerOf.push_back(rng.below(kLayers));
  }
  t->evaluated.clear();
  std::vector<int> healthy;
  for (int r = 0; r < ranks; ++r) {
    if (!isSlowed(t->slowed, kMaxSlowed, r)) healthy.push_back(r);
  }
  if (static_cast<int>(healthy.size()) > kSampleAt16k * 2) {
    // A uniform sample without replacement (partial Fisher-Yates), kept in rank order.
    for (int i = 0; i < kSampleAt16k; ++i) {
      std::swap(healthy[i], healthy[i + rng.below(static_cast<int>(healthy.size()) - i)]);
    }
    healthy.resize(kSampleAt16k);
    std::sort(healthy.begin(), healthy.end());
    t->healthyScale = static_cast<double>(ranks - kMaxSlowed) / kSampleAt16k;
  } else {
    t->healthyScale = 1;
  }
  t->evaluated = healthy;
  t->exactHealthy = ranks <= 64;
}

// The others' table as the reporter makes it: the sum less this rank's own, through flatten and
// fromFlat.
StatsTable othersOf(const StatsTable& mine, const std::vector<double>& sum) {
  std::vector<double> flat = mine.flatten();
  for (size_t i = 0; i < flat.size(); ++i) flat[i] = sum[i] - flat[i];
  return StatsTable::fromFlat(layerNames(), flat);
}

void setCell(RankWindow* w, const CellComparison& c) {
  w->cellLayer = c.outlier.layer;
  w->cellPhase = c.outlier.phase;
  w->cellKind = c.outlier.kind;
  w->cellFactor = c.outlier.factor;
  w->cellShare = c.outlier.share;
  w->topLayer = c.attribution.layer;
  w->topPhase = c.attribution.phase;
  w->topKind = c.attribution.kind;
  w->topShare = c.attribution.share;
}

// What the rank's CellHold sees of a window: its sampled steps and the cell it names.
void observe(attnscope::CellHold* hold, const CellComparison& c) {
  RankWindow w;
  w.present = true;
  w.steps = w.sampledSteps = gSteps;
  setCell(&w, c);
  hold->observe(w);
}

// compareCells as the reporter calls it: the cell the detector holds (else the one named last)
// kept, and the window observed by the rank's CellHold.
CellComparison compare(const StatsTable& mine, const StatsTable& others, int ranks,
                       attnscope::CellHold* hold, Typical statistic) {
  const CellComparison c =
      attnscope::compareCells(mine, gSteps, others, static_cast<uint64_t>(gSteps) * (ranks - 1),
                              gLimits, hold->keep(), gExitLimits && hold->held(), statistic);
  observe(hold, c);
  return c;
}

// Pass 1: the injection-free sums and scalars of every rank, and the shared healthy comparisons.
void passOne(Trial* t, const Profile& p) {
  const int n = t->ranks;
  t->sum.assign(gWindows, {});
  t->scalars.assign(static_cast<size_t>(gWindows) * n, Scalars{});
  const Injection none;
  for (int w = 0; w < gWindows; ++w) {
    StatsTable sum(kLayers);
    for (const std::string& name : layerNames()) sum.layerId(name);
    for (int r = 0; r < n; ++r) {
      const StatsTable mine = rankWindow(p, t->seed, r, w, t->crowded[r], none);
      t->scalars[static_cast<size_t>(w) * n + r] = scalarsOf(mine);
      sum.merge(mine);
    }
    t->sum[w] = sum.flatten();
  }
  t->healthyCells.assign(kStatistics, {});
  if (t->exactHealthy) return;
  for (int i = 0; i < kStatistics; ++i) {
    t->healthyCells[i].assign(gWindows, std::vector<CellComparison>(t->evaluated.size()));
  }
  std::vector<attnscope::CellHold> holds(t->evaluated.size() * kStatistics,
                                         attnscope::CellHold(gOptions));
  for (attnscope::CellHold& hold : holds) observe(&hold, CellComparison{});  // window 0
  for (size_t e = 0; e < t->evaluated.size(); ++e) {
    const int r = t->evaluated[e];
    StatsTable before = rankWindow(p, t->seed, r, 0, t->crowded[r], none);
    for (int w = 1; w < gWindows; ++w) {
      // This window against the others' of the window before, as the reporter compares.
      const StatsTable others = othersOf(before, t->sum[w - 1]);
      StatsTable mine = rankWindow(p, t->seed, r, w, t->crowded[r], none);
      for (int i = 0; i < kStatistics; ++i) {
        t->healthyCells[i][w][e] =
            compare(mine, others, n, &holds[e * kStatistics + i], kStatistic[i]);
      }
      before = std::move(mine);
    }
  }
}

// The episodes of one detector. updateEpisodes looks up each flagged rank's ongoing episode among
// all episodes kept, so finished ones are moved out after each round, and it is handed only the
// ranks flagged in the round (the others change no episode).
struct Episodes {
  std::vector<DetectorEpisode> stragglers, hangs, cells;
  std::vector<DetectorEpisode> doneStragglers, doneCells;
  void update(const ClusterRound& round) {
    ClusterRound flagged;
    flagged.round = round.round;
    for (const RankStatus& s : round.ranks) {
      if (s.straggler || s.cellOutlier || s.hung || s.missing) flagged.ranks.push_back(s);
    }
    attnscope::updateEpisodes(flagged, layerNames(), &stragglers, &hangs, &cells);
    retire(&stragglers, &doneStragglers, round.round);
    retire(&cells, &doneCells, round.round);
  }
  void finish() {
    retire(&stragglers, &doneStragglers, UINT64_MAX);
    retire(&cells, &doneCells, UINT64_MAX);
  }
  static void retire(std::vector<DetectorEpisode>* live, std::vector<DetectorEpisode>* done,
                     uint64_t round) {
    auto keep = std::stable_partition(
        live->begin(), live->end(), [&](const DetectorEpisode& f) { return f.lastRound >= round; });
    done->insert(done->end(), std::make_move_iterator(keep), std::make_move_iterator(live->end()));
    live->erase(keep, live->end());
  }
};

// Runs one condition of a prepared trial through the three detectors and adds to the tallies.
void runCondition(const Trial& t, const Profile& p, const Condition& cond,
                  std::array<Tally, kStatistics>* tallies) {
  const int n = t.ranks;
  const int k = cond.slowed;
  std::vector<Injection> inj(k);
  for (int i = 0; i < k; ++i) {
    inj[i] = t.cellOf[i];
    if (cond.slow == Slow::kLayer) {
      inj[i].layer = t.layerOf[i];
      inj[i].kind = -1;
    }
    inj[i].factor = cond.factor;
  }
  std::vector<attnscope::StragglerDetector> detectors;
  for (int i = 0; i < kStatistics; ++i) detectors.emplace_back(n, gOptions);
  std::array<Episodes, kStatistics> episodes;
  // Ranks compared per condition: the three that may be slowed (the first k are), and at 64 ranks
  // every healthy one.
  std::vector<int> exact(t.slowed.begin(), t.slowed.end());
  if (t.exactHealthy) exact.insert(exact.end(), t.evaluated.begin(), t.evaluated.end());
  std::vector<attnscope::CellHold> holds(exact.size() * kStatistics, attnscope::CellHold(gOptions));
  std::vector<StatsTable> othersBefore(exact.size());  // each compared rank's others, window before
  std::vector<RankWindow> windows(n);
  std::vector<std::vector<int>> firstStraggler(kStatistics, std::vector<int>(k, -1));
  std::vector<std::vector<int>> firstCell(kStatistics, std::vector<int>(k, -1));
  for (int w = 0; w < gWindows; ++w) {
    const bool injecting = w >= kInjectFrom;
    // This condition's sum: the injection-free one with the slowed ranks' windows swapped in.
    std::vector<double> sum = t.sum[w];
    std::vector<StatsTable> slowedTables;
    for (int i = 0; i < k && injecting; ++i) {
      const int r = t.slowed[i];
      const std::vector<double> plain =
          rankWindow(p, t.seed, r, w, t.crowded[r], Injection{}).flatten();
      slowedTables.push_back(rankWindow(p, t.seed, r, w, t.crowded[r], inj[i]));
      const std::vector<double> slow = slowedTables.back().flatten();
      for (size_t j = 0; j < sum.size(); ++j) sum[j] += slow[j] - plain[j];
    }
    std::vector<std::vector<CellComparison>> now(kStatistics,
                                                 std::vector<CellComparison>(exact.size()));
    std::vector<Scalars> exactScalars(exact.size());
    for (size_t e = 0; e < exact.size(); ++e) {
      const int r = exact[e];
      const bool slowedRank = static_cast<int>(e) < k;
      const StatsTable mine = slowedRank && injecting
                                  ? slowedTables[e]
                                  : rankWindow(p, t.seed, r, w, t.crowded[r], Injection{});
      exactScalars[e] =
          slowedRank && injecting ? scalarsOf(mine) : t.scalars[static_cast<size_t>(w) * n + r];
      StatsTable others = othersOf(mine, sum);
      for (int i = 0; i < kStatistics; ++i) {
        attnscope::CellHold* hold = &holds[e * kStatistics + i];
        if (w > 0) {
          now[i][e] = compare(mine, othersBefore[e], n, hold, kStatistic[i]);
        } else {
          observe(hold, now[i][e]);
        }
        if (slowedRank && injecting) {
          (*tallies)[i].factors.push_back(measuredFactor(mine, others, inj[e], kStatistic[i]));
        }
      }
      othersBefore[e] = std::move(others);
    }
    for (int i = 0; i < kStatistics; ++i) {
      for (int r = 0; r < n; ++r) {
        RankWindow& rw = windows[r];
        rw = RankWindow{};
        rw.rank = r;
        rw.present = true;
        rw.lastStep = static_cast<uint64_t>(w + 1) * gSteps;
        rw.steps = rw.sampledSteps = gSteps;
        const Scalars& s = t.scalars[static_cast<size_t>(w) * n + r];
        rw.forwardSeconds = s.forward[i];
        rw.backwardSeconds = s.backward[i];
      }
      // Each round carries the window's own comparison (against the others' window before).
      if (!t.exactHealthy) {
        for (size_t e = 0; e < t.evaluated.size(); ++e) {
          setCell(&windows[t.evaluated[e]], t.healthyCells[i][w][e]);
        }
      }
      for (size_t e = 0; e < exact.size(); ++e) {
        RankWindow& rw = windows[exact[e]];
        rw.forwardSeconds = exactScalars[e].forward[i];
        rw.backwardSeconds = exactScalars[e].backward[i];
        setCell(&rw, now[i][e]);
      }
      const ClusterRound& round = detectors[i].update(windows, 10.0 * (w + 1));
      episodes[i].update(round);
      for (int j = 0; j < k; ++j) {
        const RankStatus& s = round.ranks[t.slowed[j]];
        if (s.straggler && firstStraggler[i][j] < 0) firstStraggler[i][j] = w;
        const bool rightCell = s.cellOutlier && s.cellLayer == inj[j].layer &&
                               (inj[j].kind < 0 || (static_cast<int>(s.cellPhase) == inj[j].phase &&
                                                    s.cellKind == kKindOf[inj[j].kind]));
        if (rightCell && firstCell[i][j] < 0) firstCell[i][j] = w;
      }
    }
  }
  // Scoring.
  for (int i = 0; i < kStatistics; ++i) {
    Tally& tally = (*tallies)[i];
    episodes[i].finish();
    tally.injected += k;
    tally.rankWindows += static_cast<double>(n) * gWindows;
    const double cellRanks = kMaxSlowed + static_cast<double>(t.evaluated.size()) * t.healthyScale;
    tally.cellRankWindows += cellRanks * gWindows;
    std::vector<int> stragglerEpisodes(k, 0), cellEpisodes(k, 0);
    for (const DetectorEpisode& f : episodes[i].doneStragglers) {
      const auto it = std::find(t.slowed.begin(), t.slowed.begin() + k, f.rank);
      if (it != t.slowed.begin() + k) {
        ++tally.stragglerTrue;
        ++stragglerEpisodes[it - t.slowed.begin()];
      } else {
        ++tally.stragglerFalse;
        if (t.crowded[f.rank]) ++tally.stragglerFalseCrowded;
      }
    }
    for (const DetectorEpisode& f : episodes[i].doneCells) {
      const auto it = std::find(t.slowed.begin(), t.slowed.begin() + k, f.rank);
      if (it != t.slowed.begin() + k) {
        const Injection& in = inj[it - t.slowed.begin()];
        const bool right =
            f.layer == layerName(in.layer) &&
            (in.kind < 0 || (static_cast<int>(f.phase) == in.phase && f.kind == kKindOf[in.kind]));
        ++cellEpisodes[it - t.slowed.begin()];
        if (right) {
          ++tally.cellTrue;
        } else {
          tally.cellFalse += 1;
        }
      } else {
        // A sampled healthy rank stands for healthyScale of them; the other two that may be
        // slowed are compared in every trial.
        const double weight = isSlowed(t.slowed, kMaxSlowed, f.rank) ? 1 : t.healthyScale;
        tally.cellFalse += weight;
        if (t.crowded[f.rank]) tally.cellFalseCrowded += weight;
      }
    }
    for (int j = 0; j < k; ++j) {
      if (firstStraggler[i][j] >= 0) {
        ++tally.stragglerFound;
        tally.stragglerEpisodesOnFound += stragglerEpisodes[j];
        tally.stragglerLatency.push_back(firstStraggler[i][j] - kInjectFrom + 1);
      }
      if (firstCell[i][j] >= 0) {
        ++tally.cellFound;
        tally.cellEpisodesOnFound += cellEpisodes[j];
        tally.cellLatency.push_back(firstCell[i][j] - kInjectFrom + 1);
      }
    }
    for (int j = 0; j < k; ++j) tally.trueRankFactors.push_back(trueRankFactor(inj[j]));
  }
}

struct Options {
  int trials = 30;
  uint64_t seed = 1;
  std::vector<int> sizes = {64, 1024, 16384};
  std::vector<std::string> profiles = {"measured", "oversubscribed", "heavy"};
  std::vector<double> factors = {1.2, 1.5, 2.0};
  std::vector<int> slowedCounts = {1, 2, 3};
  bool bySlowed = false;
  bool quick = false;
  std::string json;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(item);
  return out;
}

int positive(const std::string& flag, const std::string& value, int most) {
  char* end = nullptr;
  const long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || v < 1 || v > most) {
    throw std::invalid_argument(flag + " " + value + ": expected an integer from 1 to " +
                                std::to_string(most));
  }
  return static_cast<int>(v);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--trials") {
      o.trials = positive(a, value(), 100000);
    } else if (a == "--seed") {
      o.seed = static_cast<uint64_t>(positive(a, value(), 1 << 30));
    } else if (a == "--sizes") {
      o.sizes.clear();
      for (const std::string& s : split(value())) o.sizes.push_back(positive(a, s, 1 << 20));
      for (int s : o.sizes) {
        if (s < kMaxSlowed + 2) {
          throw std::invalid_argument("--sizes " + std::to_string(s) + ": at least " +
                                      std::to_string(kMaxSlowed + 2) + " ranks");
        }
      }
    } else if (a == "--profiles") {
      o.profiles = split(value());
      for (const std::string& name : o.profiles) {
        bool known = false;
        for (const Profile& p : kProfiles) known = known || name == p.name;
        if (!known) {
          throw std::invalid_argument("--profiles " + name +
                                      ": expected measured, oversubscribed or heavy");
        }
      }
    } else if (a == "--by-slowed") {
      o.bySlowed = true;
    } else if (a == "--json") {
      o.json = value();
    } else if (a == "--cell-factor" || a == "--cell-sigmas" || a == "--cell-min-share") {
      const bool factor = a == "--cell-factor", share = a == "--cell-min-share";
      const std::string v = value();
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      const double most = share ? 1 : 100;
      if (v.empty() || *end != '\0' || !(factor ? x > 1 : x >= 0) || x > most) {
        throw std::invalid_argument(a + " " + v +
                                    (factor  ? ": expected a number above 1, at most 100"
                                     : share ? ": expected a number from 0 to 1"
                                             : ": expected a number from 0 to 100"));
      }
      (factor ? gLimits.factor : share ? gLimits.minShare : gLimits.sigmas) = x;
    } else if (a == "--steps-per-window") {
      gSteps = positive(a, value(), 100000);
    } else if (a == "--windows") {
      gWindows = positive(a, value(), 1000);
      if (gWindows < 8)
        throw std::invalid_argument("--windows " + std::to_string(gWindows) + ": at least 8");
    } else if (a == "--entry-limits-only") {
      gExitLimits = false;
    } else if (a == "--quick") {
      o.quick = true;
    } else {
      throw std::invalid_argument(
          "unknown argument " + a +
          " (allowed: --trials N, --seed N, --sizes A,B, --profiles "
          "measured,oversubscribed,heavy, --by-slowed, --json FILE, "
          "--cell-factor F, --cell-sigmas Z, --cell-min-share S, --steps-per-window N, "
          "--windows N, --entry-limits-only, --quick)");
    }
  }
  if (o.quick) {
    o.trials = std::min(o.trials, 4);
    o.sizes = {64};
    o.profiles = {"measured", "oversubscribed"};
    o.factors = {2.0};
    o.slowedCounts = {1};
  }
  return o;
}

std::string fmt(const char* format, double v) {
  if (std::isnan(v)) return "–";
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

std::string interval(const Wilson& w) {
  if (std::isnan(w.p)) return "–";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f (%.2f–%.2f)", w.p, w.lo, w.hi);
  return buf;
}

double meanOf(const std::vector<int>& v) {
  if (v.empty()) return NAN;
  double s = 0;
  for (int x : v) s += x;
  return s / static_cast<double>(v.size());
}

struct Row {
  std::string profile;
  int ranks;
  Condition cond;
  std::array<Tally, kStatistics> tally;
};

void merge(Tally* into, const Tally& t) {
  into->injected += t.injected;
  into->stragglerFound += t.stragglerFound;
  into->cellFound += t.cellFound;
  into->stragglerTrue += t.stragglerTrue;
  into->stragglerFalse += t.stragglerFalse;
  into->stragglerFalseCrowded += t.stragglerFalseCrowded;
  into->cellTrue += t.cellTrue;
  into->cellFalse += t.cellFalse;
  into->cellFalseCrowded += t.cellFalseCrowded;
  into->rankWindows += t.rankWindows;
  into->cellRankWindows += t.cellRankWindows;
  into->stragglerEpisodesOnFound += t.stragglerEpisodesOnFound;
  into->cellEpisodesOnFound += t.cellEpisodesOnFound;
  into->stragglerLatency.insert(into->stragglerLatency.end(), t.stragglerLatency.begin(),
                                t.stragglerLatency.end());
  into->cellLatency.insert(into->cellLatency.end(), t.cellLatency.begin(), t.cellLatency.end());
  into->factors.insert(into->factors.end(), t.factors.begin(), t.factors.end());
  into->trueRankFactors.insert(into->trueRankFactors.end(), t.trueRankFactors.begin(),
                               t.trueRankFactors.end());
}

void printTable(const std::vector<Row>& rows, int trials, bool bySlowed) {
  std::printf(
      "\n| profile | ranks | condition | statistic | straggler precision | straggler recall | "
      "cell precision | cell recall | false / 1k rank-windows (straggler, cell) | episodes per "
      "injection (straggler, cell) | latency, windows (straggler, cell) | measured factor | "
      "true rank factor |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& row : rows) {
    std::string cond = row.cond.name();
    if (row.cond.slow != Slow::kNone) {
      cond += bySlowed ? ", " + std::to_string(row.cond.slowed) + " slowed" : ", 1–3 slowed";
    }
    for (int i = 0; i < kStatistics; ++i) {
      const Tally& t = row.tally[i];
      const bool injected = t.injected > 0;
      const Wilson sp = wilson(static_cast<double>(t.stragglerTrue),
                               static_cast<double>(t.stragglerTrue + t.stragglerFalse));
      const Wilson cp =
          wilson(static_cast<double>(t.cellTrue), static_cast<double>(t.cellTrue) + t.cellFalse);
      const Wilson sr =
          wilson(static_cast<double>(t.stragglerFound), static_cast<double>(t.injected));
      const Wilson cr = wilson(static_cast<double>(t.cellFound), static_cast<double>(t.injected));
      std::printf(
          "| %s | %d | %s | %s | %s | %s | %s | %s | %s, %s | %s, %s | %s, %s | %s | %s |\n",
          row.profile.c_str(), row.ranks, cond.c_str(), kStatisticName[i],
          injected ? interval(sp).c_str() : "–", injected ? interval(sr).c_str() : "–",
          injected ? interval(cp).c_str() : "–", injected ? interval(cr).c_str() : "–",
          fmt("%.3g", 1000.0 * t.stragglerFalse / t.rankWindows).c_str(),
          fmt("%.3g", 1000.0 * t.cellFalse / t.cellRankWindows).c_str(),
          fmt("%.2f", t.stragglerFound
                          ? static_cast<double>(t.stragglerEpisodesOnFound) / t.stragglerFound
                          : NAN)
              .c_str(),
          fmt("%.2f", t.cellFound ? static_cast<double>(t.cellEpisodesOnFound) / t.cellFound : NAN)
              .c_str(),
          fmt("%.1f", meanOf(t.stragglerLatency)).c_str(),
          fmt("%.1f", meanOf(t.cellLatency)).c_str(),
          injected ? (fmt("%.2f", median(t.factors)) + " / " + fmt("%.1f", row.cond.factor)).c_str()
                   : "–",
          injected ? fmt("%.3f", median(t.trueRankFactors)).c_str() : "–");
    }
  }
  std::printf(
      "\n%d trials per condition; %d steps a window; cell limits: factor %.3g, sigmas %.3g, "
      "share %.3g.\n",
      trials, gSteps, gLimits.factor, gLimits.sigmas, gLimits.minShare);
}

void writeJson(const std::string& path, const std::vector<Row>& rows, const Options& o) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("--json " + path + ": cannot write");
  out << "{\"trials\": " << o.trials << ", \"seed\": " << o.seed << ", \"windows\": " << gWindows
      << ", \"steps_per_window\": " << gSteps << ", \"cell_outlier_factor\": " << gLimits.factor
      << ", \"cell_outlier_sigmas\": " << gLimits.sigmas
      << ", \"held_cells_at_exit_limits\": " << (gExitLimits ? "true" : "false")
      << ", \"rows\": [\n";
  for (size_t r = 0; r < rows.size(); ++r) {
    const Row& row = rows[r];
    for (int i = 0; i < kStatistics; ++i) {
      const Tally& t = row.tally[i];
      const auto num = [](double v) {
        return std::isnan(v) ? std::string("null") : fmt("%.6g", v);
      };
      out << "  {\"profile\": \"" << row.profile << "\", \"ranks\": " << row.ranks
          << ", \"condition\": \"" << row.cond.name() << "\", \"factor\": " << row.cond.factor
          << ", \"slowed\": " << row.cond.slowed << ", \"statistic\": \"" << kStatisticName[i]
          << "\", \"injected\": " << t.injected << ", \"straggler_found\": " << t.stragglerFound
          << ", \"cell_found\": " << t.cellFound << ", \"straggler_true\": " << t.stragglerTrue
          << ", \"straggler_false\": " << t.stragglerFalse
          << ", \"straggler_false_on_crowded\": " << t.stragglerFalseCrowded
          << ", \"cell_true\": " << t.cellTrue << ", \"cell_false_scaled\": " << num(t.cellFalse)
          << ", \"cell_false_on_crowded_scaled\": " << num(t.cellFalseCrowded)
          << ", \"rank_windows\": " << num(t.rankWindows)
          << ", \"straggler_episodes_on_found\": " << t.stragglerEpisodesOnFound
          << ", \"cell_episodes_on_found\": " << t.cellEpisodesOnFound
          << ", \"straggler_latency_mean\": " << num(meanOf(t.stragglerLatency))
          << ", \"cell_latency_mean\": " << num(meanOf(t.cellLatency))
          << ", \"measured_factor_median\": " << num(median(t.factors))
          << ", \"true_rank_factor_median\": " << num(median(t.trueRankFactors)) << "}"
          << (r + 1 == rows.size() && i + 1 == kStatistics ? "\n" : ",\n");
    }
  }
  out << "]}\n";
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "detection_bench: %s\n", e.what());
    return 2;
  }
  attnscope::detail::Log::setLevel(attnscope::LogLevel::kOff);
  std::vector<Condition> conditions = {{Slow::kNone, 1.0, 0}};
  for (Slow slow : {Slow::kCell, Slow::kLayer}) {
    for (double f : o.factors) {
      for (int k : o.slowedCounts) conditions.push_back({slow, f, k});
    }
  }
  std::vector<Row> rows, detail;
  for (const std::string& profileName : o.profiles) {
    const Profile* profile = nullptr;
    for (const Profile& p : kProfiles) {
      if (profileName == p.name) profile = &p;
    }
    for (int size : o.sizes) {
      std::vector<Row> perCondition(conditions.size());
      for (size_t c = 0; c < conditions.size(); ++c) {
        perCondition[c].profile = profileName;
        perCondition[c].ranks = size;
        perCondition[c].cond = conditions[c];
      }
      for (int trial = 0; trial < o.trials; ++trial) {
        Trial t;
        setUp(&t, *profile, size, mix(mix(o.seed, static_cast<uint64_t>(size)), trial));
        passOne(&t, *profile);
        for (size_t c = 0; c < conditions.size(); ++c) {
          runCondition(t, *profile, conditions[c], &perCondition[c].tally);
        }
        std::fprintf(stderr, "\r%s, %d ranks: trial %d of %d", profileName.c_str(), size, trial + 1,
                     o.trials);
      }
      std::fprintf(stderr, "\n");
      detail.insert(detail.end(), perCondition.begin(), perCondition.end());
      // Rows: one per condition and slowed count, or pooled over the slowed counts.
      for (const Row& row : perCondition) {
        if (o.bySlowed || row.cond.slow == Slow::kNone ||
            row.cond.slowed == o.slowedCounts.front()) {
          rows.push_back(row);
          if (!o.bySlowed) {
            for (const Row& other : perCondition) {
              if (&other != &row && other.cond.slow == row.cond.slow &&
                  other.cond.factor == row.cond.factor) {
                for (int i = 0; i < kStatistics; ++i) merge(&rows.back().tally[i], other.tally[i]);
              }
            }
          }
        }
      }
    }
  }
  printTable(rows, o.trials, o.bySlowed);
  if (!o.json.empty()) writeJson(o.json, detail, o);
  if (o.quick) {
    // Smoke check: the default statistic finds a 2x cell on a quiet host and flags nothing
    // without an injection.
    for (const Row& row : rows) {
      const Tally& t = row.tally[0];
      if (row.profile == "measured" && row.cond.slow == Slow::kCell && t.cellFound == 0) {
        std::fprintf(stderr, "detection_bench: no 2x cell found in the quick run\n");
        return 1;
      }
      if (row.profile == "measured" && row.cond.slow == Slow::kNone &&
          t.stragglerFalse + t.cellFalse > 0) {
        std::fprintf(stderr, "detection_bench: false findings without an injection\n");
        return 1;
      }
    }
  }
  return 0;
}
