// A user's own LibTorch program under mpirun, as the integration test UserProgram.mpirun4_slow_cell
// runs it: a small GPT whose causal self-attention is written by hand (QKV projection, score
// matmul, scale and causal mask, softmax, context matmul, output projection), each block's
// attention marked with attnscope::AttentionScope, gradients summed with MPI_Allreduce on
// MPI_COMM_WORLD, attnscope configured by ATTNSCOPE_* (ATTNSCOPE_AGGREGATION=mpi).
//
//   mpirun -np 4 mpi_gpt --steps 150 --inject 1:2:softmax:5 --timings /tmp/t-{rank}.json
//
// --inject RANK:BLOCK:OP:TIMES makes RANK run OP of block BLOCK's forward TIMES times (the last
// result is used): real extra work in one (layer, forward, op kind) cell. --timings writes what
// the program measured itself, per block and op, around the same ops attnscope classifies: the
// reference the test holds attnscope's figures against. --deadline-s ends the process (exit 124)
// when it is still running then, whatever it waits for.
#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/optim/adam.h>

#include "attnscope/attnscope.h"

namespace {

using Clock = std::chrono::steady_clock;

// The ops of the hand-written attention, in the order they run (attnscope's op kind names).
enum Op { kQkv, kScores, kSoftmax, kContext, kOutput, kOps };
constexpr std::array<const char*, kOps> kOpNames = {"qkv_projection", "score_matmul", "softmax",
                                                    "context_matmul", "output_projection"};

struct Injection {
  int rank = -1;
  int64_t block = -1;
  Op op = kSoftmax;
  int64_t times = 1;
};

struct Options {
  int64_t blocks = 4;
  int64_t dModel = 64;
  int64_t heads = 4;
  int64_t seq = 32;
  int64_t batch = 8;
  int64_t vocab = 256;
  int64_t steps = 150;
  int64_t threads = 1;
  double deadlineS = 0;  // 0: none
  std::string timings;   // {rank} expands to the rank
  Injection inject;
};

void usage(std::ostream& out) {
  out << "usage: mpi_gpt [--blocks N] [--d-model N] [--heads N] [--seq N] [--batch N] [--vocab N]\n"
         "               [--steps N] [--threads N] [--inject RANK:BLOCK:OP:TIMES]\n"
         "               [--timings PATH] [--deadline-s S]\n"
         "Trains a small GPT under mpirun (gradients summed with MPI_Allreduce), its attention\n"
         "marked with attnscope::AttentionScope (blocks named blk<i>.self_attention).\n"
         "--inject: rank RANK runs OP (qkv_projection, score_matmul, softmax, context_matmul,\n"
         "  output_projection) of block BLOCK's forward TIMES times.\n"
         "--timings: per-rank JSON ({rank} expands) of the program's own per-step times of each\n"
         "  block's forward ops.\n"
         "--deadline-s: exit 124 if the process still runs S seconds after it started.\n";
}

int64_t intArg(const std::string& flag, const std::string& value, int64_t lo, int64_t hi) {
  char* end = nullptr;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || v < lo || v > hi) {
    throw std::invalid_argument(flag + "=\"" + value + "\": expected an integer from " +
                                std::to_string(lo) + " to " + std::to_string(hi));
  }
  return v;
}

