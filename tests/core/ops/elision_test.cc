// Elision: the tape keeps exactly what each op declares, and a backward that
// reads anything else fails instead of silently keeping it.
#include <cstring>
#include <limits>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/autodiff/grad_context.h"
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

class Elision : public ::testing::TestWithParam<OpSample> {};

TEST_P(Elision, TapeEntryHoldsExactlyTheDeclaredTensors) {
  const OpSample& s = GetParam();
  const std::shared_ptr<const OpDef> op_def = testing::SampleOpDef(s);
  const OpDef* op = op_def.get();
  ASSERT_NE(op, nullptr);
  if (!op->differentiable()) GTEST_SKIP() << s.op << " is not recorded";
  if (!op->backward_supported()) {
    GTEST_SKIP() << s.op << " has no backward (BackwardUnsupported)";
  }
  OpExecutor ctx(DefaultRegistry());
  std::vector<Tensor> inputs;
  for (const Tensor& t : s.inputs) inputs.push_back(ctx.Adopt(t));
  ASSERT_TRUE(ctx.tapes().Push(1, false, false).ok());
  Tape* tape = *ctx.tapes().Find(1);
  for (const Tensor& t : inputs) {
    if (IsTrainable(t.dtype())) tape->Watch(t);
  }
  Tensors out;
  ASSERT_TRUE(ctx.Execute(*op, inputs, s.attrs, &out).ok());
  ASSERT_EQ(tape->num_entries(), 1u);
  const TapeEntry& e = *tape->FindEntry(0);
  for (int i = 0; i < op->num_inputs(); ++i) {
    EXPECT_EQ(e.saved_inputs[i].valid(), op->input_saved[i])
        << s.op << " input " << i;
    if (op->input_saved[i]) {
      EXPECT_TRUE(e.saved_inputs[i].SharesBufferWith(inputs[i]));
    }
    EXPECT_EQ(e.inputs[i].shape, inputs[i].shape());
  }
  int64_t expected_bytes = 0;
  for (int i = 0; i < op->num_outputs(); ++i) {
    EXPECT_EQ(e.saved_outputs[i].valid(), op->output_saved[i])
        << s.op << " output " << i;
    if (op->output_saved[i]) {
      EXPECT_TRUE(e.saved_outputs[i].SharesBufferWith(out[i]));
      expected_bytes += out[i].num_bytes();
    }
  }
  for (int i = 0; i < op->num_inputs(); ++i) {
    if (op->input_saved[i]) expected_bytes += inputs[i].num_bytes();
  }
  EXPECT_EQ(tape->SavedBytes(), expected_bytes);
}

INSTANTIATE_TEST_SUITE_P(AllOps, Elision, ::testing::ValuesIn(AllOpSamples()),
                         [](const ::testing::TestParamInfo<OpSample>& info) {
                           return info.param.op + "_" +
                                  std::to_string(info.index);
                         });

// An Exp whose registration forgets that its backward reads the output.
void RegisterBrokenExp(OpRegistry& r) {
  const OpDef* exp = DefaultRegistry().Find("Exp");
  r.Add(Op("ExpMissingSave")
            .Inputs({"x"})
            .Outputs({"y"})
            .Forward(exp->forward)
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Mul(g.Grad(0), g.Output(0)));
            }));
}

TEST(ElisionEnforcement, BackwardReadingAnUndeclaredTensorFails) {
  OpRegistry registry;
  RegisterAllOps(registry);
  RegisterBrokenExp(registry);
  OpExecutor ctx(registry);
  Tensor x = ctx.Adopt(Tensor::FromVector<double>({2}, {0.5, 1.5}));
  ASSERT_TRUE(ctx.tapes().Push(1, false, false).ok());
  (*ctx.tapes().Find(1))->Watch(x);
  Tensors y;
  ASSERT_TRUE(ctx.Execute("ExpMissingSave", {x}, {}, &y).ok());
  EXPECT_EQ((*ctx.tapes().Find(1))->SavedBytes(), 0);
  auto grads =
      Gradient(ctx, **ctx.tapes().Find(1), {y[0]}, {x}, {}, Unconnected::kNone);
  ASSERT_FALSE(grads.ok());
  EXPECT_EQ(grads.status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StrContains(grads.status().message(),
                                "read output 0 (y) which its registration "
                                "does not save"))
      << grads.status();
}

