// The Prometheus exporter without LibTorch: the families built from statistics, the text they
// render to, and the real HTTP endpoint (libmicrohttpd) with auth, control and a taken port.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "attnscope/exporters/ControlState.h"
#include "attnscope/exporters/FileSd.h"
#include "attnscope/exporters/Metrics.h"
#include "attnscope/exporters/MetricsServer.h"

namespace attnscope {
namespace {

struct Response {
  int status = 0;
  std::string body;
};

// A plain HTTP/1.0 request on loopback; the server closes the connection after answering.
Response http(int port, const std::string& method, const std::string& path,
              const std::string& headers = "", const std::string& body = "") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  Response r;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return r;
  }
  std::string request = method + " " + path + " HTTP/1.0\r\nHost: localhost\r\n" + headers;
  if (!body.empty()) {
    request += "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: " +
               std::to_string(body.size()) + "\r\n";
  }
  request += "\r\n" + body;
  (void)!::write(fd, request.data(), request.size());
  std::string raw;
  char buffer[65536];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof(buffer))) > 0;)
    raw.append(buffer, static_cast<size_t>(n));
  ::close(fd);
  if (raw.size() > 12) r.status = std::stoi(raw.substr(9, 3));
  const auto split = raw.find("\r\n\r\n");
  if (split != std::string::npos) r.body = raw.substr(split + 4);
  return r;
}

// Holds a loopback port taken for the test's lifetime.
struct TakenPort {
  TakenPort() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(fd, 4), 0);
    socklen_t len = sizeof(addr);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
  }
  ~TakenPort() { ::close(fd); }
  int fd = -1;
  int port = 0;
};

CallRecord call(int32_t layer, Phase phase, double seconds) {
  CallRecord r;
  r.layer = layer;
  r.phase = phase;
  r.ns = static_cast<int64_t>(seconds * 1e9);
  r.bytes = 1000;
  r.peak = 4096;
  r.kinds[static_cast<int>(OpKind::kSoftmax)].ns = r.ns / 4;
  r.kinds[static_cast<int>(OpKind::kSoftmax)].ops = 1;
  r.kinds[static_cast<int>(OpKind::kScoreMatmul)].ns = r.ns / 2;
  r.kinds[static_cast<int>(OpKind::kScoreMatmul)].ops = 1;
  return r;
}

StatsTable twoLayers() {
  StatsTable t;
  const int32_t a = t.layerId("layers.0.attn"), b = t.layerId("layers.1.attn");
  for (int i = 0; i < 10; ++i) {
    t.add(call(a, Phase::kForward, 0.001 * (i + 1)));
    t.add(call(b, Phase::kForward, 0.002));
    t.add(call(a, Phase::kBackward, 0.003));
  }
  return t;
}

const MetricsOptions kLayerDetail{/*layerDetail=*/true};

MetricsIdentity identity(int rank = 1) {
  MetricsIdentity id;
  id.job = "test-job";
  id.rank = rank;
  id.localRank = rank;
  id.worldSize = 4;
  id.node = "node-a";
  id.version = "0.1.0";
  id.torchVersion = "1.13.0";
  id.aggregation = "gloo";
  return id;
}

