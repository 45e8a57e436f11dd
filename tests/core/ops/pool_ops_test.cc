// Pooling ops: forward values of every op against a naive N-D reference
// written here (TensorFlow's window and padding rules), gradient routing and
// ties, higher-order gradients through the tape, and the input checks.
#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/autodiff/gradient.h"
#include "core/autodiff/op_executor.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "gtest/gtest.h"
#include "tests/core/ops/op_test_util.h"

namespace gradtape {
namespace {

using testing::Values;

// ---- The reference -------------------------------------------------------

struct PoolCase {
  Shape input;                  // NHWC or NDHWC
  std::vector<int64_t> window;  // spatial ksize
  std::vector<int64_t> stride;  // spatial strides
  std::string padding;

  int spatial() const { return static_cast<int>(window.size()); }
  std::string Suffix() const { return spatial() == 3 ? "3D" : ""; }
  AttrMap Attrs() const {
    std::vector<int64_t> k{1}, s{1};
    k.insert(k.end(), window.begin(), window.end());
    s.insert(s.end(), stride.begin(), stride.end());
    k.push_back(1);
    s.push_back(1);
    return {{"ksize", k}, {"strides", s}, {"padding", padding}};
  }
  // TensorFlow: VALID out = ceil((in - k + 1) / s), SAME out = ceil(in / s)
  // with max((out - 1) s + k - in, 0) padding, the smaller half before.
  int64_t Out(int d) const {
    const int64_t in = input[d + 1], k = window[d], s = stride[d];
    return padding == "VALID" ? (in - k + 1 + s - 1) / s : (in + s - 1) / s;
  }
  int64_t PadBefore(int d) const {
    if (padding == "VALID") return 0;
    return std::max<int64_t>(
               (Out(d) - 1) * stride[d] + window[d] - input[d + 1], 0) /
           2;
  }
  Shape Output() const {
    Shape s{input[0]};
    for (int d = 0; d < spatial(); ++d) s.push_back(Out(d));
    s.push_back(input.back());
    return s;
  }
};

std::string CaseName(const PoolCase& c) {
  return absl::StrCat(ShapeString(c.input), " k", ShapeString(c.window), " s",
                      ShapeString(c.stride), " ", c.padding);
}

// Flat input indices read by output element `o` of `c`, in row-major window
// order, padding cells left out.
std::vector<int64_t> WindowOf(const PoolCase& c, int64_t o) {
  const Shape out = c.Output();
  const int rank = static_cast<int>(out.size());
  std::vector<int64_t> coord(rank);
  for (int d = rank - 1; d >= 0; --d) {
    coord[d] = o % out[d];
    o /= out[d];
  }
  std::vector<int64_t> offset(c.spatial(), 0), result;
  while (true) {
    bool inside = true;
    int64_t flat = coord[0];
    for (int d = 0; d < c.spatial(); ++d) {
      const int64_t i = coord[d + 1] * c.stride[d] - c.PadBefore(d) + offset[d];
      inside = inside && i >= 0 && i < c.input[d + 1];
      flat = flat * c.input[d + 1] + i;
    }
    flat = flat * c.input.back() + coord.back();
    if (inside) result.push_back(flat);
    int d = c.spatial() - 1;
    for (; d >= 0; --d) {
      if (++offset[d] < c.window[d]) break;
      offset[d] = 0;
    }
    if (d < 0) return result;
  }
}

int64_t FirstMax(const std::vector<double>& x, const std::vector<int64_t>& w) {
  int64_t best = w[0];
  for (int64_t i : w) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

struct Reference {
  std::vector<double> avg, max, avg_grad, max_grad, max_grad_grad;
};

// dy: output-shaped; gx: input-shaped (MaxPoolGradGrad's grad).
Reference Compute(const PoolCase& c, const std::vector<double>& x,
                  const std::vector<double>& dy,
                  const std::vector<double>& gx) {
  Reference r;
  const int64_t n = NumElements(c.Output());
  r.avg_grad.assign(x.size(), 0.0);
  r.max_grad.assign(x.size(), 0.0);
  for (int64_t o = 0; o < n; ++o) {
    const std::vector<int64_t> w = WindowOf(c, o);
    double sum = 0;
    for (int64_t i : w) sum += x[i];
    r.avg.push_back(sum / w.size());
    const int64_t m = FirstMax(x, w);
    r.max.push_back(x[m]);
    for (int64_t i : w) r.avg_grad[i] += dy[o] / w.size();
    r.max_grad[m] += dy[o];
    r.max_grad_grad.push_back(gx[m]);
  }
  return r;
}

std::vector<double> Shuffled(int64_t n, uint32_t seed) {
  std::vector<double> v(n);
  std::iota(v.begin(), v.end(), -n / 2);
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  for (double& e : v) e *= 0.25;
  return v;
}

template <typename T>
Tensor Make(const Shape& shape, const std::vector<double>& v) {
  return Tensor::FromVector<T>(shape, std::vector<T>(v.begin(), v.end()));
}

class PoolOpsTest : public testing::OpTest {
 protected:
  Tensor D(Shape shape, std::vector<double> v) {
    return Tensor::FromVector<double>(shape, v);
  }
};

const PoolCase kCases[] = {
    {{2, 4, 4, 3}, {2, 2}, {2, 2}, "VALID"},
    {{2, 4, 4, 3}, {2, 2}, {2, 2}, "SAME"},
    {{1, 5, 5, 2}, {2, 2}, {2, 2}, "SAME"},
    {{1, 5, 5, 2}, {3, 3}, {1, 1}, "SAME"},
    {{1, 5, 5, 2}, {3, 3}, {1, 1}, "VALID"},
    {{1, 5, 6, 1}, {3, 2}, {2, 1}, "VALID"},
    {{1, 5, 6, 1}, {3, 2}, {2, 3}, "SAME"},
    {{2, 3, 3, 2}, {5, 5}, {1, 1}, "SAME"},   // window larger than the input
    {{1, 7, 4, 2}, {1, 1}, {3, 3}, "SAME"},   // stride larger than the window
    {{1, 7, 4, 2}, {2, 1}, {3, 2}, "VALID"},  // rows skipped
    {{1, 3, 4, 4, 2}, {2, 2, 2}, {2, 2, 2}, "VALID"},
    {{1, 3, 4, 4, 2}, {2, 2, 2}, {2, 2, 2}, "SAME"},
    {{2, 3, 3, 3, 1}, {3, 2, 3}, {1, 1, 1}, "SAME"},
    {{1, 5, 4, 3, 2}, {2, 3, 1}, {2, 1, 2}, "VALID"},
    {{1, 4, 4, 5, 1}, {3, 3, 3}, {2, 3, 1}, "SAME"},
};

// Runs all five ops of c's dimensionality in dtype T through `run` and
// compares with the reference.
template <typename T, typename RunFn>
void CheckAgainstReference(const PoolCase& c, double tolerance, RunFn run) {
  SCOPED_TRACE(CaseName(c));
  const Shape out_shape = c.Output();
  const std::vector<double> x = Shuffled(NumElements(c.input), 11);
  const std::vector<double> dy = Shuffled(NumElements(out_shape), 12);
  const std::vector<double> gx = Shuffled(NumElements(c.input), 13);
  const Reference ref = Compute(c, x, dy, gx);
  const AttrMap attrs = c.Attrs();
  AttrMap grad_attrs = attrs;
  grad_attrs.Set("orig_input_shape",
                 std::vector<int64_t>(c.input.begin(), c.input.end()));
  const std::string s = c.Suffix();
  Tensor tx = Make<T>(c.input, x);
  Tensor tdy = Make<T>(out_shape, dy);
  Tensor tgx = Make<T>(c.input, gx);
  Tensor avg = run("AvgPool" + s, {tx}, attrs);
  Tensor max = run("MaxPool" + s, {tx}, attrs);
  Tensor avg_grad = run("AvgPool" + s + "Grad", {tdy}, grad_attrs);
  Tensor max_grad = run("MaxPool" + s + "Grad", {tx, max, tdy}, attrs);
  Tensor max_gg = run("MaxPool" + s + "GradGrad", {tx, max, tgx}, attrs);
  for (const Tensor* t : {&avg, &max, &max_gg}) {
    ASSERT_EQ(t->shape(), out_shape);
    ASSERT_EQ(t->dtype(), DTypeOf<T>::value);
  }
  ASSERT_EQ(avg_grad.shape(), c.input);
  ASSERT_EQ(max_grad.shape(), c.input);
  auto expect_near = [&](const Tensor& t, const std::vector<double>& want,
                         const char* what) {
    std::vector<double> got = Values(t);
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], tolerance) << what << " at " << i;
    }
  };
  expect_near(avg, ref.avg, "AvgPool");
  expect_near(max, ref.max, "MaxPool");
  expect_near(avg_grad, ref.avg_grad, "AvgPoolGrad");
  expect_near(max_grad, ref.max_grad, "MaxPoolGrad");
  expect_near(max_gg, ref.max_grad_grad, "MaxPoolGradGrad");
}

