// Forward values of the math ops against std:: functions and naive reference
// implementations, their input checks, and gradients the generic check cannot
// reach (a product with a zero in it). The generic gradient check covers the
// backwards on its samples.
#include <cmath>
#include <functional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "core/autodiff/gradient.h"
#include "core/autodiff/op_executor.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "gtest/gtest.h"
#include "tests/core/ops/op_samples.h"
#include "tests/core/ops/op_test_util.h"

namespace gradtape {
namespace testing {

// Second order: the backward of the op, recorded by an outer tape, is
// differentiated again and checked against central differences of the
// first-order gradient (a random projection of the Hessian-vector product).
// Also used by nn_ops_test.cc.
void CheckSecondOrder(const OpSample& s) {
  SCOPED_TRACE(s.op + " (" + s.label + ")");
  const OpDef* op = DefaultRegistry().Find(s.op);
  ASSERT_NE(op, nullptr);
  OpExecutor ctx(DefaultRegistry());
  std::vector<int> wrt;
  for (int i = 0; i < op->num_inputs(); ++i) {
    if (op->input_differentiable[i] && IsFloating(s.inputs[i].dtype())) {
      wrt.push_back(i);
    }
  }
  Tensors probe;
  ASSERT_TRUE(ctx.Execute(s.op, s.inputs, s.attrs, &probe).ok());
  const Tensor w = RandomTensor(probe[0].shape(), -1, 1, 7);
  std::vector<Tensor> u;
  for (size_t k = 0; k < wrt.size(); ++k) {
    u.push_back(RandomTensor(s.inputs[wrt[k]].shape(), -1, 1, 8 + k));
  }
  // First-order gradient d<w, op(x)>/dx on tape 2; recorded on tape 1 when
  // that one is active.
  auto first_order = [&](std::vector<Tensor> inputs) {
    EXPECT_TRUE(ctx.tapes().Push(2, false, false).ok());
    Tape* tape = *ctx.tapes().Find(2);
    std::vector<Tensor> sources;
    for (int i : wrt) {
      tape->Watch(inputs[i]);
      sources.push_back(inputs[i]);
    }
    Tensors out;
    EXPECT_TRUE(ctx.Execute(s.op, inputs, s.attrs, &out).ok());
    EXPECT_TRUE(ctx.tapes().Pop(2).ok());
    auto g = Gradient(ctx, *tape, {out[0]}, sources, {w}, Unconnected::kZero);
    EXPECT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE(ctx.tapes().Delete(2).ok());
    return g.ok() ? *g : std::vector<Tensor>(wrt.size());
  };
  auto project = [&](const std::vector<Tensor>& g) {
    double sum = 0;
    for (size_t k = 0; k < g.size(); ++k) {
      for (int64_t j = 0; j < g[k].num_elements(); ++j) {
        sum += g[k].ElementAsDouble(j) * u[k].ElementAsDouble(j);
      }
    }
    return sum;
  };
  std::vector<Tensor> inputs;
  for (const Tensor& t : s.inputs) inputs.push_back(ctx.Adopt(t));
  ASSERT_TRUE(ctx.tapes().Push(1, false, false).ok());
  Tape* outer = *ctx.tapes().Find(1);
  std::vector<Tensor> sources;
  for (int i : wrt) {
    outer->Watch(inputs[i]);
    sources.push_back(inputs[i]);
  }
  std::vector<Tensor> g = first_order(inputs);
  ASSERT_TRUE(ctx.tapes().Pop(1).ok());
  auto hvp = Gradient(ctx, *outer, g, sources, u, Unconnected::kZero);
  ASSERT_TRUE(hvp.ok()) << hvp.status();
  constexpr double kStep = 1e-6;
  for (size_t k = 0; k < wrt.size(); ++k) {
    const int i = wrt[k];
    for (int64_t j = 0; j < inputs[i].num_elements(); ++j) {
      auto value_at = [&](double delta) {
        std::vector<Tensor> moved = inputs;
        Tensor copy = Tensor::Empty(DType::kFloat64, inputs[i].shape()).value();
        copy.flat<double>() = inputs[i].flat<double>();
        copy.mutable_data<double>()[j] += delta;
        moved[i] = ctx.Adopt(copy);
        return project(first_order(moved));
      };
      const double numeric = (value_at(kStep) - value_at(-kStep)) / (2 * kStep);
      EXPECT_NEAR((*hvp)[k].ElementAsDouble(j), numeric,
                  1e-6 + 1e-6 * std::abs(numeric))
          << "input " << i << " element " << j;
    }
  }
}

}  // namespace testing

namespace {

using testing::Values;

class MathOpsTest : public testing::OpTest {
 protected:
  static Tensor D(Shape shape, std::vector<double> v) {
    return Tensor::FromVector<double>(shape, v);
  }
  static Tensor B(Shape shape, std::vector<bool> v) {
    return Tensor::FromVector<bool>(shape, v);
  }
  // ExpectInvalid with the mentions before the attrs (this file's calls).
  void ExpectInvalid(absl::string_view op, std::vector<Tensor> in,
                     std::vector<std::string> mentions, AttrMap attrs = {}) {
    OpTest::ExpectInvalid(op, std::move(in), std::move(attrs),
                          std::move(mentions));
  }
};

TEST_F(MathOpsTest, ComparisonsBroadcastToBool) {
  Tensor x = D({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor y = D({3}, {2, 2, 7});
  struct Case {
    const char* op;
    std::vector<double> expected;
  };
  for (const Case& c : std::vector<Case>{
           {"Equal", {0, 1, 0, 0, 0, 0}},
           {"NotEqual", {1, 0, 1, 1, 1, 1}},
           {"Greater", {0, 0, 0, 1, 1, 0}},
           {"GreaterEqual", {0, 1, 0, 1, 1, 0}},
           {"Less", {1, 0, 1, 0, 0, 1}},
           {"LessEqual", {1, 1, 1, 0, 0, 1}},
       }) {
    absl::StatusOr<Tensor> z = Run1(c.op, {x, y});
    ASSERT_TRUE(z.ok()) << z.status();
    EXPECT_EQ(z->dtype(), DType::kBool) << c.op;
    EXPECT_EQ(z->shape(), (Shape{2, 3})) << c.op;
    EXPECT_EQ(Values(*z), c.expected) << c.op;
  }
  // Outer broadcast, and a scalar on the left.
  absl::StatusOr<Tensor> z =
      Run1("Less", {D({2, 1}, {1, 5}), D({1, 3}, {0, 3, 6})});
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(z->shape(), (Shape{2, 3}));
  EXPECT_EQ(Values(*z), (std::vector<double>{0, 1, 1, 0, 0, 1}));
  z = Run1("Greater", {D({}, {2}), D({3}, {1, 2, 3})});
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(Values(*z), (std::vector<double>{1, 0, 0}));
}

TEST_F(MathOpsTest, EqualTakesIntsBoolsAndComplex) {
  absl::StatusOr<Tensor> z =
      Run1("Equal", {Tensor::FromVector<int64_t>({3}, {1, 2, 3}),
                     Tensor::Scalar<int64_t>(2)});
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(Values(*z), (std::vector<double>{0, 1, 0}));
  z = Run1("NotEqual", {B({2}, {true, false}), B({2}, {true, true})});
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(Values(*z), (std::vector<double>{0, 1}));
  z = Run1("Equal", {Tensor::FromVector<complex128>({2}, {{1, 2}, {1, 3}}),
                     Tensor::FromVector<complex128>({2}, {{1, 2}, {1, -3}})});
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(Values(*z), (std::vector<double>{1, 0}));
}

TEST_F(MathOpsTest, ComparisonErrors) {
  ExpectInvalid("Equal",
                {D({2, 3}, std::vector<double>(6)), D({4}, {1, 2, 3, 4})},
                {"[2,3]", "[4]"});
  ExpectInvalid("Less",
                {D({2}, {1, 2}), Tensor::FromVector<int32_t>({2}, {1, 2})},
                {"float64", "int32"});
  ExpectInvalid("Greater", {B({1}, {true}), B({1}, {false})}, {"bool"});
  ExpectInvalid(
      "GreaterEqual",
      {Tensor::Scalar<complex64>({1, 1}), Tensor::Scalar<complex64>({1, 1})},
      {"complex64"});
}

TEST_F(MathOpsTest, SelectElementwiseScalarAndVectorConditions) {
  Tensor t = D({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor e = D({2, 3}, {-1, -2, -3, -4, -5, -6});
  absl::StatusOr<Tensor> z = Run1(
      "Select", {B({2, 3}, {true, false, true, false, false, true}), t, e});
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(Values(*z), (std::vector<double>{1, -2, 3, -4, -5, 6}));
  z = Run1("Select", {B({2}, {false, true}), t, e});
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(z->shape(), (Shape{2, 3}));
  EXPECT_EQ(Values(*z), (std::vector<double>{-1, -2, -3, 4, 5, 6}));
  z = Run1("Select", {Tensor::Scalar<bool>(false), t, e});
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(Values(*z), Values(e));
  // Integers, and a rank-3 t chosen by rows.
  z = Run1("Select", {B({2}, {true, false}),
                      Tensor::FromVector<int32_t>({2, 1, 2}, {1, 2, 3, 4}),
                      Tensor::FromVector<int32_t>({2, 1, 2}, {5, 6, 7, 8})});
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(z->dtype(), DType::kInt32);
  EXPECT_EQ(Values(*z), (std::vector<double>{1, 2, 7, 8}));
}

TEST_F(MathOpsTest, SelectErrors) {
  Tensor t = D({2, 3}, std::vector<double>(6));
  ExpectInvalid("Select", {D({2, 3}, std::vector<double>(6)), t, t},
                {"condition", "bool", "float64[2,3]"});
  ExpectInvalid("Select", {B({3}, {true, true, true}), t, t},
                {"condition", "[3]", "[2,3]"});
  ExpectInvalid("Select", {B({1, 3}, {true, true, true}), t, t},
                {"[1,3]", "[2,3]"});
  ExpectInvalid("Select",
                {B({2}, {true, true}), t, D({3, 2}, std::vector<double>(6))},
                {"[2,3]", "[3,2]"});
  ExpectInvalid("Select",
                {B({2}, {true, true}), t,
                 Tensor::FromVector<int32_t>({2, 3}, std::vector<int32_t>(6))},
                {"float64", "int32"});
}

TEST_F(MathOpsTest, SelectGradientRoutesByCondition) {
  Tensor c = B({3}, {true, false, true});
  Tensor t = ctx_.Adopt(D({3}, {1, 2, 3}));
  Tensor e = ctx_.Adopt(D({3}, {4, 5, 6}));
  ASSERT_TRUE(ctx_.tapes().Push(1, false, false).ok());
  Tape* tape = *ctx_.tapes().Find(1);
  tape->Watch(t);
  tape->Watch(e);
  Tensors out;
  ASSERT_TRUE(ctx_.Execute("Select", {ctx_.Adopt(c), t, e}, {}, &out).ok());
  ASSERT_TRUE(ctx_.tapes().Pop(1).ok());
  auto grads = Gradient(ctx_, *tape, {out[0]}, {t, e}, {D({3}, {10, 20, 30})},
                        Unconnected::kNone);
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_EQ(Values((*grads)[0]), (std::vector<double>{10, 0, 30}));
  EXPECT_EQ(Values((*grads)[1]), (std::vector<double>{0, 20, 0}));
}

TEST_F(MathOpsTest, UnaryFunctionsMatchStd) {
  const std::vector<double> x = {-2.5, -0.75, -1e-9, 0.0, 0.3, 1.25, 2.0};
  struct Case {
    const char* op;
    std::function<double(double)> f;
  };
  auto sign = [](double v) { return static_cast<double>((v > 0) - (v < 0)); };
  for (const Case& c : std::vector<Case>{
           {"Abs", [](double v) { return std::abs(v); }},
           {"Sign", sign},
           {"Expm1", [](double v) { return std::expm1(v); }},
           {"Sin", [](double v) { return std::sin(v); }},
           {"Cos", [](double v) { return std::cos(v); }},
           {"Tan", [](double v) { return std::tan(v); }},
       }) {
    absl::StatusOr<Tensor> y = Run1(c.op, {D({7}, x)});
    ASSERT_TRUE(y.ok()) << y.status();
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_DOUBLE_EQ(y->ElementAsDouble(i), c.f(x[i])) << c.op << " " << x[i];
    }
  }
  const std::vector<double> p = {-0.5, -1e-10, 0.0, 0.25, 3.0};
  absl::StatusOr<Tensor> y = Run1("Log1p", {D({5}, p)});
  ASSERT_TRUE(y.ok()) << y.status();
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_DOUBLE_EQ(y->ElementAsDouble(i), std::log1p(p[i]));
  }
  for (const char* op : {"Reciprocal", "Inv"}) {
    y = Run1(op, {D({3}, {-4, 0.5, 8})});
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(Values(*y), (std::vector<double>{-0.25, 2, 0.125}));
  }
  // float32 goes through the same kernels.
  y = Run1("Sin", {Tensor::FromVector<float>({1}, {0.5f})});
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(y->dtype(), DType::kFloat32);
  EXPECT_FLOAT_EQ(y->data<float>()[0], std::sin(0.5f));
  // Abs and Sign take integers.
  y = Run1("Abs", {Tensor::FromVector<int32_t>({3}, {-3, 0, 2})});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(Values(*y), (std::vector<double>{3, 0, 2}));
  y = Run1("Sign", {Tensor::FromVector<int64_t>({3}, {-3, 0, 2})});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(Values(*y), (std::vector<double>{-1, 0, 1}));
}

TEST_F(MathOpsTest, ReciprocalTakesComplex) {
  const complex128 z(3, 4);
  absl::StatusOr<Tensor> y =
      Run1("Reciprocal", {Tensor::FromVector<complex128>({1}, {z})});
  ASSERT_TRUE(y.ok()) << y.status();
  const complex128 r = y->data<complex128>()[0];
  EXPECT_NEAR(r.real(), 0.12, 1e-15);
  EXPECT_NEAR(r.imag(), -0.16, 1e-15);
  // ReciprocalGrad(y, dy) = -dy * conj(y)^2 (TensorFlow's complex convention).
  const complex128 dy(0.5, -2);
  y = Run1("ReciprocalGrad", {Tensor::FromVector<complex128>({1}, {r}),
                              Tensor::FromVector<complex128>({1}, {dy})});
  ASSERT_TRUE(y.ok()) << y.status();
  const complex128 expected = -dy * std::conj(r) * std::conj(r);
  EXPECT_NEAR(std::abs(y->data<complex128>()[0] - expected), 0, 1e-15);
}

// TensorFlow's sign of a complex z: z / |z|, and 0 at 0.
TEST_F(MathOpsTest, SignOfComplexIsTheUnitPhase) {
  absl::StatusOr<Tensor> y =
      Run1("Sign", {Tensor::FromVector<complex128>({2}, {{3, -4}, {0, 0}})});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_NEAR(std::abs(y->data<complex128>()[0] - complex128(0.6, -0.8)), 0,
              1e-15);
  EXPECT_EQ(y->data<complex128>()[1], complex128(0, 0));
}

// SquaredDifference of complex: |x - y|^2, as TensorFlow's.
TEST_F(MathOpsTest, SquaredDifferenceOfComplexIsTheSquaredModulus) {
  absl::StatusOr<Tensor> y = Run1(
      "SquaredDifference", {Tensor::FromVector<complex128>({1}, {{1, 2}}),
                            Tensor::FromVector<complex128>({1}, {{0.5, -1}})});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_NEAR(std::abs(y->data<complex128>()[0] - complex128(9.25, 0)), 0,
              1e-15);
}

// BiasAdd and BiasAddGrad on complex: a plain add and sum per channel.
TEST_F(MathOpsTest, BiasAddTakesComplex) {
  using C = complex128;
  const Tensor v =
      Tensor::FromVector<C>({2, 2}, {{1, 1}, {2, 0}, {0, -1}, {3, 3}});
  const Tensor b = Tensor::FromVector<C>({2}, {{0, 1}, {-1, 0}});
  absl::StatusOr<Tensor> y = Run1("BiasAdd", {v, b});
  ASSERT_TRUE(y.ok()) << y.status();
  const std::vector<C> want = {{1, 2}, {1, 0}, {0, 0}, {2, 3}};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y->data<C>()[i], want[i]) << i;
  y = Run1("BiasAddGrad", {v});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->data<C>()[0], C(1, 0));
  EXPECT_EQ(y->data<C>()[1], C(5, 3));
}

TEST_F(MathOpsTest, ReciprocalGradOfZeroGradientIsZeroEvenAtInfinity) {
  absl::StatusOr<Tensor> y =
      Run1("ReciprocalGrad", {D({2}, {INFINITY, 2}), D({2}, {0, 1})});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(Values(*y), (std::vector<double>{0, -4}));
}

TEST_F(MathOpsTest, UnaryErrors) {
  ExpectInvalid("Sin", {Tensor::FromVector<int32_t>({2}, {1, 2})},
                {"int32[2]", "float32 or float64"});
  ExpectInvalid("Abs", {Tensor::Scalar<complex64>({1, 1})}, {"complex64"});
  ExpectInvalid("Reciprocal", {Tensor::FromVector<int64_t>({1}, {2})},
                {"int64[1]"});
  ExpectInvalid("ReciprocalGrad", {D({2}, {1, 2}), D({3}, {1, 2, 3})},
                {"[2]", "[3]"});
  ExpectInvalid("ReciprocalGrad",
                {D({1}, {1}), Tensor::FromVector<float>({1}, {1})},
                {"float64", "float32"});
}

TEST_F(MathOpsTest, MaximumMinimumSquaredDifferenceBroadcast) {
  Tensor x = D({2, 1}, {1, 5});
  Tensor y = D({3}, {0, 3, 6});
  absl::StatusOr<Tensor> z = Run1("Maximum", {x, y});
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(z->shape(), (Shape{2, 3}));
  EXPECT_EQ(Values(*z), (std::vector<double>{1, 3, 6, 5, 5, 6}));
  z = Run1("Minimum", {x, y});
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(Values(*z), (std::vector<double>{0, 1, 1, 0, 3, 5}));
  z = Run1("SquaredDifference", {x, y});
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(Values(*z), (std::vector<double>{1, 4, 25, 25, 4, 1}));
  z = Run1("Maximum", {Tensor::FromVector<int32_t>({2}, {-1, 4}),
                       Tensor::Scalar<int32_t>(0)});
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(z->dtype(), DType::kInt32);
  EXPECT_EQ(Values(*z), (std::vector<double>{0, 4}));
  ExpectInvalid("Maximum", {D({2, 3}, std::vector<double>(6)), D({2}, {1, 2})},
                {"[2,3]", "[2]"});
  ExpectInvalid("Minimum", {D({1}, {1}), Tensor::FromVector<int32_t>({1}, {1})},
                {"float64", "int32"});
  ExpectInvalid("SquaredDifference", {D({3}, {1, 2, 3}), D({2}, {1, 2})},
                {"[3]", "[2]"});
}

// Runs op on a watched x and returns d(sum(seed * op(x)))/dx.
class MathOpsGradTest : public MathOpsTest {
 protected:
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
};

TEST_F(MathOpsGradTest, MaximumTiesGoToX) {
  // As in TensorFlow: x >= y sends the gradient to x, so a tie goes to x
  // (Minimum: x <= y).
  for (const char* op : {"Maximum", "Minimum"}) {
    std::vector<Tensor> g = Grad(op, {D({3}, {1, 2, 3}), D({3}, {1, 0, 5})},
                                 {0, 1}, D({3}, {1, 1, 1}));
    ASSERT_EQ(g.size(), 2u);
    const bool max = std::string(op) == "Maximum";
    EXPECT_EQ(Values(g[0]),
              (std::vector<double>{1, max ? 1. : 0, max ? 0 : 1.}))
        << op;
    EXPECT_EQ(Values(g[1]),
              (std::vector<double>{0, max ? 0. : 1, max ? 1 : 0.}))
        << op;
  }
  // Broadcast y: its gradient sums over the broadcast axis.
  std::vector<Tensor> g =
      Grad("Maximum", {D({2, 2}, {1, 5, 3, 0}), D({2}, {2, 2})}, {0, 1},
           D({2, 2}, {1, 2, 3, 4}));
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(Values(g[0]), (std::vector<double>{0, 2, 3, 0}));
  EXPECT_EQ(Values(g[1]), (std::vector<double>{1, 4}));
}

TEST_F(MathOpsTest, L2LossAndProd) {
  absl::StatusOr<Tensor> y = Run1("L2Loss", {D({2, 2}, {1, -2, 3, 0.5})});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), Shape{});
  EXPECT_DOUBLE_EQ(y->ElementAsDouble(0), (1 + 4 + 9 + 0.25) / 2);
  ExpectInvalid("L2Loss", {Tensor::FromVector<int32_t>({1}, {1})}, {"int32"});