const prometheus::MetricFamily* find(const std::vector<prometheus::MetricFamily>& fs,
                                     const std::string& name) {
  for (const auto& f : fs) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::string label(const prometheus::ClientMetric& m, const std::string& name) {
  for (const auto& l : m.label) {
    if (l.name == name) return l.value;
  }
  return "";
}

TEST(MetricsTest, BucketBoundsAreTwoPerOctaveOnHistogramEdges) {
  const std::vector<double> bounds = exportedBucketBounds();
  ASSERT_EQ(bounds.size(), 37u);
  EXPECT_DOUBLE_EQ(bounds.front(), std::pow(2.0, -16));
  EXPECT_DOUBLE_EQ(bounds.back(), 4.0);
  for (double b : bounds) {
    // Each bound is the lower edge of a LogHistogram bucket, so cumulative counts are exact.
    const int i = LogHistogram::bucketIndex(b * 1.0000001);
    EXPECT_NEAR(LogHistogram::bucketLower(i), b, b * 1e-9);
  }
}

TEST(MetricsTest, HistogramCountsAreCumulativeAndExact) {
  const auto families = buildMetrics(identity(), RankMetrics{}, twoLayers(), kLayerDetail, nullptr);
  const auto* hist = find(families, "attnscope_attention_seconds");
  ASSERT_NE(hist, nullptr);
  EXPECT_EQ(hist->type, prometheus::MetricType::Histogram);
  bool sawLayer0Forward = false;
  for (const auto& m : hist->metric) {
    uint64_t previous = 0;
    for (const auto& b : m.histogram.bucket) {
      EXPECT_GE(b.cumulative_count, previous);
      previous = b.cumulative_count;
    }
    EXPECT_EQ(m.histogram.bucket.back().cumulative_count, m.histogram.sample_count);
    EXPECT_TRUE(std::isinf(m.histogram.bucket.back().upper_bound));
    if (label(m, "layer") == "layers.0.attn" && label(m, "phase") == "forward") {
      sawLayer0Forward = true;
      EXPECT_EQ(m.histogram.sample_count, 10u);
      EXPECT_NEAR(m.histogram.sample_sum, 0.055, 1e-6);
      // 1..10 ms: le=2^-7 (7.8 ms) holds the seven calls of 1 to 7 ms, le=2^-6.5 (11 ms) all ten.
      for (const auto& b : m.histogram.bucket) {
        if (std::fabs(b.upper_bound - std::pow(2.0, -7)) < 1e-12) EXPECT_EQ(b.cumulative_count, 7u);
        if (std::fabs(b.upper_bound - std::pow(2.0, -6.5)) < 1e-12)
          EXPECT_EQ(b.cumulative_count, 10u);
        if (b.upper_bound < 0.000976) EXPECT_EQ(b.cumulative_count, 0u);
      }
    }
  }
  EXPECT_TRUE(sawLayer0Forward);
  EXPECT_EQ(hist->metric.size(), 3u);  // (layer 0, fwd), (layer 0, bwd), (layer 1, fwd)
}

TEST(MetricsTest, EverySeriesNamesTheRank) {
  const auto families =
      buildMetrics(identity(2), RankMetrics{}, twoLayers(), kLayerDetail, nullptr);
  for (const auto& f : families) {
    EXPECT_EQ(f.name.rfind("attnscope_", 0), 0u) << f.name;
    for (const auto& m : f.metric) {
      EXPECT_EQ(label(m, "rank"), "2") << f.name;
      EXPECT_EQ(label(m, "job"), "test-job") << f.name;
      EXPECT_EQ(label(m, "node"), "node-a") << f.name;
    }
    if (f.type == prometheus::MetricType::Counter) {
      EXPECT_EQ(f.name.substr(f.name.size() - 6), "_total") << f.name;
    }
  }
}

TEST(MetricsTest, OpKindSecondsAndMemoryPerLayer) {
  RankMetrics r;
  r.overheadSeconds = 0.25;
  const auto families = buildMetrics(identity(), r, twoLayers(), kLayerDetail, nullptr);
  const auto* ops = find(families, "attnscope_attention_op_seconds_total");
  ASSERT_NE(ops, nullptr);
  double softmaxLayer1 = -1;
  for (const auto& m : ops->metric) {
    if (label(m, "layer") == "layers.1.attn" && label(m, "op_kind") == "softmax")
      softmaxLayer1 = m.counter.value;
  }
  EXPECT_NEAR(softmaxLayer1, 10 * 0.0005, 1e-9);
  const auto* bytes = find(families, "attnscope_attention_allocated_bytes_total");
  ASSERT_NE(bytes, nullptr);
  EXPECT_EQ(bytes->metric.front().counter.value, 10000);
  const auto* peak = find(families, "attnscope_attention_peak_bytes");
  ASSERT_NE(peak, nullptr);
  EXPECT_EQ(peak->metric.front().gauge.value, 4096);
  EXPECT_EQ(find(families, "attnscope_overhead_seconds_total")->metric.front().counter.value, 0.25);
}

// The default shape: the rank's totals over its layers by phase and op kind, call times as a
// summary (quantiles of the last window, count and sum since start), no per-layer histogram.
TEST(MetricsTest, ByDefaultARankExportsItsTotalsWithoutLayers) {
  RankMetrics r;
  for (int i = 1; i <= 100; ++i) r.windowCalls[0].add(0.001 * i);  // forward: 1..100 ms
  const auto families = buildMetrics(identity(), r, twoLayers(), MetricsOptions{}, nullptr);
  EXPECT_EQ(find(families, "attnscope_attention_seconds"), nullptr);
  for (const auto& f : families) {
    for (const auto& m : f.metric) EXPECT_EQ(label(m, "layer"), "") << f.name;
  }
  const auto* calls = find(families, "attnscope_attention_call_seconds");
  ASSERT_NE(calls, nullptr);
  EXPECT_EQ(calls->type, prometheus::MetricType::Summary);
  ASSERT_EQ(calls->metric.size(), 2u);  // forward, backward
  for (const auto& m : calls->metric) {
    ASSERT_EQ(m.summary.quantile.size(), kCallQuantiles.size());
    if (label(m, "phase") == "forward") {
      EXPECT_EQ(m.summary.sample_count, 20u);  // both layers' calls since start
      EXPECT_NEAR(m.summary.sample_sum, 0.055 + 0.02, 1e-9);
      // The window's quantiles, within the log histogram's error.
      EXPECT_NEAR(m.summary.quantile[0].value, 0.050, 0.050 * LogHistogram::kRelativeError * 2);
      EXPECT_NEAR(m.summary.quantile[1].value, 0.099, 0.099 * LogHistogram::kRelativeError * 2);
    } else {
      EXPECT_EQ(m.summary.sample_count, 10u);
      EXPECT_TRUE(std::isnan(m.summary.quantile[0].value));  // no backward call in the window
    }
  }
  const auto* ops = find(families, "attnscope_attention_op_seconds_total");
  ASSERT_NE(ops, nullptr);
  double softmaxForward = -1;
  for (const auto& m : ops->metric) {
    if (label(m, "phase") == "forward" && label(m, "op_kind") == "softmax")
      softmaxForward = m.counter.value;
  }
  EXPECT_NEAR(softmaxForward, 0.055 / 4 + 10 * 0.0005, 1e-9);  // both layers summed
  EXPECT_EQ(find(families, "attnscope_attention_allocated_bytes_total")->metric.size(), 2u);
  EXPECT_EQ(find(families, "attnscope_attention_peak_bytes")->metric.size(), 2u);
  EXPECT_EQ(find(families, "attnscope_metrics_layer_detail")->metric[0].gauge.value, 0);
  // The endpoint counts its own series, itself included.
  EXPECT_EQ(find(families, "attnscope_metrics_series")->metric[0].gauge.value,
            static_cast<double>(seriesCount(families)));
}

TEST(MetricsTest, JobSummaryOnRankZero) {
  ClusterReport cluster;
  cluster.rounds = 5;
  cluster.last.presentRanks = 3;
  cluster.last.expectedRanks = 4;
  for (int r = 0; r < 4; ++r) {
    RankStatus s;
    s.rank = r;
    s.present = r != 3;
    s.missing = r == 3;
    s.score = r == 2 ? 1.8 : 1.0;
    s.straggler = r == 2;
    s.window.forwardSeconds = 0.01 * (r + 1);
    cluster.last.ranks.push_back(s);
  }
  cluster.stats = twoLayers();
  const auto families =
      buildMetrics(identity(0), RankMetrics{}, twoLayers(), kLayerDetail, &cluster);
  const auto* score = find(families, "attnscope_straggler_score");
  ASSERT_NE(score, nullptr);
  ASSERT_EQ(score->metric.size(), 4u);
  EXPECT_EQ(label(score->metric[2], "rank"), "2");
  EXPECT_DOUBLE_EQ(score->metric[2].gauge.value, 1.8);
  EXPECT_EQ(find(families, "attnscope_straggler")->metric[2].gauge.value, 1);
  EXPECT_EQ(find(families, "attnscope_rank_missing")->metric[3].gauge.value, 1);
  EXPECT_EQ(find(families, "attnscope_job_ranks_reporting")->metric.front().gauge.value, 3);
  EXPECT_EQ(find(families, "attnscope_job_ranks_expected")->metric.front().gauge.value, 4);
  ASSERT_NE(find(families, "attnscope_job_attention_seconds"), nullptr);
  // Without a cluster (other ranks) none of the job families appear.
  const auto rankOnly =
      buildMetrics(identity(1), RankMetrics{}, twoLayers(), kLayerDetail, nullptr);
  EXPECT_EQ(find(rankOnly, "attnscope_straggler_score"), nullptr);
}

TEST(MetricsTest, GpuSourceAlwaysAndDeviceFiguresWhenAGpuRuns) {
  const auto cpu = buildMetrics(identity(), RankMetrics{}, twoLayers(), kLayerDetail, nullptr);
  const auto* source = find(cpu, "attnscope_gpu_timing_source");
  ASSERT_NE(source, nullptr);
  EXPECT_EQ(label(source->metric.front(), "source"), "off");
  EXPECT_EQ(find(cpu, "attnscope_gpu_allocated_bytes"), nullptr);
  EXPECT_EQ(find(cpu, "attnscope_attention_device_seconds"), nullptr);

  RankMetrics r;
  r.gpu.source = GpuTiming::kEvents;
  r.gpu.requested = GpuTiming::kCupti;
  r.gpu.fallbackReason = "CUPTI is held by another subscriber";
  r.gpu.device = 0;
  r.gpu.allocatedBytes = 1 << 20;
  r.gpu.spansDropped = 3;
  GpuStatus::LayerBackends b;
  b.layer = "layers.0.attn";
  b.kernels[static_cast<int>(AttentionBackend::kFlash)] = 7;
  r.gpu.backends.push_back(b);
  r.deviceStats = twoLayers();
  const auto gpu = buildMetrics(identity(), r, twoLayers(), kLayerDetail, nullptr);
  EXPECT_EQ(label(find(gpu, "attnscope_gpu_timing_source")->metric.front(), "source"), "events");
  EXPECT_EQ(find(gpu, "attnscope_gpu_timing_fallback")->metric.front().gauge.value, 1);
  EXPECT_EQ(find(gpu, "attnscope_gpu_allocated_bytes")->metric.front().gauge.value, 1 << 20);
  EXPECT_EQ(label(find(gpu, "attnscope_gpu_allocated_bytes")->metric.front(), "device"), "0");
  EXPECT_EQ(find(gpu, "attnscope_gpu_spans_dropped_total")->metric.front().counter.value, 3);
  ASSERT_NE(find(gpu, "attnscope_attention_device_seconds"), nullptr);
  EXPECT_EQ(find(gpu, "attnscope_attention_device_seconds")->metric.size(), 3u);
  const auto* kernels = find(gpu, "attnscope_attention_backend_kernels_total");
  ASSERT_NE(kernels, nullptr);
  EXPECT_EQ(label(kernels->metric.front(), "backend"),
            attentionBackendName(AttentionBackend::kFlash));
  EXPECT_EQ(kernels->metric.front().counter.value, 7);
}

TEST(MetricsTest, TextExpositionHasTypesAndBuckets) {
  const std::string text =
      renderMetrics(buildMetrics(identity(), RankMetrics{}, twoLayers(), kLayerDetail, nullptr));
  EXPECT_NE(text.find("# TYPE attnscope_attention_seconds histogram"), std::string::npos);
  EXPECT_NE(text.find("attnscope_attention_seconds_bucket{"), std::string::npos);
  EXPECT_NE(text.find("le=\"+Inf\""), std::string::npos);
  EXPECT_NE(text.find("# TYPE attnscope_steps_total counter"), std::string::npos);
}

TEST(MetricsTest, ServerServesWhatWasPublished) {
  MetricsServerOptions options;
  options.bind = "127.0.0.1";
  options.port = 0;  // the kernel picks
  MetricsServer server(options);
  ASSERT_TRUE(server.serving());
  server.publish(buildMetrics(identity(), RankMetrics{}, twoLayers(), kLayerDetail, nullptr));
  const Response r = http(server.port(), "GET", "/metrics");
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("attnscope_attention_seconds_bucket{"), std::string::npos);
  EXPECT_EQ(server.snapshot()->scrapes(), 1u);
}

