// Per-op cost of attnscope's callbacks outside and inside an attention scope, the cost of a
// scope, of recording a call and of a step boundary. Each cost is reported against a baseline
// measured in the same run (the same op with attnscope stopped); the summary at the end prints
// the differences next to the targets (outside <= 50 ns, inside <= 200 ns per op).
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>

#include "attnscope/attnscope.h"

namespace {

attnscope::Config benchConfig() {
  attnscope::Config c;
  c.logLevel = attnscope::LogLevel::kWarn;
  return c;
}

// A cheap op, in place (no allocation) or out of place (one allocation and free), so that the
// callback's share is as visible as it gets.
void runOps(benchmark::State& state, bool allocate) {
  auto a = at::ones({8});
  auto b = at::ones({8});
  for (auto _ : state) {
    if (allocate) {
      benchmark::DoNotOptimize(at::add(a, b));
    } else {
      benchmark::DoNotOptimize(a.add_(b));
    }
  }
}

void BM_OpPluginStopped(benchmark::State& state) {
  attnscope::stop();
  runOps(state, state.range(0) != 0);
}

void BM_OpOutsideScope(benchmark::State& state) {
  attnscope::start(benchConfig());
  runOps(state, state.range(0) != 0);
  attnscope::stop();
}

void BM_OpInsideScope(benchmark::State& state) {
  attnscope::start(benchConfig());
  const bool allocate = state.range(0) != 0;
  auto a = at::ones({8});
  auto b = at::ones({8});
  // The scope is reopened every 256 ops, as a layer would be; its own cost is amortised in.
  constexpr int kOpsPerScope = 256;
  int inScope = 0;
  auto* scope = new attnscope::AttentionScope("bench.attn");
  for (auto _ : state) {
    if (allocate) {
      benchmark::DoNotOptimize(at::add(a, b));
    } else {
      benchmark::DoNotOptimize(a.add_(b));
    }
    if (++inScope == kOpsPerScope) {
      delete scope;
      scope = new attnscope::AttentionScope("bench.attn");
      inScope = 0;
    }
  }
  delete scope;
  attnscope::step();
  attnscope::stop();
}

void BM_EmptyScope(benchmark::State& state) {
  attnscope::start(benchConfig());
  for (auto _ : state) {
    attnscope::AttentionScope scope("bench.attn");
  }
  attnscope::step();
  attnscope::stop();
}

void BM_ScopeUnsampledStep(benchmark::State& state) {
  attnscope::Config c = benchConfig();
  c.sampleEvery = 1000000;
  attnscope::start(c);
  attnscope::step();  // step 1 is not sampled
  for (auto _ : state) {
    attnscope::AttentionScope scope("bench.attn");
  }
  attnscope::stop();
}

void BM_HistogramAdd(benchmark::State& state) {
  attnscope::LogHistogram h;
  double v = 1e-6;
  for (auto _ : state) {
    h.add(v);
    v = v * 1.0001 + 1e-9;
    if (v > 1.0) v = 1e-6;
  }
  benchmark::DoNotOptimize(h.count());
}

void BM_RecordCall(benchmark::State& state) {
  attnscope::StatsTable table;
  attnscope::CallRecord r;
  r.layer = table.layerId("layers.0.attn");
  r.ns = 1000000;
  for (int k = 0; k < attnscope::kNumOpKinds; ++k) {
    r.kinds[k].ns = 1000 * (k + 1);
    r.kinds[k].ops = 3;
  }
  for (auto _ : state) table.add(r);
  benchmark::DoNotOptimize(table.layers().size());
}

BENCHMARK(BM_OpPluginStopped)->Arg(0)->Arg(1)->ArgName("alloc");
BENCHMARK(BM_OpOutsideScope)->Arg(0)->Arg(1)->ArgName("alloc");
BENCHMARK(BM_OpInsideScope)->Arg(0)->Arg(1)->ArgName("alloc");
BENCHMARK(BM_EmptyScope);
BENCHMARK(BM_ScopeUnsampledStep);
BENCHMARK(BM_HistogramAdd);
BENCHMARK(BM_RecordCall);

// Collects per-benchmark median (or mean) CPU time so the summary can print differences.
class Collector : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.error_occurred) continue;
      const bool aggregate = run.run_type == Run::RT_Aggregate;
      if (aggregate && run.aggregate_name != "median") continue;
      const std::string name = run.run_name.str();
      if (!aggregate && medians_.count(name)) continue;  // keep the median when repetitions run
      ns_[name] = run.GetAdjustedCPUTime();
      if (aggregate) medians_[name] = true;
    }
  }
  double ns(const std::string& name) const {
    const auto it = ns_.find(name);
    return it == ns_.end() ? -1 : it->second;
  }

 private:
  std::map<std::string, double> ns_;
  std::map<std::string, bool> medians_;
};

}  // namespace

int main(int argc, char** argv) {
  at::set_num_threads(1);
  // Defaults for a noisy 2-core machine: repetitions in random interleaved order, medians only.
  std::vector<char*> args(argv, argv + argc);
  std::string reps = "--benchmark_repetitions=12", interleave = "--benchmark_enable_random_interleaving=true",
              minTime = "--benchmark_min_time=0.05", aggregates = "--benchmark_report_aggregates_only=true";
  if (argc == 1) {
    for (std::string* a : {&reps, &interleave, &minTime, &aggregates}) args.push_back(a->data());
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  Collector collector;
  benchmark::RunSpecifiedBenchmarks(&collector);
  std::printf("\nattnscope per-op cost (median CPU time per op over interleaved repetitions, "
              "difference to the same op with attnscope stopped, this run):\n");
  for (const char* alloc : {"0", "1"}) {
    const std::string suffix = std::string("/alloc:") + alloc;
    const double base = collector.ns("BM_OpPluginStopped" + suffix);
    const double outside = collector.ns("BM_OpOutsideScope" + suffix);
    const double inside = collector.ns("BM_OpInsideScope" + suffix);
    if (base < 0 || outside < 0 || inside < 0) continue;
    std::printf("  %-22s baseline %7.1f ns | outside a scope %+7.1f ns (target <= 50) | inside a "
                "scope %+7.1f ns (target <= 200)\n",
                alloc[0] == '1' ? "op with allocation" : "op without allocation", base,
                outside - base, inside - base);
  }
  return 0;
}
