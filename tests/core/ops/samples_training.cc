// Samples for the ops of core/ops/training_ops.cc. They are not
// differentiable, so a sample only has to run; training_ops_test.cc checks
// the updates against reference values.
#include "tests/core/ops/op_samples.h"

namespace gradtape::testing {
namespace {

Tensor S(double v) { return Tensor::Scalar<double>(v); }

}  // namespace

void AddTrainingSamples(SampleList& s) {
  s.Add("ResourceApplyGradientDescent", "float64 matrix",
        {VariableHandle(R({2, 3}, 401)), S(0.1), R({2, 3}, 402)});
  s.Add("ResourceApplyMomentum", "nesterov",
        {VariableHandle(R({3}, 403)), VariableHandle(R({3}, 404)), S(0.1),
         R({3}, 405), S(0.9)},
        {{"use_nesterov", true}});
  s.Add("ResourceApplyAdam", "float64 vector",
        {VariableHandle(R({3}, 406)), VariableHandle(R({3}, 407)),
         VariableHandle(Positive({3}, 408)), S(0.9), S(0.999), S(0.01), S(0.9),
         S(0.999), S(1e-7), R({3}, 409)});
  s.Add("ResourceApplyAdagrad", "float64 vector",
        {VariableHandle(R({3}, 410)), VariableHandle(Positive({3}, 411)),
         S(0.1), R({3}, 412)});
  s.Add("ResourceApplyRMSProp", "float64 vector",
        {VariableHandle(R({3}, 413)), VariableHandle(Positive({3}, 414)),
         VariableHandle(R({3}, 415)), S(0.01), S(0.9), S(0.5), S(1e-7),
         R({3}, 416)});
}

}  // namespace gradtape::testing
