// The ops of core/ops/conv_ops.cc: forward values against direct (naive)
// convolutions written here, the backprop ops against the adjoint identity
// <conv(x, f), dy> = <x, BackpropInput(f, dy)> = <f, BackpropFilter(x, dy)>
// on more shapes than the gradient-check samples, a gradient of a gradient,
// and the input checks (INVALID_ARGUMENT naming the op and the bad value,
// nothing recorded).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/autodiff/gradient.h"
#include "core/autodiff/op_executor.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "gtest/gtest.h"
#include "tests/core/ops/op_samples.h"
#include "tests/core/ops/op_test_util.h"

namespace gradtape {
namespace {

using testing::Values;

using testing::RandomTensor;
using IntList = std::vector<int64_t>;

double Dot(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double s = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    s += a.ElementAsDouble(i) * b.ElementAsDouble(i);
  }
  return s;
}

Tensor Random(Shape shape, uint32_t seed) {
  return RandomTensor(std::move(shape), -1, 1, seed);
}

AttrMap Window(IntList strides, const std::string& padding, IntList dilations) {
  return {{"strides", std::move(strides)},
          {"padding", padding},
          {"dilations", std::move(dilations)}};
}
AttrMap With(AttrMap attrs, const char* name, AttrValue value) {
  attrs.Set(name, std::move(value));
  return attrs;
}
IntList ToList(const Shape& s) { return IntList(s.begin(), s.end()); }

// ---------------------------------------------------------------------------
// Direct references, on 3 spatial dims ([N,D,H,W,C]); 2-D ops are checked
// with D = 1 and a filter of depth 1.

struct Geometry1D {
  int64_t out, pad;
};
// TensorFlow's output size and leading padding of one spatial dim.
Geometry1D OutSize(int64_t in, int64_t k, int64_t s, int64_t d, bool same) {
  const int64_t eff = (k - 1) * d + 1;
  if (!same) return {(in - eff + s) / s, 0};
  const int64_t out = (in + s - 1) / s;
  return {out, std::max<int64_t>((out - 1) * s + eff - in, 0) / 2};
}

// Conv of x [N,D,H,W,C] with f [KD,KH,KW,C,O] (depthwise: [..,C,M] into
// C*M channels), strides / dilations {sd, sh, sw}.
Tensor ReferenceConv(const Tensor& x, const Tensor& f, IntList s, IntList d,
                     bool same, bool depthwise) {
  const Shape& xs = x.shape();
  const Shape& fs = f.shape();
  const int64_t n = xs[0], c = xs[4], m = fs[4];
  const int64_t oc = depthwise ? c * m : m;
  Geometry1D g[3];
  for (int i = 0; i < 3; ++i)
    g[i] = OutSize(xs[i + 1], fs[i], s[i], d[i], same);
  Tensor y =
      Tensor::Zeros(DType::kFloat64, {n, g[0].out, g[1].out, g[2].out, oc})
          .value();
  double* py = y.mutable_data<double>();
  const double* px = x.data<double>();
  const double* pf = f.data<double>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t o0 = 0; o0 < g[0].out; ++o0)
      for (int64_t o1 = 0; o1 < g[1].out; ++o1)
        for (int64_t o2 = 0; o2 < g[2].out; ++o2)
          for (int64_t k0 = 0; k0 < fs[0]; ++k0)
            for (int64_t k1 = 0; k1 < fs[1]; ++k1)
              for (int64_t k2 = 0; k2 < fs[2]; ++k2) {
                const int64_t i0 = o0 * s[0] - g[0].pad + k0 * d[0];
                const int64_t i1 = o1 * s[1] - g[1].pad + k1 * d[1];
                const int64_t i2 = o2 * s[2] - g[2].pad + k2 * d[2];
                if (i0 < 0 || i0 >= xs[1] || i1 < 0 || i1 >= xs[2] || i2 < 0 ||
                    i2 >= xs[3]) {
                  continue;
                }
                const double* in =
                    px + (((b * xs[1] + i0) * xs[2] + i1) * xs[3] + i2) * c;
                const double* w = pf + ((k0 * fs[1] + k1) * fs[2] + k2) * c * m;
                double* out =
                    py +
                    (((b * g[0].out + o0) * g[1].out + o1) * g[2].out + o2) *
                        oc;
                for (int64_t ci = 0; ci < c; ++ci)
                  for (int64_t mi = 0; mi < m; ++mi) {
                    out[depthwise ? ci * m + mi : mi] +=
                        in[ci] * w[ci * m + mi];
                  }
              }
  return y;
}

// Lifts a 2-D shape [N,H,W,C] to [N,1,H,W,C] and a window attr [1,a,b,1]
// to {1, a, b}.
Tensor Lift(const Tensor& t) {
  Shape s = t.shape();
  s.insert(s.begin() + 1, 1);
  return t.Reshaped(s);
}
Tensor LiftFilter(const Tensor& t) {
  Shape s = t.shape();
  s.insert(s.begin(), 1);
  return t.Reshaped(s);
}
IntList Spatial(const IntList& attr) {
  IntList s(attr.begin() + 1, attr.end() - 1);
  if (s.size() == 2) s.insert(s.begin(), 1);
  return s;
}

