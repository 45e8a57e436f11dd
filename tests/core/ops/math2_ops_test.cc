// Issue 16's math ops: Rsqrt (RsqrtGrad), Erf, Erfc, Floor, Ceil, Round,
// Atan2, Max, Min, ArgMax, ArgMin, SelectV2, LeakyRelu (LeakyReluGrad) and
// ClipByValue. Exact forward values (expected values from the definitions,
// worked by hand, or from standard tables), TensorFlow's conventions (ties,
// banker's rounding, empty groups and axes, integer dtypes, negative axes),
// gradients the generic check does not single out (ties, clipping), second
// order, and bad inputs. The generic checks (Jacobian, elision, forward mode,
// output dtype, bad inputs) run on the samples.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "core/autodiff/gradient.h"
#include "core/autodiff/op_executor.h"
#include "core/ops/ops.h"
#include "gtest/gtest.h"
#include "tests/core/ops/op_samples.h"
#include "tests/core/ops/op_test_util.h"

namespace gradtape {
namespace testing {
void CheckSecondOrder(const OpSample& s);  // math_ops_test.cc
}  // namespace testing
namespace {

using testing::Values;

const double kPi = std::acos(-1.0);

class Math2Test : public testing::OpTest {
 protected:
  static Tensor D(Shape shape, std::vector<double> v) {
    return Tensor::FromVector<double>(shape, v);
  }
  static Tensor B(Shape shape, std::vector<bool> v) {
    return Tensor::FromVector<bool>(shape, v);
  }
  static Tensor I32(Shape shape, std::vector<int32_t> v) {
    return Tensor::FromVector<int32_t>(shape, v);
  }
  static Tensor I64(Shape shape, std::vector<int64_t> v) {
    return Tensor::FromVector<int64_t>(shape, v);
  }
  void Invalid(absl::string_view op, std::vector<Tensor> in,
               std::vector<std::string> mentions, AttrMap attrs = {}) {
    ExpectInvalid(op, std::move(in), std::move(attrs), std::move(mentions));
  }
  // d(sum(seed * op(inputs)))/d(inputs[wrt]).
  std::vector<Tensor> Grad(absl::string_view op, std::vector<Tensor> inputs,
                           std::vector<int> wrt, Tensor seed,
                           AttrMap attrs = {}) {
    for (Tensor& t : inputs) t = ctx_.Adopt(t);
    EXPECT_TRUE(ctx_.tapes().Push(1, false, false).ok());
    Tape* tape = *ctx_.tapes().Find(1);
    std::vector<Tensor> sources;
    for (int i : wrt) {
      tape->Watch(inputs[i]);
      sources.push_back(inputs[i]);
    }
    Tensors out;
    absl::Status s = ctx_.Execute(op, inputs, std::move(attrs), &out);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_TRUE(ctx_.tapes().Pop(1).ok());
    auto grads =
        Gradient(ctx_, *tape, {out[0]}, sources, {seed}, Unconnected::kZero);
    EXPECT_TRUE(grads.ok()) << grads.status();
    EXPECT_TRUE(ctx_.tapes().Delete(1).ok());
    return grads.ok() ? *grads : std::vector<Tensor>();
  }
  static void ExpectNear(const std::vector<double>& got,
                         const std::vector<double>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-12) << "element " << i;
    }
  }
};

TEST_F(Math2Test, RsqrtAndRsqrtGradValues) {
  Tensor y = MustRun("Rsqrt", {D({3}, {4, 0.25, 1})});
  EXPECT_EQ(Values(y), (std::vector<double>{0.5, 2, 1}));
  // -0.5 * dy * y^3: y = 2, dy = 3 -> -12; y = -1, dy = 1 -> 0.5.
  Tensor z = MustRun("RsqrtGrad", {D({2}, {2, -1}), D({2}, {3, 1})});
  EXPECT_EQ(Values(z), (std::vector<double>{-12, 0.5}));
  // d/dx x^(-1/2) = -0.5 x^(-3/2): at x = 4, -1/16.
  std::vector<Tensor> g = Grad("Rsqrt", {D({1}, {4})}, {0}, D({1}, {1}));
  ASSERT_EQ(g.size(), 1u);
  ExpectNear(Values(g[0]), {-1.0 / 16});
  Tensor f = MustRun("Rsqrt", {Tensor::FromVector<float>({1}, {16})});
  EXPECT_EQ(f.dtype(), DType::kFloat32);
  EXPECT_FLOAT_EQ(f.ElementAsDouble(0), 0.25);
  Invalid("Rsqrt", {I32({1}, {4})}, {"int32"});
  Invalid("RsqrtGrad", {D({2}, {1, 2}), D({3}, {1, 2, 3})}, {"[2]", "[3]"});
}

