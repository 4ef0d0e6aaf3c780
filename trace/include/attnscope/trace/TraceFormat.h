#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/core/OpKind.h"
#include "attnscope/core/StatsTable.h"

namespace attnscope {

// One (layer, phase) of one sampled step: every call of that layer in that phase during the step,
// summed (time, bytes) or maxed (peak), with the same breakdown per op kind.
struct TraceCall {
  struct Kind {
    int64_t ns = 0;
    int64_t bytes = 0;
    int64_t peak = 0;
  };
  int32_t layer = -1;
  Phase phase = Phase::kForward;
  uint32_t calls = 0;
  int64_t ns = 0;
  int64_t bytes = 0;
  int64_t peak = 0;
  std::array<Kind, kNumOpKinds> kinds{};

  // Adds one call's record (same layer and phase).
  void add(const CallRecord& record);
};

// One sampled step as the trace store keeps it.
struct TraceStep {
  uint64_t step = 0;   // index of the step (0-based, counted from start)
  double endUnix = 0;  // wall clock at the step's end (seconds since 1970)
  int64_t stepNs = 0;  // wall time since the previous step ended
  std::vector<TraceCall> calls;
};

// A sampled step with its calls already encoded (encodeCalls), as the session hands it over.
struct EncodedStep {
  uint64_t step = 0;
  double endUnix = 0;
  int64_t stepNs = 0;
  std::string data;
};

// The compact per-step record of the trace store (docs/ANALYSIS.md, "step records"). Times are
// 16-bit log-scale codes (1024 codes per octave: a value from 1 to 2^63 comes back within 0.034%
// plus half a unit, below 1400 exactly); bytes and peaks are 12-bit codes (64 per octave: within
// 0.55% plus half a unit), two of them in 3 bytes. Per (layer, phase): a varint key
// (layer × 4 + phase), a varint call count, the call's ns, bytes and peak, a 16-bit mask of the
// op kinds present, then ns, bytes and peak per kind present: 9 + 5 × kinds bytes.
namespace traceformat {

constexpr int kFormatVersion = 1;

uint16_t encodeValue(int64_t v);  // 16-bit code; negative values are stored as 0
int64_t decodeValue(uint16_t code);
uint16_t encodeValue12(int64_t v);  // 12-bit code (0 to 4095)
int64_t decodeValue12(uint16_t code);

// Appends the encoded calls of one step to `out`.
void encodeCalls(const std::vector<TraceCall>& calls, std::string* out);
// Decodes what encodeCalls wrote. False (and `error` says where) on any malformed input: it
// never reads outside [data, data + size).
bool decodeCalls(const uint8_t* data, size_t size, std::vector<TraceCall>* out, std::string* error);

}  // namespace traceformat
}  // namespace attnscope