// max over the window of x + f; taps in the padding are skipped.
Tensor ReferenceDilation(const Tensor& x, const Tensor& f, IntList s, IntList r,
                         bool same) {
  const Shape& xs = x.shape();
  const Shape& fs = f.shape();
  Geometry1D gh = OutSize(xs[1], fs[0], s[0], r[0], same);
  Geometry1D gw = OutSize(xs[2], fs[1], s[1], r[1], same);
  const int64_t c = xs[3];
  Tensor y = Tensor::Empty(DType::kFloat64, {xs[0], gh.out, gw.out, c}).value();
  double* py = y.mutable_data<double>();
  for (int64_t b = 0; b < xs[0]; ++b)
    for (int64_t oh = 0; oh < gh.out; ++oh)
      for (int64_t ow = 0; ow < gw.out; ++ow)
        for (int64_t ci = 0; ci < c; ++ci) {
          double best = std::numeric_limits<double>::lowest();
          for (int64_t kh = 0; kh < fs[0]; ++kh)
            for (int64_t kw = 0; kw < fs[1]; ++kw) {
              const int64_t ih = oh * s[0] - gh.pad + kh * r[0];
              const int64_t iw = ow * s[1] - gw.pad + kw * r[1];
              if (ih < 0 || ih >= xs[1] || iw < 0 || iw >= xs[2]) continue;
              best = std::max(
                  best,
                  x.data<double>()[((b * xs[1] + ih) * xs[2] + iw) * c + ci] +
                      f.data<double>()[(kh * fs[1] + kw) * c + ci]);
            }
          *py++ = best;
        }
  return y;
}

// ---------------------------------------------------------------------------

struct ConvCase {
  Shape x, f;
  IntList strides;
  std::string padding;
  IntList dilations;
};

std::string Describe(const ConvCase& c) {
  return absl::StrCat("x ", ShapeString(c.x), " f ", ShapeString(c.f),
                      " strides ", ShapeString(c.strides), " ", c.padding,
                      " dilations ", ShapeString(c.dilations));
}

class ConvOpsTest : public testing::OpTest {
 protected:
  static void ExpectNear(const Tensor& got, const Tensor& want, double tol,
                         const std::string& what) {
    ASSERT_TRUE(got.valid()) << what;
    ASSERT_EQ(got.shape(), want.shape()) << what;
    for (int64_t i = 0; i < got.num_elements(); ++i) {
      ASSERT_NEAR(got.ElementAsDouble(i), want.ElementAsDouble(i), tol)
          << what << " at " << i;
    }
  }

  // <conv(x, f), dy> = <x, BackpropInput(f, dy)> = <f, BackpropFilter(x, dy)>
  // for random x, f, dy.
  void ExpectAdjoint(const char* conv, const char* input_op,
                     const char* filter_op, const ConvCase& c, uint32_t seed) {
    Tensor x = Random(c.x, seed), f = Random(c.f, seed + 1);
    AttrMap attrs = Window(c.strides, c.padding, c.dilations);
    Tensor y = MustRun(conv, {x, f}, attrs);
    ASSERT_TRUE(y.valid());
    Tensor dy = Random(y.shape(), seed + 2);
    Tensor dx =
        MustRun(input_op, {f, dy}, With(attrs, "input_sizes", ToList(c.x)));
    Tensor df =
        MustRun(filter_op, {x, dy}, With(attrs, "filter_sizes", ToList(c.f)));
    ASSERT_TRUE(dx.valid() && df.valid());
    const double ydy = Dot(y, dy);
    const double tol = 1e-10 * (1 + std::abs(ydy));
    EXPECT_NEAR(Dot(x, dx), ydy, tol) << conv << " " << Describe(c);
    EXPECT_NEAR(Dot(f, df), ydy, tol) << conv << " " << Describe(c);
  }
};

const std::vector<ConvCase>& Conv2DCases() {
  static const auto* cases = new std::vector<ConvCase>{
      {{1, 5, 5, 1}, {3, 3, 1, 1}, {1, 1, 1, 1}, "SAME", {1, 1, 1, 1}},
      {{1, 5, 5, 1}, {3, 3, 1, 1}, {1, 1, 1, 1}, "VALID", {1, 1, 1, 1}},
      {{2, 6, 7, 3}, {3, 2, 3, 4}, {1, 2, 2, 1}, "SAME", {1, 1, 1, 1}},
      {{2, 6, 7, 3}, {3, 2, 3, 4}, {1, 2, 2, 1}, "VALID", {1, 1, 1, 1}},
      {{1, 7, 6, 2}, {3, 3, 2, 3}, {1, 1, 1, 1}, "SAME", {1, 2, 2, 1}},
      {{1, 7, 6, 2}, {2, 3, 2, 3}, {1, 2, 1, 1}, "VALID", {1, 2, 2, 1}},
      {{3, 4, 5, 2}, {1, 1, 2, 3}, {1, 1, 1, 1}, "VALID", {1, 1, 1, 1}},
      {{1, 5, 5, 2}, {1, 1, 2, 2}, {1, 2, 2, 1}, "SAME", {1, 1, 1, 1}},
      {{1, 4, 4, 1}, {4, 4, 1, 2}, {1, 3, 3, 1}, "SAME", {1, 1, 1, 1}},
      {{1, 4, 4, 1}, {4, 4, 1, 2}, {1, 1, 1, 1}, "VALID", {1, 1, 1, 1}},
      {{0, 4, 4, 1}, {2, 2, 1, 2}, {1, 1, 1, 1}, "SAME", {1, 1, 1, 1}},
  };
  return *cases;
}

