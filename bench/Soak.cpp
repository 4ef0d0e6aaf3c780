// Soak: a million training steps of a tiny attention model through the full path (sampling every
// step, aggregation rounds every 0.2 s, the metrics endpoint scraped over HTTP every 50,000 steps).
// Prints resident memory after warm-up and at the end, and attnscope's own overhead metric
// against the wall time. Exits 1 when resident memory grew by more than --max-growth-kib.
//
//   build/bench/soak [--steps 1000000] [--max-growth-kib 1024]
//   ATTNSCOPE_TRACE_DIR=/tmp/soak-trace build/bench/soak   # also the trace store's bytes per step

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>
#include <string>
#include <thread>

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ATen/Parallel.h>
#include <torch/types.h>
#include <torch/utils.h>

#include "HttpGet.h"
#include "attnscope/attnscope.h"

namespace {

long residentKib() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

double metric(const std::string& text, const std::string& name) {
  const std::regex re("\n" + name + "\\{[^}]*\\} ([0-9.e+-]+)");
  std::smatch m;
  return std::regex_search(text, m, re) ? std::stod(m[1]) : -1;
}

}  // namespace

int main(int argc, char** argv) {
  long steps = 1000000, maxGrowthKib = 1024;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--steps") == 0)
      steps = std::atol(argv[i + 1]);
    else if (std::strcmp(argv[i], "--max-growth-kib") == 0)
      maxGrowthKib = std::atol(argv[i + 1]);
    else {
      std::fprintf(stderr, "soak: unknown flag %s; allowed: --steps N --max-growth-kib K\n",
                   argv[i]);
      return 2;
    }
  }
  if (steps < 1000) {
    std::fprintf(stderr, "soak: --steps must be at least 1000\n");
    return 2;
  }
  at::set_num_threads(1);
  attnscope::Config config = attnscope::Config::fromEnvironment();
  config.intervalSeconds = 0.2;
  config.sampleEvery = 1;
  config.bind = "127.0.0.1";
  config.port = 0;  // set below: a free port of the kernel's choosing is not known in advance
  config.logLevel = attnscope::LogLevel::kWarn;
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    config.port = ntohs(addr.sin_port);
    ::close(fd);
  }
  attnscope::start(config);

  torch::manual_seed(0);
  auto wq = torch::randn({8, 8}, torch::requires_grad());
  auto wo = torch::randn({8, 8}, torch::requires_grad());
  const auto x = torch::randn({4, 8});
  const long warmup = steps / 10;
  long rssWarm = 0;
  std::string text;
  const auto t0 = std::chrono::steady_clock::now();
  auto tWarm = t0;
  for (long s = 0; s < steps; ++s) {
    torch::Tensor out;
    {
      attnscope::AttentionScope scope("layers.0.attn");
      auto q = torch::mm(x, wq);
      auto p = torch::softmax(torch::mm(q, q.t()), 1);
      out = torch::mm(torch::mm(p, q), wo);
    }
    out.sum().backward();
    attnscope::step();
    if (s + 1 == warmup) {
      rssWarm = residentKib();
      tWarm = std::chrono::steady_clock::now();
    }
    if ((s + 1) % 50000 == 0) text = bench::scrape(config.port);
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double wallAfterWarm =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - tWarm).count();
  const long rssEnd = residentKib();
  // The snapshot is rebuilt every interval: wait for one that includes the last step.
  std::this_thread::sleep_for(
      std::chrono::milliseconds(static_cast<int>(config.intervalSeconds * 1000 * 2 + 100)));
  text = bench::scrape(config.port);
  const double overhead = metric(text, "attnscope_overhead_seconds_total");
  const double stepsTotal = metric(text, "attnscope_steps_total");
  const double rounds = metric(text, "attnscope_aggregation_rounds_total");
  attnscope::stop();
  if (!config.traceDir.empty()) {
    // The trace store's file after stop (ATTNSCOPE_TRACE_DIR): bytes per sampled step, with the
    // fixed part (metadata, layer names, windows) included.
    struct stat st {};
    const std::string file = config.traceDir + "/rank-0.sqlite";
    if (::stat(file.c_str(), &st) == 0) {
      std::printf("trace store %s: %lld bytes, %.1f bytes per sampled step (1 layer, 2 phases)\n",
                  file.c_str(), static_cast<long long>(st.st_size),
                  static_cast<double>(st.st_size) / static_cast<double>(steps));
    } else {
      std::printf("trace store %s: not written\n", file.c_str());
    }
  }
  std::printf(
      "steps %ld in %.1f s (%.1f us per step), %0.f aggregation rounds, metrics scraped every "
      "50000 steps\n",
      steps, wall, wall / steps * 1e6, rounds);
  std::printf(
      "resident memory: %ld KiB after %ld steps, %ld KiB after %ld: growth %ld KiB (limit %ld) "
      "over %.1f s\n",
      rssWarm, warmup, rssEnd, steps, rssEnd - rssWarm, maxGrowthKib, wallAfterWarm);
  std::printf(
      "attnscope_steps_total %.0f; attnscope_overhead_seconds_total %.3f s = %.2f%% of the wall "
      "time "
      "(%.2f us per step)\n",
      stepsTotal, overhead, 100 * overhead / wall, overhead / steps * 1e6);
  if (stepsTotal < static_cast<double>(steps) - 1 || overhead <= 0) {
    std::printf("FAIL: the metrics endpoint did not report the run\n");
    return 1;
  }
  if (rssEnd - rssWarm > maxGrowthKib) {
    std::printf("FAIL: resident memory grew by more than %ld KiB\n", maxGrowthKib);
    return 1;
  }
  return 0;
}
