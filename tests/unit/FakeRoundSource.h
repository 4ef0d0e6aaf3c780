#pragma once

// The training side as the reporter sees it (RoundSource), for tests/unit/ReporterTest.cpp: every
// window it hands over holds `callsPerWindow` forward calls of one layer over `stepsPerWindow`
// sampled steps, each of `callSeconds`; trace steps the test queues go with the next take; the
// control the reporter applies is recorded. No LibTorch.

#include <mutex>
#include <utility>
#include <vector>

#include "attnscope/reporter/RoundSource.h"
#include "attnscope/trace/TraceFormat.h"

namespace attnscope {
namespace detail {

class FakeRoundSource final : public RoundSource {
 public:
  int callsPerWindow = 8;
  int stepsPerWindow = 4;
  double callSeconds = 0.001;
  // From this window on (0-based; -1: never) every call is `slowFactor` x slower. Each call is
  // one softmax op of its full time.
  int slowFrom = -1;
  double slowFactor = 3;

  RoundSnapshot snapshot(const SnapshotRequest& request) override {
    std::lock_guard<std::mutex> lock(mutex_);
    RoundSnapshot s;
    s.layerNames = {"layers.0.attn"};
    s.run.rank = 0;
    s.run.stepsSeen = lastStep_;
    s.run.attnscopeVersion = "test";
    s.paused = paused_;
    s.run.sampleEvery = sampleEvery_;
    if (request.endWindow) {
      s.window.stats = StatsTable(16);
      s.window.stats.layerId("layers.0.attn");
      CallRecord r;
      r.layer = 0;
      r.phase = Phase::kForward;
      const bool slow = slowFrom >= 0 && windows_ >= slowFrom;
      r.ns = static_cast<int64_t>(callSeconds * (slow ? slowFactor : 1) * 1e9);
      r.kinds[static_cast<int>(OpKind::kSoftmax)].ns = r.ns;
      r.kinds[static_cast<int>(OpKind::kSoftmax)].ops = 1;
      for (int i = 0; i < callsPerWindow; ++i) s.window.stats.add(r);
      lastStep_ += stepsPerWindow;
      s.window.steps = s.window.sampledSteps = stepsPerWindow;
      s.window.lastStep = lastStep_;
      s.window.seconds = 0.1;
      ++windows_;
    }
    if (request.takeTraceSteps) {
      s.traceSteps = std::move(traceSteps_);
      traceSteps_.clear();
      stepsTaken_ += s.traceSteps.size();
    }
    return s;
  }

  void applyControl(bool paused, int64_t sampleEvery) override {
    std::lock_guard<std::mutex> lock(mutex_);
    paused_ = paused;
    sampleEvery_ = sampleEvery;
    applied_.emplace_back(paused, sampleEvery);
  }

  // A sampled step with one forward call of layer 0, for the next trace take.
  void queueTraceStep(uint64_t step) {
    TraceCall c;
    c.layer = 0;
    c.phase = Phase::kForward;
    c.calls = 1;
    c.ns = 1000000;
    EncodedStep s;
    s.step = step;
    s.endUnix = 1.0e9 + static_cast<double>(step);
    s.stepNs = 2000000;
    traceformat::encodeCalls({c}, &s.data);
    std::lock_guard<std::mutex> lock(mutex_);
    traceSteps_.push_back(std::move(s));
  }

  int windows() {
    std::lock_guard<std::mutex> lock(mutex_);
    return windows_;
  }
  uint64_t stepsTaken() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stepsTaken_;
  }
  std::vector<std::pair<bool, int64_t>> applied() {
    std::lock_guard<std::mutex> lock(mutex_);
    return applied_;
  }

 private:
  std::mutex mutex_;
  uint64_t lastStep_ = 0;
  int windows_ = 0;
  uint64_t stepsTaken_ = 0;
  bool paused_ = false;
  int64_t sampleEvery_ = 1;
  std::vector<EncodedStep> traceSteps_;
  std::vector<std::pair<bool, int64_t>> applied_;
};

}  // namespace detail
}  // namespace attnscope