TEST(MetricsTest, AClientThatSendsNothingDoesNotBlockTheNextScrape) {
  MetricsServerOptions options;
  options.bind = "127.0.0.1";
  options.port = 0;
  MetricsServer server(options);
  server.publish(buildMetrics(identity(), RankMetrics{}, StatsTable(), kLayerDetail, nullptr));
  const int silent = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server.port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(silent, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  // The silent connection waits on its own; this scrape is answered meanwhile.
  EXPECT_EQ(http(server.port(), "GET", "/metrics").status, 200);
  EXPECT_EQ(http(server.port(), "GET", "/nothing-here").status, 404);
  EXPECT_EQ(http(server.port(), "POST", "/metrics").status, 405);
  ::close(silent);
}

TEST(MetricsTest, TakenPortFallsBackToAFreeOne) {
  TakenPort taken;
  MetricsServerOptions options;
  options.bind = "127.0.0.1";
  options.port = taken.port;
  MetricsServer server(options);
  ASSERT_TRUE(server.serving());
  EXPECT_TRUE(server.fallback());
  EXPECT_NE(server.port(), taken.port);
  EXPECT_EQ(server.errors(), 1u);
  server.publish(buildMetrics(identity(), RankMetrics{}, StatsTable(), kLayerDetail, nullptr));
  EXPECT_EQ(http(server.port(), "GET", "/metrics").status, 200);
}

TEST(MetricsTest, BasicAuthRefusesScrapesWithoutCredentials) {
  MetricsServerOptions options;
  options.bind = "127.0.0.1";
  options.port = 0;
  options.credentials = "prom:s3cret";
  MetricsServer server(options);
  server.publish(buildMetrics(identity(), RankMetrics{}, StatsTable(), kLayerDetail, nullptr));
  EXPECT_EQ(http(server.port(), "GET", "/metrics").status, 401);
  // base64("prom:wrong") and base64("prom:s3cret")
  EXPECT_EQ(
      http(server.port(), "GET", "/metrics", "Authorization: Basic cHJvbTp3cm9uZw==\r\n").status,
      401);
  const Response ok =
      http(server.port(), "GET", "/metrics", "Authorization: Basic cHJvbTpzM2NyZXQ=\r\n");
  EXPECT_EQ(ok.status, 200);
  EXPECT_NE(ok.body.find("attnscope_build_info"), std::string::npos);
}

TEST(MetricsTest, ControlNeedsTheTokenAndValidatesRequests) {
  MetricsServerOptions options;
  options.bind = "127.0.0.1";
  options.port = 0;
  options.controlToken = "0123456789abcdef-token";
  options.sampleEvery = 1;
  MetricsServer server(options);
  const int port = server.port();
  const std::string bearer = "Authorization: Bearer 0123456789abcdef-token\r\n";
  EXPECT_EQ(http(port, "POST", "/control", "", "action=pause").status, 401);
  EXPECT_EQ(
      http(port, "POST", "/control", "Authorization: Bearer wrong\r\n", "action=pause").status,
      401);
  EXPECT_EQ(server.control().generation, 0u);
  const Response bad = http(port, "POST", "/control", bearer, "sample_every=0");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("allowed: action=pause, action=resume, sample_every=<1..1000000>"),
            std::string::npos);
  EXPECT_EQ(http(port, "DELETE", "/control", bearer).status, 405);
  const Response paused = http(port, "POST", "/control", bearer, "action=pause");
  EXPECT_EQ(paused.status, 200);
  EXPECT_NE(paused.body.find("\"paused\": true"), std::string::npos);
  EXPECT_EQ(http(port, "POST", "/control?sample_every=8", bearer).status, 200);
  const ControlState s = server.control();
  EXPECT_EQ(s.generation, 2u);
  EXPECT_TRUE(s.paused);
  EXPECT_EQ(s.sampleEvery, 8);
  EXPECT_EQ(http(port, "GET", "/control", bearer).status, 200);
  // /metrics is unaffected by the control hook.
  server.publish(buildMetrics(identity(), RankMetrics{}, StatsTable(), kLayerDetail, nullptr));
  EXPECT_EQ(http(port, "GET", "/metrics").status, 200);
}

