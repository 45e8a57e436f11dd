// Fused elementwise loops (core/ops/fused_loop.h): every written result
// equals the same ops run one by one through their kernels, bit for bit,
// for full-size, scalar, row- and column-broadcast inputs, flat blocks and
// rows, float32 and float64, serial and parallel sizes; bad loops are
// refused.
#include "core/ops/fused_loop.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "tests/core/ops/op_test_util.h"

namespace gradtape::testing {
namespace {

using Code = FusedLoop::Code;

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.num_bytes() == 0 ||
          std::memcmp(a.raw_data(), b.raw_data(), a.num_bytes()) == 0);
}

Tensor Random(DType dtype, Shape shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-2.0, 2.0);
  std::vector<double> v(NumElements(shape));
  for (double& x : v) x = dist(gen);
  return dtype == DType::kFloat32
             ? Tensor::FromVector<float>(shape,
                                         std::vector<float>(v.begin(), v.end()))
             : Tensor::FromVector<double>(shape, v);
}

// `t` with every 7th element NaN or 0.25 (ties with a 0.25 rate).
Tensor WithNaNsAndTies(const Tensor& t) {
  std::vector<double> v(t.num_elements());
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    v[i] =
        t.dtype() == DType::kFloat32 ? t.data<float>()[i] : t.data<double>()[i];
    if (i % 7 == 3) v[i] = i % 2 == 0 ? std::nan("") : 0.25;
  }
  return t.dtype() == DType::kFloat32
             ? Tensor::FromVector<float>(t.shape(),
                                         std::vector<float>(v.begin(), v.end()))
             : Tensor::FromVector<double>(t.shape(), v);
}

const char* OpName(Code code) {
  static const char* const kNames[] = {
      "AddV2",   "Sub",          "Mul",  "RealDiv",   "Equal", "NotEqual",
      "Greater", "GreaterEqual", "Less", "LessEqual", "Neg",   "Square",
      "Exp",     "Erf",          "Cast", "Softmax",   "Sum",   "Mean"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == Code::kRowMean + 1);
  return kNames[code];
}

class FusedLoopTest : public OpTest {
 protected:
  // Runs `loop` fused and op by op; expects every written result to match.
  void ExpectSameAsOps(const FusedLoop& loop, const std::vector<Tensor>& in) {
    Tensors fused;
    absl::Status s = RunFusedLoop(loop, in, &fused);
    ASSERT_TRUE(s.ok()) << s;
    std::vector<Tensor> values = in;
    for (const FusedLoop::Op& op : loop.ops) {
      std::vector<Tensor> args = {values[op.a]};
      if (!FusedLoop::IsUnary(op.code)) args.push_back(values[op.b]);
      // A loop's kCopy is a Cast of a comparison's bool to the loop dtype,
      // or a BroadcastTo of anything else to the loop's shape.
      const char* name = OpName(op.code);
      AttrMap attrs;
      if (op.code == Code::kCopy && values[op.a].dtype() == DType::kBool) {
        attrs.Set("DstT", in[0].dtype());
      } else if (op.code == Code::kCopy) {
        name = "BroadcastTo";
        const Shape& shape = *loop.shape;
        attrs.Set("shape", std::vector<int64_t>(shape.begin(), shape.end()));
      }
      if (op.code == Code::kRowSum || op.code == Code::kRowMean) {
        // The row's sum for each element: Sum or Mean over the last axis,
        // broadcast back.
        attrs.Set("axis", std::vector<int64_t>{-1});
        attrs.Set("keep_dims", true);
      }
      absl::StatusOr<Tensor> r = Run1(name, args, attrs);
      ASSERT_TRUE(r.ok()) << r.status();
      if (op.code == Code::kRowSum || op.code == Code::kRowMean) {
        const Shape& shape = values[op.a].shape();
        r = Run1("BroadcastTo", {*r},
                 {{"shape", std::vector<int64_t>(shape.begin(), shape.end())}});
        ASSERT_TRUE(r.ok()) << r.status();
      }
      values.push_back(*r);
    }
    ASSERT_EQ(fused.size(), static_cast<size_t>(loop.num_results()));
    for (size_t k = 0; k < loop.outputs.size(); ++k) {
      const Tensor& want = values[loop.num_inputs + loop.outputs[k]];
      EXPECT_TRUE(SameBits(fused[k], want))
          << "output " << k << ": " << fused[k].DebugString() << " vs "
          << want.DebugString();
    }
    // Row sums: the Sum or Mean op over axis -1 of the result.
    for (size_t k = 0; k < loop.row_sums.size(); ++k) {
      const FusedLoop::RowSum& sum = loop.row_sums[k];
      AttrMap attrs;
      attrs.Set("axis", std::vector<int64_t>{-1});
      attrs.Set("keep_dims", sum.keep_dims);
      absl::StatusOr<Tensor> want = Run1(
          sum.mean ? "Mean" : "Sum", {values[loop.num_inputs + sum.op]}, attrs);
      ASSERT_TRUE(want.ok()) << want.status();
      const Tensor& got = fused[loop.outputs.size() + k];
      EXPECT_TRUE(SameBits(got, *want))
          << "row sum " << k << ": " << got.DebugString() << " vs "
          << want->DebugString();
    }
    // Column sums: the Sum op over every axis but the last.
    for (size_t k = 0; k < loop.column_sums.size(); ++k) {
      const FusedLoop::ColumnSum& sum = loop.column_sums[k];
      const Tensor& value = values[loop.num_inputs + sum.op];
      std::vector<int64_t> axes;
      for (int d = 0; d + 1 < value.rank(); ++d) axes.push_back(d);
      AttrMap attrs;
      attrs.Set("axis", axes);
      attrs.Set("keep_dims",
                static_cast<int>(sum.shape.size()) == value.rank());
      absl::StatusOr<Tensor> want = Run1("Sum", {value}, attrs);
      ASSERT_TRUE(want.ok()) << want.status();
      const Tensor& got = fused[loop.outputs.size() + loop.row_sums.size() + k];
      EXPECT_TRUE(SameBits(got, *want))
          << "column sum " << k << ": " << got.DebugString() << " vs "
          << want->DebugString();
    }
  }
};

