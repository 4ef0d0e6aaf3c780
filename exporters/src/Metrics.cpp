#include "attnscope/exporters/Metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>

#include <prometheus/text_serializer.h>

#include "attnscope/core/RooflineCells.h"

namespace attnscope {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

constexpr int kFirstBoundExp2 = -32;  // bounds are 2^(k/2) for k = kFirstBoundExp2..kLastBoundExp2
constexpr int kLastBoundExp2 = 4;

MetricFamily family(const char* name, const char* help, MetricType type) {
  MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  return f;
}

void addValue(MetricFamily* f, Labels labels, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  if (f->type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f->metric.push_back(std::move(m));
}

void addHistogram(MetricFamily* f, Labels labels, const LogHistogram& h) {
  ClientMetric m;
  m.label = std::move(labels);
  m.histogram.sample_count = h.count();
  m.histogram.sample_sum = h.sum();
  const auto& buckets = h.buckets();
  uint64_t cumulative = 0;
  int next = 0;  // LogHistogram buckets below the current bound already counted
  for (int k = kFirstBoundExp2; k <= kLastBoundExp2; ++k) {
    const int end =
        (k * LogHistogram::kSubBuckets) / 2 - LogHistogram::kMinExp * LogHistogram::kSubBuckets;
    for (; next < end; ++next) cumulative += buckets[next];
    m.histogram.bucket.push_back({cumulative, std::pow(2.0, k / 2.0)});
  }
  m.histogram.bucket.push_back({h.count(), std::numeric_limits<double>::infinity()});
  f->metric.push_back(std::move(m));
}

Labels with(const Labels& base, std::initializer_list<ClientMetric::Label> more) {
  Labels l = base;
  l.insert(l.end(), more.begin(), more.end());
  return l;
}

// Per (layer or "all", phase): the call cell, and per op kind the summed cells.
struct LayerPhase {
  CellStats call;
  std::map<int, CellStats> kinds;
};

// The table's cells keyed by (layer label, phase); layers summed when !layerDetail.
std::map<std::pair<std::string, int>, LayerPhase> cells(const StatsTable& stats, bool layerDetail) {
  std::map<std::pair<std::string, int>, LayerPhase> out;
  for (const LayerStats& layer : stats.layers()) {
    for (int p = 0; p < kNumPhases; ++p) {
      const PhaseStats* phase = layer.phases[p].get();
      if (phase == nullptr) continue;
      LayerPhase& lp = out[{layerDetail ? layer.name : std::string(), p}];
      lp.call.merge(phase->call);
      for (int k = 0; k < kNumOpKinds; ++k) {
        if (phase->kinds[k]) lp.kinds[k].merge(*phase->kinds[k]);
      }
    }
  }
  return out;
}

Labels cellLabels(const Labels& base, const std::string& layer, int phase, bool layerDetail) {
  Labels l = base;
  if (layerDetail) l.push_back({"layer", layer});
  l.push_back({"phase", phaseName(static_cast<Phase>(phase))});
  return l;
}

// Whose table addStats exports: a rank's (peaks, which do not sum), its device times (no memory),
// or the job's (every rank's summed: bytes per op kind too, no peaks).
enum class StatsOf { kRank, kDevice, kJob };

// The attention families of a table: op-kind seconds, bytes allocated, peaks and the fused
// backends, by phase (and by layer with `layerDetail`), and with `layerDetail` the histogram of
// call seconds per layer. Without it the series are the table's totals over its layers: their
// number depends on the phases and op kinds seen, not on the model's depth.

void addStats(std::vector<MetricFamily>* out, const std::string& prefix, const Labels& base,
              const StatsTable& stats, bool layerDetail, StatsOf of) {
  const bool device = of == StatsOf::kDevice, withPeak = of == StatsOf::kRank;
  const std::string what = prefix + (device ? "attention_device" : "attention");
  const std::string histName = what + "_seconds";
  const std::string opName = what + "_op_seconds_total";
  const std::string bytesName = what + "_allocated_bytes_total";
  const std::string peakName = what + "_peak_bytes";
  MetricFamily hist = family(
      histName.c_str(),
      device ? "Device (kernel) time of one attention call per layer, from CUPTI or CUDA events"
             : "Wall time of one attention call per layer (forward: the scope; backward: its "
               "autograd nodes)",
      MetricType::Histogram);
  MetricFamily ops = family(opName.c_str(),
                            device ? "Device time of attention ops of one kind"
                                   : "Time spent in attention ops of one kind",
                            MetricType::Counter);
  MetricFamily bytes =
      family(bytesName.c_str(), "Bytes allocated inside attention calls", MetricType::Counter);
  MetricFamily peak =
      family(peakName.c_str(),
             "Largest peak of live bytes above the call's start inside one attention call",
             MetricType::Gauge);
  const std::string kindBytesName = what + "_op_allocated_bytes_total";
  MetricFamily kindBytes = family(
      kindBytesName.c_str(), "Bytes allocated by attention ops of one kind", MetricType::Counter);
  const bool withMemory = !device, withKindBytes = of == StatsOf::kJob;
  for (const auto& [key, lp] : cells(stats, layerDetail)) {
    const Labels labels = cellLabels(base, key.first, key.second, layerDetail);
    if (layerDetail) addHistogram(&hist, labels, lp.call.seconds);
    for (const auto& [kind, cell] : lp.kinds) {
      const Labels l = with(labels, {{"op_kind", opKindName(static_cast<OpKind>(kind))}});
      addValue(&ops, l, cell.seconds.sum());
      if (withKindBytes) addValue(&kindBytes, l, static_cast<double>(cell.bytes));
    }
    if (withMemory) {
      addValue(&bytes, labels, static_cast<double>(lp.call.bytes));
      if (withPeak) addValue(&peak, labels, static_cast<double>(lp.call.peak));
    }
  }
  if (layerDetail) out->push_back(std::move(hist));
  out->push_back(std::move(ops));
  if (withMemory) {
    out->push_back(std::move(bytes));
    if (withPeak) out->push_back(std::move(peak));
    if (withKindBytes) out->push_back(std::move(kindBytes));
  }
  if (device) return;
  // The fused-attention backends (flash, memory_efficient, cudnn, math) seen by their ops: per
  // (layer, phase, backend), only for backends that ran.
  std::map<std::tuple<std::string, int, int>, uint64_t> backends;
  for (const LayerStats& layer : stats.layers()) {
    for (int p = 0; p < kNumPhases; ++p) {
      if (!layer.phases[p]) continue;
      for (int b = 0; b < kNumAttentionBackends; ++b) {
        const uint64_t n = layer.phases[p]->backends[b];
        if (n > 0) backends[{layerDetail ? layer.name : std::string(), p, b}] += n;
      }
    }
  }
  if (backends.empty()) return;
  const std::string backendName = prefix + "attention_backend_ops_total";
  MetricFamily ops_ =
      family(backendName.c_str(),
             "Fused-attention ops (forward) and their kernels' autograd nodes (backward) "
             "per backend that ran",
             MetricType::Counter);
  for (const auto& [key, n] : backends) {
    const Labels labels = cellLabels(base, std::get<0>(key), std::get<1>(key), layerDetail);
    addValue(
        &ops_,
        with(labels,
             {{"backend", attentionBackendName(static_cast<AttentionBackend>(std::get<2>(key)))}}),
        static_cast<double>(n));
  }
  out->push_back(std::move(ops_));
}

// A rank's call times per phase as a summary: the quantiles of the last window with calls (live),
// the count and sum since start. `windows` empty (device time): the count and sum alone.
void addCallSummary(std::vector<MetricFamily>* out, const char* name, const char* help,
                    const Labels& base, const StatsTable& stats,
                    const std::array<LogHistogram, kNumPhases>* windows) {
  std::array<LogHistogram, kNumPhases> totals;
  std::array<bool, kNumPhases> seen{};
  for (const LayerStats& layer : stats.layers()) {
    for (int p = 0; p < kNumPhases; ++p) {
      if (!layer.phases[p]) continue;
      totals[p].merge(layer.phases[p]->call.seconds);
      seen[p] = true;
    }
  }
  MetricFamily f = family(name, help, MetricType::Summary);
  for (int p = 0; p < kNumPhases; ++p) {
    if (!seen[p]) continue;
    ClientMetric m;
    m.label = with(base, {{"phase", phaseName(static_cast<Phase>(p))}});
    m.summary.sample_count = totals[p].count();
    m.summary.sample_sum = totals[p].sum();
    if (windows != nullptr) {
      const LogHistogram& w = (*windows)[p];
      for (double q : kCallQuantiles) {
        m.summary.quantile.push_back(
            {q, w.count() > 0 ? w.quantile(q) : std::numeric_limits<double>::quiet_NaN()});
      }
    }
    f.metric.push_back(std::move(m));
  }
  out->push_back(std::move(f));
}

// The GPU path: which timing source runs (always, so a fallback shows), and when it runs its
// health, the caching allocator's figures, device time per layer and the attention backends.
void addGpu(std::vector<MetricFamily>* out, const Labels& base, const RankMetrics& r,
            bool layerDetail) {
  const GpuStatus& g = r.gpu;
  MetricFamily source =
      family("attnscope_gpu_timing_source",
             "1 for the GPU timing source in use (off, events, cupti, both)", MetricType::Gauge);
  addValue(
      &source,
      with(base, {{"source", gpuTimingName(g.source)}, {"requested", gpuTimingName(g.requested)}}),
      1);
  out->push_back(std::move(source));
  MetricFamily fallback =
      family("attnscope_gpu_timing_fallback",
             "1 when the source in use is not the one asked for (CUPTI held by another "
             "tool, failed to initialise or gone silent; no GPU); the reason is logged and in "
             "the summary",
             MetricType::Gauge);
  addValue(&fallback, base, g.fallbackReason.empty() ? 0 : 1);
  out->push_back(std::move(fallback));
  if (g.source == GpuTiming::kOff && g.device < 0) return;
  const auto counter = [&](const char* name, const char* help, uint64_t v) {
    MetricFamily f = family(name, help, MetricType::Counter);
    addValue(&f, base, static_cast<double>(v));
    out->push_back(std::move(f));
  };
  counter("attnscope_gpu_kernels_attributed_total",
          "Kernel, memcpy and memset records given to a layer", g.kernelsAttributed);
  counter("attnscope_gpu_records_unattributed_total",
          "Device records whose CUPTI correlation record never came", g.recordsUnattributed);
  counter("attnscope_gpu_records_outside_total", "Device records of work outside attention calls",
          g.recordsOutside);
  counter("attnscope_gpu_records_late_total", "Device records of a call already folded",
          g.recordsLate);
  counter("attnscope_gpu_calls_given_up_total",
          "Attention calls folded without all their device records (CUPTI lost some)",
          g.callsGivenUp);
  counter("attnscope_gpu_calls_in_flight_at_stop_total",
          "Attention calls left out: their work was still on the device when attnscope stopped "
          "or left CUPTI",
          g.callsInFlightAtStop);
  counter("attnscope_gpu_records_side_stream_total",
          "With both: device records on another stream than their call's events, left out of it",
          g.recordsSideStream);
  counter("attnscope_gpu_cupti_records_dropped_total", "Records CUPTI could not store",
          g.cuptiRecordsDropped);
  counter("attnscope_gpu_spans_dropped_total",
          "Attention calls not timed: the CUDA event pool was exhausted", g.spansDropped);
  counter("attnscope_gpu_event_errors_total", "CUDA event record or query failures", g.eventErrors);
  if (g.device >= 0) {
    const Labels dev = with(base, {{"device", std::to_string(g.device)}});
    const auto gauge = [&](const char* name, const char* help, int64_t v) {
      MetricFamily f = family(name, help, MetricType::Gauge);
      addValue(&f, dev, static_cast<double>(v));
      out->push_back(std::move(f));
    };
    gauge("attnscope_gpu_allocated_bytes", "CUDA caching allocator: bytes allocated",
          g.allocatedBytes);
    gauge("attnscope_gpu_reserved_bytes", "CUDA caching allocator: bytes reserved",
          g.reservedBytes);
    gauge("attnscope_gpu_peak_allocated_bytes", "CUDA caching allocator: peak bytes allocated",
          g.peakAllocatedBytes);
    gauge("attnscope_gpu_peak_reserved_bytes", "CUDA caching allocator: peak bytes reserved",
          g.peakReservedBytes);
  }
  if (!r.deviceStats.layers().empty()) {
    addCallSummary(out, "attnscope_attention_device_call_seconds",
                   "Device (kernel) time of the rank's attention calls, count and sum since start",
                   base, r.deviceStats, nullptr);
    addStats(out, "attnscope_", base, r.deviceStats, layerDetail, StatsOf::kDevice);
  }
  if (!g.backends.empty()) {
    MetricFamily kernels =
        family("attnscope_attention_backend_kernels_total",
               "Fused-attention kernels per backend (flash, memory_efficient, cudnn, math)",
               MetricType::Counter);
    std::map<std::pair<std::string, int>, uint64_t> sums;
    for (const GpuStatus::LayerBackends& l : g.backends) {
      for (int b = 0; b < kNumAttentionBackends; ++b) {
        if (l.kernels[b] > 0) sums[{layerDetail ? l.layer : std::string(), b}] += l.kernels[b];
      }
    }
    for (const auto& [key, n] : sums) {
      Labels l = base;
      if (layerDetail) l.push_back({"layer", key.first});
      l.push_back({"backend", attentionBackendName(static_cast<AttentionBackend>(key.second))});
      addValue(&kernels, l, static_cast<double>(n));
    }
    out->push_back(std::move(kernels));
  }
}

// Roofline facts of a rank (docs/ROOFLINE.md): the ceilings, the hardware, the shape reads.
void addRooflineFacts(std::vector<MetricFamily>* out, const Labels& base, const RunInfo& run) {
  const Ceilings& c = run.ceilings;
  MetricFamily peakFlops = family(
      "attnscope_roofline_peak_flops_per_second",
      "The compute ceiling (source: calibration, config, config+calibration)", MetricType::Gauge);
  MetricFamily peakBytes = family("attnscope_roofline_peak_bytes_per_second",
                                  "The memory-bandwidth ceiling, bytes/s", MetricType::Gauge);
  if (c.known()) {
    addValue(&peakFlops, with(base, {{"source", c.source}}), c.peakFlopsPerSecond);
    addValue(&peakBytes, with(base, {{"source", c.source}}), c.peakBytesPerSecond);
  }
  out->push_back(std::move(peakFlops));
  out->push_back(std::move(peakBytes));
  {
    const MachineInfo& m = run.machine;
    // The names as labels, the numbers as values: at most 8 labels a series.
    MetricFamily f = family("attnscope_machine_info", "The hardware this rank runs on (value 1)",
                            MetricType::Gauge);
    addValue(&f,
             with(base, {{"cpu_model", m.cpuModel},
                         {"blas", m.blas},
                         {"gpu_name", m.gpuName},
                         {"gpu_driver", m.gpuDriver}}),
             1);
    out->push_back(std::move(f));
    const auto number = [&](const char* name, const char* help, double v) {
      MetricFamily g = family(name, help, MetricType::Gauge);
      addValue(&g, base, v);
      out->push_back(std::move(g));
    };
    number("attnscope_machine_threads", "Intra-op threads of this rank's torch", m.threads);
    if (m.gpuMemoryBytes > 0) {
      number("attnscope_machine_gpu_memory_bytes", "Memory of this rank's GPU",
             static_cast<double>(m.gpuMemoryBytes));
    }
  }
  MetricFamily reads =
      family("attnscope_roofline_shape_reads_total",
             "Top-level attention ops whose argument shapes were read (sampled steps only)",
             MetricType::Counter);
  addValue(&reads, base, static_cast<double>(run.shapeReads));
  out->push_back(std::move(reads));
  MetricFamily changes =
      family("attnscope_roofline_shape_changes_total",
             "Shape reads that found new shapes for their layer and op (formulas evaluated)",
             MetricType::Counter);
  addValue(&changes, base, static_cast<double>(run.shapeChanges));
  out->push_back(std::move(changes));
}

// Roofline cells: per (layer, phase, op kind) the formulas' flops and bytes and the seconds they
// took (counters: rate(flops)/rate(seconds) is the achieved flop/s of an interval), and against
// the ceilings the cumulative bound and fraction of the roof (gauges). `prefix` "attnscope_" for a
// rank's own cells (with layer detail only), "attnscope_job_" for the job's (every rank's summed).
void addRooflineCells(std::vector<MetricFamily>* out, const std::string& prefix, const Labels& base,
                      const StatsTable& stats, const StatsTable* device, const Ceilings& c) {
  struct Sum {
    double seconds = 0, flops = 0, bytes = 0;
  };
  std::map<std::tuple<std::string, int, int>, Sum> sums;
  const auto& layers = stats.layers();
  for (const RooflineCell& cell : rooflineCells(stats, device, c)) {
    if (cell.modelledSeconds <= 0 && cell.flops <= 0 && cell.bytes <= 0) continue;
    Sum& s =
        sums[{layers[cell.layer].name, static_cast<int>(cell.phase), static_cast<int>(cell.kind)}];
    s.seconds += cell.modelledSeconds;
    s.flops += cell.flops;
    s.bytes += cell.bytes;
  }
  const auto named = [&](const char* name, const char* help, MetricType type) {
    return family((prefix + name).c_str(), help, type);
  };
  MetricFamily flops =
      named("roofline_flops_total",
            "Floating-point operations of attention ops, from their shapes (sampled steps)",
            MetricType::Counter);
  MetricFamily bytes =
      named("roofline_bytes_total",
            "Minimum bytes moved by attention ops, from their shapes (sampled steps)",
            MetricType::Counter);
  MetricFamily seconds = named("roofline_seconds_total",
                               "Time of the attention ops counted in the flops (device time "
                               "with GPU timing)",
                               MetricType::Counter);
  MetricFamily fraction =
      named("roofline_ceiling_fraction",
            "Achieved over attainable: flop/s over the roof at the ops' intensity (bytes/s over "
            "the bandwidth for ops without flops), since start",
            MetricType::Gauge);
  MetricFamily bound =
      named("roofline_bound",
            "1 for the ceiling that limits the ops (bound=memory or compute), since start",
            MetricType::Gauge);
  for (const auto& [key, s] : sums) {
    const Labels l = with(base, {{"layer", std::get<0>(key)},
                                 {"phase", phaseName(static_cast<Phase>(std::get<1>(key)))},
                                 {"op_kind", opKindName(static_cast<OpKind>(std::get<2>(key)))}});
    addValue(&flops, l, s.flops);
    addValue(&bytes, l, s.bytes);
    addValue(&seconds, l, s.seconds);
    const RooflinePoint p = rooflinePoint(s.flops, s.bytes, s.seconds, c);
    if (p.bound == Bound::kUnknown) continue;
    addValue(&fraction, l, p.fraction);
    addValue(&bound, with(l, {{"bound", "memory"}}), p.bound == Bound::kMemory ? 1 : 0);
    addValue(&bound, with(l, {{"bound", "compute"}}), p.bound == Bound::kCompute ? 1 : 0);
  }
  for (MetricFamily* f : {&flops, &bytes, &seconds, &fraction, &bound})
    out->push_back(std::move(*f));
}

// A rank's own series: its state, its attention totals by phase and op kind (by layer too with
// layer detail), the GPU path and the roofline.
void addRank(std::vector<MetricFamily>* out, const MetricsIdentity& id, const RankMetrics& r,
             const StatsTable& stats, const MetricsOptions& options, const Labels& base) {
  const auto scalar = [&](const char* name, const char* help, MetricType type, double value) {
    MetricFamily f = family(name, help, type);
    addValue(&f, base, value);
    out->push_back(std::move(f));
  };
  {
    MetricFamily f = family("attnscope_build_info", "attnscope build and run facts (value 1)",
                            MetricType::Gauge);
    addValue(&f,
             with(base, {{"version", id.version},
                         {"torch_version", id.torchVersion},
                         {"backend", id.aggregation}}),
             1);
    out->push_back(std::move(f));
  }
  scalar("attnscope_steps_total", "Training steps ended on this rank (the current step)",
         MetricType::Counter, static_cast<double>(r.run.stepsSeen));
  scalar("attnscope_sampled_steps_total", "Training steps recorded on this rank",
         MetricType::Counter, static_cast<double>(r.run.stepsSampled));
  scalar("attnscope_step_seconds", "Mean step time in the last reporting window", MetricType::Gauge,
         r.stepSeconds);
  {
    MetricFamily f = family(
        "attnscope_attention_seconds_per_step",
        "Typical attention time per sampled step in the last window (median call x calls per step)",
        MetricType::Gauge);
    addValue(&f, with(base, {{"phase", "forward"}}), r.forwardSecondsPerStep);
    addValue(&f, with(base, {{"phase", "backward"}}), r.backwardSecondsPerStep);
    out->push_back(std::move(f));
  }
  addCallSummary(out, "attnscope_attention_call_seconds",
                 "Wall time of the rank's attention calls: quantiles of the last window with "
                 "calls, count and sum since start",
                 base, stats, &r.windowCalls);
  addStats(out, "attnscope_", base, stats, options.layerDetail, StatsOf::kRank);
  scalar(
      "attnscope_overhead_seconds_total",
      "Time spent in attnscope's own code on the training threads (callbacks, scopes, step fold)",
      MetricType::Counter, r.overheadSeconds);
  scalar("attnscope_attention_layers",
         "Distinct attention layers recorded on this rank (0: nothing found to observe)",
         MetricType::Gauge, static_cast<double>(r.run.layersSeen));
  scalar("attnscope_nothing_found",
         "1 once steps ended with no attention call seen (docs/DISCOVERY.md)", MetricType::Gauge,
         r.run.nothingFound ? 1 : 0);
  scalar("attnscope_compile_seconds_total",
         "Time spent compiling with torch.compile (not counted in any attention call)",
         MetricType::Counter, r.run.compileSeconds);
  scalar("attnscope_compiles_total", "torch.compile compilations", MetricType::Counter,
         static_cast<double>(r.run.compiles));
  scalar("attnscope_dropped_calls_total",
         "Attention calls of layers beyond ATTNSCOPE_MAX_LAYERS (counted, not recorded)",
         MetricType::Counter, static_cast<double>(r.run.droppedCalls));
  scalar("attnscope_sampling_paused", "1 while recording is paused through /control",
         MetricType::Gauge, r.paused ? 1 : 0);
  scalar("attnscope_sample_every", "Record one step in N", MetricType::Gauge,
         static_cast<double>(r.sampleEvery));
  scalar("attnscope_metrics_layer_detail",
         "1 while this rank exports per-layer series (ATTNSCOPE_METRICS_LAYERS, /control layers)",
         MetricType::Gauge, options.layerDetail ? 1 : 0);
  scalar("attnscope_exporter_port", "Port this rank's /metrics endpoint listens on",
         MetricType::Gauge, r.port);
  scalar("attnscope_exporter_port_fallback",
         "1 when the configured port was taken and the kernel picked one", MetricType::Gauge,
         r.portFallback ? 1 : 0);
  scalar("attnscope_exporter_errors_total", "Exporter failures (port taken, push failed)",
         MetricType::Counter, static_cast<double>(r.exporterErrors));
  if (r.pushing) {
    scalar("attnscope_pushes_total", "Pushes to the push gateway that succeeded",
           MetricType::Counter, static_cast<double>(r.pushes));
    scalar("attnscope_push_errors_total", "Pushes to the push gateway that failed",
           MetricType::Counter, static_cast<double>(r.pushErrors));
  }
  scalar("attnscope_aggregation_rounds_total",
         "Aggregation rounds whose collectives completed on this rank", MetricType::Counter,
         static_cast<double>(r.rounds));
  scalar("attnscope_aggregation_errors_total", "Aggregation rounds or set-ups that failed",
         MetricType::Counter, static_cast<double>(r.roundErrors));
  scalar("attnscope_aggregation_degraded",
         "1 once collectives failed and ranks report through the store", MetricType::Gauge,
         r.degraded ? 1 : 0);
  scalar("attnscope_aggregation_round_seconds", "Wall time of the last aggregation round",
         MetricType::Gauge, r.lastRoundSeconds);
  scalar("attnscope_trace_errors_total", "Trace store writes that failed", MetricType::Counter,
         static_cast<double>(r.traceErrors));
  addGpu(out, base, r, options.layerDetail);
  if (r.run.roofline) {
    addRooflineFacts(out, base, r.run);
    if (options.layerDetail) {
      const StatsTable* device = r.gpu.source != GpuTiming::kOff && !r.deviceStats.layers().empty()
                                     ? &r.deviceStats
                                     : nullptr;
      addRooflineCells(out, "attnscope_", base, stats, device, r.run.ceilings);
    }
  }
}

// The ranks rank 0 describes one by one: every rank up to options.ranksDescribed; beyond, the
// kTopRanks highest scores and every flagged rank (at most kMaxFlaggedRanks of them), by rank.
std::vector<const RankStatus*> describedRanks(const ClusterRound& last,
                                              const MetricsOptions& options) {
  std::vector<const RankStatus*> all;
  for (const RankStatus& s : last.ranks) all.push_back(&s);
  if (static_cast<int64_t>(all.size()) <= options.ranksDescribed) return all;
  std::vector<const RankStatus*> chosen;
  for (const RankStatus* s : all) {
    const bool flagged = s->straggler || s->cellOutlier || s->hung || s->missing;
    if (flagged && static_cast<int>(chosen.size()) < kMaxFlaggedRanks) chosen.push_back(s);
  }
  std::vector<const RankStatus*> byScore;
  for (const RankStatus* s : all) {
    if (s->present) byScore.push_back(s);
  }
  const size_t top = std::min<size_t>(kTopRanks, byScore.size());
  std::partial_sort(byScore.begin(), byScore.begin() + static_cast<std::ptrdiff_t>(top),
                    byScore.end(), [](const RankStatus* a, const RankStatus* b) {
                      return a->score != b->score ? a->score > b->score : a->rank < b->rank;
                    });
  chosen.insert(chosen.end(), byScore.begin(), byScore.begin() + static_cast<std::ptrdiff_t>(top));
  std::sort(chosen.begin(), chosen.end(),
            [](const RankStatus* a, const RankStatus* b) { return a->rank < b->rank; });
  chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
  return chosen;
}

std::string layerName(const ClusterReport& cluster, int32_t layer) {
  const size_t id = static_cast<size_t>(layer);
  return layer >= 0 && id < cluster.layerNames.size() ? cluster.layerNames[id]
                                                      : "layer " + std::to_string(layer);
}

// The job summary (rank 0): counts, the score distribution, the described ranks, the findings
// (stragglers with the cell behind them, cell outliers), and every rank's statistics summed per
// layer, phase and op kind (bounded by the model, not the world).
void addJob(std::vector<MetricFamily>* out, const MetricsIdentity& id, const RankMetrics& r,
            const MetricsOptions& options, const ClusterReport& cluster) {
  const Labels job = {{"job", id.job}};
  const ClusterRound& last = cluster.last;
  const auto jobScalar = [&](const char* name, const char* help, MetricType type, double value) {
    MetricFamily f = family(name, help, type);
    addValue(&f, job, value);
    out->push_back(std::move(f));
  };
  const std::vector<const RankStatus*> described = describedRanks(last, options);
  int stragglers = 0, hung = 0, missing = 0, outliers = 0;
  for (const RankStatus& s : last.ranks) {
    stragglers += s.straggler ? 1 : 0;
    hung += s.hung ? 1 : 0;
    missing += s.missing ? 1 : 0;
    outliers += s.cellOutlier ? 1 : 0;
  }
  jobScalar("attnscope_job_ranks_expected", "Ranks the job was started with", MetricType::Gauge,
            id.worldSize);
  jobScalar("attnscope_job_ranks_reporting", "Ranks that answered the last aggregation round",
            MetricType::Gauge, last.expectedRanks > 0 ? last.presentRanks : 0);
  jobScalar("attnscope_job_ranks_described",
            "Ranks with series of their own in this job summary (every rank up to "
            "ATTNSCOPE_METRICS_RANKS; beyond, the top scores and the flagged ranks)",
            MetricType::Gauge, static_cast<double>(described.size()));
  jobScalar("attnscope_job_rounds_total", "Rounds the straggler detector has seen",
            MetricType::Counter, static_cast<double>(cluster.rounds));
  jobScalar("attnscope_job_median_attention_seconds_per_step",
            "Median over ranks of attention time per sampled step, last round", MetricType::Gauge,
            last.medianAttentionSeconds);
  jobScalar("attnscope_straggler_episodes_total", "Straggler episodes begun", MetricType::Counter,
            static_cast<double>(cluster.stragglers.size()));
  jobScalar("attnscope_cell_outlier_episodes_total", "Cell outlier episodes begun",
            MetricType::Counter, static_cast<double>(cluster.cellOutliers.size()));
  jobScalar("attnscope_job_stragglers", "Ranks flagged as stragglers, last round",
            MetricType::Gauge, stragglers);
  jobScalar("attnscope_job_cell_outliers", "Ranks with a flagged cell outlier, last round",
            MetricType::Gauge, outliers);
  jobScalar("attnscope_job_ranks_hung", "Ranks whose step counter stands still, last round",
            MetricType::Gauge, hung);
  jobScalar("attnscope_job_ranks_missing", "Ranks that did not answer, last round",
            MetricType::Gauge, missing);
  {
    // The scores of every present rank, bucketed: the shape of the job at any size.
    static const double kScoreBounds[] = {0.5, 0.8, 0.9, 0.95, 1.05, 1.1, 1.2, 1.5, 2, 3};
    MetricFamily f =
        family("attnscope_job_straggler_score_ranks",
               "Present ranks by straggler score (attention time per sampled step over the "
               "other ranks' median), last round",
               MetricType::Histogram);
    ClientMetric m;
    m.label = job;
    std::vector<double> scores;
    for (const RankStatus& s : last.ranks) {
      if (s.present) scores.push_back(s.score);
    }
    double sum = 0;
    for (double v : scores) sum += v;
    m.histogram.sample_count = scores.size();
    m.histogram.sample_sum = sum;
    for (double bound : kScoreBounds) {
      m.histogram.bucket.push_back(
          {static_cast<uint64_t>(
               std::count_if(scores.begin(), scores.end(), [&](double v) { return v <= bound; })),
           bound});
    }
    m.histogram.bucket.push_back({scores.size(), std::numeric_limits<double>::infinity()});
    f.metric.push_back(std::move(m));
    out->push_back(std::move(f));
  }
  MetricFamily score = family(
      "attnscope_straggler_score",
      "A rank's attention time per sampled step over the median of the other ranks, last round",
      MetricType::Gauge);
  MetricFamily flag =
      family("attnscope_straggler", "1 while the rank is a straggler", MetricType::Gauge);
  MetricFamily hungF =
      family("attnscope_rank_hung", "1 while the rank's step counter stands still and others move",
             MetricType::Gauge);
  MetricFamily missingF = family("attnscope_rank_missing",
                                 "1 while the rank does not answer rounds", MetricType::Gauge);
  MetricFamily perStep =
      family("attnscope_rank_attention_seconds_per_step",
             "A rank's attention time per sampled step, last round", MetricType::Gauge);
  MetricFamily stepTime = family("attnscope_rank_step_seconds",
                                 "A rank's mean step time, last round", MetricType::Gauge);
  MetricFamily steps = family("attnscope_rank_steps",
                              "Steps the rank has ended, as of the last round", MetricType::Gauge);
  for (const RankStatus* s : described) {
    const Labels l = with(job, {{"rank", std::to_string(s->rank)}});
    addValue(&score, l, s->score);
    addValue(&flag, l, s->straggler ? 1 : 0);
    addValue(&hungF, l, s->hung ? 1 : 0);
    addValue(&missingF, l, s->missing ? 1 : 0);
    addValue(&perStep, with(l, {{"phase", "forward"}}), s->window.forwardSeconds);
    addValue(&perStep, with(l, {{"phase", "backward"}}), s->window.backwardSeconds);
    addValue(&stepTime, l, s->window.stepSeconds);
    addValue(&steps, l, static_cast<double>(s->lastStep));
  }
  for (MetricFamily* f : {&score, &flag, &hungF, &missingF, &perStep, &stepTime, &steps})
    out->push_back(std::move(*f));
  // The findings, named down to the cell whatever the layer detail: a straggler's attribution
  // (the cell with the largest share of its excess) and each flagged cell outlier; at most one
  // series per rank each, present while flagged.
  MetricFamily attribution = family(
      "attnscope_straggler_attribution_share",
      "While a rank is a straggler: the (layer, phase, op kind) most of its episode's windows "
      "named as the largest share of its excess over the other ranks, and that share",
      MetricType::Gauge);
  MetricFamily cellFactor = family(
      "attnscope_cell_outlier_factor",
      "While a rank's (layer, phase, op kind) cell is an outlier: its time over the other ranks' "
      "for the same cell, last round",
      MetricType::Gauge);
  MetricFamily cellShare = family(
      "attnscope_cell_outlier_share",
      "While a rank's cell is an outlier: its excess as a share of the rank's attention time",
      MetricType::Gauge);
  // A straggler's attribution is its episode's (the cell most of its windows named): one window
  // naming another cell would end the series for a round and restart an alert's `for` clock.
  for (const DetectorEpisode& f : cluster.stragglers) {
    if (f.lastRound != last.round || f.layer.empty()) continue;
    addValue(&attribution,
             with(job, {{"rank", std::to_string(f.rank)},
                        {"layer", f.layer},
                        {"phase", phaseName(f.phase)},
                        {"op_kind", opKindName(f.kind)}}),
             f.share);
  }
  for (const RankStatus& s : last.ranks) {
    const std::string rank = std::to_string(s.rank);
    if (!s.cellOutlier) continue;
    const Labels l = with(job, {{"rank", rank},
                                {"layer", layerName(cluster, s.cellLayer)},
                                {"phase", phaseName(s.cellPhase)},
                                {"op_kind", opKindName(s.cellKind)}});
    addValue(&cellFactor, l, s.cellFactor);
    addValue(&cellShare, l, s.cellShare);
  }
  out->push_back(std::move(attribution));
  out->push_back(std::move(cellFactor));
  out->push_back(std::move(cellShare));
  // Every rank's calls summed by the all-reduce: per layer always (the model bounds it).
  addStats(out, "attnscope_job_", job, cluster.stats, /*layerDetail=*/true, StatsOf::kJob);
  // The job's roofline cells on host time (on a GPU the host time of an op is its launch, so the
  // device figures stay per rank, with layer detail).
  if (r.run.roofline && r.gpu.source == GpuTiming::kOff) {
    addRooflineCells(out, "attnscope_job_", job, cluster.stats, nullptr, r.run.ceilings);
  }
}

}  // namespace

std::vector<double> exportedBucketBounds() {
  std::vector<double> bounds;
  for (int k = kFirstBoundExp2; k <= kLastBoundExp2; ++k) bounds.push_back(std::pow(2.0, k / 2.0));
  return bounds;
}

std::vector<MetricFamily> buildMetrics(const MetricsIdentity& id, const RankMetrics& r,
                                       const StatsTable& stats, const MetricsOptions& options,
                                       const ClusterReport* cluster) {
  std::vector<MetricFamily> out;
  const Labels base = {{"job", id.job},
                       {"rank", std::to_string(id.rank)},
                       {"local_rank", std::to_string(id.localRank)},
                       {"node", id.node}};
  addRank(&out, id, r, stats, options, base);
  if (cluster != nullptr) addJob(&out, id, r, options, *cluster);
  // What this endpoint serves, itself included: the cost of the shape in force.
  MetricFamily f =
      family("attnscope_metrics_series",
             "Series this endpoint serves (buckets, sums and counts included)", MetricType::Gauge);
  addValue(&f, base, static_cast<double>(seriesCount(out) + 1));
  out.push_back(std::move(f));
  return out;
}

std::string renderMetrics(const std::vector<MetricFamily>& families) {
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace attnscope
