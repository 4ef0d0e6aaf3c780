#include "attnscope/core/OpKind.h"

#include "attnscope/core/GeneratedKernel.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string_view>
#include <unordered_map>

namespace attnscope {
namespace {

// What a name says about an op before its position in the recipe is known.
enum class Family : uint8_t {
  kUnknown,
  kProjection,   // linear, addmm, mm
  kWeightT,      // t: the weight transpose that starts an unfused linear (t, matmul, add_)
  kBatchMatmul,  // bmm, matmul, baddbmm, einsum
  kSoftmax,
  kMask,
  kDropout,
  kLayout,
  kAdd,          // add, add_: a projection's bias, or a mask added to the scores
  kElementwise,  // mul, div, sub: scaling
  kFused,
  kPositional,  // rotary embeddings: complex views and products, the half rotation's neg
};

const std::unordered_map<std::string_view, Family>& families() {
  static const std::unordered_map<std::string_view, Family> kFamilies = [] {
    std::unordered_map<std::string_view, Family> m;
    for (const char* n : {"linear", "addmm", "mm", "_addmm_activation"}) m[n] = Family::kProjection;
    m["t"] = Family::kWeightT;
    for (const char* n : {"bmm", "matmul", "baddbmm", "einsum", "_bmm"})
      m[n] = Family::kBatchMatmul;
    for (const char* n : {"softmax", "_softmax", "log_softmax", "_log_softmax", "_masked_softmax",
                          "_safe_softmax"}) {
      m[n] = Family::kSoftmax;
    }
    for (const char* n : {"masked_fill", "masked_fill_", "where", "tril", "triu", "tril_", "triu_",
                          "logical_not", "eq", "ne"}) {
      m[n] = Family::kMask;
    }
    for (const char* n : {"dropout", "dropout_", "native_dropout", "feature_dropout",
                          "alpha_dropout", "bernoulli", "bernoulli_",
                          // compiled code's dropout seeds (Inductor's inductor_seeds on a CPU)
                          "randint", "random_", "rand", "rand_like"}) {
      m[n] = Family::kDropout;
    }
    for (const char* n : {"view",           "reshape",
                          "_reshape_alias", "_unsafe_view",
                          "view_as",        "transpose",
                          "transpose_",     "permute",
                          "contiguous",     "clone",
                          "copy_",          "chunk",
                          "split",          "split_with_sizes",
                          "unsafe_split",   "unsafe_chunk",
                          "unflatten",      "flatten",
                          "expand",         "expand_as",
                          "select",         "slice",
                          "narrow",         "unsqueeze",
                          "squeeze",        "squeeze_",
                          "unsqueeze_",     "cat",
                          "stack",          "to",
                          "_to_copy",       "empty",
                          "empty_like",     "empty_strided",
                          "as_strided",     "unbind",
                          "repeat",         "detach",
                          "detach_",        "alias",
                          "zeros",          "zeros_like",
                          "ones",           "ones_like",
                          "lift_fresh",     "tensor_split",
                          "movedim",        "swapaxes",
                          "resize_",        "fill_",
                          "zero_",          "resolve_conj",
                          "resolve_neg"}) {
      m[n] = Family::kLayout;
    }
    for (const char* n : {"add", "add_"}) m[n] = Family::kAdd;
    for (const char* n : {"view_as_complex", "view_as_real", "polar", "neg", "sin", "cos"}) {
      m[n] = Family::kPositional;
    }
    for (const char* n : {"mul", "mul_", "div", "div_", "sub", "sub_", "true_divide",
                          "scalar_tensor", "rsqrt", "sqrt"}) {
      m[n] = Family::kElementwise;
    }
    for (const char* n :
         {"scaled_dot_product_attention", "_scaled_dot_product_attention",
          "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention",
          "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
          "_scaled_dot_product_flash_attention_for_cpu", "_flash_attention_forward",
          "_efficient_attention_forward", "_native_multi_head_attention",
          "_transformer_encoder_layer_fwd", "_fused_sdp_choice"}) {
      m[n] = Family::kFused;
    }
    return m;
  }();
  return kFamilies;
}

std::string_view stripNamespace(const char* opName) {
  std::string_view name(opName ? opName : "");
  if (name.rfind("aten::", 0) == 0) name.remove_prefix(6);
  return name;
}

}  // namespace

const char* opKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kQkvProjection:
      return "qkv_projection";
    case OpKind::kScoreMatmul:
      return "score_matmul";
    case OpKind::kSoftmax:
      return "softmax";
    case OpKind::kDropout:
      return "dropout";
    case OpKind::kContextMatmul:
      return "context_matmul";
    case OpKind::kOutputProjection:
      return "output_projection";
    case OpKind::kLayoutCopy:
      return "layout_copy";
    case OpKind::kFusedAttention:
      return "fused_attention";
    case OpKind::kOther:
      return "other";
    case OpKind::kPositional:
      return "positional";
    case OpKind::kCompiledKernels:
      return "compiled_kernels";
    case OpKind::kCount:
      break;
  }
  return "?";
}

