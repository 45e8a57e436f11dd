// Gradient-check samples for the ops of core/ops/norm_ops.cc.
#include "tests/core/op_samples.h"

namespace gradtape::testing {

void AddNormSamples(SampleList& s) {}

}  // namespace gradtape::testing
