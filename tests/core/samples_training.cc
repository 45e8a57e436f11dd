// Samples for the ops of core/ops/training_ops.cc. They are not
// differentiable, so a sample only has to run; training_ops_test.cc checks
// the updates against reference values.
#include <memory>

#include "core/variable.h"
#include "tests/core/op_samples.h"

namespace gradtape::testing {
namespace {

// A float64 variable holding `value` (fresh for every sample).
Tensor Var(Tensor value) {
  auto var = std::make_shared<Variable>();
  var->dtype = value.dtype();
  var->shape = value.shape();
  var->name = "sample";
  var->value = std::move(value);
  return Tensor::Resource(std::move(var), 1);
}

Tensor S(double v) { return Tensor::Scalar<double>(v); }

}  // namespace

void AddTrainingSamples(SampleList& s) {
  s.Add("ResourceApplyGradientDescent", "float64 matrix",
        {Var(R({2, 3}, 401)), S(0.1), R({2, 3}, 402)});
  s.Add("ResourceApplyMomentum", "nesterov",
        {Var(R({3}, 403)), Var(R({3}, 404)), S(0.1), R({3}, 405), S(0.9)},
        {{"use_nesterov", true}});
  s.Add("ResourceApplyAdam", "float64 vector",
        {Var(R({3}, 406)), Var(R({3}, 407)), Var(Positive({3}, 408)), S(0.9),
         S(0.999), S(0.01), S(0.9), S(0.999), S(1e-7), R({3}, 409)});
  s.Add("ResourceApplyAdagrad", "float64 vector",
        {Var(R({3}, 410)), Var(Positive({3}, 411)), S(0.1), R({3}, 412)});
  s.Add("ResourceApplyRMSProp", "float64 vector",
        {Var(R({3}, 413)), Var(Positive({3}, 414)), Var(R({3}, 415)), S(0.01),
         S(0.9), S(0.5), S(1e-7), R({3}, 416)});
}

}  // namespace gradtape::testing