TEST_F(Math2Test, ErfAndErfcValues) {
  // Tabulated: erf(0.5) = 0.520499877813046..., erf(1) = 0.842700792949714...
  Tensor y = MustRun("Erf", {D({4}, {0, 0.5, -0.5, 1})});
  ExpectNear(Values(y),
             {0, 0.5204998778130465, -0.5204998778130465, 0.8427007929497149});
  Tensor c = MustRun("Erfc", {D({3}, {0, 0.5, -1})});
  ExpectNear(Values(c), {1, 1 - 0.5204998778130465, 1 + 0.8427007929497149});
  // d erf / dx = 2/sqrt(pi) e^(-x^2): 2/sqrt(pi) at 0, and e^-1 times that
  // at +-1; erfc's is the negative.
  const double k = 2 / std::sqrt(kPi);
  std::vector<Tensor> g =
      Grad("Erf", {D({3}, {0, 1, -1})}, {0}, D({3}, {1, 1, 2}));
  ASSERT_EQ(g.size(), 1u);
  ExpectNear(Values(g[0]), {k, k * std::exp(-1.0), 2 * k * std::exp(-1.0)});
  g = Grad("Erfc", {D({1}, {0})}, {0}, D({1}, {1}));
  ASSERT_EQ(g.size(), 1u);
  ExpectNear(Values(g[0]), {-k});
  Invalid("Erf", {I64({1}, {1})}, {"int64"});
  Invalid("Erfc", {B({1}, {true})}, {"bool"});
}

TEST_F(Math2Test, FloorCeilAndRoundHalfToEven) {
  Tensor x = D({6}, {-1.5, 1.5, -0.2, 2, 2.7, -2.7});
  EXPECT_EQ(Values(MustRun("Floor", {x})),
            (std::vector<double>{-2, 1, -1, 2, 2, -3}));
  EXPECT_EQ(Values(MustRun("Ceil", {x})),
            (std::vector<double>{-1, 2, -0.0, 2, 3, -2}));
  // TensorFlow's Round is banker's rounding: halves go to the even integer.
  Tensor halves = D({9}, {-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 2.4, 2.6});
  EXPECT_EQ(Values(MustRun("Round", {halves})),
            (std::vector<double>{-2, -2, 0, 0, 2, 2, 4, 2, 3}));
  Tensor rf = MustRun("Round", {Tensor::FromVector<float>({2}, {0.5f, 1.5f})});
  EXPECT_EQ(rf.dtype(), DType::kFloat32);
  EXPECT_EQ(Values(rf), (std::vector<double>{0, 2}));
  // Integers round to themselves (TensorFlow's Round takes them).
  Tensor ri = MustRun("Round", {I32({3}, {-3, 0, 7})});
  EXPECT_EQ(ri.dtype(), DType::kInt32);
  EXPECT_EQ(Values(ri), (std::vector<double>{-3, 0, 7}));
  // Empty input: empty output.
  EXPECT_EQ(MustRun("Floor", {D({0, 2}, {})}).shape(), (Shape{0, 2}));
  Invalid("Floor", {I32({1}, {1})}, {"int32"});
  Invalid("Ceil", {I64({1}, {1})}, {"int64"});
  Invalid("Round", {B({1}, {true})}, {"bool"});
  // TensorFlow registers None as their gradient: not recorded here.
  for (const char* op : {"Floor", "Ceil", "Round"}) {
    const OpDef* def = DefaultRegistry().Find(op);
    ASSERT_NE(def, nullptr) << op;
    EXPECT_FALSE(def->differentiable()) << op;
  }
  std::vector<Tensor> g =
      Grad("Floor", {D({2}, {0.3, 1.7})}, {0}, D({2}, {1, 1}));
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(Values(g[0]), (std::vector<double>{0, 0}));
}

