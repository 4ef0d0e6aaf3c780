#include "NodeHooks.h"

#include <algorithm>
#include <memory>
#include <vector>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/version.h>

#include "NodeTiming.h"
#include "Recorder.h"
#include "attnscope/collectors/Clock.h"

namespace attnscope {
namespace detail {
namespace {

using torch::autograd::FunctionPostHook;
using torch::autograd::FunctionPreHook;
using torch::autograd::Node;
using torch::autograd::variable_list;

// Compiled autograd asks every hook for its arguments and raises for C++ hooks that do not
// answer; ours answer nothing, so a compiled backward runs without them (what it hides,
// docs/DISCOVERY.md) instead of failing.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6)
#define ATTNSCOPE_COMPILED_ARGS \
  void compiled_args(torch::dynamo::autograd::CompiledNodeArgs& /*args*/) const override {}
#else
#define ATTNSCOPE_COMPILED_ARGS
#endif

// The node's timing lives in its pre-hook; the post-hook, owned by the same node, ends it.
class TimingPreHook final : public FunctionPreHook {
 public:
  TimingPreHook(Recorder* recorder, const Link& link, AttentionBackend backend)
      : recorder_(recorder), link_(link), backend_(backend), step_(recorder->steps().stepIndex()) {}

  variable_list operator()(const variable_list& grads) override {
    open_ = false;
    // A backward run after the session stopped, or in a later step than the forward that made the
    // node (a graph kept with retain_graph and run again: its call's record was folded, and the
    // callback path's table was cleared too), records nothing.
    if (currentRecorder() != recorder_) return grads;
    StepController& steps = recorder_->steps();
    steps.noteBackward();
    if (steps.stepIndex() != step_ || !steps.sampled()) return grads;
    const uint64_t entry = nodeTimed() ? ticks() : 0;
    timing_.begin(recorder_, link_, backend_, entry);
    open_ = true;
    return grads;
  }

  void close() {
    if (!open_) return;
    open_ = false;
    timing_.end();
  }

  ATTNSCOPE_COMPILED_ARGS

 private:
  Recorder* recorder_;
  Link link_;
  AttentionBackend backend_;
  uint64_t step_;  // the step whose forward made the node
  NodeTiming timing_;
  bool open_ = false;
};

class TimingPostHook final : public FunctionPostHook {
 public:
  explicit TimingPostHook(TimingPreHook* pre) : pre_(pre) {}

  variable_list operator()(const variable_list& outputs, const variable_list& /*inputs*/) override {
    pre_->close();
    return outputs;
  }

  ATTNSCOPE_COMPILED_ARGS

 private:
  TimingPreHook* pre_;  // owned by the same node, destroyed with it
};

class BackwardSeenHook final : public FunctionPreHook {
 public:
  explicit BackwardSeenHook(Recorder* recorder) : recorder_(recorder) {}

  variable_list operator()(const variable_list& grads) override {
    if (currentRecorder() == recorder_) recorder_->steps().noteBackward();
    return grads;
  }

  ATTNSCOPE_COMPILED_ARGS

 private:
  Recorder* recorder_;
};

// The index of the last link with sequence number `seq` (the op whose node took the number,
// LinkTable's rule), or -1.
long findLink(const LinkTable::Entry* links, size_t numLinks, int64_t seq) {
  const LinkTable::Entry* end = links + numLinks;
  const LinkTable::Entry* it = std::upper_bound(
      links, end, seq, [](int64_t s, const LinkTable::Entry& e) { return s < e.first; });
  if (it == links || (it - 1)->first != seq) return -1;
  return static_cast<long>(it - 1 - links);
}

struct WalkState {
  std::vector<Node*> stack;
  std::vector<uint8_t> seen;                  // per link index
  std::vector<std::pair<Node*, long>> found;  // node, link index
};

thread_local WalkState tWalk;

// FNV-1a over 64-bit words.
inline void mix(uint64_t* h, uint64_t v) {
  *h ^= v;
  *h *= 1099511628211ULL;
}

// Folds a node's input metadata (its forward op's outputs) into *h; false when one is not a plain
// sized tensor.
bool mixShapes(const Node& node, uint64_t* h) {
  const uint32_t n = node.num_inputs();
  mix(h, n);
  for (uint32_t i = 0; i < n; ++i) {
    const torch::autograd::InputMetadata& m = node.input_metadata(i);
    if (m.was_default_constructed()) {  // an undefined output
      mix(h, ~0ULL);
      continue;
    }
    if (m.is_nested_tensor() || m.is_tensor_subclass()) return false;
    mix(h, static_cast<uint64_t>(m.options().dtype().toScalarType()));
    const c10::SymIntArrayRef sizes = m.shape_as_dim_vector();
    mix(h, sizes.size());
    for (const c10::SymInt& d : sizes) {
      const std::optional<int64_t> v = d.maybe_as_int();
      if (!v) return false;
      mix(h, static_cast<uint64_t>(*v));
    }
  }
  return true;
}

}  // namespace

int findCallNodes(uint64_t forwardThreadId, const at::Tensor* outputs, size_t count,
                  const LinkTable::Entry* links, size_t numLinks, uint64_t* shapes) {
  WalkState& w = tWalk;
  w.stack.clear();
  w.found.clear();
  *shapes = 0;
  for (size_t i = 0; i < count; ++i) {
    if (!outputs[i].defined()) continue;
    Node* fn = outputs[i].grad_fn().get();
    if (fn != nullptr) w.stack.push_back(fn);
  }
  if (w.stack.empty()) return -1;
  w.seen.assign(numLinks, 0);
  uint64_t h = 14695981039346656037ULL;
  bool plain = true;
  while (!w.stack.empty()) {
    Node* node = w.stack.back();
    w.stack.pop_back();
    if (node->thread_id() != forwardThreadId) continue;
    const long i = findLink(links, numLinks, static_cast<int64_t>(node->sequence_nr()));
    if (i < 0 || w.seen[i]) continue;  // made outside the call (an input), or seen
    w.seen[i] = 1;
    w.found.emplace_back(node, i);
    if (plain) plain = mixShapes(*node, &h);
    for (const torch::autograd::Edge& edge : node->next_edges()) {
      if (edge.function != nullptr) w.stack.push_back(edge.function.get());
    }
  }
  if (plain && !w.found.empty()) *shapes = h == 0 ? 1 : h;
  return static_cast<int>(w.found.size());
}

void hookFoundNodes(Recorder* recorder, const LinkTable::Entry* links) {
  WalkState& w = tWalk;
  for (const auto& [node, i] : w.found) {
    const Link& link = links[i].second;
    const AttentionBackend backend = link.kind == OpKind::kFusedAttention
                                         ? attentionBackendOfNode(node->name().c_str())
                                         : AttentionBackend::kCount;
    auto pre = std::make_unique<TimingPreHook>(recorder, link, backend);
    TimingPreHook* raw = pre.get();
    node->add_pre_hook(std::move(pre));
    node->add_post_hook(std::make_unique<TimingPostHook>(raw));
  }
  w.found.clear();
}

bool hookBackwardSeen(Recorder* recorder, const at::Tensor& output) {
  if (!output.defined()) return false;
  Node* fn = output.grad_fn().get();
  if (fn == nullptr) return false;
  fn->add_pre_hook(std::make_unique<BackwardSeenHook>(recorder));
  return true;
}

}  // namespace detail
}  // namespace attnscope