// x * y + b, then (that - c) / x, Neg, Square, Exp; Erf; the inputs: full x and
// y, a row vector b, a column c, a scalar s.
FusedLoop AllOps() {
  FusedLoop loop;
  loop.num_inputs = 5;                // x, y, b, c, s
  loop.ops = {{Code::kMul, 0, 1},     // 5: x * y
              {Code::kAdd, 5, 2},     // 6: + b
              {Code::kSub, 6, 3},     // 7: - c
              {Code::kDiv, 7, 0},     // 8: / x
              {Code::kNeg, 8, 0},     // 9
              {Code::kSquare, 9, 0},  // 10
              {Code::kMul, 10, 4},    // 11: * s
              {Code::kExp, 11, 0},    // 12
              {Code::kSub, 4, 12},    // 13: s - that
              {Code::kErf, 7, 0}};    // 14: erf(x * y + b - c)
  loop.outputs = {8, 1, 3, 9};        // results 13, 6, 8, 14, out of order
  return loop;
}

TEST_F(FusedLoopTest, RowsWithBroadcastsEqualTheOpsBitForBit) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (Shape shape :
         {Shape{37, 70}, Shape{300, 1000}, Shape{3, 5, 64}, Shape{3, 2500}}) {
      SCOPED_TRACE(ShapeString(shape));
      const int64_t cols = shape.back();
      Shape column = shape;
      column.back() = 1;
      ExpectSameAsOps(AllOps(),
                      {Random(dtype, shape, 1), Random(dtype, shape, 2),
                       Random(dtype, {cols}, 3), Random(dtype, column, 4),
                       Random(dtype, {}, 5)});
    }
  }
}

TEST_F(FusedLoopTest, FlatBlocksEqualTheOpsBitForBit) {
  FusedLoop loop = AllOps();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    // 3 full inputs and 2 one-element ones: blocks of the flat loop, the
    // last one short (300,007 is not a multiple of the block).
    for (Shape shape : {Shape{300007}, Shape{7, 9}, Shape{}}) {
      SCOPED_TRACE(ShapeString(shape));
      ExpectSameAsOps(loop,
                      {Random(dtype, shape, 1), Random(dtype, shape, 2),
                       Random(dtype, shape, 3),
                       Random(dtype, shape.empty() ? Shape{} : Shape{1}, 4),
                       Random(dtype, {}, 5)});
    }
  }
}