TEST_F(Math2Test, Atan2QuadrantsAndBroadcast) {
  Tensor y = D({5}, {1, 1, -1, 0, 1});
  Tensor x = D({5}, {1, -1, -1, -1, 0});
  ExpectNear(Values(MustRun("Atan2", {y, x})),
             {kPi / 4, 3 * kPi / 4, -3 * kPi / 4, kPi, kPi / 2});
  Tensor z = MustRun("Atan2", {D({2, 1}, {1, -1}), D({2}, {1, -1})});
  EXPECT_EQ(z.shape(), (Shape{2, 2}));
  ExpectNear(Values(z), {kPi / 4, 3 * kPi / 4, -kPi / 4, -3 * kPi / 4});
  // dy = x / (x^2 + y^2), dx = -y / (x^2 + y^2); x = [1, 2] against a
  // scalar y = 1: dx = [-1/2, -1/5], dy = 1/2 + 2/5 summed.
  std::vector<Tensor> g =
      Grad("Atan2", {D({}, {1}), D({2}, {1, 2})}, {0, 1}, D({2}, {1, 1}));
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].shape(), Shape{});
  ExpectNear(Values(g[0]), {0.5 + 0.4});
  ExpectNear(Values(g[1]), {-0.5, -0.2});
  Invalid("Atan2", {D({2}, {1, 2}), D({3}, {1, 2, 3})}, {"[2]", "[3]"});
  Invalid("Atan2", {I32({1}, {1}), I32({1}, {1})}, {"int32"});
  Invalid("Atan2", {D({1}, {1}), Tensor::FromVector<float>({1}, {1})},
          {"float64", "float32"});
}

TEST_F(Math2Test, MaxMinValuesAxesAndKeepDims) {
  Tensor x = D({2, 3}, {1, 5, 3, 4, 2, 6});
  EXPECT_EQ(Values(MustRun("Max", {x, I32({}, {1})})),
            (std::vector<double>{5, 6}));
  EXPECT_EQ(Values(MustRun("Max", {x, I64({1}, {0})})),
            (std::vector<double>{4, 5, 6}));
  EXPECT_EQ(Values(MustRun("Min", {x, I32({1}, {-1})})),
            (std::vector<double>{1, 2}));
  Tensor kept = MustRun("Min", {x, I64({1}, {0})}, {{"keep_dims", true}});
  EXPECT_EQ(kept.shape(), (Shape{1, 3}));
  EXPECT_EQ(Values(kept), (std::vector<double>{1, 2, 3}));
  Tensor all = MustRun("Max", {x, I32({2}, {0, 1})});
  EXPECT_EQ(all.shape(), Shape{});
  EXPECT_EQ(Values(all), (std::vector<double>{6}));
  // An empty axis tensor reduces nothing (TensorFlow's raw op).
  // An axis tensor of any rank is flattened, as in TensorFlow.
  EXPECT_EQ(Values(MustRun("Max", {x, I32({1, 1}, {0})})),
            (std::vector<double>{4, 5, 6}));
  Tensor none = MustRun("Max", {x, I32({0}, {})});
  EXPECT_EQ(none.shape(), (Shape{2, 3}));
  EXPECT_EQ(Values(none), Values(x));
  // Integers.
  Tensor xi = I64({2, 2}, {-7, 3, 9, -2});
  Tensor mi = MustRun("Min", {xi, I32({}, {0})});
  EXPECT_EQ(mi.dtype(), DType::kInt64);
  EXPECT_EQ(Values(mi), (std::vector<double>{-7, -2}));
}

TEST_F(Math2Test, MaxMinEmptyGroupsAndNaN) {
  // Empty groups give the reduction's identity: -inf / +inf for floating,
  // lowest / highest for integers; the output is empty where x's kept dims
  // are.
  const double inf = std::numeric_limits<double>::infinity();
  Tensor e = D({2, 0}, {});
  EXPECT_EQ(Values(MustRun("Max", {e, I32({}, {1})})),
            (std::vector<double>{-inf, -inf}));
  EXPECT_EQ(Values(MustRun("Min", {e, I32({}, {1})})),
            (std::vector<double>{inf, inf}));
  EXPECT_EQ(MustRun("Max", {e, I32({}, {0})}).shape(), (Shape{0}));
  Tensor ei = MustRun("Max", {I32({0}, {}), I32({}, {0})});
  EXPECT_EQ(ei.data<int32_t>()[0], std::numeric_limits<int32_t>::min());
  ei = MustRun("Min", {I32({0}, {}), I32({}, {0})});
  EXPECT_EQ(ei.data<int32_t>()[0], std::numeric_limits<int32_t>::max());
  // NaN propagates, wherever it is in the group.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor n = MustRun("Max", {D({2, 2}, {nan, 1, 1, nan}), I32({}, {1})});
  EXPECT_TRUE(std::isnan(n.ElementAsDouble(0)));
  EXPECT_TRUE(std::isnan(n.ElementAsDouble(1)));
}