TEST_F(PoolOpsTest, AllOpsMatchTheNaiveReference) {
  auto run = [this](absl::string_view op, std::vector<Tensor> in,
                    AttrMap attrs) {
    return MustRun(op, std::move(in), attrs);
  };
  for (const PoolCase& c : kCases) {
    CheckAgainstReference<double>(c, 1e-12, run);
    CheckAgainstReference<float>(c, 1e-4, run);
  }
}

TEST_F(PoolOpsTest, SameAveragesOverValidCellsOnly) {
  // 3x3 input, 2x2 window, stride 2, SAME: one padding row and column after.
  Tensor x = D({1, 3, 3, 1}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  AttrMap attrs = PoolCase{{1, 3, 3, 1}, {2, 2}, {2, 2}, "SAME"}.Attrs();
  Tensor y = MustRun("AvgPool", {x}, attrs);
  EXPECT_EQ(y.shape(), (Shape{1, 2, 2, 1}));
  EXPECT_EQ(Values(y), (std::vector<double>{3, 4.5, 7.5, 9}));
  // The gradient spreads each dy over the cells its window averaged.
  attrs.Set("orig_input_shape", std::vector<int64_t>{1, 3, 3, 1});
  Tensor dx = MustRun("AvgPoolGrad", {D({1, 2, 2, 1}, {4, 2, 2, 1})}, attrs);
  EXPECT_EQ(Values(dx), (std::vector<double>{1, 1, 1, 1, 1, 1, 1, 1, 1}));
  // 3x3 window, stride 1, SAME on a 2x2 input: every window sees all 4 cells.
  Tensor small = D({1, 2, 2, 1}, {1, 2, 3, 6});
  y = MustRun("AvgPool", {small},
              PoolCase{{1, 2, 2, 1}, {3, 3}, {1, 1}, "SAME"}.Attrs());
  EXPECT_EQ(Values(y), (std::vector<double>{3, 3, 3, 3}));
}

TEST_F(PoolOpsTest, MaxPoolGradRoutesToTheFirstMaximum) {
  // Ties: all equal, the whole gradient goes to the first cell of the window.
  Tensor x = D({1, 2, 2, 1}, {5, 5, 5, 5});
  AttrMap attrs = PoolCase{{1, 2, 2, 1}, {2, 2}, {1, 1}, "VALID"}.Attrs();
  Tensor y = MustRun("MaxPool", {x}, attrs);
  Tensor dx = MustRun("MaxPoolGrad", {x, y, D({1, 1, 1, 1}, {3})}, attrs);
  EXPECT_EQ(Values(dx), (std::vector<double>{3, 0, 0, 0}));
  // A tie after the first cell: the earlier (row-major) maximum wins.
  x = D({1, 2, 2, 1}, {1, 7, 7, 2});
  dx =
      MustRun("MaxPoolGrad",
              {x, MustRun("MaxPool", {x}, attrs), D({1, 1, 1, 1}, {3})}, attrs);
  EXPECT_EQ(Values(dx), (std::vector<double>{0, 3, 0, 0}));
  // Overlapping windows (2x2, stride 1) sharing a maximum add up there;
  // channels route independently.
  x = D({1, 3, 3, 2}, {1, 9, 2, 8, 3, 7,  //
                       4, 6, 9, 5, 5, 4,  //
                       6, 3, 7, 2, 8, 1});
  y = MustRun("MaxPool", {x}, attrs);
  EXPECT_EQ(Values(y), (std::vector<double>{9, 9, 9, 8, 9, 6, 9, 5}));
  dx = MustRun("MaxPoolGrad",
               {x, y, D({1, 2, 2, 2}, {1, 10, 2, 20, 3, 30, 4, 40})}, attrs);
  EXPECT_EQ(Values(dx), (std::vector<double>{0, 10, 0, 20, 0, 0,   //
                                             0, 30, 10, 40, 0, 0,  //
                                             0, 0, 0, 0, 0, 0}));
  // The max is found where orig_input equals orig_output: a window without
  // such a cell (orig_output is not the pool of orig_input) routes nothing.
  Tensor off = D({1, 2, 2, 2}, {9, 9, 9, 8, 9, 6, 4, 5});
  dx = MustRun("MaxPoolGrad",
               {x, off, D({1, 2, 2, 2}, {1, 10, 2, 20, 3, 30, 4, 40})}, attrs);
  EXPECT_EQ(Values(dx), (std::vector<double>{0, 10, 0, 20, 0, 0,  //
                                             0, 30, 6, 40, 0, 0,  //
                                             0, 0, 0, 0, 0, 0}));
  // MaxPoolGradGrad picks grad at the same cells.
  Tensor gg = MustRun("MaxPoolGradGrad",
                      {x, y,
                       D({1, 3, 3, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                        12, 13, 14, 15, 16, 17})},
                      attrs);
  EXPECT_EQ(Values(gg), (std::vector<double>{8, 1, 8, 3, 8, 7, 8, 9}));
}

// Gradients through the tape, including the gradient of a gradient: the
// backward of MaxPool is MaxPoolGrad, whose backward is MaxPoolGradGrad.
TEST_F(PoolOpsTest, SecondOrderThroughTheTape) {
  for (const char* op : {"MaxPool", "AvgPool"}) {
    SCOPED_TRACE(op);
    AttrMap attrs = PoolCase{{1, 3, 3, 1}, {2, 2}, {1, 1}, "VALID"}.Attrs();
    Tensor x = ctx_.Adopt(D({1, 3, 3, 1}, {1, 9, 2, 4, 6, 8, 3, 5, 7}));
    Tensor dy = ctx_.Adopt(D({1, 2, 2, 1}, {1, 2, 3, 4}));
    // Outer tape watches dy; inner computes dx = d<y, dy>/dx.
    ASSERT_TRUE(ctx_.tapes().Push(1, true, false).ok());
    Tape* outer = *ctx_.tapes().Find(1);
    outer->Watch(dy);
    ASSERT_TRUE(ctx_.tapes().Push(2, false, false).ok());
    Tape* inner = *ctx_.tapes().Find(2);
    inner->Watch(x);
    Tensor y = MustRun(op, {x}, attrs);
    ASSERT_TRUE(ctx_.tapes().Pop(2).ok());
    auto dx = Gradient(ctx_, *inner, {y}, {x}, {dy}, Unconnected::kZero);
    ASSERT_TRUE(dx.ok()) << dx.status();
    ASSERT_TRUE(ctx_.tapes().Pop(1).ok());
    // <dx, w> is linear in dy: its gradient wrt dy is the forward op on w.
    Tensor w = D({1, 3, 3, 1}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
    auto ddy =
        Gradient(ctx_, *outer, {(*dx)[0]}, {dy}, {w}, Unconnected::kZero);
    ASSERT_TRUE(ddy.ok()) << ddy.status();
    if (std::string(op) == "MaxPool") {
      // Maxima of x at cells 1, 1, 4, 5 (0-based): w there is 2, 2, 5, 6.
      EXPECT_EQ(Values((*ddy)[0]), (std::vector<double>{2, 2, 5, 6}));
    } else {
      EXPECT_EQ(Values((*ddy)[0]), Values(MustRun("AvgPool", {w}, attrs)));
    }
    ASSERT_TRUE(ctx_.tapes().Delete(1).ok());
    ASSERT_TRUE(ctx_.tapes().Delete(2).ok());
  }
}

TEST_F(PoolOpsTest, EmptyBatchAndChannels) {
  for (Shape shape : {Shape{0, 4, 4, 2}, Shape{2, 4, 4, 0}}) {
    Tensor x = Tensor::Zeros(DType::kFloat64, shape).value();
    AttrMap attrs = PoolCase{shape, {2, 2}, {2, 2}, "VALID"}.Attrs();
    Tensor y = MustRun("MaxPool", {x}, attrs);
    EXPECT_EQ(y.shape(), (Shape{shape[0], 2, 2, shape[3]}));
    EXPECT_EQ(MustRun("MaxPoolGrad", {x, y, y}, attrs).shape(), shape);
    EXPECT_EQ(MustRun("AvgPool", {x}, attrs).shape(), y.shape());
  }
  // SAME on an empty spatial dim gives an empty output.
  Tensor x = Tensor::Zeros(DType::kFloat64, {1, 0, 3, 1}).value();
  EXPECT_EQ(MustRun("AvgPool", {x},
                    PoolCase{{1, 0, 3, 1}, {2, 2}, {1, 1}, "SAME"}.Attrs())
                .shape(),
            (Shape{1, 0, 3, 1}));
}

TEST_F(PoolOpsTest, BadAttrsAreRejected) {
  Tensor x = D({1, 4, 4, 1}, std::vector<double>(16, 1.0));
  auto attrs = [](std::vector<int64_t> k, std::vector<int64_t> s,
                  std::string padding = "VALID") {
    return AttrMap{{"ksize", k}, {"strides", s}, {"padding", padding}};
  };
  const std::vector<int64_t> k2{1, 2, 2, 1};
  for (const char* op : {"AvgPool", "MaxPool"}) {
    ExpectInvalid(op, {x}, attrs({1, 2, 2}, k2), {"ksize [1,2,2]", "4"});
    ExpectInvalid(op, {x}, attrs(k2, {1, 2, 2, 1, 1}), {"strides [1,2,2,1,1]"});
    ExpectInvalid(op, {x}, attrs({2, 2, 2, 1}, k2),
                  {"ksize [2,2,2,1]", "batch and channel"});
    ExpectInvalid(op, {x}, attrs({1, 2, 2, 2}, k2), {"ksize [1,2,2,2]"});
    ExpectInvalid(op, {x}, attrs(k2, {1, 1, 1, 2}), {"strides [1,1,1,2]"});
    ExpectInvalid(op, {x}, attrs(k2, {1, 0, 2, 1}),
                  {"strides [1,0,2,1]", "entry 0"});
    ExpectInvalid(op, {x}, attrs({1, -2, 2, 1}, k2), {"entry -2"});
    ExpectInvalid(op, {x}, attrs({1, 5, 2, 1}, k2),
                  {"ksize [1,5,2,1]", "[1,4,4,1]", "VALID"});
    ExpectInvalid(op, {x}, attrs(k2, k2, "FULL"), {"padding 'FULL'"});
    AttrMap ncdhw = attrs(k2, k2);
    ncdhw.Set("data_format", std::string("NCDHW"));
    ExpectInvalid(op, {x}, ncdhw, {"data_format 'NCDHW' must be NHWC or NCHW"});
    // NCHW: ksize and strides are in NCHW order ([1,2,2,1] pools over C).
    AttrMap nchw = attrs(k2, k2);
    nchw.Set("data_format", std::string("NCHW"));
    ExpectInvalid(op, {x}, nchw,
                  {"ksize [1,2,1,2]", "batch and channel",
                   "data_format NCHW: run as NHWC"});
    ExpectInvalid(op, {D({4, 4, 1}, std::vector<double>(16))}, nchw,
                  {"rank 4 (NCHW)", "[4,4,1]"});
    ExpectInvalid(op, {D({4, 4, 1}, std::vector<double>(16))}, attrs(k2, k2),
                  {"rank 4", "[4,4,1]"});
    ExpectInvalid(op, {Tensor::FromVector<int32_t>({1, 2, 2, 1}, {1, 2, 3, 4})},
                  attrs(k2, k2), {"int32"});
  }
  const std::vector<int64_t> k3{1, 2, 2, 2, 1};
  for (const char* op : {"AvgPool3D", "MaxPool3D"}) {
    ExpectInvalid(op, {x}, attrs(k3, k3), {"rank 5", "[1,4,4,1]"});
    ExpectInvalid(op, {D({1, 2, 2, 2, 1}, std::vector<double>(8))},
                  attrs(k2, k3), {"ksize [1,2,2,1]", "5 entries"});
    ExpectInvalid(op, {D({1, 2, 2, 2, 1}, std::vector<double>(8))},
                  attrs(k3, {1, 1, 1, 1, 3}), {"strides [1,1,1,1,3]"});
    ExpectInvalid(op, {D({1, 1, 2, 2, 1}, std::vector<double>(4))},
                  attrs(k3, k3), {"ksize [1,2,2,2,1]", "VALID"});
  }
}

TEST_F(PoolOpsTest, GradOpsCheckTheirShapes) {
  const std::vector<int64_t> k2{1, 2, 2, 1};
  AttrMap attrs{
      {"ksize", k2}, {"strides", k2}, {"padding", std::string("VALID")}};
  Tensor x = D({1, 4, 4, 1}, std::vector<double>(16, 1.0));
  Tensor y = D({1, 2, 2, 1}, std::vector<double>(4, 1.0));
  // AvgPoolGrad: orig_input_shape must pool to grad's shape.
  AttrMap a = attrs;
  a.Set("orig_input_shape", std::vector<int64_t>{1, 4, 4, 2});
  ExpectInvalid("AvgPoolGrad", {y}, a, {"grad float64[1,2,2,1]", "[1,2,2,2]"});
  a.Set("orig_input_shape", std::vector<int64_t>{1, 6, 4, 1});
  ExpectInvalid("AvgPoolGrad", {y}, a, {"[1,3,2,1]", "[1,6,4,1]"});
  a.Set("orig_input_shape", std::vector<int64_t>{1, 4, 4});
  ExpectInvalid("AvgPoolGrad", {y}, a, {"orig_input_shape", "[1,4,4]"});
  a.Set("orig_input_shape", std::vector<int64_t>{1, -4, 4, 1});
  ExpectInvalid("AvgPoolGrad", {y}, a, {"[1,-4,4,1]"});
  a.Set("orig_input_shape",
        std::vector<int64_t>{1, std::numeric_limits<int64_t>::max(), 4, 1});
  ExpectInvalid("AvgPoolGrad", {y}, a, {"9223372036854775807"});
  ExpectInvalid("AvgPoolGrad", {y}, attrs,
                {"required attr 'orig_input_shape'"});
  // Strides of 2^31 - 1 let a 2x2 grad stand for a 2^62-element input, whose
  // byte size overflows int64.
  const int64_t big = int64_t{1} << 31;
  a = AttrMap{{"ksize", std::vector<int64_t>{1, 1, 1, 1}},
              {"strides", std::vector<int64_t>{1, big - 1, big - 1, 1}},
              {"padding", std::string("SAME")},
              {"orig_input_shape", std::vector<int64_t>{1, big, big, 1}}};
  ExpectInvalid("AvgPoolGrad", {y}, a, {"too many elements"});
  a = attrs;
  a.Set("orig_input_shape", std::vector<int64_t>{1, 4, 4, 1});
  ExpectInvalid("AvgPool3DGrad", {y}, a, {"rank 5", "[1,4,4,1]"});
  // MaxPoolGrad / MaxPoolGradGrad: orig_output and grad shapes, dtypes.
  ExpectInvalid("MaxPoolGrad", {x, x, y}, attrs,
                {"orig_output float64[1,4,4,1]", "[1,2,2,1]"});
  ExpectInvalid("MaxPoolGrad", {x, y, x}, attrs, {"grad float64[1,4,4,1]"});
  ExpectInvalid("MaxPoolGradGrad", {x, y, y}, attrs,
                {"grad float64[1,2,2,1]", "[1,4,4,1]"});
  ExpectInvalid("MaxPoolGrad",
                {x, y, Tensor::FromVector<float>({1, 2, 2, 1}, {1, 2, 3, 4})},
                attrs, {"float32", "same dtype"});
  ExpectInvalid("MaxPool3DGrad", {x, y, y}, attrs, {"rank 5"});
  ExpectInvalid("MaxPool3DGradGrad", {x, y, x}, attrs, {"rank 5"});
}

TEST_F(PoolOpsTest, BackwardsSaveWhatTensorFlowDoes) {
  for (const char* s : {"", "3D"}) {
    const OpDef* avg = DefaultRegistry().Find(absl::StrCat("AvgPool", s));
    EXPECT_TRUE(avg->saved_inputs.empty() && avg->saved_outputs.empty());
    const OpDef* max = DefaultRegistry().Find(absl::StrCat("MaxPool", s));
    EXPECT_EQ(max->saved_inputs, std::vector<int>{0});
    EXPECT_EQ(max->saved_outputs, std::vector<int>{0});
    for (const char* g : {"Grad", "GradGrad"}) {
      const OpDef* op = DefaultRegistry().Find(absl::StrCat("MaxPool", s, g));
      EXPECT_EQ(op->saved_inputs, (std::vector<int>{0, 1}));
      EXPECT_TRUE(op->saved_outputs.empty());
      // orig_input and orig_output only select the routing.
      EXPECT_EQ(op->input_differentiable,
                (std::vector<bool>{false, false, true}));
    }
  }
}

// Not a benchmark, a guard against gross regressions: CNN-sized pooling and
// its gradients take a fraction of a millisecond each in a release build
// (the limit is generous for sanitizer and debug builds).
TEST_F(PoolOpsTest, CnnSizedPoolingIsFast) {
  const PoolCase c{{32, 14, 14, 16}, {2, 2}, {2, 2}, "SAME"};
  Tensor x = Make<float>(c.input, Shuffled(NumElements(c.input), 3));
  const AttrMap attrs = c.Attrs();
  AttrMap grad_attrs = attrs;
  grad_attrs.Set("orig_input_shape",
                 std::vector<int64_t>(c.input.begin(), c.input.end()));
  Tensor y = MustRun("MaxPool", {x}, attrs);
  struct Timed {
    const char* op;
    std::vector<Tensor> in;
    const AttrMap* attrs;
  };
  const Timed ops[] = {{"MaxPool", {x}, &attrs},
                       {"MaxPoolGrad", {x, y, y}, &attrs},
                       {"AvgPool", {x}, &attrs},
                       {"AvgPoolGrad", {y}, &grad_attrs}};
  for (const Timed& t : ops) {
    constexpr int kReps = 20;
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kReps; ++i) MustRun(t.op, t.in, *t.attrs);
    const double ms = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - start)
                          .count() /
                      kReps;
    EXPECT_LT(ms, 10.0) << t.op << " on float32[32,14,14,16]";
    std::printf("%s on float32[32,14,14,16], 2x2 stride 2: %.3f ms\n", t.op,
                ms);
  }
}

