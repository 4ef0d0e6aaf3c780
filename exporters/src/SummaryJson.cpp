#include "attnscope/exporters/SummaryJson.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "attnscope/core/JsonText.h"
#include "attnscope/core/RooflineCells.h"

namespace attnscope {
namespace {

// format: "%.9g" for measurements; "%.6f" for unix timestamps (%.9g would round them to 10 s).
void writeNumber(std::ostream& out, double v, const char* format = "%.9g") {
  if (!std::isfinite(v)) {
    out << "null";
    return;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  out << buf;
}

// count, ops, total/mean/min/p50/p90/p99/max seconds, bytes_allocated, peak_bytes
void writeCell(std::ostream& out, const CellStats& cell, const char* indent) {
  const LogHistogram& h = cell.seconds;
  out << "{\n";
  out << indent << "  \"count\": " << h.count() << ",\n";
  out << indent << "  \"ops\": " << cell.ops << ",\n";
  const std::pair<const char*, double> fields[] = {
      {"total_seconds", h.sum()},       {"mean_seconds", h.mean()},
      {"min_seconds", h.min()},         {"p50_seconds", h.quantile(0.5)},
      {"p90_seconds", h.quantile(0.9)}, {"p99_seconds", h.quantile(0.99)},
      {"max_seconds", h.max()}};
  for (const auto& [name, value] : fields) {
    out << indent << "  \"" << name << "\": ";
    writeNumber(out, value);
    out << ",\n";
  }
  out << indent << "  \"bytes_allocated\": " << cell.bytes << ",\n";
  out << indent << "  \"peak_bytes\": " << cell.peak << "\n";
  out << indent << "}";
}

// "layers": [...] at indentation `in` (the key's own indentation).
void writeLayers(std::ostream& out, const StatsTable& stats, const std::string& in) {
  out << in << "\"layers\": [";
  bool firstLayer = true;
  for (const LayerStats& layer : stats.layers()) {
    out << (firstLayer ? "\n" : ",\n") << in << "  {\n" << in << "    \"name\": ";
    firstLayer = false;
    out << jsonString(layer.name);
    out << ",\n" << in << "    \"phases\": {";
    bool firstPhase = true;
    for (int p = 0; p < kNumPhases; ++p) {
      if (!layer.phases[p]) continue;
      const PhaseStats& phase = *layer.phases[p];
      out << (firstPhase ? "\n" : ",\n") << in << "      \"" << phaseName(static_cast<Phase>(p))
          << "\": {\n";
      firstPhase = false;
      out << in << "        \"calls\": " << phase.call.seconds.count() << ",\n";
      out << in << "        \"call\": ";
      writeCell(out, phase.call, (in + "        ").c_str());
      out << ",\n" << in << "        \"op_kinds\": {";
      bool firstKind = true;
      for (int k = 0; k < kNumOpKinds; ++k) {
        if (!phase.kinds[k]) continue;
        out << (firstKind ? "\n" : ",\n") << in << "          \""
            << opKindName(static_cast<OpKind>(k)) << "\": ";
        firstKind = false;
        writeCell(out, *phase.kinds[k], (in + "          ").c_str());
      }
      out << (firstKind ? "}" : "\n" + in + "        }");
      // The fused-attention kernels' backends, when any ran (flash, memory_efficient, ...).
      bool firstBackend = true;
      for (int b = 0; b < kNumAttentionBackends; ++b) {
        if (phase.backends[b] == 0) continue;
        out << (firstBackend ? ",\n" + in + "        \"attention_backends\": {" : ", ") << "\""
            << attentionBackendName(static_cast<AttentionBackend>(b))
            << "\": " << phase.backends[b];
        firstBackend = false;
      }
      if (!firstBackend) out << "}";
      out << "\n" << in << "      }";
    }
    out << (firstPhase ? "}" : "\n" + in + "    }") << "\n" << in << "  }";
  }
  out << (firstLayer ? "]" : "\n" + in + "]");
}

// A straggler or hang episode; a cell outlier's (cell) calls its score the factor and its share
// that of the rank's attention time.
void writeFinding(std::ostream& out, const DetectorEpisode& f, bool cell = false) {
  out << "{\"rank\": " << f.rank << ", \"first_round\": " << f.firstRound
      << ", \"last_round\": " << f.lastRound << (cell ? ", \"max_factor\": " : ", \"max_score\": ");
  writeNumber(out, f.maxScore);
  out << ", \"layer\": ";
  out << jsonString(f.layer);
  out << ", \"phase\": \"" << phaseName(f.phase) << "\", \"op_kind\": \"" << opKindName(f.kind)
      << (cell ? "\", \"share_of_layer_phase\": " : "\", \"share_of_excess\": ");
  writeNumber(out, f.share);
  out << ", \"description\": ";
  out << jsonString(f.description);
  out << "}";
}

// The cross-rank section rank 0 writes.
void writeCluster(std::ostream& out, const ClusterReport& c) {
  out << "  \"cluster\": {\n    \"aggregation\": ";
  out << jsonString(c.aggregation);
  out << ",\n    \"degraded\": " << (c.degraded ? "true" : "false");
  out << ",\n    \"rounds\": " << c.rounds << ",\n    \"round_errors\": " << c.roundErrors;
  out << ",\n    \"last_error\": ";
  out << jsonString(c.lastError);
  out << ",\n    \"layers_agree\": " << (c.layersAgree ? "true" : "false");
  out << ",\n    \"round_seconds\": {\"last\": ";
  writeNumber(out, c.lastRoundSeconds);
  out << ", \"max\": ";
  writeNumber(out, c.maxRoundSeconds);
  out << ", \"mean\": ";
  writeNumber(out, c.collectiveRounds ? c.sumRoundSeconds / c.collectiveRounds : 0.0);
  out << ", \"rounds\": " << c.collectiveRounds << "}";
  out << ",\n    \"round_bytes_per_rank\": " << c.lastRoundBytes;
  out << ",\n    \"expected_ranks\": " << c.last.expectedRanks
      << ",\n    \"present_ranks\": " << c.last.presentRanks;
  out << ",\n    \"median_attention_seconds_per_step\": ";
  writeNumber(out, c.last.medianAttentionSeconds);
  out << ",\n    \"ranks\": [";
  for (size_t i = 0; i < c.last.ranks.size(); ++i) {
    const RankStatus& r = c.last.ranks[i];
    out << (i ? ",\n" : "\n") << "      {\"rank\": " << r.rank
        << ", \"present\": " << (r.present ? "true" : "false")
        << ", \"missing\": " << (r.missing ? "true" : "false")
        << ", \"straggler\": " << (r.straggler ? "true" : "false")
        << ", \"hung\": " << (r.hung ? "true" : "false") << ", \"score\": ";
    writeNumber(out, r.score);
    out << ", \"last_step\": " << r.lastStep << ", \"attention_seconds_per_step\": ";
    writeNumber(out, r.window.attentionSeconds());
    out << ", \"step_seconds\": ";
    writeNumber(out, r.window.stepSeconds);
    out << ", \"peak_bytes\": " << r.window.peakBytes << ", \"collective_wait_seconds_per_step\": ";
    writeNumber(out, r.window.collectiveWaitSeconds);
    out << "}";
  }
  out << (c.last.ranks.empty() ? "]" : "\n    ]");
  out << ",\n    \"stragglers\": [";
  for (size_t i = 0; i < c.stragglers.size(); ++i) {
    out << (i ? ",\n      " : "\n      ");
    writeFinding(out, c.stragglers[i]);
  }
  out << (c.stragglers.empty() ? "]" : "\n    ]");
  out << ",\n    \"hangs\": [";
  for (size_t i = 0; i < c.hangs.size(); ++i) {
    out << (i ? ",\n      " : "\n      ");
    writeFinding(out, c.hangs[i]);
  }
  out << (c.hangs.empty() ? "]" : "\n    ]");
  out << ",\n    \"cell_outliers\": [";
  for (size_t i = 0; i < c.cellOutliers.size(); ++i) {
    out << (i ? ",\n      " : "\n      ");
    writeFinding(out, c.cellOutliers[i], /*cell=*/true);
  }
  out << (c.cellOutliers.empty() ? "]" : "\n    ]") << ",\n";
  writeLayers(out, c.stats, "    ");
  out << "\n  }";
}

// "roofline": the ceilings, the machine, the shape capture's counts and every op-kind cell on the
// roofline (docs/ROOFLINE.md).
void writeRoofline(std::ostream& out, const RunInfo& run, const StatsTable& stats) {
  const Ceilings& c = run.ceilings;
  const MachineInfo& m = run.machine;
  out << "  \"roofline\": {\n    \"ceilings\": {\"peak_flops_per_second\": ";
  writeNumber(out, c.peakFlopsPerSecond);
  out << ", \"peak_bytes_per_second\": ";
  writeNumber(out, c.peakBytesPerSecond);
  out << ", \"ridge_flops_per_byte\": ";
  writeNumber(out, c.ridge());
  out << ", \"source\": ";
  out << jsonString(c.source);
  out << ", \"detail\": ";
  out << jsonString(c.detail);
  out << "},\n    \"machine\": {\"cpu_model\": ";
  out << jsonString(m.cpuModel);
  out << ", \"cpu_cores\": " << m.cpuCores << ", \"threads\": " << m.threads << ", \"blas\": ";
  out << jsonString(m.blas);
  out << ", \"gpu_name\": ";
  out << jsonString(m.gpuName);
  out << ", \"gpu_driver\": ";
  out << jsonString(m.gpuDriver);
  out << ", \"gpu_memory_bytes\": " << m.gpuMemoryBytes << "},\n";
  out << "    \"shape_reads\": " << run.shapeReads
      << ",\n    \"shape_changes\": " << run.shapeChanges << ",\n    \"cells\": [";
  bool first = true;
  for (const RooflineCell& cell : rooflineCells(stats, nullptr, c)) {
    out << (first ? "\n" : ",\n") << "      {\"layer\": ";
    first = false;
    out << jsonString(stats.layers()[cell.layer].name);
    out << ", \"phase\": \"" << phaseName(cell.phase) << "\", \"op_kind\": \""
        << opKindName(cell.kind) << "\", \"ops\": " << cell.ops;
    const std::pair<const char*, double> fields[] = {
        {"seconds", cell.seconds},
        {"modelled_seconds", cell.modelledSeconds},
        {"flops", cell.flops},
        {"bytes", cell.bytes},
        {"wide_flops", cell.wideFlops},
        {"intensity", cell.point.intensity},
        {"flops_per_second", cell.point.flopsPerSecond},
        {"bytes_per_second", cell.point.bytesPerSecond},
        {"fraction", cell.point.fraction}};
    for (const auto& [name, value] : fields) {
      out << ", \"" << name << "\": ";
      writeNumber(out, value);
    }
    out << ", \"bound\": \"" << boundName(cell.point.bound) << "\"}";
  }
  out << (first ? "]" : "\n    ]") << "\n  }";
}

// How the layers were found (docs/DISCOVERY.md).
void writeDiscovery(std::ostream& out, const RunInfo& run) {
  out << "  \"discovery\": {\n    \"layers_seen\": " << run.layersSeen
      << ",\n    \"nothing_found\": " << (run.nothingFound ? "true" : "false")
      << ",\n    \"compiles\": " << run.compiles << ",\n    \"compile_seconds\": ";
  writeNumber(out, run.compileSeconds, "%.6f");
  out << ",\n    \"backward\": ";
  out << jsonString(run.backwardObservation);
  out << ",\n    \"layers\": [";
  bool first = true;
  for (const LayerOrigin& o : run.layerOrigins) {
    out << (first ? "\n" : ",\n") << "      {\"name\": ";
    out << jsonString(o.name);
    out << ", \"rule\": ";
    out << jsonString(o.rule);
    out << ", \"source\": ";
    out << jsonString(o.source);
    out << "}";
    first = false;
  }
  out << (first ? "]" : "\n    ]") << ",\n    \"notes\": [";
  first = true;
  for (const std::string& note : run.discoveryNotes) {
    out << (first ? "\n      " : ",\n      ");
    out << jsonString(note);
    first = false;
  }
  out << (first ? "]" : "\n    ]") << "\n  }";
}

}  // namespace

std::string SummaryJson::render(const RunInfo& run, const StatsTable& stats,
                                const ClusterReport* cluster) {
  std::ostringstream out;
  out << "{\n  \"schema\": \"attnscope.summary/1\",\n  \"run\": {\n";
  out << "    \"rank\": " << run.rank << ",\n";
  out << "    \"world_size\": " << run.worldSize << ",\n";
  out << "    \"local_rank\": " << run.localRank << ",\n";
  out << "    \"node\": ";
  out << jsonString(run.node);
  out << ",\n    \"attnscope_version\": ";
  out << jsonString(run.attnscopeVersion);
  out << ",\n    \"torch_version\": ";
  out << jsonString(run.torchVersion);
  out << ",\n    \"sample_every\": " << run.sampleEvery << ",\n";
  out << "    \"steps_seen\": " << run.stepsSeen << ",\n";
  out << "    \"steps_sampled\": " << run.stepsSampled << ",\n";
  out << "    \"step_source\": \"" << (run.explicitSteps ? "step_calls" : "backward_passes")
      << "\",\n";
  out << "    \"start_unix_seconds\": ";
  writeNumber(out, run.startUnixSeconds, "%.6f");
  out << ",\n    \"stop_unix_seconds\": ";
  writeNumber(out, run.stopUnixSeconds, "%.6f");
  out << ",\n    \"memory_reports\": " << run.memoryReports << ",\n";
  out << "    \"dropped_calls\": " << run.droppedCalls << ",\n";
  out << "    \"overhead_seconds\": ";
  writeNumber(out, run.overheadSeconds, "%.6f");
  out << ",\n    \"gpu_timing\": {\"source\": ";
  out << jsonString(run.gpuTiming);
  out << ", \"requested\": ";
  out << jsonString(run.gpuTimingRequested);
  out << ", \"fallback_reason\": ";
  out << jsonString(run.gpuTimingFallback);
  out << "}\n  },\n";
  writeLayers(out, stats, "  ");
  out << ",\n";
  writeDiscovery(out, run);
  if (run.roofline) {
    out << ",\n";
    writeRoofline(out, run, stats);
  }
  if (cluster != nullptr) {
    out << ",\n";
    writeCluster(out, *cluster);
  }
  out << "\n}\n";
  return out.str();
}
bool SummaryJson::write(const std::string& path, const RunInfo& run, const StatsTable& stats,
                        const ClusterReport* cluster, std::string* error) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) {
      if (error) *error = "cannot open " + tmp + " for writing";
      return false;
    }
    f << render(run, stats, cluster);
    f.flush();
    if (!f) {
      if (error) *error = "cannot write " + tmp + " (disk full?)";
      std::remove(tmp.c_str());
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    if (error) *error = "cannot rename " + tmp + " to " + path;
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace attnscope
