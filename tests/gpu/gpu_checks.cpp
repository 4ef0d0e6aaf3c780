// The GPU checks of tests/gpu/run.sh, in one process on one CUDA device:
//   1. auto         the default ATTNSCOPE_GPU_TIMING=auto (CUPTI) after 10 s or more of
//                   training with no synchronisation (the host ahead of the device, as in real
//                   training): every call of every layer, forward and backward, folded with its
//                   kernels; late, unattributed, dropped and given-up counts 0; the allocator's
//                   figures of the device
//   2. both         CUPTI and CUDA events together: per layer and phase the summed kernel time
//                   <= the event span x 1.01 (more means double counting) and within 5% of it;
//                   device memory per layer; the backend per layer (mha: math, sdpa: fused)
//   3. backends     each SDPA backend forced in turn (flash, memory_efficient, cudnn) and named
//   4. profiler     a torch.profiler (Kineto) trace taken while attnscope runs keeps its GPU
//                   kernels, attnscope says it fell back to events; a trace after stop() too
//   5. overhead     step time with attnscope on (sample-every 1, auto) vs off, randomly
//                   interleaved rounds in the same run, for the GPU-bound model and a
//                   launch-bound one; median ratio, bootstrap interval
//   6. fallback     torch.profiler (Kineto) started first: attnscope must time with CUDA events
// Prints one "CHECK <name> PASS|FAIL <detail>" line per check and "FIGURE ..." lines; exits 0
// when every check passed, 1 otherwise, 77 when there is no CUDA device.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <ATen/Context.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/version.h>

#include "attnscope/MultiheadAttention.h"
#include "attnscope/attnscope.h"

namespace {

struct Options {
  int64_t layers = 4;
  int64_t dModel = 1024;
  int64_t heads = 16;
  int64_t seq = 1024;
  int64_t batch = 16;
  int64_t vocab = 8192;
  int64_t steps = 12;           // the `both` phase
  double steadySeconds = 10;    // the `auto` phase: training with no synchronisation
  int64_t overheadRounds = 16;  // overhead phase: rounds x steps per variant
  int64_t overheadSteps = 4;
  double tolerance = 0.05;       // CUPTI sum vs event span
  double overheadTarget = 1.01;  // GPU-bound model
  double launchBoundTarget = 1.05;
};

// A model small enough that the host's launches, not the device, set the pace.
Options launchBound(const Options& o) {
  Options l = o;
  l.layers = 4;
  l.dModel = 256;
  l.heads = 4;
  l.seq = 128;
  l.batch = 4;
  l.vocab = 1024;
  return l;
}

int failures = 0;

void check(const std::string& name, bool ok, const std::string& detail) {
  std::printf("CHECK %-34s %s  %s\n", name.c_str(), ok ? "PASS" : "FAIL", detail.c_str());
  std::fflush(stdout);
  if (!ok) ++failures;
}

std::string fmt(const char* format, double a, double b = 0, double c = 0) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), format, a, b, c);
  return buf;
}

// Attention by SDPA (flash / memory-efficient / cuDNN kernels on a GPU), marked with a scope.
struct SdpaAttentionImpl : torch::nn::Module {
  SdpaAttentionImpl(std::string name, int64_t d, int64_t heads)
      : name(std::move(name)),
        heads(heads),
        in(register_module("in", torch::nn::Linear(d, 3 * d))),
        out(register_module("out", torch::nn::Linear(d, d))) {}
  torch::Tensor forward(const torch::Tensor& x) {  // [seq, batch, d]
    attnscope::AttentionScope scope(name);
    const int64_t s = x.size(0), b = x.size(1), d = x.size(2), dh = d / heads;
    auto qkv = in(x).chunk(3, -1);
    auto split = [&](const torch::Tensor& t) {
      return t.view({s, b, heads, dh}).permute({1, 2, 0, 3});
    };
#if TORCH_VERSION_MAJOR >= 2
    auto o = at::scaled_dot_product_attention(split(qkv[0]), split(qkv[1]), split(qkv[2]), {}, 0.0,
                                              false);
#else
    auto q = split(qkv[0]);
    auto o = torch::matmul(
        torch::softmax(torch::matmul(q, split(qkv[1]).transpose(-2, -1)) / std::sqrt(double(dh)),
                       -1),
        split(qkv[2]));
#endif
    return out(o.permute({2, 0, 1, 3}).reshape({s, b, d}));
  }
  std::string name;
  int64_t heads;
  torch::nn::Linear in, out;
};
TORCH_MODULE(SdpaAttention);