TEST(ElisionEnforcement, OpsTheSeedSaysNeedNoInputsKeepNone) {
  // TensorFlow's hand-written set of ops whose backward needs no inputs; the
  // ones gradtape has must declare no saved inputs (SSCE keeps its int
  // labels, for the second-order term, which is the one exception).
  for (const char* name : {"Identity", "Softmax", "LogSoftmax", "BiasAdd",
                           "Relu", "Neg", "Sqrt", "Exp", "Tanh", "Sigmoid"}) {
    const OpDef* op = DefaultRegistry().Find(name);
    ASSERT_NE(op, nullptr) << name;
    EXPECT_TRUE(op->saved_inputs.empty()) << name;
  }
  // ... and whose backward needs no outputs.
  for (const char* name :
       {"Identity", "MatMul", "BiasAdd", "Sum", "Neg", "Square", "Log", "Add",
        "Sub", "Mul", "Div", "RealDiv", "Cast", "TanhGrad", "SigmoidGrad",
        "BiasAddGrad"}) {
    const OpDef* op = DefaultRegistry().Find(name);
    ASSERT_NE(op, nullptr) << name;
    EXPECT_TRUE(op->saved_outputs.empty()) << name;
  }
}

}  // namespace
}  // namespace gradtape

namespace gradtape {
namespace {

// A copy of `t` that no backward could use unchanged: NaN for floating and
// complex, every element + 1 for integers, flipped for bool.
Tensor Spoiled(const Tensor& t) {
  Tensor s = Tensor::Empty(t.dtype(), t.shape()).value();
  DispatchFloat(t.dtype(), [&](auto zero) {
    using T = decltype(zero);
    s.flat<T>().setConstant(std::numeric_limits<T>::quiet_NaN());
  });
  DispatchComplex(t.dtype(), [&](auto zero) {
    using C = decltype(zero);
    using T = typename C::value_type;
    s.flat<C>().setConstant(C(std::numeric_limits<T>::quiet_NaN(), 0));
  });
  if (t.dtype() == DType::kInt32 || t.dtype() == DType::kInt64) {
    DispatchNumeric(t.dtype(), [&](auto zero) {
      using T = decltype(zero);
      s.flat<T>() = t.flat<T>() + T(1);
    });
  }
  if (t.dtype() == DType::kBool) {
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      s.mutable_data<bool>()[i] = !t.data<bool>()[i];
    }
  }
  return s;
}

// Runs the op's backward on `entry` with random output gradients for every
// trainable output; returns the input gradients (empty on failure).
std::optional<Tensors> RunBackward(OpExecutor& ctx, const TapeEntry& entry) {
  // Distinct values, so that routing or gathering gradients shows.
  Tensors grads;
  for (size_t j = 0; j < entry.outputs.size(); ++j) {
    const TensorMeta& m = entry.outputs[j];
    if (!IsFloating(m.dtype) && !IsComplex(m.dtype)) {
      grads.push_back(Tensor());
      continue;
    }
    Tensor seed = Tensor::Empty(m.dtype, m.shape).value();
    for (int64_t k = 0; k < seed.num_elements(); ++k) {
      const double v = 0.5 + 0.37 * ((k * 7 + j * 3) % 11);
      DispatchFloat(m.dtype, [&](auto zero) {
        seed.mutable_data<decltype(zero)>()[k] = v;
      });
      DispatchComplex(m.dtype, [&](auto zero) {
        using C = decltype(zero);
        seed.mutable_data<C>()[k] = C(v, 0.25 * v);
      });
    }
    grads.push_back(seed);
  }
  std::vector<bool> needs(entry.inputs.size());
  for (size_t i = 0; i < needs.size(); ++i) {
    needs[i] =
        entry.op->input_differentiable[i] && IsTrainable(entry.inputs[i].dtype);
  }
  GradContext g(ctx, entry, grads, needs);
  g.RunBackward();
  if (!g.ok()) return std::nullopt;
  return g.input_grads();
}

bool SameValues(const Tensors& a, const Tensors& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].valid() != b[i].valid()) return false;
    if (!a[i].valid()) continue;
    if (a[i].shape() != b[i].shape() || a[i].num_bytes() != b[i].num_bytes()) {
      return false;
    }
    // Byte equality: NaN anywhere differs from the finite baseline.
    if (std::memcmp(a[i].raw_data(), b[i].raw_data(), a[i].num_bytes()) != 0) {
      return false;
    }
  }
  return true;
}

