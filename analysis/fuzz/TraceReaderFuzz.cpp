// libFuzzer target for the trace reader: the first byte chooses what the rest is fed to, a step
// record (traceformat::decodeCalls) or a whole rank file image (readRankTraceImage, through
// SQLite). Built and run by tests/integration/fuzz_trace_reader.sh with clang.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/analysis/TraceReader.h"
#include "attnscope/trace/TraceFormat.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string error;
  if (data[0] & 1) {
    std::vector<attnscope::TraceCall> calls;
    if (attnscope::traceformat::decodeCalls(data + 1, size - 1, &calls, &error)) {
      // A record that decodes re-encodes to the same length.
      std::string again;
      attnscope::traceformat::encodeCalls(calls, &again);
      if (again.size() > size - 1) __builtin_trap();
    }
    return 0;
  }
  attnscope::analysis::RankTrace trace;
  if (attnscope::analysis::readRankTraceImage(data + 1, size - 1, "fuzz", &trace, &error)) {
    for (const attnscope::TraceStep& s : trace.steps) {
      for (const attnscope::TraceCall& c : s.calls) (void)trace.layerName(c.layer);
    }
  }
  return 0;
}
