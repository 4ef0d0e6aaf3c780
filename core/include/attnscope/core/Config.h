#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "attnscope/core/Export.h"
#include "attnscope/core/Log.h"

namespace attnscope {

// Names of the environment variables, one documented meaning each (docs/CONFIGURATION.md).
constexpr char kEnvEnable[] = "ATTNSCOPE_ENABLE";
constexpr char kEnvSampleEvery[] = "ATTNSCOPE_SAMPLE_EVERY";
constexpr char kEnvIntervalS[] = "ATTNSCOPE_INTERVAL_S";
constexpr char kEnvLogLevel[] = "ATTNSCOPE_LOG_LEVEL";
constexpr char kEnvSummaryJson[] = "ATTNSCOPE_SUMMARY_JSON";
constexpr char kEnvMemory[] = "ATTNSCOPE_MEMORY";
constexpr char kEnvFusedOps[] = "ATTNSCOPE_FUSED_OPS";
constexpr char kEnvMaxLayers[] = "ATTNSCOPE_MAX_LAYERS";
constexpr char kEnvAggregation[] = "ATTNSCOPE_AGGREGATION";
constexpr char kEnvStragglerThreshold[] = "ATTNSCOPE_STRAGGLER_THRESHOLD";
constexpr char kEnvStragglerWindows[] = "ATTNSCOPE_STRAGGLER_WINDOWS";
constexpr char kEnvStragglerExitThreshold[] = "ATTNSCOPE_STRAGGLER_EXIT_THRESHOLD";
constexpr char kEnvStragglerExitWindows[] = "ATTNSCOPE_STRAGGLER_EXIT_WINDOWS";
constexpr char kEnvCellOutlierFactor[] = "ATTNSCOPE_CELL_OUTLIER_FACTOR";
constexpr char kEnvCellOutlierMinShare[] = "ATTNSCOPE_CELL_OUTLIER_MIN_SHARE";
constexpr char kEnvCellOutlierSigmas[] = "ATTNSCOPE_CELL_OUTLIER_SIGMAS";
constexpr char kEnvHangS[] = "ATTNSCOPE_HANG_S";
constexpr char kEnvRoundTimeoutS[] = "ATTNSCOPE_ROUND_TIMEOUT_S";
constexpr char kEnvStorePort[] = "ATTNSCOPE_STORE_PORT";
constexpr char kEnvPort[] = "ATTNSCOPE_PORT";
constexpr char kEnvBind[] = "ATTNSCOPE_BIND";
constexpr char kEnvMetricsAuth[] = "ATTNSCOPE_METRICS_AUTH";
constexpr char kEnvMetricsLayers[] = "ATTNSCOPE_METRICS_LAYERS";
constexpr char kEnvMetricsRanks[] = "ATTNSCOPE_METRICS_RANKS";
constexpr char kEnvPushgateway[] = "ATTNSCOPE_PUSHGATEWAY";
constexpr char kEnvControlToken[] = "ATTNSCOPE_CONTROL_TOKEN";
constexpr char kEnvFileSd[] = "ATTNSCOPE_FILE_SD";
constexpr char kEnvJob[] = "ATTNSCOPE_JOB";
constexpr char kEnvTraceDir[] = "ATTNSCOPE_TRACE_DIR";
constexpr char kEnvTraceMaxMb[] = "ATTNSCOPE_TRACE_MAX_MB";
constexpr char kEnvGpuTiming[] = "ATTNSCOPE_GPU_TIMING";
constexpr char kEnvRoofline[] = "ATTNSCOPE_ROOFLINE";
constexpr char kEnvPeakFlops[] = "ATTNSCOPE_PEAK_FLOPS";
constexpr char kEnvPeakBandwidth[] = "ATTNSCOPE_PEAK_BANDWIDTH";
constexpr char kEnvCalibrate[] = "ATTNSCOPE_CALIBRATE";
constexpr char kEnvAttentionModules[] = "ATTNSCOPE_ATTENTION_MODULES";
constexpr char kEnvAttentionExclude[] = "ATTNSCOPE_ATTENTION_EXCLUDE";

// ATTNSCOPE_SAMPLE_EVERY's range, also that of /control's sample_every and of a gathered window's.
constexpr int64_t kMinSampleEvery = 1;
constexpr int64_t kMaxSampleEvery = 1000000;

// How ranks' figures come together (docs/AGGREGATION.md).
enum class Aggregation : uint8_t {
  kAuto,   // local for a world of one; else gloo when a group was handed in, else store
  kGloo,   // a c10d group of attnscope's own handed in (Python's attach forms a Gloo side group)
  kNccl,   // refused at start-up: docs/AGGREGATION.md says why (kept to name it in the error)
  kMpi,    // MPI on a duplicated communicator
  kLocal,  // a world of one: this rank is the cluster
  kNone,   // per-rank figures only
  kStore,  // through the job's c10d store, rank 0 reducing (small worlds; docs/AGGREGATION.md)
};
ATTNSCOPE_API const char* aggregationName(Aggregation a);

// Where device (GPU) time per layer comes from (docs/GPU.md).
enum class GpuTiming : uint8_t {
  kAuto,    // CUPTI when attnscope can hold it, else CUDA events
  kCupti,   // CUPTI kernel records with external correlation ids (falls back to events)
  kEvents,  // CUDA events at call edges and first/last backward node
  kBoth,    // CUPTI and events together (cross-check: event span vs summed kernel time)
  kOff,     // no device timing
};
ATTNSCOPE_API const char* gpuTimingName(GpuTiming g);

// Everything attnscope can be told. Fill it from code, from the environment, or both
// (fromEnvironment() starts from the defaults below and applies every ATTNSCOPE_* variable).
struct ATTNSCOPE_API Config {
  // Master switch. Off: start() installs nothing and every call is a no-op.
  bool enable = true;
  // Record one step in N (1 = every step). Unsampled steps install no callbacks at all.
  int64_t sampleEvery = 1;
  // Seconds between reporting rounds (aggregation, export).
  double intervalSeconds = 10.0;
  LogLevel logLevel = LogLevel::kInfo;
  // Per-rank JSON summary written at stop(); "{rank}" expands to the rank. Empty: none.
  std::string summaryJson;
  // Attribute allocator reports (bytes allocated, peak live bytes) to layers and op kinds.
  bool memory = true;
  // Recognise fused attention ops (scaled_dot_product_attention, _native_multi_head_attention,
  // flash/efficient kernels) outside any AttentionScope. Costs a callback on every op.
  bool fusedOps = false;
  // Upper bound on distinct layer names; keeps per-rank state bounded.
  int64_t maxLayers = 1024;
  Aggregation aggregation = Aggregation::kAuto;
  // A rank is a straggler when its attention time per step stays above threshold × the median
  // for `stragglerWindows` consecutive windows.
  double stragglerThreshold = 1.2;
  int64_t stragglerWindows = 3;
  // Hysteresis: a straggler stays one until its score has been at or below the exit threshold
  // for `stragglerExitWindows` consecutive windows (one dip does not split an episode). 0: halfway
  // between 1 and stragglerThreshold (exitThreshold() says).
  double stragglerExitThreshold = 0;
  int64_t stragglerExitWindows = 3;
  // A (layer, phase, op kind) cell of a rank at this factor × the other ranks' typical time for it,
  // with an excess of at least this share of the rank's time per step in that layer and phase, is
  // a cell outlier (flagged like a straggler after `stragglerWindows` windows) when its excess is
  // also at least `cellOutlierSigmas` standard errors of the difference (CellOutlierLimits,
  // core/Attribution.h, says how; docs/AGGREGATION.md how the defaults were chosen).
  double cellOutlierFactor = 1.3;
  double cellOutlierMinShare = 0.02;
  double cellOutlierSigmas = 3;
  double exitThreshold() const {
    return stragglerExitThreshold > 0 ? stragglerExitThreshold : 1 + (stragglerThreshold - 1) / 2;
  }
  // A rank whose step counter stands still this long while others move is reported hung.
  double hangSeconds = 300;
  // Longest an aggregation round (or the group's set-up) may take before the rank gives up on it.
  double roundTimeoutSeconds = 30;
  // Port of attnscope's own TCPStore when the program hands none in and torchrun's agent store is
  // not available (rank 0 serves it). 0: MASTER_PORT + 1.
  int64_t storePort = 0;
  // Directory of the per-rank trace store (rank-<r>.sqlite, docs/ANALYSIS.md). Empty: no trace.
  // Created at start when missing.
  std::string traceDir;
  // Size cap of one rank's trace file in MiB: the oldest step records go first, window
  // summaries, findings and metadata stay.
  int64_t traceMaxMb = 1024;

