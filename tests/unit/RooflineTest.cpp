// Unit tests of the roofline formulas (opCosts, OpArgs::signature, TensorShape::numel) and of
// rooflinePoint. Every expected count is worked out by hand in the comment or expression beside
// it, from small concrete shapes; docs/ROOFLINE.md has the formulas these check.

#include "attnscope/core/Roofline.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace attnscope {
namespace {

using Type = OpArg::Type;

// ---- Building arguments ------------------------------------------------------------------------

OpArg T(std::vector<int64_t> sizes, uint8_t es = 4, bool floating = true, bool contiguous = true) {
  OpArg a;
  a.type = Type::kTensor;
  a.shape.dim = static_cast<uint8_t>(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) a.shape.sizes[i] = sizes[i];
  a.shape.elementSize = es;
  a.shape.floating = floating;
  a.shape.contiguous = contiguous;
  return a;
}
OpArg Half(std::vector<int64_t> sizes) { return T(std::move(sizes), 2); }
OpArg Mask(std::vector<int64_t> sizes) { return T(std::move(sizes), 1, false); }  // torch.bool
OpArg NonContiguous(std::vector<int64_t> sizes) { return T(std::move(sizes), 4, true, false); }
OpArg List(int64_t total, uint8_t es = 4) {
  OpArg a = T({total}, es);
  a.type = Type::kTensorList;
  return a;
}
OpArg I(int64_t v) {
  OpArg a;
  a.type = Type::kInt;
  a.intValue = v;
  return a;
}
OpArg D(double v) {
  OpArg a;
  a.type = Type::kDouble;
  a.doubleValue = v;
  return a;
}
OpArg B(bool v) {
  OpArg a;
  a.type = Type::kBool;
  a.intValue = v ? 1 : 0;
  return a;
}
OpArg None() {
  OpArg a;
  a.type = Type::kNone;
  return a;
}
OpArg Other() { return OpArg{}; }

OpArgs A(std::initializer_list<OpArg> list) {
  OpArgs args;
  for (const OpArg& a : list) args.args[args.count++] = a;
  return args;
}

// c10::ScalarType codes, as torch passes a dtype argument.
constexpr int64_t kHalfCode = 5, kFloatCode = 6, kBFloat16Code = 15;

void expectCosts(const OpCosts& c, double fwFlops, double fwBytes, double bwFlops, double bwBytes) {
  EXPECT_TRUE(c.forward.modelled);
  EXPECT_TRUE(c.backward.modelled);
  EXPECT_DOUBLE_EQ(c.forward.flops, fwFlops);
  EXPECT_DOUBLE_EQ(c.forward.bytes, fwBytes);
  EXPECT_DOUBLE_EQ(c.backward.flops, bwFlops);
  EXPECT_DOUBLE_EQ(c.backward.bytes, bwBytes);
}
#define EXPECT_COSTS(op, args, ff, fb, bf, bb)      \
  do {                                              \
    SCOPED_TRACE(op);                               \
    expectCosts(opCosts(op, args), ff, fb, bf, bb); \
  } while (0)

void expectUnmodelled(const char* op, const OpArgs& args) {
  SCOPED_TRACE(op);
  const OpCosts c = opCosts(op, args);
  EXPECT_FALSE(c.forward.modelled);
  EXPECT_FALSE(c.backward.modelled);
  EXPECT_EQ(c.forward.flops, 0);
  EXPECT_EQ(c.forward.bytes, 0);
  EXPECT_EQ(c.backward.flops, 0);
  EXPECT_EQ(c.backward.bytes, 0);
}

// ---- TensorShape::numel ------------------------------------------------------------------------

TEST(TensorShapeTest, NumelMultipliesTheSizesUpToDim) {
  EXPECT_EQ(T({2, 3, 4}).shape.numel(), 24);
  EXPECT_EQ(T({}).shape.numel(), 1);         // 0-dim: one element
  EXPECT_EQ(T({2, 0, 4}).shape.numel(), 0);  // empty
  TensorShape s = T({5}).shape;
  s.sizes[1] = 7;  // beyond dim: not counted
  EXPECT_EQ(s.numel(), 5);
}

TEST(TensorShapeTest, NumelSaturatesInsteadOfOverflowing) {
  const int64_t big = int64_t{1} << 40;
  EXPECT_EQ(T({big, big}).shape.numel(), std::numeric_limits<int64_t>::max());
  TensorShape bad = T({2, 3}).shape;
  bad.dim = 200;  // out of range: clamped to kMaxDims, sizes beyond are 0 here
  EXPECT_EQ(bad.numel(), 0);
}

// ---- Matrix multiplies -------------------------------------------------------------------------

TEST(RooflineFormulas, MmForwardAndBackward) {
  // A[2,3]·B[3,4]: 2·2·3·4 = 48 flops; 4·(6 + 12 + 8) = 104 bytes.
  // Backward dA = dC·Bᵀ and dB = Aᵀ·dC: 2·48 = 96 flops; each reads dC (8) and the other operand
  // and writes its gradient: 4·(2·8 + 2·6 + 2·12) = 208 bytes.
  EXPECT_COSTS("aten::mm", A({T({2, 3}), T({3, 4})}), 48, 104, 96, 208);
  const OpCosts c = opCosts("aten::mm", A({T({2, 3}), T({3, 4})}));
  EXPECT_DOUBLE_EQ(c.forward.wideFlops, 48);  // float32
  EXPECT_DOUBLE_EQ(c.backward.wideFlops, 96);
}

TEST(RooflineFormulas, HalfPrecisionHalvesBytesAndIsNotWide) {
  // Same counts with 2-byte elements: 2·26 = 52 bytes forward, 2·52 = 104 backward.
  EXPECT_COSTS("aten::mm", A({Half({2, 3}), Half({3, 4})}), 48, 52, 96, 104);
  const OpCosts c = opCosts("aten::mm", A({Half({2, 3}), Half({3, 4})}));
  EXPECT_EQ(c.forward.wideFlops, 0);
  EXPECT_EQ(c.backward.wideFlops, 0);
  // float64 is wide too.
  EXPECT_DOUBLE_EQ(opCosts("mm", A({T({2, 3}, 8), T({3, 4}, 8)})).forward.wideFlops, 48);
}

TEST(RooflineFormulas, BmmIsMmTimesTheBatch) {
  // [2,2,3]·[2,3,4]: 2·(2·2·3·4) = 96 flops; 4·(12 + 24 + 16) = 208 bytes; backward 192, 416.
  EXPECT_COSTS("aten::bmm", A({T({2, 2, 3}), T({2, 3, 4})}), 96, 208, 192, 416);
  expectUnmodelled("aten::bmm", A({T({2, 2, 3}), T({3, 3, 4})}));  // batch 2 vs 3
  expectUnmodelled("aten::bmm", A({T({2, 3}), T({3, 4})}));        // 2-D
}

TEST(RooflineFormulas, AddmmAddsTheBiasAndItsReduction) {
  // addmm(C[4], A[2,3], B[3,4], beta, alpha): 48 + 2·4 (the add) = 56 flops;
  // 4·(4 + 6 + 12 + 8) = 120 bytes. Backward: mm's 96 flops and 208 bytes, plus dC = the sum of
  // dOut over the 2 rows: 8 flops, dOut read (4·8 = 32) and dC written (4·4 = 16).
  EXPECT_COSTS("aten::addmm", A({T({4}), T({2, 3}), T({3, 4}), I(1), I(1)}), 56, 120, 104,
               208 + 32 + 16);
  // C[2,4] needs no reduction: its gradient passes through (written: 4·8 = 32 bytes, 0 flops).
  // Forward bytes 4·(8 + 6 + 12 + 8) = 136.
  EXPECT_COSTS("aten::addmm", A({T({2, 4}), T({2, 3}), T({3, 4}), I(1), I(1)}), 56, 136, 96,
               208 + 32);
  EXPECT_COSTS("addmm_", A({T({2, 4}), T({2, 3}), T({3, 4}), I(1), I(1)}), 56, 136, 96, 240);
  expectUnmodelled("aten::addmm", A({T({3}), T({2, 3}), T({3, 4})}));  // C does not broadcast
}

TEST(RooflineFormulas, Baddbmm) {
  // baddbmm(C[2,2,4], A[2,2,3], B[2,3,4]): 96 + 16 = 112 flops; 4·(16 + 12 + 24 + 16) = 272 bytes.
  // Backward 192 flops, 416 + 64 (dC written) = 480 bytes.
  EXPECT_COSTS("aten::baddbmm", A({T({2, 2, 4}), T({2, 2, 3}), T({2, 3, 4}), I(1), I(1)}), 112, 272,
               192, 480);
}

TEST(RooflineFormulas, MatmulFollowsTorchSemantics) {
  // 1-D·1-D, a dot of 3: 2·3 = 6 flops; 4·(3 + 3 + 1) = 28 bytes; backward twice both.
  EXPECT_COSTS("aten::matmul", A({T({3}), T({3})}), 6, 28, 12, 56);
  // 2-D·2-D is mm.
  EXPECT_COSTS("aten::matmul", A({T({2, 3}), T({3, 4})}), 48, 104, 96, 208);
  // 2-D·1-D: [2,3]·[3] → [2]: 2·2·3 = 12 flops; 4·(6 + 3 + 2) = 44 bytes.
  EXPECT_COSTS("aten::matmul", A({T({2, 3}), T({3})}), 12, 44, 24, 88);
  // 1-D·2-D: [3]·[3,4] → [4]: 24 flops; 4·(3 + 12 + 4) = 76 bytes.
  EXPECT_COSTS("aten::matmul", A({T({3}), T({3, 4})}), 24, 76, 48, 152);
  // N-D·2-D, batch folded: [5,2,3]·[3,4] → [5,2,4]: 2·5·2·3·4 = 240; 4·(30 + 12 + 40) = 328.
  EXPECT_COSTS("aten::matmul", A({T({5, 2, 3}), T({3, 4})}), 240, 328, 480, 656);
  // 2-D·N-D: [2,3]·[5,3,4] → [5,2,4]: 240 flops; A read once: 4·(6 + 60 + 40) = 424.
  EXPECT_COSTS("aten::matmul", A({T({2, 3}), T({5, 3, 4})}), 240, 424, 480, 848);
  // N-D·N-D with broadcast batch: [2,1,2,3]·[1,5,3,4] → [2,5,2,4], batch 10:
  // 2·10·2·3·4 = 480 flops; 4·(12 + 60 + 80) = 608 bytes.
  EXPECT_COSTS("aten::matmul", A({T({2, 1, 2, 3}), T({1, 5, 3, 4})}), 480, 608, 960, 1216);
  expectUnmodelled("aten::matmul", A({T({2, 2, 3}), T({3, 3, 4})}));  // batch 2 vs 3
  expectUnmodelled("aten::matmul", A({T({2, 3}), T({4, 5})}));        // k 3 vs 4
  expectUnmodelled("aten::matmul", A({T({}), T({3})}));               // 0-dim
}

TEST(RooflineFormulas, LinearWithAndWithoutBias) {
  // linear(X[2,5,3], W[4,3], b[4]): N = 10, k = 3, m = 4. 2·10·3·4 = 240 + 10·4 (bias) = 280
  // flops; 4·(30 + 12 + 4 + 40) = 344 bytes. Backward: dX and dW 2·240 = 480 flops, bytes
  // 4·(2·40 + 2·12 + 2·30) = 656; dbias sums 40 values into 4: 40 flops, 4·40 + 4·4 = 176 bytes.
  EXPECT_COSTS("aten::linear", A({T({2, 5, 3}), T({4, 3}), T({4})}), 280, 344, 520, 656 + 176);
  // bias None, or not captured at all: 240 flops, 4·(30 + 12 + 40) = 328 bytes.
  EXPECT_COSTS("aten::linear", A({T({2, 5, 3}), T({4, 3}), None()}), 240, 328, 480, 656);
  EXPECT_COSTS("aten::linear", A({T({2, 5, 3}), T({4, 3})}), 240, 328, 480, 656);
  expectUnmodelled("aten::linear", A({T({2, 5, 3}), T({4, 3}), I(1)}));    // bias an int
  expectUnmodelled("aten::linear", A({T({2, 5, 3}), T({4, 3}), T({5})}));  // bias of 5, m = 4
  expectUnmodelled("aten::linear", A({T({2, 5, 3}), T({4, 2})}));          // k 3 vs 2
}

// ---- Views and copies --------------------------------------------------------------------------

TEST(RooflineFormulas, ViewsMoveNothing) {
  for (const char* op :
       {"t", "transpose", "view", "_reshape_alias", "permute", "unsqueeze", "squeeze", "expand",
        "select", "slice", "split", "chunk", "unbind", "as_strided", "alias", "detach", "unflatten",
        "aten::transpose", "aten::view"}) {
    EXPECT_COSTS(op, A({NonContiguous({4, 6}), I(0), I(1)}), 0, 0, 0, 0);
    expectUnmodelled(op, A({I(4), I(0)}));  // a scalar where the tensor belongs
  }
}

TEST(RooflineFormulas, ReshapeAndContiguousCopyOnlyNonContiguousInputs) {
  // X[4,6] float32, 24 elements: a copy reads and writes them, 2·24·4 = 192 bytes; its backward
  // the same bytes.
  for (const char* op : {"aten::reshape", "aten::flatten", "aten::contiguous"}) {
    EXPECT_COSTS(op, A({T({4, 6}), Other()}), 0, 0, 0, 0);
    EXPECT_COSTS(op, A({NonContiguous({4, 6}), Other()}), 0, 192, 0, 192);
  }
  EXPECT_COSTS("aten::clone", A({T({4, 6}), None()}), 0, 192, 0, 192);  // always a copy
}

TEST(RooflineFormulas, CopiesCountBothElementSizes) {
  // copy_(dst[4,6] float16, src[4,6] float32): 24·(2 + 4) = 144 bytes.
  EXPECT_COSTS("aten::copy_", A({Half({4, 6}), T({4, 6}), B(false)}), 0, 144, 0, 144);
  // A broadcast source is read once: 24·2 + 6·4 = 72.
  EXPECT_COSTS("aten::copy_", A({Half({4, 6}), T({6}), B(false)}), 0, 72, 0, 72);
  expectUnmodelled("aten::copy_", A({Half({4, 6}), T({5})}));
  // _to_copy(X[4,6] float32, dtype=Half): 24·(4 + 2) = 144; dtype unknown: 24·(4 + 4) = 192.
  EXPECT_COSTS("aten::_to_copy", A({T({4, 6}), I(kHalfCode)}), 0, 144, 0, 144);
  EXPECT_COSTS("aten::_to_copy", A({T({4, 6}), None()}), 0, 192, 0, 192);
  // to(self, dtype), to(self, device, dtype), to(self, other).
  EXPECT_COSTS("aten::to", A({T({4, 6}), I(kBFloat16Code), B(false), B(false)}), 0, 144, 0, 144);
  EXPECT_COSTS("aten::to", A({T({4, 6}), Other(), I(kHalfCode), B(false)}), 0, 144, 0, 144);
  EXPECT_COSTS("aten::to", A({T({4, 6}), Half({1}), B(false)}), 0, 144, 0, 144);
  // cat/stack of 24 float32 elements in all: 2·24·4 = 192.
  EXPECT_COSTS("aten::cat", A({List(24), I(0)}), 0, 192, 0, 192);
  EXPECT_COSTS("aten::stack", A({List(24, 2), I(0)}), 0, 96, 0, 96);
  expectUnmodelled("aten::cat", A({T({24}), I(0)}));  // a tensor, not a list
}

// ---- Softmax, dropout, masks -------------------------------------------------------------------

TEST(RooflineFormulas, Softmax) {
  // X[2,3,4]: 24 elements. Forward 5·24 = 120 flops, 2·24·4 = 192 bytes; backward 4·24 = 96
  // flops, 3·24·4 = 288 bytes.
  EXPECT_COSTS("aten::softmax", A({T({2, 3, 4}), I(-1), None()}), 120, 192, 96, 288);
  EXPECT_COSTS("aten::_softmax", A({T({2, 3, 4}), I(-1), B(false)}), 120, 192, 96, 288);
  EXPECT_COSTS("aten::log_softmax", A({T({2, 3, 4}), I(-1), None()}), 120, 192, 96, 288);
  // half_to_float on float16: 24·(2 + 4) = 144 forward; backward reads y and dy in float32 and
  // writes dx in float16: 24·(4 + 4 + 2) = 240. softmax(dtype=float) the same.
  EXPECT_COSTS("aten::_softmax", A({Half({2, 3, 4}), I(-1), B(true)}), 120, 144, 96, 240);
  EXPECT_COSTS("aten::softmax", A({Half({2, 3, 4}), I(-1), I(kFloatCode)}), 120, 144, 96, 240);
  expectUnmodelled("aten::softmax", A({T({2, 3, 4})}));  // no dim
}

TEST(RooflineFormulas, DropoutTrainAndEval) {
  // X[4,6] float32, 24 elements, training: 2·24 = 48 flops; 24·(2·4 + 1) = 216 bytes (the 1-byte
  // mask written). Backward 24 flops, the same 216 bytes (dy and mask read, dx written).
  EXPECT_COSTS("aten::dropout", A({T({4, 6}), D(0.1), B(true)}), 48, 216, 24, 216);
  EXPECT_COSTS("aten::native_dropout", A({T({4, 6}), D(0.1), B(true)}), 48, 216, 24, 216);
  EXPECT_COSTS("aten::feature_dropout", A({T({4, 6}), D(0.1), B(true)}), 48, 216, 24, 216);
  EXPECT_COSTS("aten::native_dropout", A({T({4, 6}), D(0.1), None()}), 48, 216, 24, 216);
  // Eval: the input is returned.
  EXPECT_COSTS("aten::dropout", A({T({4, 6}), D(0.1), B(false)}), 0, 0, 0, 0);
  EXPECT_COSTS("aten::native_dropout", A({T({4, 6}), D(0.1), B(false)}), 0, 0, 0, 0);
  expectUnmodelled("aten::dropout", A({T({4, 6}), D(0.1)}));        // train missing
  expectUnmodelled("aten::dropout", A({T({4, 6}), D(0.1), I(1)}));  // train not a bool
}

TEST(RooflineFormulas, MaskedFillCountsTheMaskAtItsOwnSize) {
  // masked_fill(X[2,4,4] float32, mask[4,4] bool, -inf): 32 selects; bytes 4·32 (X) + 16 (mask)
  // + 4·32 (out) = 272. Backward: 32 selects, dOut 128 + mask 16 + dX 128 = 272.
  EXPECT_COSTS("aten::masked_fill", A({T({2, 4, 4}), Mask({4, 4}), D(-1e9)}), 32, 272, 32, 272);
  EXPECT_COSTS("aten::masked_fill_", A({T({2, 4, 4}), Mask({4, 4}), D(-1e9)}), 32, 272, 32, 272);
  // In place, the mask may not grow self.
  expectUnmodelled("aten::masked_fill_", A({T({4, 4}), Mask({2, 4, 4}), D(0)}));
  expectUnmodelled("aten::masked_fill", A({T({4, 4}), D(0), D(0)}));  // no mask tensor
}

TEST(RooflineFormulas, WhereBroadcastsItsThreeOperands) {
  // where(cond[4,4] bool, a[2,4,4] float32, 0.0): out [2,4,4] = 32: 32 flops;
  // 16 + 128 + 128 (out) = 272 bytes. Backward da: 32 flops, dOut 128 + cond 16 + da 128 = 272.
  EXPECT_COSTS("aten::where", A({Mask({4, 4}), T({2, 4, 4}), D(0)}), 32, 272, 32, 272);
  // where(cond[4,1], a[1,4], b[4,4]): out [4,4] = 16: 16 flops; 4 + 16 + 64 + 64 = 148 bytes.
  // Backward: da is summed over 4 rows: 16 + 16 flops, dOut 64 + cond 4 + da 16 = 84 bytes;
  // db: 16 flops, 64 + 4 + 64 = 132 bytes.
  EXPECT_COSTS("aten::where", A({Mask({4, 1}), T({1, 4}), T({4, 4})}), 16, 148, 48, 84 + 132);
  expectUnmodelled("aten::where", A({Mask({4, 1}), T({3}), T({4, 4})}));  // 3 vs 4
}

// ---- Elementwise -------------------------------------------------------------------------------

TEST(RooflineFormulas, AddAndSub) {
  // X[2,3] + Y[3]: 6 flops; 4·(6 + 3 + 6) = 60 bytes. Backward: dX passes through (written, 24
  // bytes); dY sums 6 values into 3: 6 flops, dOut 24 + dY 12 = 36 bytes.
  EXPECT_COSTS("aten::add", A({T({2, 3}), T({3}), I(1)}), 6, 60, 6, 24 + 36);
  EXPECT_COSTS("aten::sub", A({T({2, 3}), T({3}), I(1)}), 6, 60, 6, 24 + 36);
  // A scalar other: 6 flops, 4·(6 + 6) = 48 bytes; backward writes dX only.
  EXPECT_COSTS("aten::add", A({T({2, 3}), D(1.5), I(1)}), 6, 48, 0, 24);
  // In place, same shapes: 4·(6 + 6 + 6) = 72; backward both pass through: 48.
  EXPECT_COSTS("aten::add_", A({T({2, 3}), T({2, 3}), I(1)}), 6, 72, 0, 48);
  EXPECT_COSTS("sub_", A({T({2, 3}), T({2, 3}), I(1)}), 6, 72, 0, 48);
  expectUnmodelled("aten::add_", A({T({3}), T({2, 3}), I(1)}));  // in place cannot grow self
  expectUnmodelled("aten::add", A({T({2, 3}), T({4}), I(1)}));   // 3 vs 4
  expectUnmodelled("aten::add", A({T({2, 3}), None()}));
}

TEST(RooflineFormulas, MulAndDiv) {
  // X[2,3]·Y[2,3]: 6 flops, 72 bytes. Backward dX = dOut·Y: 6 flops, 24 + 24 + 24 = 72 bytes;
  // dY = dOut·X likewise: 12 flops, 144 bytes (2× the forward flops).
  EXPECT_COSTS("aten::mul", A({T({2, 3}), T({2, 3})}), 6, 72, 12, 144);
  EXPECT_COSTS("aten::mul_", A({T({2, 3}), T({2, 3})}), 6, 72, 12, 144);
  // Div: dY = -dOut·X/Y² reads X and Y: 24 + 24 + 24 + 24 = 96 bytes.
  EXPECT_COSTS("aten::div", A({T({2, 3}), T({2, 3})}), 6, 72, 12, 72 + 96);
  EXPECT_COSTS("aten::div_", A({T({2, 3}), T({2, 3})}), 6, 72, 12, 72 + 96);
  // By a scalar: only dX = dOut·0.5: 6 flops, 24 + 24 = 48 bytes.
  EXPECT_COSTS("aten::mul", A({T({2, 3}), D(0.5)}), 6, 48, 6, 48);
  // An int64 tensor times 0.5 gives float32: 8·6 + 4·6 = 72 bytes, no gradient, nothing wide.
  EXPECT_COSTS("aten::mul", A({T({2, 3}, 8, false), D(0.5)}), 6, 72, 0, 0);
  EXPECT_EQ(opCosts("aten::mul", A({T({2, 3}, 8, false), D(0.5)})).forward.wideFlops, 0);
  // float16 X and a 0-dim float32 Y: the result stays float16: 12 + 4 + 12 = 28 bytes.
  EXPECT_DOUBLE_EQ(opCosts("aten::mul", A({Half({2, 3}), T({})})).forward.bytes, 28);
}

TEST(RooflineFormulas, Unary) {
  // X[2,3] float32: 1 flop per element, 2·6·4 = 48 bytes; backward 2 per element, 3·6·4 = 72.
  for (const char* op : {"aten::exp", "aten::sqrt", "aten::rsqrt", "aten::tanh", "aten::relu",
                         "aten::sigmoid", "aten::relu_", "aten::exp_"}) {
    EXPECT_COSTS(op, A({T({2, 3})}), 6, 48, 12, 72);
  }
  // gelu: 8 flops per element forward, 16 backward.
  EXPECT_COSTS("aten::gelu", A({T({2, 3}), Other()}), 48, 48, 96, 72);
  // neg's gradient is -dy: 1 flop, reads dy and writes dx only (2·6·4 = 48).
  EXPECT_COSTS("aten::neg", A({T({2, 3})}), 6, 48, 6, 48);
  expectUnmodelled("aten::relu", A({D(1.0)}));
}

TEST(RooflineFormulas, Equal) {
  // equal(X[2,3], Y[2,3]): 6 compares, 48 bytes; not differentiable.
  EXPECT_COSTS("aten::equal", A({T({2, 3}), T({2, 3})}), 6, 48, 0, 0);
  EXPECT_COSTS("aten::equal", A({T({2, 3}), T({3, 2})}), 0, 0, 0, 0);  // sizes differ: false
  expectUnmodelled("aten::equal", A({T({2, 3})}));
}

// ---- Attention ---------------------------------------------------------------------------------

// q[2,3,4,8], k[2,3,6,8], v[2,3,6,5] float32: B·H = 6, L = 4, S = 6, E = 8, Ev = 5.
// Scores 6·4·6 = 144. Matmuls 2·144·8 + 2·144·5 = 2304 + 1440 = 3744; softmax 5·144 = 720:
// 4464 flops. Bytes: q 4·192 = 768, k 4·288 = 1152, v 4·180 = 720, out [2,3,4,5] 4·120 = 480:
// 3120. Backward: 2.5·3744 + 4·144 = 9936 flops; q, k, v read and their grads written
// 2·2640 = 5280, out and dout read 960: 6240 bytes.
constexpr double kSdpaFwFlops = 4464, kSdpaFwBytes = 3120, kSdpaBwFlops = 9936, kSdpaBwBytes = 6240;
// Causal: 72 scores: 1872 + 360 = 2232 forward, 2.5·1872 + 4·72 = 4968 backward.
constexpr double kCausalFwFlops = 2232, kCausalBwFlops = 4968;
// mask [4,6] float32: 96 bytes read forward and backward.
constexpr double kMaskBytes = 96;

OpArg Q() { return T({2, 3, 4, 8}); }
OpArg K() { return T({2, 3, 6, 8}); }
OpArg V() { return T({2, 3, 6, 5}); }

TEST(RooflineFormulas, ScaledDotProductAttention) {
  // (query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
  EXPECT_COSTS("aten::scaled_dot_product_attention",
               A({Q(), K(), V(), None(), D(0), B(false), None(), B(false)}), kSdpaFwFlops,
               kSdpaFwBytes, kSdpaBwFlops, kSdpaBwBytes);
  EXPECT_COSTS("aten::scaled_dot_product_attention",
               A({Q(), K(), V(), None(), D(0), B(true), None(), B(false)}), kCausalFwFlops,
               kSdpaFwBytes, kCausalBwFlops, kSdpaBwBytes);
  EXPECT_COSTS("aten::scaled_dot_product_attention", A({Q(), K(), V(), T({4, 6}), D(0), B(false)}),
               kSdpaFwFlops, kSdpaFwBytes + kMaskBytes, kSdpaBwFlops, kSdpaBwBytes + kMaskBytes);
  // A true bool elsewhere (enable_gqa at 7) is not is_causal.
  EXPECT_COSTS("aten::scaled_dot_product_attention",
               A({Q(), K(), V(), None(), D(0), B(false), None(), B(true)}), kSdpaFwFlops,
               kSdpaFwBytes, kSdpaBwFlops, kSdpaBwBytes);
}

TEST(RooflineFormulas, AttentionVariantsReadIsCausalAtTheirOwnPositions) {
  // _scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, ...)
  EXPECT_COSTS("aten::_scaled_dot_product_flash_attention",
               A({Q(), K(), V(), D(0), B(true), B(false), None()}), kCausalFwFlops, kSdpaFwBytes,
               kCausalBwFlops, kSdpaBwBytes);
  EXPECT_COSTS("aten::_scaled_dot_product_flash_attention",
               A({Q(), K(), V(), D(0), B(false), B(true), None()}), kSdpaFwFlops, kSdpaFwBytes,
               kSdpaBwFlops, kSdpaBwBytes);
  // _scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p, is_causal,
  // attn_mask, scale)
  EXPECT_COSTS("aten::_scaled_dot_product_flash_attention_for_cpu",
               A({Q(), K(), V(), D(0), B(true), T({4, 6}), None()}), kCausalFwFlops,
               kSdpaFwBytes + kMaskBytes, kCausalBwFlops, kSdpaBwBytes + kMaskBytes);
  // _scaled_dot_product_efficient_attention(query, key, value, attn_bias, compute_log_sumexp,
  // dropout_p, is_causal, scale)
  EXPECT_COSTS("aten::_scaled_dot_product_efficient_attention",
               A({Q(), K(), V(), T({4, 6}), B(true), D(0), B(true), None()}), kCausalFwFlops,
               kSdpaFwBytes + kMaskBytes, kCausalBwFlops, kSdpaBwBytes + kMaskBytes);
  EXPECT_COSTS("aten::_scaled_dot_product_efficient_attention",
               A({Q(), K(), V(), None(), B(true), D(0), B(false), None()}), kSdpaFwFlops,
               kSdpaFwBytes, kSdpaBwFlops, kSdpaBwBytes);
  // 2.0's (query, key, value, compute_log_sumexp, is_causal).
  EXPECT_COSTS("aten::_scaled_dot_product_efficient_attention",
               A({Q(), K(), V(), B(false), B(true)}), kCausalFwFlops, kSdpaFwBytes, kCausalBwFlops,
               kSdpaBwBytes);
  // _scaled_dot_product_cudnn_attention, 2.5+: (query, key, value, attn_bias,
  // compute_log_sumexp, dropout_p, is_causal, return_debug_mask, scale); 2.3: (query, key,
  // value, dropout_p, is_causal, return_debug_mask, scale).
  EXPECT_COSTS("aten::_scaled_dot_product_cudnn_attention",
               A({Q(), K(), V(), None(), B(true), D(0), B(true), B(false)}), kCausalFwFlops,
               kSdpaFwBytes, kCausalBwFlops, kSdpaBwBytes);
  EXPECT_COSTS("aten::_scaled_dot_product_cudnn_attention",
               A({Q(), K(), V(), D(0), B(true), B(false), None()}), kCausalFwFlops, kSdpaFwBytes,
               kCausalBwFlops, kSdpaBwBytes);
  // _scaled_dot_product_attention_math, 2.x: (query, key, value, attn_mask, dropout_p,
  // is_causal, dropout_mask, scale, ...)
  EXPECT_COSTS("aten::_scaled_dot_product_attention_math",
               A({Q(), K(), V(), None(), D(0), B(true), None(), None()}), kCausalFwFlops,
               kSdpaFwBytes, kCausalBwFlops, kSdpaBwBytes);
  // LibTorch 1.13's _scaled_dot_product_attention(_math)(query, key, value, attn_mask,
  // dropout_p, need_attn_weights, is_causal): need_attn_weights also writes the weights
  // [2,3,4,6] = 144 float32 = 576 bytes.
  EXPECT_COSTS("aten::_scaled_dot_product_attention_math",
               A({Q(), K(), V(), None(), D(0), B(false), B(true)}), kCausalFwFlops, kSdpaFwBytes,
               kCausalBwFlops, kSdpaBwBytes);
  EXPECT_COSTS("aten::_scaled_dot_product_attention",
               A({Q(), K(), V(), None(), D(0), B(true), B(false)}), kSdpaFwFlops,
               kSdpaFwBytes + 576, kSdpaBwFlops, kSdpaBwBytes);
}

TEST(RooflineFormulas, AttentionWithFewerLeadingDims) {
  // q[3,4,8], k[3,6,8], v[3,6,5]: 3 heads instead of 6, so half of everything above.
  EXPECT_COSTS("aten::scaled_dot_product_attention",
               A({T({3, 4, 8}), T({3, 6, 8}), T({3, 6, 5}), None(), D(0), B(false)}),
               kSdpaFwFlops / 2, kSdpaFwBytes / 2, kSdpaBwFlops / 2, kSdpaBwBytes / 2);
  // q[4,8]: one head, a sixth.
  EXPECT_COSTS("aten::scaled_dot_product_attention",
               A({T({4, 8}), T({6, 8}), T({6, 5}), None(), D(0), B(false)}), kSdpaFwFlops / 6,
               kSdpaFwBytes / 6, kSdpaBwFlops / 6, kSdpaBwBytes / 6);
  expectUnmodelled("aten::scaled_dot_product_attention",
                   A({T({2, 3, 4, 8}), T({2, 3, 6, 7}), V()}));  // E 8 vs 7
  expectUnmodelled("aten::scaled_dot_product_attention",
                   A({T({2, 3, 4, 8}), K(), T({2, 3, 5, 5})}));  // S 6 vs 5
  expectUnmodelled("aten::scaled_dot_product_attention", A({T({8}), T({8}), T({8})}));
}

TEST(RooflineFormulas, NativeMultiHeadAttention) {
  // B = 2, L = S = 3, E = 4, 2 heads; q, k, v [2,3,4] float32 (24 elements, 96 bytes each).
  // Projections q, k, v: 2·2·4·4·(3 + 2·3) = 576 + biases 2·4·9 = 72 → 648.
  // Attention: 4·2·3·3·4 = 288 + softmax 5·2·2·3·3 = 180 → 468.
  // Output projection: 2·2·3·4·4 = 192 + bias 2·3·4 = 24 → 216. Total 1332 flops.
  // Bytes: inputs 288; weights qkv_weight [12,4] 192 + qkv_bias [12] 48 + proj_weight [4,4] 64 +
  // proj_bias (not captured, [4] assumed) 16 = 320; output 96 → 704.
  // Backward: 2·1332 = 2664 flops; 2·(288 + 320) + 96 = 1312 bytes.
  const OpArgs args =
      A({T({2, 3, 4}), T({2, 3, 4}), T({2, 3, 4}), I(4), I(2), T({12, 4}), T({12}), T({4, 4})});
  EXPECT_COSTS("aten::_native_multi_head_attention", args, 1332, 704, 2664, 1312);
  expectUnmodelled("aten::_native_multi_head_attention",
                   A({T({2, 3, 4}), T({2, 3, 4}), T({2, 3, 4}), I(8), I(2), T({12, 4}), T({12}),
                      T({4, 4})}));  // embed_dim 8 vs 4
  expectUnmodelled("aten::_native_multi_head_attention",
                   A({T({2, 3, 4}), T({2, 3, 4}), T({2, 3, 4}), I(4), I(0), T({12, 4}), T({12}),
                      T({4, 4})}));  // no heads
}

// ---- Names and malformed arguments -------------------------------------------------------------

TEST(RooflineFormulas, AtenPrefixIsOptional) {
  const OpArgs args = A({T({2, 3}), T({3, 4})});
  EXPECT_COSTS("mm", args, 48, 104, 96, 208);
  EXPECT_COSTS("matmul", args, 48, 104, 96, 208);
  expectUnmodelled("aten::aten::mm", args);
  expectUnmodelled("aten:mm", args);
  expectUnmodelled("MM", args);
}

// einsum(equation, [operands]): the equation in OpArgs::text, the operands' shapes in OpArgs::list.
OpArgs Einsum(const std::string& equation, std::initializer_list<OpArg> operands) {
  OpArg text;
  text.type = Type::kString;
  int64_t total = 0;
  OpArgs args;
  for (const OpArg& o : operands) {
    if (args.listCount < OpArgs::kMaxListShapes) args.list[args.listCount] = o.shape;
    ++args.listCount;
    total += o.shape.numel();
  }
  args.args[0] = text;
  args.args[1] = List(total, operands.begin()->shape.elementSize);
  args.count = 2;
  for (size_t i = 0; i < equation.size(); ++i) args.text[i] = equation[i];
  args.textLength = static_cast<uint8_t>(equation.size());
  return args;
}

TEST(RooflineFormulas, EinsumScoresAreABatchedMatmul) {
  // bhqd,bhkd->bhqk on q [2,4,16,8], k [2,4,32,8]: total = 2·4·16·32·8 = 32768 index points,
  // out = 2·4·16·32 = 4096; d is summed: 2 × 32768 = 65536 flops (bmm of [8,16,8]·[8,8,32]).
  // bytes (1024 + 2048 + 4096) × 4 = 28672. Backward: dq and dk each 65536 flops, each reading
  // dOut (4096) and the other operand and writing its gradient: (4096 + 2048 + 1024) × 4 twice.
  const OpArgs args = Einsum("bhqd,bhkd->bhqk", {T({2, 4, 16, 8}), T({2, 4, 32, 8})});
  EXPECT_COSTS("aten::einsum", args, 65536, 28672, 131072, 57344);
  const OpCosts bmm = opCosts("bmm", A({T({8, 16, 8}), T({8, 8, 32})}));
  const OpCosts e = opCosts("einsum", args);
  EXPECT_DOUBLE_EQ(e.forward.flops, bmm.forward.flops);
  EXPECT_DOUBLE_EQ(e.forward.bytes, bmm.forward.bytes);
  EXPECT_DOUBLE_EQ(e.backward.flops, bmm.backward.flops);
  EXPECT_DOUBLE_EQ(e.backward.bytes, bmm.backward.bytes);
  EXPECT_DOUBLE_EQ(e.forward.wideFlops, 65536);
  // Spaces are ignored; half precision halves the bytes and is not wide.
  const OpCosts half =
      opCosts("einsum", Einsum(" bhqd, bhkd -> bhqk", {Half({2, 4, 16, 8}), Half({2, 4, 32, 8})}));
  EXPECT_DOUBLE_EQ(half.forward.flops, 65536);
  EXPECT_DOUBLE_EQ(half.forward.bytes, 14336);
  EXPECT_DOUBLE_EQ(half.forward.wideFlops, 0);
}

TEST(RooflineFormulas, EinsumImplicitOutputAndEllipsis) {
  // ij,jk (implicit output ik) on [3,4], [4,5]: total 60, out 15; 120 flops, (12 + 20 + 15) × 4.
  // Backward: each (15 + other + own) × 4: (15 + 20 + 12) × 4 + (15 + 12 + 20) × 4 = 376.
  EXPECT_COSTS("einsum", Einsum("ij,jk", {T({3, 4}), T({4, 5})}), 120, 188, 240, 376);
  // ...qd,...kd->...qk on [2,4,16,8] and [4,32,8]: "..." broadcasts [2,4] with [4] to 8;
  // total 8·16·32·8 = 32768, out 8·16·32 = 4096: 65536 flops, (1024 + 1024 + 4096) × 4 = 24576.
  // Backward: (4096 + 1024 + 1024) × 4 twice = 49152.
  EXPECT_COSTS("einsum", Einsum("...qd,...kd->...qk", {T({2, 4, 16, 8}), T({4, 32, 8})}), 65536,
               24576, 131072, 49152);
  // A size-1 dimension broadcasts: ij,jk on [3,4], [1,5] is j = 4 for the first, 1 for the second.
  EXPECT_COSTS("einsum", Einsum("ij,jk->ik", {T({3, 4}), T({1, 5})}), 120, (12 + 5 + 15) * 4, 240,
               2 * (15 + 5 + 12) * 4);
}

TEST(RooflineFormulas, EinsumWithoutASumAndWithOneOperand) {
  // ij,ij->ij on [3,4]: nothing summed, 12 multiplies; (12 + 12 + 12) × 4 bytes. Backward: each
  // gradient 12 multiplies (its index space is the whole space), (12 + 12 + 12) × 4 each.
  EXPECT_COSTS("einsum", Einsum("ij,ij->ij", {T({3, 4}), T({3, 4})}), 12, 144, 24, 288);
  // i,j->ij (outer product) on [3], [4]: 12 multiplies, (3 + 4 + 12) × 4; backward each gradient
  // sums over the other's index: 2 × 12 flops each, (12 + 4 + 3) × 4 + (12 + 3 + 4) × 4.
  EXPECT_COSTS("einsum", Einsum("i,j->ij", {T({3}), T({4})}), 12, 76, 48, 152);
  // ij->i on [3,4]: 12 − 3 = 9 adds, (12 + 3) × 4; backward broadcasts dOut: (3 + 12) × 4, no
  // flops.
  EXPECT_COSTS("einsum", Einsum("ij->i", {T({3, 4})}), 9, 60, 0, 60);
  // ij->ji and ii->i are views: modelled, nothing moved.
  EXPECT_COSTS("einsum", Einsum("ij->ji", {T({3, 4})}), 0, 0, 0, 0);
  EXPECT_COSTS("einsum", Einsum("ii->i", {T({3, 3})}), 0, 0, 0, 0);
  // ii (implicit: no letter used once) is the trace: its index space is the diagonal, 3 − 1 = 2
  // adds; the operand counts whole (9 × 4) with the scalar output (4).
  EXPECT_COSTS("einsum", Einsum("ii", {T({3, 3})}), 2, 40, 0, 40);
}

TEST(RooflineFormulas, EinsumItCannotCountIsUnmodelled) {
  expectUnmodelled("einsum", A({Other(), List(24)}));     // the equation not captured
  expectUnmodelled("einsum", A({T({2, 3}), T({3, 4})}));  // not einsum's arguments
  expectUnmodelled("einsum",
                   Einsum("ij,jk,kl->il", {T({2, 3}), T({3, 4}), T({4, 5})}));  // path-dependent
  expectUnmodelled("einsum", Einsum("ij,jk->ik", {T({3, 4}), T({5, 6})}));      // j is 4 and 5
  expectUnmodelled("einsum", Einsum("ijk,jk->i", {T({3, 4}), T({4, 5})}));      // 3 letters, 2 dims
  expectUnmodelled("einsum", Einsum("ij,jk->iz", {T({3, 4}), T({4, 5})}));      // z is no input's
  expectUnmodelled("einsum", Einsum("ij,jk->...ik", {T({3, 4}), T({4, 5})}));   // no input "..."
  expectUnmodelled("einsum", Einsum("ij,jk->ii", {T({3, 4}), T({4, 5})}));  // output letter twice
  expectUnmodelled("einsum", Einsum("i1,1k->ik", {T({3, 4}), T({4, 5})}));  // not a letter
  expectUnmodelled("einsum", Einsum("ij->i", {T({3, 4}), T({3, 4})}));  // one term, two operands
  OpArgs truncated = Einsum("ij,jk->ik", {T({3, 4}), T({4, 5})});
  truncated.listCount = 3;  // a list longer than the shapes kept
  expectUnmodelled("einsum", truncated);
}

TEST(RooflineFormulas, UnknownOpsAreUnmodelled) {
  expectUnmodelled("aten::frobnicate", A({T({2, 3})}));
  expectUnmodelled("", A({T({2, 3})}));
  expectUnmodelled(nullptr, A({T({2, 3})}));
}

// Every op name the formulas know, for the robustness sweep.
const char* const kAllOps[] = {"mm",
                               "einsum",
                               "bmm",
                               "addmm",
                               "addmm_",
                               "baddbmm",
                               "baddbmm_",
                               "matmul",
                               "linear",
                               "t",
                               "t_",
                               "transpose",
                               "transpose_",
                               "view",
                               "view_as",
                               "_reshape_alias",
                               "_unsafe_view",
                               "permute",
                               "unsqueeze",
                               "unsqueeze_",
                               "squeeze",
                               "squeeze_",
                               "expand",
                               "expand_as",
                               "select",
                               "slice",
                               "narrow",
                               "split",
                               "split_with_sizes",
                               "unsafe_split",
                               "chunk",
                               "unsafe_chunk",
                               "tensor_split",
                               "unbind",
                               "as_strided",
                               "alias",
                               "detach",
                               "detach_",
                               "unflatten",
                               "movedim",
                               "swapaxes",
                               "lift_fresh",
                               "reshape",
                               "flatten",
                               "contiguous",
                               "clone",
                               "copy_",
                               "_to_copy",
                               "to",
                               "cat",
                               "stack",
                               "softmax",
                               "log_softmax",
                               "_safe_softmax",
                               "_softmax",
                               "_log_softmax",
                               "dropout",
                               "dropout_",
                               "feature_dropout",
                               "feature_dropout_",
                               "native_dropout",
                               "masked_fill",
                               "masked_fill_",
                               "where",
                               "add",
                               "add_",
                               "sub",
                               "sub_",
                               "mul",
                               "mul_",
                               "div",
                               "div_",
                               "neg",
                               "neg_",
                               "exp",
                               "exp_",
                               "sqrt",
                               "sqrt_",
                               "rsqrt",
                               "rsqrt_",
                               "tanh",
                               "tanh_",
                               "relu",
                               "relu_",
                               "sigmoid",
                               "sigmoid_",
                               "gelu",
                               "gelu_",
                               "equal",
                               "scaled_dot_product_attention",
                               "_scaled_dot_product_attention",
                               "_scaled_dot_product_attention_forward",
                               "_scaled_dot_product_attention_math",
                               "_scaled_dot_product_flash_attention",
                               "_scaled_dot_product_flash_attention_for_cpu",
                               "_scaled_dot_product_efficient_attention",
                               "_scaled_dot_product_cudnn_attention",
                               "_native_multi_head_attention"};

TEST(RooflineFormulas, NoArgumentsMeansUnmodelled) {
  for (const char* op : kAllOps) expectUnmodelled(op, OpArgs{});
}

TEST(RooflineFormulas, ScalarsWhereTensorsBelongAreUnmodelled) {
  const OpArgs scalars = A({I(2), D(0.5), B(true), I(3), I(4), I(5), I(6), I(7)});
  const OpArgs others = A({Other(), Other(), Other()});
  for (const char* op : kAllOps) {
    expectUnmodelled(op, scalars);
    expectUnmodelled(op, others);
  }
}

TEST(RooflineFormulas, MalformedTensorsNeverCrash) {
  // 0-dim operands where matrices belong.
  expectUnmodelled("aten::mm", A({T({}), T({})}));
  expectUnmodelled("aten::bmm", A({T({}), T({})}));
  expectUnmodelled("aten::linear", A({T({}), T({})}));
  expectUnmodelled("aten::scaled_dot_product_attention", A({T({}), T({}), T({})}));
  expectUnmodelled("aten::_native_multi_head_attention",
                   A({T({}), T({}), T({}), I(4), I(2), T({}), T({}), T({})}));
  // Missing operands.
  expectUnmodelled("aten::mm", A({T({2, 3})}));
  expectUnmodelled("aten::addmm", A({T({4}), T({2, 3})}));
  expectUnmodelled("aten::scaled_dot_product_attention", A({Q(), K()}));
  // Mismatched sizes.
  expectUnmodelled("aten::mm", A({T({2, 3}), T({4, 4})}));
  // A dimension count beyond kMaxDims, a negative size, a count beyond kMaxArgs or below 0.
  OpArgs tooDeep = A({T({2, 3}), T({3, 4})});
  tooDeep.args[0].shape.dim = 200;
  expectUnmodelled("aten::mm", tooDeep);
  expectUnmodelled("aten::relu", A({T({2, -3})}));
  expectUnmodelled("aten::mm", A({T({2, -3}), T({-3, 4})}));
  OpArgs negative = A({T({2, 3}), T({3, 4})});
  negative.count = -1;
  expectUnmodelled("aten::mm", negative);
  OpArgs tooMany = A({T({2, 3}), T({3, 4})});
  tooMany.count = 1000;  // read no further than kMaxArgs: the defaults there are kOther
  EXPECT_COSTS("aten::mm", tooMany, 48, 104, 96, 208);
  for (const char* op : kAllOps) {
    SCOPED_TRACE(op);
    (void)opCosts(op, tooDeep);
    (void)opCosts(op, tooMany);
  }
}

TEST(RooflineFormulas, EmptyTensorsAreModelledWithZeroCost) {
  // [0,3]·[3,4]: nothing to compute; only B (12 elements) is read.
  EXPECT_COSTS("aten::mm", A({T({0, 3}), T({3, 4})}), 0, 48, 0, 96);
}

// ---- OpArgs::signature -------------------------------------------------------------------------

TEST(OpArgsSignature, EqualArgumentsHashEqual) {
  const OpArgs a = A({T({2, 3}), T({3, 4}), I(1), D(0.5), B(true), None()});
  OpArgs b = a;
  EXPECT_EQ(a.signature(), b.signature());
  // Bytes the formulas never read do not count: sizes beyond dim, args beyond count, the
  // value fields of a tensor, the shape of an int.
  b.args[0].shape.sizes[4] = 99;
  b.args[7] = T({5, 5});
  b.args[0].intValue = 42;
  b.args[2].shape = T({9}).shape;
  EXPECT_EQ(a.signature(), b.signature());
}

TEST(OpArgsSignature, ChangesWithWhatTheFormulasRead) {
  const OpArgs base = A({T({2, 3}), T({3, 4}), I(1), D(0.5), B(true)});
  const uint64_t h = base.signature();
  auto differs = [&](const char* what, auto change) {
    OpArgs c = base;
    change(c);
    EXPECT_NE(c.signature(), h) << what;
  };
  differs("a size", [](OpArgs& c) { c.args[0].shape.sizes[1] = 4; });
  differs("sizes swapped",
          [](OpArgs& c) { std::swap(c.args[0].shape.sizes[0], c.args[0].shape.sizes[1]); });
  differs("a dim", [](OpArgs& c) { c.args[1].shape.dim = 3; });
  differs("the dtype size", [](OpArgs& c) { c.args[0].shape.elementSize = 2; });
  differs("floating", [](OpArgs& c) { c.args[0].shape.floating = false; });
  differs("contiguity", [](OpArgs& c) { c.args[1].shape.contiguous = false; });
  differs("an int value", [](OpArgs& c) { c.args[2].intValue = 2; });
  differs("a double value", [](OpArgs& c) { c.args[3].doubleValue = 0.25; });
  differs("a bool value", [](OpArgs& c) { c.args[4].intValue = 0; });
  differs("a type", [](OpArgs& c) { c.args[2].type = Type::kBool; });
  differs("the count", [](OpArgs& c) { c.count = 4; });
  differs("operands swapped", [](OpArgs& c) { std::swap(c.args[0], c.args[1]); });
}

TEST(OpArgsSignature, EinsumEquationAndOperandShapesCount) {
  const OpArgs base = Einsum("bhqd,bhkd->bhqk", {T({2, 4, 16, 8}), T({2, 4, 32, 8})});
  const uint64_t h = base.signature();
  OpArgs same = Einsum("bhqd,bhkd->bhqk", {T({2, 4, 16, 8}), T({2, 4, 32, 8})});
  same.text[20] = 'x';  // beyond the text's length: not read
  EXPECT_EQ(same.signature(), h);
  EXPECT_NE(Einsum("bhqd,bhkd->bhkq", {T({2, 4, 16, 8}), T({2, 4, 32, 8})}).signature(), h);
  // The same total elements in another split between the operands:
  EXPECT_NE(Einsum("bhqd,bhkd->bhqk", {T({2, 4, 32, 8}), T({2, 4, 16, 8})}).signature(), h);
  // A nine-character equation differs from its eight-character prefix (the zero-padded word).
  EXPECT_NE(Einsum("ij,jk->ik", {T({3, 4}), T({4, 5})}).signature(),
            Einsum("ij,jk->i", {T({3, 4}), T({4, 5})}).signature());
}

// ---- rooflinePoint -----------------------------------------------------------------------------

Ceilings testCeilings() {
  Ceilings c;
  c.peakFlopsPerSecond = 1e11;  // ridge at 10 flop/byte
  c.peakBytesPerSecond = 1e10;
  c.source = "config";
  return c;
}

TEST(RooflinePoint, PureCopyIsMemoryBound) {
  // 1e9 bytes in 1 s against 1e10 B/s: a tenth of the bandwidth.
  const RooflinePoint p = rooflinePoint(0, 1e9, 1.0, testCeilings());
  EXPECT_EQ(p.bound, Bound::kMemory);
  EXPECT_STREQ(boundName(p.bound), "memory");
  EXPECT_DOUBLE_EQ(p.fraction, 0.1);
  EXPECT_DOUBLE_EQ(p.bytesPerSecond, 1e9);
  EXPECT_DOUBLE_EQ(p.intensity, 0);
}

TEST(RooflinePoint, LargeMatmulIsComputeBound) {
  // mm 4096³ float32: 2·4096³ flops, 4·3·4096² bytes, intensity 4096/6 ≈ 683 flop/byte ≫ 10.
  const OpCosts c = opCosts("aten::mm", A({T({4096, 4096}), T({4096, 4096})}));
  const double n = 4096;
  ASSERT_DOUBLE_EQ(c.forward.flops, 2 * n * n * n);
  ASSERT_DOUBLE_EQ(c.forward.bytes, 4 * 3 * n * n);
  const double seconds = c.forward.flops / 5e10;  // achieved 5e10 flop/s
  const RooflinePoint p = rooflinePoint(c.forward.flops, c.forward.bytes, seconds, testCeilings());
  EXPECT_EQ(p.bound, Bound::kCompute);
  EXPECT_STREQ(boundName(p.bound), "compute");
  EXPECT_DOUBLE_EQ(p.intensity, n / 6);
  EXPECT_DOUBLE_EQ(p.attainableFlopsPerSecond, 1e11);
  EXPECT_DOUBLE_EQ(p.flopsPerSecond, 5e10);
  EXPECT_DOUBLE_EQ(p.fraction, 0.5);
}

TEST(RooflinePoint, ExactlyAtTheRidgeIsCompute) {
  // 1e10 flops over 1e9 bytes = 10 flop/byte = the ridge; in 0.5 s: 2e10 of 1e11 flop/s.
  const RooflinePoint p = rooflinePoint(1e10, 1e9, 0.5, testCeilings());
  EXPECT_EQ(p.bound, Bound::kCompute);
  EXPECT_DOUBLE_EQ(p.attainableFlopsPerSecond, 1e11);
  EXPECT_DOUBLE_EQ(p.fraction, 0.2);
  // Just below the ridge: memory bound, the roof is intensity × bandwidth = 9.99e10.
  const RooflinePoint below = rooflinePoint(0.999e10, 1e9, 0.5, testCeilings());
  EXPECT_EQ(below.bound, Bound::kMemory);
  EXPECT_DOUBLE_EQ(below.attainableFlopsPerSecond, 9.99e10);
}

TEST(RooflinePoint, UnknownCeilingsStillFillTheAchievedRates) {
  const RooflinePoint p = rooflinePoint(2e9, 1e9, 2.0, Ceilings{});
  EXPECT_EQ(p.bound, Bound::kUnknown);
  EXPECT_STREQ(boundName(p.bound), "unknown");
  EXPECT_EQ(p.fraction, 0);
  EXPECT_DOUBLE_EQ(p.flopsPerSecond, 1e9);
  EXPECT_DOUBLE_EQ(p.bytesPerSecond, 5e8);
  EXPECT_DOUBLE_EQ(p.intensity, 2);
}

TEST(RooflinePoint, NoTimeIsUnknown) {
  for (double seconds : {0.0, -1.0}) {
    const RooflinePoint p = rooflinePoint(1e10, 1e9, seconds, testCeilings());
    EXPECT_EQ(p.bound, Bound::kUnknown) << seconds;
    EXPECT_EQ(p.fraction, 0) << seconds;
    EXPECT_EQ(p.flopsPerSecond, 0) << seconds;
  }
}

}  // namespace
}  // namespace attnscope