// Depthwise filters are [h, w, C, multiplier]; the direct and the adjoint
// tests share these.
const std::vector<ConvCase>& DepthwiseCases() {
  static const auto* cases = new std::vector<ConvCase>{
      {{1, 5, 5, 3}, {3, 3, 3, 2}, {1, 1, 1, 1}, "SAME", {1, 1, 1, 1}},
      {{2, 6, 5, 2}, {2, 3, 2, 1}, {1, 2, 2, 1}, "VALID", {1, 1, 1, 1}},
      {{1, 7, 7, 2}, {3, 2, 2, 3}, {1, 2, 1, 1}, "SAME", {1, 2, 2, 1}},
      {{2, 3, 3, 4}, {1, 1, 4, 2}, {1, 1, 1, 1}, "VALID", {1, 1, 1, 1}},
      {{2, 7, 6, 2}, {2, 3, 2, 2}, {1, 2, 2, 1}, "VALID", {1, 1, 1, 1}},
      {{1, 6, 7, 2}, {3, 2, 2, 1}, {1, 2, 3, 1}, "SAME", {1, 2, 1, 1}},
      {{2, 3, 3, 3}, {1, 1, 3, 2}, {1, 1, 1, 1}, "VALID", {1, 1, 1, 1}},
  };
  return *cases;
}

const std::vector<ConvCase>& Conv3DCases() {
  static const auto* cases = new std::vector<ConvCase>{
      {{1, 3, 4, 5, 2},
       {2, 2, 2, 2, 3},
       {1, 1, 1, 1, 1},
       "SAME",
       {1, 1, 1, 1, 1}},
      {{2, 5, 4, 5, 1},
       {3, 2, 3, 1, 2},
       {1, 2, 1, 2, 1},
       "VALID",
       {1, 1, 1, 1, 1}},
      {{1, 5, 5, 6, 2},
       {2, 3, 2, 2, 2},
       {1, 2, 2, 2, 1},
       "SAME",
       {1, 1, 1, 1, 1}},
      {{1, 6, 5, 5, 1},
       {2, 2, 2, 1, 2},
       {1, 1, 2, 1, 1},
       "VALID",
       {1, 2, 1, 2, 1}},
      {{1, 4, 4, 4, 2},
       {2, 2, 2, 2, 1},
       {1, 1, 1, 1, 1},
       "SAME",
       {1, 2, 2, 2, 1}},
      {{1, 6, 5, 5, 2},
       {2, 2, 2, 2, 2},
       {1, 2, 2, 1, 1},
       "SAME",
       {1, 1, 2, 2, 1}},
      {{1, 2, 3, 3, 2},
       {1, 1, 1, 2, 2},
       {1, 1, 1, 1, 1},
       "VALID",
       {1, 1, 1, 1, 1}},
  };
  return *cases;
}

TEST_F(ConvOpsTest, Conv2DMatchesDirectConvolution) {
  uint32_t seed = 1000;
  for (const ConvCase& c : Conv2DCases()) {
    Tensor x = Random(c.x, ++seed), f = Random(c.f, ++seed);
    Tensor y =
        MustRun("Conv2D", {x, f}, Window(c.strides, c.padding, c.dilations));
    Tensor want = ReferenceConv(Lift(x), LiftFilter(f), Spatial(c.strides),
                                Spatial(c.dilations), c.padding == "SAME",
                                /*depthwise=*/false);
    ExpectNear(Lift(y), want, 1e-12, Describe(c));
  }
}

TEST_F(ConvOpsTest, Conv2DFloat32) {
  Tensor x = Random({1, 5, 5, 2}, 7), f = Random({3, 3, 2, 2}, 8);
  auto cast = [](const Tensor& t) {
    std::vector<float> v;
    for (double d : Values(t)) v.push_back(static_cast<float>(d));
    return Tensor::FromVector<float>(t.shape(), v);
  };
  AttrMap attrs = Window({1, 2, 2, 1}, "SAME", {1, 1, 1, 1});
  Tensor y = MustRun("Conv2D", {cast(x), cast(f)}, attrs);
  ASSERT_EQ(y.dtype(), DType::kFloat32);
  ExpectNear(y, MustRun("Conv2D", {x, f}, attrs), 1e-5, "float32");
}

TEST_F(ConvOpsTest, Conv3DMatchesDirectConvolution) {
  uint32_t seed = 2000;
  for (const ConvCase& c : Conv3DCases()) {
    Tensor x = Random(c.x, ++seed), f = Random(c.f, ++seed);
    Tensor y =
        MustRun("Conv3D", {x, f}, Window(c.strides, c.padding, c.dilations));
    Tensor want = ReferenceConv(x, f, Spatial(c.strides), Spatial(c.dilations),
                                c.padding == "SAME", false);
    ExpectNear(y, want, 1e-12, Describe(c));
  }
}

TEST_F(ConvOpsTest, DepthwiseMatchesDirectConvolution) {
  uint32_t seed = 3000;
  for (const ConvCase& c : DepthwiseCases()) {
    Tensor x = Random(c.x, ++seed), f = Random(c.f, ++seed);
    Tensor y = MustRun("DepthwiseConv2dNative", {x, f},
                       Window(c.strides, c.padding, c.dilations));
    Tensor want =
        ReferenceConv(Lift(x), LiftFilter(f), Spatial(c.strides),
                      Spatial(c.dilations), c.padding == "SAME", true);
    ExpectNear(Lift(y), want, 1e-12, Describe(c));
  }
}

TEST_F(ConvOpsTest, Dilation2DMatchesDirectMaxPlus) {
  struct Case {
    Shape x, f;
    IntList strides;
    std::string padding;
    IntList rates;
  };
  const std::vector<Case> cases = {
      {{1, 5, 5, 2}, {3, 3, 2}, {1, 1, 1, 1}, "SAME", {1, 1, 1, 1}},
      {{2, 6, 5, 1}, {2, 3, 1}, {1, 2, 2, 1}, "VALID", {1, 1, 1, 1}},
      {{1, 6, 6, 3}, {2, 2, 3}, {1, 1, 2, 1}, "SAME", {1, 2, 2, 1}},
      {{1, 7, 6, 1}, {3, 2, 1}, {1, 2, 1, 1}, "VALID", {1, 2, 3, 1}},
  };
  uint32_t seed = 4000;
  for (const Case& c : cases) {
    Tensor x = Random(c.x, ++seed), f = Random(c.f, ++seed);
    Tensor y = MustRun(
        "Dilation2D", {x, f},
        {{"strides", c.strides}, {"padding", c.padding}, {"rates", c.rates}});
    Tensor want =
        ReferenceDilation(x, f, {c.strides[1], c.strides[2]},
                          {c.rates[1], c.rates[2]}, c.padding == "SAME");
    ExpectNear(y, want, 0, ShapeString(c.x));
  }
}

