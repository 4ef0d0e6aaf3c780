// Markers for attention layers inside torch.compile'd code (docs/DISCOVERY.md, "torch.compile").
//
// Compiled code runs no module hooks, and the compiler fuses a layer's elementwise work into
// kernels that are not aten ops. The Python attach's module hooks, which Dynamo traces into the
// graph, call these dispatcher ops at a layer's entry (on its tensor inputs) and exit (on its
// tensor outputs). Each op returns copies of its tensors and the layer's work consumes them (or
// is consumed by them), so the compiler keeps the layer's kernels between the two markers; their
// autograd formulas (below, in C++: a marker call costs a C++ dispatch, not a Python autograd
// kernel's) put backward_enter / backward_exit around the same layer's gradient in the backward
// graph AOTAutograd compiles. At run time each marker
// opens or closes an attention call of ScopeType::kCompiled on this thread: the ops the compiled
// code calls (extern matmuls, attention kernels) are classified inside it, the rest of its time
// is compiled_kernels. A marker inside the backward pass that is not a backward marker is
// activation checkpointing's recompute.
//
//   layer_enter(Tensor[] xs, str layer) -> Tensor[]       before the layer (forward, recompute)
//   layer_exit(Tensor[] xs, str layer, bool backward)     after it
//   backward_enter(Tensor[] grads, str layer) -> Tensor[] the layer's backward starts
//   backward_exit(Tensor[] grads, str layer) -> Tensor[]  and ends
#include "CompiledMarkers.h"

#include <cstring>
#include <string>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty_like.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "AutogradProbe.h"
#include "Observer.h"
#include "Recorder.h"
#include "Session.h"

namespace attnscope {
namespace detail {
namespace {

// The markers' calls open on this thread: the layer, and whether the observer records it (an
// unsampled step's call is open here only, so that its exit pops nothing of the observer's).
struct OpenCall {
  std::string layer;
  bool recorded = false;
};
thread_local std::vector<OpenCall> tOpen;

std::vector<at::Tensor> copies(const at::TensorList& xs) {
  std::vector<at::Tensor> out;
  out.reserve(xs.size());
  for (const at::Tensor& x : xs) out.push_back(x.clone());
  return out;
}

void open(c10::string_view layer, bool backward) {
  Session* s = currentSession();
  if (s == nullptr) return;
  Recorder* r = nullptr;
  if (backward) {
    s->steps().noteBackward();  // steps are inferred from backward passes
    if (s->steps().sampled()) r = &s->recorder();
  } else {
    r = scopeRecorder();
  }
  const std::string name(layer.data(), layer.size());
  const bool recorded =
      r != nullptr && Observer::enterScope(r, name.c_str(), ScopeType::kCompiled, backward);
  tOpen.push_back(OpenCall{name, recorded});
}

void close(c10::string_view layer) {
  if (tOpen.empty() || tOpen.back().layer != layer) return;  // opened before attnscope started
  if (tOpen.back().recorded) Observer::exitScope(nullptr, 0, /*outputsGiven=*/true);
  tOpen.pop_back();
}

std::vector<at::Tensor> layerEnter(at::TensorList xs, c10::string_view layer) {
  std::vector<at::Tensor> out = copies(xs);  // before the call opens: not the layer's work
  open(layer, false);
  return out;
}

std::vector<at::Tensor> layerExit(at::TensorList xs, c10::string_view layer, bool /*backward*/) {
  close(layer);
  return copies(xs);
}

std::vector<at::Tensor> backwardExit(at::TensorList grads, c10::string_view layer) {
  close(layer);
  return copies(grads);
}

std::vector<at::Tensor> backwardEnter(at::TensorList grads, c10::string_view layer) {
  std::vector<at::Tensor> out = copies(grads);
  open(layer, true);
  return out;
}

// Shapes only: what the compiler traces with (fake and meta tensors); nothing is recorded.
std::vector<at::Tensor> traced(at::TensorList xs, c10::string_view /*layer*/) {
  std::vector<at::Tensor> out;
  out.reserve(xs.size());
  for (const at::Tensor& x : xs) out.push_back(at::empty_like(x));
  return out;
}

std::vector<at::Tensor> tracedExit(at::TensorList xs, c10::string_view layer, bool /*backward*/) {
  return traced(xs, layer);
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using MarkerOp = std::vector<at::Tensor>(at::TensorList, c10::string_view);

// One of the ops below autograd (the kernels above run there).
std::vector<at::Tensor> callBelow(const char* name, at::TensorList xs, const std::string& layer) {
  static const auto find = [](const char* op) {
    return c10::Dispatcher::singleton().findSchemaOrThrow(op, "").typed<MarkerOp>();
  };
  static const auto backwardEnterOp = find("attnscope::backward_enter");
  static const auto backwardExitOp = find("attnscope::backward_exit");
  return (std::strcmp(name, "attnscope::backward_enter") == 0 ? backwardEnterOp : backwardExitOp)
      .call(xs, layer);
}

// The gradients through backward_enter or backward_exit (the defined ones; a marker of no
// gradient at all passes them as they are). `extra`: undefined gradients for the non-tensor
// arguments.
variable_list markGradients(const char* op, const std::string& layer, variable_list grads,
                            size_t extra) {
  std::vector<at::Tensor> defined;
  for (const at::Tensor& g : grads) {
    if (g.defined()) defined.push_back(g);
  }
  if (!defined.empty()) {
    std::vector<at::Tensor> marked = callBelow(op, defined, layer);
    size_t next = 0;
    for (at::Tensor& g : grads) {
      if (g.defined()) g = marked[next++];
    }
  }
  grads.resize(grads.size() + extra);
  return grads;
}

struct LayerEnterFunction : torch::autograd::Function<LayerEnterFunction> {
  static variable_list forward(AutogradContext* ctx, at::TensorList xs, const std::string& layer) {
    ctx->saved_data["layer"] = layer;
    at::AutoDispatchBelowADInplaceOrView below;
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("attnscope::layer_enter", "")
                               .typed<MarkerOp>();
    return op.call(xs, layer);
  }
  // The layer's backward ends once all its input gradients exist.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return markGradients("attnscope::backward_exit", ctx->saved_data["layer"].toStringRef(),
                         std::move(grads), 1);
  }
};

struct LayerExitFunction : torch::autograd::Function<LayerExitFunction> {
  static variable_list forward(AutogradContext* ctx, at::TensorList xs, const std::string& layer,
                               bool backward) {
    ctx->saved_data["layer"] = layer;
    ctx->saved_data["backward"] = backward;
    at::AutoDispatchBelowADInplaceOrView below;
    static const auto op =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("attnscope::layer_exit", "")
            .typed<std::vector<at::Tensor>(at::TensorList, c10::string_view, bool)>();
    return op.call(xs, layer, backward);
  }
  // The layer's backward starts once all its output gradients exist, when its inputs carry
  // gradients (else no backward_exit would close it).
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!ctx->saved_data["backward"].toBool()) {
      grads.resize(grads.size() + 2);
      return grads;
    }
    return markGradients("attnscope::backward_enter", ctx->saved_data["layer"].toStringRef(),
                         std::move(grads), 2);
  }
};

