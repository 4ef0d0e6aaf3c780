// Unit tests of the exporters: SummaryJson::render parsed back by a strict JSON parser (below),
// string escaping, atomic write(), and the SummaryTable text.

#include "attnscope/exporters/SummaryJson.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "attnscope/exporters/SummaryTable.h"

namespace attnscope {
namespace {

// ---------------------------------------------------------------------------------------------
// A small strict JSON parser (RFC 8259): no trailing commas, no raw control characters in
// strings, no leading zeros, nothing after the value. Duplicate object keys are rejected too:
// the summary never has any, so one would be a rendering bug.

struct Json {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0.0;
  std::string text;  // string value, or the number as written
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;  // in document order

  bool has(const std::string& key) const {
    for (const auto& m : members) {
      if (m.first == key) return true;
    }
    return false;
  }
  // Missing keys and indices throw, so a wrong path fails the test with a message.
  const Json& operator[](const std::string& key) const {
    if (type != Type::kObject) throw std::runtime_error("not an object looking up " + key);
    for (const auto& m : members) {
      if (m.first == key) return m.second;
    }
    throw std::runtime_error("no member " + key);
  }
  const Json& operator[](size_t i) const {
    if (type != Type::kArray) throw std::runtime_error("not an array");
    if (i >= items.size()) throw std::runtime_error("index out of range");
    return items[i];
  }
  size_t size() const { return type == Type::kArray ? items.size() : members.size(); }
};

class JsonParser {
 public:
  explicit JsonParser(const std::string& s) : s_(s) {}

  // The parsed document; throws std::runtime_error naming the offset of the first error.
  Json parse() {
    skipSpace();
    Json v = value(0);
    skipSpace();
    if (pos_ != s_.size()) fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("invalid JSON at offset " + std::to_string(pos_) + ": " + what);
  }
  bool atEnd() const { return pos_ >= s_.size(); }
  char peek() const { return atEnd() ? '\0' : s_[pos_]; }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  void skipSpace() {
    while (!atEnd() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  void literal(const char* word) {
    for (const char* c = word; *c; ++c) expect(*c);
  }

  Json value(int depth) {
    if (depth > 64) fail("nested too deeply");
    Json v;
    switch (peek()) {
      case '{':
        object(v, depth);
        break;
      case '[':
        array(v, depth);
        break;
      case '"':
        v.type = Json::Type::kString;
        v.text = string();
        break;
      case 't':
        literal("true");
        v.type = Json::Type::kBool;
        v.boolean = true;
        break;
      case 'f':
        literal("false");
        v.type = Json::Type::kBool;
        break;
      case 'n':
        literal("null");
        break;
      default:
        number(v);
    }
    return v;
  }

  void object(Json& v, int depth) {
    v.type = Json::Type::kObject;
    expect('{');
    skipSpace();
    if (peek() == '}') {
      ++pos_;
      return;
    }
    while (true) {
      skipSpace();
      if (peek() != '"') fail("expected a key");
      std::string key = string();
      if (v.has(key)) fail("duplicate key " + key);
      skipSpace();
      expect(':');
      skipSpace();
      v.members.emplace_back(std::move(key), value(depth + 1));
      skipSpace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect('}');
      return;
    }
  }

  void array(Json& v, int depth) {
    v.type = Json::Type::kArray;
    expect('[');
    skipSpace();
    if (peek() == ']') {
      ++pos_;
      return;
    }
    while (true) {
      skipSpace();
      v.items.push_back(value(depth + 1));
      skipSpace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(']');
      return;
    }
  }

  static void appendUtf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  uint32_t hex4() {
    uint32_t cp = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = peek();
      int d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        d = c - 'A' + 10;
      } else {
        fail("bad \\u escape");
      }
      cp = cp * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    return cp;
  }

  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (atEnd()) fail("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("raw control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      const char e = peek();
      ++pos_;
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            expect('\\');
            expect('u');
            const uint32_t low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("bad surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          appendUtf8(out, cp);
          break;
        }
        default:
          --pos_;
          fail("bad escape");
      }
    }
  }

