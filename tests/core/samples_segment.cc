// Gradient-check samples for the ops of core/ops/segment_ops.cc.
#include "tests/core/op_samples.h"

namespace gradtape::testing {

void AddSegmentSamples(SampleList& s) {}

}  // namespace gradtape::testing
