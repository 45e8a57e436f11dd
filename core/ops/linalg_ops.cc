// Batched and sparse matrix products, cross product.
#include "core/gradient.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"

namespace gradtape {

void RegisterLinalgOps(OpRegistry& r) {}

}  // namespace gradtape
