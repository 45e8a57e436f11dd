// Batch normalization.
#include "core/gradient.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"

namespace gradtape {

void RegisterNormOps(OpRegistry& r) {}

}  // namespace gradtape
