#include "Observer.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>

#include "AttentionProbe.h"
#include "AutogradProbe.h"
#include "NodeHooks.h"
#include "NodeTiming.h"
#include "Recorder.h"
#include "attnscope/collectors/Clock.h"
#include "attnscope/collectors/DeviceMemoryReporter.h"
#include "attnscope/collectors/GpuTimer.h"
#include "attnscope/collectors/MemoryAccount.h"
#include "attnscope/core/GeneratedKernel.h"
#include "attnscope/core/OpKind.h"
#include "attnscope/core/Roofline.h"
#include "attnscope/reporter/InternalThread.h"

namespace attnscope {
namespace detail {
namespace {

// The shape cache keeps this many top-level ops per (layer, phase).
constexpr uint32_t kMaxCachedOps = 256;
// Calls that have results with autograd history read their ops' arguments (the dispatcher boxing
// every op's inputs, the roofline's main cost) on one call in this many per (layer, phase); the
// others reuse the read's costs while their ops and their autograd nodes' shapes are the read's.
constexpr uint32_t kShapeReadEvery = 8;

// One open attention call on this thread.
struct Frame {
  Recorder* recorder = nullptr;
  CallRecord record;
  OpClassifier classifier;
  bool region = false;                      // ScopeType::kRegion: ops classified by name alone
  bool compiled = false;                    // ScopeType::kCompiled: between compiled code's markers
  BackwardOpClassifier backwardClassifier;  // compiled backward calls
  int wrapperDepth = 0;                     // region: open wrapper ops around the compiled code
  OpKind forcedKind = OpKind::kCount;       // an open OpKindScope's kind, else kCount
  int64_t t0 = 0;
  uint64_t instance = 0;
  MemoryAccount callAccount;
  bool deviceReporter = false;  // DeviceMemoryReporter::enter() took the slot for this call
  size_t linksBegin = 0;
  // The top-level op now running inside the call (depth 1); nested ops only record links.
  int depth = 0;
  uint64_t opT0 = 0;  // ticks
  OpKind opKind = OpKind::kOther;
  AttentionBackend backend = AttentionBackend::kCount;  // of a fused top-level op, once known
  MemoryAccount opAccount;
  // GPU (docs/GPU.md): null when device timing is off.
  GpuTimer* gpu = nullptr;
  GpuTimer::Span gpuSpan;      // CUDA events at the call's edges
  bool gpuCallPushed = false;  // the call's own correlation id (work launched between ops)
  bool gpuOpPushed = false;    // the running top-level op's correlation id
  // Roofline (docs/ROOFLINE.md): the running top-level op's cost, its ordinal in the call (the
  // shape cache's key with layer and phase), and the backward cost its ops add per kind.
  bool roofline = false;
  bool readShapes = false;   // this call reads its ops' arguments (else reuses the cache's costs)
  bool shapesStale = false;  // the cache did not hold for one of its ops (or could not be kept)
  uint32_t opOrdinal = 0;
  OpCost opCost;
  std::array<BackwardEstimate, kNumOpKinds> backward{};
  // The kernel's shapes, from the ops of a forward call that reads their arguments.
  AttentionProbe probe;
};

struct ThreadState {
  ThreadState() {
    frames.reserve(8);
    links.reserve(1024);
  }
  std::vector<Frame> frames;
  std::vector<LinkTable::Entry> links;  // links of the open frames, flushed at their exit
  at::CallbackHandle forwardHandle = 0;
  uint64_t threadId = 0;
  bool threadIdKnown = false;
  // Names for fused ops seen outside any scope: "<op>.<k>", k counting per step on this thread.
  uint64_t fusedStepMark = ~0ULL;
  uint64_t fusedCounter = 0;
  // An open FusedOpScope: the layer name its fused op is observed as, and its callback.
  std::string fusedHint;
  int fusedHintDepth = 0;
  at::CallbackHandle fusedHintHandle = 0;
  // attnscope's own time on this thread, flushed to the recorder when the outermost scope exits.
  uint64_t overheadTicks = 0;
  uint32_t callbackCounter = 0;  // one callback in Recorder::kOverheadSampling is timed
  // Shape cache (roofline): per (layer, phase) slot, per top-level op ordinal in the call, the
  // last arguments' signature and what the formulas made of them. Thread-local: no lock.
  struct ShapeEntry {
    const char* name = nullptr;
    uint64_t signature = 0;
    OpCosts costs;
    bool requiresGrad = false;  // at the last read
  };
  std::vector<std::vector<ShapeEntry>> shapes;
  // Per slot: the hash of the autograd nodes' shapes of the last call that read (0: none that a
  // later call can be checked against) and the calls since it.
  struct ShapeSlot {
    uint64_t nodeShapes = 0;
    uint32_t callsSinceRead = 0;
  };
  std::vector<ShapeSlot> slots;
  uint64_t shapesSession = 0;  // the session whose layer ids the cache's slots are
  bool inputsBoxed = false;    // the installed thread-local callback asks for inputs
  OpArgs args;  // reused by every read: readArgs sets what the formulas and the signature read
  uint64_t shapeReads = 0;  // flushed to the recorder with overheadTicks
  uint64_t shapeChanges = 0;
};

// The first OpArgs::kMaxArgs positional arguments of an op, as the formulas see them. Sets
// `requiresGrad` when a tensor argument requires grad (its backward will run).
void readArgs(const at::RecordFunction& fn, OpArgs* out, bool* requiresGrad) {
  const auto inputs = fn.inputs();
  const int n = static_cast<int>(std::min<size_t>(inputs.size(), OpArgs::kMaxArgs));
  out->count = n;
  out->textLength = 0;
  out->listCount = 0;
  out->opaque = false;
  bool listSeen = false;
  *requiresGrad = false;
  // PyTorch 2.x runs RecordFunction for tensors whose sizes() throws (symbolic shapes while
  // torch.compile traces, nested tensors) or whose sizes are not this rank's real work (meta and
  // fake tensors, Python subclasses such as DTensor with global shapes). Only flags are read here.
  const auto readable = [out](const at::Tensor& t) {
    const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    if (impl->has_symbolic_sizes_strides() || impl->is_nested() || impl->is_meta() ||
        impl->is_python_dispatch() || impl->key_set().has(c10::DispatchKey::Python)) {
      out->opaque = true;
      return false;
    }
    return true;
  };
  const auto fillShape = [](const at::Tensor& t, TensorShape* s) {
    const auto sizes = t.sizes();
    const int dims = static_cast<int>(sizes.size());
    const int fold = std::max(0, dims - TensorShape::kMaxDims);  // leading dims folded into one
    int64_t first = 1;
    for (int d = 0; d <= fold && d < dims; ++d) first *= sizes[d];
    s->dim = static_cast<uint8_t>(std::min(dims, TensorShape::kMaxDims));
    if (dims > 0) s->sizes[0] = first;
    for (int d = fold + 1; d < dims; ++d) s->sizes[d - fold] = sizes[d];
    s->elementSize = static_cast<uint8_t>(t.element_size());
    s->floating = t.is_floating_point();
    s->contiguous = t.is_contiguous();
  };
  for (int i = 0; i < n; ++i) {
    const c10::IValue& v = inputs[i];
    OpArg& a = out->args[i];
    a = OpArg{};
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (!t.defined()) {
        a.type = OpArg::Type::kNone;
        continue;
      }
      a.type = OpArg::Type::kTensor;
      if (readable(t)) fillShape(t, &a.shape);
      if (t.requires_grad()) *requiresGrad = true;
    } else if (v.isTensorList()) {
      const auto list = v.toTensorList();
      a.type = OpArg::Type::kTensorList;
      int64_t total = 0;
      const bool first = !listSeen;
      listSeen = true;
      if (first) out->listCount = static_cast<uint8_t>(std::min<size_t>(list.size(), 255));
      for (size_t j = 0; j < list.size(); ++j) {
        const at::Tensor t = list.get(j);
        if (!t.defined()) {
          if (first) out->listCount = 0;  // a list with holes: no per-tensor shapes
          continue;
        }
        if (!readable(t)) continue;
        if (total == 0) fillShape(t, &a.shape);
        if (first && j < static_cast<size_t>(OpArgs::kMaxListShapes)) fillShape(t, &out->list[j]);
        total += t.numel();
        if (t.requires_grad()) *requiresGrad = true;
      }
      a.shape.dim = 1;
      a.shape.sizes[0] = total;
    } else if (v.isNone()) {
      a.type = OpArg::Type::kNone;
    } else if (v.isBool()) {
      a.type = OpArg::Type::kBool;
      a.intValue = v.toBool() ? 1 : 0;
    } else if (v.isInt()) {
      a.type = OpArg::Type::kInt;
      a.intValue = v.toInt();
    } else if (v.isDouble()) {
      a.type = OpArg::Type::kDouble;
      a.doubleValue = v.toDouble();
    } else if (v.isString() && out->textLength == 0 &&
               v.toStringRef().size() <= static_cast<size_t>(OpArgs::kMaxText)) {
      const std::string& text = v.toStringRef();
      a.type = OpArg::Type::kString;
      std::memcpy(out->text.data(), text.data(), text.size());
      out->textLength = static_cast<uint8_t>(text.size());
    } else {
      a.type = OpArg::Type::kOther;
    }
  }
}

inline size_t shapeSlot(const Frame& f) {
  return static_cast<size_t>(f.record.layer) * kNumPhases + static_cast<size_t>(f.record.phase);
}

// The op's backward estimate, added to the frame when its inputs require grad.
void addBackwardEstimate(Frame& f, const OpCosts& costs) {
  BackwardEstimate& b = f.backward[static_cast<int>(f.opKind)];
  b.ops += 1;
  if (costs.backward.modelled) {
    b.modelledOps += 1;
    b.flops += costs.backward.flops;
    b.moved += costs.backward.bytes;
    b.wideFlops += costs.backward.wideFlops;
  }
}

// The running top-level op's cost, from the thread's shape cache when its arguments did not
// change since the same op of the same (layer, phase) last ran.
void captureShapes(ThreadState& t, Frame& f, const at::RecordFunction& fn, const char* name) {
  OpArgs& args = t.args;
  bool requiresGrad = false;
  readArgs(fn, &args, &requiresGrad);
  ++t.shapeReads;
  const uint64_t signature = args.signature();
  const size_t slot = shapeSlot(f);
  const OpCosts* costs = nullptr;
  OpCosts fresh;
  if (f.opOrdinal < kMaxCachedOps) {
    if (slot >= t.shapes.size()) t.shapes.resize(slot + 1);
    std::vector<ThreadState::ShapeEntry>& ops = t.shapes[slot];
    if (f.opOrdinal >= ops.size()) ops.resize(f.opOrdinal + 1);
    ThreadState::ShapeEntry& e = ops[f.opOrdinal];
    if (e.name != name || e.signature != signature) {
      e.name = name;
      e.signature = signature;
      e.costs = opCosts(name, args);
      ++t.shapeChanges;
    }
    e.requiresGrad = requiresGrad;
    costs = &e.costs;
  } else {
    fresh = opCosts(name, args);
    ++t.shapeChanges;
    costs = &fresh;
    f.shapesStale = true;  // beyond the cache: later calls cannot reuse this read
  }
  f.opCost = costs->forward;
  if (requiresGrad) addBackwardEstimate(f, *costs);
}

// A call that does not read: the running top-level op's cost is the cache's for the same op at
// the same ordinal (checked at the call's end against its autograd nodes' shapes, settleShapes).
void reuseShapes(ThreadState& t, Frame& f, const char* name) {
  const size_t slot = shapeSlot(f);
  if (slot < t.shapes.size() && f.opOrdinal < t.shapes[slot].size()) {
    const ThreadState::ShapeEntry& e = t.shapes[slot][f.opOrdinal];
    if (e.name == name) {
      f.opCost = e.costs.forward;
      if (e.requiresGrad) addBackwardEstimate(f, e.costs);
      return;
    }
  }
  f.opCost = OpCost{};
  f.shapesStale = true;  // another op than the read call ran here
}

// Counts the sessions begun (Observer::beginSession): a thread's shape cache from an earlier
// session is dropped.
std::atomic<uint64_t> gSessionGeneration{1};

// Whether the call that opens now reads its ops' arguments: one call in kShapeReadEvery per
// (layer, phase) on this thread, and every call until one could be checked (docs/ROOFLINE.md).
bool wantShapeRead(ThreadState& t, const Frame& f) {
  const uint64_t session = gSessionGeneration.load(std::memory_order_relaxed);
  if (t.shapesSession != session) {
    t.shapesSession = session;
    t.shapes.clear();
    t.slots.clear();
  }
  const size_t slot = shapeSlot(f);
  if (slot >= t.slots.size()) t.slots.resize(slot + 1);
  ThreadState::ShapeSlot& s = t.slots[slot];
  if (s.nodeShapes == 0 || s.callsSinceRead + 1 >= kShapeReadEvery) {
    s.callsSinceRead = 0;
    return true;
  }
  ++s.callsSinceRead;
  return false;
}

// At the call's end, with the hash of its autograd nodes' shapes (0: none, or not plain sizes). A
// reading call leaves it for the next calls to be checked against; a reusing call whose ops or
// node shapes differ from the read's drops its roofline figures (flops, bytes, modelled time, the
// backward estimate and its links' modelled bits) and makes the next call read.
void settleShapes(ThreadState& t, Frame& f, uint64_t nodeShapes, LinkTable::Entry* links,
                  size_t numLinks) {
  ThreadState::ShapeSlot& s = t.slots[shapeSlot(f)];
  if (f.readShapes) {
    s.nodeShapes = f.shapesStale ? 0 : nodeShapes;
    return;
  }
  if (!f.shapesStale && nodeShapes != 0 && nodeShapes == s.nodeShapes) return;
  for (CallRecord::Kind& k : f.record.kinds) {
    k.flops = k.moved = k.wideFlops = 0;
    k.modelledNs = 0;
  }
  f.backward = {};
  for (size_t i = 0; i < numLinks; ++i) links[i].second.modelled = false;
  s.nodeShapes = 0;
}

// Inside a region: an op that wraps compiled code rather than doing aten work (no namespace:
// "CompiledFunction", "## Call CompiledFxGraph f... ##", "Torch-Compiled Region: 0/0").
inline bool isRegionWrapper(const char* name) {
  return name != nullptr && std::strstr(name, "::") == nullptr;
}

// attnscope's own dispatcher ops (the compiled code's markers, CompiledMarkers.cpp).
inline bool isMarkerOp(const char* name) {
  return name != nullptr && std::strncmp(name, "attnscope::", 11) == 0;
}

// Whether this callback invocation is one of the timed ones.
inline bool timedCallback(uint32_t* counter) {
  return (++*counter % Recorder::kOverheadSampling) == 0;
}

// The fast path reads one initial-exec TLS pointer (a single %fs-relative load, where a
// thread_local object in a shared library costs a __tls_get_addr call); the owner frees the
// state at thread exit.
__thread ThreadState* tStatePtr __attribute__((tls_model("initial-exec"))) = nullptr;
thread_local std::unique_ptr<ThreadState> tStateOwner;

ThreadState& threadState() {
  if (__builtin_expect(tStatePtr == nullptr, 0)) {
    tStateOwner = std::make_unique<ThreadState>();
    tStatePtr = tStateOwner.get();
  }
  return *tStatePtr;
}

uint64_t forwardThreadId(ThreadState& t) {
  if (!t.threadIdKnown) {
    t.threadId = at::RecordFunction::currentThreadId();
    t.threadIdKnown = true;
  }
  return t.threadId;
}

void pointMemoryTargets(ThreadState& t) {
  MemoryTargets& targets = MemoryTargets::current();
  if (t.frames.empty()) {
    targets.call = nullptr;
    targets.op = nullptr;
    return;
  }
  Frame& f = t.frames.back();
  targets.call = &f.callAccount;
  targets.op = f.depth > 0 ? &f.opAccount : nullptr;
}

std::unique_ptr<at::ObserverContext> onForwardStart(const at::RecordFunction& fn) {
  ThreadState& t = threadState();
  if (t.frames.empty()) return nullptr;  // the callback travelled to another thread's state
  const bool timed = timedCallback(&t.callbackCounter);
  const uint64_t entry = timed ? ticks() : 0;
  Frame& f = t.frames.back();
  // A kernel the compiler generated, with a RecordFunction of its own where the job compiled with
  // Inductor's cpp.enable_kernel_profile ("graph_0_cpp_fused__softmax_3"): an op of the kind its
  // name says, not a wrapper.
  const OpKind generated =
      f.compiled && f.depth == 0 ? generatedKernelKind(fn.name()) : OpKind::kCount;
  if ((f.region || f.compiled) && f.depth == 0 && generated == OpKind::kCount &&
      isRegionWrapper(fn.name())) {
    // (A compiled layer meets them where the compiler split its graph inside the layer, as
    // DDPOptimizer does at bucket boundaries.)
    // A compiled region's wrappers ("CompiledFunction", inductor's "## Call CompiledFxGraph ##")
    // hold every aten op the compiled code calls: the ops beneath them are the region's top level.
    ++f.wrapperDepth;
    const int64_t seq = fn.seqNr();
    if (seq >= 0)
      t.links.emplace_back(seq, Link{f.instance, f.record.layer, OpKind::kOther, false});
    if (timed) t.overheadTicks += (ticks() - entry) * Recorder::kOverheadSampling;
    return nullptr;
  }
  if (f.depth == 0 && f.compiled && isMarkerOp(fn.name())) return nullptr;  // the closing marker
  if (++f.depth == 1) {
    const char* name = fn.name();
    f.opKind = f.forcedKind != OpKind::kCount       ? f.forcedKind
               : generated != OpKind::kCount        ? generated
               : f.region                           ? regionOpKind(name)
               : f.record.phase == Phase::kBackward ? f.backwardClassifier.classify(name)
                                                    : f.classifier.classify(name);
    f.backend =
        f.opKind == OpKind::kFusedAttention ? attentionBackendOfOp(name) : AttentionBackend::kCount;
    if (f.readShapes) {
      captureShapes(t, f, fn, name);
      if (f.record.phase == Phase::kForward) f.probe.observe(fn, name, f.opKind);
    } else if (f.roofline) {
      reuseShapes(t, f, name);
    }
    ++f.opOrdinal;
    f.opAccount.reset();
    MemoryTargets::current().op = &f.opAccount;
    if (f.gpu != nullptr) {
      f.gpuOpPushed =
          f.gpu->pushOp(DeviceKey{f.instance, f.record.layer, f.record.phase, f.opKind});
    }
    f.opT0 = ticks();
  } else if (f.opKind == OpKind::kFusedAttention && f.backend == AttentionBackend::kCount) {
    // SDPA picks its kernel inside: the first nested kernel op names the backend.
    f.backend = attentionBackendOfOp(fn.name());
  }
  const int64_t seq = fn.seqNr();
  if (seq >= 0) {
    t.links.emplace_back(seq, Link{f.instance, f.record.layer, f.opKind, f.opCost.modelled});
  }
  if (timed) t.overheadTicks += (ticks() - entry) * Recorder::kOverheadSampling;
  return nullptr;
}

void onForwardEnd(const at::RecordFunction& fn, at::ObserverContext* /*ctx*/) {
  ThreadState& t = threadState();
  if (t.frames.empty()) return;
  Frame& f = t.frames.back();
  if (f.depth <= 0) {  // a region's wrapper, or an op that started before this scope opened
    if (f.wrapperDepth > 0 && isRegionWrapper(fn.name())) --f.wrapperDepth;
    return;
  }
  if (--f.depth > 0) return;
  const uint64_t entry = ticks();
  const uint64_t elapsed = entry - f.opT0;
  if (f.gpuOpPushed) {
    f.gpu->popOp(true);
    f.gpuOpPushed = false;
  }
  CallRecord::Kind& k = f.record.kinds[static_cast<int>(f.opKind)];
  k.ns += static_cast<int64_t>(elapsed);  // ticks until the call ends
  k.ops += 1;
  k.bytes += f.opAccount.bytes;
  if (f.opKind == OpKind::kFusedAttention && f.backend != AttentionBackend::kCount) {
    f.record.backends[static_cast<int>(f.backend)] += 1;
    if (f.readShapes) f.probe.backend = f.backend;
  }
  if (f.opCost.modelled) {
    k.flops += f.opCost.flops;
    k.moved += f.opCost.bytes;
    k.wideFlops += f.opCost.wideFlops;
    k.modelledNs += static_cast<int64_t>(elapsed);  // ticks until the call ends
    f.opCost = OpCost{};
  }
  const int64_t base = f.callAccount.seen() ? f.callAccount.base : f.opAccount.base;
  k.peak = std::max(k.peak, f.opAccount.peakAbove(base));
  MemoryTargets::current().op = nullptr;
  if (timedCallback(&t.callbackCounter))
    t.overheadTicks += (ticks() - entry) * Recorder::kOverheadSampling;
}

at::RecordFunctionCallback forwardCallback(bool needsInputs) {
  return at::RecordFunctionCallback(&onForwardStart, &onForwardEnd)
      .needsInputs(needsInputs)
      .scopes({at::RecordScope::FUNCTION});
}

// Backward: an autograd node whose (forward thread, sequence number) was linked in forward.
struct NodeContext final : at::ObserverContext {
  NodeTiming timing;
};

thread_local uint32_t tBackwardCounter = 0;

std::unique_ptr<at::ObserverContext> onBackwardStart(const at::RecordFunction& fn) {
  Recorder* s = currentRecorder();
  if (s == nullptr) return nullptr;
  StepController& steps = s->steps();
  steps.noteBackward();
  if (!steps.sampled()) return nullptr;
  const int64_t seq = fn.seqNr();
  if (seq < 0) return nullptr;
  const bool timed = timedCallback(&tBackwardCounter);
  const uint64_t entry = timed ? ticks() : 0;
  Link link;
  if (!s->findLink(fn.forwardThreadId(), seq, &link)) {
    if (timed) s->addOverheadTicks((ticks() - entry) * Recorder::kOverheadSampling);
    return nullptr;
  }
  auto ctx = std::make_unique<NodeContext>();
  // A fused kernel's own node names its backend (the math path's nodes are the unfused ops').
  ctx->timing.begin(s, link,
                    link.kind == OpKind::kFusedAttention ? attentionBackendOfNode(fn.name())
                                                         : AttentionBackend::kCount,
                    entry);
  return ctx;
}

void onBackwardEnd(const at::RecordFunction& /*fn*/, at::ObserverContext* ctx) {
  if (ctx != nullptr) static_cast<NodeContext*>(ctx)->timing.end();
}

// Fused attention ops outside any scope open an implicit attention call for their duration.
struct FusedContext final : at::ObserverContext {};

std::unique_ptr<at::ObserverContext> onFusedStart(const at::RecordFunction& fn) {
  ThreadState& t = threadState();
  if (!t.frames.empty()) return nullptr;  // inside a scope the thread-local callback classifies
  const char* name = fn.name();
  if (!isFusedAttentionOp(name)) return nullptr;
  Recorder* s = currentRecorder();
  if (s == nullptr || !s->steps().sampled()) return nullptr;
  std::string layer;
  if (t.fusedHintDepth > 0) {
    layer = t.fusedHint;  // a FusedOpScope names the layer
  } else {
    const uint64_t mark = s->steps().stepIndex();
    if (mark != t.fusedStepMark) {
      t.fusedStepMark = mark;
      t.fusedCounter = 0;
    }
    layer = name;
    if (layer.rfind("aten::", 0) == 0) layer.erase(0, 6);
    layer += "." + std::to_string(t.fusedCounter++);
  }
  if (!Observer::enterScope(s, layer.c_str(), ScopeType::kLayer)) return nullptr;
  Frame& f = t.frames.back();
  const int64_t seq = fn.seqNr();
  if (seq >= 0) {
    t.links.emplace_back(seq, Link{f.instance, f.record.layer, OpKind::kFusedAttention});
  }
  return std::make_unique<FusedContext>();
}

void onFusedEnd(const at::RecordFunction& /*fn*/, at::ObserverContext* ctx) {
  if (ctx != nullptr) Observer::exitScope();
}

// The job's own collectives: c10d opens a USER_SCOPE RecordFunction named "<backend>:<op>" when
// it issues one and ends it when the work completes (possibly on a communication thread).
struct CollectiveContext final : at::ObserverContext {
  Recorder* recorder = nullptr;
  uint64_t t0 = 0;
};

// c10d's Work titles a collective "<backend>:<collective>" ("gloo:all_reduce",
// "nccl:_allgather_base", "mpi:broadcast"); any backend's (ucc, xccl, a program's own) reads the
// same way.
bool isCollectiveName(const char* name) {
  const char* colon = std::strchr(name, ':');
  if (colon == nullptr || colon == name || colon - name > 16 || colon[1] == ':') return false;
  for (const char* c = name; c < colon; ++c) {
    if (!std::isalnum(static_cast<unsigned char>(*c))) return false;
  }
  const char* op = colon + 1;
  while (*op == '_') ++op;
  for (const char* word :
       {"all", "reduce", "broadcast", "barrier", "gather", "scatter", "send", "recv", "alltoall"}) {
    if (std::strncmp(op, word, std::strlen(word)) == 0) return true;
  }
  return false;
}

std::unique_ptr<at::ObserverContext> onCollectiveStart(const at::RecordFunction& fn) {
  if (isInternalThread()) return nullptr;
  Recorder* s = currentRecorder();
  if (s == nullptr || !s->steps().sampled() || !isCollectiveName(fn.name())) return nullptr;
  auto ctx = std::make_unique<CollectiveContext>();
  ctx->recorder = s;
  ctx->t0 = ticks();
  return ctx;
}

void onCollectiveEnd(const at::RecordFunction& /*fn*/, at::ObserverContext* ctx) {
  if (ctx == nullptr) return;
  auto* c = static_cast<CollectiveContext*>(ctx);
  c->recorder->addCollectiveTime(TickClock::toNs(ticks() - c->t0));
}

std::unique_ptr<at::ObserverContext> onGlobalStart(const at::RecordFunction& fn) {
  return fn.scope() == at::RecordScope::BACKWARD_FUNCTION ? onBackwardStart(fn)
                                                          : onCollectiveStart(fn);
}

void onGlobalEnd(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    onBackwardEnd(fn, ctx);
  } else {
    onCollectiveEnd(fn, ctx);
  }
}

}  // namespace