// A pre-norm encoder block; even layers use attnscope::MultiheadAttention (torch's unfused "math"
// attention), odd layers SDPA.
struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t i, const Options& o)
      : norm1(register_module("norm1",
                              torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.dModel})))),
        norm2(register_module("norm2",
                              torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.dModel})))),
        ff1(register_module("ff1", torch::nn::Linear(o.dModel, 4 * o.dModel))),
        ff2(register_module("ff2", torch::nn::Linear(4 * o.dModel, o.dModel))) {
    if (i % 2 == 0) {
      mha = register_module("mha", attnscope::MultiheadAttention(
                                       "layers." + std::to_string(i) + ".mha",
                                       torch::nn::MultiheadAttentionOptions(o.dModel, o.heads)));
    } else {
      sdpa = register_module(
          "sdpa", SdpaAttention("layers." + std::to_string(i) + ".sdpa", o.dModel, o.heads));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = norm1(x);
    h = mha ? std::get<0>(mha->forward(h, h, h, {}, /*needWeights=*/false)) : sdpa->forward(h);
    auto y = x + h;
    return y + ff2(torch::gelu(ff1(norm2(y))));
  }
  attnscope::MultiheadAttention mha{nullptr};
  SdpaAttention sdpa{nullptr};
  torch::nn::LayerNorm norm1, norm2;
  torch::nn::Linear ff1, ff2;
};
TORCH_MODULE(Block);

struct ModelImpl : torch::nn::Module {
  explicit ModelImpl(const Options& o)
      : embed(register_module("embed", torch::nn::Embedding(o.vocab, o.dModel))),
        head(register_module("head", torch::nn::Linear(o.dModel, o.vocab))) {
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < o.layers; ++i) blocks->push_back(Block(i, o));
  }
  torch::Tensor forward(const torch::Tensor& tokens) {
    auto x = embed(tokens);
    for (auto& b : *blocks) x = b->as<Block>()->forward(x);
    return head(x);
  }
  torch::nn::Embedding embed;
  torch::nn::ModuleList blocks;
  torch::nn::Linear head;
};
TORCH_MODULE(Model);

struct Trainer {
  Trainer(const Options& o)
      : o(o), model(o), optimizer(model->parameters(), torch::optim::AdamOptions(1e-4)) {
    model->to(torch::kCUDA, torch::kBFloat16);
  }
  // One step, never reading the loss back: the host runs ahead of the device, as in training.
  void step() {
    auto tokens = torch::randint(o.vocab, {o.seq, o.batch},
                                 torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA));
    auto logits = model->forward(tokens);
    auto loss = torch::nn::functional::cross_entropy(logits.view({-1, o.vocab}).to(torch::kFloat),
                                                     tokens.view({-1}));
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
  }
  Options o;
  Model model;
  torch::optim::Adam optimizer;
};

attnscope::Config baseConfig() {
  attnscope::Config c = attnscope::Config::fromEnvironment();
  c.logLevel = attnscope::LogLevel::kWarn;
  c.sampleEvery = 1;
  return c;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Every layer's calls per phase in the device table.
uint64_t callsIn(const attnscope::StatsTable& t, attnscope::Phase p, size_t* layers) {
  uint64_t fewest = UINT64_MAX;
  *layers = 0;
  for (const attnscope::LayerStats& l : t.layers()) {
    const auto* ph = l.phases[static_cast<int>(p)].get();
    fewest = std::min<uint64_t>(fewest, ph ? ph->call.seconds.count() : 0);
    ++*layers;
  }
  return *layers == 0 ? 0 : fewest;
}

// Waits (at most `seconds`) until every layer has `calls` device calls forward and backward.
void waitForCalls(const Options& o, uint64_t calls, double seconds) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const attnscope::StatsTable d = attnscope::deviceStatistics();
    size_t layers = 0, layersB = 0;
    if (callsIn(d, attnscope::Phase::kForward, &layers) >= calls &&
        callsIn(d, attnscope::Phase::kBackward, &layersB) >= calls &&
        layers == static_cast<size_t>(o.layers))
      return;
  }
}

