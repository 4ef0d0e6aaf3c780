#pragma once

// One line per hand-written LibTorch attention module (docs/DISCOVERY.md):
//
//   struct CausalSelfAttentionImpl : torch::nn::Module {
//     torch::Tensor forward(const torch::Tensor& x) {
//       attnscope::ModuleScope scope(*this);   // the layer is this module's path in the model
//       ...
//       return scope.close(out);               // optional: backward through the call's own nodes
//     }
//   };
//   auto model = Gpt(options);
//   attnscope::nameModules(*model);            // once, after the model is built: the paths
//
// The layer name is the module's path from the root passed to nameModules ("blocks.0.attn"), the
// same on every rank that builds the same model. A module nameModules did not see is named by its
// class name and a warning says so once.

#include <string>

#include <torch/nn/module.h>

#include "attnscope/attnscope.h"
#include "attnscope/core/Export.h"

namespace attnscope {

// Records the path of every module under `root` (prefixed with `prefix` and a dot when given).
// Call again after replacing submodules; names recorded earlier are kept.
ATTNSCOPE_API void nameModules(const torch::nn::Module& root, const std::string& prefix = "");

// The name ModuleScope uses for `module`: its recorded path, else its class name.
ATTNSCOPE_API std::string moduleLayerName(const torch::nn::Module& module);

// An AttentionScope named by the module's path.
class ATTNSCOPE_API ModuleScope {
 public:
  explicit ModuleScope(const torch::nn::Module& module);
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;

  // Ends the call with its result and returns it, `return scope.close(out);`: backward is then
  // observed through hooks on the call's own autograd nodes (AttentionScope::close).
  torch::Tensor close(const torch::Tensor& out) {
    scope_.close(&out, 1);
    return out;
  }

 private:
  AttentionScope scope_;
};

}  // namespace attnscope
