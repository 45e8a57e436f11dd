// Second-order gradients: for the elementwise and matmul ops, the gradient
// computed under an outer tape is itself differentiated, and the result
// matches central differences of the first-order gradient.
//
// With G(X) = d<w, f(X)>/dX (first order, through a tape), the check is
//   d<u, G(X)>/dX  (outer tape, output gradients u)
//   == (<u, G(X + h e_k)> - <u, G(X - h e_k)>) / 2h   for every element k.
#include <cmath>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/autodiff/gradient.h"
#include "core/autodiff/op_executor.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "gtest/gtest.h"
#include "tests/core/autodiff/second_order_check.h"
#include "tests/core/ops/op_samples.h"

namespace gradtape {
namespace {

using testing::AllOpSamples;
using testing::ExpectSecondOrderMatchesDifferences;
using testing::OpSample;
using testing::Weights;

// The ops whose backward must itself be differentiable.
const absl::flat_hash_set<std::string>& SecondOrderOps() {
  static const auto* ops =
      new absl::flat_hash_set<std::string>{"AddV2",         "Add",
                                           "Sub",           "Mul",
                                           "RealDiv",       "Div",
                                           "Neg",           "Square",
                                           "Sqrt",          "Exp",
                                           "Log",           "Tanh",
                                           "Sigmoid",       "Relu",
                                           "MatMul",        "Abs",
                                           "Expm1",         "Log1p",
                                           "Sin",           "Cos",
                                           "Tan",           "Inv",
                                           "Reciprocal",    "Maximum",
                                           "Minimum",       "SquaredDifference",
                                           "Elu",           "Selu",
                                           "Softplus",      "Softsign",
                                           "Relu6",         "Softmax",
                                           "LogSoftmax",    "BiasAdd",
                                           "BatchMatMul",   "BatchMatMulV2",
                                           "Sum",           "Mean",
                                           "Identity",      "SqrtGrad",
                                           "TanhGrad",      "SigmoidGrad",
                                           "ReciprocalGrad"};
  return *ops;
}

class SecondOrder : public ::testing::TestWithParam<OpSample> {};

TEST_P(SecondOrder, GradientOfGradientMatchesDifferences) {
  const OpSample& s = GetParam();
  const OpDef* op = DefaultRegistry().Find(s.op);
  ASSERT_NE(op, nullptr);
  OpExecutor ctx(DefaultRegistry());
  std::vector<Tensor> x;
  for (const Tensor& t : s.inputs) x.push_back(ctx.Adopt(t));
  std::vector<int> wrt;
  for (int i = 0; i < op->num_inputs(); ++i) {
    if (op->input_differentiable[i] && IsFloating(x[i].dtype())) {
      wrt.push_back(i);
    }
  }
  Tensors probe;
  ASSERT_TRUE(ctx.Execute(*op, x, s.attrs, &probe).ok());
  const Tensor w = Weights(probe[0], 1);

  // First-order gradients at `in`; with `outer`, recorded on tape 1.
  auto first_order = [&](const std::vector<Tensor>& in, bool outer) {
    std::vector<Tensor> sources;
    for (int i : wrt) sources.push_back(in[i]);
    if (outer) {
      EXPECT_TRUE(ctx.tapes().Push(1, false, false).ok());
      for (const Tensor& t : sources) (*ctx.tapes().Find(1))->Watch(t);
    }
    EXPECT_TRUE(ctx.tapes().Push(2, false, false).ok());
    for (const Tensor& t : sources) (*ctx.tapes().Find(2))->Watch(t);
    Tensors out;
    EXPECT_TRUE(ctx.Execute(*op, in, s.attrs, &out).ok());
    EXPECT_TRUE(ctx.tapes().Pop(2).ok());
    auto g = Gradient(ctx, **ctx.tapes().Find(2), {out[0]}, sources, {w},
                      Unconnected::kZero);
    EXPECT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE(ctx.tapes().Delete(2).ok());
    if (outer) {
      EXPECT_TRUE(ctx.tapes().Pop(1).ok());
    }
    return g.ok() ? *g : std::vector<Tensor>();
  };

  std::vector<Tensor> g = first_order(x, /*outer=*/true);
  ASSERT_EQ(g.size(), wrt.size());
  std::vector<Tensor> u;
  for (size_t i = 0; i < g.size(); ++i) u.push_back(Weights(g[i], 3 + i));
  std::vector<Tensor> sources;
  for (int i : wrt) sources.push_back(x[i]);
  auto h =
      Gradient(ctx, **ctx.tapes().Find(1), g, sources, u, Unconnected::kZero);
  ASSERT_TRUE(h.ok()) << s.op << ": " << h.status();
  ASSERT_TRUE(ctx.tapes().Delete(1).ok());

  ExpectSecondOrderMatchesDifferences(
      ctx, x, wrt, u, *h,
      [&](const std::vector<Tensor>& in) { return first_order(in, false); },
      absl::StrCat(s.op, " (", s.label, ")"));
}

std::vector<OpSample> SecondOrderSamples() {
  std::vector<OpSample> out;
  for (const OpSample& s : AllOpSamples()) {
    // Real samples only: the first-order check covers the complex ones.
    bool real = true;
    for (const Tensor& t : s.inputs) real = real && !IsComplex(t.dtype());
    if (SecondOrderOps().contains(s.op) && real) out.push_back(s);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(ElementwiseAndMatMul, SecondOrder,
                         ::testing::ValuesIn(SecondOrderSamples()),
                         [](const ::testing::TestParamInfo<OpSample>& info) {
                           return info.param.op + "_" +
                                  std::to_string(info.index);
                         });

}  // namespace
}  // namespace gradtape
