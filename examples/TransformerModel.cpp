#include "TransformerModel.h"

#include <torch/nn/functional/loss.h>
#include <torch/utils.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <cmath>
#include <stdexcept>

#include "attnscope/attnscope.h"

namespace examples {

EncoderLayerImpl::EncoderLayerImpl(const std::string& name, const ModelOptions& o, int64_t repeats_)
    : repeats(repeats_),
      attn(register_module(
          "attn",
          attnscope::MultiheadAttention(
              name, torch::nn::MultiheadAttentionOptions(o.dModel, o.heads).dropout(o.dropout)))),
      norm1(
          register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.dModel})))),
      norm2(
          register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.dModel})))),
      ff1(register_module("ff1", torch::nn::Linear(o.dModel, 4 * o.dModel))),
      ff2(register_module("ff2", torch::nn::Linear(4 * o.dModel, o.dModel))),
      drop(register_module("drop", torch::nn::Dropout(o.dropout))) {
  heads = o.heads;
}

const std::vector<attnscope::OpKind>& slowableKinds() {
  static const std::vector<attnscope::OpKind> kinds = {
      attnscope::OpKind::kQkvProjection, attnscope::OpKind::kScoreMatmul,
      attnscope::OpKind::kSoftmax, attnscope::OpKind::kContextMatmul,
      attnscope::OpKind::kOutputProjection};
  return kinds;
}

namespace {
// Rows [0, share × rows) of `t` (dim 0), whole copies first when share > 1, each through `op`.
void overRows(const torch::Tensor& t, double share,
              const std::function<torch::Tensor(const torch::Tensor&)>& op) {
  for (; share >= 1; share -= 1) op(t);
  const int64_t rows = std::llround(share * static_cast<double>(t.size(0)));
  if (rows > 0) op(t.narrow(0, 0, rows));
}
}  // namespace

EncoderLayerImpl::ExtraWork EncoderLayerImpl::prepareExtra(const torch::Tensor& x) {
  torch::NoGradGuard noGrad;
  const int64_t seq = x.size(0), batch = x.size(1), d = x.size(2), n = batch * heads;
  const auto tokens = x.detach().reshape({seq * batch, d});
  const auto q = tokens.reshape({n, seq, d / heads});  // per head, like the layer's own
  ExtraWork w;
  switch (extraKind) {
    case attnscope::OpKind::kQkvProjection:
      w.input = tokens;
      w.op = [this](const torch::Tensor& t) {
        return torch::linear(t, attn->inner->in_proj_weight);
      };
      break;
    case attnscope::OpKind::kOutputProjection:
      w.input = tokens;
      w.op = [this](const torch::Tensor& t) {
        return torch::linear(t, attn->inner->out_proj->weight);
      };
      break;
    case attnscope::OpKind::kScoreMatmul:
      w.input = q;
      w.op = [](const torch::Tensor& t) { return torch::bmm(t, t.transpose(1, 2)); };
      break;
    case attnscope::OpKind::kSoftmax:
      w.input = torch::bmm(q, q.transpose(1, 2));  // [n, seq, seq] scores
      w.op = [](const torch::Tensor& t) { return torch::softmax(t, -1); };
      break;
    case attnscope::OpKind::kContextMatmul:
      w.input = torch::softmax(torch::bmm(q, q.transpose(1, 2)), -1);
      w.op = [q](const torch::Tensor& t) { return torch::bmm(t, q.narrow(0, 0, t.size(0))); };
      break;
    default:
      break;
  }
  return w;
}

