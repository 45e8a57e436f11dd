// Average and max pooling, 2-D and 3-D.
#include "core/gradient.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"

namespace gradtape {

void RegisterPoolOps(OpRegistry& r) {}

}  // namespace gradtape
