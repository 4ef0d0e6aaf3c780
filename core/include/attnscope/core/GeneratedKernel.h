#pragma once

#include "attnscope/core/Export.h"
#include "attnscope/core/OpKind.h"

namespace attnscope {

// The kind of a kernel that torch.compile's Inductor generated, from its name, or kCount for a
// name that is not one (defined in OpKind.cpp, beside the op families it reads the name with).
// Inductor names a fused kernel after the aten ops it was made of (its default descriptive_names
// "original_aten"): "triton_" and the kernel's category on a GPU ("poi", "red", "per", "tem"), or
// "cpp_" on a CPU, then "fused", the op names sorted, an index
// ("triton_per_fused__softmax_masked_fill_0"); on a CPU with Inductor's cpp.enable_kernel_profile,
// each kernel's RecordFunction carries that name after "graph_<n>_". A kernel gets a kind only when
// its ops are that kind's, besides layout ops, bias adds and scalings:
//  - kSoftmax: a softmax or its backward, with the masking and dropout fused into it (the softmax
//    kind's own parts), or masking alone;
//  - kDropout: dropout or its backward;
//  - kPositional: rotary embeddings (sin, cos, the half rotation's neg, complex views; the tables'
//    position-by-frequency product, which Inductor computes in the kernel);
//  - kLayoutCopy: layout ops only (copies, transposes, cat, slices);
// every other generated kernel (norms, activations, reductions, template GEMMs, a kernel fusing
// two kinds' ops) is kCompiledKernels.
ATTNSCOPE_API OpKind generatedKernelKind(const char* kernelName);

}  // namespace attnscope
