#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "attnscope/core/Export.h"

namespace attnscope {

// ---- What the shape capture sees of one op's arguments ---------------------------------------

// One tensor argument: its sizes (at most kMaxDims; more leading dimensions are folded into the
// first), element size and type class, and whether it is contiguous.
struct TensorShape {
  static constexpr int kMaxDims = 6;
  std::array<int64_t, kMaxDims> sizes{};
  uint8_t dim = 0;
  uint8_t elementSize = 4;  // bytes per element
  bool floating = true;     // a floating-point dtype
  bool contiguous = true;

  int64_t numel() const;
  int64_t size(int i) const { return i < 0 ? sizes[dim + i] : sizes[i]; }  // negative: from the end
  // float32 or float64: what a lower-precision recommendation looks at
  bool wide() const { return floating && elementSize >= 4; }
};

// One positional argument of an op, as far as the formulas need it.
struct OpArg {
  enum class Type : uint8_t {
    kNone,  // an absent optional (None)
    kTensor,
    kTensorList,  // `shape` holds the summed element count as a 1-D size, the first tensor's dtype
    kInt,
    kDouble,
    kBool,
    kString,  // the op's first string argument, its text in OpArgs::text (einsum's equation)
    kOther,   // anything else (other or longer strings, scalars of other types, generators, ...)
  };
  Type type = Type::kOther;
  TensorShape shape;       // kTensor, kTensorList
  int64_t intValue = 0;    // kInt, kBool (0/1)
  double doubleValue = 0;  // kDouble
};

// The first kMaxArgs positional arguments of one op.
struct OpArgs {
  static constexpr int kMaxArgs = 8;
  static constexpr int kMaxText = 63;
  static constexpr int kMaxListShapes = 2;
  std::array<OpArg, kMaxArgs> args{};
  int count = 0;
  // The text of the kString argument (a string longer than kMaxText is kOther instead).
  std::array<char, kMaxText> text;
  uint8_t textLength = 0;
  // The tensors of the first kTensorList argument, each with its own shape (einsum's operands);
  // listCount is the list's length, which may exceed kMaxListShapes (then only the first are here).
  std::array<TensorShape, kMaxListShapes> list{};
  uint8_t listCount = 0;
  // A tensor argument whose sizes are not real or not local (symbolic shapes under torch.compile
  // tracing, meta and fake tensors, nested tensors, Python subclasses such as DTensor, whose sizes
  // are global): its shape was not read, and no cost is estimated for the op.
  bool opaque = false;

  const OpArg* tensor(int i) const {  // args[i] when it is a tensor, else null
    return i < count && args[i].type == OpArg::Type::kTensor ? &args[i] : nullptr;
  }
  // A 64-bit hash of everything the formulas read (types, sizes, dtypes, contiguity, values):
  // the shape cache compares it to tell whether an op's shapes changed.
  uint64_t signature() const;
};

// ---- The formulas ------------------------------------------------------------------------------

// Floating-point operations and the minimum bytes an op must move between memory and the
// processor (every input read once, every output written once, no intermediate materialised that
// the op does not have to write). docs/ROOFLINE.md has the formula of every op.
struct OpCost {
  double flops = 0;
  double bytes = 0;
  double wideFlops = 0;   // the part of flops done in float32/float64
  bool modelled = false;  // false: attnscope has no formula for the op (its time is left out)
};

// The op's own cost and the cost of its autograd backward (gradients of every input that is a
// floating tensor), both from the forward op's arguments.
struct OpCosts {
  OpCost forward;
  OpCost backward;
};

// opName as RecordFunction reports it ("aten::bmm"); the "aten::" prefix is optional.
ATTNSCOPE_API OpCosts opCosts(const char* opName, const OpArgs& args);

// ---- Ceilings and classification --------------------------------------------------------------

// The machine's ceilings: peak floating-point rate and memory bandwidth.
struct Ceilings {
  double peakFlopsPerSecond = 0;
  double peakBytesPerSecond = 0;
  std::string source;  // "calibration", "config", or empty when unknown
  // How they were found: "float32 mm 1024x1024, best of 5" and so on (run metadata).
  std::string detail;

  bool known() const { return peakFlopsPerSecond > 0 && peakBytesPerSecond > 0; }
  // The arithmetic intensity (flop/byte) where the two roofs meet.
  double ridge() const { return known() ? peakFlopsPerSecond / peakBytesPerSecond : 0; }
};

enum class Bound : uint8_t { kUnknown = 0, kMemory, kCompute };
ATTNSCOPE_API const char* boundName(Bound b);  // "unknown", "memory", "compute"

// Where one (layer, phase, op kind) sits on the roofline.
struct RooflinePoint {
  double flops = 0, bytes = 0, seconds = 0;  // summed over the sampled ops with a formula
  double intensity = 0;                      // flops / bytes (0 when bytes is 0)
  double flopsPerSecond = 0;                 // achieved
  double bytesPerSecond = 0;                 // achieved
  double attainableFlopsPerSecond = 0;       // min(peak flops, intensity × peak bandwidth)
  // Achieved over attainable: flop rate over the roof for ops that compute, byte rate over the
  // bandwidth for ops that only move data (flops 0). 0 when the ceilings are unknown.
  double fraction = 0;
  Bound bound = Bound::kUnknown;  // intensity below the ridge: memory; at or above: compute
};

// seconds <= 0, or neither flops nor bytes: a point with bound kUnknown.
ATTNSCOPE_API RooflinePoint rooflinePoint(double flops, double bytes, double seconds,
                                          const Ceilings& ceilings);

}  // namespace attnscope
