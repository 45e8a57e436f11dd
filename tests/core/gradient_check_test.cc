// The generic gradient check: every sample of every registered op, float64,
// the full Jacobian by central differences against the Jacobian the real
// tape computes (one row per non-persistent tape: record, then a gradient
// seeded with a one-hot output gradient).
#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/context.h"
#include "core/op_registry.h"
#include "gtest/gtest.h"
#include "tests/core/op_samples.h"

namespace gradtape {
namespace {

using testing::AllOpSamples;
using testing::OpSample;

Tensors RunOp(Context& ctx, const OpSample& s, const std::vector<Tensor>& in) {
  Tensors out;
  absl::Status status = ctx.Execute(s.op, in, s.attrs, &out);
  EXPECT_TRUE(status.ok()) << status;
  return out;
}

std::vector<int> DifferentiableInputs(const OpDef& op, const OpSample& s) {
  std::vector<int> idx;
  for (int i = 0; i < op.num_inputs(); ++i) {
    if (op.input_differentiable[i] && IsFloating(s.inputs[i].dtype())) {
      idx.push_back(i);
    }
  }
  return idx;
}

class GradientCheck : public ::testing::TestWithParam<OpSample> {};

TEST_P(GradientCheck, TapeJacobianMatchesCentralDifferences) {
  const OpSample& s = GetParam();
  const OpDef* op = DefaultRegistry().Find(s.op);
  ASSERT_NE(op, nullptr);
  Context ctx(DefaultRegistry());
  std::vector<Tensor> inputs;
  for (const Tensor& t : s.inputs) inputs.push_back(ctx.Adopt(t));
  Tensors base = RunOp(ctx, s, inputs);
  ASSERT_EQ(static_cast<int>(base.size()), op->num_outputs());
  if (!op->differentiable()) GTEST_SKIP() << s.op << " is not differentiable";
  const std::vector<int> wrt = DifferentiableInputs(*op, s);

  constexpr double kStep = 1e-6;
  for (int o = 0; o < op->num_outputs(); ++o) {
    if (!IsFloating(base[o].dtype())) continue;
    const int64_t rows = base[o].num_elements();
    for (int64_t j = 0; j < rows; ++j) {
      // Analytic row j of d(output o)/d(inputs) through a fresh tape.
      ASSERT_TRUE(ctx.tapes().Push(1, /*persistent=*/false, false).ok());
      Tape* tape = *ctx.tapes().Find(1);
      for (int i : wrt) tape->Watch(inputs[i]);
      Tensors out = RunOp(ctx, s, inputs);
      ASSERT_TRUE(ctx.tapes().Pop(1).ok());
      Tensors seeds(op->num_outputs());
      seeds[o] = Tensor::Zeros(out[o].dtype(), out[o].shape());
      seeds[o].mutable_data<double>()[j] = 1.0;
      std::vector<Tensor> sources;
      for (int i : wrt) sources.push_back(inputs[i]);
      absl::StatusOr<std::vector<Tensor>> grads = ctx.Gradient(
          *tape, {out[o]}, sources, {seeds[o]}, Unconnected::kZero);
      ASSERT_TRUE(grads.ok()) << grads.status();
      ASSERT_TRUE(ctx.tapes().Delete(1).ok());

      for (size_t w = 0; w < wrt.size(); ++w) {
        const int i = wrt[w];
        const Tensor& g = (*grads)[w];
        ASSERT_EQ(g.shape(), inputs[i].shape());
        for (int64_t k = 0; k < inputs[i].num_elements(); ++k) {
          // Numeric d(output o)[j] / d(input i)[k].
          auto value_at = [&](double delta) {
            std::vector<Tensor> moved = inputs;
            Tensor copy = Tensor::Empty(DType::kFloat64, inputs[i].shape());
            copy.flat<double>() = inputs[i].flat<double>();
            copy.mutable_data<double>()[k] += delta;
            moved[i] = copy;
            return RunOp(ctx, s, moved)[o].ElementAsDouble(j);
          };
          const double numeric =
              (value_at(kStep) - value_at(-kStep)) / (2 * kStep);
          const double analytic = g.ElementAsDouble(k);
          EXPECT_NEAR(analytic, numeric, 1e-6 + 1e-6 * std::abs(numeric))
              << s.op << " (" << s.label << "): d out" << o << "[" << j
              << "] / d in" << i << "[" << k << "]";
        }
      }
    }
  }
}

std::string SampleName(const ::testing::TestParamInfo<OpSample>& info) {
  std::string name = absl::StrCat(info.param.op, "_", info.index);
  return name;
}

INSTANTIATE_TEST_SUITE_P(AllOps, GradientCheck,
                         ::testing::ValuesIn(AllOpSamples()), SampleName);

TEST(GradientCheckCoverage, EveryRegisteredOpHasASample) {
  absl::flat_hash_set<std::string> sampled;
  for (const OpSample& s : AllOpSamples()) sampled.insert(s.op);
  for (const auto& op : DefaultRegistry().ops()) {
    EXPECT_TRUE(sampled.contains(op->name))
        << op->name << " has no sample in tests/core/op_samples.cc, so its "
        << "gradient is not checked";
  }
}

TEST(GradientCheckCoverage, EverySampleNamesARegisteredOp) {
  for (const OpSample& s : AllOpSamples()) {
    EXPECT_NE(DefaultRegistry().Find(s.op), nullptr) << s.op;
  }
}

}  // namespace
}  // namespace gradtape