TEST_F(Math2Test, MaxMinGradientSplitsTies) {
  // TensorFlow's _MinOrMaxGrad: dy / count among the elements equal to the
  // result.
  Tensor x = D({2, 3}, {1, 3, 3, 2, 2, 2});
  std::vector<Tensor> g = Grad("Max", {x, I32({}, {1})}, {0}, D({2}, {1, 6}));
  ASSERT_EQ(g.size(), 1u);
  ExpectNear(Values(g[0]), {0, 0.5, 0.5, 2, 2, 2});
  g = Grad("Min", {x, I32({}, {0})}, {0}, D({1, 3}, {1, 2, 4}),
           {{"keep_dims", true}});
  ASSERT_EQ(g.size(), 1u);
  // Column minima 1 (x[0,0]), 2 (x[1,1]) and 2 (x[1,2]): no ties.
  ExpectNear(Values(g[0]), {1, 0, 0, 0, 2, 4});
  // All axes: the one 1 takes all of Min's; the two 3s share Max's.
  g = Grad("Min", {x, I64({2}, {0, 1})}, {0}, D({}, {3}));
  ASSERT_EQ(g.size(), 1u);
  ExpectNear(Values(g[0]), {3, 0, 0, 0, 0, 0});
  g = Grad("Max", {x, I64({2}, {-1, 0})}, {0}, D({}, {4}));
  ASSERT_EQ(g.size(), 1u);
  ExpectNear(Values(g[0]), {0, 2, 2, 0, 0, 0});
}

TEST_F(Math2Test, MaxMinBadInputs) {
  Tensor x = D({2, 3}, std::vector<double>(6));
  Invalid("Max", {x, I32({}, {2})}, {"axis 2", "[2,3]"});
  Invalid("Min", {x, I64({2}, {0, -3})}, {"axis -3", "[2,3]"});
  // A repeated axis (also as its negative) is refused, as in TensorFlow.
  Invalid("Min", {x, I32({2}, {1, -1})}, {"axis", "duplicate"});
  Invalid("Max", {x, I64({2}, {0, 0})}, {"axis", "duplicate"});
  Invalid("Max", {x, D({}, {1})}, {"axis", "float64"});
  Invalid("Max", {B({2}, {true, false}), I32({}, {0})}, {"bool"});
  Invalid("Min", {Tensor::FromVector<complex128>({1}, {{1, 1}}), I32({}, {0})},
          {"complex128"});
}

TEST_F(Math2Test, ArgMaxArgMinFirstIndexOnTies) {
  Tensor x = D({2, 3}, {1, 5, 5, 7, 2, 7});
  Tensor a = MustRun("ArgMax", {x, I32({}, {1})});
  EXPECT_EQ(a.dtype(), DType::kInt64);  // output_type's default
  EXPECT_EQ(a.shape(), (Shape{2}));
  EXPECT_EQ(Values(a), (std::vector<double>{1, 0}));
  EXPECT_EQ(Values(MustRun("ArgMin", {x, I32({}, {1})})),
            (std::vector<double>{0, 1}));
  EXPECT_EQ(Values(MustRun("ArgMax", {x, I64({}, {0})})),
            (std::vector<double>{1, 0, 1}));
  Tensor b =
      MustRun("ArgMin", {x, I64({}, {-2})}, {{"output_type", DType::kInt32}});
  EXPECT_EQ(b.dtype(), DType::kInt32);
  EXPECT_EQ(Values(b), (std::vector<double>{0, 1, 0}));
  // Rank 3, the middle dim; integers.
  Tensor xi = I32({2, 2, 2}, {0, 9, 4, 1, 3, 3, 8, -1});
  Tensor c = MustRun("ArgMax", {xi, I32({}, {1})});
  EXPECT_EQ(c.shape(), (Shape{2, 2}));
  EXPECT_EQ(Values(c), (std::vector<double>{1, 0, 1, 0}));
  EXPECT_EQ(Values(MustRun("ArgMin", {xi, I32({}, {1})})),
            (std::vector<double>{0, 1, 0, 1}));
  // Empty other dims: an empty result.
  EXPECT_EQ(MustRun("ArgMax", {D({0, 3}, {}), I32({}, {1})}).shape(),
            (Shape{0}));
  for (const char* op : {"ArgMax", "ArgMin"}) {
    const OpDef* def = DefaultRegistry().Find(op);
    ASSERT_NE(def, nullptr);
    EXPECT_FALSE(def->differentiable()) << op;
  }
}

