#pragma once

// Synthetic trace content for the trace store, reader and analysis tests: steps of a model whose
// attention costs are known, with an optional slow (rank, layer).

#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attnscope/trace/TraceFormat.h"
#include "attnscope/trace/TraceStore.h"

namespace attnscope {
namespace testdata {

// Forward and backward of `layers` layers; kinds 0..6 each take (kind + 1) × base ns per call.
inline std::vector<TraceCall> stepCalls(int layers, int64_t baseNs, int slowLayer = -1,
                                        int slowFactor = 1) {
  std::vector<TraceCall> calls;
  for (int l = 0; l < layers; ++l) {
    for (Phase p : {Phase::kForward, Phase::kBackward}) {
      TraceCall c;
      c.layer = l;
      c.phase = p;
      const int64_t factor = l == slowLayer ? slowFactor : 1;
      c.calls = static_cast<uint32_t>(factor);
      for (int k = 0; k < 7; ++k) {
        c.kinds[k].ns = (k + 1) * baseNs * factor * (p == Phase::kBackward ? 2 : 1);
        c.kinds[k].bytes = (k + 1) * 4096 * factor;
        c.kinds[k].peak = (k + 1) * 2048;
        c.ns += c.kinds[k].ns;
        c.bytes += c.kinds[k].bytes;
        c.peak = std::max(c.peak, c.kinds[k].peak);
      }
      calls.push_back(c);
    }
  }
  return calls;
}

inline EncodedStep encoded(uint64_t step, double endUnix, int64_t stepNs,
                           const std::vector<TraceCall>& calls) {
  EncodedStep s;
  s.step = step;
  s.endUnix = endUnix;
  s.stepNs = stepNs;
  traceformat::encodeCalls(calls, &s.data);
  return s;
}

inline std::vector<std::string> layerNames(int layers) {
  std::vector<std::string> names;
  for (int l = 0; l < layers; ++l) names.push_back("layers." + std::to_string(l) + ".attn");
  return names;
}

inline std::vector<std::pair<std::string, std::string>> meta(int rank, int world,
                                                             double interval = 1.0) {
  return {{"format", "attnscope.trace/1"},          {"rank", std::to_string(rank)},
          {"world_size", std::to_string(world)},    {"node", "testhost"},
          {"interval_s", std::to_string(interval)}, {"start_unix", "1000"},
          {"config", "{\"aggregation\": \"gloo\"}"}};
}

inline TraceRooflineRow rooflineRow(int layer, Phase phase, OpKind kind, uint64_t ops,
                                    double seconds, double flops, double bytes,
                                    double wideFlops = -1, double modelledSeconds = -1) {
  TraceRooflineRow r;
  r.layer = layer;
  r.phase = phase;
  r.kind = kind;
  r.ops = ops;
  r.seconds = seconds;
  r.modelledSeconds = modelledSeconds < 0 ? seconds : modelledSeconds;
  r.flops = flops;
  r.bytes = bytes;
  r.wideFlops = wideFlops < 0 ? flops : wideFlops;
  return r;
}

// Writes one rank's trace: `intervals` commits of `stepsPerInterval` steps, 10 ms apart from
// t = 1000 s, with a window summary each; `stopped` adds stop_unix at the end.
inline void writeRank(const std::string& dir, int rank, int world, int layers, int intervals,
                      int stepsPerInterval, int slowLayer = -1, int slowFactor = 1,
                      bool stopped = true) {
  std::string error;
  auto store = TraceStore::open(dir, rank, 64 << 20, &error);
  ASSERT_NE(store, nullptr) << error;
  uint64_t step = 0;
  for (int i = 0; i < intervals; ++i) {
    TraceInterval in;
    in.layerNames = layerNames(layers);
    if (i == 0) in.meta = meta(rank, world);
    const std::vector<TraceCall> calls =
        stepCalls(layers, 1000 + 10 * (rank % 3), slowLayer, slowFactor);
    for (int s = 0; s < stepsPerInterval; ++s, ++step) {
      in.steps.push_back(encoded(step, 1000.0 + 0.01 * (step + 1), 10000000, calls));
    }
    in.haveWindow = true;
    // The window's figures as the live reporter derives them: every step is alike here, so the
    // typical time per step is one step's.
    for (const TraceCall& c : calls) {
      (c.phase == Phase::kBackward ? in.window.backwardSeconds : in.window.forwardSeconds) +=
          c.ns * 1e-9;
    }
    in.windowStartUnix = 1000.0 + 0.01 * (step - stepsPerInterval);
    in.windowEndUnix = 1000.0 + 0.01 * step;
    in.window.lastStep = step;
    in.window.steps = in.window.sampledSteps = static_cast<uint32_t>(stepsPerInterval);
    in.meta.emplace_back("last_commit_unix", std::to_string(in.windowEndUnix));
    if (stopped && i + 1 == intervals)
      in.meta.emplace_back("stop_unix", std::to_string(in.windowEndUnix));
    ASSERT_TRUE(store->commit(in, &error)) << error;
  }
}

// A fresh directory under testing::TempDir(), removed with its files afterwards.
class TempDir {
 public:
  TempDir() {
    std::string pattern = testing::TempDir() + "attnscope_trace_XXXXXX";
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A run of `ranks` ranks, each writing `intervals` windows of `steps` steps (2 layers), one step
// every `stepSeconds` from t = 1000 s. A step's calls take callNs(rank, interval) each; a
// window's forward and backward seconds are one step's (every step alike), then fill(rank,
// interval, &window) sets what the case needs (scores, cells). `config` is the run's config
// metadata (what its live detector applied).
struct WindowedRun {
  int ranks = 3;
  int intervals = 10;
  int steps = 20;
  double stepSeconds = 0.01;
  std::string config = "{\"aggregation\": \"gloo\"}";
  std::function<int64_t(int, int)> callNs = [](int, int) -> int64_t { return 1000; };
  std::function<void(int, int, RankWindow*)> fill = [](int, int, RankWindow*) {};
};

inline void writeWindows(const std::string& dir, const WindowedRun& run) {
  for (int r = 0; r < run.ranks; ++r) {
    std::string error;
    auto store = TraceStore::open(dir, r, 64 << 20, &error);
    ASSERT_NE(store, nullptr) << error;
    uint64_t step = 0;
    for (int i = 0; i < run.intervals; ++i) {
      TraceInterval in;
      in.layerNames = layerNames(2);
      if (i == 0) {
        in.meta = meta(r, run.ranks);
        in.meta.back().second = run.config;
      }
      const std::vector<TraceCall> calls = stepCalls(2, run.callNs(r, i));
      const auto stepNs = static_cast<int64_t>(run.stepSeconds * 1e9);
      for (int s = 0; s < run.steps; ++s, ++step)
        in.steps.push_back(encoded(step, 1000.0 + run.stepSeconds * (step + 1), stepNs, calls));
      in.haveWindow = true;
      for (const TraceCall& c : calls) {
        (c.phase == Phase::kBackward ? in.window.backwardSeconds : in.window.forwardSeconds) +=
            c.ns * 1e-9;
      }
      in.windowStartUnix = 1000.0 + run.stepSeconds * (step - run.steps);
      in.windowEndUnix = 1000.0 + run.stepSeconds * step;
      in.window.lastStep = step;
      in.window.steps = in.window.sampledSteps = static_cast<uint32_t>(run.steps);
      run.fill(r, i, &in.window);
      if (i + 1 == run.intervals)
        in.meta.emplace_back("stop_unix", std::to_string(in.windowEndUnix));
      ASSERT_TRUE(store->commit(in, &error)) << error;
    }
  }
}

}  // namespace testdata
}  // namespace attnscope
