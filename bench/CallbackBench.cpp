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
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <benchmark/benchmark.h>
#include <c10/core/CPUAllocator.h>

#include "attnscope/attnscope.h"

namespace {

attnscope::Config benchConfig() {
  attnscope::Config c;
  c.logLevel = attnscope::LogLevel::kWarn;
  return c;
}

// Keeps an attention scope open around the measured ops, reopened every `opsPerCall` of them as a
// layer would be (its own cost is amortised in), with a step every 64 calls (which clears the
// links). A call must run the same op sequence each time, as a layer does: the roofline's shape
// cache is keyed by the op's position in the call.
class ScopeCycler {
 public:
  explicit ScopeCycler(bool active, int opsPerCall = 256)
      : active_(active), opsPerCall_(opsPerCall) {
    open();
  }
  ~ScopeCycler() { scope_.reset(); }
  void tick() {
    if (!active_ || ++ops_ < opsPerCall_) return;
    ops_ = 0;
    scope_.reset();
    if (++calls_ % 64 == 0) attnscope::step();
    open();
  }

 private:
  void open() {
    if (active_) scope_ = std::make_unique<attnscope::AttentionScope>("bench.attn");
  }
  bool active_;
  int opsPerCall_;
  int ops_ = 0;
  int calls_ = 0;
  std::unique_ptr<attnscope::AttentionScope> scope_;
};

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

// roofline:1 (the default) also reads each top-level op's argument shapes (the callback asks
// RecordFunction for the inputs, so the dispatcher boxes them) and looks its cost up in the shape
// cache; roofline:0 is the same without.
void BM_OpInsideScope(benchmark::State& state) {
  attnscope::Config c = benchConfig();
  c.roofline = state.range(1) != 0;
  attnscope::start(c);
  const bool allocate = state.range(0) != 0;
  auto a = at::ones({8});
  auto b = at::ones({8});
  {
    ScopeCycler scope(true);
    for (auto _ : state) {
      if (allocate) {
        benchmark::DoNotOptimize(at::add(a, b));
      } else {
        benchmark::DoNotOptimize(a.add_(b));
      }
      scope.tick();
    }
  }
  attnscope::step();
  attnscope::stop();
}

// The floor any RecordFunction observer pays: a thread-local FUNCTION callback that does nothing.
std::unique_ptr<at::ObserverContext> emptyStart(const at::RecordFunction&) { return nullptr; }
void emptyEnd(const at::RecordFunction&, at::ObserverContext*) {}

void BM_OpEmptyRecordFunctionCallback(benchmark::State& state) {
  attnscope::stop();
  const auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(&emptyStart, &emptyEnd).scopes({at::RecordScope::FUNCTION}));
  runOps(state, state.range(0) != 0);
  at::removeCallback(handle);
}

// What every op's dispatch asks RecordFunction, whatever attnscope does: are there callbacks for
// FUNCTION scope? Outside a scope attnscope must not change the answer (or its price).
void BM_DispatchCheck(benchmark::State& state) {
  const bool running = state.range(0) != 0;
  if (running) attnscope::start(benchConfig());
  for (auto _ : state) {
    benchmark::DoNotOptimize(at::getStepCallbacksUnlessEmpty(at::RecordScope::FUNCTION));
  }
  if (running) attnscope::stop();
}

// The instrumentation of one op without the op's own work: a RecordFunction as the dispatcher
// makes it (name, sequence number), started and ended. Inside an attention scope it runs
// attnscope's callbacks; with an empty thread-local callback it shows RecordFunction's own floor.
const std::pair<const char*, const char*> kRecipe[] = {{"aten::t", ""},
                                                       {"aten::matmul", ""},
                                                       {"aten::add_", "Tensor"},
                                                       {"aten::chunk", ""},
                                                       {"aten::mul", "Tensor"},
                                                       {"aten::view", ""},
                                                       {"aten::transpose", "int"},
                                                       {"aten::bmm", ""},
                                                       {"aten::softmax", "int"},
                                                       {"aten::dropout", ""},
                                                       {"aten::bmm", ""},
                                                       {"aten::view", ""}};

void recordFunctions(benchmark::State& state, bool inScope) {
  // The dispatcher names a RecordFunction by the op's schema, as here.
  std::vector<at::RecordFunction::schema_ref_t> schemas;
  for (const auto& [name, overload] : kRecipe) {
    schemas.emplace_back(c10::Dispatcher::singleton().findSchemaOrThrow(name, overload).schema());
  }
  int64_t seq = 0;
  size_t i = 0;
  // 21 rounds of the recipe per call (252 ops): every call runs the same sequence.
  ScopeCycler scope(inScope, static_cast<int>(21 * std::size(kRecipe)));
  for (auto _ : state) {
    {
      at::RecordFunction guard(at::RecordScope::FUNCTION);
      if (guard.isActive()) guard.before(schemas[i], seq++);
    }
    if (++i == schemas.size()) i = 0;
    scope.tick();
  }
}