TEST_F(ConvOpsTest, Dilation2DBackpropsRouteToTheMaximum) {
  // One row of 4 inputs, a 1x2 filter, VALID: windows {0,1}, {1,2}, {2,3}.
  Tensor x = Tensor::FromVector<double>({1, 1, 4, 1}, {1, 5, 2, 0});
  Tensor f = Tensor::FromVector<double>({1, 2, 1}, {0, 0.5});
  AttrMap attrs = {{"strides", IntList{1, 1, 1, 1}},
                   {"padding", std::string("VALID")},
                   {"rates", IntList{1, 1, 1, 1}}};
  // max(1+0, 5+.5) = 5.5 (tap 1), max(5, 2.5) = 5 (tap 0), max(2, .5) = 2.
  EXPECT_EQ(Values(MustRun("Dilation2D", {x, f}, attrs)),
            (std::vector<double>{5.5, 5, 2}));
  Tensor dy = Tensor::FromVector<double>({1, 1, 3, 1}, {1, 10, 100});
  EXPECT_EQ(Values(MustRun("Dilation2DBackpropInput", {x, f, dy}, attrs)),
            (std::vector<double>{0, 11, 100, 0}));
  EXPECT_EQ(Values(MustRun("Dilation2DBackpropFilter", {x, f, dy}, attrs)),
            (std::vector<double>{110, 1}));
  Tensor gx = Tensor::FromVector<double>({1, 1, 4, 1}, {1, 2, 3, 4});
  EXPECT_EQ(Values(MustRun("Dilation2DBackpropInputGrad", {x, f, gx}, attrs)),
            (std::vector<double>{2, 2, 3}));
  Tensor gf = Tensor::FromVector<double>({1, 2, 1}, {7, 8});
  EXPECT_EQ(Values(MustRun("Dilation2DBackpropFilterGrad", {x, f, gf}, attrs)),
            (std::vector<double>{8, 7, 7}));
}

TEST_F(ConvOpsTest, Dilation2DGradOpsAreTransposesOfTheBackprops) {
  Tensor x = Random({2, 5, 6, 2}, 50), f = Random({2, 3, 2}, 51);
  for (const char* padding : {"SAME", "VALID"}) {
    AttrMap attrs = {{"strides", IntList{1, 2, 1, 1}},
                     {"padding", std::string(padding)},
                     {"rates", IntList{1, 1, 2, 1}}};
    Tensor y = MustRun("Dilation2D", {x, f}, attrs);
    Tensor dy = Random(y.shape(), 52), gx = Random(x.shape(), 53),
           gf = Random(f.shape(), 54);
    EXPECT_NEAR(
        Dot(MustRun("Dilation2DBackpropInput", {x, f, dy}, attrs), gx),
        Dot(dy, MustRun("Dilation2DBackpropInputGrad", {x, f, gx}, attrs)),
        1e-12);
    EXPECT_NEAR(
        Dot(MustRun("Dilation2DBackpropFilter", {x, f, dy}, attrs), gf),
        Dot(dy, MustRun("Dilation2DBackpropFilterGrad", {x, f, gf}, attrs)),
        1e-12);
  }
}

TEST_F(ConvOpsTest, BackpropOpsAreAdjointsOfTheConvolutions) {
  uint32_t seed = 5000;
  for (const ConvCase& c : Conv2DCases()) {
    ExpectAdjoint("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", c,
                  seed += 3);
  }
  for (const ConvCase& c : DepthwiseCases()) {
    ExpectAdjoint("DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
                  "DepthwiseConv2dNativeBackpropFilter", c, seed += 3);
  }
  for (const ConvCase& c : Conv3DCases()) {
    ExpectAdjoint("Conv3D", "Conv3DBackpropInputV2", "Conv3DBackpropFilterV2",
                  c, seed += 3);
  }
}

// Images large enough that im2col works in several chunks.
TEST_F(ConvOpsTest, LargeImagesGoThroughSeveralChunks) {
  const ConvCase c{
      {3, 128, 128, 16}, {3, 3, 16, 2}, {1, 1, 1, 1}, "SAME", {1, 1, 1, 1}};
  Tensor x = Random(c.x, 60), f = Random(c.f, 61);
  Tensor y =
      MustRun("Conv2D", {x, f}, Window(c.strides, c.padding, c.dilations));
  ExpectNear(
      Lift(y),
      ReferenceConv(Lift(x), LiftFilter(f), {1, 1, 1}, {1, 1, 1}, true, false),
      1e-11, "large Conv2D");
  ExpectAdjoint("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", c, 62);
}

// A benchmark-sized Conv2D runs (no timing assertions) and is right.
TEST_F(ConvOpsTest, Conv2DOfAnMnistSizedBatchRuns) {
  Tensor x64 = Random({8, 28, 28, 8}, 70), f64 = Random({3, 3, 8, 16}, 71);
  auto cast = [](const Tensor& t) {
    std::vector<float> v;
    for (double d : Values(t)) v.push_back(static_cast<float>(d));
    return Tensor::FromVector<float>(t.shape(), v);
  };
  Tensor y = MustRun("Conv2D", {cast(x64), cast(f64)},
                     Window({1, 1, 1, 1}, "SAME", {1, 1, 1, 1}));
  ASSERT_EQ(y.shape(), (Shape{8, 28, 28, 16}));
  ExpectNear(Lift(y),
             ReferenceConv(Lift(x64), LiftFilter(f64), {1, 1, 1}, {1, 1, 1},
                           true, false),
             1e-4, "float32 Conv2D");
}

