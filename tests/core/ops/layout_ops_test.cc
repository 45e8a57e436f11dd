// Forward values, TensorFlow's conventions and bad inputs of the layout ops
// (core/ops/layout_ops.cc); the generic checks (Jacobian, elision, forward
// mode) run on their samples. Expected values are worked out by hand from
// numpy's / TensorFlow's definitions (np.expand_dims, np.squeeze, np.tile,
// np.full, np.arange, np.flip, np.pad with mode constant / reflect /
// symmetric) or quoted from TensorFlow's op documentation.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/autodiff/gradient.h"
#include "core/autodiff/op_executor.h"
#include "core/ops/ops.h"
#include "core/session/session.h"
#include "gtest/gtest.h"
#include "tests/core/ops/op_samples.h"
#include "tests/core/ops/op_test_util.h"

namespace gradtape {
namespace {

using testing::L;
using testing::Values;
using V = std::vector<double>;

// 0, 1, 2, ... of `shape`, float64.
Tensor Iota(Shape shape, double first = 0) {
  std::vector<double> v(NumElements(shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = first + static_cast<double>(i);
  return Tensor::FromVector<double>(shape, v);
}
Tensor I32(std::vector<int32_t> v) {
  return Tensor::FromVector<int32_t>({static_cast<int64_t>(v.size())}, v);
}
Tensor I64(std::vector<int64_t> v) {
  return Tensor::FromVector<int64_t>({static_cast<int64_t>(v.size())}, v);
}
Tensor Pads(std::vector<int64_t> v) {
  return Tensor::FromVector<int64_t>({static_cast<int64_t>(v.size()) / 2, 2},
                                     v);
}
Tensor Pads32(std::vector<int32_t> v) {
  return Tensor::FromVector<int32_t>({static_cast<int64_t>(v.size()) / 2, 2},
                                     v);
}
template <typename T>
Tensor S(T v) {
  return Tensor::Scalar<T>(v);
}
AttrMap Mode(const char* mode) { return {{"mode", std::string(mode)}}; }

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();

class LayoutOpsTest : public testing::OpTest {
 protected:
  void Expect(absl::string_view op, std::vector<Tensor> in, AttrMap attrs,
              Shape shape, V values) {
    Tensor y = MustRun(op, std::move(in), std::move(attrs));
    ASSERT_TRUE(y.valid());
    EXPECT_EQ(y.shape(), shape) << op;
    EXPECT_EQ(Values(y), values) << op;
  }
  // The gradient of op(inputs) for output gradient dy w.r.t. input `source`
  // (an invalid Tensor for None).
  Tensor Grad(absl::string_view op, std::vector<Tensor> in, AttrMap attrs,
              Tensor dy, int source) {
    for (Tensor& t : in) t = ctx_.Adopt(t);
    EXPECT_TRUE(ctx_.tapes().Push(1, false, false).ok());
    Tape* tape = *ctx_.tapes().Find(1);
    tape->Watch(in[source]);
    Tensor y = MustRun(op, in, std::move(attrs));
    EXPECT_TRUE(ctx_.tapes().Pop(1).ok());
    auto g = Gradient(ctx_, *tape, {y}, {in[source]}, {dy}, Unconnected::kNone);
    EXPECT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE(ctx_.tapes().Delete(1).ok());
    return g.ok() ? (*g)[0] : Tensor();
  }
  // Expects `op` to fail with `code` and a message holding every piece.
  void ExpectCode(absl::string_view op, std::vector<Tensor> in, AttrMap attrs,
                  absl::StatusCode code, std::vector<std::string> pieces) {
    absl::StatusOr<Tensor> r = Run1(op, std::move(in), std::move(attrs));
    ASSERT_FALSE(r.ok()) << op;
    EXPECT_EQ(r.status().code(), code) << r.status();
    for (const std::string& p : pieces) {
      EXPECT_TRUE(absl::StrContains(r.status().message(), p))
          << r.status() << " should mention " << p;
    }
  }
};

TEST_F(LayoutOpsTest, ExpandDimsInsertsAOneAtEveryPosition) {
  const V v = {0, 1, 2, 3, 4, 5};
  Expect("ExpandDims", {Iota({2, 3}), S<int32_t>(0)}, {}, {1, 2, 3}, v);
  Expect("ExpandDims", {Iota({2, 3}), S<int32_t>(1)}, {}, {2, 1, 3}, v);
  Expect("ExpandDims", {Iota({2, 3}), S<int64_t>(2)}, {}, {2, 3, 1}, v);
  // Negative dims count from the end of the output: -1 appends, -3 prepends.
  Expect("ExpandDims", {Iota({2, 3}), S<int64_t>(-1)}, {}, {2, 3, 1}, v);
  Expect("ExpandDims", {Iota({2, 3}), I32({-3})}, {}, {1, 2, 3}, v);
  Expect("ExpandDims", {Iota({}), S<int32_t>(-1)}, {}, {1}, {0});
  Expect("ExpandDims", {Iota({0, 2}), S<int32_t>(1)}, {}, {0, 1, 2}, {});
  Tensor y = MustRun("ExpandDims", {I32({4, 5}), S<int32_t>(0)});
  EXPECT_EQ(y.dtype(), DType::kInt32);
  EXPECT_EQ(y.shape(), (Shape{1, 2}));
}

TEST_F(LayoutOpsTest, ExpandDimsBadInputs) {
  ExpectInvalid("ExpandDims", {Iota({2, 3}), S<int32_t>(3)}, {},
                {"dim 3 is out of range [-3, 2]", "float64[2,3]"});
  ExpectInvalid("ExpandDims", {Iota({2, 3}), S<int64_t>(-4)}, {},
                {"dim -4 is out of range"});
  ExpectInvalid("ExpandDims", {Iota({2, 3}), I32({0, 1})}, {},
                {"dim must hold a single value", "[2]"});
  ExpectInvalid("ExpandDims", {Iota({2, 3}), S<double>(0)}, {}, {"dim"});
  ExpectInvalid("ExpandDims", {Iota(Shape(64, 1)), S<int32_t>(0)}, {},
                {"largest rank"});
}

TEST_F(LayoutOpsTest, SqueezeRemovesSizeOneDims) {
  const V v = {0, 1, 2, 3, 4, 5};
  Expect("Squeeze", {Iota({1, 2, 1, 3})}, {}, {2, 3}, v);
  Expect("Squeeze", {Iota({1, 2, 1, 3})}, {{"squeeze_dims", L({2})}}, {1, 2, 3},
         v);
  Expect("Squeeze", {Iota({1, 2, 1, 3})}, {{"squeeze_dims", L({-4, 2})}},
         {2, 3}, v);
  Expect("Squeeze", {Iota({1, 1})}, {}, {}, {0});
  Expect("Squeeze", {Iota({2, 3})}, {}, {2, 3}, v);
  // A zero-size dim is not a size-1 dim.
  Expect("Squeeze", {Iota({0, 1})}, {}, {0}, {});
  ExpectInvalid("Squeeze", {Iota({1, 2, 1, 3})}, {{"squeeze_dims", L({1})}},
                {"cannot squeeze dim 1", "float64[1,2,1,3]",
                 "expected a dimension of 1, got 2"});
  ExpectInvalid("Squeeze", {Iota({1, 2})}, {{"squeeze_dims", L({2})}},
                {"squeeze_dims entry 2 is out of range [-2, 2)"});
  ExpectInvalid("Squeeze", {Iota({1, 2})}, {{"squeeze_dims", L({-3})}},
                {"squeeze_dims entry -3"});
}

TEST_F(LayoutOpsTest, TileRepeatsAlongEachDim) {
  // np.tile(arange(6).reshape(2, 3), (1, 2)) and (2, 1).
  Expect("Tile", {Iota({2, 3}), I32({1, 2})}, {}, {2, 6},
         {0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5});
  Expect("Tile", {Iota({2, 3}), I64({2, 1})}, {}, {4, 3},
         {0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5});
  Expect("Tile", {Iota({2}), I32({3})}, {}, {6}, {0, 1, 0, 1, 0, 1});
  Expect("Tile", {Iota({2, 3}), I32({0, 2})}, {}, {0, 6}, {});
  Expect("Tile", {Iota({}, 4), I32({})}, {}, {}, {4});
  Tensor b = Tensor::FromVector<bool>({2}, {true, false});
  Tensor y = MustRun("Tile", {b, I32({2})});
  EXPECT_EQ(y.dtype(), DType::kBool);
  EXPECT_EQ(Values(y), (V{1, 0, 1, 0}));
}

TEST_F(LayoutOpsTest, TileBadAndHugeMultiples) {
  ExpectInvalid("Tile", {Iota({2, 3}), I32({1, -1})}, {},
                {"multiples[1] is -1"});
  ExpectInvalid("Tile", {Iota({2, 3}), I32({2})}, {},
                {"multiples must be a vector of length 2", "[1]"});
  ExpectInvalid("Tile", {Iota({2, 3}), S<int32_t>(2)}, {}, {"multiples"});
  ExpectInvalid("Tile", {Iota({2, 3}), I64({1, int64_t{1} << 62})}, {},
                {"overflows int64"});
  // Past the server's element cap: refused before any allocation.
  ExpectCode("Tile", {Iota({4}), I64({int64_t{1} << 40})}, {},
             absl::StatusCode::kResourceExhausted, {"Tile:", "float64"});
}

TEST_F(LayoutOpsTest, TileGradientSumsTheCopies) {
  // dy[r, c] = 6r + c over [4, 6]; dx[i, j] = sum over a, b in {0, 1} of
  // dy[i + 2a, j + 3b] = 24i + 4j + 30.
  Tensor dx = Grad("Tile", {Iota({2, 3}), I32({2, 2})}, {}, Iota({4, 6}), 0);
  ASSERT_TRUE(dx.valid());
  EXPECT_EQ(dx.shape(), (Shape{2, 3}));
  EXPECT_EQ(Values(dx), (V{30, 34, 38, 54, 58, 62}));
  // Multiple 0: no copy, a zero gradient of x's shape.
  dx = Grad("Tile", {Iota({2}), I32({0})}, {}, Iota({0}), 0);
  ASSERT_TRUE(dx.valid());
  EXPECT_EQ(Values(dx), (V{0, 0}));
}

TEST_F(LayoutOpsTest, FillValuesAndGradient) {
  Expect("Fill", {I32({2, 3}), S<double>(7.5)}, {}, {2, 3}, V(6, 7.5));
  Expect("Fill", {I64({}), S<double>(-2)}, {}, {}, {-2});
  Expect("Fill", {I64({0, 3}), S<double>(1)}, {}, {0, 3}, {});
  // Integers are copied exactly (2^53 + 1 has no double).
  const int64_t big = (int64_t{1} << 53) + 1;
  Tensor y = MustRun("Fill", {I32({2}), S<int64_t>(big)});
  EXPECT_EQ(y.dtype(), DType::kInt64);
  EXPECT_EQ(y.data<int64_t>()[1], big);
  // dvalue = sum(dy) = 0 + 1 + ... + 5.
  Tensor dv = Grad("Fill", {I32({2, 3}), S<double>(1)}, {}, Iota({2, 3}), 1);
  ASSERT_TRUE(dv.valid());
  EXPECT_EQ(dv.shape(), Shape{});
  EXPECT_EQ(Values(dv), (V{15}));
  ExpectInvalid("Fill", {I32({2, -1}), S<double>(1)}, {}, {"dims[1] is -1"});
  ExpectInvalid("Fill", {I32({2}), Iota({1})}, {},
                {"value must be a scalar", "float64[1]"});
  ExpectInvalid("Fill", {Tensor::FromVector<int32_t>({1, 1}, {2}), S(1.0)}, {},
                {"dims must be a vector", "[1,1]"});
  ExpectInvalid("Fill", {Iota({2}), S(1.0)}, {}, {"dims"});
  ExpectCode("Fill", {I64({int64_t{1} << 20, int64_t{1} << 20}), S(1.0)}, {},
             absl::StatusCode::kResourceExhausted, {"Fill:"});
}

TEST_F(LayoutOpsTest, RangeFollowsTheSizeRule) {
  Expect("Range", {S<int32_t>(0), S<int32_t>(5), S<int32_t>(1)}, {}, {5},
         {0, 1, 2, 3, 4});
  // ceil(10 / 3) = 4 elements; ceil(7 / 3) = 3 going down.
  Expect("Range", {S<int32_t>(0), S<int32_t>(10), S<int32_t>(3)}, {}, {4},
         {0, 3, 6, 9});
  Expect("Range", {S<int64_t>(5), S<int64_t>(-2), S<int64_t>(-3)}, {}, {3},
         {5, 2, -1});
  Expect("Range", {S<int32_t>(3), S<int32_t>(3), S<int32_t>(1)}, {}, {0}, {});
  Expect("Range", {S<int32_t>(3), S<int32_t>(3), S<int32_t>(-1)}, {}, {0}, {});
  // ceil(2.5 / 0.75) = 4.
  Expect("Range", {S(0.5), S(3.0), S(0.75)}, {}, {4}, {0.5, 1.25, 2.0, 2.75});
  Tensor y = MustRun("Range", {S(0.0f), S(1.0f), S(0.25f)},
                     {{"Tidx", DType::kFloat32}});
  EXPECT_EQ(y.dtype(), DType::kFloat32);
  EXPECT_EQ(Values(y), (V{0, 0.25, 0.5, 0.75}));
  // The whole int64 line in steps of INT64_MAX: exact, no overflow.
  y = MustRun("Range", {S(kI64Min), S(kI64Max), S(kI64Max)});
  ASSERT_EQ(y.num_elements(), 3);
  EXPECT_EQ(y.data<int64_t>()[0], kI64Min);
  EXPECT_EQ(y.data<int64_t>()[1], -1);
  EXPECT_EQ(y.data<int64_t>()[2], kI64Max - 1);
  EXPECT_FALSE(DefaultRegistry().Find("Range")->differentiable());
}

TEST_F(LayoutOpsTest, RangeBadInputs) {
  ExpectInvalid("Range", {S<int32_t>(0), S<int32_t>(5), S<int32_t>(0)}, {},
                {"delta must be non-zero"});
  ExpectInvalid("Range", {S<int32_t>(5), S<int32_t>(0), S<int32_t>(1)}, {},
                {"start 5 > limit 0", "when delta > 0"});
  ExpectInvalid("Range", {S(0.0), S(5.0), S(-1.0)}, {},
                {"start 0 < limit 5", "when delta < 0"});
  ExpectInvalid("Range", {S(0.0), S(std::nan("")), S(1.0)}, {},
                {"not a finite size"});
  ExpectInvalid("Range", {S(0.0), S(HUGE_VAL), S(1.0)}, {},
                {"not a finite size"});
  ExpectInvalid("Range", {S<int32_t>(0), S<int64_t>(5), S<int32_t>(1)}, {},
                {"int64"});
  ExpectInvalid("Range", {S<int32_t>(0), S<int32_t>(5), S<int32_t>(1)},
                {{"Tidx", DType::kInt64}},
                {"Tidx is int64 but start, limit and delta are int32"});
  ExpectInvalid("Range", {S<int32_t>(0), I32({5}), S<int32_t>(1)}, {},
                {"limit must be a scalar", "int32[1]"});
  ExpectInvalid("Range", {S(true), S(true), S(true)}, {}, {"start", "bool"});
  ExpectCode("Range",
             {S<int64_t>(0), S<int64_t>(int64_t{1} << 60), S<int64_t>(1)}, {},
             absl::StatusCode::kResourceExhausted, {"Range:"});
}

TEST_F(LayoutOpsTest, ReverseAndReverseV2) {
  Tensor tf = Tensor::FromVector<bool>({2}, {true, false});
  Tensor ft = Tensor::FromVector<bool>({2}, {false, true});
  Tensor tt = Tensor::FromVector<bool>({2}, {true, true});
  Expect("Reverse", {Iota({2, 3}), tf}, {}, {2, 3}, {3, 4, 5, 0, 1, 2});
  Expect("Reverse", {Iota({2, 3}), ft}, {}, {2, 3}, {2, 1, 0, 5, 4, 3});
  Expect("Reverse", {Iota({2, 3}), tt}, {}, {2, 3}, {5, 4, 3, 2, 1, 0});
  Expect("ReverseV2", {Iota({2, 3}), I32({-1})}, {}, {2, 3},
         {2, 1, 0, 5, 4, 3});
  Expect("ReverseV2", {Iota({2, 3}), I64({0, 1})}, {}, {2, 3},
         {5, 4, 3, 2, 1, 0});
  Expect("ReverseV2", {Iota({2, 3}), I32({})}, {}, {2, 3}, {0, 1, 2, 3, 4, 5});
  Expect("ReverseV2", {Iota({0, 3}), I32({1})}, {}, {0, 3}, {});
  Tensor y = MustRun("ReverseV2", {I64({7, 8, 9}), I32({0})});
  EXPECT_EQ(y.dtype(), DType::kInt64);
  EXPECT_EQ(Values(y), (V{9, 8, 7}));
  // The gradient is the same reverse of dy.
  Tensor dx =
      Grad("ReverseV2", {Iota({2, 3}), I32({1})}, {}, Iota({2, 3}, 10), 0);
  EXPECT_EQ(Values(dx), (V{12, 11, 10, 15, 14, 13}));
  ExpectInvalid("Reverse", {Iota({2, 3}), Tensor::FromVector<bool>({1}, {1})},
                {}, {"dims must be a bool vector of length 2", "[1]"});
  ExpectInvalid("Reverse", {Iota({2, 3}), I32({1, 0})}, {},
                {"dims must be bool"});
  ExpectInvalid("ReverseV2", {Iota({2, 3}), I32({2})}, {},
                {"axis[0] is 2, out of range [-2, 2)", "float64[2,3]"});
  ExpectInvalid("ReverseV2", {Iota({2, 3}), I32({0, -2})}, {},
                {"axis 0 is given more than once"});
  ExpectInvalid("ReverseV2", {Iota({2, 3}), S<int32_t>(0)}, {},
                {"axis must be a vector"});
}

TEST_F(LayoutOpsTest, PadAndPadV2) {
  // np.pad(arange(6).reshape(2, 3), ((1, 0), (2, 1))).
  Expect("Pad", {Iota({2, 3}), Pads({1, 0, 2, 1})}, {}, {3, 6},
         {0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 3, 4, 5, 0});
  Expect("PadV2", {Iota({2, 3}), Pads32({1, 0, 2, 1}), S(-1.0)}, {}, {3, 6},
         {-1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 2, -1, -1, -1, 3, 4, 5, -1});
  Expect("Pad", {Iota({}, 3), Pads({})}, {}, {}, {3});
  Expect("Pad", {Iota({0}), Pads({1, 2})}, {}, {3}, {0, 0, 0});
  Tensor y = MustRun("PadV2", {I32({1, 2}), Pads({1, 1}), S<int32_t>(9)});
  EXPECT_EQ(y.dtype(), DType::kInt32);
  EXPECT_EQ(Values(y), (V{9, 1, 2, 9}));
  // dx = dy[1:3, 2:5] of dy[r, c] = 6r + c.
  Tensor dx =
      Grad("Pad", {Iota({2, 3}), Pads({1, 0, 2, 1})}, {}, Iota({3, 6}), 0);
  EXPECT_EQ(Values(dx), (V{8, 9, 10, 14, 15, 16}));
  dx = Grad("PadV2", {Iota({2, 3}), Pads({1, 0, 2, 1}), S(-1.0)}, {},
            Iota({3, 6}), 0);
  EXPECT_EQ(Values(dx), (V{8, 9, 10, 14, 15, 16}));
  // As in TF, constant_values gets no gradient (None).
  Tensor dc = Grad("PadV2", {Iota({2, 3}), Pads({1, 0, 2, 1}), S(-1.0)}, {},
                   Iota({3, 6}), 2);
  EXPECT_FALSE(dc.valid());
}

TEST_F(LayoutOpsTest, PadBadInputs) {
  ExpectInvalid("Pad", {Iota({2, 3}), Pads({0, 0, -1, 0})}, {},
                {"paddings[1] is [-1, 0]", "must be >= 0"});
  ExpectInvalid(
      "Pad", {Iota({2, 3}), Pads({0, 0})}, {},
      {"paddings must be a matrix of shape [2,2]", "float64[2,3]", "[1,2]"});
  ExpectInvalid("Pad", {Iota({2, 3}), I32({0, 0, 0, 0})}, {},
                {"paddings must be a matrix", "[4]"});
  ExpectInvalid("Pad", {Iota({2}), Pads({kI64Max, 1})}, {},
                {"dim 0 of input float64[2]", "overflows int64"});
  ExpectInvalid("Pad", {Iota({2}), Iota({1, 2})}, {}, {"paddings"});
  ExpectInvalid("PadV2", {Iota({2}), Pads({1, 1}), S(1.0f)}, {},
                {"constant_values"});
  ExpectInvalid("PadV2", {Iota({2}), Pads({1, 1}), Iota({1})}, {},
                {"constant_values must be a scalar"});
  ExpectCode("Pad", {Iota({2}), Pads({int64_t{1} << 40, 0})}, {},
             absl::StatusCode::kResourceExhausted, {"Pad:"});
}

TEST_F(LayoutOpsTest, MirrorPadModes) {
  // TensorFlow's tf.pad documentation: t = [[1, 2, 3], [4, 5, 6]],
  // paddings [[1, 1], [2, 2]].
  Tensor t = Iota({2, 3}, 1);
  Expect("MirrorPad", {t, Pads({1, 1, 2, 2})}, Mode("REFLECT"), {4, 7},
         {6, 5, 4, 5, 6, 5, 4, 3, 2, 1, 2, 3, 2, 1,
          6, 5, 4, 5, 6, 5, 4, 3, 2, 1, 2, 3, 2, 1});
  Expect("MirrorPad", {t, Pads32({1, 1, 2, 2})}, Mode("SYMMETRIC"), {4, 7},
         {2, 1, 1, 2, 3, 3, 2, 2, 1, 1, 2, 3, 3, 2,
          5, 4, 4, 5, 6, 6, 5, 5, 4, 4, 5, 6, 6, 5});
  // The largest paddings of each mode: dim - 1 and dim.
  Expect("MirrorPad", {Iota({3}, 1), Pads({2, 2})}, Mode("REFLECT"), {7},
         {3, 2, 1, 2, 3, 2, 1});
  Expect("MirrorPad", {Iota({3}, 1), Pads({3, 3})}, Mode("SYMMETRIC"), {9},
         {3, 2, 1, 1, 2, 3, 3, 2, 1});
  Expect("MirrorPad", {Iota({0}), Pads({0, 0})}, Mode("SYMMETRIC"), {0}, {});
}

TEST_F(LayoutOpsTest, MirrorPadGradFoldsTheBorderBack) {
  // TensorFlow's MirrorPadGrad documentation: [[1..9]] with paddings
  // [[0, 1], [0, 1]], SYMMETRIC, gives [[1, 5], [11, 28]].
  Expect("MirrorPadGrad", {Iota({3, 3}, 1), Pads({0, 1, 0, 1})},
         Mode("SYMMETRIC"), {2, 2}, {1, 5, 11, 28});
  // REFLECT of [3] by [2, 2]: x = [a, b, c] -> [c, b, a, b, c, b, a], so
  // dx = [dy2 + dy6, dy1 + dy3 + dy5, dy0 + dy4].
  Expect("MirrorPadGrad", {Iota({7}), Pads({2, 2})}, Mode("REFLECT"), {3},
         {8, 9, 4});
  // The adjoint of MirrorPad: <MirrorPad(x), u> = <x, MirrorPadGrad(u)>.
  for (const char* mode : {"REFLECT", "SYMMETRIC"}) {
    Tensor x = testing::R({3, 4}, 21), u = testing::R({6, 5}, 22);
    Tensor p = Pads({1, 2, 1, 0});
    Tensor px = MustRun("MirrorPad", {x, p}, Mode(mode));
    Tensor gu = MustRun("MirrorPadGrad", {u, p}, Mode(mode));
    double lhs = 0, rhs = 0;
    for (int64_t i = 0; i < u.num_elements(); ++i) {
      lhs += px.ElementAsDouble(i) * u.ElementAsDouble(i);
    }
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      rhs += x.ElementAsDouble(i) * gu.ElementAsDouble(i);
    }
    EXPECT_NEAR(lhs, rhs, 1e-12) << mode;
  }
}

TEST_F(LayoutOpsTest, MirrorPadBadInputs) {
  Tensor t = Iota({2, 3});
  ExpectInvalid("MirrorPad", {t, Pads({0, 0, 3, 0})}, Mode("REFLECT"),
                {"paddings[1] is [3, 0]", "REFLECT mode allows at most 2",
                 "dim 1 of size 3", "input float64[2,3]"});
  ExpectInvalid("MirrorPad", {t, Pads({0, 3, 0, 0})}, Mode("SYMMETRIC"),
                {"paddings[0] is [0, 3]", "SYMMETRIC mode allows at most 2"});
  ExpectInvalid("MirrorPad", {t, Pads({0, 0, 0, -1})}, Mode("REFLECT"),
                {"paddings[1] is [0, -1]", ">= 0"});
  ExpectInvalid("MirrorPad", {t, Pads({0, 0, 0, 0})}, Mode("reflect"),
                {"mode must be REFLECT or SYMMETRIC, got 'reflect'"});
  ExpectInvalid("MirrorPad", {t, Pads({0, 0})}, Mode("REFLECT"),
                {"paddings must be a matrix of shape [2,2]"});
  // MirrorPadGrad: the unpadded size is input - before - after.
  ExpectInvalid("MirrorPadGrad", {Iota({4}), Pads({3, 2})}, Mode("SYMMETRIC"),
                {"paddings[0] is [3, 2], more than dim 0", "float64[4]"});
  ExpectInvalid("MirrorPadGrad", {Iota({5}), Pads({2, 1})}, Mode("REFLECT"),
                {"REFLECT mode allows at most 1", "output [2]"});
  ExpectInvalid("MirrorPadGrad", {Iota({5}), Pads({kI64Max, kI64Max})},
                Mode("REFLECT"), {"more than dim 0"});
}

// d/dw of <u, d<w, MirrorPad(x)>/dx> = MirrorPad(u): MirrorPadGrad's own
// backward (the second-order path) through two real tapes.
TEST_F(LayoutOpsTest, GradientOfTheMirrorPadGradientIsAMirrorPad) {
  Tensor x = ctx_.Adopt(Iota({3, 4}));
  Tensor w = ctx_.Adopt(testing::R({5, 6}, 5));
  Tensor u = testing::R({3, 4}, 6);
  Tensor p = Pads({1, 1, 2, 0});
  const AttrMap attrs = Mode("REFLECT");
  ASSERT_TRUE(ctx_.tapes().Push(1, false, false).ok());
  Tape* outer = *ctx_.tapes().Find(1);
  outer->Watch(w);
  ASSERT_TRUE(ctx_.tapes().Push(2, false, false).ok());
  Tape* inner = *ctx_.tapes().Find(2);
  inner->Watch(x);
  Tensor y = MustRun("MirrorPad", {x, p}, attrs);
  ASSERT_TRUE(ctx_.tapes().Pop(2).ok());
  auto g = Gradient(ctx_, *inner, {y}, {x}, {w}, Unconnected::kZero);
  ASSERT_TRUE(g.ok()) << g.status();
  Tensor dot = MustRun("Sum", {MustRun("Mul", {(*g)[0], u})},
                       {{"axis", std::vector<int64_t>{}}});
  ASSERT_TRUE(ctx_.tapes().Pop(1).ok());
  auto gw = Gradient(ctx_, *outer, {dot}, {w}, {}, Unconnected::kNone);
  ASSERT_TRUE(gw.ok()) << gw.status();
  Tensor expected = MustRun("MirrorPad", {u, p}, attrs);
  EXPECT_EQ((*gw)[0].shape(), (Shape{5, 6}));
  EXPECT_EQ(Values((*gw)[0]), Values(expected));
}

// Over a session with a 64 MiB limit: a tiny Tile or Pad asking for 1 GiB is
// refused unallocated, with the command named, and the session runs on.
TEST(LayoutOpsSession, HugeOutputsAreRefusedAndTheSessionRunsOn) {
  Session session(DefaultRegistry(), {.memory_limit_bytes = 64 << 20});
  ASSERT_TRUE(session.PutTensor(1, 10, Iota({4})).ok());
  ASSERT_TRUE(session.PutTensor(2, 11, I64({int64_t{1} << 25})).ok());
  ASSERT_TRUE(session.PutTensor(3, 12, Pads({int64_t{1} << 27, 0})).ok());
  ResetPeakTensorBytes();
  const int64_t before = PeakTensorBytes();
  absl::Status s = session.ExecuteOp(4, "Tile", {10, 11}, {13}, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "Tile (command 4")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "session memory limit")) << s;
  s = session.ExecuteOp(5, "Pad", {10, 12}, {14}, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "Pad (command 5")) << s;
  EXPECT_EQ(PeakTensorBytes(), before);
  ASSERT_TRUE(session.PutTensor(6, 15, I64({2})).ok());
  ASSERT_TRUE(session.ExecuteOp(7, "Tile", {10, 15}, {16}, {}).ok());
  absl::StatusOr<Tensor> t = session.FetchTensor(8, 16);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Values(*t), (V{0, 1, 2, 3, 0, 1, 2, 3}));
}

}  // namespace
}  // namespace gradtape
