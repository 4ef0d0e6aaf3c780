#include "attnscope/MultiheadAttention.h"

#include "attnscope/attnscope.h"

namespace attnscope {

MultiheadAttentionImpl::MultiheadAttentionImpl(std::string layerName,
                                               const torch::nn::MultiheadAttentionOptions& options)
    : layerName_(std::move(layerName)) {
  inner = register_module("inner", torch::nn::MultiheadAttention(options));
}

std::tuple<torch::Tensor, torch::Tensor> MultiheadAttentionImpl::forward(
    const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
    const torch::Tensor& keyPaddingMask, bool needWeights, const torch::Tensor& attnMask,
    bool averageAttnWeights) {
  AttentionScope scope(layerName_);
  auto result =
      inner->forward(query, key, value, keyPaddingMask, needWeights, attnMask, averageAttnWeights);
  const torch::Tensor outputs[] = {std::get<0>(result), std::get<1>(result)};
  scope.close(outputs, 2);  // backward on the call's own nodes' hooks
  return result;
}

}  // namespace attnscope
