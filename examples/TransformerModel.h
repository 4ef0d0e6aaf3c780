#pragma once

// The transformer the examples and the overhead harness train: token and position embeddings,
// post-norm encoder layers whose self-attention is an attnscope::MultiheadAttention, a vocabulary
// head. Trained on a copy task (predict each input token), so the loss falls.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/optim/adam.h>

#include <memory>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "StoreGroup.h"

#include "attnscope/MultiheadAttention.h"
#include "attnscope/core/OpKind.h"
#include "attnscope/core/Topology.h"

namespace examples {

struct ModelOptions {
  int64_t layers = 4;
  int64_t dModel = 256;
  int64_t heads = 8;
  int64_t seq = 128;
  int64_t batch = 8;
  int64_t vocab = 1000;
  double dropout = 0.1;
  double lr = 1e-3;
  // Straggler injection: this layer's attention runs `slowFactor` times (real extra compute in
  // forward and backward, averaged so the model stays the same). 1: no injection.
  int64_t slowLayer = -1;
  int64_t slowFactor = 1;
  // ...or, with slowKind set, only that op kind of the layer's forward takes slowKindFactor times
  // as long: the same op run again, without gradient, on (slowKindFactor - 1) of its input rows,
  // inside the layer's scope and counted as that kind.
  std::string slowKind;
  double slowKindFactor = 1;
};

// The op kinds --slow-kind accepts, by name (opKindName).
const std::vector<attnscope::OpKind>& slowableKinds();

struct EncoderLayerImpl : torch::nn::Module {
  EncoderLayerImpl(const std::string& name, const ModelOptions& o, int64_t repeats);
  torch::Tensor forward(const torch::Tensor& x);  // x: [seq, batch, d_model]

  int64_t repeats;  // attention runs per forward (straggler injection)
  // Op kind injection (ModelOptions::slowKind): the kind and its extra share; 0: none.
  attnscope::OpKind extraKind = attnscope::OpKind::kOther;
  double extraShare = 0;
  int64_t heads = 1;
  struct ExtraWork {
    torch::Tensor input;
    std::function<torch::Tensor(const torch::Tensor&)> op;  // empty: nothing to inject
  };
  ExtraWork prepareExtra(const torch::Tensor& x);  // the injected op and its input
  attnscope::MultiheadAttention attn;
  torch::nn::LayerNorm norm1, norm2;
  torch::nn::Linear ff1, ff2;
  torch::nn::Dropout drop;
};
TORCH_MODULE(EncoderLayer);

struct ModelImpl : torch::nn::Module {
  explicit ModelImpl(const ModelOptions& o);
  torch::Tensor forward(const torch::Tensor& tokens);  // tokens: [seq, batch]

  torch::nn::Embedding embed, pos;
  torch::nn::ModuleList layers;
  torch::nn::Linear head;
};
TORCH_MODULE(Model);

// One training step on a fresh random batch: forward, cross-entropy, backward, `afterBackward`
// (the gradient all-reduce of a distributed run), optimizer step. Returns the loss.
double trainStep(Model& model, torch::optim::Optimizer& optimizer, const ModelOptions& o,
                 const std::function<void()>& afterBackward = {});

// The job's own rendezvous and gradient group: a TCPStore at MASTER_ADDR:MASTER_PORT (torchrun's
// agent serves it, or rank 0) and the store-based group on it (StoreGroup.h says why not Gloo).
struct JobGroup {
  c10::intrusive_ptr<c10d::Store> store;
  std::shared_ptr<StoreGroup> group;
};
// \throw std::invalid_argument when MASTER_ADDR/MASTER_PORT are missing.
JobGroup formJobGroup(const attnscope::Topology& topology, int64_t timeoutSeconds);

// Averages the gradients of all ranks in one all-reduce of a flat buffer (what DDP does, minus
// the bucketing and the overlap with backward).
void allReduceGradients(Model& model, StoreGroup& group);

}  // namespace examples