// L = <Conv2D(x, f), u>: dL/df = Conv2DBackpropFilter(x, u); then
// d<dL/df, w>/dx = Conv2DBackpropInput(w, u), through an outer tape.
TEST_F(ConvOpsTest, GradientOfAGradient) {
  const AttrMap attrs = Window({1, 2, 2, 1}, "SAME", {1, 1, 1, 1});
  Tensor x = ctx_.Adopt(Random({1, 5, 5, 2}, 80));
  Tensor f = ctx_.Adopt(Random({3, 3, 2, 3}, 81));
  Tensor u = Random({1, 3, 3, 3}, 82), w = Random({3, 3, 2, 3}, 83);
  ASSERT_TRUE(ctx_.tapes().Push(1, /*persistent=*/false, false).ok());
  (*ctx_.tapes().Find(1))->Watch(x);
  ASSERT_TRUE(ctx_.tapes().Push(2, false, false).ok());
  (*ctx_.tapes().Find(2))->Watch(f);
  Tensor y = MustRun("Conv2D", {x, f}, attrs);
  ASSERT_TRUE(ctx_.tapes().Pop(2).ok());
  auto df =
      Gradient(ctx_, **ctx_.tapes().Find(2), {y}, {f}, {u}, Unconnected::kNone);
  ASSERT_TRUE(df.ok()) << df.status();
  ExpectNear((*df)[0],
             MustRun("Conv2DBackpropFilter", {x, u},
                     With(attrs, "filter_sizes", IntList{3, 3, 2, 3})),
             1e-12, "first order");
  Tensor s = MustRun("Sum", {MustRun("Mul", {(*df)[0], w}, {})}, {});
  ASSERT_TRUE(ctx_.tapes().Pop(1).ok());
  auto dx =
      Gradient(ctx_, **ctx_.tapes().Find(1), {s}, {x}, {}, Unconnected::kNone);
  ASSERT_TRUE(dx.ok()) << dx.status();
  ExpectNear((*dx)[0],
             MustRun("Conv2DBackpropInput", {w, u},
                     With(attrs, "input_sizes", IntList{1, 5, 5, 2})),
             1e-12, "second order");
}

// ---------------------------------------------------------------------------
// Bad inputs.

struct BadCase {
  std::string op;
  std::vector<Tensor> inputs;
  AttrMap attrs;
  std::vector<std::string> expected;  // substrings of the message
};