// Declared tensors a backward may not read for the samples' output
// gradients, each with the reason it must still be kept.
const absl::flat_hash_map<std::string, std::string>& AllowedWaste() {
  static const auto* allowed =
      new absl::flat_hash_map<std::string, std::string>{
          // "<op> input <i>" | "<op> output <j>" -> why it is kept anyway.
          {"BatchNormWithGlobalNormalization input 4",
           "gamma is read only when scale_after_normalization is true; a "
           "declaration cannot depend on attrs"},
          {"BatchNormWithGlobalNormalizationGrad input 3",
           "gamma is read only when scale_after_normalization is true; a "
           "declaration cannot depend on attrs"},
      };
  return *allowed;
}

// Spoils each declared tensor in turn, for every sample of the op: the
// gradient must change (or the backward fail) for at least one sample.
// Otherwise the declaration keeps a tensor for nothing.
TEST(ElisionMinimal, EveryDeclaredTensorIsRead) {
  // "<op> input <i>" -> read by some sample's backward.
  absl::flat_hash_map<std::string, bool> read;
  for (const OpSample& s : AllOpSamples()) {
    const std::shared_ptr<const OpDef> op_def = testing::SampleOpDef(s);
    const OpDef* op = op_def.get();
    ASSERT_NE(op, nullptr);
    if (!op->backward_supported()) continue;
    OpExecutor ctx(DefaultRegistry());
    std::vector<Tensor> inputs;
    for (const Tensor& t : s.inputs) inputs.push_back(ctx.Adopt(t));
    ASSERT_TRUE(ctx.tapes().Push(1, false, false).ok());
    Tape* tape = *ctx.tapes().Find(1);
    for (const Tensor& t : inputs) {
      if (IsTrainable(t.dtype())) tape->Watch(t);
    }
    Tensors out;
    ASSERT_TRUE(ctx.Execute(*op, inputs, s.attrs, &out).ok()) << s.op;
    ASSERT_TRUE(ctx.tapes().Pop(1).ok());
    ASSERT_EQ(tape->num_entries(), 1u) << s.op;
    const TapeEntry entry = *tape->FindEntry(0);
    std::optional<Tensors> baseline = RunBackward(ctx, entry);
    ASSERT_TRUE(baseline.has_value()) << s.op << " (" << s.label << ")";
    auto check = [&](bool is_input, int index) {
      TapeEntry spoiled = entry;
      Tensor& slot =
          is_input ? spoiled.saved_inputs[index] : spoiled.saved_outputs[index];
      slot = Spoiled(slot);
      std::optional<Tensors> grads = RunBackward(ctx, spoiled);
      const bool used = !grads.has_value() || !SameValues(*grads, *baseline);
      bool& any =
          read[absl::StrCat(s.op, is_input ? " input " : " output ", index)];
      any = any || used;
    };
    for (int i : op->saved_inputs) check(true, i);
    for (int j : op->saved_outputs) check(false, j);
  }
  for (const auto& [what, used] : read) {
    EXPECT_TRUE(used || AllowedWaste().contains(what))
        << what << " is declared saved but no sample's backward needs it: "
        << "drop it from the declaration, or add it to AllowedWaste with the "
        << "reason";
  }
}

}  // namespace
}  // namespace gradtape
