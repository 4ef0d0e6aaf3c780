#include "attnscope/core/Config.h"

#include <arpa/inet.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

extern char** environ;

namespace attnscope {
namespace {

constexpr int64_t kMaxSampleEvery = 1000000;
constexpr double kMinIntervalS = 0.1;
constexpr double kMaxIntervalS = 3600.0;
constexpr int64_t kMaxMaxLayers = 65536;
constexpr int64_t kMaxTraceMaxMb = 1048576;

constexpr char kBoolAllowed[] = "one of 1, 0, true, false, on, off, yes, no";
constexpr char kLogLevelAllowed[] = "one of off, error, warn, info, debug";
constexpr char kAggregationAllowed[] = "one of auto, gloo, store, nccl, mpi, local, none";
constexpr char kBindAllowed[] = "an IPv4 address such as 0.0.0.0 or 127.0.0.1";
constexpr char kAuthAllowed[] = "user:password, or @/path/to/file holding user:password";
constexpr char kUrlAllowed[] = "an http:// URL with a host and a port, such as http://pushgw:9091";
constexpr char kJobAllowed[] = "letters, digits, '_', '-', '.' (1 to 128 characters)";
constexpr char kGpuTimingAllowed[] = "one of auto, cupti, events, both, off";
constexpr char kSummaryAllowed[] =
    "a file path in an existing, writable directory ({rank} expands to the rank)";
constexpr char kTraceDirAllowed[] =
    "a writable directory, or a path that can be created under a writable directory";
constexpr char kTraceMaxMbAllowed[] = "an integer from 1 to 1048576";
constexpr double kMinPeakFlops = 1e6;
constexpr double kMaxPeakFlops = 1e18;
constexpr double kMinPeakBandwidth = 1e6;
constexpr double kMaxPeakBandwidth = 1e16;
constexpr char kPeakFlopsAllowed[] = "flop/s as a number from 1e6 to 1e18, such as 9.9e14";
constexpr char kRegexAllowed[] =
    "a Python regular expression, searched in each module's class name and module path";
constexpr char kPeakBandwidthAllowed[] = "bytes/s as a number from 1e6 to 1e16, such as 4.8e12";

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
  const std::string allowed = "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  if (value.empty()) fail(name, value, "is empty", allowed);
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (end == value.c_str() || *end != '\0') fail(name, value, "is not an integer", allowed);
  if (errno == ERANGE || v < lo || v > hi) fail(name, value, "is out of range", allowed);
  return v;
}

double parseDouble(const std::string& name, const std::string& value, double lo, double hi,
                   const char* allowedText = nullptr) {
  std::ostringstream allowed;
  if (allowedText != nullptr) {
    allowed << allowedText;
  } else {
    allowed << "a number from " << lo << " to " << hi;
  }
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
  for (Aggregation a :
       {Aggregation::kAuto, Aggregation::kGloo, Aggregation::kStore, Aggregation::kNccl,
        Aggregation::kMpi, Aggregation::kLocal, Aggregation::kNone}) {
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

bool isIpv4(const std::string& s) {
  in_addr addr{};
  return ::inet_pton(AF_INET, s.c_str(), &addr) == 1;
}

// A file that can be created: its directory exists and is writable, and it is not a directory.
// `value` is what the user wrote (shown in errors), `path` what it expands to.
void checkWritableFile(const char* name, const std::string& value, const std::string& path,
                       const std::string& allowed) {
  if (path.back() == '/') fail(name, value, "names a directory", allowed);
  const auto slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    fail(name, value, "is in a directory that does not exist (" + dir + ")", allowed);
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    fail(name, value, "is in a directory that is not writable (" + dir + ")", allowed);
  }
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
  if (best != nullptr && bestDistance <= 4)
    msg += std::string(" (did you mean ") + best->name + "?)";
  return msg;
}

}  // namespace

const char* aggregationName(Aggregation a) {
  switch (a) {
    case Aggregation::kAuto:
      return "auto";
    case Aggregation::kGloo:
      return "gloo";
    case Aggregation::kNccl:
      return "nccl";
    case Aggregation::kMpi:
      return "mpi";
    case Aggregation::kLocal:
      return "local";
    case Aggregation::kNone:
      return "none";
    case Aggregation::kStore:
      return "store";
  }
  return "?";
}

const char* gpuTimingName(GpuTiming g) {
  switch (g) {
    case GpuTiming::kAuto:
      return "auto";
    case GpuTiming::kCupti:
      return "cupti";
    case GpuTiming::kEvents:
      return "events";
    case GpuTiming::kBoth:
      return "both";
    case GpuTiming::kOff:
      return "off";
  }
  return "?";
}

const std::vector<Config::Variable>& Config::variables() {
  static const std::vector<Variable> kVariables = {
      {kEnvEnable, "bool", "1", kBoolAllowed,
       "master switch; 0 makes every attnscope call a no-op"},
      {kEnvSampleEvery, "int", "1", "an integer from 1 to 1000000",
       "record one training step in N; unsampled steps install no callbacks"},
      {kEnvIntervalS, "float", "10", "a number from 0.1 to 3600",
       "seconds between reporting rounds (aggregation and export)"},
      {kEnvLogLevel, "enum", "info", kLogLevelAllowed,
       "stderr verbosity; info prints a per-layer table at stop"},
      {kEnvSummaryJson, "path", "(none)", kSummaryAllowed,
       "write the per-rank JSON summary here at stop"},
      {kEnvMemory, "bool", "1", kBoolAllowed,
       "attribute allocator reports (bytes allocated, peak live bytes) to layers and op kinds"},
      {kEnvFusedOps, "bool", "0", kBoolAllowed,
       "recognise fused attention ops outside any AttentionScope (a callback on every op)"},
      {kEnvMaxLayers, "int", "1024", "an integer from 1 to 65536",
       "most distinct attention layer names kept; later names are counted but not recorded"},
      {kEnvAggregation, "enum", "auto", kAggregationAllowed,
       "how ranks' figures come together; auto is local for one rank, else gloo with a group "
       "handed in (Python), else store"},
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
      {kEnvPort, "int", "9464", "an integer from 0 to 65535",
       "Prometheus /metrics port of local rank 0; local rank r serves port + r; 0 turns export "
       "off"},
      {kEnvBind, "string", "0.0.0.0", kBindAllowed, "address the /metrics endpoint listens on"},
      {kEnvMetricsAuth, "string", "(none)", kAuthAllowed,
       "HTTP basic auth for /metrics (and push); scrapes without it get 401"},
      {kEnvMetricsLayers, "bool", "1", kBoolAllowed,
       "label metrics by layer; 0 sums layers (bounds the series of deep models)"},
      {kEnvPushgateway, "url", "(none)", kUrlAllowed,
       "push metrics to this Prometheus push gateway every interval and once more at stop"},
      {kEnvControlToken, "string", "(none)", "a token of 16 or more printable characters",
       "enables rank 0's POST /control (pause, resume, sample_every) for requests bearing it"},
      {kEnvFileSd, "path", "(none)", "a file path in an existing, writable directory",
       "rank 0 writes a Prometheus file_sd JSON with every rank's endpoint and labels here"},
      {kEnvJob, "string", "(TORCHELASTIC_RUN_ID or attnscope)", kJobAllowed,
       "value of the job label on every series"},
      {kEnvTraceDir, "path", "(none)", kTraceDirAllowed,
       "write this rank's trace store (rank-<r>.sqlite) here, committed every interval"},
      {kEnvTraceMaxMb, "int", "1024", kTraceMaxMbAllowed,
       "size cap of one rank's trace file in MiB; the oldest step records are dropped first"},
      {kEnvGpuTiming, "enum", "auto", kGpuTimingAllowed,
       "device time per layer on GPUs: auto is CUPTI when attnscope can hold it, else CUDA events"},
      {kEnvRoofline, "bool", "1", kBoolAllowed,
       "FLOPs and bytes moved of each attention op from its input shapes (sampled steps only), "
       "classified memory- or compute-bound against the machine's ceilings"},
      {kEnvPeakFlops, "float", "(calibrated)", kPeakFlopsAllowed,
       "the machine's peak flop/s for the roofline; unset: measured at start (float32 matmul)"},
      {kEnvPeakBandwidth, "float", "(calibrated)", kPeakBandwidthAllowed,
       "the machine's memory bandwidth in bytes/s for the roofline; unset: measured at start "
       "(copy)"},
      {kEnvCalibrate, "bool", "1", kBoolAllowed,
       "measure the ceilings not given above at start (a matmul and a copy, about 0.3 s on a CPU)"},
      {kEnvAttentionModules, "regex", "(built-in rule)", kRegexAllowed,
       "Python attach: modules whose class name or path matches are the attention layers, "
       "replacing the built-in class-name pattern (attention|attn)"},
      {kEnvAttentionExclude, "regex", "(none)", kRegexAllowed,
       "Python attach: modules whose class name or path matches are never attention layers "
       "(their children still can be)"},
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
  } else if (name == kEnvPort) {
    port = parseInt(name, value, 0, 65535);
  } else if (name == kEnvBind) {
    bind = value;
  } else if (name == kEnvMetricsAuth) {
    metricsAuth = value;
  } else if (name == kEnvMetricsLayers) {
    metricsLayers = parseBool(name, value);
  } else if (name == kEnvPushgateway) {
    pushgateway = value;
  } else if (name == kEnvControlToken) {
    controlToken = value;
  } else if (name == kEnvFileSd) {
    fileSd = value;
  } else if (name == kEnvJob) {
    job = value;
  } else if (name == kEnvTraceDir) {
    traceDir = value;
  } else if (name == kEnvTraceMaxMb) {
    traceMaxMb = parseInt(name, value, 1, kMaxTraceMaxMb);
  } else if (name == kEnvGpuTiming) {
    gpuTiming = parseGpuTiming(name, value);
  } else if (name == kEnvRoofline) {
    roofline = parseBool(name, value);
  } else if (name == kEnvPeakFlops) {
    peakFlops = parseDouble(name, value, kMinPeakFlops, kMaxPeakFlops, kPeakFlopsAllowed);
  } else if (name == kEnvPeakBandwidth) {
    peakBandwidth =
        parseDouble(name, value, kMinPeakBandwidth, kMaxPeakBandwidth, kPeakBandwidthAllowed);
  } else if (name == kEnvCalibrate) {
    calibrate = parseBool(name, value);
  } else if (name == kEnvAttentionModules) {
    attentionModules = value;
  } else if (name == kEnvAttentionExclude) {
    attentionExclude = value;
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
    fail(kEnvMaxLayers, std::to_string(maxLayers), "is out of range", "an integer from 1 to 65536");
  }
  const auto checkRange = [](const char* name, double v, double lo, double hi,
                             const char* allowed) {
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
  if (peakFlops != 0)
    checkRange(kEnvPeakFlops, peakFlops, kMinPeakFlops, kMaxPeakFlops, kPeakFlopsAllowed);
  if (peakBandwidth != 0) {
    checkRange(kEnvPeakBandwidth, peakBandwidth, kMinPeakBandwidth, kMaxPeakBandwidth,
               kPeakBandwidthAllowed);
  }
  if (!roofline && (peakFlops != 0 || peakBandwidth != 0)) {
    std::ostringstream v;
    v << (peakFlops != 0 ? peakFlops : peakBandwidth);
    fail(peakFlops != 0 ? kEnvPeakFlops : kEnvPeakBandwidth, v.str(),
         "has no effect with ATTNSCOPE_ROOFLINE=0", "leave it unset, or set ATTNSCOPE_ROOFLINE=1");
  }
  checkRange(kEnvStorePort, static_cast<double>(storePort), 0, 65535, "an integer from 0 to 65535");
  if (static_cast<int>(gpuTiming) > static_cast<int>(GpuTiming::kOff)) {
    fail(kEnvGpuTiming, std::to_string(static_cast<int>(gpuTiming)), "is not a GPU timing source",
         kGpuTimingAllowed);
  }
  checkRange(kEnvPort, static_cast<double>(port), 0, 65535, "an integer from 0 to 65535");
  if (!isIpv4(bind)) fail(kEnvBind, bind, "is not an IPv4 address", kBindAllowed);
  if (!metricsAuth.empty()) metricsCredentials();
  if (!pushgateway.empty()) {
    const std::string& u = pushgateway;
    const std::string rest = u.rfind("http://", 0) == 0 ? u.substr(7) : "";
    const auto colon = rest.find(':');
    const std::string host = rest.substr(0, colon);
    std::string portText = colon == std::string::npos ? "" : rest.substr(colon + 1);
    while (!portText.empty() && portText.back() == '/') portText.pop_back();
    if (rest.empty() || host.empty() || portText.empty() ||
        portText.find_first_not_of("0123456789") != std::string::npos || portText.size() > 5 ||
        std::stoi(portText) < 1 || std::stoi(portText) > 65535) {
      fail(kEnvPushgateway, u, "is not an http://host:port URL", kUrlAllowed);
    }
  }
  if (!controlToken.empty()) {
    bool printable = controlToken.size() >= 16;
    for (unsigned char c : controlToken) printable = printable && c > 32 && c < 127;
    if (!printable) {
      fail(kEnvControlToken, "(" + std::to_string(controlToken.size()) + " characters, not shown)",
           "is too short or has spaces or control characters",
           "a token of 16 or more printable characters");
    }
  }
  if (!fileSd.empty())
    checkWritableFile(kEnvFileSd, fileSd, fileSd, "a file path in an existing, writable directory");
  if (!job.empty()) {
    bool ok = job.size() <= 128;
    for (unsigned char c : job) ok = ok && (std::isalnum(c) || c == '_' || c == '-' || c == '.');
    if (!ok) fail(kEnvJob, job, "has characters a label value should not carry", kJobAllowed);
  }
  if (!summaryJson.empty())
    checkWritableFile(kEnvSummaryJson, summaryJson, summaryPathForRank(0), kSummaryAllowed);
  checkRange(kEnvTraceMaxMb, static_cast<double>(traceMaxMb), 1, kMaxTraceMaxMb,
             kTraceMaxMbAllowed);
  if (!traceDir.empty()) {
    // The directory itself, or else its nearest existing ancestor (the store creates the rest).
    std::string dir = traceDir;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    struct stat st {};
    std::string existing = dir;
    while (::stat(existing.c_str(), &st) != 0) {
      const auto slash = existing.rfind('/');
      existing = slash == std::string::npos ? "." : (slash == 0 ? "/" : existing.substr(0, slash));
    }
    if (!S_ISDIR(st.st_mode)) {
      fail(kEnvTraceDir, traceDir,
           existing == dir ? "is not a directory"
                           : "cannot be created (" + existing + " is not a directory)",
           kTraceDirAllowed);
    }
    if (::access(existing.c_str(), W_OK | X_OK) != 0) {
      fail(kEnvTraceDir, traceDir,
           existing == dir ? "is not writable"
                           : "cannot be created (" + existing + " is not writable)",
           kTraceDirAllowed);
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

std::string Config::metricsCredentials() const {
  if (metricsAuth.empty()) return "";
  std::string line = metricsAuth;
  if (line[0] == '@') {
    std::ifstream in(line.substr(1));
    if (!in || !std::getline(in, line)) {
      fail(kEnvMetricsAuth, metricsAuth, "names a file that cannot be read", kAuthAllowed);
    }
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  }
  const auto colon = line.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == line.size()) {
    fail(kEnvMetricsAuth, metricsAuth[0] == '@' ? metricsAuth : "(not shown)",
         "is not user:password with both parts non-empty", kAuthAllowed);
  }
  return line;
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