std::vector<BadCase> BadCases() {
  auto z = [](Shape s) { return Tensor::Zeros(DType::kFloat64, s).value(); };
  const IntList one = {1, 1, 1, 1}, one5 = {1, 1, 1, 1, 1};
  const AttrMap same = Window(one, "SAME", one);
  const AttrMap valid = Window(one, "VALID", one);
  const AttrMap same3 = Window(one5, "SAME", one5);
  const AttrMap dil = {
      {"strides", one}, {"padding", std::string("SAME")}, {"rates", one}};
  const Tensor x = z({1, 4, 4, 2}), f = z({3, 3, 2, 3});
  const Tensor x3 = z({1, 3, 3, 3, 2}), f3 = z({2, 2, 2, 2, 1});
  return {
      {"Conv2D", {z({4, 4, 2}), f}, same, {"rank 4", "[4,4,2]"}},
      {"Conv2D",
       {x, z({3, 3, 2})},
       same,
       {"filter must have rank 4", "[3,3,2]"}},
      {"Conv2D", {z({1, 4, 4, 3}), f}, same, {"[3,3,2,3]", "[1,4,4,3]"}},
      {"Conv2D",
       {x, f},
       Window({2, 1, 1, 1}, "SAME", one),
       {"strides [2,1,1,1]"}},
      {"Conv2D",
       {x, f},
       Window({1, 0, 1, 1}, "SAME", one),
       {"strides [1,0,1,1]"}},
      {"Conv2D", {x, f}, Window({1, 1, 1}, "SAME", one), {"strides [1,1,1]"}},
      {"Conv2D",
       {x, f},
       Window({1, int64_t{1} << 40, 1, 1}, "SAME", one),
       {"strides [1,1099511627776,1,1]"}},
      {"Conv2D",
       {x, f},
       Window(one, "SAME", {1, 1, 1, 2}),
       {"dilations [1,1,1,2]"}},
      {"Conv2D", {x, f}, Window(one, "FULL", one), {"padding \"FULL\""}},
      {"Conv2D",
       {x, f},
       With(same, "data_format", std::string("NCDHW")),
       {"data_format 'NCDHW' must be NHWC or NCHW"}},
      {"Conv2D",
       {z({4, 4, 2}), f},
       With(same, "data_format", std::string("NCHW")),
       {"input must have rank 4 (NCHW)", "[4,4,2]"}},
      // NCHW [1,2,4,4] has 2 channels; the filter expects 3. The kernel's
      // message is about the NHWC transpose and says so.
      {"Conv2D",
       {z({1, 2, 4, 4}), z({3, 3, 3, 1})},
       With(same, "data_format", std::string("NCHW")),
       {"expects 3 input channels", "[1,4,4,2]",
        "data_format NCHW: run as NHWC"}},
      {"Conv2DBackpropFilter",
       {z({1, 2, 4, 4}), z({1, 4, 4})},
       With(With(same, "data_format", std::string("NCHW")), "filter_sizes",
            IntList{3, 3, 2, 3}),
       {"out_backprop must have rank 4 (NCHW)", "[1,4,4]"}},
      {"Conv2D", {z({1, 2, 2, 2}), f}, valid, {"VALID", "[1,2,2,2]"}},
      {"Conv2D",
       {x, f},
       Window(one, "VALID", {1, 2, 2, 1}),
       {"effective filter size 5", "[1,4,4,2]"}},
      {"Conv2D",
       {Tensor::Zeros(DType::kFloat32, {1, 4, 4, 2}).value(), f},
       same,
       {"same dtype", "float32[1,4,4,2]"}},
      {"Conv2D",
       {Tensor::Zeros(DType::kInt32, {1, 4, 4, 2}).value(), f},
       same,
       {"float32 or float64", "int32"}},
      {"Conv2D", {x, f}, {{"strides", one}}, {"padding"}},
      {"Conv2DBackpropInput",
       {f, z({1, 4, 4, 3})},
       With(same, "input_sizes", IntList{1, 5, 5, 2}),
       {"out_backprop [1,4,4,3]", "[1,5,5,3]"}},
      {"Conv2DBackpropInput",
       {f, z({1, 4, 4, 3})},
       With(same, "input_sizes", IntList{1, 4, 4, 3}),
       {"input_sizes [1,4,4,3]", "[3,3,2,3]"}},
      {"Conv2DBackpropInput",
       {f, z({1, 4, 4, 3})},
       With(same, "input_sizes", IntList{1, -4, 4, 2}),
       {"input_sizes [1,-4,4,2]"}},
      {"Conv2DBackpropInput",
       {f, z({1, 4, 4, 3})},
       With(same, "input_sizes", IntList{4, 4, 2}),
       {"input_sizes must have rank 4", "[4,4,2]"}},
      {"Conv2DBackpropInput", {f, z({1, 4, 4, 3})}, same, {"input_sizes"}},
      {"Conv2DBackpropFilter",
       {x, z({1, 4, 4, 3})},
       With(same, "filter_sizes", IntList{3, 3, 2, 4}),
       {"out_backprop [1,4,4,3]", "[1,4,4,4]"}},
      {"Conv2DBackpropFilter",
       {x, z({1, 4, 4, 3})},
       With(same, "filter_sizes",
            IntList{int64_t{1} << 40, int64_t{1} << 40, 2, 0}),
       {"filter_sizes [1099511627776,1099511627776,2,0]", "too many"}},
      {"Conv3D", {x3, f3}, same, {"strides [1,1,1,1]"}},
      {"Conv3D", {x, f3}, same3, {"rank 5", "[1,4,4,2]"}},
      {"Conv3D",
       {x3, f3},
       With(same3, "data_format", std::string("NHWC")),
       {"data_format 'NHWC' must be NDHWC or NCDHW"}},
      {"Conv3D",
       {x, f3},
       With(same3, "data_format", std::string("NCDHW")),
       {"input must have rank 5 (NCDHW)", "[1,4,4,2]"}},
      {"Conv3D",
       {z({1, 3, 3, 1, 2}), f3},
       Window(one5, "VALID", one5),
       {"VALID", "[1,3,3,1,2]"}},
      {"Conv3DBackpropInputV2",
       {f3, z({1, 3, 3, 3, 2})},
       With(same3, "input_sizes", IntList{1, 3, 3, 3, 2}),
       {"out_backprop [1,3,3,3,2]", "[1,3,3,3,1]"}},
      {"Conv3DBackpropFilterV2",
       {x3, z({1, 2, 3, 3, 1})},
       With(same3, "filter_sizes", IntList{2, 2, 2, 2, 1}),
       {"out_backprop [1,2,3,3,1]", "[1,3,3,3,1]"}},
      {"DepthwiseConv2dNative",
       {x, z({2, 2, 3, 2})},
       same,
       {"[2,2,3,2]", "[1,4,4,2]"}},
      {"DepthwiseConv2dNativeBackpropInput",
       {z({2, 2, 2, 2}), z({1, 4, 4, 2})},
       With(same, "input_sizes", IntList{1, 4, 4, 2}),
       {"out_backprop [1,4,4,2]", "[1,4,4,4]"}},
      {"DepthwiseConv2dNativeBackpropFilter",
       {x, z({1, 4, 4, 4})},
       With(Window({1, 2, 2, 1}, "SAME", one), "filter_sizes",
            IntList{2, 2, 2, 2}),
       {"out_backprop [1,4,4,4]", "[1,2,2,4]"}},
      {"Dilation2D", {x, z({2, 2, 2, 1})}, dil, {"rank 3", "[2,2,2,1]"}},
      {"Dilation2D", {x, z({2, 2, 3})}, dil, {"[2,2,3]", "[1,4,4,2]"}},
      {"Dilation2D",
       {x, z({2, 2, 2})},
       {{"strides", one},
        {"padding", std::string("SAME")},
        {"rates", IntList{1, 2, 2}}},
       {"rates [1,2,2]"}},
      {"Dilation2D",
       {x, z({2, 2, 2})},
       {{"strides", one}, {"padding", std::string("SAME")}},
       {"rates"}},
      {"Dilation2D",
       {z({1, 1, 4, 2}), z({2, 2, 2})},
       {{"strides", one}, {"padding", std::string("VALID")}, {"rates", one}},
       {"VALID", "[1,1,4,2]"}},
      {"Dilation2DBackpropInput",
       {x, z({2, 2, 2}), z({1, 3, 3, 2})},
       dil,
       {"out_backprop [1,3,3,2]", "[1,4,4,2]"}},
      {"Dilation2DBackpropFilter",
       {x, z({2, 2, 2}), z({1, 4, 4, 1})},
       dil,
       {"out_backprop [1,4,4,1]"}},
      {"Dilation2DBackpropInputGrad",
       {x, z({2, 2, 2}), z({2, 2, 2})},
       dil,
       {"grad [2,2,2]", "[1,4,4,2]"}},
      {"Dilation2DBackpropFilterGrad",
       {x, z({2, 2, 2}), z({1, 4, 4, 2})},
       dil,
       {"grad [1,4,4,2]", "[2,2,2]"}},
  };
}