  Tensor x = D({2, 3, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  y = Run1("Prod", {x});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_DOUBLE_EQ(y->ElementAsDouble(0), 479001600.0);  // 12!
  y = Run1("Prod", {x}, {{"axis", std::vector<int64_t>{1}}});
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(y->shape(), (Shape{2, 2}));
  EXPECT_EQ(Values(*y), (std::vector<double>{15, 48, 693, 960}));
  y = Run1("Prod", {x},
           {{"axis", std::vector<int64_t>{0, -1}}, {"keep_dims", true}});
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(y->shape(), (Shape{1, 3, 1}));
  EXPECT_EQ(Values(*y), (std::vector<double>{1 * 2 * 7 * 8, 3 * 4 * 9 * 10,
                                             5 * 6 * 11 * 12}));
  y = Run1("Prod", {Tensor::FromVector<int32_t>({3}, {2, -3, 4})});
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(Values(*y), (std::vector<double>{-24}));
  ExpectInvalid("Prod", {x}, {"axis 3", "[2,3,2]"},
                {{"axis", std::vector<int64_t>{3}}});
}

// Prod and Cumprod on complex: (1+i)(2-i) = 3+i, (3+i) i = -1+3i.
TEST_F(MathOpsTest, ComplexProdAndCumprod) {
  const std::vector<complex128> z = {{1, 1}, {2, -1}, {0, 1}};
  absl::StatusOr<Tensor> y =
      Run1("Prod", {Tensor::FromVector<complex128>({3}, z)});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->data<complex128>()[0], complex128(-1, 3));
  // complex64, per column of [[1+i, 2-i], [i, 2]]: [(1+i) i, (2-i) 2].
  const std::vector<complex64> m = {{1, 1}, {2, -1}, {0, 1}, {2, 0}};
  y = Run1("Prod", {Tensor::FromVector<complex64>({2, 2}, m)},
           {{"axis", std::vector<int64_t>{0}}});
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(y->shape(), Shape{2});
  EXPECT_EQ(y->data<complex64>()[0], complex64(-1, 1));
  EXPECT_EQ(y->data<complex64>()[1], complex64(4, -2));

  y = Run1("Cumprod", {Tensor::FromVector<complex128>({3}, z)});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->data<complex128>()[0], complex128(1, 1));
  EXPECT_EQ(y->data<complex128>()[1], complex128(3, 1));
  EXPECT_EQ(y->data<complex128>()[2], complex128(-1, 3));
  // Exclusive, reverse: [(2-i) i, i, 1] = [1+2i, i, 1].
  y = Run1("Cumprod", {Tensor::FromVector<complex128>({3}, z)},
           {{"exclusive", true}, {"reverse", true}});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->data<complex128>()[0], complex128(1, 2));
  EXPECT_EQ(y->data<complex128>()[1], complex128(0, 1));
  EXPECT_EQ(y->data<complex128>()[2], complex128(1, 0));
}

