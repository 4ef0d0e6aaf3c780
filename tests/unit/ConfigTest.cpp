// Unit tests of attnscope::Config: parsing of every ATTNSCOPE_* variable, the exact error
// messages, validation of values set from code, unknown-name warnings and the defaults.

#include "attnscope/core/Config.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace attnscope {
namespace {

constexpr char kBoolAllowed[] = "one of 1, 0, true, false, on, off, yes, no";
constexpr char kLogLevelAllowed[] = "one of off, error, warn, info, debug";
constexpr char kSampleEveryAllowed[] = "an integer from 1 to 1000000";
constexpr char kIntervalAllowed[] = "a number from 0.1 to 3600";
constexpr char kMaxLayersAllowed[] = "an integer from 1 to 65536";
constexpr char kSummaryAllowed[] =
    "a file path in an existing, writable directory ({rank} expands to the rank)";

// Config::fromVariables with a single variable.
Config fromOne(const std::string& name, const std::string& value) {
  return Config::fromVariables({{name, value}});
}

// The what() of the std::invalid_argument thrown by fn, or a marker when it throws nothing
// (or something else), so that a failing comparison shows what happened.
template <typename Fn>
std::string invalidArgumentMessage(Fn&& fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<other exception: ") + e.what() + ">";
  }
  return "<no exception>";
}

