// A small transformer trained with LibTorch, instrumented with attnscope through its public API.
//
//   ATTNSCOPE_SUMMARY_JSON=/tmp/s-{rank}.json build/examples/train_transformer --layers 4 --steps 20
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>

#include <ATen/Parallel.h>

#include "TransformerModel.h"
#include "attnscope/attnscope.h"

namespace {

struct Options {
  examples::ModelOptions model;
  int64_t steps = 20;
  int64_t threads = 0;  // 0: LibTorch's default
  int64_t seed = 0;
  bool quiet = false;
};

void usage(std::ostream& out) {
  out << "usage: train_transformer [--layers N] [--d-model N] [--heads N] [--seq N] [--batch N]\n"
         "                         [--steps N] [--vocab N] [--dropout P] [--lr X] [--threads N]\n"
         "                         [--seed N] [--quiet]\n"
         "Trains a transformer encoder on a copy task; attnscope is configured by ATTNSCOPE_*\n"
         "variables (docs/CONFIGURATION.md).\n";
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
    if (flag == "--layers") m.layers = intArg(flag, v, 1, 256);
    else if (flag == "--d-model") m.dModel = intArg(flag, v, 8, 16384);
    else if (flag == "--heads") m.heads = intArg(flag, v, 1, 256);
    else if (flag == "--seq") m.seq = intArg(flag, v, 1, 65536);
    else if (flag == "--batch") m.batch = intArg(flag, v, 1, 65536);
    else if (flag == "--vocab") m.vocab = intArg(flag, v, 2, 1000000);
    else if (flag == "--dropout") m.dropout = realArg(flag, v, 0.0, 0.99);
    else if (flag == "--lr") m.lr = realArg(flag, v, 0.0, 10.0);
    else if (flag == "--steps") o.steps = intArg(flag, v, 0, 100000000);
    else if (flag == "--threads") o.threads = intArg(flag, v, 0, 1024);
    else if (flag == "--seed") o.seed = intArg(flag, v, 0, 1LL << 40);
    else throw std::invalid_argument("unknown flag " + flag + " (see --help)");
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
  try {
    o = parse(argc, argv);
    attnscope::start();  // reads ATTNSCOPE_*; a bad value stops here, before any training work
  } catch (const std::invalid_argument& e) {
    std::cerr << "train_transformer: " << e.what() << "\n";
    return 2;
  }
  if (o.threads > 0) at::set_num_threads(static_cast<int>(o.threads));
  torch::manual_seed(o.seed);

  examples::Model model(o.model);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(o.model.lr));
  for (int64_t step = 0; step < o.steps; ++step) {
    const double loss = examples::trainStep(model, optimizer, o.model);
    attnscope::step();
    if (!o.quiet && (step % 10 == 0 || step + 1 == o.steps)) {
      std::cout << "step " << step << " loss " << loss << std::endl;
    }
  }
  attnscope::stop();
  return 0;
}