TEST(MetricsTest, FileSdListsEveryTargetWithLabels) {
  const std::vector<ScrapeTarget> targets = {{0, 0, "node-a", "127.0.0.1", 9464},
                                             {1, 1, "node-a", "127.0.0.1", 9465}};
  const std::string path = ::testing::TempDir() + "/attnscope_file_sd.json";
  std::string error;
  ASSERT_TRUE(writeFileSd(path, targets, "job-x", &error)) << error;
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"targets\": [\"127.0.0.1:9465\"]"), std::string::npos);
  EXPECT_NE(text.find("\"rank\": \"1\", \"local_rank\": \"1\""), std::string::npos);
  EXPECT_NE(text.find("\"job\": \"job-x\""), std::string::npos);
  EXPECT_FALSE(writeFileSd("/nonexistent-dir/x.json", targets, "job-x", &error));
  EXPECT_NE(error.find("/nonexistent-dir/x.json"), std::string::npos);
}

}  // namespace
}  // namespace attnscope

namespace attnscope {
namespace {

// The series counts docs/METRICS.md gives for a 48-layer model (six op kinds per layer and phase).

// A model of `layers` layers, forward and backward, six op kinds per call (the example's).
StatsTable deepModel(int layers) {
  StatsTable t;
  const OpKind kinds[] = {OpKind::kQkvProjection, OpKind::kScoreMatmul,      OpKind::kSoftmax,
                          OpKind::kContextMatmul, OpKind::kOutputProjection, OpKind::kLayoutCopy};
  for (int l = 0; l < layers; ++l) {
    const int32_t id = t.layerId("layers." + std::to_string(l));
    for (Phase p : {Phase::kForward, Phase::kBackward}) {
      CallRecord r;
      r.layer = id;
      r.phase = p;
      r.ns = 1000000;
      for (OpKind k : kinds) {
        r.kinds[static_cast<int>(k)].ns = 1000;
        r.kinds[static_cast<int>(k)].ops = 1;
      }
      t.add(r);
    }
  }
  return t;
}

// docs/METRICS.md's budget: with defaults a rank's series do not depend on the model's depth
// (23 scalars, 2 per-step gauges, per phase a 4-series summary, 2 memory series and one per op
// kind, and the endpoint's own count); per-layer detail costs 40 (histogram) + 2 + kinds per layer
// and phase.
TEST(MetricsTest, DefaultSeriesOfARankDoNotGrowWithTheLayers) {
  const size_t two = seriesCount(
      buildMetrics(identity(1), RankMetrics{}, deepModel(2), MetricsOptions{}, nullptr));
  EXPECT_EQ(seriesCount(
                buildMetrics(identity(1), RankMetrics{}, deepModel(24), MetricsOptions{}, nullptr)),
            two);
  EXPECT_EQ(seriesCount(
                buildMetrics(identity(1), RankMetrics{}, deepModel(80), MetricsOptions{}, nullptr)),
            two);
  EXPECT_EQ(two, 23u + 2 + 2 * (4 + 2 + 6) + 1);
  const size_t detail48 =
      seriesCount(buildMetrics(identity(1), RankMetrics{}, deepModel(48), kLayerDetail, nullptr));
  EXPECT_EQ(detail48, 23u + 2 + 2 * 4 + 48 * 2 * (40 + 2 + 6) + 1);
}

// Rank 0 adds what does not grow with the world beyond ATTNSCOPE_METRICS_RANKS: 11 job scalars,
// the score distribution (10 bounds, +Inf, sum, count), 8 series per described rank, and the
// job's statistics per layer and phase (histogram, op-kind seconds, bytes, op-kind bytes: bounded
// by the model).
TEST(MetricsTest, JobSummarySeriesAreBoundedByTheModelAndTheDescribedRanks) {
  const StatsTable t = deepModel(48);
  const size_t rank =
      seriesCount(buildMetrics(identity(0), RankMetrics{}, t, MetricsOptions{}, nullptr));
  const size_t job = 11 + 13 + 48 * 2 * (40 + 6 + 1 + 6);
  ClusterReport cluster;
  cluster.stats = t;
  cluster.last.ranks.resize(4);
  EXPECT_EQ(seriesCount(buildMetrics(identity(0), RankMetrics{}, t, MetricsOptions{}, &cluster)),
            rank + job + 8 * 4);
  // 4,096 ranks, none flagged: the 16 top scores only.
  cluster.last.ranks.resize(4096);
  for (int r = 0; r < 4096; ++r) {
    cluster.last.ranks[r].rank = r;
    cluster.last.ranks[r].present = true;
  }
  EXPECT_EQ(seriesCount(buildMetrics(identity(0), RankMetrics{}, t, MetricsOptions{}, &cluster)),
            rank + job + 8 * kTopRanks);
}

// The roofline (docs/METRICS.md): 6 series per rank (ceilings, machine, shape reads; 7 with a GPU),
// and with layer detail 6 per (layer, phase, op kind) with formulas (flops, bytes, seconds,
// fraction, bound memory/compute).
TEST(MetricsTest, RooflineSeriesCountsOfA48LayerModel) {
  StatsTable t;
  for (int l = 0; l < 48; ++l) {
    const int32_t id = t.layerId("layers." + std::to_string(l));
    for (Phase p : {Phase::kForward, Phase::kBackward}) {
      CallRecord r;
      r.layer = id;
      r.phase = p;
      r.ns = 1000000;
      for (OpKind k :
           {OpKind::kQkvProjection, OpKind::kScoreMatmul, OpKind::kSoftmax, OpKind::kDropout,
            OpKind::kContextMatmul, OpKind::kOutputProjection, OpKind::kLayoutCopy}) {
        CallRecord::Kind& kind = r.kinds[static_cast<int>(k)];
        kind.ns = kind.modelledNs = 1000;
        kind.ops = 1;
        kind.flops = k == OpKind::kLayoutCopy ? 0 : 1e6;
        kind.moved = 1e5;
      }
      t.add(r);
    }
  }
  RankMetrics m;
  m.run.roofline = true;
  m.run.ceilings = Ceilings{1e11, 1e10, "calibration", ""};
  const size_t plain =
      seriesCount(buildMetrics(identity(1), RankMetrics{}, t, kLayerDetail, nullptr));
  EXPECT_EQ(seriesCount(buildMetrics(identity(1), m, t, kLayerDetail, nullptr)),
            plain + 6 + 48 * 2 * 7 * 6);
  // By default a rank exports the ceilings, its hardware and the shape reads; the cells are in
  // the job summary (per layer) and with layer detail.
  const size_t plainSummed =
      seriesCount(buildMetrics(identity(1), RankMetrics{}, t, MetricsOptions{}, nullptr));
  EXPECT_EQ(seriesCount(buildMetrics(identity(1), m, t, MetricsOptions{}, nullptr)),
            plainSummed + 6);
}

TEST(MetricsTest, RooflineBoundAndFractionAgainstTheCeilings) {
  StatsTable t;
  const int32_t id = t.layerId("layers.0.attn");
  CallRecord r;
  r.layer = id;
  r.phase = Phase::kForward;
  r.ns = 400000000;
  CallRecord::Kind& mm = r.kinds[static_cast<int>(OpKind::kScoreMatmul)];
  mm.ns = 150000000;
  mm.modelledNs = 100000000;  // 0.1 s with formulas: 2e9 flops, 1e8 bytes (intensity 20)
  mm.ops = 2;
  mm.flops = 2e9;
  mm.moved = 1e8;
  CallRecord::Kind& copy = r.kinds[static_cast<int>(OpKind::kLayoutCopy)];
  copy.ns = copy.modelledNs = 200000000;  // 0.2 s moving 5e8 bytes: 2.5e9 B/s
  copy.ops = 1;
  copy.moved = 5e8;
  t.add(r);
  RankMetrics m;
  m.run.roofline = true;
  m.run.ceilings = Ceilings{1e11, 1e10, "config", ""};  // ridge 10 flop/byte
  m.run.shapeReads = 30;
  m.run.shapeChanges = 3;
  const auto families = buildMetrics(identity(1), m, t, kLayerDetail, nullptr);
  const auto value = [&](const char* name, const std::string& kind, const std::string& bound = "") {
    const prometheus::MetricFamily* f = find(families, name);
    EXPECT_NE(f, nullptr) << name;
    if (f == nullptr) return -1.0;
    for (const auto& metric : f->metric) {
      if (label(metric, "op_kind") != kind || label(metric, "bound") != bound) continue;
      return f->type == prometheus::MetricType::Counter ? metric.counter.value : metric.gauge.value;
    }
    return -1.0;
  };
  EXPECT_DOUBLE_EQ(value("attnscope_roofline_flops_total", "score_matmul"), 2e9);
  EXPECT_DOUBLE_EQ(value("attnscope_roofline_bytes_total", "score_matmul"), 1e8);
  EXPECT_DOUBLE_EQ(value("attnscope_roofline_seconds_total", "score_matmul"), 0.1);
  // Intensity 20 is above the ridge: compute-bound, 2e10 flop/s of the 1e11 roof.
  EXPECT_EQ(value("attnscope_roofline_bound", "score_matmul", "compute"), 1.0);
  EXPECT_EQ(value("attnscope_roofline_bound", "score_matmul", "memory"), 0.0);
  EXPECT_NEAR(value("attnscope_roofline_ceiling_fraction", "score_matmul"), 0.2, 1e-12);
  // The copy moves data only: memory-bound, 2.5e9 of 1e10 B/s.
  EXPECT_EQ(value("attnscope_roofline_bound", "layout_copy", "memory"), 1.0);
  EXPECT_NEAR(value("attnscope_roofline_ceiling_fraction", "layout_copy"), 0.25, 1e-12);
  const prometheus::MetricFamily* peak = find(families, "attnscope_roofline_peak_flops_per_second");
  ASSERT_NE(peak, nullptr);
  ASSERT_EQ(peak->metric.size(), 1u);
  EXPECT_EQ(label(peak->metric[0], "source"), "config");
  EXPECT_DOUBLE_EQ(peak->metric[0].gauge.value, 1e11);
  EXPECT_DOUBLE_EQ(find(families, "attnscope_roofline_shape_reads_total")->metric[0].counter.value,
                   30);
  EXPECT_DOUBLE_EQ(
      find(families, "attnscope_roofline_shape_changes_total")->metric[0].counter.value, 3);
  // Unknown ceilings: the counters stay, no bound or fraction is claimed.
  m.run.ceilings = Ceilings{};
  const auto unknown = buildMetrics(identity(1), m, t, kLayerDetail, nullptr);
  EXPECT_TRUE(find(unknown, "attnscope_roofline_bound")->metric.empty());
  EXPECT_EQ(find(unknown, "attnscope_roofline_flops_total")->metric.size(), 2u);
  EXPECT_TRUE(find(unknown, "attnscope_roofline_peak_flops_per_second")->metric.empty());
}

}  // namespace
}  // namespace attnscope

