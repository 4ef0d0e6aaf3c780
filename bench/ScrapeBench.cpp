// Cost of rank 0's /metrics for a large job: building the families from the job summary, rendering
// the text exposition, and a real HTTP scrape over loopback, for a simulated 1024-rank, 64-layer
// job next to a single rank's own endpoint (the baseline: what every other rank serves).
//
//   build/bench/scrape_bench [--layers 64] [--ranks 1024]

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "HttpGet.h"
#include "attnscope/exporters/Metrics.h"
#include "attnscope/exporters/MetricsServer.h"

namespace {

int gLayers = 64;
int gRanks = 1024;

attnscope::StatsTable table(int layers, std::mt19937* rng) {
  attnscope::StatsTable t(layers);
  std::lognormal_distribution<double> seconds(std::log(300e-6), 0.4);
  for (int l = 0; l < layers; ++l) {
    const int32_t id = t.layerId("layers." + std::to_string(l) + ".self_attn");
    for (int call = 0; call < 200; ++call) {
      for (attnscope::Phase phase : {attnscope::Phase::kForward, attnscope::Phase::kBackward}) {
        attnscope::CallRecord r;
        r.layer = id;
        r.phase = phase;
        r.ns = static_cast<int64_t>(seconds(*rng) * 1e9);
        r.bytes = 1 << 20;
        r.peak = 1 << 19;
        for (int k = 0; k < 6; ++k) {
          r.kinds[k].ns = r.ns / 6;
          r.kinds[k].ops = 1;
        }
        t.add(r);
      }
    }
  }
  return t;
}

struct Job {
  attnscope::MetricsIdentity id;
  attnscope::RankMetrics rank;
  attnscope::StatsTable stats;
  attnscope::ClusterReport cluster;
};

const Job& job() {
  static const Job j = [] {
    std::mt19937 rng(7);
    Job j;
    j.id.job = "bench";
    j.id.worldSize = gRanks;
    j.id.node = "node-0";
    j.id.version = "bench";
    j.id.torchVersion = "1.13.0";
    j.id.aggregation = "gloo";
    j.stats = table(gLayers, &rng);
    j.cluster.stats = j.stats;  // the summed table has the same shape
    j.cluster.last.expectedRanks = j.cluster.last.presentRanks = gRanks;
    for (int r = 0; r < gRanks; ++r) {
      attnscope::RankStatus s;
      s.rank = r;
      s.present = true;
      s.score = 0.9 + 0.2 * (r % 7) / 7.0;
      s.window.forwardSeconds = 0.01;
      s.window.backwardSeconds = 0.02;
      j.cluster.last.ranks.push_back(s);
    }
    return j;
  }();
  return j;
}

std::vector<prometheus::MetricFamily> families(bool rankZero) {
  const Job& j = job();
  return attnscope::buildMetrics(j.id, j.rank, j.stats, true, rankZero ? &j.cluster : nullptr);
}

void BM_Build(benchmark::State& state) {
  const bool rankZero = state.range(0) != 0;
  size_t series = 0;
  for (auto _ : state) {
    auto f = families(rankZero);
    series = 0;
    for (const auto& fam : f) series += fam.metric.size();
    benchmark::DoNotOptimize(f);
  }
  state.counters["metrics"] = static_cast<double>(series);
  state.SetLabel(rankZero ? "rank 0 with the job summary" : "one rank's own");
}

void BM_Render(benchmark::State& state) {
  const auto f = families(state.range(0) != 0);
  size_t bytes = 0;
  for (auto _ : state) {
    const std::string text = attnscope::renderMetrics(f);
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  state.counters["bytes"] = static_cast<double>(bytes);
  state.SetLabel(state.range(0) != 0 ? "rank 0 with the job summary" : "one rank's own");
}

void BM_HttpScrape(benchmark::State& state) {
  attnscope::MetricsServerOptions options;
  options.bind = "127.0.0.1";
  options.port = 0;
  attnscope::MetricsServer server(options);
  server.publish(families(state.range(0) != 0));
  size_t bytes = 0;
  for (auto _ : state) bytes = bench::scrape(server.port()).size();
  if (bytes < 1000) state.SkipWithError("the scrape returned almost nothing");
  state.counters["bytes"] = static_cast<double>(bytes);
  state.SetLabel(state.range(0) != 0 ? "rank 0 with the job summary" : "one rank's own");
}

BENCHMARK(BM_Build)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Render)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_HttpScrape)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  // Our own flags first, the rest to Google Benchmark.
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--layers") == 0 && i + 1 < argc) {
      gLayers = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) {
      gRanks = std::atoi(argv[++i]);
    } else {
      rest.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(rest.size());
  benchmark::Initialize(&n, rest.data());
  std::printf("simulated job: %d ranks, %d layers\n", gRanks, gLayers);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