// Central differences of sum(prod(x, axis)) at x, one element at a time.
std::vector<double> NumericProdGrad(const std::vector<double>& x, Shape shape,
                                    std::vector<int64_t> axis) {
  OpExecutor ctx(DefaultRegistry());
  std::vector<double> g;
  for (size_t k = 0; k < x.size(); ++k) {
    auto value = [&](double delta) {
      std::vector<double> moved = x;
      moved[k] += delta;
      Tensors out;
      EXPECT_TRUE(ctx.Execute("Prod",
                              {Tensor::FromVector<double>(shape, moved)},
                              {{"axis", axis}}, &out)
                      .ok());
      double sum = 0;
      for (int64_t i = 0; i < out[0].num_elements(); ++i) {
        sum += out[0].ElementAsDouble(i);
      }
      return sum;
    };
    g.push_back((value(1e-6) - value(-1e-6)) / 2e-6);
  }
  return g;
}

TEST_F(MathOpsGradTest, ProdGradientIsExactWithZeros) {
  // One zero in a group: only the zero gets a gradient (the product of the
  // others); two zeros: the whole group's gradient is 0. y / x would give
  // NaN in both cases.
  const std::vector<double> x = {2, 0, 3, -1.5, 0, 0, 4, 5};
  for (const std::vector<int64_t>& axis :
       {std::vector<int64_t>{1}, std::vector<int64_t>{0},
        std::vector<int64_t>{}}) {
    Tensor seed = Tensor::Filled(
                      DType::kFloat64,
                      axis.empty() ? Shape{} : Shape{axis[0] == 1 ? 4 : 2}, 1.0)
                      .value();
    std::vector<Tensor> g =
        Grad("Prod", {D({4, 2}, x)}, {0}, seed, {{"axis", axis}});
    ASSERT_EQ(g.size(), 1u);
    std::vector<double> numeric = NumericProdGrad(x, {4, 2}, axis);
    for (size_t k = 0; k < x.size(); ++k) {
      EXPECT_FALSE(std::isnan(g[0].ElementAsDouble(k)));
      EXPECT_NEAR(g[0].ElementAsDouble(k), numeric[k], 1e-6)
          << "axis size " << axis.size() << " element " << k;
    }
  }
  std::vector<Tensor> g =
      Grad("Prod", {D({4}, {2, 0, 3, 5})}, {0}, Tensor::Scalar<double>(1.0));
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(Values(g[0]), (std::vector<double>{0, 30, 0, 0}));
}

