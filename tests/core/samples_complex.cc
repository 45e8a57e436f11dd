// Gradient-check samples for the ops of core/ops/complex_ops.cc.
#include "tests/core/op_samples.h"

namespace gradtape::testing {

void AddComplexSamples(SampleList& s) {}

}  // namespace gradtape::testing
