// A small transformer trained with LibTorch, instrumented with attnscope through its public API.
//
//   ATTNSCOPE_SUMMARY_JSON=/tmp/s-{rank}.json build/examples/train_transformer --layers 4 --steps 20
//
// The task is a copy task on random tokens (predict each input token), so the loss falls and the
// run is a real training run: forward, backward through every layer, an Adam step.
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/optim/adam.h>

#include "attnscope/MultiheadAttention.h"
#include "attnscope/attnscope.h"

namespace {

struct Options {
  int64_t layers = 4;
  int64_t dModel = 256;
  int64_t heads = 8;
  int64_t seq = 128;
  int64_t batch = 8;
  int64_t steps = 20;
  int64_t vocab = 1000;
  double dropout = 0.1;
  double lr = 1e-3;
  int64_t threads = 0;  // 0: LibTorch's default
  int64_t seed = 0;
  bool quiet = false;
};

void usage(std::ostream& out) {
  out << "usage: train_transformer [--layers N] [--d-model N] [--heads N] [--seq N] [--batch N]\n"
         "                         [--steps N] [--vocab N] [--dropout P] [--lr X] [--threads N]\n"
         "                         [--seed N] [--quiet]\n"
         "Trains a transformer encoder on a copy task; attnscope is configured by ATTNSCOPE_*.\n";
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
    if (flag == "--layers") o.layers = intArg(flag, v, 1, 256);
    else if (flag == "--d-model") o.dModel = intArg(flag, v, 8, 16384);
    else if (flag == "--heads") o.heads = intArg(flag, v, 1, 256);
    else if (flag == "--seq") o.seq = intArg(flag, v, 1, 65536);
    else if (flag == "--batch") o.batch = intArg(flag, v, 1, 65536);
    else if (flag == "--steps") o.steps = intArg(flag, v, 0, 100000000);
    else if (flag == "--vocab") o.vocab = intArg(flag, v, 2, 1000000);
    else if (flag == "--dropout") o.dropout = realArg(flag, v, 0.0, 0.99);
    else if (flag == "--lr") o.lr = realArg(flag, v, 0.0, 10.0);
    else if (flag == "--threads") o.threads = intArg(flag, v, 0, 1024);
    else if (flag == "--seed") o.seed = intArg(flag, v, 0, 1LL << 40);
    else throw std::invalid_argument("unknown flag " + flag + " (see --help)");
  }
  if (o.dModel % o.heads != 0) {
    throw std::invalid_argument("--d-model " + std::to_string(o.dModel) +
                                " must be divisible by --heads " + std::to_string(o.heads));
  }
  return o;
}

// Post-norm encoder layer: self-attention (observed by attnscope) and a feed-forward block.
struct EncoderLayerImpl : torch::nn::Module {
  EncoderLayerImpl(const std::string& name, const Options& o)
      : attn(register_module("attn", attnscope::MultiheadAttention(
                                         name, torch::nn::MultiheadAttentionOptions(o.dModel, o.heads)
                                                   .dropout(o.dropout)))),
        norm1(register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.dModel})))),
        norm2(register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.dModel})))),
        ff1(register_module("ff1", torch::nn::Linear(o.dModel, 4 * o.dModel))),
        ff2(register_module("ff2", torch::nn::Linear(4 * o.dModel, o.dModel))),
        drop(register_module("drop", torch::nn::Dropout(o.dropout))) {}

  torch::Tensor forward(const torch::Tensor& x) {  // x: [seq, batch, d_model]
    auto a = std::get<0>(attn->forward(x, x, x, torch::Tensor(), /*needWeights=*/false));
    auto h = norm1(x + drop(a));
    return norm2(h + drop(ff2(torch::relu(ff1(h)))));
  }

  attnscope::MultiheadAttention attn;
  torch::nn::LayerNorm norm1, norm2;
  torch::nn::Linear ff1, ff2;
  torch::nn::Dropout drop;
};
TORCH_MODULE(EncoderLayer);

struct ModelImpl : torch::nn::Module {
  explicit ModelImpl(const Options& o)
      : embed(register_module("embed", torch::nn::Embedding(o.vocab, o.dModel))),
        pos(register_module("pos", torch::nn::Embedding(o.seq, o.dModel))),
        head(register_module("head", torch::nn::Linear(o.dModel, o.vocab))) {
    layers = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < o.layers; ++i) {
      layers->push_back(EncoderLayer("layers." + std::to_string(i) + ".attn", o));
    }
  }

  torch::Tensor forward(const torch::Tensor& tokens) {  // tokens: [seq, batch]
    auto positions = torch::arange(tokens.size(0), tokens.options()).unsqueeze(1);
    auto x = embed(tokens) + pos(positions);
    for (const auto& layer : *layers) x = layer->as<EncoderLayer>()->forward(x);
    return head(x);
  }

  torch::nn::Embedding embed, pos;
  torch::nn::ModuleList layers;
  torch::nn::Linear head;
};
TORCH_MODULE(Model);

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

  Model model(o);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(o.lr));
  for (int64_t step = 0; step < o.steps; ++step) {
    auto tokens = torch::randint(o.vocab, {o.seq, o.batch}, torch::kLong);
    auto logits = model(tokens);
    auto loss = torch::nn::functional::cross_entropy(logits.view({-1, o.vocab}), tokens.view({-1}));
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    attnscope::step();
    if (!o.quiet && (step % 10 == 0 || step + 1 == o.steps)) {
      std::cout << "step " << step << " loss " << loss.item<double>() << std::endl;
    }
  }
  attnscope::stop();
  return 0;
}