// Naive scans along axis 1 of a [rows, cols] matrix.
std::vector<double> NaiveScan(const std::vector<double>& x, int rows, int cols,
                              bool prod, bool exclusive, bool reverse) {
  std::vector<double> y(x.size());
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      double acc = prod ? 1 : 0;
      for (int k = 0; k < cols; ++k) {
        const bool before = reverse ? k > c : k < c;
        if (before || (!exclusive && k == c)) {
          acc = prod ? acc * x[r * cols + k] : acc + x[r * cols + k];
        }
      }
      y[r * cols + c] = acc;
    }
  }
  return y;
}

TEST_F(MathOpsTest, CumsumCumprodAllCombinations) {
  const std::vector<double> x = {1, 2, 3, 4, -1, 0.5, 2, 3};
  for (bool prod : {false, true}) {
    for (bool exclusive : {false, true}) {
      for (bool reverse : {false, true}) {
        for (int64_t axis : {1, -1}) {
          absl::StatusOr<Tensor> y = Run1(
              prod ? "Cumprod" : "Cumsum", {D({2, 4}, x)},
              {{"axis", axis}, {"exclusive", exclusive}, {"reverse", reverse}});
          ASSERT_TRUE(y.ok()) << y.status();
          EXPECT_EQ(Values(*y), NaiveScan(x, 2, 4, prod, exclusive, reverse))
              << prod << exclusive << reverse << axis;
        }
      }
    }
  }
  // Axis 0 of a [2, 4] = axis 1 of its transpose.
  absl::StatusOr<Tensor> y = Run1("Cumsum", {D({2, 2}, {1, 2, 3, 4})},
                                  {{"axis", int64_t{0}}, {"reverse", true}});
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(Values(*y), (std::vector<double>{4, 6, 3, 4}));
  // Integers and complex (Cumsum).
  y = Run1("Cumprod", {Tensor::FromVector<int64_t>({3}, {2, 3, 4})},
           {{"exclusive", true}});
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(Values(*y), (std::vector<double>{1, 2, 6}));
  y = Run1("Cumsum", {Tensor::FromVector<complex64>({2}, {{1, 1}, {2, -3}})});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->data<complex64>()[1], complex64(3, -2));
}