// Dropout's mask (x * Cast(u >= rate) * scale) and every other comparison,
// against a row, a column and a scalar, with NaNs and ties among the
// values: each comparison's 0/1 is the Cast of the op's bool.
TEST_F(FusedLoopTest, ComparisonsCastToTheLoopDtypeEqualTheOpsBitForBit) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (Shape shape : {Shape{37, 70}, Shape{300, 1000}, Shape{5000}}) {
      SCOPED_TRACE(ShapeString(shape));
      Shape column = shape;
      column.back() = 1;
      Tensor u = Random(dtype, shape, 1);
      Tensor x = Random(dtype, shape, 2);
      Tensor row = Random(dtype, {shape.back()}, 3);
      Tensor col = Random(dtype, column, 4);
      u = WithNaNsAndTies(u);
      row = WithNaNsAndTies(row);
      FusedLoop loop;
      loop.num_inputs = 6;                      // u, x, row, col, rate, scale
      loop.ops = {{Code::kGreaterEqual, 0, 4},  // 6: u >= rate
                  {Code::kCopy, 6, 0},          // 7: as dtype
                  {Code::kMul, 7, 5},           // 8: * scale
                  {Code::kMul, 1, 8},           // 9: x * that
                  {Code::kGreater, 0, 2},       // 10: u > row
                  {Code::kCopy, 10, 0},         // 11
                  {Code::kLess, 3, 1},          // 12: col < x
                  {Code::kCopy, 12, 0},         // 13
                  {Code::kLessEqual, 1, 0},     // 14: x <= u
                  {Code::kCopy, 14, 0},         // 15
                  {Code::kEqual, 0, 2},         // 16: u == row
                  {Code::kCopy, 16, 0},         // 17
                  {Code::kNotEqual, 4, 0},      // 18: rate != u
                  {Code::kCopy, 18, 0}};        // 19
      loop.outputs = {2, 3, 5, 7, 9, 11, 13};
      const Tensor rate = dtype == DType::kFloat32
                              ? Tensor::Scalar<float>(0.25f)
                              : Tensor::Scalar<double>(0.25);
      ExpectSameAsOps(loop, {u, x, row, col, rate, Random(dtype, {}, 6)});
    }
  }
}

// BroadcastTo as a loop's kCopy: a column, a row and a scalar broadcast to
// the loop's shape, which no input has (the loop's `shape` says it).
TEST_F(FusedLoopTest, BroadcastsToTheLoopsShapeEqualTheOpsBitForBit) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (Shape shape : {Shape{37, 70}, Shape{3, 2500}, Shape{2, 3, 1000}}) {
      SCOPED_TRACE(ShapeString(shape));
      Shape column = shape;
      column.back() = 1;
      FusedLoop loop;
      loop.shape = shape;
      loop.num_inputs = 3;              // column, row, scalar
      loop.ops = {{Code::kCopy, 0, 0},  // 3: the column, broadcast
                  {Code::kMul, 3, 1},   // 4: * the row
                  {Code::kCopy, 2, 0},  // 5: the scalar, broadcast
                  {Code::kSub, 4, 5},   // 6
                  {Code::kCopy, 6, 0}};
      loop.outputs = {0, 2, 3, 4};
      ExpectSameAsOps(
          loop, {Random(dtype, column, 1), Random(dtype, {shape.back()}, 2),
                 Random(dtype, {}, 3)});
    }
  }
}

// Row sums (a layer norm's mean of squares, a softmax gradient's row sum)
// of results written and not written, kept and dropped dims, Sum and Mean:
// the Sum and Mean kernels' bits, over rows of 2 to kMaxRowLength
// elements, a block's worth of rows and more, with a broadcast input and
// with only full-size ones (which would otherwise run flat blocks). One
// row, rows of one element or of none are refused (RefusesBadLoops): the
// kernels fold those otherwise.
TEST_F(FusedLoopTest, RowSumsEqualTheSumAndMeanKernelsBitForBit) {
  FusedLoop loop;
  loop.num_inputs = 2;
  loop.ops = {{Code::kSub, 0, 1},     // 2: x - m
              {Code::kSquare, 2, 0},  // 3
              {Code::kExp, 2, 0}};    // 4
  loop.outputs = {0};
  loop.row_sums = {{1, true, true}, {2, false, false}, {0, false, true}};
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (Shape shape : {Shape{37, 70}, Shape{3, 5, 64}, Shape{5, 1024},
                        Shape{2, 2}, Shape{300, 7}}) {
      SCOPED_TRACE(ShapeString(shape));
      Shape column = shape;
      column.back() = 1;
      ExpectSameAsOps(loop,
                      {Random(dtype, shape, 1), Random(dtype, column, 2)});
      ExpectSameAsOps(loop, {Random(dtype, shape, 1), Random(dtype, shape, 2)});
    }
  }
}

