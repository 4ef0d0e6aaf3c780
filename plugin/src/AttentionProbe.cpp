#include "AttentionProbe.h"

#include <algorithm>
#include <cstring>

#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>

namespace attnscope {
namespace detail {
namespace {

bool plainTensor(const c10::IValue& v) {
  if (!v.isTensor()) return false;
  const at::Tensor& t = v.toTensor();
  if (!t.defined()) return false;
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  // Symbolic, nested, meta and Python-subclass tensors: no real local sizes (Observer.cpp).
  return !(impl->has_symbolic_sizes_strides() || impl->is_nested() || impl->is_meta() ||
           impl->is_python_dispatch() || impl->key_set().has(c10::DispatchKey::Python));
}

bool is(const char* name, const char* op) { return std::strcmp(name, op) == 0; }

const char* dtypeName(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float:
      return "float32";
    case c10::ScalarType::Double:
      return "float64";
    case c10::ScalarType::Half:
      return "float16";
    case c10::ScalarType::BFloat16:
      return "bfloat16";
    default:
      return "";
  }
}

}  // namespace

void AttentionProbe::observe(const at::RecordFunction& fn, const char* name, OpKind kind) {
  const auto inputs = fn.inputs();
  const size_t n = inputs.size();
  if (kind == OpKind::kFusedAttention && is(name, "aten::scaled_dot_product_attention")) {
    // (query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if (n < 3 || !plainTensor(inputs[0]) || !plainTensor(inputs[1])) return;
    const at::Tensor& q = inputs[0].toTensor();
    const at::Tensor& k = inputs[1].toTensor();
    if (q.dim() < 3 || k.dim() < 3) return;
    sdpa = true;
    qLen = q.size(-2);
    headDim = q.size(-1);
    heads = q.dim() >= 4 ? q.size(-3) : 1;
    batch = q.numel() / std::max<int64_t>(1, heads * qLen * headDim);
    kvLen = k.size(-2);
    kvHeads = k.dim() >= 4 ? k.size(-3) : heads;
    dtype = dtypeName(q.scalar_type());
    mask = n > 3 && inputs[3].isTensor() && inputs[3].toTensor().defined() ? 1 : 0;
    if (n > 4 && inputs[4].isDouble()) dropout = inputs[4].toDouble();
    if (n > 5 && inputs[5].isBool()) causal = inputs[5].toBool() ? 1 : 0;
    return;
  }
  if (sdpa) return;  // the fused kernel's own arguments say it all
  if (kind == OpKind::kScoreMatmul && qLen == 0 &&
      (is(name, "aten::matmul") || is(name, "aten::bmm") || is(name, "aten::baddbmm"))) {
    const size_t a = is(name, "aten::baddbmm") ? 1 : 0;  // baddbmm(input, batch1, batch2, ...)
    if (n < a + 2 || !plainTensor(inputs[a]) || !plainTensor(inputs[a + 1])) return;
    const at::Tensor& q = inputs[a].toTensor();
    const at::Tensor& kt = inputs[a + 1].toTensor();
    if (q.dim() < 3 || kt.dim() < 3 || q.size(-1) != kt.size(-2)) return;
    qLen = q.size(-2);
    headDim = q.size(-1);
    kvLen = kt.size(-1);
    heads = q.dim() >= 4 ? q.size(-3) : 1;
    batch = q.numel() / std::max<int64_t>(1, heads * qLen * headDim);
    dtype = dtypeName(q.scalar_type());
    return;
  }
  if (kind == OpKind::kQkvProjection && projectionCount < 3 &&
      (is(name, "aten::linear") || is(name, "aten::addmm") || is(name, "aten::mm"))) {
    // linear(input, weight[out, in]); addmm(bias, input, weight[in, out]); mm(input, weight)
    const size_t w = is(name, "aten::linear") ? 1 : is(name, "aten::addmm") ? 2 : 1;
    if (n > w && plainTensor(inputs[w]) && inputs[w].toTensor().dim() == 2) {
      const at::Tensor& weight = inputs[w].toTensor();
      projections[projectionCount++] = is(name, "aten::linear") ? weight.size(0) : weight.size(1);
    }
    return;
  }
  if (kind == OpKind::kDropout && (is(name, "aten::dropout") || is(name, "aten::native_dropout") ||
                                   is(name, "aten::feature_dropout"))) {
    // (input, p, train)
    if (n > 2 && inputs[1].isDouble() && inputs[2].isBool())
      dropout = inputs[2].toBool() ? inputs[1].toDouble() : 0;
    return;
  }
  if (qLen > 0 && mask != 1 &&
      (is(name, "aten::add") || is(name, "aten::add_") || is(name, "aten::masked_fill") ||
       is(name, "aten::masked_fill_") || is(name, "aten::where"))) {
    // A tensor beside the scores whose last dimension spans the keys: an attention mask.
    for (size_t i = 1; i < n && i < 3; ++i) {
      if (plainTensor(inputs[i]) && inputs[i].toTensor().dim() >= 2 &&
          inputs[i].toTensor().size(-1) == kvLen) {
        mask = 1;
      }
    }
  }
}

}  // namespace detail
}  // namespace attnscope
