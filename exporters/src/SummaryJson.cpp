#include "attnscope/exporters/SummaryJson.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace attnscope {
namespace {

void writeString(std::ostream& out, const std::string& s) {
  out << '"';
  for (const char c : s) {
    switch (c) {
      case '"': out << "\\\""; break;
      case '\\': out << "\\\\"; break;
      case '\n': out << "\\n"; break;
      case '\t': out << "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out << buf;
        } else {
          out << c;
        }
    }
  }
  out << '"';
}

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

}  // namespace

std::string SummaryJson::render(const RunInfo& run, const StatsTable& stats) {
  std::ostringstream out;
  out << "{\n  \"schema\": \"attnscope.summary/1\",\n  \"run\": {\n";
  out << "    \"rank\": " << run.rank << ",\n";
  out << "    \"world_size\": " << run.worldSize << ",\n";
  out << "    \"local_rank\": " << run.localRank << ",\n";
  out << "    \"node\": ";
  writeString(out, run.node);
  out << ",\n    \"attnscope_version\": ";
  writeString(out, run.attnscopeVersion);
  out << ",\n    \"torch_version\": ";
  writeString(out, run.torchVersion);
  out << ",\n    \"sample_every\": " << run.sampleEvery << ",\n";
  out << "    \"steps_seen\": " << run.stepsSeen << ",\n";
  out << "    \"steps_sampled\": " << run.stepsSampled << ",\n";
  out << "    \"step_source\": \"" << (run.explicitSteps ? "step_calls" : "backward_passes") << "\",\n";
  out << "    \"start_unix_seconds\": ";
  writeNumber(out, run.startUnixSeconds, "%.6f");
  out << ",\n    \"stop_unix_seconds\": ";
  writeNumber(out, run.stopUnixSeconds, "%.6f");
  out << ",\n    \"memory_reports\": " << run.memoryReports << ",\n";
  out << "    \"dropped_calls\": " << run.droppedCalls << "\n  },\n";
  out << "  \"layers\": [";
  bool firstLayer = true;
  for (const LayerStats& layer : stats.layers()) {
    out << (firstLayer ? "\n" : ",\n") << "    {\n      \"name\": ";
    firstLayer = false;
    writeString(out, layer.name);
    out << ",\n      \"phases\": {";
    bool firstPhase = true;
    for (int p = 0; p < kNumPhases; ++p) {
      if (!layer.phases[p]) continue;
      const PhaseStats& phase = *layer.phases[p];
      out << (firstPhase ? "\n" : ",\n") << "        \"" << phaseName(static_cast<Phase>(p)) << "\": {\n";
      firstPhase = false;
      out << "          \"calls\": " << phase.call.seconds.count() << ",\n";
      out << "          \"call\": ";
      writeCell(out, phase.call, "          ");
      out << ",\n          \"op_kinds\": {";
      bool firstKind = true;
      for (int k = 0; k < kNumOpKinds; ++k) {
        if (!phase.kinds[k]) continue;
        out << (firstKind ? "\n" : ",\n") << "            \"" << opKindName(static_cast<OpKind>(k)) << "\": ";
        firstKind = false;
        writeCell(out, *phase.kinds[k], "            ");
      }
      out << (firstKind ? "}" : "\n          }") << "\n        }";
    }
    out << (firstPhase ? "}" : "\n      }") << "\n    }";
  }
  out << (firstLayer ? "]" : "\n  ]") << "\n}\n";
  return out.str();
}

bool SummaryJson::write(const std::string& path, const RunInfo& run, const StatsTable& stats,
                        std::string* error) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) {
      if (error) *error = "cannot open " + tmp + " for writing";
      return false;
    }
    f << render(run, stats);
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