TEST_F(ConvOpsTest, BadInputsAreInvalidArgumentAndRecordNothing) {
  for (BadCase& c : BadCases()) {
    SCOPED_TRACE(c.op + " expecting '" + c.expected[0] + "'");
    OpExecutor ctx(DefaultRegistry());
    ASSERT_TRUE(ctx.tapes().Push(1, false, false).ok());
    Tape* tape = *ctx.tapes().Find(1);
    std::vector<Tensor> inputs;
    for (const Tensor& t : c.inputs) {
      inputs.push_back(ctx.Adopt(t));
      if (IsFloating(t.dtype())) tape->Watch(inputs.back());
    }
    Tensors out;
    absl::Status s = ctx.Execute(c.op, inputs, c.attrs, &out);
    ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), c.op)) << s;
    for (const std::string& e : c.expected) {
      EXPECT_TRUE(absl::StrContains(s.message(), e)) << s;
    }
    EXPECT_TRUE(out.empty());
    EXPECT_TRUE(tape->num_entries() == 0);
  }
}

TEST_F(ConvOpsTest, ValidInputsAreRecorded) {
  // The counterpart of the test above: the same tape set-up records a good
  // op, so "nothing recorded" there is not vacuous.
  ASSERT_TRUE(ctx_.tapes().Push(1, false, false).ok());
  Tape* tape = *ctx_.tapes().Find(1);
  Tensor x = ctx_.Adopt(Random({1, 4, 4, 2}, 90));
  tape->Watch(x);
  MustRun("Conv2D", {x, Random({3, 3, 2, 3}, 91)},
          Window({1, 1, 1, 1}, "SAME", {1, 1, 1, 1}));
  EXPECT_EQ(tape->num_entries(), 1u);
}

AttrMap ExplicitWindow(IntList paddings) {
  return With(Window({1, 1, 1, 1}, "EXPLICIT", {1, 1, 1, 1}),
              "explicit_paddings", std::move(paddings));
}

// A 1x1 image [2] and a 1x1 filter [3], padded before H and after W: the
// output is 2x2 with the image at (1, 0) and zeros (padding) elsewhere.
TEST_F(ConvOpsTest, ExplicitPaddingValues) {
  Tensor x = Tensor::FromVector<double>({1, 1, 1, 1}, {2});
  Tensor f = Tensor::FromVector<double>({1, 1, 1, 1}, {3});
  const AttrMap attrs = ExplicitWindow({0, 0, 1, 0, 0, 1, 0, 0});
  Tensor y = MustRun("Conv2D", {x, f}, attrs);
  ASSERT_TRUE(y.valid());
  EXPECT_EQ(y.shape(), (Shape{1, 2, 2, 1}));
  EXPECT_EQ(testing::Values(y), (std::vector<double>{0, 0, 6, 0}));
  y = MustRun("DepthwiseConv2dNative", {x, f}, attrs);
  EXPECT_EQ(testing::Values(y), (std::vector<double>{0, 0, 6, 0}));
  // BackpropInput reads the out_backprop at the image's position only.
  Tensor dy = Tensor::FromVector<double>({1, 2, 2, 1}, {1, 2, 5, 7});
  Tensor dx = MustRun("Conv2DBackpropInput", {f, dy},
                      With(attrs, "input_sizes", IntList{1, 1, 1, 1}));
  EXPECT_EQ(testing::Values(dx), (std::vector<double>{15}));
  Tensor df = MustRun("Conv2DBackpropFilter", {x, dy},
                      With(attrs, "filter_sizes", IntList{1, 1, 1, 1}));
  EXPECT_EQ(testing::Values(df), (std::vector<double>{10}));
}

// EXPLICIT with SAME's paddings is SAME (3x3 filter, stride 1: 1 and 1),
// for each op of both families.
TEST_F(ConvOpsTest, ExplicitPaddingMatchesSame) {
  Tensor x = Random({1, 4, 5, 2}, 900), f = Random({3, 3, 2, 2}, 901);
  const AttrMap same = Window({1, 1, 1, 1}, "SAME", {1, 1, 1, 1});
  const AttrMap expl = ExplicitWindow({0, 0, 1, 1, 1, 1, 0, 0});
  for (const char* conv : {"Conv2D", "DepthwiseConv2dNative"}) {
    SCOPED_TRACE(conv);
    Tensor y = MustRun(conv, {x, f}, same);
    ExpectNear(MustRun(conv, {x, f}, expl), y, 0, "forward");
    const std::string base = conv;
    Tensor dy = Random(y.shape(), 902);
    const AttrMap in = {{"input_sizes", IntList{1, 4, 5, 2}}};
    const AttrMap fs = {{"filter_sizes", IntList{3, 3, 2, 2}}};
    ExpectNear(MustRun(base + "BackpropInput", {f, dy},
                       With(expl, "input_sizes", IntList{1, 4, 5, 2})),
               MustRun(base + "BackpropInput", {f, dy},
                       With(same, "input_sizes", IntList{1, 4, 5, 2})),
               0, "backprop input");
    ExpectNear(MustRun(base + "BackpropFilter", {x, dy},
                       With(expl, "filter_sizes", IntList{3, 3, 2, 2})),
               MustRun(base + "BackpropFilter", {x, dy},
                       With(same, "filter_sizes", IntList{3, 3, 2, 2})),
               0, "backprop filter");
  }
}