bool nodeTimed() { return timedCallback(&tBackwardCounter); }

void NodeTiming::begin(Recorder* r, const Link& l, AttentionBackend b, uint64_t entry) {
  recorder = r;
  link = l;
  backend = b;
  deviceReporter = false;
  gpu = nullptr;
  gpuPushed = false;
  MemoryTargets& targets = MemoryTargets::current();
  savedOp = targets.op;
  targets.op = &account;
  account.reset();
  if (r->deviceMemory()) deviceReporter = DeviceMemoryReporter::enter();
  if (GpuTimer* g = r->gpu()) {
    gpu = g;
    g->nodeBegin(l.instance, l.layer);
    gpuPushed = g->pushOp(DeviceKey{l.instance, l.layer, Phase::kBackward, l.kind});
  }
  t0 = ticks();
  startTicks = entry != 0 ? t0 - entry + 1 : 0;  // +1: timed even when it took no tick
}

void NodeTiming::end() {
  const uint64_t entry = ticks();
  const int64_t ns = TickClock::toNs(entry - t0);
  if (gpu != nullptr) {
    gpu->popOp(gpuPushed);
    gpu->nodeEnd(link.instance);
  }
  DeviceMemoryReporter::leave(deviceReporter);
  MemoryTargets::current().op = savedOp;
  recorder->addBackwardNode(link, ns, account, backend);
  if (startTicks != 0) {
    recorder->addOverheadTicks((startTicks + ticks() - entry) * Recorder::kOverheadSampling);
  }
}

