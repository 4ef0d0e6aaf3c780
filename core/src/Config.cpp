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
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace attnscope {
namespace {

constexpr char kBoolAllowed[] = "one of 1, 0, true, false, on, off, yes, no";
constexpr char kBindAllowed[] = "an IPv4 address such as 0.0.0.0 or 127.0.0.1";
constexpr char kAuthAllowed[] = "user:password, or @/path/to/file holding user:password";
constexpr char kUrlAllowed[] = "an http:// URL with a host and a port, such as http://pushgw:9091";
constexpr char kJobAllowed[] = "letters, digits, '_', '-', '.' (1 to 128 characters)";
constexpr char kTokenAllowed[] = "a token of 16 or more printable characters";
constexpr char kSummaryAllowed[] =
    "a file path in an existing, writable directory ({rank} expands to the rank)";
constexpr char kFileAllowed[] = "a file path in an existing, writable directory";
constexpr char kTraceDirAllowed[] =
    "a writable directory, or a path that can be created under a writable directory";
constexpr char kRegexAllowed[] =
    "a Python regular expression, searched in each module's class name and module path";

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
                   const std::string& allowed) {
  if (value.empty()) fail(name, value, "is empty", allowed);
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (end == value.c_str() || *end != '\0') fail(name, value, "is not a number", allowed);
  if (errno == ERANGE || !std::isfinite(v) || v < lo || v > hi) {
    fail(name, value, "is out of range", allowed);
  }
  return v;
}

// Enumerations: the words, in the order the docs list them, parsed case-insensitively.
template <typename E>
struct Word {
  const char* word;
  E value;
  bool listed = true;  // false: accepted, not shown in the allowed values
};
constexpr Word<Aggregation> kAggregationWords[] = {
    {"auto", Aggregation::kAuto}, {"gloo", Aggregation::kGloo}, {"store", Aggregation::kStore},
    {"nccl", Aggregation::kNccl}, {"mpi", Aggregation::kMpi},   {"local", Aggregation::kLocal},
    {"none", Aggregation::kNone}};
constexpr Word<GpuTiming> kGpuTimingWords[] = {{"auto", GpuTiming::kAuto},
                                               {"cupti", GpuTiming::kCupti},
                                               {"events", GpuTiming::kEvents},
                                               {"both", GpuTiming::kBoth},
                                               {"off", GpuTiming::kOff}};
constexpr Word<LogLevel> kLogLevelWords[] = {
    {"off", LogLevel::kOff},   {"error", LogLevel::kError}, {"warn", LogLevel::kWarn},
    {"info", LogLevel::kInfo}, {"debug", LogLevel::kDebug}, {"warning", LogLevel::kWarn, false}};

template <typename E, size_t N>
std::string wordsAllowed(const Word<E> (&words)[N]) {
  std::string out;
  for (const auto& w : words) {
    if (w.listed) out += std::string(out.empty() ? "one of " : ", ") + w.word;
  }
  return out;
}

template <typename E, size_t N>
const char* wordOf(const Word<E> (&words)[N], E value) {
  for (const auto& w : words) {
    if (w.value == value) return w.word;
  }
  return nullptr;
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
  const char* w = wordOf(kAggregationWords, a);
  return w != nullptr ? w : "?";
}

const char* gpuTimingName(GpuTiming g) {
  const char* w = wordOf(kGpuTimingWords, g);
  return w != nullptr ? w : "?";
}

namespace {

// ---------------------------------------------------------------------------------------------
// The declarations: every ATTNSCOPE_* setting once, with its type, range or words, default and
// help. set(), validate(), variables() (the Python option list, the launchers' help) and
// docs/CONFIGURATION.md (config_doc) are all read from here; the defaults are Config's member
// initialisers, shown through the same declaration.

struct Setting {
  const char* name;
  const char* type;  // bool, int, float, enum, string, path, url, regex
  std::string allowed;
  std::string defaultText;  // as the docs show it
  const char* help;         // one line, plain text
  const char* doc;          // docs/CONFIGURATION.md only (links, details); may be empty
  double lo = 0;            // numeric range (int, float)
  double hi = 0;
  void (*parse)(Config&, const Setting&, const std::string&) = nullptr;
  // Checks the value as the config holds it (also one set from code); throws like parse.
  void (*check)(const Config&, const Setting&) = nullptr;
  const char* what = "";  // enum: what the value is not ("is not a log level")
};

std::string numberText(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

void checkRange(const Setting& s, double v) {
  if (!(v >= s.lo && v <= s.hi)) fail(s.name, numberText(v), "is out of range", s.allowed);
}

template <bool Config::*M>
Setting boolSetting(const char* name, const char* help, const char* doc = "") {
  Setting s{name, "bool", kBoolAllowed, Config{}.*M ? "1" : "0", help, doc};
  s.parse = [](Config& c, const Setting& d, const std::string& v) { c.*M = parseBool(d.name, v); };
  return s;
}

template <int64_t Config::*M>
Setting intSetting(const char* name, int64_t lo, int64_t hi, const char* help, const char* doc = "",
                   const char* defaultText = nullptr) {
  Setting s{name,
            "int",
            "an integer from " + std::to_string(lo) + " to " + std::to_string(hi),
            defaultText != nullptr ? defaultText : std::to_string(Config{}.*M),
            help,
            doc,
            static_cast<double>(lo),
            static_cast<double>(hi)};
  s.parse = [](Config& c, const Setting& d, const std::string& v) {
    c.*M = parseInt(d.name, v, static_cast<int64_t>(d.lo), static_cast<int64_t>(d.hi));
  };
  s.check = [](const Config& c, const Setting& d) {
    if (c.*M < d.lo || c.*M > d.hi)
      fail(d.name, std::to_string(c.*M), "is out of range", d.allowed);
  };
  return s;
}

// A float; with `unsetText`, 0 means unset (shown as that text) and is not range-checked.
template <double Config::*M>
Setting floatSetting(const char* name, double lo, double hi, const char* help, const char* doc = "",
                     const char* allowed = nullptr, const char* unsetText = nullptr) {
  Setting s{
      name,
      "float",
      allowed != nullptr ? allowed : "a number from " + numberText(lo) + " to " + numberText(hi),
      unsetText != nullptr ? unsetText : numberText(Config{}.*M),
      help,
      doc,
      lo,
      hi};
  s.parse = [](Config& c, const Setting& d, const std::string& v) {
    c.*M = parseDouble(d.name, v, d.lo, d.hi, d.allowed);
  };
  if (unsetText != nullptr) {
    s.check = [](const Config& c, const Setting& d) {
      if (c.*M != 0) checkRange(d, c.*M);
    };
  } else {
    s.check = [](const Config& c, const Setting& d) { checkRange(d, c.*M); };
  }
  return s;
}

template <typename E, E Config::*M, const auto& Words>
Setting enumSetting(const char* name, const char* what, const char* help, const char* doc = "") {
  Setting s{name, "enum", wordsAllowed(Words), wordOf(Words, Config{}.*M), help, doc};
  s.what = what;
  s.parse = [](Config& c, const Setting& d, const std::string& v) {
    const std::string l = lower(v);
    for (const auto& w : Words) {
      if (l == w.word) {
        c.*M = w.value;
        return;
      }
    }
    fail(d.name, v, d.what, d.allowed);
  };
  s.check = [](const Config& c, const Setting& d) {
    if (wordOf(Words, c.*M) == nullptr) {
      fail(d.name, std::to_string(static_cast<int>(c.*M)), d.what, d.allowed);
    }
  };
  return s;
}

template <std::string Config::*M>
Setting textSetting(const char* name, const char* type, const char* allowed, const char* help,
                    const char* doc, void (*check)(const Config&, const Setting&),
                    const char* defaultText = nullptr) {
  const std::string def = Config{}.*M;
  Setting s{name,    type,
            allowed, defaultText != nullptr ? defaultText : def.empty() ? "(none)" : def,
            help,    doc};
  s.parse = [](Config& c, const Setting&, const std::string& v) { c.*M = v; };
  s.check = check;
  return s;
}

// The checks of text settings (from the environment and from code alike).
void checkBind(const Config& c, const Setting& s) {
  if (!isIpv4(c.bind)) fail(s.name, c.bind, "is not an IPv4 address", s.allowed);
}

void checkAuth(const Config& c, const Setting&) {
  if (!c.metricsAuth.empty()) c.metricsCredentials();
}

void checkPushgateway(const Config& c, const Setting& s) {
  const std::string& u = c.pushgateway;
  if (u.empty()) return;
  const std::string rest = u.rfind("http://", 0) == 0 ? u.substr(7) : "";
  const auto colon = rest.find(':');
  const std::string host = rest.substr(0, colon);
  std::string portText = colon == std::string::npos ? "" : rest.substr(colon + 1);
  while (!portText.empty() && portText.back() == '/') portText.pop_back();
  if (rest.empty() || host.empty() || portText.empty() ||
      portText.find_first_not_of("0123456789") != std::string::npos || portText.size() > 5 ||
      std::stoi(portText) < 1 || std::stoi(portText) > 65535) {
    fail(s.name, u, "is not an http://host:port URL", s.allowed);
  }
}

void checkToken(const Config& c, const Setting& s) {
  if (c.controlToken.empty()) return;
  bool printable = c.controlToken.size() >= 16;
  for (unsigned char ch : c.controlToken) printable = printable && ch > 32 && ch < 127;
  if (!printable) {
    fail(s.name, "(" + std::to_string(c.controlToken.size()) + " characters, not shown)",
         "is too short or has spaces or control characters", s.allowed);
  }
}

void checkFileSd(const Config& c, const Setting& s) {
  if (!c.fileSd.empty()) checkWritableFile(s.name, c.fileSd, c.fileSd, s.allowed);
}

void checkJob(const Config& c, const Setting& s) {
  if (c.job.empty()) return;
  bool ok = c.job.size() <= 128;
  for (unsigned char ch : c.job)
    ok = ok && (std::isalnum(ch) || ch == '_' || ch == '-' || ch == '.');
  if (!ok) fail(s.name, c.job, "has characters a label value should not carry", s.allowed);
}

void checkSummary(const Config& c, const Setting& s) {
  if (!c.summaryJson.empty()) {
    checkWritableFile(s.name, c.summaryJson, c.summaryPathForRank(0), s.allowed);
  }
}

void checkTraceDir(const Config& c, const Setting& s) {
  if (c.traceDir.empty()) return;
  // The directory itself, or else its nearest existing ancestor (the store creates the rest).
  std::string dir = c.traceDir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  struct stat st {};
  std::string existing = dir;
  while (::stat(existing.c_str(), &st) != 0) {
    const auto slash = existing.rfind('/');
    existing = slash == std::string::npos ? "." : (slash == 0 ? "/" : existing.substr(0, slash));
  }
  if (!S_ISDIR(st.st_mode)) {
    fail(s.name, c.traceDir,
         existing == dir ? "is not a directory"
                         : "cannot be created (" + existing + " is not a directory)",
         s.allowed);
  }
  if (::access(existing.c_str(), W_OK | X_OK) != 0) {
    fail(s.name, c.traceDir,
         existing == dir ? "is not writable"
                         : "cannot be created (" + existing + " is not writable)",
         s.allowed);
  }
}

const std::vector<Setting>& settings() {
  static const std::vector<Setting> kSettings = {
      boolSetting<&Config::enable>(kEnvEnable,
                                   "master switch; 0 makes every attnscope call a no-op"),
      intSetting<&Config::sampleEvery>(
          kEnvSampleEvery, kMinSampleEvery, kMaxSampleEvery,
          "record one training step in N; unsampled steps install no callbacks"),
      floatSetting<&Config::intervalSeconds>(
          kEnvIntervalS, 0.1, 3600,
          "seconds between reporting rounds (aggregation, metrics snapshot, push)"),
      enumSetting<LogLevel, &Config::logLevel, kLogLevelWords>(
          kEnvLogLevel, "is not a log level",
          "stderr verbosity; info prints a per-layer table at stop"),
      textSetting<&Config::summaryJson>(kEnvSummaryJson, "path", kSummaryAllowed,
                                        "write the per-rank JSON summary here at stop",
                                        "[SUMMARY_JSON.md](SUMMARY_JSON.md)", &checkSummary),
      boolSetting<&Config::memory>(
          kEnvMemory,
          "attribute allocations (bytes allocated, peak live bytes) to layers and op kinds"),
      boolSetting<&Config::fusedOps>(kEnvFusedOps,
                                     "recognise fused attention ops outside any AttentionScope "
                                     "(puts a callback on every op of sampled steps)"),
      intSetting<&Config::maxLayers>(
          kEnvMaxLayers, 1, 65536,
          "most distinct attention layer names kept; calls of later names are counted "
          "(dropped_calls), not recorded"),
      enumSetting<Aggregation, &Config::aggregation, kAggregationWords>(
          kEnvAggregation, "is not an aggregation backend",
          "how ranks' figures come together; auto is local for one rank, else gloo when a group "
          "was handed in (Python's attach forms a Gloo side group), else store",
          "[AGGREGATION.md](AGGREGATION.md); `gloo` needs a group handed in, `store` only the "
          "job's store, `mpi` a build with MPI; `nccl` is refused at start-up (why: "
          "AGGREGATION.md)"),
      floatSetting<&Config::stragglerThreshold>(kEnvStragglerThreshold, 1.01, 100,
                                                "a straggler's attention time per step exceeds "
                                                "threshold x the median of the other ranks..."),
      intSetting<&Config::stragglerWindows>(kEnvStragglerWindows, 1, 1000,
                                            "...for this many consecutive reporting windows"),
      floatSetting<&Config::stragglerExitThreshold>(
          kEnvStragglerExitThreshold, 0, 100,
          "a straggler stays one until its score is at or below this (1 to "
          "ATTNSCOPE_STRAGGLER_THRESHOLD; 0: halfway between 1 and the threshold)..."),
      intSetting<&Config::stragglerExitWindows>(
          kEnvStragglerExitWindows, 1, 1000,
          "...for this many consecutive reporting windows (1 and the threshold itself: no "
          "hysteresis)"),
      floatSetting<&Config::cellOutlierFactor>(
          kEnvCellOutlierFactor, 1.01, 100,
          "a rank's (layer, phase, op kind) cell at this factor x the other ranks' time for it..."),
      floatSetting<&Config::cellOutlierMinShare>(
          kEnvCellOutlierMinShare, 0, 1,
          "...with an excess of at least this share of the rank's time in that layer and phase..."),
      floatSetting<&Config::cellOutlierSigmas>(
          kEnvCellOutlierSigmas, 0, 100,
          "...and of at least this many standard errors of the difference (0: not required) is "
          "a cell outlier (for ATTNSCOPE_STRAGGLER_WINDOWS windows; once flagged, half the "
          "factor's excess, half the share and one standard error keep it, until "
          "ATTNSCOPE_STRAGGLER_EXIT_WINDOWS windows without it)"),
      floatSetting<&Config::hangSeconds>(
          kEnvHangS, 1, 86400,
          "report a rank hung when its step counter stands still this long while others move"),
      floatSetting<&Config::roundTimeoutSeconds>(
          kEnvRoundTimeoutS, 1, 3600,
          "longest an aggregation round, the group's set-up or the stop barrier may take"),
      intSetting<&Config::storePort>(
          kEnvStorePort, 0, 65535,
          "port of attnscope's own TCPStore (rank 0 serves it) when neither the program nor "
          "torchrun provides a store; 0 means MASTER_PORT + 1"),
      intSetting<&Config::port>(kEnvPort, 0, 65535,
                                "Prometheus /metrics port of local rank 0; local rank r serves "
                                "port + r; 0 turns the endpoint off",
                                "[METRICS.md](METRICS.md)"),
      textSetting<&Config::bind>(kEnvBind, "string", kBindAllowed,
                                 "address the endpoint listens on; 127.0.0.1 keeps it on the host",
                                 "", &checkBind),
      textSetting<&Config::metricsAuth>(
          kEnvMetricsAuth, "string", kAuthAllowed,
          "HTTP basic auth on /metrics (also sent with pushes); scrapes without it get 401",
          "prefer the file form: the environment is readable in `/proc`", &checkAuth),
      boolSetting<&Config::metricsLayers>(
          kEnvMetricsLayers,
          "per-layer series on every rank; costs about 85 series per layer and phase on each "
          "rank (170 per layer with forward and backward, 6 op kinds and the roofline); off, a "
          "rank serves its totals by phase and op kind and rank 0 the job's per layer "
          "(/control layers=on|off switches one rank)",
          "[METRICS.md](METRICS.md#series-budget)"),
      intSetting<&Config::metricsRanks>(
          kEnvMetricsRanks, 0, 16777216,
          "rank 0 describes every rank one by one (8 series each) up to this world size; beyond, "
          "the 16 highest straggler scores, every flagged rank and the scores' distribution",
          "[METRICS.md](METRICS.md#series-budget)"),
      textSetting<&Config::pushgateway>(
          kEnvPushgateway, "url", kUrlAllowed,
          "push every interval and once more at stop to this Prometheus push gateway", "",
          &checkPushgateway),
      textSetting<&Config::controlToken>(
          kEnvControlToken, "string", kTokenAllowed,
          "enables POST /control for requests with Authorization: Bearer <token>: on rank 0 "
          "pause, resume and the sample rate for the job, on every rank layers=on|off for its "
          "own series",
          "", &checkToken),
      textSetting<&Config::fileSd>(
          kEnvFileSd, "path", kFileAllowed,
          "rank 0 writes a Prometheus file_sd JSON with every rank's endpoint and labels here", "",
          &checkFileSd),
      textSetting<&Config::job>(
          kEnvJob, "string", kJobAllowed,
          "the job label on every series; by default torchrun's run id (--rdzv_id, not its "
          "\"none\"), else <program>-<MASTER_ADDR>-<MASTER_PORT>, the same on every rank",
          "[METRICS.md](METRICS.md#labels)", &checkJob, "(run id or program-address-port)"),
      textSetting<&Config::traceDir>(
          kEnvTraceDir, "path", kTraceDirAllowed,
          "keep this rank's sampled steps, windows and findings in rank-<r>.sqlite here, "
          "committed every interval, for attnscope-analyze; created at start, an older file of "
          "the same rank replaced",
          "[ANALYSIS.md](ANALYSIS.md)", &checkTraceDir),
      intSetting<&Config::traceMaxMb>(
          kEnvTraceMaxMb, 1, 1048576,
          "size cap of one rank's trace file in MiB; past it the oldest step records are deleted "
          "(summaries and findings are kept)"),
      enumSetting<GpuTiming, &Config::gpuTiming, kGpuTimingWords>(
          kEnvGpuTiming, "is not a GPU timing source",
          "device time per layer on GPUs: auto and cupti use CUPTI kernel records when attnscope "
          "can hold CUPTI, else CUDA events (never an error); events only CUDA events; both "
          "CUPTI and events together (a cross-check); ignored without a CUDA device",
          "[GPU.md](GPU.md)"),
      boolSetting<&Config::roofline>(
          kEnvRoofline,
          "on sampled steps, read the input shapes of each top-level attention op and derive its "
          "FLOPs and minimum bytes moved; classify each layer and op kind memory- or "
          "compute-bound against the ceilings",
          "[ROOFLINE.md](ROOFLINE.md); a formula is evaluated only when the shapes change"),
      floatSetting<&Config::peakFlops>(
          kEnvPeakFlops, 1e6, 1e18,
          "the compute ceiling; unset: measured at start (float32 matmul); set it on GPUs "
          "(device timing measures no host ceiling)",
          "", "flop/s as a number from 1e6 to 1e18, such as 9.9e14", "(calibrated)"),
      floatSetting<&Config::peakBandwidth>(
          kEnvPeakBandwidth, 1e6, 1e16,
          "the memory-bandwidth ceiling; unset: measured at start (a 64 MiB copy)", "",
          "bytes/s as a number from 1e6 to 1e16, such as 4.8e12", "(calibrated)"),
      boolSetting<&Config::calibrate>(
          kEnvCalibrate,
          "measure the ceilings that are not set (about 0.3 s on a CPU, once per machine: "
          "later ranks read a cache file); 0: unset ceilings stay unknown and no bound is claimed"),
      textSetting<&Config::attentionModules>(
          kEnvAttentionModules, "regex", kRegexAllowed,
          "Python attach: the matching modules are the attention layers, replacing the "
          "class-name pattern attention|attn; a bad pattern fails at start",
          "[DISCOVERY.md](DISCOVERY.md)", nullptr, "(built-in rule)"),
      textSetting<&Config::attentionExclude>(
          kEnvAttentionExclude, "regex", kRegexAllowed,
          "Python attach: matching modules are never layers (their children still can be)", "",
          nullptr),
  };
  return kSettings;
}

const Setting* findSetting(const std::string& name) {
  for (const Setting& s : settings()) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

}  // namespace

const std::vector<Config::Variable>& Config::variables() {
  static const std::vector<Variable> kVariables = [] {
    std::vector<Variable> out;
    for (const Setting& s : settings()) {
      out.push_back(
          {s.name, s.type, s.defaultText.c_str(), s.allowed.c_str(), s.help, s.doc, s.lo, s.hi});
    }
    return out;
  }();
  return kVariables;
}

const Config::Variable& Config::variable(const std::string& name) {
  for (const Variable& v : variables()) {
    if (name == v.name) return v;
  }
  throw std::invalid_argument("unknown variable " + name);
}

bool Config::set(const std::string& name, const std::string& value) {
  const Setting* s = findSetting(name);
  if (s == nullptr) return false;
  s->parse(*this, *s, value);
  return true;
}

void Config::validate() const {
  // Values set from code bypass set(): every declaration checks the value the config holds.
  for (const Setting& s : settings()) {
    if (s.check != nullptr) s.check(*this, s);
  }
  // Across settings.
  if (stragglerExitThreshold != 0 &&
      (stragglerExitThreshold < 1 || stragglerExitThreshold > stragglerThreshold)) {
    fail(kEnvStragglerExitThreshold, numberText(stragglerExitThreshold),
         stragglerExitThreshold < 1
             ? std::string("is below 1")
             : "is above ATTNSCOPE_STRAGGLER_THRESHOLD (" + numberText(stragglerThreshold) + ")",
         "0 (halfway between 1 and the threshold) or 1 to ATTNSCOPE_STRAGGLER_THRESHOLD (" +
             numberText(stragglerThreshold) + ")");
  }
  if (!roofline && (peakFlops != 0 || peakBandwidth != 0)) {
    fail(peakFlops != 0 ? kEnvPeakFlops : kEnvPeakBandwidth,
         numberText(peakFlops != 0 ? peakFlops : peakBandwidth),
         "has no effect with ATTNSCOPE_ROOFLINE=0", "leave it unset, or set ATTNSCOPE_ROOFLINE=1");
  }
}

std::string Config::markdownTable() {
  std::ostringstream out;
  out << "| variable | type | default | allowed | meaning |\n| --- | --- | --- | --- | --- |\n";
  const auto cell = [](const std::string& text) {
    std::string escaped;
    for (char c : text) {  // a table cell: no column break, no HTML tag
      if (c == '|') {
        escaped += "\\|";
      } else if (c == '<') {
        escaped += "&lt;";
      } else if (c == '>') {
        escaped += "&gt;";
      } else {
        escaped += c;
      }
    }
    return escaped;
  };
  for (const Setting& s : settings()) {
    out << "| `" << s.name << "` | " << s.type << " | `" << cell(s.defaultText) << "` | "
        << cell(s.allowed) << " | " << cell(s.help);
    if (s.doc[0] != '\0') out << " (" << cell(s.doc) << ")";
    out << " |\n";
  }
  return out.str();
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

Config Config::fromEnvironment(std::vector<std::string>* warnings) {
  std::map<std::string, std::string> vars;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    if (entry.rfind("ATTNSCOPE_", 0) != 0) continue;
    const auto eq = entry.find('=');
    if (eq == std::string::npos) continue;
    vars.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return fromVariables(vars, warnings);
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