TEST_F(ConvOpsTest, ExplicitPaddingAdjoints) {
  Tensor x = Random({1, 4, 3, 2}, 910), f = Random({3, 2, 2, 2}, 911);
  const AttrMap attrs = ExplicitWindow({0, 0, 1, 2, 0, 1, 0, 0});
  Tensor y = MustRun("Conv2D", {x, f}, attrs);
  ASSERT_EQ(y.shape(), (Shape{1, 5, 3, 2}));
  Tensor dy = Random(y.shape(), 912);
  auto dot = [](const Tensor& a, const Tensor& b) {
    double sum = 0;
    for (int64_t i = 0; i < a.num_elements(); ++i) {
      sum += a.ElementAsDouble(i) * b.ElementAsDouble(i);
    }
    return sum;
  };
  Tensor dx = MustRun("Conv2DBackpropInput", {f, dy},
                      With(attrs, "input_sizes", IntList{1, 4, 3, 2}));
  Tensor df = MustRun("Conv2DBackpropFilter", {x, dy},
                      With(attrs, "filter_sizes", IntList{3, 2, 2, 2}));
  EXPECT_NEAR(dot(y, dy), dot(x, dx), 1e-12);
  EXPECT_NEAR(dot(y, dy), dot(f, df), 1e-12);
}

TEST_F(ConvOpsTest, ExplicitPaddingBadAttrs) {
  Tensor x = Random({1, 3, 3, 1}, 920), f = Random({2, 2, 1, 1}, 921);
  struct Case {
    const char* op;
    AttrMap attrs;
    std::vector<std::string> expected;
  };
  const AttrMap conv3d = {{"strides", IntList{1, 1, 1, 1, 1}},
                          {"padding", std::string("EXPLICIT")}};
  for (const Case& c : std::vector<Case>{
           {"Conv2D",
            ExplicitWindow({0, 0, 1, 1, 1, 1}),
            {"explicit_paddings", "8 entries"}},
           {"Conv2D",
            ExplicitWindow({1, 0, 1, 1, 1, 1, 0, 0}),
            {"explicit_paddings", "batch"}},
           {"DepthwiseConv2dNative",
            ExplicitWindow({0, 0, -1, 1, 1, 1, 0, 0}),
            {"explicit_paddings", "[0,0,-1,1,1,1,0,0]"}},
           {"Conv2D",
            ExplicitWindow({0, 0, 0, 0, 0, 0, 0, 1}),
            {"explicit_paddings", "channel"}},
           {"Conv2D",
            With(Window({1, 1, 1, 1}, "SAME", {1, 1, 1, 1}),
                 "explicit_paddings", IntList{0, 0, 1, 1, 1, 1, 0, 0}),
            {"explicit_paddings", "must be empty unless padding is EXPLICIT"}},
           {"Conv2D",
            With(With(Window({1, 1, 1, 1}, "EXPLICIT", {1, 3, 3, 1}),
                      "explicit_paddings", IntList{0, 0, 0, 0, 0, 1, 0, 0}),
                 "dilations", IntList{1, 3, 3, 1}),
            {"EXPLICIT", "effective filter size 4", "padded size 3"}},
       }) {
    SCOPED_TRACE(c.op);
    ExpectInvalid(c.op, {x, f}, c.attrs, c.expected);
  }
  // Conv3D has no explicit_paddings and refuses EXPLICIT (TensorFlow).
  ExpectInvalid("Conv3D",
                {Random({1, 2, 2, 2, 1}, 922), Random({1, 1, 1, 1, 1}, 923)},
                conv3d, {"padding \"EXPLICIT\"", "\"SAME\" or \"VALID\""});
}

// Every channels-first sample (the convolution and pooling ops, forward and
// backprops; tests/core/ops/op_samples.h's ChannelsFirstTwin) gives the
// channels-last sample's result transposed (a filter-shaped result as it
// is). The gradient check covers the twins' gradients.
TEST_F(ConvOpsTest, ChannelsFirstTwinsGiveTheTransposedResult) {
  const std::vector<testing::OpSample>& samples = testing::AllOpSamples();
  int twins = 0;
  for (const testing::OpSample& twin : samples) {
    const AttrValue* format = twin.attrs.Find("data_format");
    if (format == nullptr) continue;
    const std::string& f = std::get<std::string>(*format);
    const std::string suffix = absl::StrCat(", as ", f);
    if (!absl::EndsWith(twin.label, suffix)) continue;
    const std::string label =
        twin.label.substr(0, twin.label.size() - suffix.size());
    auto original = std::find_if(
        samples.begin(), samples.end(),
        [&](const auto& s) { return s.op == twin.op && s.label == label; });
    ASSERT_NE(original, samples.end()) << twin.op << " (" << twin.label << ")";
    ++twins;
    Tensor last = MustRun(original->op, original->inputs, original->attrs);
    Tensor first = MustRun(twin.op, twin.inputs, twin.attrs);
    if (twin.op.find("BackpropFilter") == std::string::npos) {
      const int rank = last.rank();
      IntList to_first{0, rank - 1};
      for (int i = 1; i < rank - 1; ++i) to_first.push_back(i);
      last = MustRun("Transpose", {last}, {{"perm", to_first}});
    }
    EXPECT_EQ(first.shape(), last.shape()) << twin.op << " (" << label << ")";
    EXPECT_EQ(Values(first), Values(last)) << twin.op << " (" << label << ")";
  }
  // Conv2D, Conv3D, depthwise and their backprops; (Max|Avg)Pool(3D) and
  // their gradients.
  EXPECT_GE(twins, 60);
}

}  // namespace
}  // namespace gradtape
