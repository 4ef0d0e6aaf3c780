#include "attnscope/core/Config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

extern char** environ;

namespace attnscope {
namespace {

constexpr int64_t kMaxSampleEvery = 1000000;
constexpr double kMinIntervalS = 0.1;
constexpr double kMaxIntervalS = 3600.0;
constexpr int64_t kMaxMaxLayers = 65536;

constexpr char kBoolAllowed[] = "one of 1, 0, true, false, on, off, yes, no";
constexpr char kLogLevelAllowed[] = "one of off, error, warn, info, debug";
constexpr char kAggregationAllowed[] = "one of auto, gloo, nccl, mpi, local, none";
constexpr char kGpuTimingAllowed[] = "one of auto, cupti, events, both, off";
constexpr char kSummaryAllowed[] =
    "a file path in an existing, writable directory ({rank} expands to the rank)";

[[noreturn]] void fail(const std::string& name, const std::string& value, const std::string& what,
                       const std::string& allowed) {
  throw std::invalid_argument(name + "=\"" + value + "\" " + what + "; allowed: " + allowed);
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

bool parseBool(const std::string& name, const std::string& value) {
  const std::string v = lower(value);
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "off" || v == "no") return false;
  fail(name, value, "is not a boolean", kBoolAllowed);
}

int64_t parseInt(const std::string& name, const std::string& value, int64_t lo, int64_t hi) {
  const std::string allowed =
      "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  if (value.empty()) fail(name, value, "is empty", allowed);
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (end == value.c_str() || *end != '\0') fail(name, value, "is not an integer", allowed);
  if (errno == ERANGE || v < lo || v > hi) fail(name, value, "is out of range", allowed);
  return v;
}

double parseDouble(const std::string& name, const std::string& value, double lo, double hi) {
  std::ostringstream allowed;
  allowed << "a number from " << lo << " to " << hi;
  if (value.empty()) fail(name, value, "is empty", allowed.str());
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (end == value.c_str() || *end != '\0') fail(name, value, "is not a number", allowed.str());
  if (errno == ERANGE || !std::isfinite(v) || v < lo || v > hi) {
    fail(name, value, "is out of range", allowed.str());
  }
  return v;
}

Aggregation parseAggregation(const std::string& name, const std::string& value) {
  const std::string v = lower(value);
  for (Aggregation a : {Aggregation::kAuto, Aggregation::kGloo, Aggregation::kNccl, Aggregation::kMpi,
                        Aggregation::kLocal, Aggregation::kNone}) {
    if (v == aggregationName(a)) return a;
  }
  fail(name, value, "is not an aggregation backend", kAggregationAllowed);
}

GpuTiming parseGpuTiming(const std::string& name, const std::string& value) {
  const std::string v = lower(value);
  for (GpuTiming g : {GpuTiming::kAuto, GpuTiming::kCupti, GpuTiming::kEvents, GpuTiming::kBoth,
                      GpuTiming::kOff}) {
    if (v == gpuTimingName(g)) return g;
  }
  fail(name, value, "is not a GPU timing source", kGpuTimingAllowed);
}

LogLevel parseLogLevel(const std::string& name, const std::string& value) {
  const std::string v = lower(value);
  if (v == "off") return LogLevel::kOff;
  if (v == "error") return LogLevel::kError;
  if (v == "warn" || v == "warning") return LogLevel::kWarn;
  if (v == "info") return LogLevel::kInfo;
  if (v == "debug") return LogLevel::kDebug;
  fail(name, value, "is not a log level", kLogLevelAllowed);
}

size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string unknownVariableWarning(const std::string& name) {
  const Config::Variable* best = nullptr;
  size_t bestDistance = 0;
  for (const auto& v : Config::variables()) {
    const size_t d = editDistance(name, v.name);
    if (best == nullptr || d < bestDistance) {
      best = &v;
      bestDistance = d;
    }
  }
  std::string msg = "unknown variable " + name + " is ignored";
  if (best != nullptr && bestDistance <= 4) msg += std::string(" (did you mean ") + best->name + "?)";
  return msg;
}

}  // namespace

const char* aggregationName(Aggregation a) {
  switch (a) {
    case Aggregation::kAuto: return "auto";
    case Aggregation::kGloo: return "gloo";
    case Aggregation::kNccl: return "nccl";
    case Aggregation::kMpi: return "mpi";
    case Aggregation::kLocal: return "local";
    case Aggregation::kNone: return "none";
  }
  return "?";
}

const char* gpuTimingName(GpuTiming g) {
  switch (g) {
    case GpuTiming::kAuto: return "auto";
    case GpuTiming::kCupti: return "cupti";
    case GpuTiming::kEvents: return "events";
    case GpuTiming::kBoth: return "both";
    case GpuTiming::kOff: return "off";
  }
  return "?";
}

const std::vector<Config::Variable>& Config::variables() {
  static const std::vector<Variable> kVariables = {
      {kEnvEnable, "bool", "1", kBoolAllowed, "master switch; 0 makes every attnscope call a no-op"},
      {kEnvSampleEvery, "int", "1", "an integer from 1 to 1000000",
       "record one training step in N; unsampled steps install no callbacks"},
      {kEnvIntervalS, "float", "10", "a number from 0.1 to 3600",
       "seconds between reporting rounds (aggregation and export)"},
      {kEnvLogLevel, "enum", "info", kLogLevelAllowed,
       "stderr verbosity; info prints a per-layer table at stop"},
      {kEnvSummaryJson, "path", "(none)",
       kSummaryAllowed,
       "write the per-rank JSON summary here at stop"},
      {kEnvMemory, "bool", "1", kBoolAllowed,
       "attribute allocator reports (bytes allocated, peak live bytes) to layers and op kinds"},
      {kEnvFusedOps, "bool", "0", kBoolAllowed,
       "recognise fused attention ops outside any AttentionScope (a callback on every op)"},
      {kEnvMaxLayers, "int", "1024", "an integer from 1 to 65536",
       "most distinct attention layer names kept; later names are counted but not recorded"},
      {kEnvAggregation, "enum", "auto", kAggregationAllowed,
       "how ranks' figures come together; auto is local for one rank, gloo otherwise"},
      {kEnvStragglerThreshold, "float", "1.2", "a number from 1.01 to 100",
       "straggler when attention time per step exceeds threshold x the median of all ranks"},
      {kEnvStragglerWindows, "int", "3", "an integer from 1 to 1000",
       "for this many consecutive reporting windows"},
      {kEnvHangS, "float", "300", "a number from 1 to 86400",
       "report a rank hung when its step counter stands still this long while others move"},
      {kEnvRoundTimeoutS, "float", "30", "a number from 1 to 3600",
       "longest an aggregation round or the group set-up may take before a rank gives up on it"},
      {kEnvStorePort, "int", "0", "an integer from 0 to 65535",
       "port of attnscope's own TCPStore (rank 0 serves it) when neither the program nor torchrun "
       "provides a store; 0 means MASTER_PORT + 1"},
      {kEnvGpuTiming, "enum", "auto", kGpuTimingAllowed,
       "device time per layer on GPUs: auto is CUPTI when attnscope can hold it, else CUDA events"},
  };
  return kVariables;
}

bool Config::set(const std::string& name, const std::string& value) {
  if (name == kEnvEnable) {
    enable = parseBool(name, value);
  } else if (name == kEnvSampleEvery) {
    sampleEvery = parseInt(name, value, 1, kMaxSampleEvery);
  } else if (name == kEnvIntervalS) {
    intervalSeconds = parseDouble(name, value, kMinIntervalS, kMaxIntervalS);
  } else if (name == kEnvLogLevel) {
    logLevel = parseLogLevel(name, value);
  } else if (name == kEnvSummaryJson) {
    summaryJson = value;
  } else if (name == kEnvMemory) {
    memory = parseBool(name, value);
  } else if (name == kEnvFusedOps) {
    fusedOps = parseBool(name, value);
  } else if (name == kEnvMaxLayers) {
    maxLayers = parseInt(name, value, 1, kMaxMaxLayers);
  } else if (name == kEnvAggregation) {
    aggregation = parseAggregation(name, value);
  } else if (name == kEnvStragglerThreshold) {
    stragglerThreshold = parseDouble(name, value, 1.01, 100.0);
  } else if (name == kEnvStragglerWindows) {
    stragglerWindows = parseInt(name, value, 1, 1000);
  } else if (name == kEnvHangS) {
    hangSeconds = parseDouble(name, value, 1.0, 86400.0);
  } else if (name == kEnvRoundTimeoutS) {
    roundTimeoutSeconds = parseDouble(name, value, 1.0, 3600.0);
  } else if (name == kEnvStorePort) {
    storePort = parseInt(name, value, 0, 65535);
  } else if (name == kEnvGpuTiming) {
    gpuTiming = parseGpuTiming(name, value);
  } else {
    return false;
  }
  return true;
}

void Config::validate() const {
  // Values set from code bypass set(): check the same ranges here.
  if (sampleEvery < 1 || sampleEvery > kMaxSampleEvery) {
    fail(kEnvSampleEvery, std::to_string(sampleEvery), "is out of range",
         "an integer from 1 to 1000000");
  }
  if (!(intervalSeconds >= kMinIntervalS && intervalSeconds <= kMaxIntervalS)) {
    std::ostringstream v;
    v << intervalSeconds;
    fail(kEnvIntervalS, v.str(), "is out of range", "a number from 0.1 to 3600");
  }
  if (maxLayers < 1 || maxLayers > kMaxMaxLayers) {
    fail(kEnvMaxLayers, std::to_string(maxLayers), "is out of range",
         "an integer from 1 to 65536");
  }
  const auto checkRange = [](const char* name, double v, double lo, double hi, const char* allowed) {
    if (!(v >= lo && v <= hi)) {
      std::ostringstream text;
      text << v;
      fail(name, text.str(), "is out of range", allowed);
    }
  };
  checkRange(kEnvStragglerThreshold, stragglerThreshold, 1.01, 100.0, "a number from 1.01 to 100");
  checkRange(kEnvStragglerWindows, static_cast<double>(stragglerWindows), 1, 1000,
             "an integer from 1 to 1000");
  checkRange(kEnvHangS, hangSeconds, 1.0, 86400.0, "a number from 1 to 86400");
  checkRange(kEnvRoundTimeoutS, roundTimeoutSeconds, 1.0, 3600.0, "a number from 1 to 3600");
  checkRange(kEnvStorePort, static_cast<double>(storePort), 0, 65535, "an integer from 0 to 65535");
  if (static_cast<int>(gpuTiming) > static_cast<int>(GpuTiming::kOff)) {
    fail(kEnvGpuTiming, std::to_string(static_cast<int>(gpuTiming)), "is not a GPU timing source",
         kGpuTimingAllowed);
  }
  if (!summaryJson.empty()) {
    const std::string allowed = kSummaryAllowed;
    const std::string path = summaryPathForRank(0);
    if (path.back() == '/') fail(kEnvSummaryJson, summaryJson, "names a directory", allowed);
    const auto slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      fail(kEnvSummaryJson, summaryJson, "is in a directory that does not exist (" + dir + ")", allowed);
    }
    if (::access(dir.c_str(), W_OK) != 0) {
      fail(kEnvSummaryJson, summaryJson, "is in a directory that is not writable (" + dir + ")", allowed);
    }
  }
}

Config Config::fromVariables(const std::map<std::string, std::string>& vars,
                             std::vector<std::string>* warnings) {
  Config config;
  for (const auto& [name, value] : vars) {
    if (name.rfind("ATTNSCOPE_", 0) != 0) continue;
    if (!config.set(name, value)) {
      const std::string msg = unknownVariableWarning(name);
      if (warnings != nullptr) {
        warnings->push_back(msg);
      } else {
        ATTNSCOPE_LOG(kWarn, msg);
      }
    }
  }
  config.validate();
  return config;
}

Config Config::fromEnvironment() {
  std::map<std::string, std::string> vars;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    if (entry.rfind("ATTNSCOPE_", 0) != 0) continue;
    const auto eq = entry.find('=');
    if (eq == std::string::npos) continue;
    vars.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return fromVariables(vars);
}

std::string Config::summaryPathForRank(int rank) const {
  std::string path = summaryJson;
  const std::string token = "{rank}";
  for (size_t pos = path.find(token); pos != std::string::npos; pos = path.find(token, pos)) {
    path.replace(pos, token.size(), std::to_string(rank));
  }
  return path;
}

}  // namespace attnscope