const char* phaseName(Phase phase) {
  switch (phase) {
    case Phase::kForward:
      return "forward";
    case Phase::kBackward:
      return "backward";
    case Phase::kRecompute:
      return "recompute";
    case Phase::kCount:
      break;
  }
  return "?";
}

namespace {

// The family of an op name. RecordFunction hands out the same schema-name pointer for every call
// of an op, so a per-thread cache keyed by the pointer (checked against a copy of the text, in
// case a caller reuses a buffer) answers most lookups without hashing the name.
Family familyOf(const char* opName) {
  if (opName == nullptr) return Family::kUnknown;
  struct Entry {
    const char* ptr = nullptr;
    Family family = Family::kUnknown;
    char text[55] = {};
  };
  // On the heap, not in TLS: libattnscope uses initial-exec TLS for its fast path, which puts the
  // library's whole TLS segment in the static TLS block, and a module loaded with dlopen (the
  // Python module) gets only a few hundred bytes of that.
  static thread_local std::unique_ptr<Entry[]> cache;
  if (__builtin_expect(cache == nullptr, 0)) cache.reset(new Entry[128]);
  Entry& e = cache[(reinterpret_cast<uintptr_t>(opName) >> 3) & 127];
  if (e.ptr == opName && std::strcmp(e.text, opName) == 0) return e.family;
  const auto& f = families();
  const auto it = f.find(stripNamespace(opName));
  const Family family = it == f.end() ? Family::kUnknown : it->second;
  const size_t len = std::strlen(opName);
  if (len < sizeof(e.text)) {
    e.ptr = opName;
    e.family = family;
    std::memcpy(e.text, opName, len + 1);
  }
  return family;
}

// The kind of the families whose kind does not depend on their place in the recipe (kOther for
// an unknown op).
OpKind placeFreeKind(Family family) {
  switch (family) {
    case Family::kMask:
      return OpKind::kSoftmax;
    case Family::kDropout:
      return OpKind::kDropout;
    case Family::kLayout:
      return OpKind::kLayoutCopy;
    case Family::kPositional:
      return OpKind::kPositional;
    default:
      return OpKind::kOther;
  }
}

}  // namespace

bool isFusedAttentionOp(const char* opName) { return familyOf(opName) == Family::kFused; }

OpKind regionOpKind(const char* opName) {
  switch (familyOf(opName)) {
    case Family::kFused:
      return OpKind::kFusedAttention;
    case Family::kSoftmax:
      return OpKind::kSoftmax;
    default:
      return OpKind::kOther;
  }
}

namespace {

// The family of one op of a generated kernel's name: the op families, and the backward ops and
// small ops that only compiled code's kernel names carry.
Family kernelOpFamily(std::string_view op) {
  static const std::unordered_map<std::string_view, Family> kExtra = {
      {"_softmax_backward_data", Family::kSoftmax},
      {"native_dropout_backward", Family::kDropout},
      {"slice_backward", Family::kLayout},
      {"select_backward", Family::kLayout},
      {"arange", Family::kLayout},  // position ids, which the rotary tables are computed from
  };
  const auto extra = kExtra.find(op);
  if (extra != kExtra.end()) return extra->second;
  const auto& f = families();
  const auto it = f.find(op);
  return it == f.end() ? Family::kUnknown : it->second;
}

// The families of the ops a kernel name lists ("_softmax_masked_fill_mul"): op names hold
// underscores too, so at each position the longest known name that ends at an underscore is
// taken, else one word as an unknown op. Bit i: family i.
uint32_t kernelOpFamilies(std::string_view ops) {
  uint32_t families = 0;
  size_t i = 0;
  while (i < ops.size()) {
    size_t best = 0;
    Family family = Family::kUnknown;
    for (size_t end = i + 1; end <= ops.size(); ++end) {
      if (end < ops.size() && ops[end] != '_') continue;
      const Family f = kernelOpFamily(ops.substr(i, end - i));
      if (f != Family::kUnknown) {
        best = end - i;
        family = f;
      }
    }
    if (best == 0) best = std::min(ops.find('_', i + 1), ops.size()) - i;  // one unknown word
    families |= 1u << static_cast<int>(family);
    i += best + 1;
  }
  return families;
}

}  // namespace

