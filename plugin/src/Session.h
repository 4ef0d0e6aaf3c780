#pragma once

#include <memory>

#include "GpuCollection.h"
#include "Recorder.h"
#include "StepController.h"
#include "attnscope/core/ClusterReport.h"
#include "attnscope/core/Config.h"
#include "attnscope/core/Topology.h"
#include "attnscope/reporter/Reporter.h"
#include "attnscope/reporter/RoundSource.h"

namespace attnscope {
namespace detail {

// One start()..stop() of the plugin on this rank, the lifecycle alone: it owns the step controller
// (which steps are sampled, which callbacks run on them), the recorder (what the training threads
// record), the GPU collection and the reporter; begin() starts the collectors and the first step,
// finish() ends the last one and writes the summary. It does the work of a step's end for the
// controller (a StepHandler); the reporter sees it as a RoundSource.
class Session final : public RoundSource, private StepHandler {
 public:
  Session(const Config& config, const Topology& topology);

  const Config& config() const { return recorder_.config(); }
  const Topology& topology() const { return topology_; }
  StepController& steps() { return steps_; }
  Recorder& recorder() { return recorder_; }
  GpuCollection& gpu() { return gpu_; }

  // Starts the CPU allocator tracker and the GPU collection, installs the callbacks for the first
  // step. Called once by start(), after the machine is described (recorder().setMachine()).
  void begin();
  // Ends the last step and removes the callbacks (the step controller), folds what is pending,
  // runs the last round and writes the outputs.
  void finish();

  // Rank 0's cross-rank picture, when a reporter runs.
  bool clusterReport(ClusterReport* out);
  // The recorder's run metadata with the GPU timing source (and its fallback reason) filled in.
  RunInfo runInfo();
  void setReporter(std::unique_ptr<Reporter> reporter);

  // RoundSource (the reporter thread): the recorder's part under its one lock, then the GPU's.
  RoundSnapshot snapshot(const SnapshotRequest& request) override;
  void applyControl(bool paused, int64_t sampleEvery) override {
    steps_.setSampling(paused, sampleEvery);
  }

 private:
  // StepHandler (the step controller, at boundaries).
  void stepEnded(const EndedStep& step) override;
  void setGlobalCallbacks(bool global, bool fused) override;
  bool insideBackwardPass() const override;
  void addOverheadTicks(uint64_t ticks) override { recorder_.addOverheadTicks(ticks); }

  const Topology topology_;
  StepController steps_;
  Recorder recorder_;
  GpuCollection gpu_;
  std::unique_ptr<Reporter> reporter_;
  std::unique_ptr<ClusterReport> cluster_;  // kept when the reporter had to be left behind
};

// The running session, or null; setting it sets currentRecorder() to its recorder. Sessions are
// never freed while the process runs (a stopped one is retired), so a pointer loaded stays valid.
Session* currentSession();
void setCurrentSession(Session* session);

}  // namespace detail
}  // namespace attnscope