void printCounters(const char* phase, const attnscope::GpuStatus& s) {
  std::printf(
      "FIGURE %s source=%s kernels_attributed=%llu unattributed=%llu outside=%llu late=%llu "
      "dropped=%llu calls_given_up=%llu calls_in_flight_at_stop=%llu side_stream=%llu "
      "spans=%llu spans_dropped=%llu event_errors=%llu events_in_pool=%llu\n",
      phase, attnscope::gpuTimingName(s.source), (unsigned long long)s.kernelsAttributed,
      (unsigned long long)s.recordsUnattributed, (unsigned long long)s.recordsOutside,
      (unsigned long long)s.recordsLate, (unsigned long long)s.cuptiRecordsDropped,
      (unsigned long long)s.callsGivenUp, (unsigned long long)s.callsInFlightAtStop,
      (unsigned long long)s.recordsSideStream, (unsigned long long)s.spansResolved,
      (unsigned long long)s.spansDropped, (unsigned long long)s.eventErrors,
      (unsigned long long)s.eventsInPool);
}

// --- 1. the default source, steady state ------------------------------------------------------

void steadyAuto(Trainer& t, const Options& o) {
  attnscope::Config c = baseConfig();
  c.gpuTiming = attnscope::GpuTiming::kAuto;
  c.aggregation = attnscope::Aggregation::kLocal;
  attnscope::start(c);
  const auto t0 = std::chrono::steady_clock::now();
  int64_t steps = 0;
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() <
         o.steadySeconds) {
    t.step();
    attnscope::step();
    ++steps;
  }
  const double hostSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  torch::cuda::synchronize();  // the first synchronisation, after the steady state
  const double deviceSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  waitForCalls(o, static_cast<uint64_t>(steps), 20);
  const attnscope::GpuStatus s = attnscope::gpuStatus();
  const attnscope::StatsTable device = attnscope::deviceStatistics();
  attnscope::stop();
  std::printf(
      "FIGURE auto steps=%lld host_s=%.2f device_s=%.2f (host ahead by %.2f s at the end)\n",
      (long long)steps, hostSeconds, deviceSeconds, deviceSeconds - hostSeconds);
  printCounters("auto", s);
  check("timing_source_auto_is_cupti", s.source == attnscope::GpuTiming::kCupti,
        std::string("source ") + attnscope::gpuTimingName(s.source) +
            (s.fallbackReason.empty() ? "" : " (" + s.fallbackReason + ")"));
  check("auto_steady_state_10s", hostSeconds >= o.steadySeconds && steps >= 2,
        fmt("%.1f s, %.0f steps before any synchronisation", hostSeconds, double(steps)));
  size_t layers = 0, layersB = 0;
  const uint64_t fwd = callsIn(device, attnscope::Phase::kForward, &layers);
  const uint64_t bwd = callsIn(device, attnscope::Phase::kBackward, &layersB);
  check("auto_every_call_folded",
        layers == static_cast<size_t>(o.layers) && fwd == static_cast<uint64_t>(steps) &&
            bwd == static_cast<uint64_t>(steps),
        fmt("%.0f layers; fewest calls forward %.0f, backward %.0f", double(layers), double(fwd),
            double(bwd)) +
            " of " + std::to_string(steps) + " steps");
  check("auto_late_0", s.recordsLate == 0, std::to_string(s.recordsLate) + " late records");
  check("auto_unattributed_0", s.recordsUnattributed == 0,
        std::to_string(s.recordsUnattributed) + " records whose correlation never came");
  check("auto_dropped_0", s.cuptiRecordsDropped == 0 && s.callsGivenUp == 0,
        std::to_string(s.cuptiRecordsDropped) + " dropped by CUPTI, " +
            std::to_string(s.callsGivenUp) + " calls given up");
  check("allocator_figures_under_auto",
        s.device >= 0 && s.allocatedBytes > 0 && s.peakAllocatedBytes >= s.allocatedBytes &&
            s.reservedBytes >= s.allocatedBytes,
        fmt("device %.0f: allocated %.0f MiB, peak %.0f MiB", s.device,
            s.allocatedBytes / 1048576.0, s.peakAllocatedBytes / 1048576.0));
}

