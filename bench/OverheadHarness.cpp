// Step-time overhead of attnscope on the example transformer, measured the way noisy 2-core
// machines allow: variants alternate in random order within one process, every step is timed,
// and the result is the ratio of median step times with a bootstrap 95% interval.
//
//   build/bench/overhead_harness --rounds 12 --steps 3 --layers 4 --d-model 256 --seq 128 --batch 8
//
// Instruction counts (exact where wall clock swings +-30%): bench/instr_overhead runs
//   valgrind --tool=callgrind build/bench/overhead_harness --count-instructions off|on|roofline-off
//   ...
// once per variant; the harness zeroes callgrind's counters after the warm-up (and after starting
// attnscope), runs --steps steps and dumps them (callgrind's client requests), so the dump holds
// exactly those steps, on every thread (the reporter's included).
//
// Under torchrun (WORLD_SIZE > 1) every rank trains with its gradients all-reduced through the
// job's store (examples/StoreGroup.h), as a DDP job all-reduces them; the ranks draw the same
// variant order, so they switch together, and attnscope aggregates on the job's store. Rank 0
// prints.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <valgrind/callgrind.h>

#include "TransformerModel.h"
#include "attnscope/Distributed.h"
#include "attnscope/attnscope.h"

namespace {

struct Variant {
  std::string name;
  bool on;
  int64_t sampleEvery;
  std::vector<double> stepSeconds;
  double ownSeconds =
      0;  // attnscope's own accounting (RunInfo::overheadSeconds), timed steps and the untimed ones
  int64_t ownSteps = 0;
  bool roofline = true;  // ATTNSCOPE_ROOFLINE: shapes read and formulas applied on sampled steps
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// 95% interval of median(b)/median(a) by resampling each variant's steps.
std::pair<double, double> bootstrapRatio(const std::vector<double>& a, const std::vector<double>& b,
                                         std::mt19937& rng) {
  std::vector<double> ratios;
  std::vector<double> ra(a.size()), rb(b.size());
  std::uniform_int_distribution<size_t> pickA(0, a.size() - 1), pickB(0, b.size() - 1);
  for (int i = 0; i < 2000; ++i) {
    for (auto& x : ra) x = a[pickA(rng)];
    for (auto& x : rb) x = b[pickB(rng)];
    ratios.push_back(median(rb) / median(ra));
  }
  std::sort(ratios.begin(), ratios.end());
  return {ratios[ratios.size() * 25 / 1000], ratios[ratios.size() * 975 / 1000]};
}

int64_t intFlag(const std::string& flag, const char* v) {
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0' || n < 1)
    throw std::invalid_argument(flag + " needs a positive integer");
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  examples::ModelOptions m;
  int64_t rounds = 12, steps = 3, threads = 1, defaultSampleEvery = 0;
  std::string countInstructions;  // off | on | roofline-off: one variant for callgrind
  try {
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string f = argv[i];
      if (f == "--count-instructions") {
        countInstructions = argv[i + 1];
        if (countInstructions != "off" && countInstructions != "on" &&
            countInstructions != "roofline-off") {
          throw std::invalid_argument("--count-instructions \"" + countInstructions +
                                      "\": allowed: off, on, roofline-off");
        }
      } else if (f == "--rounds")
        rounds = intFlag(f, argv[i + 1]);
      else if (f == "--steps")
        steps = intFlag(f, argv[i + 1]);
      else if (f == "--layers")
        m.layers = intFlag(f, argv[i + 1]);
      else if (f == "--d-model")
        m.dModel = intFlag(f, argv[i + 1]);
      else if (f == "--heads")
        m.heads = intFlag(f, argv[i + 1]);
      else if (f == "--seq")
        m.seq = intFlag(f, argv[i + 1]);
      else if (f == "--batch")
        m.batch = intFlag(f, argv[i + 1]);
      else if (f == "--threads")
        threads = intFlag(f, argv[i + 1]);
      else if (f == "--sample-every")
        defaultSampleEvery = intFlag(f, argv[i + 1]);
      else
        throw std::invalid_argument("unknown flag " + f);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "overhead_harness: %s\nflags: --rounds --steps --layers --d-model --heads "
                 "--seq --batch --threads --sample-every --count-instructions\n",
                 e.what());
    return 2;
  }
  at::set_num_threads(static_cast<int>(threads));
  const attnscope::Topology topology = attnscope::Topology::fromEnvironment();
  examples::JobGroup job;
  if (topology.worldSize > 1) job = examples::formJobGroup(topology, 120);
  attnscope::DistributedOptions distributed;
  distributed.store = job.store;
  distributed.rank = topology.rank;
  distributed.worldSize = topology.worldSize;
  torch::manual_seed(0);
  examples::Model model(m);
  const auto afterBackward = [&] {
    if (job.group) examples::allReduceGradients(model, *job.group);
  };
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(m.lr));