TEST_F(MathOpsTest, ScanErrors) {
  ExpectInvalid("Cumsum", {D({2, 3}, std::vector<double>(6))},
                {"axis 2", "[2,3]"}, {{"axis", int64_t{2}}});
  ExpectInvalid("Cumprod", {D({2, 3}, std::vector<double>(6))},
                {"axis -3", "[2,3]"}, {{"axis", int64_t{-3}}});
  ExpectInvalid("Cumsum", {D({}, {1})}, {"rank", "float64[]"});
  ExpectInvalid("Cumprod", {B({2}, {true, false})}, {"bool"});
  ExpectInvalid("Cumsum", {B({2}, {true, false})}, {"bool"});
  ExpectInvalid("Cumsum", {D({2}, {1, 2})}, {"exclusive", "bool"},
                {{"exclusive", int64_t{1}}});
}

TEST_F(MathOpsGradTest, CumsumGradientIsTheReverseScan) {
  for (bool exclusive : {false, true}) {
    for (bool reverse : {false, true}) {
      std::vector<Tensor> g =
          Grad("Cumsum", {D({1, 3}, {1, 2, 3})}, {0}, D({1, 3}, {1, 10, 100}),
               {{"axis", int64_t{1}},
                {"exclusive", exclusive},
                {"reverse", reverse}});
      ASSERT_EQ(g.size(), 1u);
      EXPECT_EQ(Values(g[0]),
                NaiveScan({1, 10, 100}, 1, 3, false, exclusive, !reverse));
    }
  }
}