  void number(Json& v) {
    const size_t start = pos_;
    const auto digits = [&] {
      const size_t from = pos_;
      while (!atEnd() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      if (pos_ == from) fail("expected a digit");
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else {
      digits();
    }
    if (peek() == '.') {
      ++pos_;
      digits();
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      digits();
    }
    v.type = Json::Type::kNumber;
    v.text = s_.substr(start, pos_ - start);
    v.number = std::strtod(v.text.c_str(), nullptr);
  }

  const std::string& s_;
  size_t pos_ = 0;
};

Json parseJson(const std::string& text) { return JsonParser(text).parse(); }

// Parses or fails the test with the parser's message and the document.
Json parseOrFail(const std::string& text) {
  try {
    return parseJson(text);
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what() << "\n" << text;
    return Json();
  }
}

bool isValidJson(const std::string& text) {
  try {
    parseJson(text);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

TEST(JsonParserTest, AcceptsValidAndRejectsInvalidDocuments) {
  EXPECT_TRUE(isValidJson(R"({"a": [1, -2.5e3, 0.25, true, false, null, "x\n\u00e9"], "b": {}})"));
  EXPECT_TRUE(isValidJson("[]"));
  EXPECT_FALSE(isValidJson(R"({"a": 1,})"));  // trailing comma
  EXPECT_FALSE(isValidJson(R"([1, 2,])"));
  EXPECT_FALSE(isValidJson("{\"a\": \"line\nbreak\"}"));  // raw newline in a string
  EXPECT_FALSE(isValidJson(R"({"a": "\x"})"));            // bad escape
  EXPECT_FALSE(isValidJson(R"({"a": 01})"));              // leading zero
  EXPECT_FALSE(isValidJson(R"({"a": nan})"));
  EXPECT_FALSE(isValidJson(R"({"a": 1} x)"));        // trailing characters
  EXPECT_FALSE(isValidJson(R"({"a": 1, "a": 2})"));  // duplicate key
  EXPECT_FALSE(isValidJson(R"({"a" 1})"));
  EXPECT_FALSE(isValidJson(R"("unterminated)"));
  EXPECT_FALSE(isValidJson(""));
  EXPECT_EQ(parseJson(R"("a\"b\\c\u00e9")").text, "a\"b\\c\xc3\xa9");
}

// ---------------------------------------------------------------------------------------------
// Fixtures

RunInfo sampleRun() {
  RunInfo run;
  run.rank = 3;
  run.worldSize = 8;
  run.localRank = 1;
  run.node = "node-07";
  run.attnscopeVersion = "0.1.0";
  run.torchVersion = "1.13.1";
  run.sampleEvery = 4;
  run.stepsSeen = 100;
  run.stepsSampled = 25;
  run.explicitSteps = true;
  run.startUnixSeconds = 1733140123.25;
  run.stopUnixSeconds = 1733140127.75;  // 4.5 s later
  run.memoryReports = 12345;
  run.droppedCalls = 2;
  return run;
}

CallRecord record(int32_t layer, Phase phase, int64_t ns) {
  CallRecord r;
  r.layer = layer;
  r.phase = phase;
  r.ns = ns;
  return r;
}

// Layer "enc.0.attn": 2 forward calls with qkv (3 ops each) and softmax (1 op in one call),
// 1 backward call. Layer "enc.1.attn": 1 forward call.
StatsTable sampleStats() {
  StatsTable stats;
  const int32_t l0 = stats.layerId("enc.0.attn");
  const int32_t l1 = stats.layerId("enc.1.attn");

  CallRecord a = record(l0, Phase::kForward, 2'000'000);
  a.bytes = 4096;
  a.peak = 3000;
  a.kinds[static_cast<int>(OpKind::kQkvProjection)] = {500'000, 3, 1024, 1000};
  a.kinds[static_cast<int>(OpKind::kSoftmax)] = {100'000, 1, 2048, 2048};
  stats.add(a);

  CallRecord b = record(l0, Phase::kForward, 4'000'000);
  b.bytes = 1000;
  b.peak = 5000;
  b.kinds[static_cast<int>(OpKind::kQkvProjection)] = {700'000, 3, 512, 1500};
  stats.add(b);

  CallRecord c = record(l0, Phase::kBackward, 6'000'000);
  c.kinds[static_cast<int>(OpKind::kScoreMatmul)] = {1'000'000, 2, 0, 0};
  stats.add(c);

  CallRecord d = record(l1, Phase::kForward, 1'000'000);
  d.kinds[static_cast<int>(OpKind::kFusedAttention)] = {900'000, 1, 64, 64};
  stats.add(d);
  return stats;
}

// A fresh, empty directory under testing::TempDir(), removed (with its direct files) afterwards.
class TempDirectory {
 public:
  TempDirectory() {
    std::string pattern = testing::TempDir() + "attnscope_summary_XXXXXX";
    char* made = ::mkdtemp(pattern.data());
    if (made == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = made;
  }
  ~TempDirectory() {
    for (const std::string& f : created_) ::unlink(f.c_str());
    ::rmdir(path_.c_str());
  }
  TempDirectory(const TempDirectory&) = delete;
  TempDirectory& operator=(const TempDirectory&) = delete;

  // A path in the directory, removed at the end of the test.
  std::string file(const std::string& name) {
    created_.push_back(path_ + "/" + name);
    created_.push_back(path_ + "/" + name + ".tmp");
    return created_[created_.size() - 2];
  }

 private:
  std::string path_;
  std::vector<std::string> created_;
};

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---------------------------------------------------------------------------------------------
// render()

TEST(SummaryJsonRenderTest, IsValidJsonWithSchemaAndRun) {
  const std::string text = SummaryJson::render(sampleRun(), sampleStats());
  const Json doc = parseOrFail(text);
  ASSERT_EQ(doc.type, Json::Type::kObject);
  EXPECT_EQ(doc["schema"].text, "attnscope.summary/1");
  const Json& run = doc["run"];
  EXPECT_EQ(run["rank"].number, 3);
  EXPECT_EQ(run["world_size"].number, 8);
  EXPECT_EQ(run["local_rank"].number, 1);
  EXPECT_EQ(run["node"].text, "node-07");
  EXPECT_EQ(run["attnscope_version"].text, "0.1.0");
  EXPECT_EQ(run["torch_version"].text, "1.13.1");
  EXPECT_EQ(run["sample_every"].number, 4);
  EXPECT_EQ(run["steps_seen"].number, 100);
  EXPECT_EQ(run["steps_sampled"].number, 25);
  EXPECT_EQ(run["step_source"].text, "step_calls");
  EXPECT_EQ(run["memory_reports"].number, 12345);
  EXPECT_EQ(run["dropped_calls"].number, 2);
  EXPECT_EQ(run["gpu_timing"]["source"].text, "off");
  EXPECT_EQ(run["gpu_timing"]["requested"].text, "auto");
  EXPECT_EQ(run["gpu_timing"]["fallback_reason"].text, "");
}

TEST(SummaryJsonRenderTest, NamesTheGpuTimingFallback) {
  RunInfo r = sampleRun();
  r.gpuTiming = "events";
  r.gpuTimingRequested = "auto";
  r.gpuTimingFallback =
      "CUPTI failed to initialise: CUPTI_ERROR_NOT_INITIALIZED; using CUDA events";
  const Json t = parseOrFail(SummaryJson::render(r, StatsTable()))["run"]["gpu_timing"];
  EXPECT_EQ(t["source"].text, "events");
  EXPECT_EQ(t["requested"].text, "auto");
  EXPECT_EQ(t["fallback_reason"].text, r.gpuTimingFallback);
}

TEST(SummaryJsonRenderTest, UnixTimestampsKeepSubSecondPrecision) {
  const Json run = parseOrFail(SummaryJson::render(sampleRun(), StatsTable()))["run"];
  EXPECT_NEAR(run["start_unix_seconds"].number, 1733140123.25, 1e-3);
  EXPECT_NEAR(run["stop_unix_seconds"].number, 1733140127.75, 1e-3);
  EXPECT_NEAR(run["stop_unix_seconds"].number - run["start_unix_seconds"].number, 4.5, 1e-3);
}

TEST(SummaryJsonRenderTest, StepSourceForInferredSteps) {
  RunInfo run = sampleRun();
  run.explicitSteps = false;
  EXPECT_EQ(parseOrFail(SummaryJson::render(run, StatsTable()))["run"]["step_source"].text,
            "backward_passes");
}

TEST(SummaryJsonRenderTest, NonFiniteNumbersAreNull) {
  RunInfo run = sampleRun();
  run.startUnixSeconds = std::numeric_limits<double>::quiet_NaN();
  run.stopUnixSeconds = std::numeric_limits<double>::infinity();
  const Json doc = parseOrFail(SummaryJson::render(run, StatsTable()));
  EXPECT_EQ(doc["run"]["start_unix_seconds"].type, Json::Type::kNull);
  EXPECT_EQ(doc["run"]["stop_unix_seconds"].type, Json::Type::kNull);
}

TEST(SummaryJsonRenderTest, LayersPhasesAndOpKinds) {
  const Json doc = parseOrFail(SummaryJson::render(sampleRun(), sampleStats()));
  const Json& layers = doc["layers"];
  ASSERT_EQ(layers.type, Json::Type::kArray);
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(layers[0]["name"].text, "enc.0.attn");
  EXPECT_EQ(layers[1]["name"].text, "enc.1.attn");

  const Json& phases = layers[0]["phases"];
  EXPECT_TRUE(phases.has("forward"));
  EXPECT_TRUE(phases.has("backward"));
  EXPECT_FALSE(phases.has("recompute"));  // never ran

  const Json& fwd = phases["forward"];
  EXPECT_EQ(fwd["calls"].number, 2);
  const Json& call = fwd["call"];
  EXPECT_EQ(call["count"].number, 2);
  EXPECT_EQ(call["ops"].number, 7);  // 3 + 1 + 3
  EXPECT_NEAR(call["total_seconds"].number, 6e-3, 1e-12);
  EXPECT_NEAR(call["mean_seconds"].number, 3e-3, 1e-12);
  EXPECT_NEAR(call["min_seconds"].number, 2e-3, 1e-12);
  EXPECT_NEAR(call["max_seconds"].number, 4e-3, 1e-12);
  EXPECT_NEAR(call["p50_seconds"].number, 2e-3, 2e-3 * LogHistogram::kRelativeError);
  EXPECT_NEAR(call["p99_seconds"].number, 4e-3, 4e-3 * LogHistogram::kRelativeError);
  EXPECT_EQ(call["bytes_allocated"].number, 5096);
  EXPECT_EQ(call["peak_bytes"].number, 5000);

  const Json& kinds = fwd["op_kinds"];
  ASSERT_EQ(kinds.size(), 2u);  // only the kinds that ran, in enum order
  EXPECT_EQ(kinds.members[0].first, "qkv_projection");
  EXPECT_EQ(kinds.members[1].first, "softmax");
  const Json& qkv = kinds["qkv_projection"];
  EXPECT_EQ(qkv["count"].number, 2);
  EXPECT_EQ(qkv["ops"].number, 6);
  EXPECT_NEAR(qkv["total_seconds"].number, 1.2e-3, 1e-12);
  EXPECT_EQ(qkv["bytes_allocated"].number, 1536);
  EXPECT_EQ(qkv["peak_bytes"].number, 1500);
  const Json& softmax = kinds["softmax"];
  EXPECT_EQ(softmax["count"].number, 1);
  EXPECT_EQ(softmax["ops"].number, 1);
  EXPECT_EQ(softmax["bytes_allocated"].number, 2048);
  EXPECT_EQ(softmax["peak_bytes"].number, 2048);

  const Json& bwd = phases["backward"];
  EXPECT_EQ(bwd["calls"].number, 1);
  EXPECT_EQ(bwd["op_kinds"]["score_matmul"]["ops"].number, 2);

  const Json& fused = layers[1]["phases"]["forward"]["op_kinds"];
  ASSERT_EQ(fused.size(), 1u);
  EXPECT_EQ(fused["fused_attention"]["ops"].number, 1);
  EXPECT_EQ(fused["fused_attention"]["bytes_allocated"].number, 64);
}

TEST(SummaryJsonRenderTest, EveryCellHasTheDocumentedFields) {
  const Json doc = parseOrFail(SummaryJson::render(sampleRun(), sampleStats()));
  const std::vector<std::string> fields = {"count",           "ops",         "total_seconds",
                                           "mean_seconds",    "min_seconds", "p50_seconds",
                                           "p90_seconds",     "p99_seconds", "max_seconds",
                                           "bytes_allocated", "peak_bytes"};
  const auto check = [&](const Json& cell) {
    ASSERT_EQ(cell.size(), fields.size());
    for (size_t i = 0; i < fields.size(); ++i) {
      EXPECT_EQ(cell.members[i].first, fields[i]);
      EXPECT_EQ(cell.members[i].second.type, Json::Type::kNumber) << fields[i];
    }
  };
  for (const Json& layer : doc["layers"].items) {
    for (const auto& [phase, stats] : layer["phases"].members) {
      check(stats["call"]);
      for (const auto& [kind, cell] : stats["op_kinds"].members) check(cell);
    }
  }
}

TEST(SummaryJsonRenderTest, LayerWithoutCallsHasEmptyPhases) {
  StatsTable stats;
  stats.layerId("idle");
  const std::string text = SummaryJson::render(sampleRun(), stats);
  const Json doc = parseOrFail(text);
  ASSERT_EQ(doc["layers"].size(), 1u);
  EXPECT_EQ(doc["layers"][0]["name"].text, "idle");
  EXPECT_EQ(doc["layers"][0]["phases"].type, Json::Type::kObject);
  EXPECT_EQ(doc["layers"][0]["phases"].size(), 0u);
}

TEST(SummaryJsonRenderTest, PhaseWithoutOpKindsHasEmptyOpKinds) {
  StatsTable stats;
  stats.add(record(stats.layerId("l"), Phase::kRecompute, 1000));
  const Json doc = parseOrFail(SummaryJson::render(sampleRun(), stats));
  const Json& recompute = doc["layers"][0]["phases"]["recompute"];
  EXPECT_EQ(recompute["calls"].number, 1);
  EXPECT_EQ(recompute["op_kinds"].type, Json::Type::kObject);
  EXPECT_EQ(recompute["op_kinds"].size(), 0u);
}

TEST(SummaryJsonRenderTest, EmptyTableRendersEmptyLayers) {
  const std::string text = SummaryJson::render(RunInfo(), StatsTable());
  EXPECT_NE(text.find("\"layers\": []"), std::string::npos) << text;
  const Json doc = parseOrFail(text);
  EXPECT_EQ(doc["schema"].text, "attnscope.summary/1");
  EXPECT_EQ(doc["layers"].type, Json::Type::kArray);
  EXPECT_EQ(doc["layers"].size(), 0u);
  EXPECT_EQ(doc["run"]["rank"].number, 0);
  EXPECT_EQ(doc["run"]["node"].text, "");
}

TEST(SummaryJsonRenderTest, StringsAreEscaped) {
  const std::string nasty =
      std::string("quote\" back\\slash\nnew\ttab\rcr") + '\x01' + "ctl \xc3\xa9 /slash";
  StatsTable stats;
  stats.add(record(stats.layerId(nasty), Phase::kForward, 1000));
  RunInfo run = sampleRun();
  run.node = "host \"a\"\\b";
  const std::string text = SummaryJson::render(run, stats);

  EXPECT_NE(text.find(R"(quote\" back\\slash\nnew\ttab)"), std::string::npos) << text;
  EXPECT_NE(text.find(R"(\u0001ctl)"), std::string::npos) << text;
  const Json doc = parseOrFail(text);
  EXPECT_EQ(doc["layers"][0]["name"].text, nasty);
  EXPECT_EQ(doc["run"]["node"].text, run.node);
}

TEST(SummaryJsonRenderTest, EveryControlCharacterRoundTrips) {
  std::string name;
  for (int c = 1; c < 0x20; ++c) name += static_cast<char>(c);
  StatsTable stats;
  stats.layerId(name);
  const Json doc = parseOrFail(SummaryJson::render(RunInfo(), stats));
  EXPECT_EQ(doc["layers"][0]["name"].text, name);
}

TEST(SummaryJsonRenderTest, ManyLayersStayValid) {
  StatsTable stats;
  for (int i = 0; i < 50; ++i) {
    const int32_t id = stats.layerId("layer." + std::to_string(i));
    CallRecord r = record(id, static_cast<Phase>(i % kNumPhases), 1000 + i);
    r.kinds[i % kNumOpKinds] = {100, 1, i, i};
    stats.add(r);
  }
  const Json doc = parseOrFail(SummaryJson::render(sampleRun(), stats));
  ASSERT_EQ(doc["layers"].size(), 50u);
  EXPECT_EQ(doc["layers"][49]["name"].text, "layer.49");
}

// ---------------------------------------------------------------------------------------------
// write()

TEST(SummaryJsonWriteTest, WritesRenderedTextAtomically) {
  TempDirectory dir;
  const std::string path = dir.file("summary-3.json");
  std::string error = "untouched";
  ASSERT_TRUE(SummaryJson::write(path, sampleRun(), sampleStats(), &error)) << error;
  EXPECT_EQ(error, "untouched");
  EXPECT_EQ(readFile(path), SummaryJson::render(sampleRun(), sampleStats()));
  EXPECT_FALSE(exists(path + ".tmp"));
  EXPECT_EQ(parseOrFail(readFile(path))["run"]["rank"].number, 3);
}

TEST(SummaryJsonWriteTest, OverwritesAnExistingFile) {
  TempDirectory dir;
  const std::string path = dir.file("summary.json");
  { std::ofstream(path) << "old contents that are longer than nothing"; }
  ASSERT_TRUE(SummaryJson::write(path, RunInfo(), StatsTable(), nullptr));
  EXPECT_EQ(readFile(path), SummaryJson::render(RunInfo(), StatsTable()));
  EXPECT_FALSE(exists(path + ".tmp"));
}

TEST(SummaryJsonWriteTest, MissingDirectoryFailsNamingThePath) {
  TempDirectory dir;
  const std::string path = dir.file("no-such-dir") + "/summary.json";
  std::string error;
  EXPECT_FALSE(SummaryJson::write(path, sampleRun(), sampleStats(), &error));
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_FALSE(exists(path));
  EXPECT_FALSE(exists(path + ".tmp"));
  // Without an error string it still fails cleanly.
  EXPECT_FALSE(SummaryJson::write(path, sampleRun(), sampleStats(), nullptr));
}

// ---------------------------------------------------------------------------------------------
// SummaryTable

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(SummaryTableTest, OneLinePerLayerAfterTheHeader) {
  const std::string text = SummaryTable::render(sampleRun(), sampleStats());
  const std::vector<std::string> ls = lines(text);
  ASSERT_EQ(ls.size(), 2u + 2u) << text;
  EXPECT_EQ(ls[0], "attention per layer (rank 3, 25 of 100 steps sampled)");
  EXPECT_EQ(ls[1].rfind("layer", 0), 0u) << ls[1];
  EXPECT_EQ(ls[2].rfind("enc.0.attn ", 0), 0u) << ls[2];
  EXPECT_EQ(ls[3].rfind("enc.1.attn ", 0), 0u) << ls[3];
  // enc.0.attn: 2 forward calls, fwd peak 5000 B = 4.9KiB, qkv dominates the forward op time,
  // score_matmul is the only backward kind.
  EXPECT_NE(ls[2].find(" 2 "), std::string::npos) << ls[2];
  EXPECT_NE(ls[2].find("4.9KiB"), std::string::npos) << ls[2];
  EXPECT_NE(ls[2].find("qkv_projection 92% / score_matmul 100%"), std::string::npos) << ls[2];
  // enc.1.attn has no backward phase.
  EXPECT_NE(ls[3].find("fused_attention 100% / -"), std::string::npos) << ls[3];
}

TEST(SummaryTableTest, EmptyTableHasOnlyTheHeader) {
  EXPECT_EQ(lines(SummaryTable::render(RunInfo(), StatsTable())).size(), 2u);
}

TEST(SummaryTableTest, ManyLayersGiveOneLineEach) {
  StatsTable stats;
  for (int i = 0; i < 30; ++i) {
    stats.add(record(stats.layerId("blocks." + std::to_string(i) + ".attention.self_attention"),
                     Phase::kForward, 1000));
  }
  const std::vector<std::string> ls = lines(SummaryTable::render(RunInfo(), stats));
  ASSERT_EQ(ls.size(), 2u + 30u);
  for (int i = 0; i < 30; ++i) {
    // The layer column fits the longest name (up to 64 characters): names are shown whole.
    const std::string name = ("blocks." + std::to_string(i) + ".attention.self_attention");
    EXPECT_EQ(ls[2 + i].rfind(name + " ", 0), 0u) << ls[2 + i];
  }
}

TEST(SummaryTableTest, NamesLongerThan64CharactersAreCut) {
  StatsTable stats;
  const std::string name = "model." + std::string(70, 'x') + ".attn";
  stats.add(record(stats.layerId(name), Phase::kForward, 1000));
  const std::vector<std::string> ls = lines(SummaryTable::render(RunInfo(), stats));
  ASSERT_EQ(ls.size(), 3u);
  EXPECT_EQ(ls[2].rfind(name.substr(0, 64) + " ", 0), 0u) << ls[2];
  EXPECT_EQ(ls[1].rfind("layer" + std::string(59, ' ') + " ", 0), 0u) << ls[1];
}

}  // namespace
}  // namespace attnscope
