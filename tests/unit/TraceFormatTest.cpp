// Unit tests of the trace store's step record: value codes, round trips, and malformed input.

#include "attnscope/trace/TraceFormat.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "TraceTestData.h"

namespace attnscope {
namespace {

using traceformat::decodeCalls;
using traceformat::decodeValue;
using traceformat::encodeCalls;
using traceformat::encodeValue;

// Within 0.034% (half a code: 2^(1/2048) - 1) of the value, plus half a unit for the rounding of
// the decoded value to an integer.
TEST(TraceFormatTest, ValueCodeKeepsRelativeErrorBelow0034PercentPlusHalfAUnit) {
  std::mt19937_64 rng(7);
  const double halfCode = std::exp2(1.0 / 2048) - 1;
  double worst = 0;
  for (int i = 0; i < 200000; ++i) {
    const int64_t v =
        static_cast<int64_t>(std::exp2(std::uniform_real_distribution<double>(0, 62)(rng)));
    if (v <= 0) continue;
    const double back = static_cast<double>(decodeValue(encodeValue(v)));
    EXPECT_LE(std::abs(back - v), halfCode * v * (1 + 1e-9) + 0.5) << v;
    if (v > 4000) worst = std::max(worst, std::abs(back - v) / v);
  }
  EXPECT_GT(worst, 0.0003) << "the bound should be nearly reached over 200k values";
}

TEST(TraceFormatTest, TwelveBitCodeKeepsRelativeErrorBelow055PercentPlusHalfAUnit) {
  std::mt19937_64 rng(11);
  const double halfCode = std::exp2(1.0 / 128) - 1;
  for (int i = 0; i < 100000; ++i) {
    const int64_t v =
        static_cast<int64_t>(std::exp2(std::uniform_real_distribution<double>(0, 62)(rng)));
    if (v <= 0) continue;
    const uint16_t code = traceformat::encodeValue12(v);
    ASSERT_LT(code, 4096);
    EXPECT_LE(std::abs(static_cast<double>(traceformat::decodeValue12(code)) - v),
              halfCode * v * (1 + 1e-9) + 0.5)
        << v;
  }
  EXPECT_EQ(traceformat::decodeValue12(traceformat::encodeValue12(0)), 0);
  EXPECT_EQ(traceformat::decodeValue12(traceformat::encodeValue12(int64_t{1} << 40)),
            int64_t{1} << 40);
}

TEST(TraceFormatTest, SmallValuesZeroAndNegativesAreExactOrZero) {
  // Exact while half a code (0.034%) is below half a unit.
  for (int64_t v = 1; v < 1400; ++v) EXPECT_EQ(decodeValue(encodeValue(v)), v) << v;
  EXPECT_EQ(encodeValue(0), 0);
  EXPECT_EQ(encodeValue(-5), 0);
  EXPECT_EQ(decodeValue(0), 0);
  EXPECT_GT(decodeValue(encodeValue(INT64_MAX)), int64_t{1} << 62);
}

TEST(TraceFormatTest, CallsRoundTrip) {
  const std::vector<TraceCall> in = testdata::stepCalls(4, 123456, 2, 3);
  std::string blob;
  encodeCalls(in, &blob);
  std::vector<TraceCall> out;
  std::string error;
  ASSERT_TRUE(decodeCalls(reinterpret_cast<const uint8_t*>(blob.data()), blob.size(), &out, &error))
      << error;
  ASSERT_EQ(out.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i].layer, in[i].layer);
    EXPECT_EQ(out[i].phase, in[i].phase);
    EXPECT_EQ(out[i].calls, in[i].calls);
    EXPECT_NEAR(out[i].ns, in[i].ns, in[i].ns * 4e-4);
    EXPECT_NEAR(out[i].bytes, in[i].bytes, in[i].bytes * 5.5e-3 + 0.5);
    EXPECT_NEAR(out[i].peak, in[i].peak, in[i].peak * 5.5e-3 + 0.5);
    for (int k = 0; k < kNumOpKinds; ++k)
      EXPECT_NEAR(out[i].kinds[k].ns, in[i].kinds[k].ns, in[i].kinds[k].ns * 4e-4);
  }
}

TEST(TraceFormatTest, SevenKindsTake44BytesPerLayerPhase) {
  // 1 key + 1 count + 2 ns + 3 bytes/peak + 2 mask + 7 kinds x 5 = 44 bytes, + 1 for the count.
  std::string blob;
  encodeCalls(testdata::stepCalls(4, 1000), &blob);
  EXPECT_EQ(blob.size(), 1u + 8u * 44u);
}

TEST(TraceFormatTest, CallRecordsAccumulatePerStep) {
  CallRecord r;
  r.layer = 3;
  r.ns = 100;
  r.bytes = 10;
  r.peak = 7;
  r.kinds[2].ns = 60;
  r.kinds[2].peak = 7;
  TraceCall c;
  c.add(r);
  r.peak = 5;
  c.add(r);
  EXPECT_EQ(c.calls, 2u);
  EXPECT_EQ(c.ns, 200);
  EXPECT_EQ(c.bytes, 20);
  EXPECT_EQ(c.peak, 7);
  EXPECT_EQ(c.kinds[2].ns, 120);
}

std::string decodeError(const std::string& blob) {
  std::vector<TraceCall> out;
  std::string error;
  if (decodeCalls(reinterpret_cast<const uint8_t*>(blob.data()), blob.size(), &out, &error))
    return "<decoded>";
  EXPECT_TRUE(out.empty());
  return error;
}

TEST(TraceFormatTest, MalformedRecordsAreRejectedWithWhereAndWhy) {
  std::string good;
  encodeCalls(testdata::stepCalls(1, 1000), &good);
  EXPECT_EQ(decodeError(""), "truncated call count at byte 0 of 0");
  ASSERT_EQ(good.size(), 89u);
  EXPECT_EQ(decodeError(good.substr(0, good.size() - 1)), "truncated op kind at byte 86 of 88");
  EXPECT_EQ(decodeError(good + "x"), "trailing bytes at byte 89 of 90");
  EXPECT_EQ(decodeError(std::string("\x7f", 1)), "call count 127 too large at byte 1 of 1");
  std::string badPhase = good;
  badPhase[1] = 3;  // layer 0, phase 3
  EXPECT_EQ(decodeError(badPhase), "phase 3 unknown at byte 3 of 89");
  std::string badMask = good;
  badMask[8] = 0;
  badMask[9] = 0x08;  // kind bit 11 (bytes 1 key, 2 count, 3-4 ns, 5-7 bytes/peak, 8-9 mask)
  EXPECT_EQ(decodeError(badMask), "op kind mask has unknown kinds at byte 10 of 89");
  std::string zeroCalls = good;
  zeroCalls[2] = 0;
  EXPECT_EQ(decodeError(zeroCalls), "call count of a layer out of range at byte 3 of 89");
}

}  // namespace
}  // namespace attnscope