// The ops whose backward TensorFlow's hand-written elision sets say needs no
// outputs / no inputs keep none here either.
TEST(MathOpsElision, MatchesTensorFlowSeedSets) {
  for (const char* name : {"Abs",     "Neg",      "ReciprocalGrad",
                           "Square",  "Expm1",    "Log",
                           "Log1p",   "TanhGrad", "SigmoidGrad",
                           "Sign",    "Sin",      "Cos",
                           "Tan",     "Add",      "Sub",
                           "Mul",     "Div",      "RealDiv",
                           "Maximum", "Minimum",  "SquaredDifference",
                           "Select",  "Sum",      "Prod",
                           "L2Loss",  "Cumsum",   "Cumprod"}) {
    const OpDef* op = DefaultRegistry().Find(name);
    ASSERT_NE(op, nullptr) << name;
    EXPECT_TRUE(op->saved_outputs.empty()) << name;
  }
  for (const char* name :
       {"Inv", "Reciprocal", "Sqrt", "Exp", "Tanh", "Sigmoid"}) {
    const OpDef* op = DefaultRegistry().Find(name);
    ASSERT_NE(op, nullptr) << name;
    EXPECT_TRUE(op->saved_inputs.empty()) << name;
  }
  // Less than the seed: Sign and Cumsum keep nothing at all; Select keeps
  // only the condition.
  for (const char* name : {"Sign", "Cumsum"}) {
    const OpDef* op = DefaultRegistry().Find(name);
    EXPECT_TRUE(op->saved_inputs.empty()) << name;
  }
  EXPECT_EQ(DefaultRegistry().Find("Select")->saved_inputs,
            std::vector<int>{0});
}

TEST(MathOpsSecondOrder, BackwardsAreDifferentiable) {
  const absl::flat_hash_set<std::string> ops = {"Abs",
                                                "Sign",
                                                "Expm1",
                                                "Log1p",
                                                "Sin",
                                                "Cos",
                                                "Tan",
                                                "Reciprocal",
                                                "Inv",
                                                "ReciprocalGrad",
                                                "Maximum",
                                                "Minimum",
                                                "SquaredDifference",
                                                "Select",
                                                "L2Loss",
                                                "Prod",
                                                "Cumsum",
                                                "Cumprod"};
  int checked = 0;
  for (const testing::OpSample& s : testing::AllOpSamples()) {
    // CheckSecondOrder differentiates float64 inputs only.
    if (!ops.contains(s.op) || IsComplex(s.inputs[0].dtype())) continue;
    testing::CheckSecondOrder(s);
    ++checked;
  }
  EXPECT_GE(checked, static_cast<int>(ops.size()));
}

}  // namespace
}  // namespace gradtape