  // Prometheus export (docs/METRICS.md). Each rank serves /metrics on bind:port + local rank;
  // port 0 turns the endpoint off. A port in use falls back to one the kernel picks (logged,
  // exported, written to the file_sd file).
  int64_t port = 9464;
  std::string bind = "0.0.0.0";
  // "user:password" for HTTP basic auth on /metrics, or "@/path/file" holding that line. Empty:
  // none.
  std::string metricsAuth;
  // Per-layer series on every rank (docs/METRICS.md, "Series budget"). Off (the default): each
  // rank exports its totals by phase and op kind, a count that does not grow with the model;
  // per-layer figures are in rank 0's job summary, the summaries and the traces. /control
  // layers=on|off switches one rank at runtime.
  bool metricsLayers = false;
  // Rank 0's job summary describes every rank one by one up to this world size; beyond, the top
  // ranks by score, the flagged ones and the scores' distribution.
  int64_t metricsRanks = 1024;
  // Push gateway base URL (http://host:port): push every interval and once more at stop.
  std::string pushgateway;
  // Bearer token for /control: rank 0's takes pause, resume and the sample rate for the job, every
  // rank's takes layers=on|off for its own series. Empty: no control.
  std::string controlToken;
  // Rank 0 writes a Prometheus file_sd JSON with every rank's endpoint here. Empty: none.
  std::string fileSd;
  // The `job` label; empty: TORCHELASTIC_RUN_ID when torchrun was given an --rdzv_id, else the
  // program's name and the rendezvous address (defaultJobName in Topology.h).
  std::string job;