  std::vector<Variant> variants = {{"attnscope off", false, 1, {}},
                                   {"attnscope sample-every 1", true, 1, {}}};
  {  // the roofline's share of the cost: the same sampling without shape reads
    Variant noRoofline{"sample-every 1, roofline off", true, 1, {}};
    noRoofline.roofline = false;
    variants.push_back(noRoofline);
  }
  if (defaultSampleEvery > 1) {
    variants.push_back({"attnscope sample-every " + std::to_string(defaultSampleEvery),
                        true,
                        defaultSampleEvery,
                        {}});
  }
  for (int i = 0; i < 3; ++i) examples::trainStep(model, optimizer, m, afterBackward);  // warm-up

  if (!countInstructions.empty()) {
    const bool on = countInstructions != "off";
    if (on) {
      attnscope::Config c;
      c.logLevel = attnscope::LogLevel::kWarn;
      c.sampleEvery = defaultSampleEvery > 0 ? defaultSampleEvery : 1;
      c.roofline = countInstructions == "on";
      c.peakFlops = c.roofline ? 3e10 : 0;  // configured ceilings: no calibration under valgrind
      c.peakBandwidth = c.roofline ? 1e10 : 0;
      c.port = 0;
      attnscope::start(c, distributed);
    }
    examples::trainStep(model, optimizer, m, afterBackward);  // the first step after the switch
    if (on) attnscope::step();
    CALLGRIND_ZERO_STATS;
    for (int64_t s = 0; s < steps; ++s) {
      examples::trainStep(model, optimizer, m, afterBackward);
      if (on) attnscope::step();
    }
    CALLGRIND_DUMP_STATS_AT("steps");
    if (on) attnscope::stop();
    std::printf("counted %lld steps, attnscope %s\n", static_cast<long long>(steps),
                countInstructions.c_str());
    return 0;
  }

  std::mt19937 rng(12345);
  std::vector<size_t> order(variants.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (int64_t r = 0; r < rounds; ++r) {
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t idx : order) {
      Variant& v = variants[idx];
      if (v.on) {
        attnscope::Config c;
        c.logLevel = attnscope::LogLevel::kWarn;
        c.sampleEvery = v.sampleEvery;
        c.roofline = v.roofline;
        c.port =
            0;  // the harness scrapes nothing; the reporter thread and aggregation run as usual
        attnscope::start(c, distributed);
      }
      examples::trainStep(model, optimizer, m,
                          afterBackward);  // untimed: the first step after a switch
      if (v.on) attnscope::step();
      // A block of a sparse variant spans its period after the untimed step 0 (sampled), so that
      // exactly one timed step in sampleEvery is sampled, as in a long run.
      const int64_t timed = v.on && v.sampleEvery > 1 ? v.sampleEvery : steps;
      for (int64_t s = 0; s < timed; ++s) {
        const auto t0 = std::chrono::steady_clock::now();
        examples::trainStep(model, optimizer, m, afterBackward);
        if (v.on) attnscope::step();
        v.stepSeconds.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      if (v.on) {
        v.ownSeconds += attnscope::runInfo().overheadSeconds;
        v.ownSteps += timed + 1;
        attnscope::stop();
      }
    }
  }

  if (topology.rank != 0) return 0;
  std::printf(
      "model: %lld layers, d_model %lld, %lld heads, seq %lld, batch %lld, %lld thread(s), %d "
      "rank(s); "
      "%lld rounds x %lld timed steps per variant, random order\n",
      (long long)m.layers, (long long)m.dModel, (long long)m.heads, (long long)m.seq,
      (long long)m.batch, (long long)threads, topology.worldSize, (long long)rounds,
      (long long)steps);
  const double base = median(variants[0].stepSeconds);
  std::printf("%-30s %12s %10s %22s\n", "variant", "median step", "ratio", "95% interval (ratio)");
  for (const Variant& v : variants) {
    const double med = median(v.stepSeconds);
    if (&v == &variants[0]) {
      std::printf("%-30s %10.2fms %10s %22s\n", v.name.c_str(), med * 1e3, "1", "-");
      continue;
    }
    const auto [lo, hi] = bootstrapRatio(variants[0].stepSeconds, v.stepSeconds, rng);
    const double own = v.ownSteps > 0 ? v.ownSeconds / static_cast<double>(v.ownSteps) : 0;
    std::printf("%-30s %10.2fms %10.4f %10.4f .. %.4f   own accounting %.1f us/step = %.3f%%\n",
                v.name.c_str(), med * 1e3, med / base, lo, hi, own * 1e6, 100 * own / base);
  }
  return 0;
}