// A fresh, empty directory under testing::TempDir(), removed (with its direct files) afterwards.
class TempDirectory {
 public:
  TempDirectory() {
    std::string pattern = testing::TempDir() + "attnscope_config_XXXXXX";
    char* made = ::mkdtemp(pattern.data());
    if (made == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = made;
  }
  ~TempDirectory() { ::rmdir(path_.c_str()); }
  TempDirectory(const TempDirectory&) = delete;
  TempDirectory& operator=(const TempDirectory&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Sets an environment variable for the lifetime of the guard, restoring the previous state.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// ---------------------------------------------------------------------------------------------
// The list of variables

TEST(ConfigVariablesTest, ListsExactlyTheDocumentedVariables) {
  std::set<std::string> names;
  for (const auto& v : Config::variables()) names.insert(v.name);
  // A new variable must come with tests of its own in this file.
  const std::set<std::string> expected = {kEnvEnable,
                                          kEnvSampleEvery,
                                          kEnvIntervalS,
                                          kEnvLogLevel,
                                          kEnvSummaryJson,
                                          kEnvMemory,
                                          kEnvFusedOps,
                                          kEnvMaxLayers,
                                          kEnvAggregation,
                                          kEnvStragglerThreshold,
                                          kEnvStragglerWindows,
                                          kEnvStragglerExitThreshold,
                                          kEnvStragglerExitWindows,
                                          kEnvCellOutlierFactor,
                                          kEnvCellOutlierMinShare,
                                          kEnvCellOutlierSigmas,
                                          kEnvHangS,
                                          kEnvRoundTimeoutS,
                                          kEnvStorePort,
                                          kEnvPort,
                                          kEnvBind,
                                          kEnvMetricsAuth,
                                          kEnvMetricsLayers,
                                          kEnvMetricsRanks,
                                          kEnvPushgateway,
                                          kEnvControlToken,
                                          kEnvFileSd,
                                          kEnvJob,
                                          kEnvTraceDir,
                                          kEnvTraceMaxMb,
                                          kEnvGpuTiming,
                                          kEnvRoofline,
                                          kEnvPeakFlops,
                                          kEnvPeakBandwidth,
                                          kEnvCalibrate,
                                          kEnvAttentionModules,
                                          kEnvAttentionExclude};
  EXPECT_EQ(names, expected);
  EXPECT_EQ(Config::variables().size(), expected.size()) << "a variable is listed twice";
}

TEST(ConfigVariablesTest, EveryListedVariableIsAcceptedBySet) {
  for (const auto& v : Config::variables()) {
    Config config;
    const std::string name = v.name;
    const bool path = name == kEnvSummaryJson || name == kEnvTraceDir;
    const bool peak = name == kEnvPeakFlops || name == kEnvPeakBandwidth;  // "(calibrated)": unset
    const std::string value = path ? "" : peak ? "1e9" : v.defaultValue;
    EXPECT_TRUE(config.set(v.name, value)) << v.name;
  }
}

TEST(ConfigVariablesTest, DocumentedDefaultsParseToTheDefaultConfig) {
  const Config defaults;
  for (const auto& v : Config::variables()) {
    if (std::string(v.name) == kEnvSummaryJson || std::string(v.name) == kEnvTraceDir) {
      EXPECT_STREQ(v.defaultValue, "(none)");
      continue;
    }
    if (std::string(v.name) == kEnvPeakFlops || std::string(v.name) == kEnvPeakBandwidth) {
      EXPECT_STREQ(v.defaultValue, "(calibrated)");  // unset: 0 in the config, measured at start
      continue;
    }
    Config parsed;
    parsed.set(v.name, v.defaultValue);
    EXPECT_EQ(parsed.enable, defaults.enable) << v.name;
    EXPECT_EQ(parsed.sampleEvery, defaults.sampleEvery) << v.name;
    EXPECT_EQ(parsed.intervalSeconds, defaults.intervalSeconds) << v.name;
    EXPECT_EQ(parsed.logLevel, defaults.logLevel) << v.name;
    EXPECT_EQ(parsed.memory, defaults.memory) << v.name;
    EXPECT_EQ(parsed.fusedOps, defaults.fusedOps) << v.name;
    EXPECT_EQ(parsed.maxLayers, defaults.maxLayers) << v.name;
    EXPECT_EQ(parsed.aggregation, defaults.aggregation) << v.name;
    EXPECT_EQ(parsed.stragglerThreshold, defaults.stragglerThreshold) << v.name;
    EXPECT_EQ(parsed.stragglerWindows, defaults.stragglerWindows) << v.name;
    EXPECT_EQ(parsed.hangSeconds, defaults.hangSeconds) << v.name;
    EXPECT_EQ(parsed.roundTimeoutSeconds, defaults.roundTimeoutSeconds) << v.name;
    EXPECT_EQ(parsed.storePort, defaults.storePort) << v.name;
    EXPECT_EQ(parsed.traceMaxMb, defaults.traceMaxMb) << v.name;
    EXPECT_EQ(parsed.gpuTiming, defaults.gpuTiming) << v.name;
    EXPECT_EQ(parsed.roofline, defaults.roofline) << v.name;
    EXPECT_EQ(parsed.calibrate, defaults.calibrate) << v.name;
  }
}

TEST(ConfigVariablesTest, SetReturnsFalseAndChangesNothingForUnknownName) {
  Config config;
  EXPECT_FALSE(config.set("ATTNSCOPE_SAMPLE_EVRY", "5"));
  EXPECT_FALSE(config.set("SAMPLE_EVERY", "5"));
  EXPECT_EQ(config.sampleEvery, 1);
}

// ---------------------------------------------------------------------------------------------
// Defaults

TEST(ConfigDefaultsTest, DefaultConfigHasDocumentedDefaults) {
  const Config config;
  EXPECT_TRUE(config.enable);
  EXPECT_EQ(config.sampleEvery, 1);
  EXPECT_EQ(config.intervalSeconds, 10.0);
  EXPECT_EQ(config.logLevel, LogLevel::kInfo);
  EXPECT_EQ(config.summaryJson, "");
  EXPECT_TRUE(config.memory);
  EXPECT_FALSE(config.fusedOps);
  EXPECT_EQ(config.maxLayers, 1024);
  EXPECT_EQ(config.summaryPathForRank(0), "");
  EXPECT_EQ(config.gpuTiming, GpuTiming::kAuto);
}

TEST(ConfigDefaultsTest, DefaultConfigValidates) { EXPECT_NO_THROW(Config().validate()); }

TEST(ConfigDefaultsTest, EmptyVariablesGiveDefaults) {
  std::vector<std::string> warnings;
  const Config config = Config::fromVariables({}, &warnings);
  EXPECT_TRUE(warnings.empty());
  EXPECT_TRUE(config.enable);
  EXPECT_EQ(config.sampleEvery, 1);
  EXPECT_EQ(config.intervalSeconds, 10.0);
  EXPECT_EQ(config.logLevel, LogLevel::kInfo);
  EXPECT_EQ(config.summaryJson, "");
  EXPECT_TRUE(config.memory);
  EXPECT_FALSE(config.fusedOps);
  EXPECT_EQ(config.maxLayers, 1024);
}

// ---------------------------------------------------------------------------------------------
// Valid values, one test per variable

TEST(ConfigParseTest, EnableAcceptsEveryBooleanWord) {
  for (const char* word : {"0", "false", "off", "no", "FALSE", "Off", "NO"}) {
    EXPECT_FALSE(fromOne(kEnvEnable, word).enable) << word;
  }
  for (const char* word : {"1", "true", "on", "yes", "TRUE", "On", "Yes"}) {
    EXPECT_TRUE(fromOne(kEnvEnable, word).enable) << word;
  }
}

TEST(ConfigParseTest, SampleEvery) {
  EXPECT_EQ(fromOne(kEnvSampleEvery, "7").sampleEvery, 7);
  EXPECT_EQ(fromOne(kEnvSampleEvery, "1").sampleEvery, 1);
  EXPECT_EQ(fromOne(kEnvSampleEvery, "1000000").sampleEvery, 1000000);
}

TEST(ConfigParseTest, IntervalSeconds) {
  EXPECT_DOUBLE_EQ(fromOne(kEnvIntervalS, "2.5").intervalSeconds, 2.5);
  EXPECT_DOUBLE_EQ(fromOne(kEnvIntervalS, "0.1").intervalSeconds, 0.1);
  EXPECT_DOUBLE_EQ(fromOne(kEnvIntervalS, "3600").intervalSeconds, 3600.0);
  EXPECT_DOUBLE_EQ(fromOne(kEnvIntervalS, "1e2").intervalSeconds, 100.0);
}

TEST(ConfigParseTest, LogLevelAcceptsEveryLevelName) {
  EXPECT_EQ(fromOne(kEnvLogLevel, "off").logLevel, LogLevel::kOff);
  EXPECT_EQ(fromOne(kEnvLogLevel, "error").logLevel, LogLevel::kError);
  EXPECT_EQ(fromOne(kEnvLogLevel, "warn").logLevel, LogLevel::kWarn);
  EXPECT_EQ(fromOne(kEnvLogLevel, "warning").logLevel, LogLevel::kWarn);
  EXPECT_EQ(fromOne(kEnvLogLevel, "info").logLevel, LogLevel::kInfo);
  EXPECT_EQ(fromOne(kEnvLogLevel, "DEBUG").logLevel, LogLevel::kDebug);
}

TEST(ConfigParseTest, SummaryJsonWithRankExpandsPerRank) {
  TempDirectory dir;
  const std::string pattern = dir.path() + "/summary-{rank}.json";
  const Config config = fromOne(kEnvSummaryJson, pattern);
  EXPECT_EQ(config.summaryJson, pattern);
  EXPECT_EQ(config.summaryPathForRank(3), dir.path() + "/summary-3.json");
  EXPECT_EQ(config.summaryPathForRank(0), dir.path() + "/summary-0.json");
}

TEST(ConfigParseTest, SummaryJsonExpandsEveryRankToken) {
  TempDirectory dir;
  const Config config = fromOne(kEnvSummaryJson, dir.path() + "/r{rank}-of-{rank}.json");
  EXPECT_EQ(config.summaryPathForRank(12), dir.path() + "/r12-of-12.json");
}

TEST(ConfigParseTest, SummaryJsonWithoutRankIsUsedAsIs) {
  TempDirectory dir;
  const std::string path = dir.path() + "/summary.json";
  EXPECT_EQ(fromOne(kEnvSummaryJson, path).summaryPathForRank(5), path);
}

TEST(ConfigParseTest, SummaryJsonEmptyMeansNone) {
  const Config config = fromOne(kEnvSummaryJson, "");
  EXPECT_EQ(config.summaryJson, "");
  EXPECT_EQ(config.summaryPathForRank(3), "");
}

TEST(ConfigParseTest, Memory) {
  EXPECT_FALSE(fromOne(kEnvMemory, "0").memory);
  EXPECT_TRUE(fromOne(kEnvMemory, "yes").memory);
}

TEST(ConfigParseTest, FusedOps) {
  EXPECT_TRUE(fromOne(kEnvFusedOps, "1").fusedOps);
  EXPECT_FALSE(fromOne(kEnvFusedOps, "off").fusedOps);
}

TEST(ConfigParseTest, MaxLayers) {
  EXPECT_EQ(fromOne(kEnvMaxLayers, "64").maxLayers, 64);
  EXPECT_EQ(fromOne(kEnvMaxLayers, "1").maxLayers, 1);
  EXPECT_EQ(fromOne(kEnvMaxLayers, "65536").maxLayers, 65536);
}

TEST(ConfigParseTest, Aggregation) {
  EXPECT_EQ(fromOne(kEnvAggregation, "gloo").aggregation, Aggregation::kGloo);
  EXPECT_EQ(fromOne(kEnvAggregation, "MPI").aggregation, Aggregation::kMpi);
  EXPECT_EQ(fromOne(kEnvAggregation, "nccl").aggregation, Aggregation::kNccl);
  EXPECT_EQ(fromOne(kEnvAggregation, "local").aggregation, Aggregation::kLocal);
  EXPECT_EQ(fromOne(kEnvAggregation, "none").aggregation, Aggregation::kNone);
  EXPECT_EQ(fromOne(kEnvAggregation, "auto").aggregation, Aggregation::kAuto);
  EXPECT_STREQ(aggregationName(Aggregation::kGloo), "gloo");
}

TEST(ConfigParseTest, Roofline) {
  const Config defaults;
  EXPECT_TRUE(defaults.roofline);
  EXPECT_TRUE(defaults.calibrate);
  EXPECT_EQ(defaults.peakFlops, 0.0);
  EXPECT_EQ(defaults.peakBandwidth, 0.0);
  EXPECT_FALSE(fromOne(kEnvRoofline, "0").roofline);
  EXPECT_FALSE(fromOne(kEnvCalibrate, "off").calibrate);
  EXPECT_EQ(fromOne(kEnvPeakFlops, "9.9e14").peakFlops, 9.9e14);
  EXPECT_EQ(fromOne(kEnvPeakBandwidth, "4800000000000").peakBandwidth, 4.8e12);
  EXPECT_EQ(invalidArgumentMessage([] { fromOne(kEnvPeakFlops, "fast"); }),
            "ATTNSCOPE_PEAK_FLOPS=\"fast\" is not a number; allowed: flop/s as a number from 1e6 "
            "to 1e18, "
            "such as 9.9e14");
  EXPECT_EQ(invalidArgumentMessage([] { fromOne(kEnvPeakFlops, "1000"); }),
            "ATTNSCOPE_PEAK_FLOPS=\"1000\" is out of range; allowed: flop/s as a number from 1e6 "
            "to 1e18, "
            "such as 9.9e14");
  EXPECT_EQ(
      invalidArgumentMessage([] { fromOne(kEnvPeakBandwidth, "-1"); }),
      "ATTNSCOPE_PEAK_BANDWIDTH=\"-1\" is out of range; allowed: bytes/s as a number from 1e6 to "
      "1e16, such as 4.8e12");
  // Ceilings for a roofline that is off: a contradiction, refused at start.
  EXPECT_EQ(invalidArgumentMessage([] {
              Config::fromVariables({{kEnvRoofline, "0"}, {kEnvPeakBandwidth, "1e12"}});
            }),
            "ATTNSCOPE_PEAK_BANDWIDTH=\"1e+12\" has no effect with ATTNSCOPE_ROOFLINE=0; allowed: "
            "leave it "
            "unset, or set ATTNSCOPE_ROOFLINE=1");
  // Values set from code are checked by validate() like those from the environment.
  Config fromCode;
  fromCode.peakFlops = 5;
  EXPECT_EQ(invalidArgumentMessage([&] { fromCode.validate(); }),
            "ATTNSCOPE_PEAK_FLOPS=\"5\" is out of range; allowed: flop/s as a number from 1e6 to "
            "1e18, such "
            "as 9.9e14");
}

TEST(ConfigParseTest, GpuTiming) {
  EXPECT_EQ(fromOne(kEnvGpuTiming, "auto").gpuTiming, GpuTiming::kAuto);
  EXPECT_EQ(fromOne(kEnvGpuTiming, "CUPTI").gpuTiming, GpuTiming::kCupti);
  EXPECT_EQ(fromOne(kEnvGpuTiming, "events").gpuTiming, GpuTiming::kEvents);
  EXPECT_EQ(fromOne(kEnvGpuTiming, "both").gpuTiming, GpuTiming::kBoth);
  EXPECT_EQ(fromOne(kEnvGpuTiming, "Off").gpuTiming, GpuTiming::kOff);
  EXPECT_STREQ(gpuTimingName(GpuTiming::kEvents), "events");
  EXPECT_STREQ(gpuTimingName(GpuTiming::kBoth), "both");
}

TEST(ConfigParseTest, StragglerSettings) {
  EXPECT_DOUBLE_EQ(fromOne(kEnvStragglerThreshold, "1.5").stragglerThreshold, 1.5);
  EXPECT_EQ(fromOne(kEnvStragglerWindows, "5").stragglerWindows, 5);
  EXPECT_DOUBLE_EQ(fromOne(kEnvHangS, "60").hangSeconds, 60.0);
  EXPECT_DOUBLE_EQ(fromOne(kEnvRoundTimeoutS, "2.5").roundTimeoutSeconds, 2.5);
  EXPECT_EQ(fromOne(kEnvStorePort, "29600").storePort, 29600);
}

TEST(ConfigParseTest, SeveralVariablesAtOnce) {
  const Config config = Config::fromVariables({{kEnvEnable, "0"},
                                               {kEnvSampleEvery, "4"},
                                               {kEnvIntervalS, "0.5"},
                                               {kEnvLogLevel, "debug"},
                                               {kEnvMemory, "0"},
                                               {kEnvFusedOps, "1"},
                                               {kEnvMaxLayers, "8"}});
  EXPECT_FALSE(config.enable);
  EXPECT_EQ(config.sampleEvery, 4);
  EXPECT_DOUBLE_EQ(config.intervalSeconds, 0.5);
  EXPECT_EQ(config.logLevel, LogLevel::kDebug);
  EXPECT_FALSE(config.memory);
  EXPECT_TRUE(config.fusedOps);
  EXPECT_EQ(config.maxLayers, 8);
}

// ---------------------------------------------------------------------------------------------
// Invalid values: one test per variable and failure kind, each with its exact message.

struct InvalidCase {
  const char* test;  // test name suffix
  const char* name;
  std::string value;
  std::string message;
};

std::string msg(const char* name, const std::string& value, const char* what, const char* allowed) {
  return std::string(name) + "=\"" + value + "\" " + what + "; allowed: " + allowed;
}

// Readable parameter in failure output.
void PrintTo(const InvalidCase& c, std::ostream* os) { *os << c.name << "=\"" << c.value << "\""; }

class ConfigInvalidValueTest : public testing::TestWithParam<InvalidCase> {};

TEST_P(ConfigInvalidValueTest, ThrowsInvalidArgumentWithExactMessage) {
  const InvalidCase& c = GetParam();
  EXPECT_EQ(invalidArgumentMessage([&] { fromOne(c.name, c.value); }), c.message);
  // set() alone rejects it too, before any validate().
  Config config;
  EXPECT_EQ(invalidArgumentMessage([&] { config.set(c.name, c.value); }), c.message);
}

// The literal messages below are what users see; keep them spelled out.
INSTANTIATE_TEST_SUITE_P(
    AllVariables, ConfigInvalidValueTest,
    testing::Values(
        // ATTNSCOPE_ENABLE (bool)
        InvalidCase{"Enable_NotAllowedWord", kEnvEnable, "maybe",
                    "ATTNSCOPE_ENABLE=\"maybe\" is not a boolean; allowed: one of 1, 0, true, "
                    "false, on, off, yes, no"},
        InvalidCase{"Enable_NotAllowedNumber", kEnvEnable, "2",
                    msg(kEnvEnable, "2", "is not a boolean", kBoolAllowed)},
        InvalidCase{"Enable_Empty", kEnvEnable, "",
                    msg(kEnvEnable, "", "is not a boolean", kBoolAllowed)},
        // ATTNSCOPE_SAMPLE_EVERY (int 1..1000000)
        InvalidCase{"SampleEvery_NotAnInteger", kEnvSampleEvery, "often",
                    "ATTNSCOPE_SAMPLE_EVERY=\"often\" is not an integer; allowed: an integer "
                    "from 1 to 1000000"},
        InvalidCase{"SampleEvery_Fraction", kEnvSampleEvery, "2.5",
                    msg(kEnvSampleEvery, "2.5", "is not an integer", kSampleEveryAllowed)},
        InvalidCase{"SampleEvery_TrailingGarbage", kEnvSampleEvery, "10x",
                    msg(kEnvSampleEvery, "10x", "is not an integer", kSampleEveryAllowed)},
        InvalidCase{"SampleEvery_OutOfRangeLow", kEnvSampleEvery, "0",
                    "ATTNSCOPE_SAMPLE_EVERY=\"0\" is out of range; allowed: an integer from 1 "
                    "to 1000000"},
        InvalidCase{"SampleEvery_Negative", kEnvSampleEvery, "-3",
                    msg(kEnvSampleEvery, "-3", "is out of range", kSampleEveryAllowed)},
        InvalidCase{"SampleEvery_OutOfRangeHigh", kEnvSampleEvery, "1000001",
                    msg(kEnvSampleEvery, "1000001", "is out of range", kSampleEveryAllowed)},
        InvalidCase{"SampleEvery_Overflow", kEnvSampleEvery, "99999999999999999999999",
                    msg(kEnvSampleEvery, "99999999999999999999999", "is out of range",
                        kSampleEveryAllowed)},
        InvalidCase{"SampleEvery_Empty", kEnvSampleEvery, "",
                    "ATTNSCOPE_SAMPLE_EVERY=\"\" is empty; allowed: an integer from 1 to "
                    "1000000"},
        // ATTNSCOPE_INTERVAL_S (float 0.1..3600)
        InvalidCase{"IntervalS_NotANumber", kEnvIntervalS, "soon",
                    "ATTNSCOPE_INTERVAL_S=\"soon\" is not a number; allowed: a number from 0.1 "
                    "to 3600"},
        InvalidCase{"IntervalS_TrailingUnit", kEnvIntervalS, "10s",
                    msg(kEnvIntervalS, "10s", "is not a number", kIntervalAllowed)},
        InvalidCase{"IntervalS_OutOfRangeLow", kEnvIntervalS, "0.05",
                    "ATTNSCOPE_INTERVAL_S=\"0.05\" is out of range; allowed: a number from 0.1 "
                    "to 3600"},
        InvalidCase{"IntervalS_OutOfRangeHigh", kEnvIntervalS, "3600.5",
                    msg(kEnvIntervalS, "3600.5", "is out of range", kIntervalAllowed)},
        InvalidCase{"IntervalS_NaN", kEnvIntervalS, "nan",
                    msg(kEnvIntervalS, "nan", "is out of range", kIntervalAllowed)},
        InvalidCase{"IntervalS_Infinite", kEnvIntervalS, "inf",
                    msg(kEnvIntervalS, "inf", "is out of range", kIntervalAllowed)},
        InvalidCase{"IntervalS_Empty", kEnvIntervalS, "",
                    "ATTNSCOPE_INTERVAL_S=\"\" is empty; allowed: a number from 0.1 to 3600"},
        // ATTNSCOPE_LOG_LEVEL (enum)
        InvalidCase{"LogLevel_NotAllowedWord", kEnvLogLevel, "verbose",
                    "ATTNSCOPE_LOG_LEVEL=\"verbose\" is not a log level; allowed: one of off, "
                    "error, warn, info, debug"},
        InvalidCase{"LogLevel_Number", kEnvLogLevel, "3",
                    msg(kEnvLogLevel, "3", "is not a log level", kLogLevelAllowed)},
        InvalidCase{"LogLevel_Empty", kEnvLogLevel, "",
                    msg(kEnvLogLevel, "", "is not a log level", kLogLevelAllowed)},
        // ATTNSCOPE_MEMORY (bool)
        InvalidCase{"Memory_NotAllowedWord", kEnvMemory, "enabled",
                    "ATTNSCOPE_MEMORY=\"enabled\" is not a boolean; allowed: one of 1, 0, true, "
                    "false, on, off, yes, no"},
        InvalidCase{"Memory_Empty", kEnvMemory, "",
                    msg(kEnvMemory, "", "is not a boolean", kBoolAllowed)},
        // ATTNSCOPE_FUSED_OPS (bool)
        InvalidCase{"FusedOps_NotAllowedWord", kEnvFusedOps, "y",
                    "ATTNSCOPE_FUSED_OPS=\"y\" is not a boolean; allowed: one of 1, 0, true, "
                    "false, on, off, yes, no"},
        InvalidCase{"FusedOps_Empty", kEnvFusedOps, "",
                    msg(kEnvFusedOps, "", "is not a boolean", kBoolAllowed)},
        // ATTNSCOPE_AGGREGATION (enum)
        InvalidCase{"Aggregation_NotAllowedWord", kEnvAggregation, "tcp",
                    "ATTNSCOPE_AGGREGATION=\"tcp\" is not an aggregation backend; allowed: one "
                    "of auto, gloo, store, nccl, mpi, local, none"},
        InvalidCase{"Aggregation_Empty", kEnvAggregation, "",
                    "ATTNSCOPE_AGGREGATION=\"\" is not an aggregation backend; allowed: one of "
                    "auto, gloo, store, nccl, mpi, local, none"},
        // ATTNSCOPE_GPU_TIMING (enum)
        InvalidCase{"GpuTiming_NotAllowedWord", kEnvGpuTiming, "nvtx",
                    "ATTNSCOPE_GPU_TIMING=\"nvtx\" is not a GPU timing source; allowed: one of "
                    "auto, cupti, events, both, off"},
        InvalidCase{"GpuTiming_Empty", kEnvGpuTiming, "",
                    "ATTNSCOPE_GPU_TIMING=\"\" is not a GPU timing source; allowed: one of auto, "
                    "cupti, events, both, off"},
        // ATTNSCOPE_STRAGGLER_THRESHOLD (float 1.01..100)
        InvalidCase{"StragglerThreshold_NotANumber", kEnvStragglerThreshold, "high",
                    "ATTNSCOPE_STRAGGLER_THRESHOLD=\"high\" is not a number; allowed: a number "
                    "from 1.01 to 100"},
        InvalidCase{"StragglerThreshold_OutOfRangeLow", kEnvStragglerThreshold, "1",
                    "ATTNSCOPE_STRAGGLER_THRESHOLD=\"1\" is out of range; allowed: a number "
                    "from 1.01 to 100"},
        InvalidCase{"StragglerThreshold_OutOfRangeHigh", kEnvStragglerThreshold, "101",
                    "ATTNSCOPE_STRAGGLER_THRESHOLD=\"101\" is out of range; allowed: a number "
                    "from 1.01 to 100"},
        InvalidCase{"StragglerThreshold_Empty", kEnvStragglerThreshold, "",
                    "ATTNSCOPE_STRAGGLER_THRESHOLD=\"\" is empty; allowed: a number from 1.01 "
                    "to 100"},
        // ATTNSCOPE_STRAGGLER_WINDOWS (int 1..1000)
        InvalidCase{"StragglerWindows_NotAnInteger", kEnvStragglerWindows, "three",
                    "ATTNSCOPE_STRAGGLER_WINDOWS=\"three\" is not an integer; allowed: an "
                    "integer from 1 to 1000"},
        InvalidCase{"StragglerWindows_OutOfRangeLow", kEnvStragglerWindows, "0",
                    "ATTNSCOPE_STRAGGLER_WINDOWS=\"0\" is out of range; allowed: an integer "
                    "from 1 to 1000"},
        InvalidCase{"StragglerWindows_OutOfRangeHigh", kEnvStragglerWindows, "1001",
                    "ATTNSCOPE_STRAGGLER_WINDOWS=\"1001\" is out of range; allowed: an integer "
                    "from 1 to 1000"},
        // ATTNSCOPE_HANG_S (float 1..86400)
        InvalidCase{"HangS_NotANumber", kEnvHangS, "long",
                    "ATTNSCOPE_HANG_S=\"long\" is not a number; allowed: a number from 1 to "
                    "86400"},
        InvalidCase{"HangS_OutOfRangeLow", kEnvHangS, "0.5",
                    "ATTNSCOPE_HANG_S=\"0.5\" is out of range; allowed: a number from 1 to "
                    "86400"},
        InvalidCase{"HangS_OutOfRangeHigh", kEnvHangS, "90000",
                    "ATTNSCOPE_HANG_S=\"90000\" is out of range; allowed: a number from 1 to "
                    "86400"},
        // ATTNSCOPE_ROUND_TIMEOUT_S (float 1..3600)
        InvalidCase{"RoundTimeoutS_NotANumber", kEnvRoundTimeoutS, "5s",
                    "ATTNSCOPE_ROUND_TIMEOUT_S=\"5s\" is not a number; allowed: a number from 1 "
                    "to 3600"},
        InvalidCase{"RoundTimeoutS_OutOfRangeLow", kEnvRoundTimeoutS, "0",
                    "ATTNSCOPE_ROUND_TIMEOUT_S=\"0\" is out of range; allowed: a number from 1 "
                    "to 3600"},
        // ATTNSCOPE_STORE_PORT (int 0..65535)
        InvalidCase{"StorePort_NotAnInteger", kEnvStorePort, "http",
                    "ATTNSCOPE_STORE_PORT=\"http\" is not an integer; allowed: an integer from 0 "
                    "to 65535"},
        InvalidCase{"StorePort_OutOfRangeHigh", kEnvStorePort, "65536",
                    "ATTNSCOPE_STORE_PORT=\"65536\" is out of range; allowed: an integer from 0 "
                    "to 65535"},
        // ATTNSCOPE_TRACE_MAX_MB (int 1..1048576)
        InvalidCase{"TraceMaxMb_NotAnInteger", kEnvTraceMaxMb, "1G",
                    "ATTNSCOPE_TRACE_MAX_MB=\"1G\" is not an integer; allowed: an integer from 1 "
                    "to 1048576"},
        InvalidCase{"TraceMaxMb_OutOfRangeLow", kEnvTraceMaxMb, "0",
                    "ATTNSCOPE_TRACE_MAX_MB=\"0\" is out of range; allowed: an integer from 1 "
                    "to 1048576"},
        InvalidCase{"TraceMaxMb_OutOfRangeHigh", kEnvTraceMaxMb, "1048577",
                    "ATTNSCOPE_TRACE_MAX_MB=\"1048577\" is out of range; allowed: an integer "
                    "from 1 to 1048576"},
        // ATTNSCOPE_MAX_LAYERS (int 1..65536)
        InvalidCase{"MaxLayers_NotAnInteger", kEnvMaxLayers, "many",
                    "ATTNSCOPE_MAX_LAYERS=\"many\" is not an integer; allowed: an integer from 1 "
                    "to 65536"},
        InvalidCase{"MaxLayers_Fraction", kEnvMaxLayers, "1.5",
                    msg(kEnvMaxLayers, "1.5", "is not an integer", kMaxLayersAllowed)},
        InvalidCase{"MaxLayers_OutOfRangeLow", kEnvMaxLayers, "0",
                    "ATTNSCOPE_MAX_LAYERS=\"0\" is out of range; allowed: an integer from 1 to "
                    "65536"},
        InvalidCase{"MaxLayers_OutOfRangeHigh", kEnvMaxLayers, "65537",
                    msg(kEnvMaxLayers, "65537", "is out of range", kMaxLayersAllowed)},
        InvalidCase{"MaxLayers_Empty", kEnvMaxLayers, "",
                    "ATTNSCOPE_MAX_LAYERS=\"\" is empty; allowed: an integer from 1 to 65536"}),
    [](const testing::TestParamInfo<InvalidCase>& info) { return std::string(info.param.test); });

// ---------------------------------------------------------------------------------------------
// ATTNSCOPE_SUMMARY_JSON: checked against the file system by validate()

TEST(ConfigSummaryJsonTest, NonExistentDirectoryThrowsExactMessage) {
  TempDirectory dir;
  const std::string missing = dir.path() + "/does-not-exist";
  const std::string value = missing + "/summary-{rank}.json";
  EXPECT_EQ(invalidArgumentMessage([&] { fromOne(kEnvSummaryJson, value); }),
            "ATTNSCOPE_SUMMARY_JSON=\"" + value + "\" is in a directory that does not exist (" +
                missing +
                "); allowed: a file path in an existing, writable directory ({rank} expands to "
                "the rank)");
}

TEST(ConfigSummaryJsonTest, DirectoryThatIsAFileThrows) {
  TempDirectory dir;
  const std::string file = dir.path() + "/plain-file";
  ASSERT_EQ(::close(::creat(file.c_str(), 0644)), 0);
  const std::string value = file + "/summary.json";
  const std::string message = invalidArgumentMessage([&] { fromOne(kEnvSummaryJson, value); });
  ::unlink(file.c_str());
  EXPECT_EQ(message,
            msg(kEnvSummaryJson, value,
                ("is in a directory that does not exist (" + file + ")").c_str(), kSummaryAllowed));
}

TEST(ConfigSummaryJsonTest, PathEndingInSlashThrowsExactMessage) {
  TempDirectory dir;
  const std::string value = dir.path() + "/";
  EXPECT_EQ(invalidArgumentMessage([&] { fromOne(kEnvSummaryJson, value); }),
            "ATTNSCOPE_SUMMARY_JSON=\"" + value +
                "\" names a directory; allowed: a file path in an existing, writable directory "
                "({rank} expands to the rank)");
}

TEST(ConfigSummaryJsonTest, RelativePathIsCheckedInTheWorkingDirectory) {
  TempDirectory dir;
  std::string previous(4096, '\0');
  ASSERT_NE(::getcwd(previous.data(), previous.size()), nullptr);
  ASSERT_EQ(::chdir(dir.path().c_str()), 0);
  std::string relative, missing;
  try {
    relative = fromOne(kEnvSummaryJson, "summary-{rank}.json").summaryPathForRank(3);
  } catch (const std::exception& e) {
    relative = e.what();
  }
  missing = invalidArgumentMessage([] { fromOne(kEnvSummaryJson, "sub/summary.json"); });
  ASSERT_EQ(::chdir(previous.c_str()), 0);
  EXPECT_EQ(relative, "summary-3.json");
  EXPECT_EQ(missing, msg(kEnvSummaryJson, "sub/summary.json",
                         "is in a directory that does not exist (sub)", kSummaryAllowed));
}

TEST(ConfigSummaryJsonTest, SetFromCodeIsCheckedByValidate) {
  TempDirectory dir;
  Config config;
  config.summaryJson = dir.path() + "/missing/s.json";
  EXPECT_EQ(invalidArgumentMessage([&] { config.validate(); }),
            msg(kEnvSummaryJson, config.summaryJson,
                ("is in a directory that does not exist (" + dir.path() + "/missing)").c_str(),
                kSummaryAllowed));
  config.summaryJson = dir.path() + "/s-{rank}.json";
  EXPECT_NO_THROW(config.validate());
}

// ---------------------------------------------------------------------------------------------
// Values set from code, caught by validate()

TEST(ConfigValidateTest, SampleEveryOutOfRangeFromCode) {
  Config config;
  config.sampleEvery = 0;
  EXPECT_EQ(invalidArgumentMessage([&] { config.validate(); }),
            "ATTNSCOPE_SAMPLE_EVERY=\"0\" is out of range; allowed: an integer from 1 to 1000000");
  config.sampleEvery = 1000001;
  EXPECT_EQ(invalidArgumentMessage([&] { config.validate(); }),
            msg(kEnvSampleEvery, "1000001", "is out of range", kSampleEveryAllowed));
  config.sampleEvery = 1000000;
  EXPECT_NO_THROW(config.validate());
}

TEST(ConfigValidateTest, GpuTimingOutOfRangeFromCode) {
  Config config;
  config.gpuTiming = static_cast<GpuTiming>(9);
  EXPECT_EQ(invalidArgumentMessage([&] { config.validate(); }),
            "ATTNSCOPE_GPU_TIMING=\"9\" is not a GPU timing source; allowed: one of auto, cupti, "
            "events, both, off");
  config.gpuTiming = GpuTiming::kOff;
  EXPECT_NO_THROW(config.validate());
}

TEST(ConfigValidateTest, IntervalSecondsOutOfRangeFromCode) {
  Config config;
  config.intervalSeconds = 0.05;
  EXPECT_EQ(invalidArgumentMessage([&] { config.validate(); }),
            "ATTNSCOPE_INTERVAL_S=\"0.05\" is out of range; allowed: a number from 0.1 to 3600");
  config.intervalSeconds = 7200;
  EXPECT_EQ(invalidArgumentMessage([&] { config.validate(); }),
            msg(kEnvIntervalS, "7200", "is out of range", kIntervalAllowed));
  config.intervalSeconds = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(invalidArgumentMessage([&] { config.validate(); }),
            msg(kEnvIntervalS, "nan", "is out of range", kIntervalAllowed));
  config.intervalSeconds = 0.1;
  EXPECT_NO_THROW(config.validate());
}

TEST(ConfigValidateTest, MaxLayersOutOfRangeFromCode) {
  Config config;
  config.maxLayers = 0;
  EXPECT_EQ(invalidArgumentMessage([&] { config.validate(); }),
            "ATTNSCOPE_MAX_LAYERS=\"0\" is out of range; allowed: an integer from 1 to 65536");
  config.maxLayers = 65537;
  EXPECT_EQ(invalidArgumentMessage([&] { config.validate(); }),
            msg(kEnvMaxLayers, "65537", "is out of range", kMaxLayersAllowed));
  config.maxLayers = 65536;
  EXPECT_NO_THROW(config.validate());
}

// ---------------------------------------------------------------------------------------------
// Unknown names

TEST(ConfigUnknownVariableTest, NearMissWarnsWithSuggestion) {
  std::vector<std::string> warnings;
  const Config config = Config::fromVariables({{"ATTNSCOPE_SAMPLE_EVRY", "5"}}, &warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0],
            "unknown variable ATTNSCOPE_SAMPLE_EVRY is ignored (did you mean "
            "ATTNSCOPE_SAMPLE_EVERY?)");
  EXPECT_EQ(config.sampleEvery, 1);  // ignored, not applied
}

TEST(ConfigUnknownVariableTest, OtherNearMissesSuggestTheClosestName) {
  std::vector<std::string> warnings;
  Config::fromVariables({{"ATTNSCOPE_MAXLAYERS", "5"}, {"ATTNSCOPE_FUSED_OP", "1"}}, &warnings);
  ASSERT_EQ(warnings.size(), 2u);
  // std::map order: FUSED_OP < MAXLAYERS.
  EXPECT_EQ(warnings[0],
            "unknown variable ATTNSCOPE_FUSED_OP is ignored (did you mean ATTNSCOPE_FUSED_OPS?)");
  EXPECT_EQ(warnings[1],
            "unknown variable ATTNSCOPE_MAXLAYERS is ignored (did you mean "
            "ATTNSCOPE_MAX_LAYERS?)");
}

TEST(ConfigUnknownVariableTest, FarNameWarnsWithoutSuggestion) {
  std::vector<std::string> warnings;
  Config::fromVariables({{"ATTNSCOPE_COMPLETELY_DIFFERENT_THING", "1"}}, &warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], "unknown variable ATTNSCOPE_COMPLETELY_DIFFERENT_THING is ignored");
}

TEST(ConfigUnknownVariableTest, NonAttnscopeNamesAreIgnoredSilently) {
  std::vector<std::string> warnings;
  const Config config = Config::fromVariables({{"PATH", "/usr/bin"},
                                               {"SAMPLE_EVERY", "5"},
                                               {"attnscope_sample_every", "5"},
                                               {"XATTNSCOPE_ENABLE", "0"}},
                                              &warnings);
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(config.sampleEvery, 1);
  EXPECT_TRUE(config.enable);
}

TEST(ConfigUnknownVariableTest, KnownVariablesStillApplyNextToUnknownOnes) {
  std::vector<std::string> warnings;
  const Config config =
      Config::fromVariables({{"ATTNSCOPE_SAMPLE_EVRY", "5"}, {kEnvSampleEvery, "3"}}, &warnings);
  EXPECT_EQ(warnings.size(), 1u);
  EXPECT_EQ(config.sampleEvery, 3);
}

// ---------------------------------------------------------------------------------------------
// The process environment

TEST(ConfigEnvironmentTest, ReadsVariableSetWithSetenv) {
  ScopedEnv env(kEnvSampleEvery, "9");
  EXPECT_EQ(Config::fromEnvironment().sampleEvery, 9);
}

TEST(ConfigEnvironmentTest, UnsetVariableGivesDefault) {
  {
    ScopedEnv env(kEnvMaxLayers, "17");
    EXPECT_EQ(Config::fromEnvironment().maxLayers, 17);
  }
  EXPECT_EQ(std::getenv(kEnvMaxLayers), nullptr);
  EXPECT_EQ(Config::fromEnvironment().maxLayers, 1024);
}

TEST(ConfigEnvironmentTest, BadValueInEnvironmentThrows) {
  ScopedEnv env(kEnvIntervalS, "0");
  EXPECT_EQ(invalidArgumentMessage([] { Config::fromEnvironment(); }),
            msg(kEnvIntervalS, "0", "is out of range", kIntervalAllowed));
}

// ---------------------------------------------------------------------------------------------
// Prometheus export

TEST(ConfigMetricsTest, DefaultsServePort9464OnEveryInterface) {
  const Config config = Config::fromVariables({});
  EXPECT_EQ(config.port, 9464);
  EXPECT_EQ(config.bind, "0.0.0.0");
  EXPECT_FALSE(config.metricsLayers);  // a rank's totals; the job's layers are rank 0's
  EXPECT_EQ(config.metricsRanks, 1024);
  EXPECT_EQ(config.metricsCredentials(), "");
  EXPECT_EQ(config.pushgateway, "");
  EXPECT_EQ(config.controlToken, "");
}

TEST(ConfigMetricsTest, PortAndBind) {
  EXPECT_EQ(fromOne(kEnvPort, "0").port, 0);
  EXPECT_EQ(fromOne(kEnvPort, "19000").port, 19000);
  EXPECT_EQ(invalidArgumentMessage([] { fromOne(kEnvPort, "70000"); }),
            "ATTNSCOPE_PORT=\"70000\" is out of range; allowed: an integer from 0 to 65535");
  EXPECT_EQ(fromOne(kEnvBind, "127.0.0.1").bind, "127.0.0.1");
  EXPECT_EQ(
      invalidArgumentMessage([] { fromOne(kEnvBind, "localhost:80"); }),
      "ATTNSCOPE_BIND=\"localhost:80\" is not an IPv4 address; allowed: an IPv4 address such as "
      "0.0.0.0 or 127.0.0.1");
}

TEST(ConfigMetricsTest, AuthInlineOrFromAFile) {
  EXPECT_EQ(fromOne(kEnvMetricsAuth, "prom:pw").metricsCredentials(), "prom:pw");
  TempDirectory dir;
  const std::string file = dir.path() + "/auth";
  {
    FILE* f = std::fopen(file.c_str(), "w");
    std::fputs("scraper:long secret\n", f);
    std::fclose(f);
  }
  EXPECT_EQ(fromOne(kEnvMetricsAuth, "@" + file).metricsCredentials(), "scraper:long secret");
  ::unlink(file.c_str());
  EXPECT_EQ(
      invalidArgumentMessage([&] { fromOne(kEnvMetricsAuth, "@" + file); }),
      "ATTNSCOPE_METRICS_AUTH=\"@" + file +
          "\" names a file that cannot be read; allowed: user:password, or @/path/to/file holding "
          "user:password");
  // The password is never echoed back.
  EXPECT_EQ(
      invalidArgumentMessage([] { fromOne(kEnvMetricsAuth, "justapassword"); }),
      "ATTNSCOPE_METRICS_AUTH=\"(not shown)\" is not user:password with both parts non-empty; "
      "allowed: user:password, or @/path/to/file holding user:password");
}

TEST(ConfigMetricsTest, Pushgateway) {
  EXPECT_EQ(fromOne(kEnvPushgateway, "http://pushgw:9091").pushgateway, "http://pushgw:9091");
  EXPECT_EQ(fromOne(kEnvPushgateway, "http://127.0.0.1:9091/").pushgateway,
            "http://127.0.0.1:9091/");
  for (const char* bad : {"pushgw:9091", "https://pushgw:9091", "http://pushgw", "http://:9091",
                          "http://pushgw:0", "http://pushgw:99999", "http://pushgw:90x1"}) {
    EXPECT_EQ(
        invalidArgumentMessage([&] { fromOne(kEnvPushgateway, bad); }),
        std::string("ATTNSCOPE_PUSHGATEWAY=\"") + bad +
            "\" is not an http://host:port URL; allowed: an http:// URL with a host and a port, "
            "such as http://pushgw:9091")
        << bad;
  }
}

TEST(ConfigMetricsTest, ControlTokenMustBeLongAndPrintableAndIsNeverEchoed) {
  EXPECT_EQ(fromOne(kEnvControlToken, "0123456789abcdef").controlToken, "0123456789abcdef");
  EXPECT_EQ(
      invalidArgumentMessage([] { fromOne(kEnvControlToken, "short"); }),
      "ATTNSCOPE_CONTROL_TOKEN=\"(5 characters, not shown)\" is too short or has spaces or control "
      "characters; allowed: a token of 16 or more printable characters");
  EXPECT_NE(invalidArgumentMessage([] { fromOne(kEnvControlToken, "0123456789 abcdef"); }),
            "<no exception>");
}

TEST(ConfigMetricsTest, FileSdDirectoryMustExist) {
  TempDirectory dir;
  EXPECT_EQ(fromOne(kEnvFileSd, dir.path() + "/targets.json").fileSd, dir.path() + "/targets.json");
  EXPECT_EQ(
      invalidArgumentMessage([] { fromOne(kEnvFileSd, "/nonexistent-attnscope/t.json"); }),
      "ATTNSCOPE_FILE_SD=\"/nonexistent-attnscope/t.json\" is in a directory that does not exist "
      "(/nonexistent-attnscope); allowed: a file path in an existing, writable directory");
}

TEST(ConfigMetricsTest, JobAndLayerLabels) {
  EXPECT_EQ(fromOne(kEnvJob, "bert-large.run_7").job, "bert-large.run_7");
  EXPECT_EQ(
      invalidArgumentMessage([] { fromOne(kEnvJob, "a job"); }),
      "ATTNSCOPE_JOB=\"a job\" has characters a label value should not carry; allowed: letters, "
      "digits, '_', '-', '.' (1 to 128 characters)");
  EXPECT_TRUE(fromOne(kEnvMetricsLayers, "1").metricsLayers);
  EXPECT_NE(invalidArgumentMessage([] { fromOne(kEnvMetricsLayers, "sometimes"); }),
            "<no exception>");
  EXPECT_EQ(fromOne(kEnvMetricsRanks, "0").metricsRanks, 0);
  EXPECT_EQ(
      invalidArgumentMessage([] { fromOne(kEnvMetricsRanks, "-1"); }),
      "ATTNSCOPE_METRICS_RANKS=\"-1\" is out of range; allowed: an integer from 0 to 16777216");
}

// ---------------------------------------------------------------------------------------------
// ATTNSCOPE_TRACE_DIR and ATTNSCOPE_TRACE_MAX_MB

constexpr char kTraceDirAllowed[] =
    "a writable directory, or a path that can be created under a writable directory";

std::string traceDirMsg(const std::string& value, const std::string& what) {
  return std::string(kEnvTraceDir) + "=\"" + value + "\" " + what +
         "; allowed: " + kTraceDirAllowed;
}

TEST(ConfigTraceTest, DefaultsAreOffAndOneGiB) {
  const Config config;
  EXPECT_EQ(config.traceDir, "");
  EXPECT_EQ(config.traceMaxMb, 1024);
}

TEST(ConfigTraceTest, ExistingWritableDirectoryIsAccepted) {
  TempDirectory dir;
  EXPECT_EQ(fromOne(kEnvTraceDir, dir.path()).traceDir, dir.path());
}

TEST(ConfigTraceTest, MissingDirectoryUnderWritableParentIsAccepted) {
  TempDirectory dir;
  const std::string value = dir.path() + "/traces/run1";
  EXPECT_EQ(fromOne(kEnvTraceDir, value).traceDir, value);
  struct stat st {};
  EXPECT_NE(::stat((dir.path() + "/traces").c_str(), &st), 0) << "validate() must not create it";
}

TEST(ConfigTraceTest, AFileIsRejectedWithExactMessage) {
  TempDirectory dir;
  const std::string file = dir.path() + "/f";
  ::close(::open(file.c_str(), O_CREAT | O_WRONLY, 0644));
  EXPECT_EQ(invalidArgumentMessage([&] { fromOne(kEnvTraceDir, file); }),
            traceDirMsg(file, "is not a directory"));
  EXPECT_EQ(invalidArgumentMessage([&] { fromOne(kEnvTraceDir, file + "/sub"); }),
            traceDirMsg(file + "/sub", "cannot be created (" + file + " is not a directory)"));
  ::unlink(file.c_str());
}

TEST(ConfigTraceTest, UnwritableDirectoryIsRejectedWithExactMessage) {
  if (::geteuid() == 0) GTEST_SKIP() << "root may write anywhere";
  TempDirectory dir;
  ::chmod(dir.path().c_str(), 0555);
  EXPECT_EQ(invalidArgumentMessage([&] { fromOne(kEnvTraceDir, dir.path()); }),
            traceDirMsg(dir.path(), "is not writable"));
  EXPECT_EQ(
      invalidArgumentMessage([&] { fromOne(kEnvTraceDir, dir.path() + "/new"); }),
      traceDirMsg(dir.path() + "/new", "cannot be created (" + dir.path() + " is not writable)"));
  ::chmod(dir.path().c_str(), 0755);
}

TEST(ConfigTraceTest, MaxMbParsesAndIsCheckedFromCode) {
  EXPECT_EQ(fromOne(kEnvTraceMaxMb, "64").traceMaxMb, 64);
  Config config;
  config.traceMaxMb = 0;
  EXPECT_EQ(invalidArgumentMessage([&] { config.validate(); }),
            msg(kEnvTraceMaxMb, "0", "is out of range", "an integer from 1 to 1048576"));
}

}  // namespace
}  // namespace attnscope
