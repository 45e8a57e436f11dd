// The output dtype rules of the registry (DTypeRule, served by ListOps)
// against what the kernels produce: for every op sample, each rule applied
// to the sample's input dtypes and attrs gives exactly its output's dtype.
#include <vector>

#include "core/autodiff/op_executor.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "gtest/gtest.h"
#include "tests/core/ops/op_samples.h"

namespace gradtape {
namespace testing {
namespace {

TEST(OutputDTypes, RulesGiveEverySampleOutputsDType) {
  for (const OpSample& s : AllOpSamples()) {
    SCOPED_TRACE(s.op + " (" + s.label + ")");
    const std::shared_ptr<const OpDef> op_def = testing::SampleOpDef(s);
    const OpDef* op = op_def.get();
    ASSERT_NE(op, nullptr);
    ASSERT_EQ(static_cast<int>(op->output_dtypes.size()), op->num_outputs());
    // Ops without outputs (assignments, optimizers) update variables in
    // place: nothing to check, and the samples' variables stay as they are.
    if (op->num_outputs() == 0) continue;
    OpExecutor ctx(DefaultRegistry());
    Tensors outputs;
    ASSERT_TRUE(ctx.Execute(*op, s.inputs, s.attrs, &outputs).ok());
    AttrMap attrs = s.attrs;
    ASSERT_TRUE(op->ResolveAttrs(&attrs).ok());
    std::vector<DType> input_dtypes;
    for (const Tensor& t : s.inputs) input_dtypes.push_back(t.dtype());
    for (int i = 0; i < op->num_outputs(); ++i) {
      const DTypeRule& rule = op->output_dtypes[i];
      const DType want = rule.Apply(input_dtypes, attrs);
      if (want == DType::kInvalid && rule.kind == DTypeRule::Kind::kFromAttr &&
          attrs.Type(rule.attr) == DType::kInvalid) {
        continue;  // left open by the caller (ReadVariableOp without dtype)
      }
      EXPECT_EQ(DTypeName(want), DTypeName(outputs[i].dtype()))
          << "output " << i << " (" << op->output_names[i] << "), rule "
          << rule.DebugString();
    }
  }
}

TEST(OutputDTypes, ApplyMapsRealAndComplexDTypes) {
  const AttrMap none;
  const std::vector<DType> c64{DType::kComplex64};
  const std::vector<DType> f64{DType::kFloat64};
  EXPECT_EQ(DTypeRule::RealOfInput(0).Apply(c64, none), DType::kFloat32);
  EXPECT_EQ(DTypeRule::RealOfInput(0).Apply(f64, none), DType::kFloat64);
  EXPECT_EQ(DTypeRule::ComplexOfInput(0).Apply(f64, none), DType::kComplex128);
  EXPECT_EQ(DTypeRule::ComplexOfInput(0).Apply({DType::kInt32}, none),
            DType::kInvalid);
  EXPECT_EQ(DTypeRule::SameAsInput(1).Apply(f64, none), DType::kInvalid);
  EXPECT_EQ(DTypeRule::FromAttr("DstT").Apply({}, {{"DstT", DType::kInt64}}),
            DType::kInt64);
  EXPECT_EQ(DTypeRule::FromAttr("DstT").Apply({}, none), DType::kInvalid);
}

TEST(OutputDTypes, NonDefaultRulesAreDeclaredWhereExpected) {
  auto rule = [](const char* op) {
    return DefaultRegistry().Find(op)->output_dtypes.at(0).DebugString();
  };
  EXPECT_EQ(rule("Exp"), "same as input 0");
  EXPECT_EQ(rule("Less"), "bool");
  EXPECT_EQ(rule("Select"), "same as input 1");
  EXPECT_EQ(rule("Cast"), "attr DstT");
  EXPECT_EQ(rule("Shape"), "attr out_type");
  EXPECT_EQ(rule("Real"), "real of input 0");
  EXPECT_EQ(rule("Complex"), "complex of input 0");
  EXPECT_EQ(rule("VarHandleOp"), "resource");
  EXPECT_EQ(rule("ReadVariableOp"), "attr dtype");
}

}  // namespace
}  // namespace testing
}  // namespace gradtape