at::RecordFunctionCallback Observer::globalCallback() {
  return at::RecordFunctionCallback(&onGlobalStart, &onGlobalEnd)
      .scopes({at::RecordScope::BACKWARD_FUNCTION, at::RecordScope::USER_SCOPE});
}

namespace {
// The installed global callbacks; 0 when not installed.
std::mutex gGlobalMutex;
at::CallbackHandle gGlobalHandle = 0;
at::CallbackHandle gFusedHandle = 0;

void setInstalled(bool want, at::CallbackHandle* handle, at::RecordFunctionCallback (*make)()) {
  if (want && *handle == 0) {
    *handle = at::addGlobalCallback(make());
  } else if (!want && *handle != 0) {
    at::removeCallback(*handle);
    *handle = 0;
  }
}
}  // namespace

void Observer::beginSession() { gSessionGeneration.fetch_add(1, std::memory_order_relaxed); }

void Observer::setGlobalCallbacks(bool global, bool fused) {
  std::lock_guard<std::mutex> lock(gGlobalMutex);
  setInstalled(global, &gGlobalHandle, &Observer::globalCallback);
  setInstalled(fused, &gFusedHandle, &Observer::fusedOpCallback);
}

bool Observer::enterScope(Recorder* recorder, const char* layerName, ScopeType type) {
  return enterScope(recorder, layerName, type, false);
}