TEST_F(Math2Test, ArgMaxArgMinBadInputs) {
  Tensor x = D({2, 3}, std::vector<double>(6));
  Invalid("ArgMax", {x, I32({}, {2})}, {"dimension 2", "float64[2,3]"});
  Invalid("ArgMin", {x, I64({}, {-3})}, {"dimension -3"});
  Invalid("ArgMax", {x, I32({1}, {0})}, {"dimension", "scalar"});
  Invalid("ArgMin", {x, D({}, {0})}, {"dimension", "float64"});
  Invalid("ArgMax", {D({2, 0}, {}), I32({}, {1})}, {"dimension 1", "empty"});
  Invalid("ArgMax", {D({}, {1}), I32({}, {0})}, {"dimension 0"});
  Invalid("ArgMin", {x, I32({}, {0})}, {"output_type", "float64"},
          {{"output_type", DType::kFloat64}});
  Invalid("ArgMax", {B({2}, {true, false}), I32({}, {0})}, {"bool"});
}

TEST_F(Math2Test, SelectV2BroadcastsAllThree) {
  Tensor z = MustRun("SelectV2", {B({2, 1}, {true, false}), D({3}, {1, 2, 3}),
                                  D({2, 3}, {-1, -2, -3, -4, -5, -6})});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(Values(z), (std::vector<double>{1, 2, 3, -4, -5, -6}));
  // The condition alone sets the shape; t and e scalars; integers.
  Tensor zi = MustRun("SelectV2", {B({2, 2}, {true, false, false, true}),
                                   I64({}, {7}), I64({1}, {-7})});
  EXPECT_EQ(zi.dtype(), DType::kInt64);
  EXPECT_EQ(zi.shape(), (Shape{2, 2}));
  EXPECT_EQ(Values(zi), (std::vector<double>{7, -7, -7, 7}));
  Tensor zs = MustRun("SelectV2", {B({}, {false}), D({}, {1}), D({}, {2})});
  EXPECT_EQ(zs.shape(), Shape{});
  EXPECT_EQ(Values(zs), (std::vector<double>{2}));
  EXPECT_EQ(MustRun("SelectV2", {B({0, 1}, {}), D({3}, {1, 2, 3}), D({}, {0})})
                .shape(),
            (Shape{0, 3}));
}

TEST_F(Math2Test, SelectV2GradientReducesToEachShape) {
  // dt = select(c, dz, 0) summed over t's broadcast rows; de likewise.
  std::vector<Tensor> g = Grad(
      "SelectV2", {B({2, 1}, {true, false}), D({3}, {1, 2, 3}), D({}, {0})},
      {1, 2}, D({2, 3}, {1, 2, 3, 4, 5, 6}));
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].shape(), (Shape{3}));
  EXPECT_EQ(Values(g[0]), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(g[1].shape(), Shape{});
  EXPECT_EQ(Values(g[1]), (std::vector<double>{15}));
}

TEST_F(Math2Test, SelectV2BadInputs) {
  Tensor t = D({2, 3}, std::vector<double>(6));
  Invalid("SelectV2", {D({2, 3}, std::vector<double>(6)), t, t},
          {"condition", "bool", "float64[2,3]"});
  Invalid("SelectV2", {B({2}, {true, false}), t, t},
          {"condition [2]", "t [2,3]", "e [2,3]", "broadcast"});
  Invalid("SelectV2", {B({}, {true}), t, D({4}, {1, 2, 3, 4})},
          {"t [2,3]", "e [4]"});
  Invalid("SelectV2", {B({}, {true}), t, I32({}, {1})}, {"float64", "int32"});
}

