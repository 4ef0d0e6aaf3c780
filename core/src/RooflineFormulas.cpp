// The per-op FLOP and byte formulas behind opCosts(), and the argument signature the shape cache
// keys on. docs/ROOFLINE.md ("Formulas") is the table of what each op counts and why.
//
// Every formula reads its arguments through the checked accessors below: an argument that is
// missing, of the wrong type, or a tensor whose dimensions are out of range makes the op
// unmodelled (OpCost::modelled false, zeros) instead of guessing.

#include "attnscope/core/Roofline.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <string>

namespace attnscope {

int64_t TensorShape::numel() const {
  const int d = std::min<int>(dim, kMaxDims);
  for (int i = 0; i < d; ++i) {
    if (sizes[i] <= 0) return 0;  // empty (or a nonsense negative size)
  }
  int64_t n = 1;
  for (int i = 0; i < d; ++i) {
    if (__builtin_mul_overflow(n, sizes[i], &n)) return std::numeric_limits<int64_t>::max();
  }
  return n;
}

namespace {

// splitmix64's finaliser: a bijection that spreads every input bit over the whole word.
uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

class Hasher {
 public:
  void add(uint64_t v) { h_ = mix64(h_ ^ v) * 0x100000001b3ULL; }  // FNV prime between words
  uint64_t value() const { return mix64(h_); }