  // Device time per layer on GPUs: auto (CUPTI, else CUDA events), cupti, events, both or off.
  GpuTiming gpuTiming = GpuTiming::kAuto;

  // Roofline (docs/ROOFLINE.md): FLOPs and bytes moved per attention op from its input shapes on
  // sampled steps, classified against the machine's ceilings.
  bool roofline = true;
  // The ceilings: peak flop/s and memory bandwidth (bytes/s); 0 = measure them at start when
  // `calibrate` is on, else unknown (achieved rates are still reported, bounds are not).
  double peakFlops = 0;
  double peakBandwidth = 0;
  bool calibrate = true;

  // Python's module discovery (docs/DISCOVERY.md): regular expressions (Python's `re`, searched in
  // each module's class name and module path) that replace the attention rule's class-name
  // pattern, and that exclude modules from being layers. Empty: the built-in rule. The Python
  // attach compiles and checks them at start; C++ programs mark modules themselves.
  std::string attentionModules;
  std::string attentionExclude;

  // Parses one variable into this config.
  // \throw std::invalid_argument naming the variable, the value and what is allowed.
  // Returns false (and changes nothing) when `name` is not a known ATTNSCOPE_* variable.
  bool set(const std::string& name, const std::string& value);

  // Checks across settings and against the file system (the summary directory exists; the trace
  // directory is writable or can be created).
  // \throw std::invalid_argument naming the variable, the value and what is allowed.
  void validate() const;

  // Defaults + every ATTNSCOPE_* variable of the process environment, then validate().
  // Unknown ATTNSCOPE_* names are logged as warnings (with the closest known name), or appended
  // to `warnings` when given.
  // \throw std::invalid_argument on the first bad value.
  static Config fromEnvironment(std::vector<std::string>* warnings = nullptr);

  // Same, from an explicit name -> value map (tests, launchers). Unknown ATTNSCOPE_* names
  // are appended to `warnings` (when given) instead of being logged.
  static Config fromVariables(const std::map<std::string, std::string>& vars,
                              std::vector<std::string>* warnings = nullptr);

  // summaryJson with "{rank}" replaced; empty when no summary is configured.
  std::string summaryPathForRank(int rank) const;

  // metricsAuth resolved (a file read): "user:password", or empty.
  // \throw std::invalid_argument when the file cannot be read or the line has no ':'.
  std::string metricsCredentials() const;

  // One setting as declared (core/src/Config.cpp declares each once: set(), validate(), this list,
  // the Python options, the launchers' help and docs/CONFIGURATION.md all come from there).
  struct Variable {
    const char* name;
    const char* type;          // bool, int, float, enum, string, path, url, regex
    const char* defaultValue;  // as the docs show it
    const char* allowed;       // the text errors end with
    const char* meaning;       // one line
    const char* doc;           // more for docs/CONFIGURATION.md (links); may be empty
    double min;                // int and float: the range (0 and 0 otherwise)
    double max;
  };
  // Every known variable, for documentation and `--help` texts.
  static const std::vector<Variable>& variables();
  // One of them by name. \throw std::invalid_argument for a name that is not a variable.
  static const Variable& variable(const std::string& name);
  // The table of docs/CONFIGURATION.md (build/core/config_doc writes it; a test keeps it current).
  static std::string markdownTable();
};

}  // namespace attnscope
