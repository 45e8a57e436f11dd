// Gradient-check samples for the ops of core/ops/pool_ops.cc.
#include "tests/core/op_samples.h"

namespace gradtape::testing {

void AddPoolSamples(SampleList& s) {}

}  // namespace gradtape::testing
