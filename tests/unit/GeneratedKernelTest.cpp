// Unit tests of attnscope::generatedKernelKind on kernel names that Inductor generated: Triton
// kernels of CUDA runs (as CUPTI reports them) and C++ kernels that torch 2.13 generated on this
// project's models (the discovery tests' GPT and a transformers Llama, forward and backward).

#include "attnscope/core/GeneratedKernel.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace attnscope {
namespace {

void expectKinds(const std::vector<std::pair<const char*, OpKind>>& names) {
  for (const auto& [name, kind] : names) {
    EXPECT_STREQ(opKindName(generatedKernelKind(name)), opKindName(kind)) << name;
  }
}

TEST(GeneratedKernelTest, SoftmaxWithItsMaskingScalingAndDropoutIsSoftmax) {
  expectKinds({
      {"triton_per_fused__softmax_native_dropout_2", OpKind::kSoftmax},
      {"triton_per_fused__softmax_add_eq_masked_fill_mul_14", OpKind::kSoftmax},
      {"triton_per_fused__softmax_bernoulli_5", OpKind::kSoftmax},
      {"triton_per_fused__softmax_clone_6", OpKind::kSoftmax},
      {"triton_per_fused__softmax_backward_data_13", OpKind::kSoftmax},
      {"cpp_fused__softmax_eq_masked_fill_mul_native_dropout_view_2", OpKind::kSoftmax},
      // The same kernel's RecordFunction under Inductor's cpp.enable_kernel_profile.
      {"graph_0_cpp_fused__softmax_eq_masked_fill_mul_native_dropout_view_2", OpKind::kSoftmax},
  });
}

TEST(GeneratedKernelTest, DropoutRotaryAndLayoutKernels) {
  expectKinds({
      {"triton_poi_fused_native_dropout_backward_0", OpKind::kDropout},
      {"triton_poi_fused_add_cat_cos_mul_neg_sin_slice_unsqueeze_view_50", OpKind::kPositional},
      {"cpp_fused__to_copy__unsafe_view_add_arange_bmm_cat_cos_expand_mul_neg_sin_slice_transpose_"
       "unsqueeze_view_1",
       OpKind::kPositional},
      // The rotary's backward in the same Llama's backward graph.
      {"cpp_fused__to_copy_add_arange_bmm_cat_clone_cos_expand_mul_neg_sin_slice_slice_backward_"
       "transpose_unsqueeze_6",
       OpKind::kPositional},
      {"triton_poi_fused_clone_1", OpKind::kLayoutCopy},
      {"triton_poi_fused_clone_22", OpKind::kLayoutCopy},
  });
}

// A kernel holding ops of no attention kind, or of two kinds, stays compiled_kernels.
TEST(GeneratedKernelTest, KernelsOfNoOneKindStayCompiledKernels) {
  expectKinds({
      {"triton_per_fused_native_dropout_backward_native_layer_norm_backward_4",
       OpKind::kCompiledKernels},
      {"triton_per_fused__softmax_backward_data_add_div_mul_neg_rsub_sigmoid_sum_25",
       OpKind::kCompiledKernels},
      {"triton_poi_fused_clone_div_13", OpKind::kCompiledKernels},  // a copy with Q's scaling
      {"triton_poi_fused_index_sum_0", OpKind::kCompiledKernels},
      {"cpp_fused__unsafe_view_add_mean_mul_pow_rsqrt_2", OpKind::kCompiledKernels},  // RMSNorm
      {"cpp_fused__unsafe_view_mul_silu_3", OpKind::kCompiledKernels},
      {"cpp_fused__log_softmax__unsafe_view_clone_constant_pad_nd_nll_loss_forward_slice_view_6",
       OpKind::kCompiledKernels},
      {"triton_poi_fused_0", OpKind::kCompiledKernels},  // no op names
      // The Llama's backward: a saved tensor laid out for SDPA's backward (an extern op), the
      // value gradient laid out for its projection with a second gradient added, RMSNorm's
      // backward.
      {"cpp_fused__scaled_dot_product_flash_attention_for_cpu_backward_transpose_view_4",
       OpKind::kCompiledKernels},
      {"cpp_fused_add_clone_transpose_5", OpKind::kCompiledKernels},
      {"cpp_fused_add_div_expand_mul_pow_sum_view_8", OpKind::kCompiledKernels},
  });
}

TEST(GeneratedKernelTest, OtherKernelNamesAreNotGenerated) {
  const char* const names[] = {"ampere_sgemm_128x64_tn",
                               "fake_kernel",
                               "triton_",
                               "cpp_kernel",
                               "void at::native::vectorized_elementwise_kernel<4>",
                               "graph_",
                               "graph_x_cpp_fused_add_0",
                               "",
                               nullptr};
  for (const char* name : names) {
    EXPECT_EQ(generatedKernelKind(name), OpKind::kCount) << (name ? name : "null");
  }
}

}  // namespace
}  // namespace attnscope