// One 2x2 window over 2 channels: channel 0 [1, 5, 3, 5] ties at pixels 1
// and 3 (the first wins: (0 * 2 + 1) * 2 + 0 = 2), channel 1 [4, 2, 0, 1]
// peaks at pixel 0 (index 1). The second batch entry adds 2 * 2 * 2 = 8 with
// include_batch_in_index.
TEST_F(PoolOpsTest, MaxPoolWithArgmaxFlattening) {
  const std::vector<double> image = {1, 4, 5, 2, 3, 0, 5, 1};
  std::vector<double> two = image;
  two.insert(two.end(), image.begin(), image.end());
  Tensor x = D({2, 2, 2, 2}, two);
  AttrMap attrs = {{"ksize", std::vector<int64_t>{1, 2, 2, 1}},
                   {"strides", std::vector<int64_t>{1, 2, 2, 1}},
                   {"padding", std::string("VALID")}};
  absl::StatusOr<Tensors> out = Run("MaxPoolWithArgmax", {x}, attrs);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), Shape({2, 1, 1, 2}));
  EXPECT_EQ(testing::Values((*out)[0]), std::vector<double>({5, 4, 5, 4}));
  EXPECT_EQ((*out)[1].dtype(), DType::kInt64);
  EXPECT_EQ(testing::Values((*out)[1]), std::vector<double>({2, 1, 2, 1}));
  // The gradient: grad added at argmax within each batch entry.
  Tensor dx = MustRun("MaxPoolGradWithArgmax",
                      {x, D({2, 1, 1, 2}, {7, 8, 9, 10}), (*out)[1]}, attrs);
  EXPECT_EQ(testing::Values(dx),
            std::vector<double>({0, 8, 7, 0, 0, 0, 0, 0,  //
                                 0, 10, 9, 0, 0, 0, 0, 0}));
  Tensor gg = MustRun("MaxPoolGradGradWithArgmax",
                      {x, D({2, 2, 2, 2}, two), (*out)[1]}, attrs);
  EXPECT_EQ(testing::Values(gg), std::vector<double>({5, 4, 5, 4}));
  attrs.Set("include_batch_in_index", true);
  attrs.Set("Targmax", DType::kInt32);
  out = Run("MaxPoolWithArgmax", {x}, attrs);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[1].dtype(), DType::kInt32);
  EXPECT_EQ(testing::Values((*out)[1]), std::vector<double>({2, 1, 10, 9}));
  attrs.Set("Targmax", DType::kInt64);
  dx = MustRun("MaxPoolGradWithArgmax",
               {x, D({2, 1, 1, 2}, {7, 8, 9, 10}), (*out)[1]},
               {{"ksize", std::vector<int64_t>{1, 2, 2, 1}},
                {"strides", std::vector<int64_t>{1, 2, 2, 1}},
                {"padding", std::string("VALID")},
                {"include_batch_in_index", true}});
  EXPECT_EQ(testing::Values(dx),
            std::vector<double>({0, 8, 7, 0, 0, 0, 0, 0,  //
                                 0, 10, 9, 0, 0, 0, 0, 0}));
}

