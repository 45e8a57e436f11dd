// Higher-order gradients by nesting tapes, and the ops whose gradient is
// deliberately missing: they fail with UNIMPLEMENTED instead of giving a
// silently wrong None.
#include "absl/strings/match.h"
#include "core/ops/ops.h"
#include "tests/core/autodiff/autodiff_fixture.h"

namespace gradtape::testing {
namespace {

using ::absl::StatusCode;

class HigherOrderTest : public AutodiffTest {
 protected:
  static constexpr int kN = 3;
};

// H = d/dx (d/dx sum(tanh(W x))) through two tapes, compared with central
// differences of the first-order gradient.
TEST_F(HigherOrderTest, HessianOfSumTanhWxMatchesFiniteDifferences) {
  Put(1, {2, kN}, Wave(2 * kN, 7));
  const std::vector<double> x = Wave(kN, 8);
  Put(2, {kN, 1}, x);
  ASSERT_TRUE(Push(100, /*persistent=*/true).ok());
  ASSERT_TRUE(Watch(100, {2}).ok());
  ASSERT_TRUE(Push(101).ok());
  ASSERT_TRUE(Watch(101, {2}).ok());
  Exec("MatMul", {1, 2}, {3});
  Exec("Tanh", {3}, {4});
  Exec("Sum", {4}, {5});
  ASSERT_TRUE(Pop(101).ok());
  ASSERT_TRUE(Grad(101, {5}, {2}, {6}).ok());  // recorded on tape 100
  ASSERT_TRUE(Pop(100).ok());
  auto h = Jac(100, 6, {2}, {7});
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(ShapeOf(7), (Shape{kN, 1, kN, 1}));
  const std::vector<double> hessian = Values(7);

  constexpr double kStep = 1e-5;
  for (int k = 0; k < kN; ++k) {
    std::vector<double> plus = x, minus = x;
    plus[k] += kStep;
    minus[k] -= kStep;
    const std::vector<double> gp = GradientAt(plus), gm = GradientAt(minus);
    for (int i = 0; i < kN; ++i) {
      const double numeric = (gp[i] - gm[i]) / (2 * kStep);
      EXPECT_NEAR(hessian[i * kN + k], numeric, 1e-7) << i << "," << k;
    }
  }
  // Symmetric, as a Hessian must be.
  for (int i = 0; i < kN; ++i) {
    for (int k = 0; k < i; ++k) {
      EXPECT_NEAR(hessian[i * kN + k], hessian[k * kN + i], 1e-12);
    }
  }
}

TEST_F(HigherOrderTest, PreventGradientFailsWithUnimplemented) {
  Put(1, {2}, {0.5, 1.5});
  ASSERT_TRUE(Push(10).ok());
  ASSERT_TRUE(Watch(10, {1}).ok());
  Exec("PreventGradient", {1}, {2}, {{"message", std::string("keep out")}});
  Exec("Exp", {2}, {3});
  ASSERT_TRUE(Pop(10).ok());
  EXPECT_EQ(Values(2), (std::vector<double>{0.5, 1.5}));
  auto g = Grad(10, {3}, {1}, {4});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kUnimplemented);
  for (const char* part : {"PreventGradient", "explicitly disabled", "keep out",
                           "Gradient (command"}) {
    EXPECT_TRUE(absl::StrContains(g.status().message(), part))
        << part << ": " << g.status();
  }
  EXPECT_EQ(Fetch(4).status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(HigherOrderTest, StopGradientCarriesNoGradient) {
  // y = x * stop(x): dy/dx = stop(x) = x, not 2x.
  Put(1, {2}, {0.5, -2.0});
  ASSERT_TRUE(Push(10, true).ok());
  ASSERT_TRUE(Watch(10, {1}).ok());
  Exec("StopGradient", {1}, {2});
  Exec("Mul", {1, 2}, {3});
  ASSERT_TRUE(Pop(10).ok());
  ASSERT_TRUE(Grad(10, {3}, {1}, {4}).ok());
  EXPECT_EQ(Values(4), (std::vector<double>{0.5, -2.0}));
  auto none = Grad(10, {2}, {1}, {5});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE((*none)[0].valid());
}

// A backward that is not itself differentiable: the first-order gradient
// works, the second order fails with UNIMPLEMENTED naming the op (here a
// custom gradient whose program runs PreventGradient; no registered op's
// backward is non-differentiable today).
TEST_F(HigherOrderTest, UnsupportedSecondOrderIsAClearError) {
  Put(1, {2}, {0.5, 1.5});
  ASSERT_TRUE(Push(100, true).ok());
  ASSERT_TRUE(Watch(100, {1}).ok());
  ASSERT_TRUE(Push(101).ok());
  ASSERT_TRUE(Watch(101, {1}).ok());
  // y = square(x) with the backward dx = 2 PreventGradient(dy x).
  GradientProgram p;
  GradientRef up{GradientRef::kUpstream, 0};
  GradientRef in{GradientRef::kInput, 0};
  p.steps.push_back({"Mul", {up, in}, {}});
  p.steps.push_back(
      {"PreventGradient", {GradientRef{GradientRef::kStep, 0}}, {}});
  p.steps.push_back(
      {"AddV2",
       {GradientRef{GradientRef::kStep, 1}, GradientRef{GradientRef::kStep, 1}},
       {}});
  p.input_grads.push_back(GradientRef{GradientRef::kStep, 2});
  ASSERT_TRUE(
      session_.ExecuteOpWithGradient(++seq_, "Square", {1}, {2}, {}, p).ok());
  ASSERT_TRUE(Pop(101).ok());
  ASSERT_TRUE(Grad(101, {2}, {1}, {3}).ok());
  EXPECT_EQ(Values(3), (std::vector<double>{1.0, 3.0}));
  ASSERT_TRUE(Pop(100).ok());
  auto second = Grad(100, {3}, {1}, {4});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(second.status().message(), "PreventGradient"))
      << second.status();
}

TEST(BackwardUnsupportedTest, RegistryMarksAndRecordsTheOp) {
  const OpDef* op = DefaultRegistry().Find("PreventGradient");
  ASSERT_NE(op, nullptr);
  EXPECT_TRUE(op->differentiable());  // recorded
  EXPECT_FALSE(op->backward_supported());
  EXPECT_FALSE(op->backward_unsupported.empty());
  // Ops whose outputs carry no gradient stay NotDifferentiable.
  for (const char* name : {"StopGradient", "Shape", "Equal", "OneHot",
                           "VarHandleOp", "ZerosLike"}) {
    const OpDef* nd = DefaultRegistry().Find(name);
    ASSERT_NE(nd, nullptr) << name;
    EXPECT_FALSE(nd->differentiable()) << name;
  }
}

}  // namespace
}  // namespace gradtape::testing