Injection parseInjection(const std::string& text) {
  std::vector<std::string> parts;
  size_t from = 0;
  for (size_t at; (at = text.find(':', from)) != std::string::npos; from = at + 1) {
    parts.push_back(text.substr(from, at - from));
  }
  parts.push_back(text.substr(from));
  if (parts.size() != 4) {
    throw std::invalid_argument("--inject=\"" + text + "\": expected RANK:BLOCK:OP:TIMES");
  }
  Injection in;
  in.rank = static_cast<int>(intArg("--inject RANK", parts[0], 0, 1 << 20));
  in.block = intArg("--inject BLOCK", parts[1], 0, 255);
  const auto it = std::find(kOpNames.begin(), kOpNames.end(), parts[2]);
  if (it == kOpNames.end()) {
    throw std::invalid_argument("--inject OP=\"" + parts[2] +
                                "\": allowed: qkv_projection, score_matmul, softmax, "
                                "context_matmul, output_projection");
  }
  in.op = static_cast<Op>(it - kOpNames.begin());
  in.times = intArg("--inject TIMES", parts[3], 1, 1000);
  return in;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      usage(std::cout);
      std::exit(0);
    }
    if (i + 1 >= argc) throw std::invalid_argument(flag + ": missing value (or unknown flag)");
    const std::string v = argv[++i];
    if (flag == "--blocks")
      o.blocks = intArg(flag, v, 1, 64);
    else if (flag == "--d-model")
      o.dModel = intArg(flag, v, 8, 4096);
    else if (flag == "--heads")
      o.heads = intArg(flag, v, 1, 64);
    else if (flag == "--seq")
      o.seq = intArg(flag, v, 2, 4096);
    else if (flag == "--batch")
      o.batch = intArg(flag, v, 1, 4096);
    else if (flag == "--vocab")
      o.vocab = intArg(flag, v, 2, 100000);
    else if (flag == "--steps")
      o.steps = intArg(flag, v, 1, 1000000);
    else if (flag == "--threads")
      o.threads = intArg(flag, v, 1, 256);
    else if (flag == "--deadline-s")
      o.deadlineS = static_cast<double>(intArg(flag, v, 1, 86400));
    else if (flag == "--timings")
      o.timings = v;
    else if (flag == "--inject")
      o.inject = parseInjection(v);
    else
      throw std::invalid_argument("unknown flag " + flag + " (see --help)");
  }
  if (o.dModel % o.heads != 0) {
    throw std::invalid_argument("--d-model " + std::to_string(o.dModel) +
                                " must be divisible by --heads " + std::to_string(o.heads));
  }
  if (o.inject.block >= o.blocks) {
    throw std::invalid_argument("--inject BLOCK " + std::to_string(o.inject.block) +
                                " is not a block; allowed: 0 to " + std::to_string(o.blocks - 1));
  }
  return o;
}

// The program's own clock around each op of a block's forward: seconds per step.
struct OpTimes {
  std::array<std::vector<double>, kOps> perStep;
};

// Runs `f` `times` times and keeps the last result; adds the seconds it took to `into`.
template <typename F>
torch::Tensor timed(double* into, int64_t times, F&& f) {
  const auto began = Clock::now();
  torch::Tensor out;
  for (int64_t i = 0; i < times; ++i) out = f();
  *into += std::chrono::duration<double>(Clock::now() - began).count();
  return out;
}

struct CausalSelfAttentionImpl : torch::nn::Module {
  CausalSelfAttentionImpl(std::string name_, int64_t d, int64_t heads_, int64_t seq)
      : name(std::move(name_)),
        heads(heads_),
        qkv(register_module("qkv", torch::nn::Linear(d, 3 * d))),
        out(register_module("out", torch::nn::Linear(d, d))) {
    future = register_buffer("future", torch::ones({seq, seq}, torch::kBool).triu(1));
  }

  // x: [batch, seq, d]. `repeat[op]`: how many times each op runs; `spent[op]`: its seconds.
  torch::Tensor forward(const torch::Tensor& x, const std::array<int64_t, kOps>& repeat,
                        std::array<double, kOps>* spent) {
    attnscope::AttentionScope scope(name);
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2), hd = d / heads;
    auto packed = timed(&(*spent)[kQkv], repeat[kQkv], [&] { return qkv(x); });
    auto parts = packed.split(d, -1);
    auto q = parts[0].view({b, t, heads, hd}).transpose(1, 2);
    auto k = parts[1].view({b, t, heads, hd}).transpose(1, 2);
    auto v = parts[2].view({b, t, heads, hd}).transpose(1, 2);
    auto scores = timed(&(*spent)[kScores], repeat[kScores],
                        [&] { return torch::matmul(q, k.transpose(-2, -1)); });
    // Scaling and masking the scores is softmax work to attnscope: timed with it.
    auto probs = timed(&(*spent)[kSoftmax], 1, [&] {
      auto s = (scores * (1.0 / std::sqrt(static_cast<double>(hd))))
                   .masked_fill(future.narrow(0, 0, t).narrow(1, 0, t),
                                -std::numeric_limits<float>::infinity());
      torch::Tensor p;
      for (int64_t i = 0; i < repeat[kSoftmax]; ++i) p = torch::softmax(s, -1);
      return p;
    });
    auto context =
        timed(&(*spent)[kContext], repeat[kContext], [&] { return torch::matmul(probs, v); });
    auto merged = context.transpose(1, 2).contiguous().view({b, t, d});
    return timed(&(*spent)[kOutput], repeat[kOutput], [&] { return out(merged); });
  }

  std::string name;
  int64_t heads;
  torch::nn::Linear qkv, out;
  torch::Tensor future;  // [seq, seq]: true above the diagonal (a later token)
};
TORCH_MODULE(CausalSelfAttention);

struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t index, int64_t d, int64_t heads, int64_t seq)
      : ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})))),
        attn(register_module(
            "self_attention",
            CausalSelfAttention("blk" + std::to_string(index) + ".self_attention", d, heads, seq))),
        ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})))),
        fc(register_module("fc", torch::nn::Linear(d, 4 * d))),
        proj(register_module("proj", torch::nn::Linear(4 * d, d))) {}

  torch::Tensor forward(torch::Tensor x, const std::array<int64_t, kOps>& repeat,
                        std::array<double, kOps>* spent) {
    x = x + attn->forward(ln1(x), repeat, spent);
    return x + proj(torch::gelu(fc(ln2(x))));
  }

  torch::nn::LayerNorm ln1;
  CausalSelfAttention attn;
  torch::nn::LayerNorm ln2;
  torch::nn::Linear fc, proj;
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  explicit GptImpl(const Options& o)
      : tokens(register_module("tokens", torch::nn::Embedding(o.vocab, o.dModel))),
        positions(register_module("positions", torch::nn::Embedding(o.seq, o.dModel))),
        lnF(register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.dModel})))),
        head(register_module("head", torch::nn::Linear(o.dModel, o.vocab))) {
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < o.blocks; ++i) blocks->push_back(Block(i, o.dModel, o.heads, o.seq));
  }

  // idx: [batch, seq] token ids; repeat[block][op]; spent[block][op] gets each op's seconds.
  torch::Tensor forward(const torch::Tensor& idx,
                        const std::vector<std::array<int64_t, kOps>>& repeat,
                        std::vector<std::array<double, kOps>>* spent) {
    auto x = tokens(idx) + positions(torch::arange(idx.size(1), idx.options()));
    for (size_t i = 0; i < blocks->size(); ++i) {
      x = blocks[i]->as<Block>()->forward(x, repeat[i], &(*spent)[i]);
    }
    return head(lnF(x));
  }

  torch::nn::Embedding tokens, positions;
  torch::nn::ModuleList blocks;
  torch::nn::LayerNorm lnF;
  torch::nn::Linear head;
};
TORCH_MODULE(Gpt);

// Sums every gradient over the ranks in one MPI_Allreduce of a flat buffer, then averages.
void allReduceGradients(Gpt& model, int world) {
  std::vector<torch::Tensor> grads;
  for (auto& p : model->parameters()) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  std::vector<torch::Tensor> flat;
  for (auto& g : grads) flat.push_back(g.reshape({-1}));
  torch::Tensor buffer = torch::cat(flat).contiguous();
  MPI_Allreduce(MPI_IN_PLACE, buffer.data_ptr<float>(), static_cast<int>(buffer.numel()), MPI_FLOAT,
                MPI_SUM, MPI_COMM_WORLD);
  buffer.div_(world);
  int64_t offset = 0;
  for (auto& g : grads) {
    g.copy_(buffer.narrow(0, offset, g.numel()).view_as(g));
    offset += g.numel();
  }
}

