// A small transformer trained with LibTorch, instrumented with attnscope through its public API.
//
//   ATTNSCOPE_SUMMARY_JSON=/tmp/s-{rank}.json build/examples/train_transformer --layers 4 --steps
//   20
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>

#include "TransformerModel.h"
#include "attnscope/Distributed.h"
#include "attnscope/attnscope.h"
#include "attnscope/core/Topology.h"

namespace {

struct Options {
  examples::ModelOptions model;
  int64_t steps = 20;
  int64_t threads = 0;  // 0: LibTorch's default
  int64_t seed = 0;
  int64_t slowRank = -1;
  int64_t timeoutS = 120;
  bool gradSync = true;    // --grad-sync store|none
  double durationS = 0;    // stop after this many seconds of training (0: run all --steps)
  int64_t stallRank = -1;  // this rank stops stepping (sleeps) ...
  double stallAfterS = 0;  // ... this many seconds into training ...
  double stallForS = 0;    // ... for this long: a hang, for hang detection
  bool quiet = false;
  int64_t contendRank = -1;    // this rank shares its core with busy threads (a shared node)
  int64_t contendThreads = 1;  // how many: the training thread gets 1 / (1 + N) of the core
};

// --contend-rank: pins the calling thread and `count` spinning threads of its own to the last CPU
// the process may use, so the training thread gets about 1 / (1 + count) of one core: the same ops
// slower, as on a node shared with another job. Returns false (and pins nothing) with one CPU.
bool startContention(std::vector<std::thread>* spinners, int64_t count, std::atomic<bool>* stop) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0 || CPU_COUNT(&allowed) < 2) return false;
  int last = -1;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) last = c;
  }
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(last, &one);
  if (pthread_setaffinity_np(pthread_self(), sizeof(one), &one) != 0) return false;
  for (int64_t i = 0; i < count; ++i) {
    spinners->emplace_back([one, stop] {
      pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
      volatile uint64_t x = 0;
      while (!stop->load(std::memory_order_relaxed)) x = x + 1;
    });
  }
  return true;
}

void usage(std::ostream& out) {
  out << "usage: train_transformer [--layers N] [--d-model N] [--heads N] [--seq N] [--batch N]\n"
         "                         [--steps N] [--vocab N] [--dropout P] [--lr X] [--threads N]\n"
         "                         [--seed N] [--slow-rank R --slow-factor F [--slow-layer L]\n"
         "                         [--slow-kind KIND]]\n"
         "                         [--timeout-s S] [--grad-sync store|none] [--duration-s S]\n"
         "                         [--stall-rank R --stall-after-s S --stall-for-s T]\n"
         "                         [--contend-rank R [--contend-threads N]] [--quiet]\n"
         "Trains a transformer encoder on a copy task; attnscope is configured by ATTNSCOPE_*\n"
         "variables (docs/CONFIGURATION.md). Launched with several ranks (torchrun, or mpirun\n"
         "with MASTER_ADDR/MASTER_PORT), gradients are all-reduced through the job's c10d store "
         "(examples/StoreGroup.h).\n"
         "--slow-rank R --slow-factor F makes rank R run layer L's attention F times (real\n"
         "extra work); L defaults to the middle layer. With --slow-kind KIND (qkv_projection,\n"
         "score_matmul, softmax, context_matmul, output_projection) only that op kind of layer "
         "L's\n"
         "forward takes F times as long (F a number above 1: the op again on F - 1 of its rows).\n"
         "--grad-sync none trains every rank on its\n"
         "own (attnscope still aggregates, on a store of its own at MASTER_PORT + 1).\n"
         "--stall-rank R makes rank R stop stepping for T seconds after S seconds (a hang).\n"
         "--contend-rank R pins rank R's training thread to one CPU together with N busy threads\n"
         "of its own (--contend-threads, default 1; after attnscope measured its ceilings): the\n"
         "same ops at about 1 / (1 + N) of the speed, as on a node shared with another job.\n";
}

int64_t intArg(const std::string& flag, const char* value, int64_t lo, int64_t hi) {
  char* end = nullptr;
  const long long v = std::strtoll(value, &end, 10);
  if (end == value || *end != '\0' || v < lo || v > hi) {
    throw std::invalid_argument(flag + "=\"" + value + "\": expected an integer from " +
                                std::to_string(lo) + " to " + std::to_string(hi));
  }
  return v;
}