std::vector<at::Tensor> layerEnterAutograd(at::TensorList xs, c10::string_view layer) {
  return LayerEnterFunction::apply(xs, std::string(layer.data(), layer.size()));
}

std::vector<at::Tensor> layerExitAutograd(at::TensorList xs, c10::string_view layer,
                                          bool backward) {
  return LayerExitFunction::apply(xs, std::string(layer.data(), layer.size()), backward);
}

}  // namespace
}  // namespace detail
}  // namespace attnscope

TORCH_LIBRARY_FRAGMENT(attnscope, m) {
  m.def("layer_enter(Tensor[] xs, str layer) -> Tensor[]");
  // `backward`: whether the layer's inputs carry gradients (its backward will end at layer_enter's
  // gradient); read by the autograd formula, not here.
  m.def("layer_exit(Tensor[] xs, str layer, bool backward) -> Tensor[]");
  m.def("backward_enter(Tensor[] grads, str layer) -> Tensor[]");
  m.def("backward_exit(Tensor[] grads, str layer) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(attnscope, CompositeExplicitAutograd, m) {
  m.impl("layer_enter", &attnscope::detail::layerEnter);
  m.impl("layer_exit", &attnscope::detail::layerExit);
  m.impl("backward_enter", &attnscope::detail::backwardEnter);
  m.impl("backward_exit", &attnscope::detail::backwardExit);
}

TORCH_LIBRARY_IMPL(attnscope, Autograd, m) {
  m.impl("layer_enter", &attnscope::detail::layerEnterAutograd);
  m.impl("layer_exit", &attnscope::detail::layerExitAutograd);
}

TORCH_LIBRARY_IMPL(attnscope, Meta, m) {
  m.impl("layer_enter", &attnscope::detail::traced);
  m.impl("layer_exit", &attnscope::detail::tracedExit);
  m.impl("backward_enter", &attnscope::detail::traced);
  m.impl("backward_exit", &attnscope::detail::traced);
}