// SAME padding: windows clipped to the input; the output matches MaxPool.
TEST_F(PoolOpsTest, MaxPoolWithArgmaxMatchesMaxPool) {
  Tensor x = D({1, 3, 3, 1}, {0.5, 0.1, 0.9, 0.3, 0.8, 0.2, 0.7, 0.4, 0.6});
  const AttrMap attrs = {{"ksize", std::vector<int64_t>{1, 2, 2, 1}},
                         {"strides", std::vector<int64_t>{1, 2, 2, 1}},
                         {"padding", std::string("SAME")}};
  absl::StatusOr<Tensors> out = Run("MaxPoolWithArgmax", {x}, attrs);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values((*out)[0]), Values(MustRun("MaxPool", {x}, attrs)));
  // windows {0,1,3,4} -> 4, {2,5} -> 2, {6,7} -> 6, {8} -> 8
  EXPECT_EQ(Values((*out)[1]), std::vector<double>({4, 2, 6, 8}));
}

TEST_F(PoolOpsTest, MaxPoolWithArgmaxBadInputs) {
  Tensor x = D({1, 2, 2, 1}, {1, 2, 3, 4});
  const AttrMap attrs = {{"ksize", std::vector<int64_t>{1, 2, 2, 1}},
                         {"strides", std::vector<int64_t>{1, 2, 2, 1}},
                         {"padding", std::string("VALID")}};
  AttrMap bad = attrs;
  bad.Set("padding", std::string("EXPLICIT"));
  ExpectInvalid("MaxPoolWithArgmax", {x}, bad, {"padding", "EXPLICIT"});
  bad = attrs;
  bad.Set("Targmax", DType::kFloat32);
  ExpectInvalid("MaxPoolWithArgmax", {x}, bad, {"Targmax", "float32"});
  ExpectInvalid("MaxPoolWithArgmax", {D({2, 2}, {1, 2, 3, 4})}, attrs,
                {"input", "rank 4"});
  Tensor arg = Tensor::FromVector<int64_t>({1, 1, 1, 1}, {4});
  ExpectInvalid("MaxPoolGradWithArgmax", {x, D({1, 1, 1, 1}, {1}), arg}, attrs,
                {"argmax entry 4", "[0, 4)"});
  arg = Tensor::FromVector<int64_t>({1, 1, 1, 1}, {-1});
  ExpectInvalid("MaxPoolGradGradWithArgmax", {x, x, arg}, attrs,
                {"argmax entry -1"});
  ExpectInvalid("MaxPoolGradWithArgmax",
                {x, D({1, 1, 1, 2}, {1, 2}),
                 Tensor::FromVector<int64_t>({1, 1, 1, 1}, {0})},
                attrs, {"grad", "[1,1,1,2]"});
  ExpectInvalid("MaxPoolGradWithArgmax",
                {x, D({1, 1, 1, 1}, {1}),
                 Tensor::FromVector<int64_t>({1, 2, 1, 1}, {0, 1})},
                attrs, {"argmax", "[1,2,1,1]"});
}

