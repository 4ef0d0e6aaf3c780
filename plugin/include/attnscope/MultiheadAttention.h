#pragma once

// torch::nn::MultiheadAttention that marks each forward call as an attnscope layer.
//
//   attnscope::MultiheadAttention attn("layers.0.attn",
//       torch::nn::MultiheadAttentionOptions(256, 8).dropout(0.1));
//   auto [out, weights] = attn(x, x, x);

#include <string>
#include <tuple>

#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/pimpl.h>

#include "attnscope/core/Export.h"

namespace attnscope {

class ATTNSCOPE_API MultiheadAttentionImpl : public torch::nn::Module {
 public:
  MultiheadAttentionImpl(std::string layerName,
                         const torch::nn::MultiheadAttentionOptions& options);

  std::tuple<torch::Tensor, torch::Tensor> forward(
      const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
      const torch::Tensor& keyPaddingMask = {}, bool needWeights = true,
      const torch::Tensor& attnMask = {}, bool averageAttnWeights = true);

  const std::string& layerName() const { return layerName_; }
  torch::nn::MultiheadAttention inner{nullptr};

 private:
  std::string layerName_;
};

TORCH_MODULE(MultiheadAttention);

}  // namespace attnscope