double realArg(const std::string& flag, const char* value, double lo, double hi) {
  char* end = nullptr;
  const double v = std::strtod(value, &end);
  if (end == value || *end != '\0' || !(v >= lo && v <= hi)) {
    throw std::invalid_argument(flag + "=\"" + value + "\": expected a number from " +
                                std::to_string(lo) + " to " + std::to_string(hi));
  }
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  examples::ModelOptions& m = o.model;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      usage(std::cout);
      std::exit(0);
    }
    if (flag == "--quiet") {
      o.quiet = true;
      continue;
    }
    if (i + 1 >= argc) throw std::invalid_argument(flag + ": missing value (or unknown flag)");
    const char* v = argv[++i];
    if (flag == "--layers")
      m.layers = intArg(flag, v, 1, 256);
    else if (flag == "--d-model")
      m.dModel = intArg(flag, v, 8, 16384);
    else if (flag == "--heads")
      m.heads = intArg(flag, v, 1, 256);
    else if (flag == "--seq")
      m.seq = intArg(flag, v, 1, 65536);
    else if (flag == "--batch")
      m.batch = intArg(flag, v, 1, 65536);
    else if (flag == "--vocab")
      m.vocab = intArg(flag, v, 2, 1000000);
    else if (flag == "--dropout")
      m.dropout = realArg(flag, v, 0.0, 0.99);
    else if (flag == "--lr")
      m.lr = realArg(flag, v, 0.0, 10.0);
    else if (flag == "--steps")
      o.steps = intArg(flag, v, 0, 100000000);
    else if (flag == "--threads")
      o.threads = intArg(flag, v, 0, 1024);
    else if (flag == "--seed")
      o.seed = intArg(flag, v, 0, 1LL << 40);
    else if (flag == "--slow-rank")
      o.slowRank = intArg(flag, v, 0, 1 << 24);
    else if (flag == "--slow-factor")
      m.slowKindFactor = realArg(flag, v, 1.0, 1000.0);
    else if (flag == "--slow-kind") {
      m.slowKind = v;
      bool known = false;
      std::string allowed;
      for (attnscope::OpKind k : examples::slowableKinds()) {
        known = known || m.slowKind == attnscope::opKindName(k);
        allowed += std::string(allowed.empty() ? "" : ", ") + attnscope::opKindName(k);
      }
      if (!known)
        throw std::invalid_argument("--slow-kind=\"" + m.slowKind + "\": allowed: " + allowed);
    } else if (flag == "--slow-layer")
      m.slowLayer = intArg(flag, v, 0, 255);
    else if (flag == "--timeout-s")
      o.timeoutS = intArg(flag, v, 1, 86400);
    else if (flag == "--duration-s")
      o.durationS = realArg(flag, v, 0.0, 1e7);
    else if (flag == "--stall-rank")
      o.stallRank = intArg(flag, v, 0, 1 << 24);
    else if (flag == "--stall-after-s")
      o.stallAfterS = realArg(flag, v, 0.0, 1e7);
    else if (flag == "--stall-for-s")
      o.stallForS = realArg(flag, v, 0.0, 1e7);
    else if (flag == "--contend-rank")
      o.contendRank = intArg(flag, v, 0, 1 << 24);
    else if (flag == "--contend-threads")
      o.contendThreads = intArg(flag, v, 1, 64);
    else if (flag == "--grad-sync") {
      const std::string mode = v;
      if (mode != "store" && mode != "none") {
        throw std::invalid_argument("--grad-sync=\"" + mode + "\": allowed: store, none");
      }
      o.gradSync = mode == "store";
    } else
      throw std::invalid_argument("unknown flag " + flag + " (see --help)");
  }
  if (m.slowKind.empty()) {
    // The whole attention runs F times: F a whole number.
    if (m.slowKindFactor != std::floor(m.slowKindFactor)) {
      throw std::invalid_argument("--slow-factor " + std::to_string(m.slowKindFactor) +
                                  " must be a whole number without --slow-kind (the attention "
                                  "runs F times)");
    }
    m.slowFactor = static_cast<int64_t>(m.slowKindFactor);
  }
  if (m.slowLayer >= m.layers) {
    throw std::invalid_argument("--slow-layer " + std::to_string(m.slowLayer) +
                                " is not a layer; allowed: 0 to " + std::to_string(m.layers - 1));
  }
  if (m.dModel % m.heads != 0) {
    throw std::invalid_argument("--d-model " + std::to_string(m.dModel) +
                                " must be divisible by --heads " + std::to_string(m.heads));
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  attnscope::Topology topology;
  attnscope::Config config;
  try {
    o = parse(argc, argv);
    topology = attnscope::Topology::fromEnvironment();
    config = attnscope::Config::fromEnvironment();  // a bad value stops here, before any work
  } catch (const std::invalid_argument& e) {
    std::cerr << "train_transformer: " << e.what() << "\n";
    return 2;
  }
  const int rank = topology.rank, world = topology.worldSize;
  if (o.slowRank == rank && (o.model.slowFactor > 1 || o.model.slowKindFactor > 1)) {
    if (o.model.slowLayer < 0) o.model.slowLayer = o.model.layers / 2;
  } else {
    o.model.slowFactor = 1;
    o.model.slowKind.clear();
  }

  // The job's own rendezvous and gradient group. attnscope gets the store (c10d-aware), never
  // the group: it forms a group of its own on the store under its own key prefix.
  c10::intrusive_ptr<c10d::Store> store;
  std::shared_ptr<examples::StoreGroup> group;
  try {
    if (world > 1 && o.gradSync) {
      examples::JobGroup job = examples::formJobGroup(topology, o.timeoutS);
      store = job.store;
      group = job.group;
    }
    attnscope::DistributedOptions distributed;
    distributed.store =
        store;  // attnscope aggregates on the job's rendezvous, under its own prefix
    distributed.rank = rank;
    distributed.worldSize = world;
    attnscope::start(config, distributed);
  } catch (const std::invalid_argument& e) {
    std::cerr << "train_transformer: " << e.what() << "\n";
    return 2;
  }
  if (o.threads > 0) at::set_num_threads(static_cast<int>(o.threads));
  std::vector<std::thread> spinners;
  std::atomic<bool> stopSpinner{false};
  if (o.contendRank == rank && !startContention(&spinners, o.contendThreads, &stopSpinner)) {
    std::cerr << "train_transformer: rank " << rank
              << ": --contend-rank needs at least 2 CPUs; running uncontended\n";
  }
  torch::manual_seed(o.seed);  // the same initial model on every rank

  examples::Model model(o.model);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(o.model.lr));
  torch::manual_seed(o.seed + 1 + rank);  // each rank its own data
  int status = 0;
  try {
    const auto began = std::chrono::steady_clock::now();
    bool stalled = false;
    for (int64_t step = 0; step < o.steps; ++step) {
      if (o.stallRank == rank && !stalled &&
          std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count() >
              o.stallAfterS) {
        stalled = true;  // a rank stuck in its step: no step ends, the plugin's threads go on
        std::this_thread::sleep_for(std::chrono::duration<double>(o.stallForS));
      }
      if (o.durationS > 0) {
        bool over =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count() >
            o.durationS;
        if (group) {  // all ranks stop at the same step, or the others would wait for the first
          torch::Tensor flag = torch::full({1}, over ? 1.0 : 0.0);
          group->allReduce(flag, examples::StoreGroup::Op::kMax);
          over = flag.item<double>() > 0;
        }
        if (over) break;
      }
      const double loss = examples::trainStep(model, optimizer, o.model, [&] {
        if (group) examples::allReduceGradients(model, *group);
      });
      attnscope::step();
      if (!o.quiet && (step % 10 == 0 || step + 1 == o.steps)) {
        std::cout << "rank " << rank << " step " << step << " loss " << loss << std::endl;
      }
    }
  } catch (const std::exception& e) {
    // A rank died or stopped answering: say so and end cleanly rather than hang.
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));
    std::cerr << "train_transformer: rank " << rank << ": training stopped: " << what << "\n";
    status = 3;
  }
  attnscope::stop();
  stopSpinner = true;
  for (std::thread& spinner : spinners) spinner.join();
  return status;
}