// The attention's forward: softmax(x * s + mask) between elementwise ops,
// then dropout, and a row sum of the softmax: the loop runs whole rows per
// block, the softmax over each block's rows as the Softmax kernel does.
// Rows of 1, 64 (16 a block) and 1000 (one a block), one row, several.
TEST_F(FusedLoopTest, SoftmaxRowsEqualTheSoftmaxKernelBitForBit) {
  FusedLoop loop;
  loop.num_inputs = 5;                      // x, s, mask (a row), u, rate
  loop.ops = {{Code::kMul, 0, 1},           // 5: x * s
              {Code::kAdd, 5, 2},           // 6: + mask
              {Code::kSoftmax, 6, 6},       // 7
              {Code::kGreaterEqual, 3, 4},  // 8
              {Code::kCopy, 8, 8},          // 9
              {Code::kMul, 7, 9},           // 10: dropout
              {Code::kSoftmax, 10, 10}};    // 11: a second one
  loop.outputs = {2, 5, 6};
  loop.row_sums = {{2, false, true}};
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (Shape shape : {Shape{37, 64}, Shape{3, 4, 64, 64}, Shape{5, 1000},
                        Shape{1, 64}, Shape{9, 1}}) {
      SCOPED_TRACE(ShapeString(shape));
      FusedLoop l = loop;
      if (shape[0] == 1 || shape.back() == 1) l.row_sums.clear();
      ExpectSameAsOps(l, {Random(dtype, shape, 1), Random(dtype, {}, 2),
                          Random(dtype, {shape.back()}, 3),
                          Random(dtype, shape, 4), Random(dtype, {}, 5)});
    }
  }
}

// Bias and gain gradients: column sums of a loop's results, with a row sum
// beside them, equal the Sum kernel's over every axis but the last: its
// blocks of rows (8 to 512 rows a block; K = 100 does not divide a block
// of loop rows into them), kept dims or not, a result also written or not.
TEST_F(FusedLoopTest, ColumnSumsEqualTheSumKernelBitForBit) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (Shape shape : {Shape{2048, 64}, Shape{32, 64, 64}, Shape{300, 192},
                        Shape{1000, 100}, Shape{40, 1024}}) {
      SCOPED_TRACE(ShapeString(shape));
      FusedLoop loop;
      loop.num_inputs = 3;  // dy, x, a row
      loop.ops = {{Code::kMul, 0, 1}, {Code::kAdd, 3, 2}};
      loop.outputs = {1};
      Shape kept(shape.size(), 1);
      kept.back() = shape.back();
      loop.column_sums = {{0, kept}, {1, Shape{shape.back()}}};
      loop.row_sums = {{1, false, true}};
      ExpectSameAsOps(loop, {Random(dtype, shape, 1), Random(dtype, shape, 2),
                             Random(dtype, {shape.back()}, 3)});
    }
  }
}

// The softmax's gradient in one loop: t = dy * keep, s = rowsum(t * y)
// spread over the row (kRowSum), (t - s) * y * c; and a row mean spread
// (kRowMean) read by a later op; each row summed as the Sum and Mean
// kernels sum it.
TEST_F(FusedLoopTest, SpreadRowSumsEqualTheSumAndMeanKernelsBitForBit) {
  FusedLoop loop;
  loop.num_inputs = 4;                 // dy, keep, y, c
  loop.ops = {{Code::kMul, 0, 1},      // 4: t
              {Code::kMul, 4, 2},      // 5: t * y
              {Code::kRowSum, 5, 5},   // 6
              {Code::kSub, 4, 6},      // 7
              {Code::kMul, 7, 2},      // 8
              {Code::kMul, 8, 3},      // 9
              {Code::kRowMean, 9, 9},  // 10
              {Code::kSub, 9, 10}};    // 11
  loop.outputs = {5, 7};
  loop.row_sums = {{1, true, true}};
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (Shape shape : {Shape{3, 4, 64, 64}, Shape{37, 70}, Shape{5, 1000}}) {
      SCOPED_TRACE(ShapeString(shape));
      ExpectSameAsOps(loop, {Random(dtype, shape, 1), Random(dtype, shape, 2),
                             Random(dtype, shape, 3), Random(dtype, {}, 4)});
    }
  }
}