// x = 1..9 (3x3), 2x2 windows, stride 2, one row and one column of padding
// before: windows {1}, {2, 3}, {4, 7}, {5, 6, 8, 9}.
TEST_F(PoolOpsTest, MaxPoolExplicitPadding) {
  Tensor x = D({1, 3, 3, 1}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  AttrMap attrs = {
      {"ksize", std::vector<int64_t>{1, 2, 2, 1}},
      {"strides", std::vector<int64_t>{1, 2, 2, 1}},
      {"padding", std::string("EXPLICIT")},
      {"explicit_paddings", std::vector<int64_t>{0, 0, 1, 0, 1, 0, 0, 0}}};
  Tensor y = MustRun("MaxPool", {x}, attrs);
  EXPECT_EQ(y.shape(), (Shape{1, 2, 2, 1}));
  EXPECT_EQ(Values(y), (std::vector<double>{1, 3, 7, 9}));
  Tensor dx =
      MustRun("MaxPoolGrad", {x, y, D({1, 2, 2, 1}, {10, 20, 30, 40})}, attrs);
  EXPECT_EQ(Values(dx), (std::vector<double>{10, 0, 20, 0, 0, 0, 30, 0, 40}));
  Tensor gg = MustRun("MaxPoolGradGrad", {x, y, x}, attrs);
  EXPECT_EQ(Values(gg), (std::vector<double>{1, 3, 7, 9}));
  // Paddings must stay below ksize; empty unless EXPLICIT; 3-D pooling and
  // AvgPool have no EXPLICIT (TensorFlow).
  AttrMap bad = attrs;
  bad.Set("explicit_paddings", std::vector<int64_t>{0, 0, 2, 0, 0, 0, 0, 0});
  ExpectInvalid("MaxPool", {x}, bad, {"explicit_paddings", "below ksize"});
  bad.Set("explicit_paddings", std::vector<int64_t>{0, 0, 1, 0, 1, 0});
  ExpectInvalid("MaxPool", {x}, bad, {"explicit_paddings", "8 entries"});
  bad.Set("explicit_paddings", std::vector<int64_t>{0, 0, 1, 0, 1, 0, 1, 0});
  ExpectInvalid("MaxPoolGrad", {x, y, y}, bad,
                {"explicit_paddings", "channel"});
  bad = attrs;
  bad.Set("padding", std::string("SAME"));
  ExpectInvalid("MaxPool", {x}, bad, {"explicit_paddings", "must be empty"});
  ExpectInvalid("AvgPool", {x},
                {{"ksize", std::vector<int64_t>{1, 2, 2, 1}},
                 {"strides", std::vector<int64_t>{1, 2, 2, 1}},
                 {"padding", std::string("EXPLICIT")}},
                {"padding 'EXPLICIT'", "SAME or VALID"});
  ExpectInvalid("MaxPool3D", {D({1, 1, 3, 3, 1}, std::vector<double>(9))},
                {{"ksize", std::vector<int64_t>{1, 1, 2, 2, 1}},
                 {"strides", std::vector<int64_t>{1, 1, 2, 2, 1}},
                 {"padding", std::string("EXPLICIT")}},
                {"padding 'EXPLICIT'", "SAME or VALID"});
}

}  // namespace
}  // namespace gradtape