void BM_RecordFunctionEmptyCallback(benchmark::State& state) {
  attnscope::stop();
  const auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(&emptyStart, &emptyEnd).scopes({at::RecordScope::FUNCTION}));
  recordFunctions(state, false);
  at::removeCallback(handle);
}

void BM_RecordFunctionInsideScope(benchmark::State& state) {
  attnscope::start(benchConfig());
  recordFunctions(state, true);
  attnscope::step();
  attnscope::stop();
}

// One allocation and free through LibTorch's CPU allocator, outside attnscope and inside a scope
// (where the wrapper remembers the block and reports it to the op's and the call's accounts).
void BM_CpuAllocation(benchmark::State& state) {
  const bool inScope = state.range(0) != 0;
  attnscope::start(benchConfig());
  c10::Allocator* allocator = c10::GetCPUAllocator();
  {
    ScopeCycler scope(inScope);
    for (auto _ : state) {
      c10::DataPtr p = allocator->allocate(256);
      benchmark::DoNotOptimize(p.get());
      scope.tick();
    }
  }
  attnscope::step();
  attnscope::stop();
}

void BM_CpuAllocationPluginStopped(benchmark::State& state) {
  attnscope::stop();
  c10::Allocator* allocator = c10::GetCPUAllocator();
  for (auto _ : state) {
    c10::DataPtr p = allocator->allocate(256);
    benchmark::DoNotOptimize(p.get());
  }
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
BENCHMARK(BM_OpInsideScope)->ArgsProduct({{0, 1}, {0, 1}})->ArgNames({"alloc", "roofline"});
BENCHMARK(BM_OpEmptyRecordFunctionCallback)->Arg(0)->Arg(1)->ArgName("alloc");
BENCHMARK(BM_DispatchCheck)->Arg(0)->Arg(1)->ArgName("running");
BENCHMARK(BM_RecordFunctionEmptyCallback);
BENCHMARK(BM_RecordFunctionInsideScope);
BENCHMARK(BM_CpuAllocation)->Arg(0)->Arg(1)->ArgName("in_scope");
BENCHMARK(BM_CpuAllocationPluginStopped);
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
  std::string reps = "--benchmark_repetitions=12",
              interleave = "--benchmark_enable_random_interleaving=true",
              minTime = "--benchmark_min_time=0.05",
              aggregates = "--benchmark_report_aggregates_only=true";
  if (argc == 1) {
    for (std::string* a : {&reps, &interleave, &minTime, &aggregates}) args.push_back(a->data());
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  Collector collector;
  benchmark::RunSpecifiedBenchmarks(&collector);
  std::printf("\nattnscope per-op cost (medians over interleaved repetitions, this run):\n");
  {
    const double stopped = collector.ns("BM_DispatchCheck/running:0");
    const double running = collector.ns("BM_DispatchCheck/running:1");
    const double floor = collector.ns("BM_RecordFunctionEmptyCallback");
    const double inside = collector.ns("BM_RecordFunctionInsideScope");
    std::printf(
        "  outside a scope: dispatch check %.1f ns running vs %.1f ns stopped: %+.1f ns "
        "per op (target <= 50)\n",
        running, stopped, running - stopped);
    std::printf(
        "  inside a scope:  %.1f ns per op (target <= 200), of which RecordFunction's own "
        "floor (an empty callback) %.1f ns and attnscope's callbacks %.1f ns\n",
        inside - stopped, floor - stopped, inside - floor);
  }
  {
    const double stopped = collector.ns("BM_CpuAllocationPluginStopped");
    const double outside = collector.ns("BM_CpuAllocation/in_scope:0");
    const double inside = collector.ns("BM_CpuAllocation/in_scope:1");
    std::printf(
        "  allocation + free: %+.1f ns outside a scope, %+.1f ns inside a scope (attributed "
        "to the op and the call), against %.1f ns with attnscope stopped\n",
        outside - stopped, inside - stopped, stopped);
    std::printf(
        "  attention scope (enter + exit, sampled step): %.1f ns; on an unsampled step: "
        "%.1f ns\n",
        collector.ns("BM_EmptyScope"), collector.ns("BM_ScopeUnsampledStep"));
  }
  {
    const double off = collector.ns("BM_OpInsideScope/alloc:0/roofline:0");
    const double on = collector.ns("BM_OpInsideScope/alloc:0/roofline:1");
    std::printf(
        "  roofline (argument shapes read, cost looked up in the shape cache): %+.1f ns per "
        "real op inside a scope on a sampled step (%.1f vs %.1f ns, op included)\n",
        on - off, on, off);
  }
  return 0;
}
