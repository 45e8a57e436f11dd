// The generic gradient check: every sample of every registered op, float64,
// the full Jacobian by central differences against the Jacobian the real
// tape computes (one row per non-persistent tape: record, then a gradient
// seeded with a one-hot output gradient).
#include <cmath>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/autodiff/gradient.h"
#include "core/autodiff/op_executor.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "gtest/gtest.h"
#include "tests/core/ops/op_samples.h"

namespace gradtape {
namespace {

using testing::AllOpSamples;
using testing::OpSample;

Tensors RunOp(OpExecutor& ctx, const OpSample& s,
              const std::vector<Tensor>& in) {
  Tensors out;
  absl::Status status = ctx.Execute(s.op, in, s.attrs, &out);
  EXPECT_TRUE(status.ok()) << status;
  return out;
}

std::vector<int> DifferentiableInputs(const OpDef& op, const OpSample& s) {
  std::vector<int> idx;
  for (int i = 0; i < op.num_inputs(); ++i) {
    // Variable handles cannot be perturbed (variable_ops_test covers them).
    const DType dtype = s.inputs[i].dtype();
    if (op.input_differentiable[i] && IsTrainable(dtype) &&
        dtype != DType::kResource) {
      idx.push_back(i);
    }
  }
  return idx;
}

// Element k of a float64 or complex128 tensor as a complex number.
complex128 At(const Tensor& t, int64_t k) {
  if (t.dtype() == DType::kComplex128) return t.data<complex128>()[k];
  return t.ElementAsDouble(k);
}

// A copy of `t` with `delta` added to element k (real part, or the
// imaginary part when `imag`).
Tensor Perturbed(const Tensor& t, int64_t k, double delta, bool imag) {
  Tensor copy = Tensor::Empty(t.dtype(), t.shape()).value();
  std::memcpy(copy.raw_mutable_data(), t.raw_data(), t.num_bytes());
  if (t.dtype() == DType::kComplex128) {
    copy.mutable_data<complex128>()[k] += imag ? complex128(0, delta) : delta;
  } else {
    copy.mutable_data<double>()[k] += delta;
  }
  return copy;
}

class GradientCheck : public ::testing::TestWithParam<OpSample> {};

// For real loss L, the tape's gradient of a real input is dL/dx and of a
// complex input dL/dx + i dL/dy (TensorFlow's convention). Each row of the
// Jacobian is one L: L = out[j] for a real output; L = Re(out[j]) (seed 1)
// or Im(out[j]) (seed i) for a complex one.
TEST_P(GradientCheck, TapeJacobianMatchesCentralDifferences) {
  const OpSample& s = GetParam();
  const std::shared_ptr<const OpDef> op_def = testing::SampleOpDef(s);
  const OpDef* op = op_def.get();
  ASSERT_NE(op, nullptr);
  OpExecutor ctx(DefaultRegistry());
  std::vector<Tensor> inputs;
  for (const Tensor& t : s.inputs) inputs.push_back(ctx.Adopt(t));
  Tensors base = RunOp(ctx, s, inputs);
  ASSERT_EQ(static_cast<int>(base.size()), op->num_outputs());
  if (!op->differentiable()) GTEST_SKIP() << s.op << " is not differentiable";
  const std::vector<int> wrt = DifferentiableInputs(*op, s);
  if (!op->backward_supported()) {
    // Recorded, and a gradient through it is a clear error, not a None.
    ASSERT_TRUE(ctx.tapes().Push(1, /*persistent=*/false, false).ok());
    for (int i : wrt) (*ctx.tapes().Find(1))->Watch(inputs[i]);
    Tensors out = RunOp(ctx, s, inputs);
    ASSERT_TRUE(ctx.tapes().Pop(1).ok());
    EXPECT_EQ((*ctx.tapes().Find(1))->num_entries(), 1u);
    std::vector<Tensor> sources;
    for (int i : wrt) sources.push_back(inputs[i]);
    absl::StatusOr<std::vector<Tensor>> grads = Gradient(
        ctx, **ctx.tapes().Find(1), {out[0]}, sources, {}, Unconnected::kNone);
    ASSERT_FALSE(grads.ok()) << s.op;
    EXPECT_EQ(grads.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_NE(grads.status().message().find(s.op), std::string::npos)
        << grads.status();
    EXPECT_NE(grads.status().message().find(op->backward_unsupported),
              std::string::npos)
        << grads.status();
    return;
  }

  constexpr double kStep = 1e-6;
  for (int o = 0; o < op->num_outputs(); ++o) {
    if (!IsTrainable(base[o].dtype())) continue;
    const bool complex_out = IsComplex(base[o].dtype());
    for (int64_t j = 0; j < base[o].num_elements(); ++j) {
      for (int part = 0; part < (complex_out ? 2 : 1); ++part) {
        // Analytic row through a fresh non-persistent tape.
        ASSERT_TRUE(ctx.tapes().Push(1, /*persistent=*/false, false).ok());
        Tape* tape = *ctx.tapes().Find(1);
        for (int i : wrt) tape->Watch(inputs[i]);
        Tensors out = RunOp(ctx, s, inputs);
        ASSERT_TRUE(ctx.tapes().Pop(1).ok());
        Tensor seed = Tensor::Zeros(out[o].dtype(), out[o].shape()).value();
        if (complex_out) {
          seed.mutable_data<complex128>()[j] =
              part == 0 ? complex128(1, 0) : complex128(0, 1);
        } else {
          seed.mutable_data<double>()[j] = 1.0;
        }
        std::vector<Tensor> sources;
        for (int i : wrt) sources.push_back(inputs[i]);
        absl::StatusOr<std::vector<Tensor>> grads =
            Gradient(ctx, *tape, {out[o]}, sources, {seed}, Unconnected::kZero);
        ASSERT_TRUE(grads.ok()) << grads.status();
        ASSERT_TRUE(ctx.tapes().Delete(1).ok());

        auto loss = [&](const std::vector<Tensor>& in) {
          complex128 v = At(RunOp(ctx, s, in)[o], j);
          return part == 0 ? v.real() : v.imag();
        };
        for (size_t w = 0; w < wrt.size(); ++w) {
          const int i = wrt[w];
          const Tensor& g = (*grads)[w];
          ASSERT_EQ(g.shape(), inputs[i].shape());
          ASSERT_EQ(g.dtype(), inputs[i].dtype());
          const bool complex_in = IsComplex(inputs[i].dtype());
          for (int64_t k = 0; k < inputs[i].num_elements(); ++k) {
            for (int in_part = 0; in_part < (complex_in ? 2 : 1); ++in_part) {
              std::vector<Tensor> plus = inputs, minus = inputs;
              plus[i] = Perturbed(inputs[i], k, kStep, in_part == 1);
              minus[i] = Perturbed(inputs[i], k, -kStep, in_part == 1);
              const double numeric = (loss(plus) - loss(minus)) / (2 * kStep);
              const complex128 a = At(g, k);
              const double analytic = in_part == 0 ? a.real() : a.imag();
              EXPECT_NEAR(analytic, numeric, 1e-6 + 1e-6 * std::abs(numeric))
                  << s.op << " (" << s.label << "): d "
                  << (complex_out ? (part ? "Im " : "Re ") : "") << "out" << o
                  << "[" << j << "] / d " << (in_part ? "Im " : "") << "in" << i
                  << "[" << k << "]";
            }
          }
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
        << op->name << " has no sample in tests/core/ops/op_samples.cc, so its "
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