TEST_F(Math2Test, LeakyReluValues) {
  // alpha is a float32 attr in TensorFlow: 0.2 is 0.2f there, also in
  // float64 (TensorFlow gives -0.4000000059604645 for -2).
  const double a = static_cast<float>(0.2);
  Tensor x = D({4}, {-2, -0.5, 0, 3});
  ExpectNear(Values(MustRun("LeakyRelu", {x})), {-2 * a, -0.5 * a, 0, 3});
  EXPECT_NE(MustRun("LeakyRelu", {x}).ElementAsDouble(0), -0.4);
  ExpectNear(Values(MustRun("LeakyRelu", {x}, {{"alpha", 0.5}})),
             {-1, -0.25, 0, 3});
  // features == 0 takes alpha, as TensorFlow's kernel (features > 0).
  ExpectNear(Values(MustRun("LeakyReluGrad",
                            {D({4}, {1, 2, 3, 4}), D({4}, {-2, 0, 3, -1})})),
             {a, 2 * a, 3, 4 * a});
  std::vector<Tensor> g = Grad("LeakyRelu", {D({3}, {-1, 2, -3})}, {0},
                               D({3}, {1, 1, 10}), {{"alpha", 0.5}});
  ASSERT_EQ(g.size(), 1u);
  ExpectNear(Values(g[0]), {0.5, 1, 5});
  Invalid("LeakyRelu", {I32({1}, {1})}, {"int32"});
  Invalid("LeakyReluGrad", {D({2}, {1, 2}), D({3}, {1, 2, 3})},
          {"gradients", "features", "[2]", "[3]"});
}

TEST_F(Math2Test, ClipByValueValuesAndGradients) {
  Tensor t = D({3}, {-2, 0, 3});
  EXPECT_EQ(Values(MustRun("ClipByValue", {t, D({}, {-1}), D({}, {2})})),
            (std::vector<double>{-1, 0, 2}));
  // Bounds broadcast against t: per column min, per row max.
  Tensor m = MustRun("ClipByValue", {D({2, 2}, {0, 5, -5, 1}), D({2}, {1, -2}),
                                     D({2, 1}, {3, 0})});
  EXPECT_EQ(Values(m), (std::vector<double>{1, 3, 1, 0}));
  // min > max: TensorFlow's max(min(t, max), min) gives min.
  EXPECT_EQ(
      Values(MustRun("ClipByValue", {D({1}, {0}), D({}, {2}), D({}, {1})})),
      (std::vector<double>{2}));
  Tensor ti = MustRun("ClipByValue",
                      {I32({3}, {-9, 4, 9}), I32({}, {0}), I32({}, {5})});
  EXPECT_EQ(ti.dtype(), DType::kInt32);
  EXPECT_EQ(Values(ti), (std::vector<double>{0, 4, 5}));
  // dt where not clipped; the bounds get the rest, summed to their shapes.
  std::vector<Tensor> g = Grad("ClipByValue", {t, D({}, {-1}), D({}, {2})},
                               {0, 1, 2}, D({3}, {1, 2, 3}));
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(Values(g[0]), (std::vector<double>{0, 2, 0}));
  EXPECT_EQ(Values(g[1]), (std::vector<double>{1}));
  EXPECT_EQ(Values(g[2]), (std::vector<double>{3}));
  g = Grad("ClipByValue",
           {D({2, 2}, {0, 5, -5, 1}), D({2}, {1, -2}), D({2, 1}, {3, 0})},
           {0, 1, 2}, D({2, 2}, {1, 2, 3, 4}));
  ASSERT_EQ(g.size(), 3u);
  // Clipped: [0,0] to min 1, [0,1] to max 3, [1,0] to min 1, [1,1] to max 0.
  EXPECT_EQ(Values(g[0]), (std::vector<double>{0, 0, 0, 0}));
  EXPECT_EQ(Values(g[1]), (std::vector<double>{1 + 3, 0}));
  EXPECT_EQ(Values(g[2]), (std::vector<double>{2, 4}));
}

TEST_F(Math2Test, ClipByValueBadInputs) {
  Tensor t = D({3}, {1, 2, 3});
  Invalid("ClipByValue", {t, D({2, 3}, std::vector<double>(6)), D({}, {1})},
          {"clip_value_min [2,3]", "t [3]"});
  Invalid("ClipByValue", {t, D({}, {0}), D({2}, {1, 2})},
          {"clip_value_max [2]", "[3]"});
  Invalid("ClipByValue", {t, Tensor::FromVector<float>({}, {0}), D({}, {1})},
          {"float64", "float32"});
  Invalid("ClipByValue", {B({1}, {true}), B({}, {false}), B({}, {true})},
          {"bool"});
}