torch::Tensor EncoderLayerImpl::forward(const torch::Tensor& x) {
  if (extraShare > 0) {
    // The injected op's input is made before the layer's scope opens (it is not the layer's
    // work); inside, the op runs first under its kind, then the layer's own attention: one call
    // whose kind takes longer, its other kinds classified as always.
    ExtraWork work = prepareExtra(x);
    torch::Tensor a;
    {
      attnscope::AttentionScope scope(attn->layerName());
      if (work.op) {
        torch::NoGradGuard noGrad;
        attnscope::OpKindScope kind(extraKind);
        overRows(work.input, extraShare, work.op);
      }
      a = std::get<0>(attn->inner->forward(x, x, x, torch::Tensor(), /*needWeights=*/false));
    }
    auto h = norm1(x + drop(a));
    return norm2(h + drop(ff2(torch::relu(ff1(h)))));
  }
  auto a = std::get<0>(attn->forward(x, x, x, torch::Tensor(), /*needWeights=*/false));
  for (int64_t r = 1; r < repeats; ++r) {
    a = a + std::get<0>(attn->forward(x, x, x, torch::Tensor(), /*needWeights=*/false));
  }
  if (repeats > 1) a = a / static_cast<double>(repeats);
  auto h = norm1(x + drop(a));
  return norm2(h + drop(ff2(torch::relu(ff1(h)))));
}

ModelImpl::ModelImpl(const ModelOptions& o)
    : embed(register_module("embed", torch::nn::Embedding(o.vocab, o.dModel))),
      pos(register_module("pos", torch::nn::Embedding(o.seq, o.dModel))),
      head(register_module("head", torch::nn::Linear(o.dModel, o.vocab))) {
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.layers; ++i) {
    EncoderLayer layer("layers." + std::to_string(i) + ".attn", o,
                       i == o.slowLayer ? o.slowFactor : 1);
    if (i == o.slowLayer && !o.slowKind.empty()) {
      for (attnscope::OpKind k : slowableKinds()) {
        if (o.slowKind == attnscope::opKindName(k)) layer->extraKind = k;
      }
      layer->extraShare = o.slowKindFactor - 1;
    }
    layers->push_back(layer);
  }
}

torch::Tensor ModelImpl::forward(const torch::Tensor& tokens) {
  auto positions = torch::arange(tokens.size(0), tokens.options()).unsqueeze(1);
  auto x = embed(tokens) + pos(positions);
  for (const auto& layer : *layers) x = layer->as<EncoderLayer>()->forward(x);
  return head(x);
}

double trainStep(Model& model, torch::optim::Optimizer& optimizer, const ModelOptions& o,
                 const std::function<void()>& afterBackward) {
  auto tokens = torch::randint(o.vocab, {o.seq, o.batch}, torch::kLong);
  auto logits = model(tokens);
  auto loss = torch::nn::functional::cross_entropy(logits.view({-1, o.vocab}), tokens.view({-1}));
  optimizer.zero_grad();
  loss.backward();
  if (afterBackward) afterBackward();
  optimizer.step();
  return loss.item<double>();
}

JobGroup formJobGroup(const attnscope::Topology& topology, int64_t timeoutSeconds) {
  if (topology.masterAddr.empty() || topology.masterPort == 0) {
    throw std::invalid_argument("a world of " + std::to_string(topology.worldSize) +
                                " needs MASTER_ADDR and MASTER_PORT (torchrun sets them)");
  }
  JobGroup job;
  c10d::TCPStoreOptions storeOptions;
  storeOptions.port = static_cast<uint16_t>(topology.masterPort);
  storeOptions.isServer = !topology.agentStore && topology.rank == 0;
  storeOptions.waitWorkers = false;
  storeOptions.timeout = std::chrono::seconds(timeoutSeconds);
  job.store = c10::make_intrusive<c10d::TCPStore>(topology.masterAddr, storeOptions);
  job.group = std::make_shared<StoreGroup>(job.store, "train_transformer/grad/", topology.rank,
                                           topology.worldSize);
  return job;
}

void allReduceGradients(Model& model, StoreGroup& group) {
  std::vector<torch::Tensor> grads;
  for (auto& p : model->parameters()) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  std::vector<torch::Tensor> views;
  for (auto& g : grads) views.push_back(g.reshape({-1}));
  std::vector<torch::Tensor> flat{torch::cat(views)};
  group.allReduce(flat[0]);
  flat[0].div_(group.worldSize());
  int64_t offset = 0;
  for (auto& g : grads) {
    g.copy_(flat[0].narrow(0, offset, g.numel()).view_as(g));
    offset += g.numel();
  }
}

}  // namespace examples