// Ends the process with exit status 124 once `seconds` have passed, unless disarmed first:
// whatever the process waits for (a collective, attnscope's stop, MPI_Finalize), it ends.
class Deadline {
 public:
  Deadline(double seconds, int rank) {
    if (seconds <= 0) return;
    thread_ = std::thread([this, seconds, rank] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!cv_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return done_; })) {
        std::fprintf(stderr, "mpi_gpt: rank %d: still running after the %.0f s deadline; exiting\n",
                     rank, seconds);
        std::fflush(stderr);
        std::_Exit(124);
      }
    });
  }
  ~Deadline() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void writeTimings(const std::string& pattern, int rank, const Options& o,
                  const std::vector<OpTimes>& times) {
  std::string path = pattern;
  const size_t at = path.find("{rank}");
  if (at != std::string::npos) path.replace(at, 6, std::to_string(rank));
  std::ofstream out(path);
  out << "{\"rank\": " << rank << ", \"steps\": " << o.steps << ", \"forward\": {";
  for (size_t b = 0; b < times.size(); ++b) {
    out << (b ? ", " : "") << "\"blk" << b << ".self_attention\": {";
    for (int op = 0; op < kOps; ++op) {
      const auto& v = times[b].perStep[op];
      double sum = 0;
      for (double s : v) sum += s;
      out << (op ? ", " : "") << "\"" << kOpNames[op]
          << "\": {\"mean_s\": " << (v.empty() ? 0 : sum / static_cast<double>(v.size()))
          << ", \"median_s\": " << median(v) << ", \"per_step_s\": [";
      for (size_t i = 0; i < v.size(); ++i) out << (i ? ", " : "") << v[i];
      out << "]}";
    }
    out << "}";
  }
  out << "}}\n";
  if (!out) std::cerr << "mpi_gpt: rank " << rank << ": could not write " << path << "\n";
}

int train(const Options& o, int rank, int world) {
  at::set_num_threads(static_cast<int>(o.threads));
  torch::manual_seed(0);  // the same initial model on every rank
  Gpt model(o);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  torch::manual_seed(1 + rank);  // each rank its own data

  std::vector<std::array<int64_t, kOps>> repeat(o.blocks);
  for (auto& r : repeat) r.fill(1);
  if (o.inject.rank == rank) repeat[o.inject.block][o.inject.op] = o.inject.times;
  std::vector<OpTimes> times(o.blocks);

  for (int64_t step = 0; step < o.steps; ++step) {
    auto idx = torch::randint(o.vocab, {o.batch, o.seq}, torch::kLong);
    std::vector<std::array<double, kOps>> spent(o.blocks);
    for (auto& s : spent) s.fill(0);
    auto logits = model->forward(idx, repeat, &spent);
    // A copy task: predict each input token.
    auto loss = torch::nn::functional::cross_entropy(logits.view({-1, o.vocab}), idx.view({-1}));
    optimizer.zero_grad();
    loss.backward();
    if (world > 1) allReduceGradients(model, world);
    optimizer.step();
    attnscope::step();
    for (int64_t b = 0; b < o.blocks; ++b) {
      for (int op = 0; op < kOps; ++op) times[b].perStep[op].push_back(spent[b][op]);
    }
  }
  if (!o.timings.empty()) writeTimings(o.timings, rank, o, times);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::cerr << "mpi_gpt: " << e.what() << "\n";
    return 2;
  }
  // attnscope's MPI aggregation runs on its reporter thread: the job initialises MPI with
  // MPI_THREAD_MULTIPLE (docs/AGGREGATION.md).
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int status = 0;
  {
    Deadline deadline(o.deadlineS, rank);
    if (provided < MPI_THREAD_MULTIPLE) {
      std::cerr << "mpi_gpt: rank " << rank << ": MPI gave thread level " << provided
                << ", below MPI_THREAD_MULTIPLE\n";
    }
    try {
      attnscope::start();
    } catch (const std::invalid_argument& e) {
      std::cerr << "mpi_gpt: " << e.what() << "\n";
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    try {
      status = train(o, rank, world);
    } catch (const std::exception& e) {
      std::string what = e.what();
      std::cerr << "mpi_gpt: rank " << rank
                << ": training stopped: " << what.substr(0, what.find('\n')) << "\n";
      status = 3;
    }
    attnscope::stop();
    MPI_Finalize();
  }
  return status;
}
