#pragma once

#include <memory>

#include "GpuCollection.h"
#include "Recorder.h"
#include "attnscope/core/ClusterReport.h"
#include "attnscope/core/Config.h"
#include "attnscope/core/Topology.h"
#include "attnscope/reporter/Reporter.h"
#include "attnscope/reporter/RoundSource.h"

namespace attnscope {
namespace detail {

// One start()..stop() of the plugin on this rank, the lifecycle alone: it owns the recorder (what
// the training threads record), the GPU collection and the reporter; begin() installs the
// observer's callbacks, step() ends a step and sets them for the next, finish() removes them and
// writes the summary. The reporter sees it as a RoundSource.
class Session final : public RoundSource {
 public:
  Session(const Config& config, const Topology& topology);

  const Config& config() const { return recorder_.config(); }
  const Topology& topology() const { return topology_; }
  Recorder& recorder() { return recorder_; }
  GpuCollection& gpu() { return gpu_; }

  // Starts the CPU allocator tracker and the GPU collection, installs the callbacks for the first
  // step. Called once by start(), after the machine is described (recorder().setMachine()).
  void begin();
  // Ends the current step (the recorder folds it) and installs or removes the global callbacks
  // for the next one: sampled, or steps still inferred from backward passes.
  void step(bool explicitCall);
  // Removes the callbacks, folds what is pending, runs the last round and writes the outputs.
  void finish();

  // Rank 0's cross-rank picture, when a reporter runs.
  bool clusterReport(ClusterReport* out);
  // The recorder's run metadata with the GPU timing source (and its fallback reason) filled in.
  RunInfo runInfo();
  void setReporter(std::unique_ptr<Reporter> reporter);

  // RoundSource (the reporter thread): the recorder's part under its one lock, then the GPU's.
  RoundSnapshot snapshot(const SnapshotRequest& request) override;
  void applyControl(bool paused, int64_t sampleEvery) override {
    recorder_.setSampling(paused, sampleEvery);
  }

 private:
  const Topology topology_;
  Recorder recorder_;
  GpuCollection gpu_;
  uint64_t sampledSinceCollective_ = 0;  // sampled steps since the collective observer's (hooks)
  std::unique_ptr<Reporter> reporter_;
  std::unique_ptr<ClusterReport> cluster_;  // kept when the reporter had to be left behind
};

// The running session, or null; setting it sets currentRecorder() to its recorder. Sessions are
// never freed while the process runs (a stopped one is retired), so a pointer loaded stays valid.
Session* currentSession();
void setCurrentSession(Session* session);

}  // namespace detail
}  // namespace attnscope