TEST_F(Math2Test, ComplexUnaryValues) {
  using C = complex128;
  auto one = [&](const char* op, C x) {
    Tensor y = MustRun(op, {Tensor::FromVector<C>({1}, {x})});
    EXPECT_EQ(y.dtype(), DType::kComplex128) << op;
    return y.valid() ? y.data<C>()[0] : C(0, 0);
  };
  auto near = [](C got, C want) {
    EXPECT_NEAR(got.real(), want.real(), 1e-12) << got << " vs " << want;
    EXPECT_NEAR(got.imag(), want.imag(), 1e-12) << got << " vs " << want;
  };
  near(one("Square", C(1, 2)), C(-3, 4));  // 1 + 4i - 4
  near(one("Exp", C(0, kPi)), C(-1, 0));   // Euler
  near(one("Exp", C(1, 0)), C(std::exp(1.0), 0));
  near(one("Sqrt", C(3, 4)), C(2, 1));        // (2 + i)^2 = 3 + 4i
  near(one("Sqrt", C(-4, 0)), C(0, 2));       // principal branch
  near(one("Rsqrt", C(3, 4)), C(0.4, -0.2));  // 1 / (2 + i)
  near(one("Tanh", C(0, kPi / 4)), C(0, 1));  // i tan(pi / 4)
  // The helpers conjugate y in the kernel as TensorFlow's (SqrtGrad,
  // RsqrtGrad) or not (TanhGrad: its caller conjugates).
  auto two = [&](const char* op, C y, C dy) {
    Tensor z = MustRun(op, {Tensor::FromVector<C>({1}, {y}),
                            Tensor::FromVector<C>({1}, {dy})});
    return z.valid() ? z.data<C>()[0] : C(0, 0);
  };
  near(two("SqrtGrad", C(0, 1), C(1, 0)), C(0, 0.5));  // 0.5 / conj(i)
  near(two("RsqrtGrad", C(0, 1), C(2, 0)), C(0, -1));  // -(-i)^3 = -i
  near(two("TanhGrad", C(0, 1), C(1, 0)), C(2, 0));    // 1 - i^2
  near(one("Sin", C(0, 1)), C(0, std::sinh(1.0)));     // sin(i) = i sinh 1
  near(one("Cos", C(0, 1)), C(std::cosh(1.0), 0));     // cos(i) = cosh 1
  near(one("Tan", C(0, 1)), C(0, std::tanh(1.0)));     // tan(i) = i tanh 1
  near(one("Expm1", C(0, kPi)), C(-2, 0));             // e^(i pi) - 1
  near(one("Log1p", C(-1, 1)), C(0, kPi / 2));         // ln(i)
  near(one("Sigmoid", C(0, kPi / 2)), C(0.5, 0.5));    // 1 / (1 - i)
  // Near 0 Expm1 and Log1p keep their precision: e^z - 1 ~ z + z^2 / 2.
  const C small(1e-10, 2e-10);
  near(one("Expm1", small) / small, C(1, 0) + small / 2.0);
  near(one("Log1p", small) / small, C(1, 0) - small / 2.0);
  Tensor f = MustRun("Square", {Tensor::FromVector<complex64>({1}, {{0, 1}})});
  EXPECT_EQ(f.dtype(), DType::kComplex64);
  EXPECT_EQ(f.ElementAsDouble(0), -1);  // the real part of i^2
}

TEST(Math2SecondOrder, MatchesFiniteDifferences) {
  const absl::flat_hash_set<std::string> ops = {
      "Rsqrt", "RsqrtGrad", "Erf",       "Erfc",          "Atan2",      "Max",
      "Min",   "SelectV2",  "LeakyRelu", "LeakyReluGrad", "ClipByValue"};
  absl::flat_hash_set<std::string> seen;
  for (const testing::OpSample& s : testing::AllOpSamples()) {
    // CheckSecondOrder differentiates float64 inputs only.
    if (!ops.contains(s.op) || IsComplex(s.inputs[0].dtype())) continue;
    testing::CheckSecondOrder(s);
    seen.insert(s.op);
  }
  EXPECT_EQ(seen.size(), ops.size());
}

}  // namespace
}  // namespace gradtape