// --- 2. both: events and kernels, memory, backends ----------------------------------------------

void attribution(Trainer& t, const Options& o) {
  attnscope::Config c = baseConfig();
  c.gpuTiming = attnscope::GpuTiming::kBoth;
  c.aggregation = attnscope::Aggregation::kLocal;
  attnscope::start(c);
  for (int64_t s = 0; s < o.steps; ++s) {
    t.step();
    attnscope::step();
  }
  torch::cuda::synchronize();
  waitForCalls(o, static_cast<uint64_t>(o.steps), 30);
  const attnscope::GpuStatus status = attnscope::gpuStatus();
  const attnscope::StatsTable device = attnscope::deviceStatistics();
  const attnscope::StatsTable host = attnscope::statistics();
  attnscope::stop();

  check("timing_source_both", status.source == attnscope::GpuTiming::kBoth,
        std::string("source ") + attnscope::gpuTimingName(status.source) +
            (status.fallbackReason.empty() ? "" : " (" + status.fallbackReason + ")"));
  printCounters("both", status);
  check("cupti_no_dropped_records", status.cuptiRecordsDropped == 0,
        std::to_string(status.cuptiRecordsDropped) + " dropped");
  check("both_late_0", status.recordsLate == 0, std::to_string(status.recordsLate) + " late");

  const int phases[] = {static_cast<int>(attnscope::Phase::kForward),
                        static_cast<int>(attnscope::Phase::kBackward)};
  size_t layersSeen = 0;
  bool allPresent = true, allWithin = true, noneOver = true, memoryOk = true;
  double worst = 0, worstOver = 0;
  std::printf("FIGURE %-16s %-8s %6s %12s %12s %8s %12s %12s\n", "layer", "phase", "calls",
              "event_s", "kernels_s", "diff", "bytes", "peak_bytes");
  for (const attnscope::LayerStats& layer : device.layers()) {
    ++layersSeen;
    for (int p : phases) {
      const attnscope::PhaseStats* ph = layer.phases[p].get();
      const char* phase = attnscope::phaseName(static_cast<attnscope::Phase>(p));
      if (ph == nullptr || ph->call.seconds.count() < static_cast<uint64_t>(o.steps) ||
          ph->call.seconds.sum() <= 0) {
        allPresent = false;
        std::printf("FIGURE %-16s %-8s missing or short (%llu calls)\n", layer.name.c_str(), phase,
                    (unsigned long long)(ph ? ph->call.seconds.count() : 0));
        continue;
      }
      double kernels = 0;
      uint64_t records = 0;
      for (const auto& k : ph->kinds) {
        if (!k) continue;
        kernels += k->seconds.sum();
        records += k->ops;
      }
      const double span = ph->call.seconds.sum();
      const double diff = std::abs(kernels - span) / span;
      worst = std::max(worst, diff);
      worstOver = std::max(worstOver, kernels / span);
      if (records == 0) allPresent = false;
      if (diff > o.tolerance) allWithin = false;
      if (kernels > span * 1.01) noneOver = false;
      // Memory of the same layer and phase, from the host-side table (allocator reports).
      int64_t bytes = 0, peak = 0;
      for (const attnscope::LayerStats& h : host.layers()) {
        if (h.name != layer.name || !h.phases[p]) continue;
        bytes = h.phases[p]->call.bytes;
        peak = h.phases[p]->call.peak;
      }
      if (bytes <= 0 || (p == phases[0] && peak <= 0)) memoryOk = false;
      std::printf("FIGURE %-16s %-8s %6llu %12.6f %12.6f %7.2f%% %12lld %12lld\n",
                  layer.name.c_str(), phase, (unsigned long long)ph->call.seconds.count(), span,
                  kernels, 100 * diff, (long long)bytes, (long long)peak);
    }
  }
  check("per_layer_device_times_fwd_bwd", allPresent && layersSeen == static_cast<size_t>(o.layers),
        std::to_string(layersSeen) + " of " + std::to_string(o.layers) +
            " layers with forward and backward kernel times");
  check("kernel_time_le_span_x1.01", noneOver && layersSeen > 0,
        fmt("largest kernels/span %.4f (more than 1.01 means double counting)", worstOver));
  check("cupti_sum_within_5pct_of_events", allWithin && layersSeen > 0,
        fmt("worst difference %.2f%%", 100 * worst));
  check("device_memory_per_layer", memoryOk && layersSeen > 0,
        "bytes allocated (and forward peak) > 0 on every layer");
  check("allocator_figures",
        status.device >= 0 && status.allocatedBytes > 0 &&
            status.peakAllocatedBytes >= status.allocatedBytes &&
            status.reservedBytes >= status.allocatedBytes,
        fmt("device %.0f: allocated %.0f MiB, peak %.0f MiB", status.device,
            status.allocatedBytes / 1048576.0, status.peakAllocatedBytes / 1048576.0));

  bool backendsOk = !status.backends.empty();
  for (const auto& b : status.backends) {
    const attnscope::AttentionBackend d = b.dominant();
    std::printf("FIGURE backend %-16s %-16s flash=%llu mem_eff=%llu cudnn=%llu math=%llu\n",
                b.layer.c_str(), attnscope::attentionBackendName(d),
                (unsigned long long)b.kernels[0], (unsigned long long)b.kernels[1],
                (unsigned long long)b.kernels[2], (unsigned long long)b.kernels[3]);
    const bool sdpa = b.layer.find(".sdpa") != std::string::npos;
    if (!sdpa && d != attnscope::AttentionBackend::kMath) backendsOk = false;
    if (sdpa && d == attnscope::AttentionBackend::kMath) backendsOk = false;
  }
  check("attention_backend_labels", backendsOk, "mha layers: math; sdpa layers: a fused backend");
}