 private:
  uint64_t h_ = 0xcbf29ce484222325ULL;  // FNV-1a offset basis
};

int clampedCount(int count) { return std::clamp(count, 0, OpArgs::kMaxArgs); }

// A tensor's sizes up to its dimension, its element size, dtype class and contiguity.
void hashShape(const TensorShape& s, Hasher* h) {
  h->add(s.dim);
  const int d = std::min<int>(s.dim, TensorShape::kMaxDims);
  for (int j = 0; j < d; ++j) h->add(static_cast<uint64_t>(s.sizes[j]));
  h->add(static_cast<uint64_t>(s.elementSize) | (s.floating ? 0x100u : 0u) |
         (s.contiguous ? 0x200u : 0u));
}

}  // namespace

// Only what the formulas can read is hashed: the fields that belong to the argument's type and,
// of a tensor, the sizes up to its dimension. Stale bytes a reused OpArgs keeps beyond `count`,
// beyond `dim`, or in the fields of another type cannot make equal arguments look different.
uint64_t OpArgs::signature() const {
  Hasher h;
  const int n = clampedCount(count);
  h.add(static_cast<uint64_t>(n) | (opaque ? 1ULL << 32 : 0));
  for (int i = 0; i < n; ++i) {
    const OpArg& a = args[i];
    h.add(static_cast<uint64_t>(a.type));
    switch (a.type) {
      case OpArg::Type::kTensor:
      case OpArg::Type::kTensorList:
        hashShape(a.shape, &h);
        break;
      case OpArg::Type::kInt:
      case OpArg::Type::kBool:
        h.add(static_cast<uint64_t>(a.intValue));
        break;
      case OpArg::Type::kDouble: {
        uint64_t bits = 0;
        static_assert(sizeof bits == sizeof a.doubleValue, "double is 64-bit");
        std::memcpy(&bits, &a.doubleValue, sizeof bits);
        h.add(bits);
        break;
      }
      case OpArg::Type::kString:
      case OpArg::Type::kNone:
      case OpArg::Type::kOther:
        break;
    }
  }
  const int text = std::min<int>(textLength, kMaxText);
  h.add(static_cast<uint64_t>(text));
  for (int i = 0; i < text; i += 8) {  // eight characters a word; the last word zero-padded
    uint64_t word = 0;
    std::memcpy(&word, this->text.data() + i, static_cast<size_t>(std::min(8, text - i)));
    h.add(word);
  }
  h.add(listCount);
  for (int i = 0; i < std::min<int>(listCount, kMaxListShapes); ++i) hashShape(list[i], &h);
  return h.value();
}

namespace {

using Type = OpArg::Type;

// ---- Checked argument access --------------------------------------------------------------------

const OpArg* argAt(const OpArgs& a, int i) {
  return i >= 0 && i < clampedCount(a.count) ? &a.args[i] : nullptr;
}

bool validShape(const TensorShape& s) {
  if (s.dim > TensorShape::kMaxDims) return false;
  for (int i = 0; i < s.dim; ++i) {
    if (s.sizes[i] < 0) return false;
  }
  return s.elementSize > 0;
}

// args[i] when it is a tensor with a sane shape of at least minDim dimensions, else null.
const TensorShape* tensorAt(const OpArgs& a, int i, int minDim = 0) {
  const OpArg* arg = argAt(a, i);
  if (arg == nullptr || arg->type != Type::kTensor || !validShape(arg->shape)) return nullptr;
  return arg->shape.dim >= minDim ? &arg->shape : nullptr;
}

bool isType(const OpArgs& a, int i, Type t) {
  const OpArg* arg = argAt(a, i);
  return arg != nullptr && arg->type == t;
}

bool isScalar(const OpArgs& a, int i) {
  return isType(a, i, Type::kInt) || isType(a, i, Type::kDouble) || isType(a, i, Type::kBool);
}

// A kBool argument's value; `absent` when args[i] is missing or not a bool.
bool boolAt(const OpArgs& a, int i, bool absent) {
  const OpArg* arg = argAt(a, i);
  return arg != nullptr && arg->type == Type::kBool ? arg->intValue != 0 : absent;
}

// Elements of a shape, in double (no overflow; sizes were checked non-negative).
double elems(const TensorShape& s) {
  double n = 1;
  for (int i = 0; i < s.dim; ++i) n *= static_cast<double>(s.sizes[i]);
  return n;
}
double bytesOf(const TensorShape& s) { return elems(s) * s.elementSize; }
double bytesOf(const TensorShape* s) { return s ? bytesOf(*s) : 0; }

// Size of dimension i counted from the end (1 = last). The caller checked dim >= i.
int64_t fromEnd(const TensorShape& s, int i) { return s.sizes[s.dim - i]; }

// Product of the dimensions before the last `trailing` ones.
double leading(const TensorShape& s, int trailing) {
  double n = 1;
  for (int i = 0; i + trailing < s.dim; ++i) n *= static_cast<double>(s.sizes[i]);
  return n;
}

// The first `d` sizes of s as a shape of their own (a matmul's batch dimensions).
TensorShape prefix(const TensorShape& s, int d) {
  TensorShape p;
  p.dim = static_cast<uint8_t>(std::max(0, d));
  for (int i = 0; i < p.dim; ++i) p.sizes[i] = s.sizes[i];
  return p;
}

// Broadcasts two shapes with torch's rules (aligned from the last dimension; equal, or one is 1).
bool broadcast(const TensorShape& a, const TensorShape& b, TensorShape* out) {
  const int d = std::max(a.dim, b.dim);
  out->dim = static_cast<uint8_t>(d);
  for (int i = 1; i <= d; ++i) {
    const int64_t x = i <= a.dim ? fromEnd(a, i) : 1;
    const int64_t y = i <= b.dim ? fromEnd(b, i) : 1;
    int64_t r;
    if (x == y || y == 1) {
      r = x;
    } else if (x == 1) {
      r = y;
    } else {
      return false;
    }
    out->sizes[d - i] = r;
  }
  return true;
}

bool sameSizes(const TensorShape& a, const TensorShape& b) {
  if (a.dim != b.dim) return false;
  for (int i = 0; i < a.dim; ++i) {
    if (a.sizes[i] != b.sizes[i]) return false;
  }
  return true;
}

// Bytes per element of a c10::ScalarType code (how torch passes a dtype argument: an int), or
// `otherwise` for a code this table does not know.
int elementSizeOfScalarType(int64_t code, int otherwise) {
  // By code: Byte Char Short Int Long Half Float Double ComplexHalf ComplexFloat ComplexDouble
  // Bool QInt8 QUInt8 QInt32 BFloat16 QUInt4x2 QUInt2x4, the bits types (18-22, unknown here),
  // Float8_e5m2 Float8_e4m3fn Float8_e5m2fnuz Float8_e4m3fnuz.
  constexpr uint8_t kSizes[] = {1, 1, 2, 4, 8, 2, 4, 8, 4, 8, 16, 1, 1, 1,
                                4, 2, 1, 1, 0, 0, 0, 0, 0, 1, 1,  1, 1};
  constexpr int64_t kCount = sizeof kSizes / sizeof kSizes[0];
  return code >= 0 && code < kCount && kSizes[code] > 0 ? kSizes[code] : otherwise;
}

// The element size of an elementwise op's result under torch's type promotion, simplified:
// tensors with dimensions decide over 0-dim tensors, which decide over Python scalars; a floating
// type wins over an integral one; within a class the widest wins. `scalarFloating` says whether a
// scalar operand is a floating value (an integral tensor times 0.5 gives the default float32).
int resultElementSize(const TensorShape* const* ts, int n, bool hasScalar, bool scalarFloating) {
  auto cls = [](const TensorShape& s) { return s.floating ? 1 : 0; };
  int best = -1;  // highest class among all operands
  for (int i = 0; i < n; ++i) {
    if (ts[i]) best = std::max(best, cls(*ts[i]));
  }
  if (hasScalar) best = std::max(best, scalarFloating ? 1 : 0);
  for (int pass = 0; pass < 2; ++pass) {  // 0: tensors with dimensions, 1: 0-dim tensors
    int es = 0;
    for (int i = 0; i < n; ++i) {
      const TensorShape* s = ts[i];
      if (s && (s->dim > 0) == (pass == 0) && cls(*s) == best)
        es = std::max<int>(es, s->elementSize);
    }
    if (es > 0) return es;
  }
  return scalarFloating ? 4 : 8;  // only a scalar is of the winning class: float32 / int64
}

// ---- Accumulating a cost ----------------------------------------------------------------------

struct Cost {
  double flops = 0;
  double bytes = 0;
};

struct Costs {
  Cost fw, bw;
};

// The gradient of an input that an elementwise op combined into its output: `perElt` flops per
// output element (0 for a pass-through such as add's), `extraReads` bytes read besides the output
// gradient. A broadcast input's gradient is summed over the broadcast dimensions (one add per
// output element). A pass-through gradient of an unbroadcast input only writes the gradient.
void elementwiseGrad(const TensorShape* in, double outN, int outEs, double perElt,
                     double extraReads, Cost* bw) {
  if (in == nullptr || !in->floating) return;
  const double n = elems(*in);
  const bool reduced = n < outN;
  bw->flops += perElt * outN + (reduced ? outN : 0);
  if (perElt > 0 || reduced) bw->bytes += outN * outEs + extraReads;  // dOut (and the rest) read
  bw->bytes += n * in->elementSize;                                   // the gradient written
}

// The core of every matmul: out[batch, n, m] = A[.., n, k] · B[.., k, m]. A and B are counted at
// their own numel (a broadcast batch is read once). Backward: dA = dC·Bᵀ and dB = Aᵀ·dC, each a
// matmul of the same size that reads dC and the other operand and writes the gradient.
void matmulCore(double batch, double n, double k, double m, const TensorShape& A,
                const TensorShape& B, int outEs, Costs* c) {
  const double mm = 2 * batch * n * k * m;
  const double out = batch * n * m * outEs;
  c->fw.flops += mm;
  c->fw.bytes += bytesOf(A) + bytesOf(B) + out;
  if (A.floating) {
    c->bw.flops += mm;
    c->bw.bytes += out + bytesOf(B) + bytesOf(A);
  }
  if (B.floating) {
    c->bw.flops += mm;
    c->bw.bytes += out + bytesOf(A) + bytesOf(B);
  }
}

// ---- The formulas ------------------------------------------------------------------------------

// mm(self[n,k], mat2[k,m]) and bmm(self[b,n,k], mat2[b,k,m]); addmm/baddbmm add `self` (C,
// broadcast to the output) first: addmm(self, mat1, mat2, beta, alpha).
bool mmFamily(const OpArgs& a, bool batched, bool withC, Costs* c) {
  const int d = batched ? 3 : 2;
  const int first = withC ? 1 : 0;
  const TensorShape* A = tensorAt(a, first, d);
  const TensorShape* B = tensorAt(a, first + 1, d);
  if (!A || !B || A->dim != d || B->dim != d) return false;
  if (batched && A->sizes[0] != B->sizes[0]) return false;
  if (fromEnd(*A, 1) != fromEnd(*B, 2)) return false;
  const double batch = batched ? A->sizes[0] : 1;
  const double n = fromEnd(*A, 2), k = fromEnd(*A, 1), m = fromEnd(*B, 1);
  const int outEs = A->elementSize;
  if (withC) {
    const TensorShape* C = tensorAt(a, 0);
    if (!C) return false;
    TensorShape out = prefix(*A, d), shaped;
    out.sizes[d - 1] = static_cast<int64_t>(m);
    if (!broadcast(out, *C, &shaped) || !sameSizes(shaped, out)) return false;
    const double outN = batch * n * m;
    c->fw.flops += outN;  // the add (beta and alpha scale in the same pass: not counted)
    c->fw.bytes += bytesOf(*C);
    elementwiseGrad(C, outN, outEs, 0, 0, &c->bw);
  }
  matmulCore(batch, n, k, m, *A, *B, outEs, c);
  return true;
}

// matmul(self, other) with torch's semantics: a 1-D operand is a vector (its dimension dropped
// from the result), the dimensions before the last two are batch dimensions and broadcast.
bool matmul(const OpArgs& a, Costs* c) {
  const TensorShape* A = tensorAt(a, 0, 1);
  const TensorShape* B = tensorAt(a, 1, 1);
  if (!A || !B) return false;
  const double n = A->dim >= 2 ? fromEnd(*A, 2) : 1;
  const int64_t kA = fromEnd(*A, 1);
  const int64_t kB = B->dim >= 2 ? fromEnd(*B, 2) : B->sizes[0];
  const double m = B->dim >= 2 ? fromEnd(*B, 1) : 1;
  if (kA != kB) return false;
  TensorShape batch;
  if (!broadcast(prefix(*A, A->dim - 2), prefix(*B, B->dim - 2), &batch)) return false;
  matmulCore(elems(batch), n, static_cast<double>(kA), m, *A, *B, A->elementSize, c);
  return true;
}

// linear(input[..., k], weight[m, k], bias?[m]) = input·weightᵀ + bias.
bool linear(const OpArgs& a, Costs* c) {
  const TensorShape* X = tensorAt(a, 0, 1);
  const TensorShape* W = tensorAt(a, 1, 2);
  if (!X || !W || W->dim != 2 || W->sizes[1] != fromEnd(*X, 1)) return false;
  const TensorShape* bias = nullptr;
  if (argAt(a, 2) != nullptr && !isType(a, 2, Type::kNone)) {
    bias = tensorAt(a, 2);
    if (!bias || bias->dim > 1 ||
        (bias->dim == 1 && bias->sizes[0] != W->sizes[0] && bias->sizes[0] != 1)) {
      return false;
    }
  }
  const double N = leading(*X, 1), k = W->sizes[1], m = W->sizes[0];
  const int outEs = X->elementSize;
  matmulCore(1, N, k, m, *X, *W, outEs, c);
  if (bias) {
    c->fw.flops += N * m;
    c->fw.bytes += bytesOf(*bias);
    elementwiseGrad(bias, N * m, outEs, 0, 0, &c->bw);  // the bias gradient: a sum over N rows
  }
  return true;
}

// A view: metadata only, no data moved either way.
bool view(const OpArgs& a, Costs*) { return tensorAt(a, 0) != nullptr; }

// A copy of n elements from one element size to another; its backward copies the gradient back.
void copyCost(double n, int inEs, int outEs, bool floating, Costs* c) {
  c->fw.bytes += n * (inEs + outEs);
  if (floating) c->bw.bytes += n * (inEs + outEs);
}

// reshape/flatten/contiguous: a view of a contiguous input, a copy of any other (`always`: clone).
bool maybeCopy(const OpArgs& a, bool always, Costs* c) {
  const TensorShape* X = tensorAt(a, 0);
  if (!X) return false;
  if (always || !X->contiguous) copyCost(elems(*X), X->elementSize, X->elementSize, X->floating, c);
  return true;
}

// copy_(self, src, non_blocking): src (broadcast to self) read, self written.
bool copyInto(const OpArgs& a, Costs* c) {
  const TensorShape* dst = tensorAt(a, 0);
  const TensorShape* src = tensorAt(a, 1);
  TensorShape out;
  if (!dst || !src || !broadcast(*dst, *src, &out) || !sameSizes(out, *dst)) return false;
  c->fw.bytes += bytesOf(*dst) + bytesOf(*src);
  if (dst->floating || src->floating) c->bw.bytes += bytesOf(*dst) + bytesOf(*src);
  return true;
}

// _to_copy(self, dtype, layout, device, pin_memory, non_blocking, memory_format) and the `to`
// overloads: to(self, dtype, ...), to(self, device, dtype, ...), to(self, other, ...).
bool toCopy(const OpArgs& a, bool isTo, Costs* c) {
  const TensorShape* X = tensorAt(a, 0);
  if (!X) return false;
  int outEs = X->elementSize;
  if (isType(a, 1, Type::kInt)) {
    outEs = elementSizeOfScalarType(a.args[1].intValue, outEs);
  } else if (isTo && tensorAt(a, 1)) {
    outEs = tensorAt(a, 1)->elementSize;
  } else if (isTo && isType(a, 1, Type::kOther) && isType(a, 2, Type::kInt)) {
    outEs = elementSizeOfScalarType(a.args[2].intValue, outEs);
  }
  copyCost(elems(*X), X->elementSize, outEs, X->floating, c);
  return true;
}

// cat/stack(tensors, dim): every element read once and written once.
bool catLike(const OpArgs& a, Costs* c) {
  const OpArg* list = argAt(a, 0);
  if (!list || list->type != Type::kTensorList || !validShape(list->shape)) return false;
  const TensorShape& s = list->shape;
  copyCost(elems(s), s.elementSize, s.elementSize, s.floating, c);
  return true;
}

// softmax/log_softmax/_safe_softmax(self, dim, dtype); _softmax/_log_softmax(self, dim,
// half_to_float). Forward 5 flops per element (max, subtract, exp, sum, divide), backward 4
// (the row sum of y·dy, subtract, multiply, and the exp/multiply of the output).
bool softmax(const OpArgs& a, bool halfToFloatArg, Costs* c) {
  const TensorShape* X = tensorAt(a, 0);
  if (!X || !isType(a, 1, Type::kInt)) return false;
  int outEs = X->elementSize;
  if (halfToFloatArg) {
    if (boolAt(a, 2, false)) outEs = 4;
  } else if (isType(a, 2, Type::kInt)) {
    outEs = elementSizeOfScalarType(a.args[2].intValue, outEs);
  }
  const double n = elems(*X);
  c->fw.flops += 5 * n;
  c->fw.bytes += n * (X->elementSize + outEs);
  if (X->floating) {
    c->bw.flops += 4 * n;
    c->bw.bytes += n * (2 * outEs + X->elementSize);  // y and dy read, dx written
  }
  return true;
}

// dropout/feature_dropout(input, p, train), native_dropout(input, p, train?): in training, a
// random draw compared with p and a scaling multiply per element, a 1-byte mask written.
bool dropout(const OpArgs& a, bool optionalTrain, Costs* c) {
  const TensorShape* X = tensorAt(a, 0);
  if (!X || !isType(a, 1, Type::kDouble)) return false;
  bool train;
  if (isType(a, 2, Type::kBool)) {
    train = a.args[2].intValue != 0;
  } else if (optionalTrain && isType(a, 2, Type::kNone)) {
    train = true;
  } else {
    return false;
  }
  if (!train) return true;  // eval: the input is returned
  const double n = elems(*X);
  c->fw.flops += 2 * n;
  c->fw.bytes += n * (2 * X->elementSize + 1);
  if (X->floating) {
    c->bw.flops += n;  // dy · mask · scale, one fused multiply
    c->bw.bytes += n * (2 * X->elementSize + 1);
  }
  return true;
}

// masked_fill(self, mask, value): one select per output element.
bool maskedFill(const OpArgs& a, bool inPlace, Costs* c) {
  const TensorShape* X = tensorAt(a, 0);
  const TensorShape* mask = tensorAt(a, 1);
  TensorShape out;
  if (!X || !mask || !broadcast(*X, *mask, &out)) return false;
  if (inPlace && !sameSizes(out, *X)) return false;
  const double outN = elems(out);
  const double value = bytesOf(tensorAt(a, 2));  // a 0-dim tensor value, if it is one
  c->fw.flops += outN;
  c->fw.bytes += bytesOf(*X) + bytesOf(*mask) + value + outN * X->elementSize;
  elementwiseGrad(X, outN, X->elementSize, 1, bytesOf(*mask), &c->bw);
  return true;
}

// where(condition, self, other): self and other may be tensors or scalars.
bool where(const OpArgs& a, Costs* c) {
  const TensorShape* cond = tensorAt(a, 0);
  const TensorShape* x = tensorAt(a, 1);
  const TensorShape* y = tensorAt(a, 2);
  if (!cond || (!x && !isScalar(a, 1)) || (!y && !isScalar(a, 2))) return false;
  TensorShape out = *cond, tmp;
  for (const TensorShape* s : {x, y}) {
    if (s && !broadcast(out, *s, &tmp)) return false;
    if (s) out = tmp;
  }
  const TensorShape* operands[] = {x, y};
  const bool scalarFloating = isType(a, 1, Type::kDouble) || isType(a, 2, Type::kDouble);
  const int outEs = resultElementSize(operands, 2, !x || !y, scalarFloating);
  const double outN = elems(out);
  c->fw.flops += outN;
  c->fw.bytes += bytesOf(*cond) + bytesOf(x) + bytesOf(y) + outN * outEs;
  elementwiseGrad(x, outN, outEs, 1, bytesOf(*cond), &c->bw);
  elementwiseGrad(y, outN, outEs, 1, bytesOf(*cond), &c->bw);
  return true;
}

enum class Binary : uint8_t { kAdd, kSub, kMul, kDiv };

// add/sub(self, other, alpha), mul/div(self, other[, rounding_mode]); other a tensor (broadcast)
// or a scalar. One flop per output element (add's alpha scale is fused: not counted).
bool binary(const OpArgs& a, Binary op, bool inPlace, Costs* c) {
  const TensorShape* X = tensorAt(a, 0);
  const TensorShape* Y = tensorAt(a, 1);
  if (!X || (!Y && !isScalar(a, 1))) return false;
  TensorShape out = *X;
  if (Y && !broadcast(*X, *Y, &out)) return false;
  if (inPlace && !sameSizes(out, *X)) return false;
  const TensorShape* operands[] = {X, Y};
  int outEs = resultElementSize(operands, 2, !Y, isType(a, 1, Type::kDouble));
  if (op == Binary::kDiv && !X->floating && !(Y && Y->floating)) outEs = 4;  // true division
  if (inPlace) outEs = X->elementSize;
  const double outN = elems(out);
  c->fw.flops += outN;
  c->fw.bytes += bytesOf(*X) + bytesOf(Y) + outN * outEs;
  switch (op) {
    case Binary::kAdd:
    case Binary::kSub:  // gradients pass through (sub's negation not counted)
      elementwiseGrad(X, outN, outEs, 0, 0, &c->bw);
      elementwiseGrad(Y, outN, outEs, 0, 0, &c->bw);
      break;
    case Binary::kMul:  // dX = dOut·Y, dY = dOut·X
      elementwiseGrad(X, outN, outEs, 1, bytesOf(Y), &c->bw);
      elementwiseGrad(Y, outN, outEs, 1, bytesOf(*X), &c->bw);
      break;
    case Binary::kDiv:  // dX = dOut/Y; dY = -dOut·X/Y² (counted as one flop, reading X and Y)
      elementwiseGrad(X, outN, outEs, 1, bytesOf(Y), &c->bw);
      elementwiseGrad(Y, outN, outEs, 1, bytesOf(*X) + bytesOf(Y), &c->bw);
      break;
  }
  return true;
}

// A unary elementwise op: `fwd` flops per element forward, `bwd` backward; the backward reads dy
// and the input (or output) unless `bwdReadsInput` is false (neg).
bool unary(const OpArgs& a, int fwd, int bwd, bool bwdReadsInput, Costs* c) {
  const TensorShape* X = tensorAt(a, 0);
  if (!X) return false;
  const double n = elems(*X);
  c->fw.flops += fwd * n;
  c->fw.bytes += 2 * n * X->elementSize;
  if (X->floating) {
    c->bw.flops += bwd * n;
    c->bw.bytes += (bwdReadsInput ? 3 : 2) * n * X->elementSize;
  }
  return true;
}

// equal(self, other) -> bool: one compare per element when the sizes match (else no work).
bool equal(const OpArgs& a, Costs* c) {
  const TensorShape* X = tensorAt(a, 0);
  const TensorShape* Y = tensorAt(a, 1);
  if (!X || !Y) return false;
  if (!sameSizes(*X, *Y)) return true;
  c->fw.flops += elems(*X);
  c->fw.bytes += bytesOf(*X) + bytesOf(*Y);
  return true;
}

// Where an attention op keeps its optional mask, its is_causal flag and (LibTorch 1.13's
// _scaled_dot_product_attention) its need_attn_weights flag; -1: the op has none.
struct SdpaLayout {
  int mask = -1;
  int causal = -1;
  int needWeights = -1;
};

enum class Sdpa : uint8_t { kPublic, kLegacy, kMath, kFlash, kFlashCpu, kEfficient, kCudnn };

SdpaLayout sdpaLayout(Sdpa which, const OpArgs& a) {
  switch (which) {
    case Sdpa::kPublic:  // (query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
      return {3, 5, -1};
    case Sdpa::kLegacy:  // 1.13: (query, key, value, attn_mask, dropout_p, need_attn_weights,
                         //       is_causal)
      return {3, 6, 5};
    case Sdpa::kMath:  // 2.x: (query, key, value, attn_mask, dropout_p, is_causal, dropout_mask,
                       //       scale, enable_gqa); 1.13: the legacy layout (a bool at 6)
      return isType(a, 6, Type::kBool) ? SdpaLayout{3, 6, 5} : SdpaLayout{3, 5, -1};
    case Sdpa::kFlash:  // (query, key, value, dropout_p, is_causal, return_debug_mask, scale)
      return {-1, 4, -1};
    case Sdpa::kFlashCpu:  // (query, key, value, dropout_p, is_causal, attn_mask, scale)
      return {5, 4, -1};
    case Sdpa::kEfficient:  // 2.1+: (query, key, value, attn_bias, compute_log_sumexp, dropout_p,
                            //       is_causal, scale); 2.0: (q, k, v, compute_log_sumexp,
                            //       is_causal)
      return isType(a, 3, Type::kBool) ? SdpaLayout{-1, 4, -1} : SdpaLayout{3, 6, -1};
    case Sdpa::kCudnn:  // 2.5+: (query, key, value, attn_bias, compute_log_sumexp, dropout_p,
                        //       is_causal, return_debug_mask, scale);
                        // 2.3/2.4: (query, key, value, dropout_p, is_causal, return_debug_mask, ..)
      return isType(a, 3, Type::kDouble) ? SdpaLayout{-1, 4, -1} : SdpaLayout{3, 6, -1};
  }
  return {};
}

// Scaled dot-product attention on q[..., L, E], k[..., S, E], v[..., S, Ev]: the score and
// context matmuls and a softmax over the L×S scores per head, halved when causal. The fused
// kernels never write the scores: bytes are q, k, v (and the mask) read and the output written.
// Backward (FlashAttention-style): the scores recomputed plus four matmuls (dV, dP, dQ, dK) =
// 2.5× the forward matmul flops, and 4 flops per score for the softmax gradient; q, k, v, the
// output, its gradient (and the mask) read, dq, dk, dv written.
bool sdpa(const OpArgs& a, Sdpa which, Costs* c) {
  const TensorShape* q = tensorAt(a, 0, 2);
  const TensorShape* k = tensorAt(a, 1, 2);
  const TensorShape* v = tensorAt(a, 2, 2);
  if (!q || !k || !v) return false;
  const double L = fromEnd(*q, 2), E = fromEnd(*q, 1);
  const double S = fromEnd(*k, 2), Ev = fromEnd(*v, 1);
  if (fromEnd(*k, 1) != fromEnd(*q, 1) || fromEnd(*v, 2) != fromEnd(*k, 2)) return false;
  const SdpaLayout layout = sdpaLayout(which, a);
  const double bh = leading(*q, 2);
  const double half = boolAt(a, layout.causal, false) ? 0.5 : 1;
  const double scores = bh * L * S * half;
  const double mm = 2 * scores * E + 2 * scores * Ev;
  const double mask = bytesOf(tensorAt(a, layout.mask));
  const double out = bh * L * Ev * q->elementSize;
  // 1.13's need_attn_weights: the attention weights are an output too.
  const double weights = boolAt(a, layout.needWeights, false) ? bh * L * S * q->elementSize : 0;
  c->fw.flops += mm + 5 * scores;
  c->fw.bytes += bytesOf(*q) + bytesOf(*k) + bytesOf(*v) + mask + out + weights;
  if (q->floating || k->floating || v->floating) {
    c->bw.flops += 2.5 * mm + 4 * scores;
    c->bw.bytes += 2 * (bytesOf(*q) + bytesOf(*k) + bytesOf(*v)) + mask + 2 * out;
  }
  return true;
}

// einsum(equation, tensors) with one or two operands: every index letter gets its size from the
// operands (a size-1 dimension broadcasts), "..." stands for the broadcast leading dimensions,
// and without "->" the output is the letters used once, in alphabetical order. With `total` the
// product of all index sizes (the iteration space) and `out` the output's elements: two operands
// cost 2·total flops when an index is summed (a multiply-add per term, as for mm), total when
// none is (an outer or elementwise product); one operand costs total − out adds of its sums and
// is a view (nothing moved) when nothing is summed. Bytes: the operands and the output. Backward
// of two operands: each floating operand's gradient is an einsum over the same indices, reading
// the output gradient and the other operand. Three or more operands are not modelled (the cost
// depends on the contraction path torch picks).
bool einsum(const OpArgs& a, Costs* c) {
  if (!isType(a, 0, Type::kString) || !isType(a, 1, Type::kTensorList)) return false;
  static_assert(OpArgs::kMaxListShapes >= 2, "einsum reads two operand shapes");
  const int operands = a.listCount;
  if (operands < 1 || operands > 2) return false;
  std::string eq;
  for (int i = 0; i < std::min<int>(a.textLength, OpArgs::kMaxText); ++i) {
    if (a.text[i] != ' ') eq += a.text[i];
  }
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::string terms[2];
  const size_t comma = lhs.find(',');
  terms[0] = lhs.substr(0, comma);
  if (comma != std::string::npos) terms[1] = lhs.substr(comma + 1);
  if ((comma == std::string::npos ? 1 : 2) != operands || terms[1].find(',') != std::string::npos)
    return false;

  std::array<int64_t, 128> size;  // per letter; -1 unseen
  size.fill(-1);
  std::array<int, 128> uses{};
  TensorShape ellipsis;  // the broadcast of the operands' "..." dimensions
  ellipsis.dim = 0;
  bool anyEllipsis = false;
  double operandElems[2] = {1, 1};  // each operand's index space (its distinct letters and "...")
  for (int t = 0; t < operands; ++t) {
    const TensorShape& shape = a.list[t];
    if (!validShape(shape)) return false;
    std::string letters = terms[t];
    const size_t dots = letters.find("...");
    if (dots != std::string::npos) letters.erase(dots, 3);
    for (char ch : letters) {
      if (!std::isalpha(static_cast<unsigned char>(ch))) return false;
    }
    const int named = static_cast<int>(letters.size());
    const int rest = shape.dim - named;  // the dimensions "..." stands for
    if (rest < 0 || (dots == std::string::npos && rest != 0)) return false;
    const int before =
        dots == std::string::npos ? named : static_cast<int>(dots);  // letters before "..."
    if (dots != std::string::npos) {
      anyEllipsis = true;
      TensorShape mine;
      mine.dim = static_cast<uint8_t>(rest);
      for (int d = 0; d < rest; ++d) mine.sizes[d] = shape.sizes[before + d];
      TensorShape merged;
      if (!broadcast(ellipsis, mine, &merged)) return false;
      ellipsis = merged;
      operandElems[t] *= elems(mine);
    }
    std::array<bool, 128> seen{};
    for (int i = 0; i < named; ++i) {
      const int ch = letters[i];
      const int64_t n = shape.sizes[i < before ? i : i + rest];
      int64_t& known = size[ch];
      if (known == -1 || known == 1) {
        known = n;
      } else if (n != known && n != 1) {
        return false;
      }
      if (!seen[ch]) operandElems[t] *= static_cast<double>(n);
      seen[ch] = true;
      ++uses[ch];
    }
  }
  const double ellipsisElems = anyEllipsis ? elems(ellipsis) : 1;
  double total = ellipsisElems;
  for (int ch = 0; ch < 128; ++ch) {
    if (size[ch] >= 0) total *= static_cast<double>(size[ch]);
  }
  double out = 1;
  if (arrow != std::string::npos) {
    std::string rhs = eq.substr(arrow + 2);
    const size_t dots = rhs.find("...");
    if (dots != std::string::npos) {
      if (!anyEllipsis) return false;
      rhs.erase(dots, 3);
      out *= ellipsisElems;
    }
    std::array<bool, 128> seen{};
    for (char ch : rhs) {
      const int i = static_cast<unsigned char>(ch);
      if (i >= 128 || size[i] < 0 || seen[i]) return false;
      seen[i] = true;
      out *= static_cast<double>(size[i]);
    }
  } else {
    out = ellipsisElems;
    for (int ch = 0; ch < 128; ++ch) {
      if (uses[ch] == 1) out *= static_cast<double>(size[ch]);
    }
  }
  const int outEs = a.list[0].elementSize;
  const double outBytes = out * outEs;
  const bool summed = total > out;
  if (operands == 1) {
    if (!summed) return true;  // a permutation or diagonal: a view
    c->fw.flops += total - out;
    c->fw.bytes += bytesOf(a.list[0]) + outBytes;
    if (a.list[0].floating) c->bw.bytes += outBytes + bytesOf(a.list[0]);  // dOut broadcast back
    return true;
  }
  c->fw.flops += summed ? 2 * total : total;
  c->fw.bytes += bytesOf(a.list[0]) + bytesOf(a.list[1]) + outBytes;
  for (int t = 0; t < 2; ++t) {
    if (!a.list[t].floating) continue;
    c->bw.flops += total > operandElems[t] ? 2 * total : total;
    c->bw.bytes += outBytes + bytesOf(a.list[1 - t]) + bytesOf(a.list[t]);
  }
  return true;
}

// _native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias,
// proj_weight, proj_bias, mask, need_weights, average_attn_weights, mask_type): the q, k, v
// projections (with bias), attention over num_head heads, the output projection (with bias).
// proj_bias and everything after it lie beyond OpArgs::kMaxArgs: proj_bias is taken as [E] of
// query's dtype, the mask and the returned attention weights are not counted.
bool nativeMha(const OpArgs& a, Costs* c) {
  const TensorShape* q = tensorAt(a, 0, 2);
  const TensorShape* k = tensorAt(a, 1, 2);
  const TensorShape* v = tensorAt(a, 2, 2);
  const TensorShape* qkvW = tensorAt(a, 5);
  const TensorShape* qkvB = tensorAt(a, 6);
  const TensorShape* projW = tensorAt(a, 7);
  if (!q || !k || !v || !qkvW || !qkvB || !projW) return false;
  if (q->dim > 3 || k->dim != q->dim || v->dim != q->dim) return false;
  if (!isType(a, 3, Type::kInt) || !isType(a, 4, Type::kInt) || a.args[4].intValue <= 0) {
    return false;
  }
  const int64_t e = fromEnd(*q, 1);
  if (a.args[3].intValue != e || fromEnd(*k, 1) != e || fromEnd(*v, 1) != e ||
      fromEnd(*v, 2) != fromEnd(*k, 2)) {
    return false;
  }
  const double B = q->dim == 3 ? q->sizes[0] : 1;
  const double L = fromEnd(*q, 2), S = fromEnd(*k, 2), E = static_cast<double>(e);
  const double h = static_cast<double>(a.args[4].intValue);
  const double qkv = 2 * B * E * E * (L + 2 * S) + B * E * (L + 2 * S);
  const double attention = 4 * B * L * S * E + 5 * B * h * L * S;
  const double proj = 2 * B * L * E * E + B * L * E;
  const double inputs = bytesOf(*q) + bytesOf(*k) + bytesOf(*v);
  const double weights = bytesOf(*qkvW) + bytesOf(*qkvB) + bytesOf(*projW) + E * q->elementSize;
  const double out = B * L * E * q->elementSize;
  c->fw.flops += qkv + attention + proj;
  c->fw.bytes += inputs + weights + out;
  if (q->floating) {
    c->bw.flops += 2 * (qkv + attention + proj);
    c->bw.bytes += 2 * (inputs + weights) + out;  // inputs, weights, dOut read; their grads written
  }
  return true;
}

// ---- Dispatch ----------------------------------------------------------------------------------

enum class F : uint8_t {
  kMm,
  kBmm,
  kAddmm,
  kBaddbmm,
  kMatmul,
  kLinear,
  kEinsum,
  kView,
  kReshape,
  kContiguous,
  kClone,
  kCopyInto,
  kToCopy,
  kTo,
  kCat,
  kSoftmax,
  kSoftmaxHalfToFloat,
  kDropout,
  kNativeDropout,
  kMaskedFill,
  kMaskedFillInPlace,
  kWhere,
  kAdd,
  kAddInPlace,
  kSub,
  kSubInPlace,
  kMul,
  kMulInPlace,
  kDiv,
  kDivInPlace,
  kUnary,
  kUnaryNeg,
  kUnaryGelu,
  kEqual,
  kSdpa,
  kSdpaLegacy,
  kSdpaMath,
  kSdpaFlash,
  kSdpaFlashCpu,
  kSdpaEfficient,
  kSdpaCudnn,
  kNativeMha,
};

struct Entry {
  const char* name;
  F formula;
};

constexpr Entry kOps[] = {
    {"mm", F::kMm},
    {"bmm", F::kBmm},
    {"addmm", F::kAddmm},
    {"addmm_", F::kAddmm},
    {"baddbmm", F::kBaddbmm},
    {"baddbmm_", F::kBaddbmm},
    {"matmul", F::kMatmul},
    {"linear", F::kLinear},
    {"einsum", F::kEinsum},
    // views: metadata only
    {"t", F::kView},
    {"t_", F::kView},
    {"transpose", F::kView},
    {"transpose_", F::kView},
    {"view", F::kView},
    {"view_as", F::kView},
    {"_reshape_alias", F::kView},
    {"_unsafe_view", F::kView},
    {"permute", F::kView},
    {"unsqueeze", F::kView},
    {"unsqueeze_", F::kView},
    {"squeeze", F::kView},
    {"squeeze_", F::kView},
    {"expand", F::kView},
    {"expand_as", F::kView},
    {"select", F::kView},
    {"slice", F::kView},
    {"narrow", F::kView},
    {"split", F::kView},
    {"split_with_sizes", F::kView},
    {"unsafe_split", F::kView},
    {"chunk", F::kView},
    {"unsafe_chunk", F::kView},
    {"tensor_split", F::kView},
    {"unbind", F::kView},
    {"as_strided", F::kView},
    {"alias", F::kView},
    {"detach", F::kView},
    {"detach_", F::kView},
    {"unflatten", F::kView},
    {"movedim", F::kView},
    {"swapaxes", F::kView},
    {"lift_fresh", F::kView},
    // copies
    {"reshape", F::kReshape},
    {"flatten", F::kReshape},
    {"contiguous", F::kContiguous},
    {"clone", F::kClone},
    {"copy_", F::kCopyInto},
    {"_to_copy", F::kToCopy},
    {"to", F::kTo},
    {"cat", F::kCat},
    {"stack", F::kCat},
    {"softmax", F::kSoftmax},
    {"log_softmax", F::kSoftmax},
    {"_safe_softmax", F::kSoftmax},
    {"_softmax", F::kSoftmaxHalfToFloat},
    {"_log_softmax", F::kSoftmaxHalfToFloat},
    {"dropout", F::kDropout},
    {"dropout_", F::kDropout},
    {"feature_dropout", F::kDropout},
    {"feature_dropout_", F::kDropout},
    {"native_dropout", F::kNativeDropout},
    {"masked_fill", F::kMaskedFill},
    {"masked_fill_", F::kMaskedFillInPlace},
    {"where", F::kWhere},
    {"add", F::kAdd},
    {"add_", F::kAddInPlace},
    {"sub", F::kSub},
    {"sub_", F::kSubInPlace},
    {"mul", F::kMul},
    {"mul_", F::kMulInPlace},
    {"div", F::kDiv},
    {"div_", F::kDivInPlace},
    {"neg", F::kUnaryNeg},
    {"neg_", F::kUnaryNeg},
    {"exp", F::kUnary},
    {"exp_", F::kUnary},
    {"sqrt", F::kUnary},
    {"sqrt_", F::kUnary},
    {"rsqrt", F::kUnary},
    {"rsqrt_", F::kUnary},
    {"tanh", F::kUnary},
    {"tanh_", F::kUnary},
    {"relu", F::kUnary},
    {"relu_", F::kUnary},
    {"sigmoid", F::kUnary},
    {"sigmoid_", F::kUnary},
    {"gelu", F::kUnaryGelu},
    {"gelu_", F::kUnaryGelu},
    {"equal", F::kEqual},
    {"scaled_dot_product_attention", F::kSdpa},
    {"_scaled_dot_product_attention", F::kSdpaLegacy},
    {"_scaled_dot_product_attention_forward", F::kSdpaLegacy},
    {"_scaled_dot_product_attention_math", F::kSdpaMath},
    {"_scaled_dot_product_flash_attention", F::kSdpaFlash},
    {"_scaled_dot_product_flash_attention_for_cpu", F::kSdpaFlashCpu},
    {"_scaled_dot_product_efficient_attention", F::kSdpaEfficient},
    {"_scaled_dot_product_cudnn_attention", F::kSdpaCudnn},
    {"_native_multi_head_attention", F::kNativeMha},
};

// A linear scan that compares one character before calling strcmp: ~100 entries, run once per
// op and shape change (the shape cache answers the rest).
const Entry* lookup(const char* name) {
  for (const Entry& e : kOps) {
    if (e.name[0] == name[0] && std::strcmp(e.name, name) == 0) return &e;
  }
  return nullptr;
}

bool evaluate(F f, const OpArgs& a, Costs* c) {
  switch (f) {
    case F::kMm:
      return mmFamily(a, false, false, c);
    case F::kBmm:
      return mmFamily(a, true, false, c);
    case F::kAddmm:
      return mmFamily(a, false, true, c);
    case F::kBaddbmm:
      return mmFamily(a, true, true, c);
    case F::kMatmul:
      return matmul(a, c);
    case F::kLinear:
      return linear(a, c);
    case F::kEinsum:
      return einsum(a, c);
    case F::kView:
      return view(a, c);
    case F::kReshape:
    case F::kContiguous:
      return maybeCopy(a, false, c);
    case F::kClone:
      return maybeCopy(a, true, c);
    case F::kCopyInto:
      return copyInto(a, c);
    case F::kToCopy:
      return toCopy(a, false, c);
    case F::kTo:
      return toCopy(a, true, c);
    case F::kCat:
      return catLike(a, c);
    case F::kSoftmax:
      return softmax(a, false, c);
    case F::kSoftmaxHalfToFloat:
      return softmax(a, true, c);
    case F::kDropout:
      return dropout(a, false, c);
    case F::kNativeDropout:
      return dropout(a, true, c);
    case F::kMaskedFill:
      return maskedFill(a, false, c);
    case F::kMaskedFillInPlace:
      return maskedFill(a, true, c);
    case F::kWhere:
      return where(a, c);
    case F::kAdd:
      return binary(a, Binary::kAdd, false, c);
    case F::kAddInPlace:
      return binary(a, Binary::kAdd, true, c);
    case F::kSub:
      return binary(a, Binary::kSub, false, c);
    case F::kSubInPlace:
      return binary(a, Binary::kSub, true, c);
    case F::kMul:
      return binary(a, Binary::kMul, false, c);
    case F::kMulInPlace:
      return binary(a, Binary::kMul, true, c);
    case F::kDiv:
      return binary(a, Binary::kDiv, false, c);
    case F::kDivInPlace:
      return binary(a, Binary::kDiv, true, c);
    case F::kUnary:
      return unary(a, 1, 2, true, c);
    case F::kUnaryNeg:
      return unary(a, 1, 1, false, c);
    case F::kUnaryGelu:
      return unary(a, 8, 16, true, c);
    case F::kEqual:
      return equal(a, c);
    case F::kSdpa:
      return sdpa(a, Sdpa::kPublic, c);
    case F::kSdpaLegacy:
      return sdpa(a, Sdpa::kLegacy, c);
    case F::kSdpaMath:
      return sdpa(a, Sdpa::kMath, c);
    case F::kSdpaFlash:
      return sdpa(a, Sdpa::kFlash, c);
    case F::kSdpaFlashCpu:
      return sdpa(a, Sdpa::kFlashCpu, c);
    case F::kSdpaEfficient:
      return sdpa(a, Sdpa::kEfficient, c);
    case F::kSdpaCudnn:
      return sdpa(a, Sdpa::kCudnn, c);
    case F::kNativeMha:
      return nativeMha(a, c);
  }
  return false;
}

// Whether the op's first floating tensor (or tensor list) is float32/float64.
bool firstFloatingIsWide(const OpArgs& a) {
  for (int i = 0; i < clampedCount(a.count); ++i) {
    const OpArg& arg = a.args[i];
    if ((arg.type == Type::kTensor || arg.type == Type::kTensorList) && arg.shape.floating) {
      return arg.shape.wide();
    }
  }
  return false;
}

}  // namespace

OpCosts opCosts(const char* opName, const OpArgs& args) {
  OpCosts result;
  if (opName == nullptr || args.opaque) return result;
  if (std::strncmp(opName, "aten::", 6) == 0) opName += 6;
  const Entry* entry = lookup(opName);
  Costs c;
  if (entry == nullptr || !evaluate(entry->formula, args, &c)) return result;
  const bool wide = firstFloatingIsWide(args);
  result.forward = {c.fw.flops, c.fw.bytes, wide ? c.fw.flops : 0, true};
  result.backward = {c.bw.flops, c.bw.bytes, wide ? c.bw.flops : 0, true};
  return result;
}

}  // namespace attnscope