bool Observer::enterScope(Recorder* recorder, const char* layerName, ScopeType type,
                          bool backward) {
  const uint64_t entry = ticks();
  const int32_t layer = recorder->layerId(layerName);
  if (layer < 0) return false;
  ThreadState& t = threadState();
  t.frames.emplace_back();
  Frame& f = t.frames.back();
  f.recorder = recorder;
  if (recorder->deviceMemory()) f.deviceReporter = DeviceMemoryReporter::enter();
  f.record.layer = layer;
  f.region = type == ScopeType::kRegion;
  f.compiled = type == ScopeType::kCompiled;
  if (f.compiled) f.classifier = OpClassifier(/*softmaxHidden=*/true);
  f.record.phase = backward               ? Phase::kBackward
                   : insideBackwardPass() ? Phase::kRecompute
                                          : Phase::kForward;
  f.instance = recorder->newInstance();
  f.linksBegin = t.links.size();
  pointMemoryTargets(t);
  f.roofline = recorder->roofline();
  if (t.forwardHandle == 0) {
    // The outermost call decides whether the dispatcher boxes every op's inputs for the callback.
    f.readShapes = f.roofline && wantShapeRead(t, f);
    t.inputsBoxed = f.readShapes;
    t.forwardHandle = at::addThreadLocalCallback(forwardCallback(f.readShapes));
  } else if (f.roofline) {
    f.readShapes = wantShapeRead(t, f) && t.inputsBoxed;
  }
  if (GpuTimer* gpu = recorder->gpu()) {
    f.gpu = gpu;
    gpu->callBegin(&f.gpuSpan);
    // Work launched between the call's ops: in compiled code the kernels the compiler generated.
    const OpKind between = f.compiled ? OpKind::kCompiledKernels : OpKind::kOther;
    f.gpuCallPushed = gpu->pushOp(DeviceKey{f.instance, layer, f.record.phase, between});
  }
  t.overheadTicks += ticks() - entry;
  f.t0 = nowNs();
  return true;
}