TEST_F(FusedLoopTest, EmptyShapesGiveEmptyOutputs) {
  FusedLoop loop;
  loop.num_inputs = 2;
  loop.ops = {{Code::kAdd, 0, 1}, {Code::kExp, 2, 0}};
  loop.outputs = {1};
  ExpectSameAsOps(loop, {Random(DType::kFloat32, {0, 4}, 1),
                         Random(DType::kFloat32, {4}, 2)});
}

TEST_F(FusedLoopTest, RefusesBadLoops) {
  const Tensor a = Random(DType::kFloat32, {3, 4}, 1);
  const Tensor v = Random(DType::kFloat32, {4}, 2);
  const Tensor d = Random(DType::kFloat64, {3, 4}, 3);
  const Tensor w = Random(DType::kFloat32, {5}, 4);
  const Tensor ints = Tensor::FromVector<int32_t>({4}, {1, 2, 3, 4});
  struct Case {
    FusedLoop loop;
    std::vector<Tensor> in;
    const char* message;
  };
  const Case cases[] = {
      {{2, {{Code::kAdd, 0, 1}}, {0}}, {a, d}, "one dtype"},
      {{1, {{Code::kNeg, 0, 0}}, {0}}, {ints}, "float32 or float64"},
      {{2, {{Code::kAdd, 0, 1}}, {0}}, {a, w}, "does not broadcast"},
      {{1, {{Code::kCopy, 0, 0}}, {0}, Shape{4, 3}},
       {a},
       "does not broadcast to the loop's shape"},
      {{1, {{Code::kNeg, 0, 0}}, {0}, Shape{3, 4}}, {v}, "op 0 does not give"},
      {{2, {{Code::kNeg, 1, 0}}, {0}}, {a, v}, "op 0 does not give"},
      {{1, {{Code::kAdd, 0, 1}}, {0}}, {a}, "op 0 does not give"},
      {{1, {{Code::kAdd, 0, 0}}, {1}}, {a}, "bad outputs"},
      {{1, {{Code::kAdd, 0, 0}}, {0, 0}}, {a}, "bad outputs"},
      {{2, {{Code::kAdd, 0, 0}}, {0}}, {a}, "takes 2 inputs, got 1"},
      {{1, {{Code::kNeg, 0, 0}}, {0}, std::nullopt, {{1, false, true}}},
       {a},
       "bad row sums"},
      {{1, {{Code::kNeg, 0, 0}}, {0}, std::nullopt, {{0, false, true}}},
       {Random(DType::kFloat32, {2, 1025}, 5)},
       "2 or more rows of 2 to 1024 elements"},
      {{1, {{Code::kNeg, 0, 0}}, {0}, std::nullopt, {{0, false, true}}},
       {Random(DType::kFloat32, {1, 64}, 5)},
       "2 or more rows"},
      {{1, {{Code::kNeg, 0, 0}}, {0}, std::nullopt, {{0, false, true}}},
       {Random(DType::kFloat32, {64, 1}, 5)},
       "2 or more rows"},
      {{1, {{Code::kSoftmax, 0, 0}}, {0}},
       {Random(DType::kFloat32, {2, 1025}, 5)},
       "whole rows of at most 1024"},
      {{1, {{Code::kNeg, 0, 0}}, {0}, std::nullopt, {}, {{1, Shape{4}}}},
       {a},
       "bad column sums"},
      {{1, {{Code::kNeg, 0, 0}}, {0}, std::nullopt, {}, {{0, Shape{4}}}},
       {a},
       "two or more blocks"},
      {{1, {{Code::kNeg, 0, 0}}, {0}, std::nullopt, {}, {{0, Shape{3}}}},
       {Random(DType::kFloat32, {2048, 4}, 5)},
       "column sums [3]"},
      {{2, {{Code::kSoftmax, 1, 1}}, {0}}, {a, v}, "one full-size operand"},
      {{1, {{Code::kSoftmax, 0, 0}}, {0}},
       {Tensor::Scalar<float>(1)},
       "whole rows"},
      {{1, {{Code::kRowSum, 0, 0}}, {0}},
       {Random(DType::kFloat32, {1, 64}, 5)},
       "whole rows"},
  };
  for (const Case& c : cases) {
    Tensors out;
    absl::Status s = RunFusedLoop(c.loop, c.in, &out);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_TRUE(absl::StrContains(s.message(), c.message)) << s;
  }
}

}  // namespace
}  // namespace gradtape::testing