namespace attnscope {
namespace {

TEST(MetricsTest, RankZeroExportsAFlaggedCellOutlierWithItsLabels) {
  ClusterReport cluster;
  cluster.layerNames = {"layers.0.attn", "layers.1.attn"};
  cluster.last.ranks.resize(3);
  for (int r = 0; r < 3; ++r) cluster.last.ranks[r].rank = r;
  RankStatus& s = cluster.last.ranks[2];
  s.cellOutlier = true;
  s.cellLayer = 1;
  s.cellPhase = Phase::kBackward;
  s.cellKind = OpKind::kSoftmax;
  s.cellFactor = 2.5;
  s.cellShare = 0.125;
  cluster.last.ranks[1].window.cellLayer = 0;  // reported, but not flagged yet: not exported
  cluster.last.ranks[1].cellLayer = 0;
  cluster.cellOutliers.resize(1);
  const std::string text =
      renderMetrics(buildMetrics(identity(0), RankMetrics{}, StatsTable(), kLayerDetail, &cluster));
  const std::string labels =
      "{job=\"test-job\",rank=\"2\",layer=\"layers.1.attn\",phase=\"backward\",op_kind="
      "\"softmax\"}";
  EXPECT_NE(text.find("attnscope_cell_outlier_factor" + labels + " 2.5"), std::string::npos)
      << text;
  EXPECT_NE(text.find("attnscope_cell_outlier_share" + labels + " 0.125"), std::string::npos);
  EXPECT_NE(text.find("attnscope_cell_outlier_episodes_total{job=\"test-job\"} 1"),
            std::string::npos);
  EXPECT_EQ(text.find("attnscope_cell_outlier_factor{job=\"test-job\",rank=\"1\""),
            std::string::npos);
}

// Beyond ATTNSCOPE_METRICS_RANKS rank 0 describes the top scores and every flagged rank, and the
// distribution counts every present rank.
TEST(MetricsTest, LargeJobsDescribeTheTopAndFlaggedRanksAndTheDistribution) {
  ClusterReport cluster;
  cluster.layerNames = {"layers.0.attn"};
  const int world = 2000;
  for (int r = 0; r < world; ++r) {
    RankStatus s;
    s.rank = r;
    s.present = r != 7;
    s.missing = r == 7;
    s.score = 1.0 + (r % 100) * 0.001;  // ranks 99, 199, ... score highest among the healthy
    cluster.last.ranks.push_back(s);
  }
  cluster.last.ranks[1500].score = 2.5;
  cluster.last.ranks[1500].straggler = true;
  // Its last window named another cell than most of its episode's windows: the episode's is
  // exported (an earlier, ended episode of another rank is not).
  cluster.last.round = 9;
  cluster.last.ranks[1500].window.topLayer = 0;
  cluster.last.ranks[1500].window.topPhase = Phase::kForward;
  cluster.last.ranks[1500].window.topKind = OpKind::kScoreMatmul;
  cluster.last.ranks[1500].window.topShare = 0.3;
  DetectorEpisode episode;
  episode.rank = 1500;
  episode.firstRound = 3;
  episode.lastRound = 9;
  episode.layer = "layers.0.attn";
  episode.phase = Phase::kBackward;
  episode.kind = OpKind::kSoftmax;
  episode.share = 0.75;
  DetectorEpisode ended = episode;
  ended.rank = 12;
  ended.lastRound = 5;
  cluster.stragglers = {ended, episode};
  cluster.last.ranks[42].cellOutlier = true;
  cluster.last.ranks[42].cellLayer = 0;
  cluster.last.presentRanks = world - 1;
  cluster.last.expectedRanks = world;
  MetricsOptions options;
  options.ranksDescribed = 1024;
  const auto families = buildMetrics(identity(0), RankMetrics{}, StatsTable(), options, &cluster);
  std::set<std::string> described;
  for (const auto& m : find(families, "attnscope_straggler_score")->metric)
    described.insert(label(m, "rank"));
  // The straggler, the cell outlier, the missing rank, and the 16 highest scores (the straggler
  // and the 15 ranks scoring 1.099).
  EXPECT_TRUE(described.count("1500") && described.count("42") && described.count("7"));
  EXPECT_EQ(described.size(), 3u + 15u);
  for (const std::string& r : described) {
    EXPECT_TRUE(r == "42" || r == "7" || r == "1500" || std::stoi(r) % 100 == 99) << r;
  }
  EXPECT_EQ(find(families, "attnscope_job_ranks_described")->metric[0].gauge.value, 18);
  EXPECT_EQ(find(families, "attnscope_job_stragglers")->metric[0].gauge.value, 1);
  EXPECT_EQ(find(families, "attnscope_job_ranks_missing")->metric[0].gauge.value, 1);
  const auto& dist = find(families, "attnscope_job_straggler_score_ranks")->metric[0].histogram;
  EXPECT_EQ(dist.sample_count, static_cast<uint64_t>(world - 1));
  for (const auto& b : dist.bucket) {
    if (b.upper_bound == 1.1) EXPECT_EQ(b.cumulative_count, static_cast<uint64_t>(world - 2));
    if (b.upper_bound == 2) EXPECT_EQ(b.cumulative_count, static_cast<uint64_t>(world - 2));
    if (b.upper_bound == 3) EXPECT_EQ(b.cumulative_count, static_cast<uint64_t>(world - 1));
  }
  // The straggler's cell, named whatever the layer detail.
  const std::string text = renderMetrics(families);
  EXPECT_NE(text.find("attnscope_straggler_attribution_share{job=\"test-job\",rank=\"1500\","
                      "layer=\"layers.0.attn\",phase=\"backward\",op_kind=\"softmax\"} 0.75"),
            std::string::npos);
  EXPECT_EQ(find(families, "attnscope_straggler_attribution_share")->metric.size(), 1u);
  // At or below the limit every rank is described.
  options.ranksDescribed = world;
  EXPECT_EQ(find(buildMetrics(identity(0), RankMetrics{}, StatsTable(), options, &cluster),
                 "attnscope_straggler_score")
                ->metric.size(),
            static_cast<size_t>(world));
}

// Any rank's /control takes layers=on|off for its own series; pause and the sample rate are rank
// 0's.
TEST(MetricsTest, EveryRankTakesLayerDetailAndOnlyRankZeroTheJobWideRequests) {
  MetricsServerOptions options;
  options.bind = "127.0.0.1";
  options.port = 0;
  options.controlToken = "0123456789abcdef-token";
  options.jobControl = false;
  MetricsServer server(options);
  server.publish(buildMetrics(identity(), RankMetrics{}, twoLayers(), MetricsOptions{}, nullptr));
  const std::string bearer = "Authorization: Bearer 0123456789abcdef-token\r\n";
  const Response refused = http(server.port(), "POST", "/control", bearer, "action=pause");
  EXPECT_EQ(refused.status, 400);
  EXPECT_NE(
      refused.body.find("allowed: layers=on|off (pause, resume and sample_every are rank 0's)"),
      std::string::npos)
      << refused.body;
  EXPECT_EQ(http(server.port(), "POST", "/control", bearer, "layers=maybe").status, 400);
  EXPECT_FALSE(server.control().layerDetail);
  const Response on = http(server.port(), "POST", "/control", bearer, "layers=on");
  EXPECT_EQ(on.status, 200);
  EXPECT_NE(on.body.find("\"layers\": true"), std::string::npos) << on.body;
  EXPECT_EQ(on.body.find("generation"), std::string::npos) << on.body;
  EXPECT_TRUE(server.control().layerDetail);
  EXPECT_EQ(server.control().generation, 0u);
  // The answer says what the endpoint serves now.
  const size_t series =
      seriesCount(buildMetrics(identity(), RankMetrics{}, twoLayers(), MetricsOptions{}, nullptr));
  EXPECT_NE(on.body.find("\"series\": " + std::to_string(series)), std::string::npos)
      << on.body << " (expected " << series << ")";
  EXPECT_EQ(http(server.port(), "POST", "/control", bearer, "layers=off").status, 200);
  EXPECT_FALSE(server.control().layerDetail);
}

// Managed back ends limit labels per series; attnscope keeps to 10 (le and quantile included), in
// every shape: rank 0 with GPU timing, the roofline, layer detail and every finding.
TEST(MetricsTest, NoSeriesCarriesMoreThanTenLabels) {
  RankMetrics r;
  r.run.roofline = true;
  r.run.ceilings = Ceilings{1e11, 1e10, "config", ""};
  r.run.machine.gpuMemoryBytes = 1 << 30;
  r.gpu.source = GpuTiming::kCupti;
  r.gpu.device = 0;
  r.deviceStats = twoLayers();
  r.pushing = true;
  ClusterReport cluster;
  cluster.stats = twoLayers();
  cluster.layerNames = {"layers.0.attn", "layers.1.attn"};
  cluster.last.ranks.resize(2);
  cluster.last.ranks[1].rank = 1;
  cluster.last.ranks[1].straggler = cluster.last.ranks[1].cellOutlier = true;
  cluster.last.ranks[1].window.topLayer = cluster.last.ranks[1].cellLayer = 0;
  for (const MetricsOptions& options : {MetricsOptions{}, kLayerDetail}) {
    size_t most = 0;
    for (const auto& f : buildMetrics(identity(0), r, twoLayers(), options, &cluster)) {
      const size_t extra =
          f.type == prometheus::MetricType::Histogram || f.type == prometheus::MetricType::Summary
              ? 1
              : 0;
      for (const auto& m : f.metric) {
        EXPECT_LE(m.label.size() + extra, 10u) << f.name;
        most = std::max(most, m.label.size() + extra);
      }
    }
    EXPECT_GE(most, 8u);  // the check saw the widest series (machine info, the findings)
  }
}

}  // namespace
}  // namespace attnscope
