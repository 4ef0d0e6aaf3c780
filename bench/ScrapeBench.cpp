// The series budget of a large job (docs/METRICS.md, "Series budget"): for a simulated job of
// N ranks and L layers, the series one rank serves, what rank 0 serves with the job summary, the
// job's total (what Prometheus stores), the bytes of a scrape, and rank 0's build and render time
// per interval; the default shape next to per-layer detail (ATTNSCOPE_METRICS_LAYERS=1, which is
// also the shape every rank served before the budget). A real HTTP scrape of rank 0 checks that
// the endpoint serves what was built.
//
//   build/bench/scrape_bench [--layers 80] [--ranks 1024,16384] [--gpu]
//   build/bench/scrape_bench --dump DIR --ranks 1024 [--layers 80] [--gpu]
//
// --gpu adds what a rank with GPU timing serves (device time per phase and op kind, the CUDA
// allocator, CUPTI health). --dump writes DIR/rank.txt (rank 1's exposition, for every rank but
// 0: bench/prometheus_scale.py serves it under each rank's labels) and DIR/rank0.txt, with the
// default shape, for a real Prometheus to scrape.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "HttpGet.h"
#include "attnscope/exporters/Metrics.h"
#include "attnscope/exporters/MetricsServer.h"

namespace {

using attnscope::OpKind;
using attnscope::Phase;

constexpr OpKind kKinds[] = {OpKind::kQkvProjection,    OpKind::kScoreMatmul,
                             OpKind::kSoftmax,          OpKind::kContextMatmul,
                             OpKind::kOutputProjection, OpKind::kLayoutCopy};

// The example's calls: forward and backward, six op kinds with roofline figures.
attnscope::StatsTable table(int layers, std::mt19937* rng) {
  attnscope::StatsTable t(layers);
  std::lognormal_distribution<double> seconds(std::log(300e-6), 0.4);
  for (int l = 0; l < layers; ++l) {
    const int32_t id = t.layerId("model.layers." + std::to_string(l) + ".self_attn");
    for (int call = 0; call < 50; ++call) {
      for (Phase phase : {Phase::kForward, Phase::kBackward}) {
        attnscope::CallRecord r;
        r.layer = id;
        r.phase = phase;
        r.ns = static_cast<int64_t>(seconds(*rng) * 1e9);
        r.bytes = 1 << 20;
        r.peak = 1 << 19;
        for (OpKind k : kKinds) {
          auto& kind = r.kinds[static_cast<int>(k)];
          kind.ns = kind.modelledNs = r.ns / 6;
          kind.ops = 1;
          kind.flops = k == OpKind::kLayoutCopy || k == OpKind::kSoftmax ? 0 : 4e6;
          kind.moved = 2e5;
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

Job makeJob(int ranks, int layers, bool gpu) {
  std::mt19937 rng(7);
  Job j;
  j.id.job = "train-10.0.0.1-29500";
  j.id.worldSize = ranks;
  j.id.rank = 1;
  j.id.localRank = 1;
  j.id.node = "node-0";
  j.id.version = "bench";
  j.id.torchVersion = "2.13.0";
  j.id.aggregation = "gloo";
  j.stats = table(layers, &rng);
  j.rank.run.roofline = true;
  j.rank.run.ceilings = attnscope::Ceilings{1e12, 1e11, "calibration", ""};
  for (int i = 0; i < 100; ++i) {
    j.rank.windowCalls[0].add(300e-6 * (1 + i % 10));
    j.rank.windowCalls[1].add(600e-6 * (1 + i % 10));
  }
  if (gpu) {
    j.rank.gpu.source = attnscope::GpuTiming::kCupti;
    j.rank.gpu.requested = attnscope::GpuTiming::kAuto;
    j.rank.gpu.device = 0;
    j.rank.run.machine.gpuMemoryBytes = 80LL << 30;
    j.rank.deviceStats = j.stats;
    attnscope::GpuStatus::LayerBackends b;
    b.layer = "model.layers.0.self_attn";
    b.kernels[static_cast<int>(attnscope::AttentionBackend::kFlash)] = 100;
    j.rank.gpu.backends.push_back(b);
  }
  j.cluster.stats = j.stats;  // the summed table has the same shape
  j.cluster.layerNames = j.stats.layerNames();
  j.cluster.last.expectedRanks = j.cluster.last.presentRanks = ranks;
  for (int r = 0; r < ranks; ++r) {
    attnscope::RankStatus s;
    s.rank = r;
    s.present = true;
    s.score = 0.9 + 0.2 * (r % 7) / 7.0;
    s.window.forwardSeconds = 0.01;
    s.window.backwardSeconds = 0.02;
    j.cluster.last.ranks.push_back(s);
  }
  // One straggler with its cell, one cell outlier: the findings' series are in the count.
  attnscope::RankStatus& slow = j.cluster.last.ranks[ranks / 2];
  slow.score = 1.6;
  slow.straggler = true;
  slow.window.topLayer = 3;
  slow.window.topKind = OpKind::kSoftmax;
  slow.window.topShare = 0.6;
  attnscope::RankStatus& cell = j.cluster.last.ranks[ranks / 3];
  cell.cellOutlier = true;
  cell.cellLayer = 5;
  cell.cellKind = OpKind::kSoftmax;
  cell.cellFactor = 2.1;
  return j;
}

std::vector<prometheus::MetricFamily> families(const Job& j, bool rankZero, bool detail) {
  attnscope::MetricsIdentity id = j.id;
  if (rankZero) id.rank = id.localRank = 0;
  attnscope::MetricsOptions options;
  options.layerDetail = detail;
  return attnscope::buildMetrics(id, j.rank, j.stats, options, rankZero ? &j.cluster : nullptr);
}

size_t maxLabels(const std::vector<prometheus::MetricFamily>& fs) {
  size_t n = 0;
  for (const auto& f : fs) {
    // A histogram's buckets add `le`, a summary's quantiles `quantile`.
    const size_t extra =
        f.type == prometheus::MetricType::Histogram || f.type == prometheus::MetricType::Summary
            ? 1
            : 0;
    for (const auto& m : f.metric) n = std::max(n, m.label.size() + extra);
  }
  return n;
}

template <typename F>
double medianMs(F&& f, int runs = 7) {
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void report(int ranks, int layers, bool gpu) {
  const Job j = makeJob(ranks, layers, gpu);
  for (bool detail : {true, false}) {
    const auto mine = families(j, false, detail);
    std::vector<prometheus::MetricFamily> zero;
    const double buildMs = medianMs([&] { zero = families(j, true, detail); }, 5);
    std::string text;
    const double renderMs = medianMs([&] { text = attnscope::renderMetrics(zero); }, 5);
    const std::string rankText = attnscope::renderMetrics(mine);
    const size_t rankSeries = attnscope::seriesCount(mine);
    const size_t zeroSeries = attnscope::seriesCount(zero);
    const double total = static_cast<double>(rankSeries) * (ranks - 1) + zeroSeries;
    std::printf(
        "%-8s %6d ranks %3d layers%s | rank %6zu series %9zu B | rank 0 %7zu series %10zu B "
        "build %7.1f ms render %7.1f ms | job %11.0f series, %7.2f per rank, %6.1f MB per "
        "scrape round | labels <= %zu\n",
        detail ? "layers" : "default", ranks, layers, gpu ? " gpu" : "    ", rankSeries,
        rankText.size(), zeroSeries, text.size(), buildMs, renderMs, total, total / ranks,
        (static_cast<double>(rankText.size()) * (ranks - 1) + text.size()) / 1e6,
        std::max(maxLabels(mine), maxLabels(zero)));
  }
}

// A real scrape of rank 0's endpoint: what the HTTP server sends is what was built.
bool scrapeCheck(int ranks, int layers) {
  const Job j = makeJob(ranks, layers, false);
  attnscope::MetricsServerOptions options;
  options.bind = "127.0.0.1";
  options.port = 0;
  attnscope::MetricsServer server(options);
  const auto zero = families(j, true, false);
  server.publish(zero);
  const std::string expected = attnscope::renderMetrics(zero);
  std::string body;
  const double ms = medianMs([&] { body = bench::scrape(server.port()); }, 5);
  std::printf("HTTP scrape of rank 0 (%d ranks, %d layers, default): %zu bytes in %.1f ms\n", ranks,
              layers, body.size(), ms);
  return body.find(expected) != std::string::npos;
}

int dump(const std::string& dir, int ranks, int layers, bool gpu) {
  const Job j = makeJob(ranks, layers, gpu);
  for (bool zero : {false, true}) {
    const std::string path = dir + (zero ? "/rank0.txt" : "/rank.txt");
    std::ofstream out(path);
    out << attnscope::renderMetrics(families(j, zero, false));
    if (!out) {
      std::fprintf(stderr, "scrape_bench: cannot write %s\n", path.c_str());
      return 1;
    }
  }
  std::printf("wrote %s/rank.txt and %s/rank0.txt (%d ranks, %d layers)\n", dir.c_str(),
              dir.c_str(), ranks, layers);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int layers = 80;
  bool gpu = false;
  std::string dumpDir;
  std::vector<int> ranks = {1024, 16384};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--layers" && i + 1 < argc) {
      layers = std::atoi(argv[++i]);
    } else if (a == "--ranks" && i + 1 < argc) {
      ranks.clear();
      std::stringstream list(argv[++i]);
      for (std::string r; std::getline(list, r, ',');) ranks.push_back(std::atoi(r.c_str()));
    } else if (a == "--gpu") {
      gpu = true;
    } else if (a == "--dump" && i + 1 < argc) {
      dumpDir = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: %s [--layers N] [--ranks N,N,...] [--gpu] [--dump DIR]\n"
                   "unknown argument: %s\n",
                   argv[0], a.c_str());
      return 2;
    }
  }
  if (layers < 1 || ranks.empty() ||
      std::any_of(ranks.begin(), ranks.end(), [](int r) { return r < 2; })) {
    std::fprintf(stderr, "scrape_bench: --layers must be >= 1 and every --ranks value >= 2\n");
    return 2;
  }
  if (!dumpDir.empty()) return dump(dumpDir, ranks.front(), layers, gpu);
  for (int r : ranks) report(r, layers, gpu);
  if (!scrapeCheck(ranks.front(), layers)) {
    std::fprintf(stderr, "scrape_bench: the HTTP scrape did not return what was built\n");
    return 1;
  }
  return 0;
}
