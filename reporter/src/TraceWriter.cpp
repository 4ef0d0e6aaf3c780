#include "attnscope/reporter/TraceWriter.h"

#include <algorithm>
#include <chrono>
#include <sstream>

#include "attnscope/core/AttentionShape.h"
#include "attnscope/core/Log.h"
#include "attnscope/core/RooflineCells.h"
#include "attnscope/core/UnixTime.h"

namespace attnscope {
namespace detail {
namespace {

std::string configJson(const Config& c) {
  std::ostringstream out;
  out << "{\"sample_every\": " << c.sampleEvery << ", \"interval_s\": " << c.intervalSeconds
      << ", \"memory\": " << (c.memory ? "true" : "false")
      << ", \"fused_ops\": " << (c.fusedOps ? "true" : "false") << ", \"aggregation\": \""
      << aggregationName(c.aggregation) << "\", \"straggler_threshold\": " << c.stragglerThreshold
      << ", \"straggler_windows\": " << c.stragglerWindows
      << ", \"straggler_exit_threshold\": " << c.exitThreshold()
      << ", \"straggler_exit_windows\": " << c.stragglerExitWindows
      << ", \"cell_outlier_factor\": " << c.cellOutlierFactor
      << ", \"cell_outlier_min_share\": " << c.cellOutlierMinShare
      << ", \"cell_outlier_sigmas\": " << c.cellOutlierSigmas << ", \"hang_s\": " << c.hangSeconds
      << ", \"trace_max_mb\": " << c.traceMaxMb << "}";
  return out.str();
}

std::string number(double v) {
  std::ostringstream out;
  out.precision(17);
  out << v;
  return out.str();
}

// The file's metadata, written with its first commit.
std::vector<std::pair<std::string, std::string>> startMeta(const Config& config,
                                                           const RunInfo& run) {
  std::vector<std::pair<std::string, std::string>> meta = {
      {"format", "attnscope.trace/1"},
      {"rank", std::to_string(run.rank)},
      {"world_size", std::to_string(run.worldSize)},
      {"local_rank", std::to_string(run.localRank)},
      {"node", run.node},
      {"attnscope_version", run.attnscopeVersion},
      {"torch_version", run.torchVersion},
      {"interval_s", number(config.intervalSeconds)},
      {"start_unix", number(run.startUnixSeconds)},
      {"config", configJson(config)}};
  const Ceilings& c = run.ceilings;
  const MachineInfo& m = run.machine;
  meta.insert(meta.end(), {{"roofline", config.roofline ? "1" : "0"},
                           {"peak_flops_per_second", number(c.peakFlopsPerSecond)},
                           {"peak_bytes_per_second", number(c.peakBytesPerSecond)},
                           {"ceiling_source", c.source},
                           {"ceiling_detail", c.detail},
                           {"timing", "host"},
                           {"cpu_model", m.cpuModel},
                           {"cpu_cores", std::to_string(m.cpuCores)},
                           {"torch_threads", std::to_string(m.threads)},
                           {"blas", m.blas}});
  if (!m.gpuName.empty()) {
    meta.insert(meta.end(), {{"gpu_name", m.gpuName},
                             {"gpu_driver", m.gpuDriver},
                             {"gpu_memory_bytes", std::to_string(m.gpuMemoryBytes)}});
  }
  return meta;
}

}  // namespace

TraceWriter::TraceWriter(const Config& config, int rank) : config_(config), rank_(rank) {}

TraceStoreStats TraceWriter::stats() {
  std::lock_guard<std::mutex> lock(statsMutex_);
  return stats_;
}

void TraceWriter::open() {
  if (config_.traceDir.empty()) return;
  std::string error;
  store_ = TraceStore::open(config_.traceDir, rank_, config_.traceMaxMb << 20, &error);
  std::lock_guard<std::mutex> lock(statsMutex_);
  stats_.enabled = true;
  stats_.open = store_ != nullptr;
  if (!store_) {
    ++stats_.errors;
    stats_.lastError = error;
    ATTNSCOPE_LOG(kError, "trace store unavailable, training goes on without it: " << error);
  }
}

void TraceWriter::setWindow(const RankWindow& window, const StatsTable& stats) {
  if (!store_) return;
  window_ = window;
  haveWindow_ = true;
  roofline_.clear();
  if (!config_.roofline) return;
  for (const RooflineCell& c : rooflineCells(stats, nullptr, Ceilings{})) {
    TraceRooflineRow row;
    row.layer = c.layer;  // the window keeps the recorder's layer ids
    row.phase = c.phase;
    row.kind = c.kind;
    row.ops = c.ops;
    row.seconds = c.seconds;
    row.modelledSeconds = c.modelledSeconds;
    row.flops = c.flops;
    row.bytes = c.bytes;
    row.wideFlops = c.wideFlops;
    roofline_.push_back(row);
  }
}

void TraceWriter::commit(RoundSnapshot& snapshot, const ClusterReport* cluster, bool last) {
  if (!store_) return;
  try {
    TraceInterval in;
    const uint64_t dropped = snapshot.traceDropped;
    snapshot.traceDropped = 0;
    in.steps = std::move(snapshot.traceSteps);
    snapshot.traceSteps.clear();
    in.layerNames = snapshot.layerNames;
    const RunInfo& run = snapshot.run;
    const double now = unixNow();
    if (haveWindow_) {
      in.haveWindow = true;
      in.window = window_;
      in.windowEndUnix = now;
      in.windowStartUnix = now - window_.windowSeconds;
      in.roofline = std::move(roofline_);
      roofline_.clear();
      haveWindow_ = false;
    }
    if (commits_ == 0) in.meta = startMeta(config_, run);
    // The live sample rate (rank 0's /control may change it); "config" keeps the one at start.
    in.meta.emplace_back("sample_every", std::to_string(run.sampleEvery));
    in.meta.emplace_back("last_commit_unix", number(now));
    in.meta.emplace_back("steps_seen", std::to_string(run.stepsSeen));
    // Each layer's kernel shapes as last read (attnscope-replay reruns them).
    for (const auto& [layer, shape] : snapshot.attentionShapes)
      in.meta.emplace_back(attentionShapeKey(layer), shape);
    if (last)
      in.meta.emplace_back("stop_unix",
                           number(run.stopUnixSeconds > 0 ? run.stopUnixSeconds : now));
    if (cluster != nullptr) {
      if (cluster->rounds > 0) {
        in.haveRound = true;
        in.round = cluster->last;
        in.roundUnix = now;
      }
      in.stragglers = cluster->stragglers;
      in.hangs = cluster->hangs;
      in.cellOutliers = cluster->cellOutliers;
    }
    std::string error;
    const auto began = std::chrono::steady_clock::now();
    const bool ok = store_->commit(in, &error);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    ++commits_;
    std::lock_guard<std::mutex> lock(statsMutex_);
    stats_.stepsDropped += dropped;
    stats_.lastCommitSeconds = seconds;
    stats_.maxCommitSeconds = std::max(stats_.maxCommitSeconds, seconds);
    stats_.fileBytes = store_->fileBytes();
    stats_.stepsTrimmed = store_->stepsTrimmed();
    if (ok) {
      ++stats_.commits;
      stats_.stepsWritten += in.steps.size();
    } else {
      if (stats_.errors++ == 0) {
        ATTNSCOPE_LOG(kError, "trace store write failed, training goes on ("
                                  << error << "); later failures are counted, not logged");
      }
      stats_.lastError = error;
    }
    if (last) {
      ATTNSCOPE_LOG(kDebug, "trace: " << stats_.stepsWritten << " steps in " << store_->path()
                                      << " (" << stats_.fileBytes << " bytes, " << stats_.commits
                                      << " commits, longest " << stats_.maxCommitSeconds * 1e3
                                      << " ms, " << stats_.errors << " errors, "
                                      << stats_.stepsDropped << " dropped)");
      store_.reset();  // closes the file: the write-ahead log is folded into it
    }
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(statsMutex_);
    ++stats_.errors;
    stats_.lastError = e.what();
  }
}

}  // namespace detail
}  // namespace attnscope
