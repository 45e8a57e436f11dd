// Forward values, TensorFlow's conventions and bad inputs of the slicing
// ops (core/ops/slice_ops.cc); the generic checks (Jacobian, elision,
// forward mode) run on their samples. Expected values are numpy's basic
// indexing on an iota, which is what tf.strided_slice follows.
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

using testing::Values;

// 0, 1, 2, ... of `shape`, float64.
Tensor Iota(Shape shape) {
  std::vector<double> v(NumElements(shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  return Tensor::FromVector<double>(shape, v);
}
Tensor I32(std::vector<int32_t> v) {
  return Tensor::FromVector<int32_t>({static_cast<int64_t>(v.size())}, v);
}
Tensor I64(std::vector<int64_t> v) {
  return Tensor::FromVector<int64_t>({static_cast<int64_t>(v.size())}, v);
}

struct Masks {
  int64_t begin = 0, end = 0, ellipsis = 0, new_axis = 0, shrink = 0;
};
AttrMap MaskAttrs(Masks m) {
  AttrMap a;
  a.Set("begin_mask", m.begin);
  a.Set("end_mask", m.end);
  a.Set("ellipsis_mask", m.ellipsis);
  a.Set("new_axis_mask", m.new_axis);
  a.Set("shrink_axis_mask", m.shrink);
  return a;
}

class SliceOpsTest : public testing::OpTest {
 protected:
  // StridedSlice of Iota(shape); expects `shape_out` and `values`.
  void ExpectSlice(Shape shape, std::vector<int32_t> b, std::vector<int32_t> e,
                   std::vector<int32_t> s, Masks m, Shape shape_out,
                   std::vector<double> values) {
    Tensor y = MustRun("StridedSlice", {Iota(shape), I32(b), I32(e), I32(s)},
                       MaskAttrs(m));
    ASSERT_TRUE(y.valid());
    EXPECT_EQ(y.shape(), shape_out);
    EXPECT_EQ(Values(y), values);
  }
};

TEST_F(SliceOpsTest, StridedSliceBasicRanges) {
  // x[1:3, ::2] of a 4x5 iota.
  ExpectSlice({4, 5}, {1, 0}, {3, 0}, {1, 2}, {.begin = 2, .end = 2}, {2, 3},
              {5, 7, 9, 10, 12, 14});
  // x[::-2] and x[3:0:-1] of [5].
  ExpectSlice({5}, {0}, {0}, {-2}, {.begin = 1, .end = 1}, {3}, {4, 2, 0});
  ExpectSlice({5}, {3}, {0}, {-1}, {}, {3}, {3, 2, 1});
  // x[-3:] and x[:-1].
  ExpectSlice({5}, {-3}, {0}, {1}, {.end = 1}, {3}, {2, 3, 4});
  ExpectSlice({5}, {0}, {-1}, {1}, {.begin = 1}, {4}, {0, 1, 2, 3});
  // A stride that does not divide the interval: x[0:5:3].
  ExpectSlice({5}, {0}, {5}, {3}, {}, {2}, {0, 3});
  // x[-1::-1]: the whole dim reversed through negative begin.
  ExpectSlice({4}, {-1}, {0}, {-1}, {.end = 1}, {4}, {3, 2, 1, 0});
}

TEST_F(SliceOpsTest, StridedSliceTakesHugeIndicesAndStrides) {
  // Strides and bounds at the ends of int64 (no overflow in the offsets).
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  Tensor y = MustRun(
      "StridedSlice",
      {Iota({3, 4}), I64({kMin, 1}), I64({kMax, kMax}), I64({kMax, kMax})},
      MaskAttrs({}));
  EXPECT_EQ(y.shape(), (Shape{1, 1}));
  EXPECT_EQ(Values(y), (std::vector<double>{1}));
  y = MustRun(
      "StridedSlice",
      {Iota({3, 4}), I64({kMax, 2}), I64({kMin, kMin}), I64({kMin, kMin})},
      MaskAttrs({}));
  EXPECT_EQ(y.shape(), (Shape{1, 1}));
  EXPECT_EQ(Values(y), (std::vector<double>{10}));
  Tensor dx =
      MustRun("StridedSliceGrad",
              {I64({3, 4}), I64({kMax, 2}), I64({kMin, kMin}),
               I64({kMin, kMin}), Tensor::FromVector<double>({1, 1}, {5})},
              MaskAttrs({}));
  EXPECT_EQ(dx.ElementAsDouble(10), 5);
}

TEST_F(SliceOpsTest, StridedSliceClampsLikeNumpy) {
  ExpectSlice({4}, {-10}, {10}, {1}, {}, {4}, {0, 1, 2, 3});
  ExpectSlice({4}, {10}, {-10}, {-1}, {}, {4}, {3, 2, 1, 0});
  // Empty: the interval runs against the stride, or is empty.
  ExpectSlice({5}, {3}, {1}, {1}, {}, {0}, {});
  ExpectSlice({5}, {1}, {3}, {-1}, {}, {0}, {});
  ExpectSlice({5}, {2}, {2}, {1}, {}, {0}, {});
  ExpectSlice({5}, {7}, {9}, {1}, {}, {0}, {});
  // Fewer entries than dims: the rest is taken whole (implicit ellipsis).
  ExpectSlice({3, 2}, {1}, {2}, {1}, {}, {1, 2}, {2, 3});
}

TEST_F(SliceOpsTest, StridedSliceEllipsisNewAxisShrink) {
  // x[..., newaxis, 1] of [2,3,4]: shape [2,3,1], x[i,j,1].
  ExpectSlice({2, 3, 4}, {0, 0, 1}, {0, 0, 2}, {1, 1, 1},
              {.ellipsis = 1, .new_axis = 2, .shrink = 4}, {2, 3, 1},
              {1, 5, 9, 13, 17, 21});
  // x[1, ..., 2] of [2,3,4]: shape [3].
  ExpectSlice({2, 3, 4}, {1, 0, 2}, {2, 0, 3}, {1, 1, 1},
              {.ellipsis = 2, .shrink = 5}, {3}, {14, 18, 22});
  // x[newaxis] of [2]: [1,2]; x[newaxis, ..., newaxis]: [1,2,1].
  ExpectSlice({2}, {0}, {0}, {1}, {.new_axis = 1}, {1, 2}, {0, 1});
  ExpectSlice({2}, {0, 0, 0}, {0, 0, 0}, {1, 1, 1},
              {.ellipsis = 2, .new_axis = 5}, {1, 2, 1}, {0, 1});
  // x[-1, 1:] of [3,4]: shrink with a negative index.
  ExpectSlice({3, 4}, {-1, 1}, {0, 0}, {1, 1}, {.end = 2, .shrink = 1}, {3},
              {9, 10, 11});
  // x[2] of [4]: a scalar. An ellipsis that covers no dim: x[..., 0, 1].
  ExpectSlice({4}, {2}, {3}, {1}, {.shrink = 1}, {}, {2});
  ExpectSlice({2, 3}, {0, 0, 1}, {0, 1, 2}, {1, 1, 1},
              {.ellipsis = 1, .shrink = 6}, {}, {1});
  // Masks on an ellipsis or new-axis entry are ignored, as in TF.
  ExpectSlice({2}, {1, 0}, {1, 0}, {1, 1},
              {.begin = 3, .end = 3, .new_axis = 1}, {1, 2}, {0, 1});
}

TEST_F(SliceOpsTest, StridedSliceKeepsEveryDType) {
  Tensor x = Tensor::FromVector<int32_t>({4}, {5, 6, 7, 8});
  Tensor y = MustRun("StridedSlice", {x, I64({1}), I64({0}), I64({2})},
                     MaskAttrs({.end = 1}));
  EXPECT_EQ(y.dtype(), DType::kInt32);
  EXPECT_EQ(Values(y), (std::vector<double>{6, 8}));
  Tensor b = Tensor::FromVector<bool>({3}, {true, false, true});
  y = MustRun("StridedSlice", {b, I32({2}), I32({0}), I32({-1})},
              MaskAttrs({.end = 1}));
  EXPECT_EQ(y.dtype(), DType::kBool);
  EXPECT_EQ(Values(y), (std::vector<double>{1, 0, 1}));
}

TEST_F(SliceOpsTest, StridedSliceBadSpecs) {
  Tensor x = Iota({2, 3});
  const Masks none;
  ExpectInvalid("StridedSlice", {x, I32({0}), I32({1}), I32({0})},
                MaskAttrs(none), {"strides[0] is 0", "input float64[2,3]"});
  ExpectInvalid("StridedSlice", {x, I32({0, 0}), I32({1, 1}), I32({1, 1})},
                MaskAttrs({.ellipsis = 3}),
                {"ellipsis_mask 3", "multiple ellipses"});
  ExpectInvalid("StridedSlice", {x, I32({2}), I32({3}), I32({1})},
                MaskAttrs({.shrink = 1}),
                {"slice index 2 (begin[0]) of dim 0 is out of bounds",
                 "input float64[2,3]"});
  ExpectInvalid("StridedSlice", {x, I32({0, -4}), I32({1, 0}), I32({1, 1})},
                MaskAttrs({.shrink = 2}),
                {"slice index -4 (begin[1]) of dim 1"});
  ExpectInvalid("StridedSlice", {x, I32({1}), I32({0}), I32({-1})},
                MaskAttrs({.shrink = 1}),
                {"strides[0] is -1", "shrink-axis entry needs a positive"});
  ExpectInvalid("StridedSlice",
                {x, I32({0, 0, 0}), I32({1, 1, 1}), I32({1, 1, 1})},
                MaskAttrs(none),
                {"slice spec entry 2 is past the last dim",
                 "input float64[2,3]", "rank 2"});
  ExpectInvalid(
      "StridedSlice", {x, I32({0, 0}), I32({1}), I32({1, 1})}, MaskAttrs(none),
      {"begin, end and strides must be 1-D of one length", "[2], [1] and [2]"});
  ExpectInvalid(
      "StridedSlice",
      {x, Tensor::FromVector<int32_t>({1, 1}, {0}), I32({1}), I32({1})},
      MaskAttrs(none), {"1-D", "[1,1]"});
  ExpectInvalid("StridedSlice", {x, I32({0}), I64({1}), I32({1})},
                MaskAttrs(none), {"int64"});
  ExpectInvalid("StridedSlice",
                {x, Tensor::FromVector<double>({1}, {0}), I32({1}), I32({1})},
                MaskAttrs(none), {"begin"});
  ExpectInvalid("StridedSlice", {x, I32({0}), I32({1}), I32({1})},
                MaskAttrs({.begin = int64_t{1} << 40}),
                {"begin_mask 1099511627776 is not an int32 bit mask"});
  std::vector<int32_t> many(33, 0), ones(33, 1);
  ExpectInvalid("StridedSlice", {x, I32(many), I32(many), I32(ones)},
                MaskAttrs(none), {"at most 32 entries, got 33"});
}

TEST_F(SliceOpsTest, StridedSliceGradScattersIntoZeros) {
  // The gradient of x[1:3, ::2] of a 4x5: dy lands at rows 1-2, cols 0,2,4.
  Tensor dy = Iota({2, 3});
  Tensor dx = MustRun("StridedSliceGrad",
                      {I32({4, 5}), I32({1, 0}), I32({3, 0}), I32({1, 2}), dy},
                      MaskAttrs({.begin = 2, .end = 2}));
  EXPECT_EQ(dx.shape(), (Shape{4, 5}));
  EXPECT_EQ(Values(dx), (std::vector<double>{0, 0, 0, 0, 0, 0, 0, 1, 0, 2,
                                             3, 0, 4, 0, 5, 0, 0, 0, 0, 0}));
  // Shrink and new axis: dy of shape [1] (x[newaxis, 2] of [4]).
  dx = MustRun("StridedSliceGrad",
               {I64({4}), I64({0, 2}), I64({0, 3}), I64({1, 1}),
                Tensor::FromVector<double>({1}, {7})},
               MaskAttrs({.new_axis = 1, .shrink = 2}));
  EXPECT_EQ(Values(dx), (std::vector<double>{0, 0, 7, 0}));
  ExpectInvalid(
      "StridedSliceGrad", {I32({4}), I32({0}), I32({2}), I32({1}), Iota({3})},
      MaskAttrs({}), {"dy has shape [3], but the slice of [4] has shape [2]"});
  ExpectInvalid("StridedSliceGrad",
                {I32({4, -1}), I32({0}), I32({2}), I32({1}), Iota({2})},
                MaskAttrs({}), {"shape[1] is -1"});
  ExpectInvalid("StridedSliceGrad",
                {Tensor::FromVector<double>({1}, {4}), I32({0}), I32({2}),
                 I32({1}), Iota({2})},
                MaskAttrs({}), {"shape"});
}

// Slices big enough to be copied by rows on several threads: a reversed
// strided dim, contiguous rows and strided rows, forward against numpy's
// indexing written out, and the gradient scattering dy back into zeros.
TEST_F(SliceOpsTest, LargeSlicesCopyRowsInParallel) {
  const Shape shape = {6, 40, 30, 37};
  struct Case {
    std::vector<int32_t> begin, end, strides;
  };
  for (const Case& c : {Case{{1, 39, 2, 5}, {5, 0, 29, 37}, {1, -3, 1, 1}},
                        Case{{0, 0, 0, 0}, {6, 40, 30, 37}, {2, 1, 1, 4}}}) {
    Shape out(4);
    for (int d = 0; d < 4; ++d) {
      const int64_t span = c.end[d] - c.begin[d];
      out[d] =
          (span + c.strides[d] + (c.strides[d] > 0 ? -1 : 1)) / c.strides[d];
    }
    std::vector<double> want;  // x[b0:e0:s0, ...] of the iota: its offsets
    for (int64_t i = 0; i < out[0]; ++i)
      for (int64_t j = 0; j < out[1]; ++j)
        for (int64_t k = 0; k < out[2]; ++k)
          for (int64_t l = 0; l < out[3]; ++l) {
            const int64_t a = c.begin[0] + i * c.strides[0];
            const int64_t b = c.begin[1] + j * c.strides[1];
            const int64_t e = c.begin[2] + k * c.strides[2];
            const int64_t f = c.begin[3] + l * c.strides[3];
            want.push_back(((a * 40 + b) * 30 + e) * 37 + f);
          }
    Tensor y = MustRun("StridedSlice",
                       {Iota(shape), I32(c.begin), I32(c.end), I32(c.strides)},
                       MaskAttrs({}));
    ASSERT_EQ(y.shape(), out);
    ASSERT_EQ(Values(y), want);
    // dy = y: each value lands at its own offset, zeros elsewhere.
    Tensor dx = MustRun(
        "StridedSliceGrad",
        {I64({6, 40, 30, 37}), I32(c.begin), I32(c.end), I32(c.strides), y},
        MaskAttrs({}));
    std::vector<double> expect(NumElements(shape), 0.0);
    for (double v : want) expect[static_cast<int64_t>(v)] = v;
    ASSERT_EQ(Values(dx), expect);
  }
}

TEST_F(SliceOpsTest, SliceValuesAndBadInputs) {
  Tensor y = MustRun("Slice", {Iota({3, 4}), I32({1, 1}), I32({2, -1})});
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(Values(y), (std::vector<double>{5, 6, 7, 9, 10, 11}));
  y = MustRun("Slice", {Iota({3, 4}), I64({3, 4}), I64({0, 0})});
  EXPECT_EQ(y.shape(), (Shape{0, 0}));
  ExpectInvalid("Slice", {Iota({3, 4}), I32({4, 0}), I32({1, 1})}, {},
                {"begin[0] is 4, not in [0, 3]", "float64[3,4]"});
  ExpectInvalid("Slice", {Iota({3, 4}), I32({-1, 0}), I32({1, 1})}, {},
                {"begin[0] is -1"});
  ExpectInvalid("Slice", {Iota({3, 4}), I32({1, 2}), I32({1, 3})}, {},
                {"size[1] is 3, not in [0, 2] or -1", "begin 2"});
  ExpectInvalid("Slice", {Iota({3, 4}), I32({1, 2}), I32({1, -2})}, {},
                {"size[1] is -2"});
  ExpectInvalid("Slice", {Iota({3, 4}), I32({1}), I32({1})}, {},
                {"vectors of length 2", "[1] and [1]"});
  ExpectInvalid("Slice", {Iota({3, 4}), I32({1, 1}), I64({1, 1})}, {},
                {"int64"});
}

// d/dw of <u, d<w, slice(x)>/dx> = slice(u): StridedSliceGrad's own
// backward (the second-order path) through two real tapes.
TEST_F(SliceOpsTest, GradientOfTheGradientIsASlice) {
  Tensor x = ctx_.Adopt(Iota({4, 5}));
  Tensor w = ctx_.Adopt(testing::R({2, 3}, 5));
  Tensor u = testing::R({4, 5}, 6);
  const std::vector<Tensor> spec = {I32({1, 0}), I32({3, 0}), I32({1, 2})};
  const AttrMap attrs = MaskAttrs({.begin = 2, .end = 2});
  ASSERT_TRUE(ctx_.tapes().Push(1, false, false).ok());
  Tape* outer = *ctx_.tapes().Find(1);
  outer->Watch(w);
  ASSERT_TRUE(ctx_.tapes().Push(2, false, false).ok());
  Tape* inner = *ctx_.tapes().Find(2);
  inner->Watch(x);
  Tensor y = MustRun("StridedSlice", {x, spec[0], spec[1], spec[2]}, attrs);
  ASSERT_TRUE(ctx_.tapes().Pop(2).ok());
  auto g = Gradient(ctx_, *inner, {y}, {x}, {w}, Unconnected::kZero);
  ASSERT_TRUE(g.ok()) << g.status();
  Tensor dot = MustRun("Sum", {MustRun("Mul", {(*g)[0], u})},
                       {{"axis", std::vector<int64_t>{}}});
  ASSERT_TRUE(ctx_.tapes().Pop(1).ok());
  auto gw = Gradient(ctx_, *outer, {dot}, {w}, {}, Unconnected::kNone);
  ASSERT_TRUE(gw.ok()) << gw.status();
  Tensor expected =
      MustRun("StridedSlice", {u, spec[0], spec[1], spec[2]}, attrs);
  EXPECT_EQ(Values((*gw)[0]), Values(expected));
}

// Over a session: the error names the command's seq and the op, and the
// session runs on.
TEST(SliceOpsSession, ErrorsNameTheCommandAndTheSessionRunsOn) {
  Session session(DefaultRegistry(), {});
  ASSERT_TRUE(session.PutTensor(1, 10, Iota({2, 3})).ok());
  ASSERT_TRUE(session.PutTensor(2, 11, I32({0})).ok());
  ASSERT_TRUE(session.PutTensor(3, 12, I32({1})).ok());
  ASSERT_TRUE(session.PutTensor(4, 13, I32({0})).ok());
  absl::Status s =
      session.ExecuteOp(5, "StridedSlice", {10, 11, 12, 13}, {14}, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "StridedSlice (command 5")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "strides[0] is 0")) << s;
  ASSERT_TRUE(session.PutTensor(6, 15, I32({1})).ok());
  ASSERT_TRUE(
      session.ExecuteOp(7, "StridedSlice", {10, 11, 12, 15}, {16}, {}).ok());
  absl::StatusOr<Tensor> t = session.FetchTensor(8, 16);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Values(*t), (std::vector<double>{0, 1, 2}));
  s = session.ExecuteOp(9, "Slice", {10, 12, 12}, {17}, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "Slice (command 9")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "vectors of length 2")) << s;
}

}  // namespace
}  // namespace gradtape