OpKind generatedKernelKind(const char* kernelName) {
  std::string_view name(kernelName ? kernelName : "");
  if (name.rfind("graph_", 0) == 0) {  // cpp.enable_kernel_profile's RecordFunction: graph_<n>_
    const size_t digits = name.find_first_not_of("0123456789", 6);
    if (digits == 6 || digits == std::string_view::npos || name[digits] != '_')
      return OpKind::kCount;
    name.remove_prefix(digits + 1);
  }
  if (name.rfind("triton_", 0) != 0 && name.rfind("cpp_", 0) != 0) return OpKind::kCount;
  const size_t fused = name.find("fused_");
  if (fused == std::string_view::npos || fused > 16) return OpKind::kCount;
  std::string_view ops = name.substr(fused + 6);
  const size_t index = ops.find_last_not_of("0123456789");  // the trailing "_<index>"
  ops = index != std::string_view::npos && ops[index] == '_' ? ops.substr(0, index) : ops;
  const uint32_t families = kernelOpFamilies(ops);
  const auto has = [families](Family f) { return (families & (1u << static_cast<int>(f))) != 0; };
  // What any kind's kernel may hold besides its own ops: layout, bias adds and scalings.
  const auto only = [families](std::initializer_list<Family> allowed) {
    uint32_t mask = 0;
    for (Family f : {Family::kLayout, Family::kAdd, Family::kElementwise}) {
      mask |= 1u << static_cast<int>(f);
    }
    for (Family f : allowed) mask |= 1u << static_cast<int>(f);
    return families != 0 && (families & ~mask) == 0;
  };
  if (has(Family::kSoftmax) && only({Family::kSoftmax, Family::kMask, Family::kDropout})) {
    return OpKind::kSoftmax;
  }
  if (has(Family::kMask) && only({Family::kMask})) return OpKind::kSoftmax;
  if (has(Family::kDropout) && only({Family::kDropout})) return OpKind::kDropout;
  // Rotary tables are an outer product (positions x frequencies) that Inductor computes inside
  // the kernel: a batch matmul there belongs to them.
  if (has(Family::kPositional) && only({Family::kPositional, Family::kBatchMatmul})) {
    return OpKind::kPositional;
  }
  if (families == 1u << static_cast<int>(Family::kLayout)) return OpKind::kLayoutCopy;
  return OpKind::kCompiledKernels;
}

OpKind OpClassifier::classify(const char* opName) {
  const Family family = familyOf(opName);
  const Open projectionWasOpen = projectionOpen_;
  projectionOpen_ = kClosed;
  const OpKind projection =
      stage_ == kBeforeScores ? OpKind::kQkvProjection : OpKind::kOutputProjection;
  switch (family) {
    case Family::kUnknown:
      return OpKind::kOther;
    case Family::kProjection:
      projectionOpen_ = kBiasOnly;  // a bias add may follow; a matmul starts the scores
      return projection;
    case Family::kWeightT:
      // LibTorch's F::linear on 3-D input runs t(weight), matmul, add_(bias).
      projectionOpen_ = kMatmulOrBias;
      return projection;
    case Family::kBatchMatmul:
      if (projectionWasOpen == kMatmulOrBias) {
        projectionOpen_ = kBiasOnly;
        return projection;
      }
      if (stage_ < kAfterScores || (stage_ == kAfterScores && !softmaxHidden_)) {
        stage_ = kAfterScores;
        return OpKind::kScoreMatmul;
      }
      stage_ = kAfterContext;
      return OpKind::kContextMatmul;
    case Family::kSoftmax:
      stage_ = kAfterSoftmax;
      return OpKind::kSoftmax;
    case Family::kAdd:
      if (projectionWasOpen != kClosed) return projection;  // the bias add of a projection
      [[fallthrough]];
    case Family::kElementwise:
      if (stage_ == kBeforeScores) return OpKind::kScoreMatmul;
      if (stage_ == kAfterScores) return OpKind::kSoftmax;
      return OpKind::kOther;
    case Family::kFused:
      stage_ = kAfterContext;
      return OpKind::kFusedAttention;
    default:
      return placeFreeKind(family);
  }
}

