#pragma once

// The transformer the examples and the overhead harness train: token and position embeddings,
// post-norm encoder layers whose self-attention is an attnscope::MultiheadAttention, a vocabulary
// head. Trained on a copy task (predict each input token), so the loss falls.

#include <cstdint>
#include <string>

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/optim/adam.h>

#include "attnscope/MultiheadAttention.h"

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
};

struct EncoderLayerImpl : torch::nn::Module {
  EncoderLayerImpl(const std::string& name, const ModelOptions& o);
  torch::Tensor forward(const torch::Tensor& x);  // x: [seq, batch, d_model]

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

// One training step on a fresh random batch: forward, cross-entropy, backward, optimizer step.
// Returns the loss.
double trainStep(Model& model, torch::optim::Optimizer& optimizer, const ModelOptions& o);

}  // namespace examples