// --- 3. each SDPA backend forced in turn
// ----------------------------------------------------------

void backends(Trainer& t) {
  auto& ctx = at::globalContext();
  const bool flash = ctx.userEnabledFlashSDP(), mem = ctx.userEnabledMemEfficientSDP(),
             math = ctx.userEnabledMathSDP(), cudnn = ctx.userEnabledCuDNNSDP();
  const attnscope::AttentionBackend forced[] = {attnscope::AttentionBackend::kFlash,
                                                attnscope::AttentionBackend::kMemoryEfficient,
                                                attnscope::AttentionBackend::kCudnn};
  for (const attnscope::AttentionBackend want : forced) {
    ctx.setSDPUseFlash(want == attnscope::AttentionBackend::kFlash);
    ctx.setSDPUseMemEfficient(want == attnscope::AttentionBackend::kMemoryEfficient);
    ctx.setSDPUseCuDNN(want == attnscope::AttentionBackend::kCudnn);
    ctx.setSDPUseMath(false);
    const std::string name = attnscope::attentionBackendName(want);
    attnscope::Config c = baseConfig();
    c.aggregation = attnscope::Aggregation::kLocal;
    std::string detail;
    bool ok = false;
    try {
      attnscope::start(c);
      for (int s = 0; s < 3; ++s) {
        t.step();
        attnscope::step();
      }
      torch::cuda::synchronize();
      std::this_thread::sleep_for(std::chrono::milliseconds(1000));
      const attnscope::GpuStatus st = attnscope::gpuStatus();
      attnscope::stop();
      size_t sdpaLayers = 0, named = 0;
      for (const auto& b : st.backends) {
        if (b.layer.find(".sdpa") == std::string::npos) continue;
        ++sdpaLayers;
        if (b.dominant() == want) ++named;
        detail += b.layer + ":" + attnscope::attentionBackendName(b.dominant()) + " ";
      }
      ok = sdpaLayers > 0 && named == sdpaLayers;
    } catch (const std::exception& e) {
      if (attnscope::isRunning()) attnscope::stop();
      const std::string what = e.what();
      detail = "SDPA refused: " + what.substr(0, what.find('\\n'));
    }
    check("sdpa_backend_forced_" + name, ok, "forced " + name + ": " + detail);
  }
  ctx.setSDPUseFlash(flash);
  ctx.setSDPUseMemEfficient(mem);
  ctx.setSDPUseMath(math);
  ctx.setSDPUseCuDNN(cudnn);
}