namespace {
// The backward op of a fused attention kernel ("aten::_scaled_dot_product_flash_attention_for_cpu
// _backward", "aten::_efficient_attention_backward", ...).
bool isFusedBackwardOp(std::string_view name) {
  if (name.size() < 9 || name.substr(name.size() - 9) != "_backward") return false;
  for (std::string_view prefix :
       {"_scaled_dot_product_", "_flash_attention", "_efficient_attention", "_cudnn_attention"}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}
}  // namespace

OpKind BackwardOpClassifier::classify(const char* opName) {
  const std::string_view name = stripNamespace(opName);
  if (isFusedBackwardOp(name)) {
    stage_ = kAfterCore;
    return OpKind::kFusedAttention;
  }
  if (name == "_softmax_backward_data" || name == "_log_softmax_backward_data") {
    stage_ = kAfterSoftmax;
    return OpKind::kSoftmax;
  }
  switch (familyOf(opName)) {
    case Family::kBatchMatmul:
      if (stage_ == kBeforeCore && ++batchMatmuls_ <= 2) return OpKind::kContextMatmul;
      if (stage_ == kBeforeCore) stage_ = kAfterSoftmax;
      return OpKind::kScoreMatmul;
    case Family::kProjection:
    case Family::kWeightT:
      return stage_ == kBeforeCore && batchMatmuls_ == 0 ? OpKind::kOutputProjection
                                                         : OpKind::kQkvProjection;
    case Family::kFused:
      stage_ = kAfterCore;
      return OpKind::kFusedAttention;
    case Family::kSoftmax:
      return OpKind::kSoftmax;
    default:
      return placeFreeKind(familyOf(opName));
  }
}

AttentionBackend attentionBackendOfOp(const char* opName) {
  if (opName == nullptr) return AttentionBackend::kCount;
  if (std::strncmp(opName, "aten::", 6) == 0) opName += 6;
  static constexpr struct {
    const char* name;
    AttentionBackend backend;
  } kOps[] = {
      {"_scaled_dot_product_flash_attention_for_cpu", AttentionBackend::kFlash},
      {"_scaled_dot_product_flash_attention", AttentionBackend::kFlash},
      {"_flash_attention_forward", AttentionBackend::kFlash},
      {"_scaled_dot_product_efficient_attention", AttentionBackend::kMemoryEfficient},
      {"_efficient_attention_forward", AttentionBackend::kMemoryEfficient},
      {"_scaled_dot_product_cudnn_attention", AttentionBackend::kCudnn},
      {"_cudnn_attention_forward", AttentionBackend::kCudnn},
      {"_scaled_dot_product_attention_math", AttentionBackend::kMath},
      {"_scaled_dot_product_attention_math_for_mps", AttentionBackend::kMath},
  };
  if (opName[0] != '_') return AttentionBackend::kCount;  // every kernel op starts with '_'
  for (const auto& op : kOps) {  // the kernel, or its backward (compiled backward graphs call it)
    const size_t n = std::strlen(op.name);
    if (std::strncmp(opName, op.name, n) == 0 &&
        (opName[n] == '\0' || std::strcmp(opName + n, "_backward") == 0)) {
      return op.backend;
    }
  }
  return AttentionBackend::kCount;
}

AttentionBackend attentionBackendOfNode(const char* nodeName) {
  if (nodeName == nullptr) return AttentionBackend::kCount;
  if (std::strncmp(nodeName, "autograd::engine::evaluate_function: ", 37) == 0) nodeName += 37;
  if (std::strncmp(nodeName, "ScaledDotProduct", 16) != 0) return AttentionBackend::kCount;
  const char* rest = nodeName + 16;
  if (std::strncmp(rest, "FlashAttention", 14) == 0) return AttentionBackend::kFlash;
  if (std::strncmp(rest, "EfficientAttention", 18) == 0) return AttentionBackend::kMemoryEfficient;
  if (std::strncmp(rest, "CudnnAttention", 14) == 0) return AttentionBackend::kCudnn;
  return AttentionBackend::kCount;
}

}  // namespace attnscope
