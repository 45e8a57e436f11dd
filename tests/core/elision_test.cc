// Elision: the tape keeps exactly what each op declares, and a backward that
// reads anything else fails instead of silently keeping it.
#include "absl/strings/match.h"
#include "core/context.h"
#include "core/gradient.h"
#include "core/op_registry.h"
#include "core/ops/ops.h"
#include "gtest/gtest.h"
#include "tests/core/op_samples.h"

namespace gradtape {
namespace {

using testing::AllOpSamples;
using testing::OpSample;

class Elision : public ::testing::TestWithParam<OpSample> {};

TEST_P(Elision, TapeEntryHoldsExactlyTheDeclaredTensors) {
  const OpSample& s = GetParam();
  const OpDef* op = DefaultRegistry().Find(s.op);
  ASSERT_NE(op, nullptr);
  if (!op->differentiable()) GTEST_SKIP() << s.op << " is not recorded";
  Context ctx(DefaultRegistry());
  std::vector<Tensor> inputs;
  for (const Tensor& t : s.inputs) inputs.push_back(ctx.Adopt(t));
  ASSERT_TRUE(ctx.tapes().Push(1, false, false).ok());
  Tape* tape = *ctx.tapes().Find(1);
  for (const Tensor& t : inputs) {
    if (IsTrainable(t.dtype())) tape->Watch(t);
  }
  Tensors out;
  ASSERT_TRUE(ctx.Execute(*op, inputs, s.attrs, &out).ok());
  ASSERT_EQ(tape->op_tape().size(), 1u);
  const TapeEntry& e = tape->op_tape().begin()->second;
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
  Context ctx(registry);
  Tensor x = ctx.Adopt(Tensor::FromVector<double>({2}, {0.5, 1.5}));
  ASSERT_TRUE(ctx.tapes().Push(1, false, false).ok());
  (*ctx.tapes().Find(1))->Watch(x);
  Tensors y;
  ASSERT_TRUE(ctx.Execute("ExpMissingSave", {x}, {}, &y).ok());
  EXPECT_EQ((*ctx.tapes().Find(1))->SavedBytes(), 0);
  auto grads =
      ctx.Gradient(**ctx.tapes().Find(1), {y[0]}, {x}, {}, Unconnected::kNone);
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
