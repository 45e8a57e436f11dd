// Samples for the ops of core/ops/variable_ops.cc. Handles cannot be
// perturbed, so the Jacobian check skips them; variable_ops_test.cc checks
// gradients with respect to variables.
#include <memory>

#include "core/variable.h"
#include "tests/core/op_samples.h"

namespace gradtape::testing {
namespace {

Tensor Handle(Tensor value) {
  auto var = std::make_shared<Variable>();
  var->dtype = value.dtype();
  var->shape = value.shape();
  var->name = "sample";
  var->value = std::move(value);
  return Tensor::Resource(std::move(var), 1);
}

}  // namespace

void AddVariableSamples(SampleList& s) {
  s.Add("VarHandleOp", "float64 matrix", {},
        {{"dtype", DType::kFloat64}, {"shape", L({2, 3})}});
  s.Add("ReadVariableOp", "initialized", {Handle(R({2, 3}, 301))});
  s.Add("AssignVariableOp", "same shape",
        {Handle(R({2, 3}, 302)), R({2, 3}, 303)});
  s.Add("AssignAddVariableOp", "same shape",
        {Handle(R({2, 3}, 304)), R({2, 3}, 305)});
  s.Add("AssignSubVariableOp", "same shape",
        {Handle(R({2, 3}, 306)), R({2, 3}, 307)});
}

}  // namespace gradtape::testing
