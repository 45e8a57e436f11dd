// Segment reductions and gathers.
#include "core/gradient.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"

namespace gradtape {

void RegisterSegmentOps(OpRegistry& r) {}

}  // namespace gradtape