// --- 4. torch.profiler while attnscope runs ----------------------------------------------------

// The device records (kernels, copies, fills) of a Kineto trace of `steps` steps.
size_t profiledDeviceEvents(Trainer& t, int steps, bool attnscopeSteps) {
  namespace prof = torch::profiler::impl;
  const prof::ProfilerConfig config(prof::ProfilerState::KINETO);
  const std::set<prof::ActivityType> activities{prof::ActivityType::CPU, prof::ActivityType::CUDA};
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
  for (int s = 0; s < steps; ++s) {
    t.step();
    if (attnscopeSteps) attnscope::step();
  }
  torch::cuda::synchronize();
  auto result = torch::autograd::profiler::disableProfiler();
  size_t device = 0;
  if (result) {
    for (const auto& e : result->events()) device += e.deviceType() == c10::DeviceType::CUDA;
  }
  return device;
}

void profilerWhileRunning(Trainer& t) {
  attnscope::Config c = baseConfig();
  c.aggregation = attnscope::Aggregation::kLocal;
  attnscope::start(c);  // auto: CUPTI
  for (int s = 0; s < 2; ++s) {
    t.step();
    attnscope::step();
  }
  const attnscope::GpuTiming before = attnscope::gpuStatus().source;
  const size_t during = profiledDeviceEvents(t, 3, true);
  const attnscope::GpuStatus s = attnscope::gpuStatus();
  attnscope::stop();
  const size_t after = profiledDeviceEvents(t, 2, false);
  check("profiler_during_attnscope_has_gpu_kernels", during > 0,
        std::to_string(during) + " device events in the trace (attnscope was " +
            attnscope::gpuTimingName(before) + ")");
  check(
      "attnscope_yields_to_profiler_named",
      s.source == attnscope::GpuTiming::kEvents &&
          s.fallbackReason.find("torch.profiler") != std::string::npos,
      std::string("source ") + attnscope::gpuTimingName(s.source) + " (" + s.fallbackReason + ")");
  check("profiler_after_attnscope_has_gpu_kernels", after > 0,
        std::to_string(after) + " device events in a trace after stop()");
}

// --- 5. overhead: the GPU-bound model and a launch-bound one ---------------------------------

void overhead(Trainer& t, const Options& o, const char* model, double target) {
  struct Variant {
    const char* name;
    bool on;
    std::vector<double> seconds;
  };
  std::vector<Variant> variants = {{"off", false, {}}, {"on", true, {}}};
  std::mt19937 rng(12345);
  for (int64_t r = 0; r < o.overheadRounds; ++r) {
    std::vector<size_t> order = {0, 1};
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t i : order) {
      Variant& v = variants[i];
      if (v.on) {
        attnscope::Config c = baseConfig();
        c.aggregation = attnscope::Aggregation::kLocal;
        attnscope::start(c);
      }
      t.step();  // untimed: the first step after a switch
      if (v.on) attnscope::step();
      torch::cuda::synchronize();
      for (int64_t s = 0; s < o.overheadSteps; ++s) {
        const auto t0 = std::chrono::steady_clock::now();
        t.step();
        if (v.on) attnscope::step();
        torch::cuda::synchronize();
        v.seconds.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      if (v.on) attnscope::stop();
    }
  }
  const double off = median(variants[0].seconds), on = median(variants[1].seconds);
  std::vector<double> ratios;
  for (int b = 0; b < 2000; ++b) {
    std::vector<double> x, y;
    std::uniform_int_distribution<size_t> pick(0, variants[0].seconds.size() - 1);
    for (size_t k = 0; k < variants[0].seconds.size(); ++k) {
      x.push_back(variants[0].seconds[pick(rng)]);
      y.push_back(variants[1].seconds[pick(rng)]);
    }
    ratios.push_back(median(y) / median(x));
  }
  std::sort(ratios.begin(), ratios.end());
  std::printf(
      "FIGURE overhead %s step_off=%.3fms step_on=%.3fms ratio=%.4f interval95=%.4f..%.4f (%zu "
      "steps each)\n",
      model, off * 1e3, on * 1e3, on / off, ratios[50], ratios[1949], variants[0].seconds.size());
  check(std::string("overhead_sample_every_1_") + model, on / off <= target,
        fmt("ratio %.4f (95%% interval %.4f..%.4f)", on / off, ratios[50], ratios[1949]) +
            fmt("; target <= %.2f", target));
}

