// Gradient-check samples for the ops of core/ops/variable_ops.cc.
#include "tests/core/op_samples.h"

namespace gradtape::testing {

void AddVariableSamples(SampleList& s) {}

}  // namespace gradtape::testing
