// The aggregation's per-round work on rank 0 for 1k-16k ranks, simulated in one process with the
// real code: every rank's RankWindow through fromVector and the straggler detector, the summed
// statistics (as the all-reduce delivers them) through fromFlat and the merge into the job
// table, and the all-reduce's own arithmetic (log2 N vector additions of the payload). Also the
// window fold each rank does every interval. The payload sizes are checked against the cost
// model in docs/AGGREGATION.md.
//
//   build/bench/aggregation_sim [--layers 48] [benchmark flags]
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attnscope/core/RankWindow.h"
#include "attnscope/core/StatsTable.h"
#include "attnscope/core/StragglerDetector.h"

namespace {

int gLayers = 48;

attnscope::StatsTable windowTable(int layers, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> seconds(std::log(300e-6), 0.3);
  attnscope::StatsTable t(layers);
  for (int l = 0; l < layers; ++l) {
    const int32_t id = t.layerId("layers." + std::to_string(l) + ".attn");
    for (int call = 0; call < 10; ++call) {  // a 10-step window
      for (attnscope::Phase phase : {attnscope::Phase::kForward, attnscope::Phase::kBackward}) {
        attnscope::CallRecord r;
        r.layer = id;
        r.phase = phase;
        r.ns = static_cast<int64_t>(seconds(rng) * 1e9);
        for (int k = 0; k < 6; ++k) {
          r.kinds[k].ns = r.ns / 6;
          r.kinds[k].ops = 2;
        }
        t.add(r);
      }
    }
  }
  return t;
}

std::vector<double> rankWindows(int n) {
  std::vector<double> all;
  all.reserve(static_cast<size_t>(n) * attnscope::RankWindow::kVectorSize);
  for (int r = 0; r < n; ++r) {
    attnscope::RankWindow w;
    w.rank = r;
    w.present = true;
    w.lastStep = 1000;
    w.steps = w.sampledSteps = 10;
    w.forwardSeconds = 0.01 * (1 + 0.05 * (r % 5));
    w.backwardSeconds = 0.02;
    const std::vector<double> v = w.toVector();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

// Each rank, every interval: the finished window merged into the running table and flattened for
// the all-reduce.
void BM_WindowFold(benchmark::State& state) {
  const attnscope::StatsTable window = windowTable(static_cast<int>(state.range(0)), 1);
  attnscope::StatsTable cumulative(state.range(0));
  for (auto _ : state) {
    cumulative.merge(window);
    std::vector<double> flat = window.flatten();
    benchmark::DoNotOptimize(flat.data());
  }
  state.counters["payload_bytes"] = static_cast<double>(window.flatten().size() * sizeof(double));
  state.SetLabel(std::to_string(state.range(0)) + " layers");
}

// Rank 0, every round, for N ranks: decode the gathered windows, update the detector, rebuild the
// summed table and merge it into the job's.
void BM_Rank0Round(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const std::vector<double> gathered = rankWindows(n);
  const attnscope::StatsTable window = windowTable(gLayers, 2);
  const std::vector<double> summed = window.flatten();
  const std::vector<std::string> names = window.layerNames();
  attnscope::StragglerOptions options;
  attnscope::StragglerDetector detector(n, options);
  attnscope::StatsTable job(gLayers);
  double now = 0;
  for (auto _ : state) {
    std::vector<attnscope::RankWindow> windows;
    windows.reserve(n);
    for (int r = 0; r < n; ++r) {
      windows.push_back(attnscope::RankWindow::fromVector(gathered.data() +
                                                          r * attnscope::RankWindow::kVectorSize));
    }
    const attnscope::ClusterRound& round = detector.update(windows, now += 10);
    benchmark::DoNotOptimize(round.medianAttentionSeconds);
    job.merge(attnscope::StatsTable::fromFlat(names, summed));
  }
  state.counters["gather_bytes"] = static_cast<double>(gathered.size() * sizeof(double));
  state.SetLabel(std::to_string(n) + " ranks, " + std::to_string(gLayers) + " layers");
}

// The arithmetic a halving-doubling all-reduce asks of every rank: log2 N additions of halving
// slices of the payload, then as many copies back; with N ranks ~ S additions in all.
void BM_AllReduceArithmetic(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const attnscope::StatsTable window = windowTable(gLayers, 3);
  std::vector<double> mine = window.flatten(), other = mine;
  const int steps = static_cast<int>(std::log2(n));
  for (auto _ : state) {
    size_t len = mine.size();
    for (int s = 0; s < steps && len > 0; ++s) {
      len /= 2;
      for (size_t i = 0; i < len; ++i) mine[i] += other[i];
    }
    benchmark::DoNotOptimize(mine.data());
  }
  state.SetLabel(std::to_string(n) + " ranks");
}

BENCHMARK(BM_WindowFold)->Arg(4)->Arg(48)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Rank0Round)
    ->Arg(1024)
    ->Arg(2048)
    ->Arg(4096)
    ->Arg(8192)
    ->Arg(16384)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AllReduceArithmetic)->Arg(1024)->Arg(16384)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--layers") == 0 && i + 1 < argc) {
      gLayers = std::atoi(argv[++i]);
    } else {
      rest.push_back(argv[i]);
    }
  }
  // The cost model's payloads (docs/AGGREGATION.md), against what the code produces.
  const size_t perLayer =
      attnscope::StatsTable::kCellsPerLayer * attnscope::StatsTable::kCellDoubles * sizeof(double);
  const size_t flat = windowTable(gLayers, 4).flatten().size() * sizeof(double);
  std::printf("all-gather: %zu bytes per rank (RankWindow, %zu doubles)\n",
              attnscope::RankWindow::kVectorSize * sizeof(double),
              attnscope::RankWindow::kVectorSize);
  std::printf("all-reduce payload for %d layers: %zu bytes (model: %d x %zu = %zu)%s\n", gLayers,
              flat, gLayers, perLayer, gLayers * perLayer,
              flat == gLayers * perLayer ? "" : "  MISMATCH");
  for (int n : {1024, 4096, 16384}) {
    std::printf("N = %5d: rank 0 receives %.2f MB of windows per round\n", n,
                n * attnscope::RankWindow::kVectorSize * sizeof(double) / 1e6);
  }
  int argcRest = static_cast<int>(rest.size());
  benchmark::Initialize(&argcRest, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  return flat == gLayers * perLayer ? 0 : 1;
}
