#include "attnscope/trace/TraceFormat.h"

#include <algorithm>
#include <cmath>

namespace attnscope {

void TraceCall::add(const CallRecord& record) {
  ++calls;
  ns += record.ns;
  bytes += record.bytes;
  peak = std::max(peak, record.peak);
  for (int k = 0; k < kNumOpKinds; ++k) {
    kinds[k].ns += record.kinds[k].ns;
    kinds[k].bytes += record.kinds[k].bytes;
    kinds[k].peak = std::max(kinds[k].peak, record.kinds[k].peak);
  }
}

namespace traceformat {
namespace {

constexpr double kCodesPerOctave = 1024.0;
constexpr double kCodesPerOctave12 = 64.0;
constexpr uint32_t kMaxLayerKey = (1u << 24);  // layers beyond 4M are malformed
constexpr size_t kMaxCallsPerStep = 1u << 20;

void putU16(std::string* out, uint16_t v) {
  out->push_back(static_cast<char>(v & 0xff));
  out->push_back(static_cast<char>(v >> 8));
}

// Two 12-bit codes in 3 bytes.
void putPair12(std::string* out, uint16_t a, uint16_t b) {
  out->push_back(static_cast<char>(a & 0xff));
  out->push_back(static_cast<char>(((a >> 8) & 0x0f) | ((b & 0x0f) << 4)));
  out->push_back(static_cast<char>(b >> 4));
}

void putVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

struct Cursor {
  const uint8_t* p;
  const uint8_t* end;
  bool u16(uint16_t* v) {
    if (end - p < 2) return false;
    *v = static_cast<uint16_t>(p[0] | (p[1] << 8));
    p += 2;
    return true;
  }
  bool pair12(uint16_t* a, uint16_t* b) {
    if (end - p < 3) return false;
    *a = static_cast<uint16_t>(p[0] | ((p[1] & 0x0f) << 8));
    *b = static_cast<uint16_t>((p[1] >> 4) | (p[2] << 4));
    p += 3;
    return true;
  }
  bool varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) return false;
      const uint8_t b = *p++;
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
};

}  // namespace

uint16_t encodeValue(int64_t v) {
  if (v <= 0) return 0;
  const double code = 1.0 + std::round(std::log2(static_cast<double>(v)) * kCodesPerOctave);
  return static_cast<uint16_t>(std::min(code, 65535.0));
}

int64_t decodeValue(uint16_t code) {
  if (code == 0) return 0;
  const double v = std::exp2((code - 1) / kCodesPerOctave);
  return v >= 9.2e18 ? INT64_MAX : static_cast<int64_t>(std::llround(v));
}

uint16_t encodeValue12(int64_t v) {
  if (v <= 0) return 0;
  const double code = 1.0 + std::round(std::log2(static_cast<double>(v)) * kCodesPerOctave12);
  return static_cast<uint16_t>(std::min(code, 4095.0));
}

int64_t decodeValue12(uint16_t code) {
  if (code == 0) return 0;
  const double v = std::exp2((std::min<uint16_t>(code, 4095) - 1) / kCodesPerOctave12);
  return v >= 9.2e18 ? INT64_MAX : static_cast<int64_t>(std::llround(v));
}

void encodeCalls(const std::vector<TraceCall>& calls, std::string* out) {
  putVarint(out, calls.size());
  for (const TraceCall& c : calls) {
    putVarint(out, static_cast<uint64_t>(c.layer) * 4 + static_cast<uint64_t>(c.phase));
    putVarint(out, c.calls);
    putU16(out, encodeValue(c.ns));
    putPair12(out, encodeValue12(c.bytes), encodeValue12(c.peak));
    uint16_t mask = 0;
    for (int k = 0; k < kNumOpKinds; ++k) {
      if (c.kinds[k].ns > 0 || c.kinds[k].bytes > 0 || c.kinds[k].peak > 0) mask |= 1u << k;
    }
    putU16(out, mask);
    for (int k = 0; k < kNumOpKinds; ++k) {
      if ((mask & (1u << k)) == 0) continue;
      putU16(out, encodeValue(c.kinds[k].ns));
      putPair12(out, encodeValue12(c.kinds[k].bytes), encodeValue12(c.kinds[k].peak));
    }
  }
}

bool decodeCalls(const uint8_t* data, size_t size, std::vector<TraceCall>* out,
                 std::string* error) {
  Cursor in{data, data + size};
  out->clear();
  const auto bad = [&](const std::string& what) {
    if (error != nullptr) {
      *error = what + " at byte " + std::to_string(in.p - data) + " of " + std::to_string(size);
    }
    out->clear();
    return false;
  };
  uint64_t n = 0;
  if (!in.varint(&n)) return bad("truncated call count");
  // Each call takes at least 9 bytes: a count beyond that is malformed, whatever it claims.
  if (n > kMaxCallsPerStep || n > size / 9)
    return bad("call count " + std::to_string(n) + " too large");
  out->reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    TraceCall c;
    uint64_t key = 0, calls = 0;
    if (!in.varint(&key) || !in.varint(&calls)) return bad("truncated call header");
    if (key >= static_cast<uint64_t>(kMaxLayerKey) * 4) return bad("layer id out of range");
    if ((key & 3) >= static_cast<uint64_t>(kNumPhases))
      return bad("phase " + std::to_string(key & 3) + " unknown");
    if (calls == 0 || calls > 0xffffffffull) return bad("call count of a layer out of range");
    c.layer = static_cast<int32_t>(key >> 2);
    c.phase = static_cast<Phase>(key & 3);
    c.calls = static_cast<uint32_t>(calls);
    uint16_t ns = 0, bytes = 0, peak = 0, mask = 0;
    if (!in.u16(&ns) || !in.pair12(&bytes, &peak) || !in.u16(&mask)) return bad("truncated call");
    if (mask >> kNumOpKinds) return bad("op kind mask has unknown kinds");
    c.ns = decodeValue(ns);
    c.bytes = decodeValue12(bytes);
    c.peak = decodeValue12(peak);
    for (int k = 0; k < kNumOpKinds; ++k) {
      if ((mask & (1u << k)) == 0) continue;
      if (!in.u16(&ns) || !in.pair12(&bytes, &peak)) return bad("truncated op kind");
      c.kinds[k] = {decodeValue(ns), decodeValue12(bytes), decodeValue12(peak)};
    }
    out->push_back(c);
  }
  if (in.p != in.end) return bad("trailing bytes");
  return true;
}

}  // namespace traceformat
}  // namespace attnscope
