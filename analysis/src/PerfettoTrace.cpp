#include "attnscope/analysis/PerfettoTrace.h"

#include <map>
#include <sstream>

#include "attnscope/analysis/JsonReport.h"

namespace attnscope {
namespace analysis {
namespace {

using text::jsonNumber;
using text::jsonString;

std::string backendOf(const RankTrace& t) {
  // The config JSON holds "aggregation": "<name>".
  const auto it = t.meta.find("config");
  if (it == t.meta.end()) return "";
  const std::string key = "\"aggregation\": \"";
  const size_t at = it->second.find(key);
  if (at == std::string::npos) return "";
  const size_t end = it->second.find('"', at + key.size());
  return end == std::string::npos ? "" : it->second.substr(at + key.size(), end - at - key.size());
}

// The events of one rank, each line prefixed with ",\n" except the very first of the file.
void rankEvents(std::ostringstream& o, const RankTrace& t, const Analysis& a, bool* first) {
  const auto sep = [&] {
    o << (*first ? "\n    " : ",\n    ");
    *first = false;
  };
  const auto us = [&](double unix) { return jsonNumber((unix - a.startUnix) * 1e6, "%.3f"); };
  const int pid = t.rank;
  sep();
  o << "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " << pid << ", \"args\": {\"name\": "
    << jsonString("rank " + std::to_string(t.rank) + (t.node.empty() ? "" : " (" + t.node + ")"))
    << "}}";
  sep();
  o << "{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": " << pid
    << ", \"args\": {\"sort_index\": " << t.rank << "}}";
  sep();
  o << "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " << pid
    << ", \"tid\": 1, \"args\": {\"name\": \"sampled steps\"}}";
  sep();
  o << "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " << pid
    << ", \"tid\": 2, \"args\": {\"name\": \"stragglers\"}}";
  for (const TraceStep& s : t.steps) {
    double fwd = 0, bwd = 0;
    std::map<std::string, double> fwdByLayer, bwdByLayer;
    for (const TraceCall& c : s.calls) {
      const double ms = c.ns * 1e-6;
      if (c.phase == Phase::kBackward) {
        bwd += ms;
        bwdByLayer[t.layerName(c.layer)] += ms;
      } else {
        fwd += ms;
        fwdByLayer[t.layerName(c.layer)] += ms;
      }
    }
    const double start = s.endUnix - s.stepNs * 1e-9;
    sep();
    o << "{\"ph\": \"X\", \"name\": \"step " << s.step << "\", \"cat\": \"step\", \"pid\": " << pid
      << ", \"tid\": 1, \"ts\": " << us(start)
      << ", \"dur\": " << jsonNumber(s.stepNs * 1e-3, "%.3f")
      << ", \"args\": {\"attention_forward_ms\": " << jsonNumber(fwd, "%.4f")
      << ", \"attention_backward_ms\": " << jsonNumber(bwd, "%.4f") << "}}";
    for (const auto* series : {&fwdByLayer, &bwdByLayer}) {
      sep();
      o << "{\"ph\": \"C\", \"name\": \""
        << (series == &fwdByLayer ? "attention forward ms" : "attention backward ms")
        << "\", \"pid\": " << pid << ", \"ts\": " << us(start) << ", \"args\": {";
      bool firstArg = true;
      for (const auto& [layer, ms] : *series) {
        o << (firstArg ? "" : ", ") << jsonString(layer) << ": " << jsonNumber(ms, "%.4f");
        firstArg = false;
      }
      o << "}}";
    }
  }
  for (const StragglerEpisode& e : a.stragglers) {
    if (e.rank != t.rank) continue;
    sep();
    o << "{\"ph\": \"X\", \"name\": " << jsonString("straggler: " + e.layer)
      << ", \"cat\": \"straggler\", \"pid\": " << pid << ", \"tid\": 2, \"ts\": " << us(e.startUnix)
      << ", \"dur\": " << jsonNumber((e.endUnix - e.startUnix) * 1e6, "%.3f")
      << ", \"args\": {\"max_score\": " << jsonNumber(e.maxScore, "%.3f")
      << ", \"layer\": " << jsonString(e.layer) << ", \"phase\": \"" << phaseName(e.phase)
      << "\", \"op_kind\": \"" << opKindName(e.kind) << "\", \"first_step\": " << e.firstStep
      << ", \"last_step\": " << e.lastStep << "}}";
  }
}

}  // namespace

std::string PerfettoTrace::renderRank(const RankTrace& t, const Analysis& a) {
  std::ostringstream o;
  o << "{\n  \"schemaVersion\": 1,\n  \"distributedInfo\": {\"rank\": " << t.rank
    << ", \"world_size\": " << a.worldSize << ", \"backend\": " << jsonString(backendOf(t))
    << "},\n"
    << "  \"displayTimeUnit\": \"ms\",\n  \"traceEvents\": [";
  bool first = true;
  rankEvents(o, t, a, &first);
  o << "\n  ]\n}\n";
  return o.str();
}

std::string PerfettoTrace::renderAll(const std::vector<RankTrace>& traces, const Analysis& a) {
  std::ostringstream o;
  o << "{\n  \"schemaVersion\": 1,\n  \"distributedInfo\": {\"world_size\": " << a.worldSize
    << ", \"ranks\": [";
  for (size_t i = 0; i < traces.size(); ++i) o << (i ? ", " : "") << traces[i].rank;
  o << "], \"backend\": " << jsonString(traces.empty() ? "" : backendOf(traces.front())) << "},\n"
    << "  \"displayTimeUnit\": \"ms\",\n  \"traceEvents\": [";
  bool first = true;
  for (const RankTrace& t : traces) rankEvents(o, t, a, &first);
  o << "\n  ]\n}\n";
  return o.str();
}

}  // namespace analysis
}  // namespace attnscope
