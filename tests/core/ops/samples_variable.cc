// Samples for the ops of core/ops/variable_ops.cc. Handles cannot be
// perturbed, so the Jacobian check skips them; variable_ops_test.cc checks
// gradients with respect to variables.
#include "tests/core/ops/op_samples.h"

namespace gradtape::testing {

void AddVariableSamples(SampleList& s) {
  s.Add("VarHandleOp", "float64 matrix", {},
        {{"dtype", DType::kFloat64}, {"shape", L({2, 3})}});
  s.Add("ReadVariableOp", "initialized", {VariableHandle(R({2, 3}, 301))});
  s.Add("ReadVariableOp", "initialized, dtype given",
        {VariableHandle(R({2, 3}, 308))}, {{"dtype", DType::kFloat64}});
  s.Add("AssignVariableOp", "same shape",
        {VariableHandle(R({2, 3}, 302)), R({2, 3}, 303)});
  s.Add("AssignAddVariableOp", "same shape",
        {VariableHandle(R({2, 3}, 304)), R({2, 3}, 305)});
  s.Add("AssignSubVariableOp", "same shape",
        {VariableHandle(R({2, 3}, 306)), R({2, 3}, 307)});
  s.Add("ResourceGather", "rows of a matrix, int32, repeated",
        {VariableHandle(R({4, 3}, 309)),
         Tensor::FromVector<int32_t>({3}, {2, 0, 2})});
  s.Add("ResourceGather", "2-D int64 indices into a 3-D variable",
        {VariableHandle(R({3, 2, 2}, 310)),
         Tensor::FromVector<int64_t>({2, 2}, {1, 0, 2, 1})},
        {{"dtype", DType::kFloat64}});
}

}  // namespace gradtape::testing