void Observer::exitScope() { exitScope(nullptr, 0, /*outputsGiven=*/false); }

void Observer::exitScope(const at::Tensor* outputs, size_t count, bool outputsGiven) {
  ThreadState& t = threadState();
  if (t.frames.empty()) return;
  const int64_t end = nowNs();
  const uint64_t entry = ticks();
  Frame& f = t.frames.back();
  if (f.gpu != nullptr) {
    f.gpu->popOp(f.gpuCallPushed);
    f.gpu->callEnd(&f.gpuSpan, f.instance, f.record.layer, f.record.phase);
  }
  f.record.ns = end - f.t0;
  int64_t opsNs = 0;
  for (CallRecord::Kind& k : f.record.kinds) {
    k.ns = TickClock::toNs(static_cast<uint64_t>(k.ns));
    k.modelledNs = TickClock::toNs(static_cast<uint64_t>(k.modelledNs));
    opsNs += k.ns;
  }
  if (f.compiled && f.record.ns > opsNs) {
    // What no op callback saw: the compiler's generated kernels, one span per call (added to
    // those that named themselves and have no other kind).
    CallRecord::Kind& generated = f.record.kinds[static_cast<int>(OpKind::kCompiledKernels)];
    generated.ns += f.record.ns - opsNs;
    generated.ops += 1;
  }
  f.record.bytes = f.callAccount.bytes;
  f.record.peak = f.callAccount.peakAbove(f.callAccount.base);
  // With the call's results, its backward is observed by hooks on its own autograd nodes
  // (NodeHooks.cpp) and its links stay out of the table the global callback searches.
  LinkTable::Entry* links = t.links.data() + f.linksBegin;
  const size_t numLinks = t.links.size() - f.linksBegin;
  LinkMode mode = LinkMode::kTable;
  int found = 0;
  uint64_t nodeShapes = 0;
  if (f.compiled) {
    // Its backward is a call of its own between the backward graph's markers: no link is needed,
    // and none asks for the global callback (as for hooked calls).
    mode = LinkMode::kHooked;
  } else if (outputsGiven && numLinks > 0) {
    found = findCallNodes(forwardThreadId(t), outputs, count, links, numLinks, &nodeShapes);
    mode = found > 0 ? LinkMode::kHooked : found < 0 ? LinkMode::kNoBackward : LinkMode::kTable;
  }
  if (f.roofline) settleShapes(t, f, found > 0 ? nodeShapes : 0, links, numLinks);
  if (found > 0) hookFoundNodes(f.recorder, links);
  if (f.readShapes && f.probe.complete()) f.recorder->noteAttentionShape(f.record.layer, f.probe);
  f.recorder->addForwardCall(f.record, forwardThreadId(t), links, f.compiled ? 0 : numLinks,
                             f.roofline ? f.backward.data() : nullptr, f.instance, mode);
  t.links.resize(f.linksBegin);
  DeviceMemoryReporter::leave(f.deviceReporter);
  Recorder* recorder = f.recorder;
  t.frames.pop_back();
  if (t.frames.empty() && t.forwardHandle != 0) {
    at::removeCallback(t.forwardHandle);
    t.forwardHandle = 0;
  }
  pointMemoryTargets(t);
  t.overheadTicks += ticks() - entry;
  if (t.frames.empty()) {
    recorder->addOverheadTicks(t.overheadTicks);
    t.overheadTicks = 0;
    if (t.shapeReads != 0) {
      recorder->addShapeCounts(t.shapeReads, t.shapeChanges);
      t.shapeReads = t.shapeChanges = 0;
    }
  }
}

bool Observer::forceKind(OpKind kind, OpKind* saved) {
  ThreadState& t = threadState();
  if (t.frames.empty()) return false;
  Frame& f = t.frames.back();
  *saved = f.forcedKind;
  f.forcedKind = kind;
  return true;
}

void Observer::restoreKind(OpKind saved) {
  ThreadState& t = threadState();
  if (!t.frames.empty()) t.frames.back().forcedKind = saved;
}

void Observer::beginFusedHint(const char* layerName) {
  ThreadState& t = threadState();
  if (t.fusedHintDepth++ == 0) {
    t.fusedHint = layerName;
    t.fusedHintHandle = at::addThreadLocalCallback(fusedOpCallback());
  }
}

void Observer::endFusedHint() {
  ThreadState& t = threadState();
  if (t.fusedHintDepth <= 0) return;
  if (--t.fusedHintDepth == 0 && t.fusedHintHandle != 0) {
    at::removeCallback(t.fusedHintHandle);
    t.fusedHintHandle = 0;
  }
}

at::RecordFunctionCallback Observer::fusedOpCallback() {
  return at::RecordFunctionCallback(&onFusedStart, &onFusedEnd).scopes({at::RecordScope::FUNCTION});
}

}  // namespace detail
}  // namespace attnscope
