// Gradient-check samples for the ops of core/ops/linalg_ops.cc.
#include "tests/core/op_samples.h"

namespace gradtape::testing {

void AddLinalgSamples(SampleList& s) {}

}  // namespace gradtape::testing