// --- 6. fallback -----------------------------------------------------------------------------

void fallback(Trainer& t) {
#if TORCH_VERSION_MAJOR >= 2
  namespace prof = torch::profiler::impl;
  const prof::ProfilerConfig config(prof::ProfilerState::KINETO);
  const std::set<prof::ActivityType> activities{prof::ActivityType::CPU, prof::ActivityType::CUDA};
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
  attnscope::Config c = baseConfig();
  c.aggregation = attnscope::Aggregation::kLocal;
  c.gpuTiming = attnscope::GpuTiming::kAuto;
  attnscope::start(c);
  for (int s = 0; s < 3; ++s) {
    t.step();
    attnscope::step();
  }
  torch::cuda::synchronize();
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  const attnscope::GpuStatus status = attnscope::gpuStatus();
  const attnscope::StatsTable device = attnscope::deviceStatistics();
  attnscope::stop();
  auto result = torch::autograd::profiler::disableProfiler();
  size_t timed = 0;
  for (const auto& l : device.layers()) {
    if (l.phases[0] && l.phases[0]->call.seconds.count() > 0) ++timed;
  }
  check(
      "fallback_when_profiler_first",
      status.source == attnscope::GpuTiming::kEvents && !status.fallbackReason.empty() && timed > 0,
      std::string("source ") + attnscope::gpuTimingName(status.source) + " (" +
          status.fallbackReason + "), " + std::to_string(timed) +
          " layers timed by events; the profiler recorded " +
          std::to_string(result ? result->events().size() : 0) + " events");
#else
  (void)t;
  check("fallback_when_profiler_first", false, "needs LibTorch 2.x's Kineto C++ API");
#endif
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i];
    const int64_t v = std::atoll(argv[i + 1]);
    if (f == "--layers")
      o.layers = v;
    else if (f == "--d-model")
      o.dModel = v;
    else if (f == "--heads")
      o.heads = v;
    else if (f == "--seq")
      o.seq = v;
    else if (f == "--batch")
      o.batch = v;
    else if (f == "--steps")
      o.steps = v;
    else if (f == "--steady-seconds")
      o.steadySeconds = static_cast<double>(v);
    else if (f == "--overhead-rounds")
      o.overheadRounds = v;
    else if (f == "--overhead-steps")
      o.overheadSteps = v;
    else {
      std::fprintf(stderr, "gpu_checks: unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  if (!torch::cuda::is_available()) {
    std::printf("gpu_checks: no CUDA device visible to LibTorch; nothing checked\n");
    return 77;
  }
  std::printf(
      "gpu_checks: torch %d.%d.%d, %lld layers, d_model %lld, %lld heads, seq %lld, batch %lld, "
      "bf16\n",
      TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH, (long long)o.layers,
      (long long)o.dModel, (long long)o.heads, (long long)o.seq, (long long)o.batch);
  torch::manual_seed(0);
  Trainer trainer(o);
  for (int i = 0; i < 3; ++i) trainer.step();  // warm-up: allocator, cuBLAS handles, kernels
  torch::cuda::synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  steadyAuto(trainer, o);
  attribution(trainer, o);
  backends(trainer);
  profilerWhileRunning(trainer);
  overhead(trainer, o, "gpu_bound", o.overheadTarget);
  {
    torch::manual_seed(0);
    Trainer small(launchBound(o));
    for (int i = 0; i < 3; ++i) small.step();
    torch::cuda::synchronize();
    overhead(small, launchBound(o), "launch_bound", o.launchBoundTarget);
  }
  fallback(trainer);
  std::printf("gpu_checks: %d check(s) failed; %.1f s\n", failures,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return failures == 0 ? 0 : 1;
}
