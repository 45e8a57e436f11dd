// Gradient-check samples for the ops of core/ops/conv_ops.cc.
#include "tests/core/op_samples.h"

namespace gradtape::testing {

void AddConvSamples(SampleList& s) {}

}  // namespace gradtape::testing
